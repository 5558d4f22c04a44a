//! The lexer of the TypeScript stripper: tokens with their spans, told apart the way a
//! JavaScript parser would (a `/` that starts a regular expression or divides, template
//! literals with nested substitutions, statement heads whose `)` ends no expression).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
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
pub(super) struct Tok {
    pub(super) kind: Kind,
    pub(super) start: usize,
    pub(super) end: usize,
    /// A line break separates this token from the previous one.
    pub(super) nl: bool,
    /// No whitespace or comment separates this token from the previous one.
    pub(super) adjacent: bool,
}

pub(super) const REGEX_KEYWORDS: &[&str] = &[
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
pub(super) const RESERVED: &[&str] = &[
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

pub(super) const PUNCTS: &[&str] = &[
    ">>>=", "...", "===", "!==", "**=", "<<=", "&&=", "||=", "??=", "=>", "==", "!=", "+=", "-=",
    "*=", "/=", "%=", "&=", "|=", "^=", "&&", "||", "??", "?.", "++", "--", "**",
];

pub(super) fn is_id_start(c: char) -> bool {
    c == '_'
        || c == '$'
        || c == '#'
        || c.is_ascii_alphabetic()
        || (!c.is_ascii() && c.is_alphanumeric())
}

pub(super) fn is_id_part(c: char) -> bool {
    c == '_'
        || c == '$'
        || c.is_ascii_alphanumeric()
        || c == '\u{200c}'
        || c == '\u{200d}'
        || (!c.is_ascii() && c.is_alphanumeric())
}

pub(super) fn is_line_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

pub(super) struct Lexer<'a> {
    pub(super) src: &'a str,
    pub(super) pos: usize,
    pub(super) toks: Vec<Tok>,
    /// For each open `(`: whether it heads a statement (`if (`…), whose `)` ends no expression.
    pub(super) parens: Vec<bool>,
    /// For each open `{` or template substitution: whether it is a substitution.
    pub(super) braces: Vec<bool>,
    /// Indices of `)` tokens that close a statement head.
    pub(super) header_close: Vec<usize>,
}

impl<'a> Lexer<'a> {
    pub(super) fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    pub(super) fn peek_at(&self, n: usize) -> Option<char> {
        self.src[self.pos..].chars().nth(n)
    }

    pub(super) fn text(&self, t: &Tok) -> &'a str {
        &self.src[t.start..t.end]
    }

    /// Whether the last token ends an expression (so a `/` divides).
    pub(super) fn expr_end(&self) -> bool {
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

    pub(super) fn push(&mut self, kind: Kind, start: usize, nl: bool, adjacent: bool) {
        self.toks.push(Tok {
            kind,
            start,
            end: self.pos,
            nl,
            adjacent,
        });
    }

    /// Lexes a template body from after `` ` `` or `}`; returns whether it ended at `${`.
    pub(super) fn template_body(&mut self) -> Result<bool, usize> {
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

    pub(super) fn run(mut self) -> Result<(Vec<Tok>, Vec<usize>), usize> {
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
