//! Evaluation of `!!js` config expressions.
//!
//! Upstream evaluates these as JavaScript. We support the subset composition files use:
//! string/number/boolean/null/undefined literals, `process.env.NAME` (and
//! `process.env['NAME']`), `process.cwd()`, `process.platform`, `dshHomePath('a', …)`,
//! `ctx.<path>`, parentheses, `!`, `===`/`!==`/`==`/`!=`, `&&`, `||`, `??` and `? :`.
//! Anything else is an error naming the expression.

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::Value;

/// What expressions can read.
#[derive(Clone, Debug, Default)]
pub struct EvalEnv {
    pub env: HashMap<String, String>,
    pub cwd: String,
    pub platform: String,
    pub home: PathBuf,
    /// `ctx.<name>` values (services exposed to config).
    pub ctx: serde_json::Map<String, Value>,
}

impl EvalEnv {
    /// The current process environment.
    pub fn from_process(home: PathBuf) -> Self {
        Self {
            env: std::env::vars().collect(),
            cwd: std::env::current_dir()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            platform: match std::env::consts::OS {
                "macos" => "darwin".into(),
                "windows" => "win32".into(),
                other => other.into(),
            },
            home,
            ctx: Default::default(),
        }
    }
}

/// A value during evaluation: JavaScript's `undefined` or a JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum JsValue {
    Undefined,
    Json(Value),
}

impl JsValue {
    fn truthy(&self) -> bool {
        match self {
            JsValue::Undefined | JsValue::Json(Value::Null) => false,
            JsValue::Json(Value::Bool(b)) => *b,
            JsValue::Json(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
            JsValue::Json(Value::String(s)) => !s.is_empty(),
            JsValue::Json(_) => true,
        }
    }

    fn nullish(&self) -> bool {
        matches!(self, JsValue::Undefined | JsValue::Json(Value::Null))
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Str(String),
    Num(f64),
    Ident(String),
    Punct(&'static str),
}

fn tokenize(src: &str) -> Result<Vec<Tok>, String> {
    const PUNCT: [&str; 16] = [
        "===", "!==", "==", "!=", "&&", "||", "??", "?", ":", "!", "(", ")", ".", ",", "[", "+",
    ];
    let chars: Vec<char> = src.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '\'' || c == '"' {
            let mut s = String::new();
            i += 1;
            loop {
                let Some(&ch) = chars.get(i) else {
                    return Err("unterminated string literal".into());
                };
                i += 1;
                if ch == c {
                    break;
                }
                if ch == '\\' {
                    let Some(&esc) = chars.get(i) else {
                        return Err("unterminated string literal".into());
                    };
                    i += 1;
                    s.push(match esc {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        other => other,
                    });
                } else {
                    s.push(ch);
                }
            }
            out.push(Tok::Str(s));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            out.push(Tok::Num(
                text.parse().map_err(|_| format!("bad number {text}"))?,
            ));
        } else if c.is_alphabetic() || c == '_' || c == '$' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$')
            {
                i += 1;
            }
            out.push(Tok::Ident(chars[start..i].iter().collect()));
        } else if c == ']' {
            out.push(Tok::Punct("]"));
            i += 1;
        } else {
            let rest: String = chars[i..chars.len().min(i + 3)].iter().collect();
            let Some(p) = PUNCT.iter().find(|p| rest.starts_with(**p)) else {
                return Err(format!("unsupported character '{c}'"));
            };
            out.push(Tok::Punct(p));
            i += p.chars().count();
        }
    }
    Ok(out)
}

/// Deepest nesting of parentheses, conditionals and `!` an expression may have.
const MAX_DEPTH: usize = 64;

struct Eval<'a> {
    toks: Vec<Tok>,
    pos: usize,
    env: &'a EvalEnv,
    depth: usize,
}

impl Eval<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Punct(q)) if *q == p) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, p: &str) -> Result<(), String> {
        if self.eat(p) {
            Ok(())
        } else {
            Err(format!("expected '{p}'"))
        }
    }

    /// Runs `f` one nesting level deeper (bounded, so hostile input cannot exhaust the
    /// stack).
    fn nested(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<JsValue, String>,
    ) -> Result<JsValue, String> {
        if self.depth >= MAX_DEPTH {
            return Err(format!("expression nests deeper than {MAX_DEPTH} levels"));
        }
        self.depth += 1;
        let v = f(self);
        self.depth -= 1;
        v
    }

    fn expr(&mut self) -> Result<JsValue, String> {
        self.nested(Self::conditional)
    }

    fn conditional(&mut self) -> Result<JsValue, String> {
        let cond = self.nullish()?;
        if self.eat("?") {
            let a = self.expr()?;
            self.expect(":")?;
            let b = self.expr()?;
            return Ok(if cond.truthy() { a } else { b });
        }
        Ok(cond)
    }

    fn nullish(&mut self) -> Result<JsValue, String> {
        let mut v = self.or()?;
        while self.eat("??") {
            let rhs = self.or()?;
            if v.nullish() {
                v = rhs;
            }
        }
        Ok(v)
    }

    fn or(&mut self) -> Result<JsValue, String> {
        let mut v = self.and()?;
        while self.eat("||") {
            let rhs = self.and()?;
            if !v.truthy() {
                v = rhs;
            }
        }
        Ok(v)
    }

    fn and(&mut self) -> Result<JsValue, String> {
        let mut v = self.equality()?;
        while self.eat("&&") {
            let rhs = self.equality()?;
            if v.truthy() {
                v = rhs;
            }
        }
        Ok(v)
    }

    fn equality(&mut self) -> Result<JsValue, String> {
        let mut v = self.additive()?;
        loop {
            let negate = if self.eat("===") || self.eat("==") {
                false
            } else if self.eat("!==") || self.eat("!=") {
                true
            } else {
                return Ok(v);
            };
            let rhs = self.additive()?;
            v = JsValue::Json(Value::Bool((v == rhs) != negate));
        }
    }

    /// `+`: string concatenation (when either side is a string) or numeric addition.
    fn additive(&mut self) -> Result<JsValue, String> {
        let mut v = self.unary()?;
        while self.eat("+") {
            let rhs = self.unary()?;
            let text = |x: &JsValue| match x {
                JsValue::Undefined => "undefined".to_string(),
                JsValue::Json(Value::String(s)) => s.clone(),
                JsValue::Json(other) => other.to_string(),
            };
            v = match (&v, &rhs) {
                (JsValue::Json(Value::Number(a)), JsValue::Json(Value::Number(b))) => {
                    let sum = a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0);
                    JsValue::Json(
                        serde_json::Number::from_f64(sum)
                            .map(Value::Number)
                            .unwrap_or(Value::Null),
                    )
                }
                _ => JsValue::Json(Value::String(text(&v) + &text(&rhs))),
            };
        }
        Ok(v)
    }

    fn unary(&mut self) -> Result<JsValue, String> {
        if self.eat("!") {
            let v = self.nested(Self::unary)?;
            return Ok(JsValue::Json(Value::Bool(!v.truthy())));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<JsValue, String> {
        let tok = self
            .toks
            .get(self.pos)
            .cloned()
            .ok_or("unexpected end of expression")?;
        self.pos += 1;
        match tok {
            Tok::Str(s) => Ok(JsValue::Json(Value::String(s))),
            Tok::Num(n) if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 => {
                Ok(JsValue::Json(Value::from(n as i64)))
            }
            Tok::Num(n) => Ok(JsValue::Json(
                serde_json::Number::from_f64(n)
                    .map(Value::Number)
                    .unwrap_or(Value::Null),
            )),
            Tok::Punct("(") => {
                let v = self.expr()?;
                self.expect(")")?;
                Ok(v)
            }
            Tok::Ident(name) => self.path(name),
            Tok::Punct(p) => Err(format!("unexpected '{p}'")),
        }
    }

    fn member(&mut self) -> Result<Option<String>, String> {
        if self.eat(".") {
            match self.toks.get(self.pos).cloned() {
                Some(Tok::Ident(n)) => {
                    self.pos += 1;
                    Ok(Some(n))
                }
                _ => Err("expected a property name after '.'".into()),
            }
        } else if self.eat("[") {
            let key = match self.toks.get(self.pos).cloned() {
                Some(Tok::Str(s)) => s,
                _ => return Err("only string keys are supported in [ ]".into()),
            };
            self.pos += 1;
            self.expect("]")?;
            Ok(Some(key))
        } else {
            Ok(None)
        }
    }

    fn args(&mut self) -> Result<Vec<JsValue>, String> {
        let mut args = Vec::new();
        if self.eat(")") {
            return Ok(args);
        }
        loop {
            args.push(self.expr()?);
            if self.eat(")") {
                return Ok(args);
            }
            self.expect(",")?;
        }
    }

    fn path(&mut self, head: String) -> Result<JsValue, String> {
        match head.as_str() {
            "undefined" => return Ok(JsValue::Undefined),
            "null" => return Ok(JsValue::Json(Value::Null)),
            "true" => return Ok(JsValue::Json(Value::Bool(true))),
            "false" => return Ok(JsValue::Json(Value::Bool(false))),
            "dshHomePath" => {
                self.expect("(")?;
                let mut p = self.env.home.clone();
                for a in self.args()? {
                    match a {
                        JsValue::Json(Value::String(s)) => p.push(s),
                        _ => return Err("dshHomePath takes string segments".into()),
                    }
                }
                return Ok(JsValue::Json(Value::String(p.display().to_string())));
            }
            "process" => {
                let member = self.member()?.ok_or("expected process.<member>")?;
                return match member.as_str() {
                    "env" => {
                        let name = self.member()?.ok_or("expected process.env.<NAME>")?;
                        Ok(self.env.env.get(&name).map_or(JsValue::Undefined, |v| {
                            JsValue::Json(Value::String(v.clone()))
                        }))
                    }
                    "cwd" => {
                        self.expect("(")?;
                        self.args()?;
                        Ok(JsValue::Json(Value::String(self.env.cwd.clone())))
                    }
                    "platform" => Ok(JsValue::Json(Value::String(self.env.platform.clone()))),
                    other => Err(format!("process.{other} is not supported")),
                };
            }
            "ctx" => {
                let mut current = JsValue::Json(Value::Object(self.env.ctx.clone()));
                while let Some(key) = self.member()? {
                    current = match current {
                        JsValue::Json(Value::Object(m)) => m
                            .get(&key)
                            .cloned()
                            .map_or(JsValue::Undefined, JsValue::Json),
                        _ => return Err(format!("cannot read property \"{key}\" of undefined")),
                    };
                }
                return Ok(current);
            }
            _ => {}
        }
        Err(format!("unknown identifier \"{head}\""))
    }
}

/// Evaluates one expression.
pub fn evaluate(src: &str, env: &EvalEnv) -> Result<JsValue, String> {
    let toks = tokenize(src)?;
    let mut e = Eval {
        toks,
        pos: 0,
        env,
        depth: 0,
    };
    let v = e.expr()?;
    if e.pos != e.toks.len() {
        return Err("unexpected trailing input".into());
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn env() -> EvalEnv {
        EvalEnv {
            env: [(
                "DSH_PERMISSION_MODE".to_string(),
                "danger-full-access".to_string(),
            )]
            .into(),
            cwd: "/work".into(),
            platform: "linux".into(),
            home: "/home/u/.dsh".into(),
            ctx: serde_json::json!({"headlessStartup": {"task": "fix it"}})
                .as_object()
                .unwrap()
                .clone(),
        }
    }

    fn s(v: &str) -> JsValue {
        JsValue::Json(Value::String(v.into()))
    }

    #[test]
    fn the_expressions_bundles_use() {
        let e = env();
        assert_eq!(
            evaluate("dshHomePath('sessions')", &e),
            Ok(s("/home/u/.dsh/sessions"))
        );
        assert_eq!(
            evaluate("process.env.DSH_TELEMETRY_MODE || 'DISABLED'", &e),
            Ok(s("DISABLED"))
        );
        assert_eq!(
            evaluate("process.env.DSH_PERMISSION_MODE ?? 'workspace-write'", &e),
            Ok(s("danger-full-access"))
        );
        assert_eq!(evaluate("process.cwd()", &e), Ok(s("/work")));
        assert_eq!(
            evaluate("process.platform === 'win32'", &e),
            Ok(JsValue::Json(Value::Bool(false)))
        );
        assert_eq!(
            evaluate("process.platform !== 'win32'", &e),
            Ok(JsValue::Json(Value::Bool(true)))
        );
        assert_eq!(
            evaluate(
                "(process.env.DSH_PERMISSION_MODE ?? 'workspace-write') === 'danger-full-access' ? 'never' : 'ask'",
                &e
            ),
            Ok(s("never"))
        );
        assert_eq!(
            evaluate("process.env.DSH_TOOLS_MODE", &e),
            Ok(JsValue::Undefined)
        );
        assert_eq!(evaluate("ctx.headlessStartup.task", &e), Ok(s("fix it")));
        assert_eq!(
            evaluate("process.env['DSH_PERMISSION_MODE']", &e),
            Ok(s("danger-full-access"))
        );
        assert_eq!(evaluate("process.cwd() + '/.dsh'", &e), Ok(s("/work/.dsh")));
    }

    #[test]
    fn unsupported_javascript_is_an_error() {
        assert!(evaluate("require('fs')", &env()).is_err());
        assert!(evaluate("1 +", &env()).is_err());
        assert!(evaluate("'open", &env()).is_err());
    }
}

#[cfg(test)]
mod bounds {
    use super::*;

    #[test]
    fn hostile_nesting_is_an_error_not_a_stack_overflow() {
        let env = EvalEnv::from_process(PathBuf::from("/h"));
        let deep = format!("{}1{}", "(".repeat(5000), ")".repeat(5000));
        assert_eq!(
            evaluate(&deep, &env),
            Err("expression nests deeper than 64 levels".to_string())
        );
        let nots = format!("{}true", "!".repeat(100_000));
        assert!(evaluate(&nots, &env).unwrap_err().contains("deeper than"));
        let ok = format!("{}1{}", "(".repeat(30), ")".repeat(30));
        assert_eq!(evaluate(&ok, &env), Ok(JsValue::Json(Value::from(1))));
    }
}
