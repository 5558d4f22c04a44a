//! TypeScript type stripping: a `run_code` program may carry type annotations, which are
//! blanked out (replaced by spaces, line breaks kept) before QuickJS compiles it, so every
//! line and column an engine error reports still points at what the model wrote.
//!
//! The stripper lexes the program (strings, template literals with nested `${}`, comments
//! and regular-expression literals are never touched) and walks the tokens with a stack of
//! bracket contexts (block, class body, object literal, parameter list, expression) that
//! tells a type annotation's `:` from a ternary, an object key, a label or a `case`.
//! Only erasable syntax is removed; constructs that would need code generation (`enum`,
//! `namespace`, constructor parameter properties) are refused with an error naming them.
//! A program without TypeScript syntax comes back byte-identical.

use std::fmt;

/// A TypeScript construct the stripper cannot erase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripError {
    /// The construct, e.g. "enum".
    pub construct: &'static str,
    /// 1-based line of the program.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    hint: &'static str,
}

impl fmt::Display for StripError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TypeScript {} (line {}, column {}) is not supported: run_code only erases type \
syntax and cannot generate code for it; {}",
            self.construct, self.line, self.column, self.hint
        )
    }
}

impl std::error::Error for StripError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ident,
    Num,
    Str,
    /// A template literal without substitutions.
    Template,
    /// `` `...${ ``
    TplStart,
    /// `}...${`
    TplMid,
    /// `` }...` ``
    TplEnd,
    Regex,
    Punct,
    /// A postfix non-null assertion `!`.
    NonNull,
}

#[derive(Clone, Copy, Debug)]
struct Tok {
    kind: Kind,
    start: usize,
    end: usize,
    /// A line break separates this token from the previous one.
    nl: bool,
    /// No whitespace or comment separates this token from the previous one.
    adjacent: bool,
}

const REGEX_KEYWORDS: &[&str] = &[
    "return",
    "typeof",
    "instanceof",
    "in",
    "of",
    "new",
    "delete",
    "void",
    "throw",
    "case",
    "do",
    "else",
    "yield",
    "await",
    "extends",
];

/// Reserved words that never end an expression (and never name a type).
const RESERVED: &[&str] = &[
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "export",
    "extends",
    "finally",
    "for",
    "function",
    "if",
    "import",
    "in",
    "instanceof",
    "new",
    "return",
    "switch",
    "throw",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
    "let",
    "await",
    "enum",
];

const PUNCTS: &[&str] = &[
    ">>>=", "...", "===", "!==", "**=", "<<=", "&&=", "||=", "??=", "=>", "==", "!=", "+=", "-=",
    "*=", "/=", "%=", "&=", "|=", "^=", "&&", "||", "??", "?.", "++", "--", "**",
];

fn is_id_start(c: char) -> bool {
    c == '_'
        || c == '$'
        || c == '#'
        || c.is_ascii_alphabetic()
        || (!c.is_ascii() && c.is_alphanumeric())
}

fn is_id_part(c: char) -> bool {
    c == '_'
        || c == '$'
        || c.is_ascii_alphanumeric()
        || c == '\u{200c}'
        || c == '\u{200d}'
        || (!c.is_ascii() && c.is_alphanumeric())
}

fn is_line_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    toks: Vec<Tok>,
    /// For each open `(`: whether it heads a statement (`if (`…), whose `)` ends no expression.
    parens: Vec<bool>,
    /// For each open `{` or template substitution: whether it is a substitution.
    braces: Vec<bool>,
    /// Indices of `)` tokens that close a statement head.
    header_close: Vec<usize>,
}

impl<'a> Lexer<'a> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.src[self.pos..].chars().nth(n)
    }

    fn text(&self, t: &Tok) -> &'a str {
        &self.src[t.start..t.end]
    }

    /// Whether the last token ends an expression (so a `/` divides).
    fn expr_end(&self) -> bool {
        let Some(last) = self.toks.last() else {
            return false;
        };
        match last.kind {
            Kind::Num | Kind::Str | Kind::Template | Kind::TplEnd | Kind::Regex | Kind::NonNull => {
                true
            }
            Kind::Ident => {
                let after_dot = self.toks.len() >= 2 && {
                    let p = &self.toks[self.toks.len() - 2];
                    p.kind == Kind::Punct && matches!(self.text(p), "." | "?.")
                };
                after_dot || !REGEX_KEYWORDS.contains(&self.text(last))
            }
            Kind::Punct => match self.text(last) {
                ")" => self.header_close.last() != Some(&(self.toks.len() - 1)),
                "]" | "++" | "--" => true,
                _ => false,
            },
            Kind::TplStart | Kind::TplMid => false,
        }
    }

    fn push(&mut self, kind: Kind, start: usize, nl: bool, adjacent: bool) {
        self.toks.push(Tok {
            kind,
            start,
            end: self.pos,
            nl,
            adjacent,
        });
    }

    /// Lexes a template body from after `` ` `` or `}`; returns whether it ended at `${`.
    fn template_body(&mut self) -> Result<bool, usize> {
        let start = self.pos;
        while let Some(c) = self.peek() {
            self.pos += c.len_utf8();
            match c {
                '\\' => {
                    if let Some(n) = self.peek() {
                        self.pos += n.len_utf8();
                    }
                }
                '`' => return Ok(false),
                '$' if self.peek() == Some('{') => {
                    self.pos += 1;
                    return Ok(true);
                }
                _ => {}
            }
        }
        Err(start)
    }

    fn run(mut self) -> Result<(Vec<Tok>, Vec<usize>), usize> {
        let mut nl = false;
        let mut adjacent = true;
        while let Some(c) = self.peek() {
            let start = self.pos;
            if is_line_break(c) {
                nl = true;
                adjacent = false;
                self.pos += c.len_utf8();
                continue;
            }
            if c.is_whitespace() || c == '\u{feff}' {
                adjacent = false;
                self.pos += c.len_utf8();
                continue;
            }
            if c == '/' && self.peek_at(1) == Some('/') {
                while let Some(c) = self.peek() {
                    if is_line_break(c) {
                        break;
                    }
                    self.pos += c.len_utf8();
                }
                adjacent = false;
                continue;
            }
            if c == '/' && self.peek_at(1) == Some('*') {
                self.pos += 2;
                loop {
                    match self.peek() {
                        None => return Err(start),
                        Some('*') if self.peek_at(1) == Some('/') => {
                            self.pos += 2;
                            break;
                        }
                        Some(c) => {
                            if is_line_break(c) {
                                nl = true;
                            }
                            self.pos += c.len_utf8();
                        }
                    }
                }
                adjacent = false;
                continue;
            }
            if is_id_start(c) || c == '\\' {
                self.pos += c.len_utf8();
                while let Some(c) = self.peek() {
                    if is_id_part(c) {
                        self.pos += c.len_utf8();
                    } else if c == '\\' {
                        // \uXXXX escapes in identifiers.
                        self.pos += 1;
                        if let Some(n) = self.peek() {
                            self.pos += n.len_utf8();
                        }
                    } else {
                        break;
                    }
                }
                self.push(Kind::Ident, start, nl, adjacent);
            } else if c.is_ascii_digit()
                || (c == '.' && self.peek_at(1).is_some_and(|d| d.is_ascii_digit()))
            {
                self.pos += 1;
                while let Some(c) = self.peek() {
                    let exponent_sign = (c == '+' || c == '-')
                        && matches!(self.src.as_bytes()[self.pos - 1], b'e' | b'E')
                        && !self.src[start..].starts_with("0x")
                        && !self.src[start..].starts_with("0X");
                    if c.is_ascii_alphanumeric() || c == '_' || c == '.' || exponent_sign {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                self.push(Kind::Num, start, nl, adjacent);
            } else if c == '"' || c == '\'' {
                self.pos += 1;
                loop {
                    match self.peek() {
                        None => return Err(start),
                        Some('\\') => {
                            self.pos += 1;
                            if let Some(n) = self.peek() {
                                self.pos += n.len_utf8();
                            }
                        }
                        Some(q) if q == c => {
                            self.pos += 1;
                            break;
                        }
                        Some(n) if n == '\n' || n == '\r' => return Err(start),
                        Some(n) => self.pos += n.len_utf8(),
                    }
                }
                self.push(Kind::Str, start, nl, adjacent);
            } else if c == '`' {
                self.pos += 1;
                if self.template_body()? {
                    self.braces.push(true);
                    self.push(Kind::TplStart, start, nl, adjacent);
                } else {
                    self.push(Kind::Template, start, nl, adjacent);
                }
            } else if c == '}' && self.braces.last() == Some(&true) {
                self.braces.pop();
                self.pos += 1;
                if self.template_body()? {
                    self.braces.push(true);
                    self.push(Kind::TplMid, start, nl, adjacent);
                } else {
                    self.push(Kind::TplEnd, start, nl, adjacent);
                }
            } else if c == '/' && !self.expr_end() {
                self.pos += 1;
                let mut class = false;
                loop {
                    match self.peek() {
                        None => return Err(start),
                        Some(n) if is_line_break(n) => return Err(start),
                        Some('\\') => {
                            self.pos += 1;
                            if let Some(n) = self.peek() {
                                self.pos += n.len_utf8();
                            }
                        }
                        Some('[') => {
                            class = true;
                            self.pos += 1;
                        }
                        Some(']') => {
                            class = false;
                            self.pos += 1;
                        }
                        Some('/') if !class => {
                            self.pos += 1;
                            break;
                        }
                        Some(n) => self.pos += n.len_utf8(),
                    }
                }
                while let Some(f) = self.peek() {
                    if is_id_part(f) {
                        self.pos += f.len_utf8();
                    } else {
                        break;
                    }
                }
                self.push(Kind::Regex, start, nl, adjacent);
            } else {
                let rest = &self.src[self.pos..];
                // `?.` followed by a digit is a ternary and a number.
                let multi = PUNCTS.iter().find(|p| {
                    rest.starts_with(**p)
                        && !(**p == "?."
                            && rest[2..].chars().next().is_some_and(|d| d.is_ascii_digit()))
                });
                let len = multi.map(|p| p.len()).unwrap_or(c.len_utf8());
                let non_null = c == '!' && len == 1 && !nl && self.expr_end();
                let header = c == '('
                    && self.toks.last().is_some_and(|t| {
                        t.kind == Kind::Ident
                            && matches!(self.text(t), "if" | "while" | "for" | "with" | "switch")
                    });
                self.pos += len;
                match c {
                    '(' if len == 1 => self.parens.push(header),
                    ')' if self.parens.pop() == Some(true) => {
                        self.header_close.push(self.toks.len());
                    }
                    '{' => self.braces.push(false),
                    '}' => {
                        self.braces.pop();
                    }
                    _ => {}
                }
                self.push(
                    if non_null { Kind::NonNull } else { Kind::Punct },
                    start,
                    nl,
                    adjacent,
                );
            }
            nl = false;
            adjacent = true;
        }
        Ok((self.toks, self.header_close))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frame {
    /// Statements (the program, a function body, a block).
    Block,
    /// A class body.
    Class,
    /// An object literal or object pattern.
    Object,
    /// A parameter list (also a `catch` binding).
    Params,
    /// An expression in parentheses, brackets or a template substitution.
    Expr,
    /// A `for (…)` head, where declarations may appear.
    ForHead,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decl {
    None,
    ExpectBinding,
    AfterBinding,
    Init,
}

#[derive(Clone, Copy, Debug)]
struct Level {
    frame: Frame,
    ternary: u32,
    decl: Decl,
    /// Class body: inside a field initializer.
    init: bool,
    /// This bracket is a declaration's destructuring pattern.
    pattern: bool,
    /// Params: the token index where a bodiless signature (an overload) would start.
    signature_start: Option<usize>,
}

impl Level {
    fn new(frame: Frame) -> Self {
        Self {
            frame,
            ternary: 0,
            decl: Decl::None,
            init: false,
            pattern: false,
            signature_start: None,
        }
    }
}

/// How the last kept token closed its bracket, when it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Closed {
    None,
    /// `)` of a parameter list or statement head, `}` of a block: a `{` after it opens a block.
    Statement,
    /// `)`, `]` or `}` of an expression.
    Expr,
}

struct Stripper<'a> {
    src: &'a str,
    toks: Vec<Tok>,
    /// Matching bracket of each `(`, `[`, `{`, template start/mid/end.
    matching: Vec<Option<usize>>,
    /// How deep type scanning has recursed.
    depth: std::cell::Cell<usize>,
    header_close: Vec<usize>,
    cuts: Vec<(usize, usize)>,
    stack: Vec<Level>,
    prev: Option<usize>,
    closed: Closed,
    /// A `function` keyword was seen and its `(` has not opened yet.
    function_at: Option<usize>,
    /// A `class` keyword was seen and its body has not opened yet.
    class_head: bool,
    /// Whether the `:` kept last is a label's or a `case`'s.
    label_colon: bool,
}

/// Strips TypeScript type syntax from `source`, keeping every position.
pub fn strip_types(source: &str) -> Result<String, StripError> {
    let lexer = Lexer {
        src: source,
        pos: 0,
        toks: Vec::new(),
        parens: Vec::new(),
        braces: Vec::new(),
        header_close: Vec::new(),
    };
    // A program the lexer cannot read is left to the engine, which reports the error.
    let Ok((toks, header_close)) = lexer.run() else {
        return Ok(source.to_string());
    };
    if !toks.iter().any(|t| {
        t.kind == Kind::NonNull
            || (t.kind == Kind::Punct && matches!(&source[t.start..t.end], ":" | "<" | "?"))
            || (t.kind == Kind::Ident
                && matches!(
                    &source[t.start..t.end],
                    "as" | "satisfies"
                        | "interface"
                        | "type"
                        | "declare"
                        | "enum"
                        | "namespace"
                        | "module"
                        | "abstract"
                        | "implements"
                        | "import"
                        | "private"
                        | "public"
                        | "protected"
                        | "readonly"
                        | "override"
                ))
    }) {
        return Ok(source.to_string());
    }
    let matching = match_brackets(source, &toks);
    let mut s = Stripper {
        src: source,
        toks,
        matching,
        depth: std::cell::Cell::new(0),
        header_close,
        cuts: Vec::new(),
        stack: vec![Level::new(Frame::Block)],
        prev: None,
        closed: Closed::None,
        function_at: None,
        class_head: false,
        label_colon: false,
    };
    s.walk()?;
    Ok(s.apply())
}

fn match_brackets(src: &str, toks: &[Tok]) -> Vec<Option<usize>> {
    let mut matching = vec![None; toks.len()];
    let mut open: Vec<usize> = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        let text = &src[t.start..t.end];
        match (t.kind, text) {
            (Kind::Punct, "(" | "[" | "{") | (Kind::TplStart, _) => open.push(i),
            (Kind::Punct, ")" | "]" | "}") | (Kind::TplEnd, _) => {
                if let Some(o) = open.pop() {
                    matching[o] = Some(i);
                    matching[i] = Some(o);
                }
            }
            (Kind::TplMid, _) => {
                // Forward only: a middle's own entry is its next part.
                if let Some(o) = open.pop() {
                    matching[o] = Some(i);
                }
                open.push(i);
            }
            _ => {}
        }
    }
    matching
}

impl<'a> Stripper<'a> {
    /// The bracket matching the opener at `i`, when it comes later (malformed input may
    /// pair brackets oddly; jumps only ever go forward).
    fn fwd(&self, i: usize) -> Option<usize> {
        self.matching.get(i).copied().flatten().filter(|m| *m > i)
    }

    fn text(&self, i: usize) -> &'a str {
        self.toks
            .get(i)
            .map(|t| &self.src[t.start..t.end])
            .unwrap_or("")
    }

    fn is(&self, i: usize, text: &str) -> bool {
        self.toks
            .get(i)
            .is_some_and(|t| matches!(t.kind, Kind::Punct | Kind::Ident) && self.text(i) == text)
    }

    fn punct(&self, i: usize, text: &str) -> bool {
        self.toks
            .get(i)
            .is_some_and(|t| t.kind == Kind::Punct && self.text(i) == text)
    }

    fn ident(&self, i: usize) -> bool {
        self.toks.get(i).is_some_and(|t| t.kind == Kind::Ident)
    }

    fn nl(&self, i: usize) -> bool {
        self.toks.get(i).is_none_or(|t| t.nl)
    }

    fn level(&mut self) -> &mut Level {
        let last = self.stack.len() - 1;
        &mut self.stack[last]
    }

    fn top(&self) -> Level {
        self.stack[self.stack.len() - 1]
    }

    /// Blanks tokens `from..to` (exclusive).
    fn cut(&mut self, from: usize, to: usize) {
        if to > from {
            self.cuts
                .push((self.toks[from].start, self.toks[to - 1].end));
        }
    }

    fn error(&self, i: usize, construct: &'static str, hint: &'static str) -> StripError {
        let before = &self.src[..self.toks[i].start];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        StripError {
            construct,
            line,
            column,
            hint,
        }
    }

    /// Whether the kept token `i` ends an expression.
    fn expr_end_at(&self, i: Option<usize>) -> bool {
        let Some(i) = i else { return false };
        let t = self.toks[i];
        match t.kind {
            Kind::Num | Kind::Str | Kind::Template | Kind::TplEnd | Kind::Regex | Kind::NonNull => {
                true
            }
            Kind::Ident => {
                let text = self.text(i);
                matches!(text, "this" | "super" | "null" | "true" | "false")
                    || !RESERVED.contains(&text)
                    || (i > 0 && (self.punct(i - 1, ".") || self.punct(i - 1, "?.")))
            }
            Kind::Punct => match self.text(i) {
                ")" => {
                    self.header_close.binary_search(&i).is_err() && self.closed != Closed::Statement
                }
                "]" => true,
                "}" => self.closed == Closed::Expr,
                "++" | "--" => true,
                _ => false,
            },
            Kind::TplStart | Kind::TplMid => false,
        }
    }

    fn prev_text(&self) -> &'a str {
        self.prev.map(|p| self.text(p)).unwrap_or("")
    }

    /// Whether token `i` starts a statement in a block.
    fn statement_start(&self, i: usize) -> bool {
        if self.top().frame != Frame::Block {
            return false;
        }
        let Some(p) = self.prev else { return true };
        let pt = self.text(p);
        if self.toks[p].kind == Kind::Punct && matches!(pt, ";" | "{" | "}") {
            return true;
        }
        if pt == ":" && self.label_colon {
            return true;
        }
        if self.toks[p].kind == Kind::Punct && pt == ")" && self.closed == Closed::Statement {
            return true;
        }
        if self.toks[p].kind == Kind::Ident && matches!(pt, "else" | "do") {
            return true;
        }
        self.nl(i) && self.expr_end_at(self.prev)
    }

    // ---- types -------------------------------------------------------------------------

    /// Skips a balanced `<…>` starting at `i`; returns the index after `>`.
    fn skip_angles(&self, i: usize) -> Option<usize> {
        let mut depth = 0usize;
        let mut j = i;
        while j < self.toks.len() {
            let t = self.toks[j];
            match (t.kind, self.text(j)) {
                (Kind::Punct, "<") => depth += 1,
                (Kind::Punct, ">") => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(j + 1);
                    }
                }
                (Kind::Punct, "(" | "[" | "{") | (Kind::TplStart, _) => {
                    j = self.fwd(j)?;
                    if self.toks[j].kind == Kind::TplMid {
                        // Walk the template to its end.
                        while self.toks[j].kind != Kind::TplEnd {
                            j = self.fwd(j)?;
                        }
                    }
                }
                (
                    Kind::Punct,
                    ")" | "]" | "}" | ";" | "&&" | "||" | "??" | "+" | "*" | "/" | "%" | "=="
                    | "===" | "!=" | "!==" | "++" | "--" | "!" | "+=" | "-=",
                )
                | (Kind::Regex, _) => return None,
                _ => {}
            }
            j += 1;
        }
        None
    }

    /// The end of a template literal type starting at `i`.
    fn skip_template(&self, i: usize) -> Option<usize> {
        let mut j = i;
        while self.toks.get(j)?.kind != Kind::TplEnd {
            j = self.fwd(j)?;
        }
        Some(j + 1)
    }

    /// Type arguments `<T, U>` at `i`, parsed as types; the index after `>`.
    fn type_args(&self, i: usize) -> Option<usize> {
        if !self.punct(i, "<") {
            return None;
        }
        let mut j = i + 1;
        loop {
            j = self.scan_type(j)?;
            if self.punct(j, ",") {
                j += 1;
                continue;
            }
            return self.punct(j, ">").then_some(j + 1);
        }
    }

    /// A type starting at `i`; the index after it.
    fn scan_type(&self, i: usize) -> Option<usize> {
        let j = self.scan_union(i)?;
        if self.is(j, "extends") && self.ident(j) && !self.nl(j) {
            let k = self.scan_union(j + 1)?;
            if !self.punct(k, "?") {
                return None;
            }
            let k = self.scan_type(k + 1)?;
            if !self.punct(k, ":") {
                return None;
            }
            return self.scan_type(k + 1);
        }
        Some(j)
    }

    fn scan_union(&self, i: usize) -> Option<usize> {
        let mut j = i;
        if self.punct(j, "|") || self.punct(j, "&") {
            j += 1;
        }
        j = self.scan_postfix(j)?;
        while self.punct(j, "|") || self.punct(j, "&") {
            j = self.scan_postfix(j + 1)?;
        }
        Some(j)
    }

    fn scan_postfix(&self, i: usize) -> Option<usize> {
        let mut j = self.scan_primary(i)?;
        while self.punct(j, "[") && !self.nl(j) {
            j = self.fwd(j)? + 1;
        }
        Some(j)
    }

    fn scan_primary(&self, i: usize) -> Option<usize> {
        // Every recursion of type scanning passes here. Nesting this deep is no program a
        // model writes; refuse it rather than recurse on.
        if self.depth.get() > 200 {
            return None;
        }
        self.depth.set(self.depth.get() + 1);
        let end = self.scan_primary_inner(i);
        self.depth.set(self.depth.get() - 1);
        end
    }

    fn scan_primary_inner(&self, i: usize) -> Option<usize> {
        let t = *self.toks.get(i)?;
        let text = self.text(i);
        match t.kind {
            Kind::Str | Kind::Num | Kind::Template => Some(i + 1),
            Kind::TplStart => self.skip_template(i),
            Kind::Punct => match text {
                "{" | "[" => Some(self.fwd(i)? + 1),
                "(" => {
                    let m = self.fwd(i)? + 1;
                    if self.punct(m, "=>") {
                        self.scan_type(m + 1)
                    } else {
                        Some(m)
                    }
                }
                "<" => {
                    let m = self.skip_angles(i)?;
                    if !self.punct(m, "(") {
                        return None;
                    }
                    let m = self.fwd(m)? + 1;
                    if !self.punct(m, "=>") {
                        return None;
                    }
                    self.scan_type(m + 1)
                }
                "-" if self.toks.get(i + 1)?.kind == Kind::Num => Some(i + 2),
                _ => None,
            },
            Kind::Ident => match text {
                "keyof" | "readonly" | "unique" | "infer"
                    if self.starts_type(i + 1) && !self.nl(i + 1) =>
                {
                    self.scan_postfix(i + 1)
                }
                "new" => self.scan_primary(i + 1),
                "abstract" if self.is(i + 1, "new") => self.scan_primary(i + 2),
                "asserts" if self.ident(i + 1) && !self.nl(i + 1) => {
                    if self.is(i + 2, "is") {
                        self.scan_type(i + 3)
                    } else {
                        Some(i + 2)
                    }
                }
                "typeof" => {
                    let mut j = i + 1;
                    if !self.ident(j) {
                        return None;
                    }
                    j += 1;
                    while self.punct(j, ".") && self.ident(j + 1) {
                        j += 2;
                    }
                    if self.punct(j, "<") && !self.nl(j) {
                        j = self.type_args(j)?;
                    }
                    Some(j)
                }
                _ if RESERVED.contains(&text) && !matches!(text, "void" | "const") => None,
                _ => {
                    let mut j = i + 1;
                    while self.punct(j, ".") && self.ident(j + 1) {
                        j += 2;
                    }
                    if self.punct(j, "<") && !self.nl(j) {
                        j = self.type_args(j)?;
                    }
                    if self.is(j, "is") && self.ident(j) && !self.nl(j) && self.starts_type(j + 1) {
                        return self.scan_type(j + 1);
                    }
                    Some(j)
                }
            },
            _ => None,
        }
    }

    fn starts_type(&self, i: usize) -> bool {
        self.toks.get(i).is_some_and(|t| match t.kind {
            Kind::Ident => !RESERVED.contains(&self.text(i)) || self.text(i) == "typeof",
            Kind::Str | Kind::Num | Kind::Template | Kind::TplStart => true,
            Kind::Punct => matches!(self.text(i), "{" | "[" | "(" | "<" | "-" | "|" | "&"),
            _ => false,
        })
    }

    /// Cuts an annotation `: T` whose colon is at `i`; returns the index after the type.
    fn cut_annotation(&mut self, i: usize) -> Option<usize> {
        let end = self.scan_type(i + 1)?;
        self.cut(i, end);
        Some(end)
    }

    /// The end of a declaration statement starting at `i` (after its `;` when it has one).
    fn statement_end(&self, i: usize, body_ends: bool) -> usize {
        let mut j = i;
        while j < self.toks.len() {
            if j > i && self.nl(j) && self.expr_end_like(j - 1) && !self.continues(j) {
                return j;
            }
            match (self.toks[j].kind, self.text(j)) {
                (Kind::Punct, ";") => return j + 1,
                (Kind::Punct, "{") => {
                    let Some(m) = self.fwd(j) else {
                        return self.toks.len();
                    };
                    // A body ends the declaration unless a type goes on (`{…} | X`).
                    j = m + 1;
                    if self.punct(j, ";") {
                        return j + 1;
                    }
                    if body_ends
                        && !(self.punct(j, "|") || self.punct(j, "&") || self.punct(j, "["))
                    {
                        return j;
                    }
                    continue;
                }
                (Kind::Punct, "(" | "[") | (Kind::TplStart, _) => {
                    let Some(m) = self.fwd(j) else {
                        return self.toks.len();
                    };
                    j = m;
                    while self.toks[j].kind == Kind::TplMid {
                        match self.fwd(j) {
                            Some(m) => j = m,
                            None => return self.toks.len(),
                        }
                    }
                }
                (Kind::Punct, "}" | ")" | "]") => return j,
                _ => {}
            }
            j += 1;
        }
        j
    }

    /// A token that can end a type or expression line (for declarations without `;`).
    fn expr_end_like(&self, i: usize) -> bool {
        match self.toks[i].kind {
            Kind::Ident => !matches!(self.text(i), "extends" | "keyof" | "typeof" | "is" | "new"),
            Kind::Punct => matches!(self.text(i), ")" | "]" | "}" | ">"),
            _ => true,
        }
    }

    /// Whether token `i` continues a declaration from the line before.
    fn continues(&self, i: usize) -> bool {
        self.toks[i].kind == Kind::Punct
            && matches!(
                self.text(i),
                "|" | "&" | "=" | "=>" | "." | "?" | ":" | "," | "<" | ">" | "[" | "{" | "("
            )
    }

    // ---- the walk ----------------------------------------------------------------------

    fn keep(&mut self, i: usize) {
        self.prev = Some(i);
    }

    fn walk(&mut self) -> Result<(), StripError> {
        let mut i = 0;
        while i < self.toks.len() {
            i = self.step(i)?;
        }
        Ok(())
    }

    /// Handles token `i`; returns the next token to handle.
    fn step(&mut self, i: usize) -> Result<usize, StripError> {
        let t = self.toks[i];
        let text = self.text(i);
        let top = self.top();
        // A class field initializer ends at a line break after a complete expression.
        if top.frame == Frame::Class && top.init && t.nl && self.expr_end_at(self.prev) {
            self.level().init = false;
        }
        let top = self.top();
        let member = top.frame == Frame::Class && !top.init;
        match t.kind {
            Kind::NonNull => {
                self.cut(i, i + 1);
                return Ok(i + 1);
            }
            Kind::Ident => {
                if let Some(next) = self.ident_step(i, text, member)? {
                    return Ok(next);
                }
            }
            Kind::Punct => {
                if let Some(next) = self.punct_step(i, text, member)? {
                    return Ok(next);
                }
            }
            Kind::TplStart => {
                self.stack.push(Level::new(Frame::Expr));
                self.keep(i);
                self.closed = Closed::None;
                return Ok(i + 1);
            }
            Kind::TplMid => {
                self.keep(i);
                self.closed = Closed::None;
                return Ok(i + 1);
            }
            Kind::TplEnd => {
                if self.stack.len() > 1 {
                    self.stack.pop();
                }
                self.keep(i);
                self.closed = Closed::None;
                return Ok(i + 1);
            }
            _ => {}
        }
        // A plain token: it may complete a declaration's binding.
        if t.kind != Kind::Punct {
            match self.top().decl {
                Decl::ExpectBinding if t.kind == Kind::Ident => {
                    self.level().decl = Decl::AfterBinding;
                }
                Decl::AfterBinding => self.level().decl = Decl::None,
                _ => {}
            }
        }
        self.keep(i);
        self.closed = Closed::None;
        self.label_colon = false;
        Ok(i + 1)
    }

    fn ident_step(
        &mut self,
        i: usize,
        text: &str,
        member: bool,
    ) -> Result<Option<usize>, StripError> {
        let prev_dot = self.prev_text() == "." || self.prev_text() == "?.";
        if prev_dot {
            return Ok(None);
        }
        // `x as T`, `x satisfies T`
        if matches!(text, "as" | "satisfies") && !self.nl(i) && self.expr_end_at(self.prev) {
            let end = if self.is(i + 1, "const") {
                Some(i + 2)
            } else {
                self.scan_type(i + 1)
            };
            if let Some(end) = end {
                self.cut(i, end);
                return Ok(Some(end));
            }
        }
        if self.statement_start(i)
            && let Some(next) = self.declaration(i, text)?
        {
            return Ok(Some(next));
        }
        if member && let Some(next) = self.member_modifier(i, text)? {
            return Ok(Some(next));
        }
        let top = self.top();
        if top.frame == Frame::Params
            && matches!(
                text,
                "public" | "private" | "protected" | "readonly" | "override"
            )
            && (self.ident(i + 1) || self.punct(i + 1, "{") || self.punct(i + 1, "["))
            && !self.nl(i + 1)
        {
            return Err(self.error(
                i,
                "parameter properties",
                "declare the field in the class body and assign it in the constructor",
            ));
        }
        match text {
            "function" => self.function_at = Some(i),
            "class" if !self.expr_end_at(self.prev) => self.class_head = true,
            "implements" if self.class_head => {
                // Up to the class body.
                let mut j = i + 1;
                while j < self.toks.len() && !self.punct(j, "{") {
                    j += 1;
                }
                self.cut(i, j);
                return Ok(Some(j));
            }
            "let" | "const" | "var"
                if matches!(top.frame, Frame::Block | Frame::ForHead)
                    && (self.ident(i + 1) || self.punct(i + 1, "{") || self.punct(i + 1, "[")) =>
            {
                self.level().decl = Decl::ExpectBinding;
                self.keep(i);
                self.closed = Closed::None;
                return Ok(Some(i + 1));
            }
            "of" | "in" if top.frame == Frame::ForHead => self.level().decl = Decl::None,
            _ => {}
        }
        // `this` parameter: `function f(this: T, …)`.
        if text == "this"
            && top.frame == Frame::Params
            && self.prev.is_some_and(|p| self.punct(p, "("))
            && self.punct(i + 1, ":")
            && let Some(end) = self.scan_type(i + 2)
        {
            let end = if self.punct(end, ",") { end + 1 } else { end };
            self.cut(i, end);
            return Ok(Some(end));
        }
        Ok(None)
    }

    /// TypeScript-only statements at a statement start.
    fn declaration(&mut self, i: usize, text: &str) -> Result<Option<usize>, StripError> {
        let same_line_ident = |s: &Self, j: usize| s.ident(j) && !s.nl(j);
        match text {
            "interface" if same_line_ident(self, i + 1) => {
                let mut j = i + 2;
                while j < self.toks.len() && !self.punct(j, "{") {
                    j += 1;
                }
                let end = self.fwd(j).map(|m| m + 1);
                if let Some(end) = end {
                    let end = if self.punct(end, ";") { end + 1 } else { end };
                    self.cut(i, end);
                    return Ok(Some(end));
                }
            }
            "type"
                if same_line_ident(self, i + 1)
                    && (self.punct(i + 2, "=") || self.punct(i + 2, "<")) =>
            {
                let mut j = i + 2;
                if self.punct(j, "<") {
                    j = match self.skip_angles(j) {
                        Some(j) => j,
                        None => return Ok(None),
                    };
                }
                if self.punct(j, "=") {
                    let end = self
                        .scan_type(j + 1)
                        .unwrap_or_else(|| self.statement_end(j, true));
                    let end = if self.punct(end, ";") { end + 1 } else { end };
                    self.cut(i, end);
                    return Ok(Some(end));
                }
            }
            "declare" if same_line_ident(self, i + 1) => {
                let end = self.statement_end(i, true);
                self.cut(i, end);
                return Ok(Some(end));
            }
            "import" if self.is(i + 1, "type") && !self.punct(i + 2, "(") => {
                let end = self.statement_end(i, false);
                self.cut(i, end);
                return Ok(Some(end));
            }
            "export"
                if (self.is(i + 1, "type") && !self.punct(i + 2, "="))
                    || self.is(i + 1, "interface") =>
            {
                let end = self.statement_end(i, !self.punct(i + 2, "{"));
                self.cut(i, end);
                return Ok(Some(end));
            }
            "enum" if same_line_ident(self, i + 1) => {
                return Err(self.error(
                    i,
                    "enum",
                    "use a plain object instead, e.g. `const Color = {Red: \"red\"} as const`",
                ));
            }
            "const" if self.is(i + 1, "enum") && same_line_ident(self, i + 2) => {
                return Err(self.error(
                    i,
                    "const enum",
                    "use a plain object instead, e.g. `const Color = {Red: \"red\"} as const`",
                ));
            }
            "namespace" | "module"
                if same_line_ident(self, i + 1)
                    && (self.punct(i + 2, "{") || self.punct(i + 2, ".")) =>
            {
                return Err(self.error(
                    i,
                    "namespace",
                    "use a plain object or top-level functions instead",
                ));
            }
            "abstract" if self.is(i + 1, "class") && !self.nl(i + 1) => {
                self.cut(i, i + 1);
                return Ok(Some(i + 1));
            }
            _ => {}
        }
        Ok(None)
    }

    /// Access modifiers and other type-only words at the start of a class member.
    fn member_modifier(&mut self, i: usize, text: &str) -> Result<Option<usize>, StripError> {
        let at_start = match self.prev {
            None => true,
            Some(p) => {
                let pt = self.text(p);
                (self.toks[p].kind == Kind::Punct && matches!(pt, "{" | "}" | ";"))
                    || (self.toks[p].kind == Kind::Ident
                        && matches!(
                            pt,
                            "static" | "public" | "private" | "protected" | "readonly" | "override"
                        ))
                    || self.nl(i)
            }
        };
        if !at_start {
            return Ok(None);
        }
        let next_is_name = !self.nl(i + 1)
            && self.toks.get(i + 1).is_some_and(|t| {
                matches!(t.kind, Kind::Ident | Kind::Str | Kind::Num)
                    || (t.kind == Kind::Punct && matches!(self.text(i + 1), "[" | "*"))
            });
        if !next_is_name {
            return Ok(None);
        }
        match text {
            "public" | "private" | "protected" | "readonly" | "override" | "accessor" => {
                self.cut(i, i + 1);
                Ok(Some(i + 1))
            }
            "declare" | "abstract" => {
                // A member with no runtime part: up to its end.
                let mut j = i + 1;
                while j < self.toks.len() {
                    if self.punct(j, ";") {
                        j += 1;
                        break;
                    }
                    if self.punct(j, "}")
                        || (self.nl(j)
                            && j > i + 1
                            && !self.continues(j)
                            && self.expr_end_like(j - 1))
                    {
                        break;
                    }
                    if let Some(m) = self
                        .fwd(j)
                        .filter(|_| self.punct(j, "(") || self.punct(j, "[") || self.punct(j, "{"))
                    {
                        j = m;
                    }
                    j += 1;
                }
                self.cut(i, j);
                Ok(Some(j))
            }
            _ => Ok(None),
        }
    }

    /// Whether the `(` at `i` in an object literal follows a method name.
    fn object_method(&self, i: usize) -> bool {
        let Some(mut p) = i.checked_sub(1) else {
            return false;
        };
        if self.punct(p, "]") {
            match self.matching[p].filter(|o| *o < p) {
                Some(o) => p = o,
                None => return false,
            }
        } else if !matches!(self.toks[p].kind, Kind::Ident | Kind::Str | Kind::Num) {
            return false;
        }
        loop {
            let Some(q) = p.checked_sub(1) else {
                return false;
            };
            if self.punct(q, "{") || self.punct(q, ",") {
                return true;
            }
            if self.punct(q, "*") || matches!(self.text(q), "async" | "get" | "set" | "static") {
                p = q;
                continue;
            }
            return false;
        }
    }

    fn punct_step(
        &mut self,
        i: usize,
        text: &str,
        member: bool,
    ) -> Result<Option<usize>, StripError> {
        let top = self.top();
        match text {
            "?" => {
                let next = self.text(i + 1);
                let optional_marker = (matches!(next, ":" | "," | ")" | "=" | ";")
                    || (member && next == "("))
                    && (top.frame == Frame::Params && top.ternary == 0
                        || member
                        || top.decl == Decl::AfterBinding)
                    && self.prev.is_some_and(|p| {
                        matches!(self.toks[p].kind, Kind::Ident | Kind::Str | Kind::Num)
                            || self.punct(p, "]")
                            || self.punct(p, "}")
                    });
                if optional_marker && !(top.frame != Frame::Params && matches!(next, ",")) {
                    self.cut(i, i + 1);
                    return Ok(Some(i + 1));
                }
                self.level().ternary += 1;
            }
            ":" => {
                if top.ternary > 0 {
                    self.level().ternary -= 1;
                } else {
                    let typed = match top.frame {
                        Frame::Params => true,
                        Frame::Class => !top.init,
                        Frame::Block | Frame::ForHead => top.decl == Decl::AfterBinding,
                        Frame::Object | Frame::Expr => false,
                    };
                    if typed && let Some(end) = self.cut_annotation(i) {
                        return Ok(Some(end));
                    }
                    self.keep(i);
                    self.closed = Closed::None;
                    self.label_colon = top.frame == Frame::Block;
                    return Ok(Some(i + 1));
                }
            }
            "=" => {
                if top.decl == Decl::AfterBinding {
                    self.level().decl = Decl::Init;
                } else if top.frame == Frame::Class && top.ternary == 0 {
                    self.level().init = true;
                }
            }
            "," if top.ternary == 0 => {
                if matches!(top.decl, Decl::Init | Decl::AfterBinding) {
                    self.level().decl = Decl::ExpectBinding;
                }
            }
            ";" => {
                let l = self.level();
                l.decl = Decl::None;
                l.init = false;
                l.ternary = 0;
            }
            "<" => {
                let adjacent = self.toks[i].adjacent;
                // Type parameters of a function, method or class declaration.
                let declares = self.function_at.is_some()
                    || self.class_head && self.prev.is_some_and(|p| self.ident(p))
                    || member
                    || (top.frame == Frame::Object && self.object_method_name_before(i));
                if declares && let Some(end) = self.skip_angles(i) {
                    self.cut(i, end);
                    return Ok(Some(end));
                }
                if self.expr_end_at(self.prev) {
                    // A generic call `f<T>(…)` (or a tagged template).
                    if adjacent
                        && self
                            .prev
                            .is_some_and(|p| self.ident(p) || self.punct(p, ">"))
                        && let Some(end) = self.type_args(i)
                    {
                        let follows = self.punct(end, "(")
                            || self
                                .toks
                                .get(end)
                                .is_some_and(|t| matches!(t.kind, Kind::Template | Kind::TplStart));
                        if follows {
                            self.cut(i, end);
                            return Ok(Some(end));
                        }
                    }
                } else if let Some(end) = self.skip_angles(i) {
                    // Where an operand is expected: a generic arrow's type parameters or
                    // an old-style cast `<T>x`, neither of which is JavaScript.
                    self.cut(i, end);
                    return Ok(Some(end));
                }
            }
            "(" => {
                let frame = self.paren_frame(i, member);
                let mut level = Level::new(frame);
                if frame == Frame::Params {
                    level.signature_start = self.function_at;
                }
                self.function_at = None;
                self.stack.push(level);
                self.keep(i);
                self.closed = Closed::None;
                return Ok(Some(i + 1));
            }
            "[" if member && self.ident(i + 1) && self.punct(i + 2, ":") => {
                // An index signature `[key: string]: T;`: a class member with no runtime part.
                if let Some(close) = self.fwd(i) {
                    let mut end = close + 1;
                    if self.punct(end, ":") {
                        end = self.scan_type(end + 1).unwrap_or(end);
                    }
                    if self.punct(end, ";") {
                        end += 1;
                    }
                    self.cut(i, end);
                    return Ok(Some(end));
                }
            }
            "[" => {
                let mut level = Level::new(Frame::Expr);
                if top.decl == Decl::ExpectBinding {
                    level.pattern = true;
                }
                self.stack.push(level);
            }
            "{" => {
                let frame = self.brace_frame(top, member);
                let mut level = Level::new(frame);
                if top.decl == Decl::ExpectBinding && frame == Frame::Object {
                    level.pattern = true;
                }
                self.class_head = false;
                self.stack.push(level);
                self.keep(i);
                self.closed = Closed::None;
                self.label_colon = false;
                return Ok(Some(i + 1));
            }
            ")" | "]" | "}" => {
                let closing = if self.stack.len() > 1 {
                    self.stack.pop()
                } else {
                    None
                };
                self.keep(i);
                self.label_colon = false;
                let Some(closing) = closing else {
                    self.closed = Closed::None;
                    return Ok(Some(i + 1));
                };
                if closing.pattern {
                    self.level().decl = Decl::AfterBinding;
                }
                self.closed = match closing.frame {
                    Frame::Params | Frame::Block | Frame::Class | Frame::ForHead => {
                        Closed::Statement
                    }
                    Frame::Expr if self.header_close.binary_search(&i).is_ok() => Closed::Statement,
                    _ => Closed::Expr,
                };
                if closing.frame == Frame::Params {
                    return Ok(Some(self.after_params(i, closing)));
                }
                if text == "}" && self.top().frame == Frame::Class {
                    self.level().init = false;
                }
                return Ok(Some(i + 1));
            }
            _ => {}
        }
        if let Decl::AfterBinding = self.top().decl
            && !matches!(text, "=" | "," | ":" | "?" | "!")
        {
            self.level().decl = Decl::None;
        }
        self.keep(i);
        self.closed = Closed::None;
        self.label_colon = false;
        Ok(Some(i + 1))
    }

    fn object_method_name_before(&self, i: usize) -> bool {
        // `{ name<T>(…) {…} }`: the `<` follows a key at a member start.
        self.object_method(i) && self.matching_paren_after_angles(i)
    }

    fn matching_paren_after_angles(&self, i: usize) -> bool {
        self.skip_angles(i).is_some_and(|e| self.punct(e, "("))
    }

    /// After a parameter list closed at `i`: a return type, and a bodiless overload.
    fn after_params(&mut self, i: usize, closing: Level) -> usize {
        let mut next = i + 1;
        if self.punct(next, ":")
            && let Some(end) = self.cut_annotation(next)
        {
            next = end;
        }
        // `function f(a: string): void;` declares an overload: no runtime part.
        if let Some(start) = closing.signature_start {
            let bodiless = !self.punct(next, "{")
                && !self.punct(next, "=>")
                && self.statement_start_before(start);
            if bodiless {
                let end = if self.punct(next, ";") {
                    next + 1
                } else {
                    next
                };
                let start = if start > 0 && self.is(start - 1, "async") {
                    start - 1
                } else {
                    start
                };
                self.cut(start, end);
                return end;
            }
        }
        next
    }

    /// Whether the `function` keyword at `start` begins a declaration statement.
    fn statement_start_before(&self, start: usize) -> bool {
        let s = if start > 0 && self.is(start - 1, "async") {
            start - 1
        } else {
            start
        };
        match s.checked_sub(1) {
            None => true,
            Some(p) => {
                (self.toks[p].kind == Kind::Punct && matches!(self.text(p), ";" | "{" | "}"))
                    || self.nl(s)
            }
        }
    }

    /// What a `(` at `i` opens.
    fn paren_frame(&self, i: usize, member: bool) -> Frame {
        if let Some(p) = self.prev {
            let pt = self.text(p);
            if self.ident(p) {
                match pt {
                    "for" => return Frame::ForHead,
                    "await" if p > 0 && self.is(p - 1, "for") => return Frame::ForHead,
                    "catch" => return Frame::Params,
                    "if" | "while" | "switch" | "with" => return Frame::Expr,
                    _ => {}
                }
            }
        }
        if self.function_at.is_some() || member {
            return Frame::Params;
        }
        if self.top().frame == Frame::Object && self.object_method(i) {
            return Frame::Params;
        }
        // An arrow function's parameters: `(…) =>` or `(…): T =>`.
        let Some(close) = self.fwd(i) else {
            return Frame::Expr;
        };
        if self.punct(close + 1, "=>") {
            return Frame::Params;
        }
        if self.punct(close + 1, ":")
            && self.top().ternary == 0
            && let Some(end) = self.scan_type(close + 2)
            && self.punct(end, "=>")
        {
            return Frame::Params;
        }
        Frame::Expr
    }

    /// What a `{` opens, given the level it opens in.
    fn brace_frame(&self, top: Level, member: bool) -> Frame {
        if self.class_head {
            return Frame::Class;
        }
        if member {
            return Frame::Block;
        }
        let Some(p) = self.prev else {
            return Frame::Block;
        };
        let pt = self.text(p);
        match self.toks[p].kind {
            Kind::Punct => match pt {
                ";" | "{" | "}" => {
                    if top.frame == Frame::Block || top.frame == Frame::Class {
                        Frame::Block
                    } else {
                        Frame::Object
                    }
                }
                ")" if self.closed == Closed::Statement => Frame::Block,
                "=>" => Frame::Block,
                ":" if self.label_colon => Frame::Block,
                _ => Frame::Object,
            },
            Kind::Ident if matches!(pt, "else" | "try" | "finally" | "do") => Frame::Block,
            _ if top.frame == Frame::Block && self.toks[self.prev.map_or(0, |p| p + 1)].nl => {
                Frame::Block
            }
            _ => Frame::Object,
        }
    }

    fn apply(mut self) -> String {
        if self.cuts.is_empty() {
            return self.src.to_string();
        }
        self.cuts.sort_unstable();
        let mut out = String::with_capacity(self.src.len());
        let mut pos = 0;
        for (start, end) in self.cuts {
            let start = start.max(pos);
            if end <= start {
                continue;
            }
            out.push_str(&self.src[pos..start]);
            for c in self.src[start..end].chars() {
                if is_line_break(c) {
                    out.push(c);
                } else {
                    out.push(' ');
                }
            }
            pos = end;
        }
        out.push_str(&self.src[pos..]);
        out
    }
}
