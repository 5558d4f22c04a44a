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

mod declarations;
mod lexer;
mod punct;
mod types;
use lexer::*;

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
