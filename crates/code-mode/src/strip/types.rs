//! Skipping type syntax: type arguments, annotations and the types they hold, scanned
//! without a type checker.

use super::*;

impl<'a> Stripper<'a> {
    /// Skips a balanced `<…>` starting at `i`; returns the index after `>`.
    pub(super) fn skip_angles(&self, i: usize) -> Option<usize> {
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
    pub(super) fn skip_template(&self, i: usize) -> Option<usize> {
        let mut j = i;
        while self.toks.get(j)?.kind != Kind::TplEnd {
            j = self.fwd(j)?;
        }
        Some(j + 1)
    }

    /// Type arguments `<T, U>` at `i`, parsed as types; the index after `>`.
    pub(super) fn type_args(&self, i: usize) -> Option<usize> {
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
    pub(super) fn scan_type(&self, i: usize) -> Option<usize> {
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

    pub(super) fn scan_union(&self, i: usize) -> Option<usize> {
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

    pub(super) fn scan_postfix(&self, i: usize) -> Option<usize> {
        let mut j = self.scan_primary(i)?;
        while self.punct(j, "[") && !self.nl(j) {
            j = self.fwd(j)? + 1;
        }
        Some(j)
    }

    pub(super) fn scan_primary(&self, i: usize) -> Option<usize> {
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

    pub(super) fn scan_primary_inner(&self, i: usize) -> Option<usize> {
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

    pub(super) fn starts_type(&self, i: usize) -> bool {
        self.toks.get(i).is_some_and(|t| match t.kind {
            Kind::Ident => !RESERVED.contains(&self.text(i)) || self.text(i) == "typeof",
            Kind::Str | Kind::Num | Kind::Template | Kind::TplStart => true,
            Kind::Punct => matches!(self.text(i), "{" | "[" | "(" | "<" | "-" | "|" | "&"),
            _ => false,
        })
    }

    /// Cuts an annotation `: T` whose colon is at `i`; returns the index after the type.
    pub(super) fn cut_annotation(&mut self, i: usize) -> Option<usize> {
        let end = self.scan_type(i + 1)?;
        self.cut(i, end);
        Some(end)
    }
}
