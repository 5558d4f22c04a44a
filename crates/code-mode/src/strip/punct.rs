//! The walk over punctuation: brackets open and close frames, and a `:`, `?`, `!` or `<`
//! is told to be type syntax or JavaScript.

use super::*;

impl<'a> Stripper<'a> {
    pub(super) fn punct_step(
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
}
