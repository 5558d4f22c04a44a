//! Declarations and class members: what is erased (interfaces, type aliases, modifiers,
//! `declare`) and what is refused (`enum`, `namespace`, parameter properties).

use super::*;

impl<'a> Stripper<'a> {
    /// TypeScript-only statements at a statement start.
    pub(super) fn declaration(
        &mut self,
        i: usize,
        text: &str,
    ) -> Result<Option<usize>, StripError> {
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
    pub(super) fn member_modifier(
        &mut self,
        i: usize,
        text: &str,
    ) -> Result<Option<usize>, StripError> {
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
    pub(super) fn object_method(&self, i: usize) -> bool {
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
}
