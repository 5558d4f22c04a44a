//! The composer: a multi-line text buffer with a cursor, prompt history, and the word under
//! the cursor that the `/` and `@` menus complete.

use unicode_width::UnicodeWidthChar;

/// Most prompts kept in the history.
const HISTORY: usize = 500;

#[derive(Default)]
pub struct Composer {
    text: String,
    /// Byte offset of the cursor (always on a char boundary).
    cursor: usize,
    history: Vec<String>,
    /// Where Up/Down stand in the history, and the draft they left.
    browsing: Option<(usize, String)>,
}

/// What the menu completes: a slash command at the start, or an `@` mention.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    Slash { start: usize, word: String },
    Mention { start: usize, word: String },
}

impl Composer {
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    pub fn cursor(&self) -> usize {
        self.cursor
    }

    pub fn set(&mut self, text: impl Into<String>) {
        self.text = text.into();
        self.cursor = self.text.len();
        self.browsing = None;
    }

    pub fn clear(&mut self) {
        self.set(String::new());
    }

    /// Takes the text for sending and records it in the history.
    pub fn take(&mut self) -> String {
        let text = std::mem::take(&mut self.text);
        self.cursor = 0;
        self.browsing = None;
        if !text.trim().is_empty() && self.history.last() != Some(&text) {
            self.history.push(text.clone());
            if self.history.len() > HISTORY {
                self.history.remove(0);
            }
        }
        text
    }

    pub fn insert(&mut self, s: &str) {
        // Pasted text keeps its lines; carriage returns and tabs become plain.
        let clean = s
            .replace("\r\n", "\n")
            .replace('\r', "\n")
            .replace('\t', "    ");
        self.text.insert_str(self.cursor, &clean);
        self.cursor += clean.len();
        self.browsing = None;
    }

    fn prev_boundary(&self, at: usize) -> usize {
        self.text[..at].char_indices().last().map_or(0, |(i, _)| i)
    }

    fn next_boundary(&self, at: usize) -> usize {
        self.text[at..]
            .chars()
            .next()
            .map_or(at, |c| at + c.len_utf8())
    }

    pub fn backspace(&mut self) {
        if self.cursor > 0 {
            let p = self.prev_boundary(self.cursor);
            self.text.replace_range(p..self.cursor, "");
            self.cursor = p;
        }
    }

    pub fn delete(&mut self) {
        if self.cursor < self.text.len() {
            let n = self.next_boundary(self.cursor);
            self.text.replace_range(self.cursor..n, "");
        }
    }

    /// Ctrl-W: the word before the cursor.
    pub fn delete_word(&mut self) {
        let before = &self.text[..self.cursor];
        let trimmed = before.trim_end();
        let start = trimmed.rfind(char::is_whitespace).map_or(0, |i| {
            i + trimmed[i..].chars().next().map_or(1, char::len_utf8)
        });
        self.text.replace_range(start..self.cursor, "");
        self.cursor = start;
    }

    /// Ctrl-U: the line before the cursor.
    pub fn delete_to_line_start(&mut self) {
        let start = self.line_start(self.cursor);
        self.text.replace_range(start..self.cursor, "");
        self.cursor = start;
    }

    pub fn left(&mut self) {
        self.cursor = self.prev_boundary(self.cursor);
    }

    pub fn right(&mut self) {
        self.cursor = self.next_boundary(self.cursor);
    }

    fn line_start(&self, at: usize) -> usize {
        self.text[..at].rfind('\n').map_or(0, |i| i + 1)
    }

    fn line_end(&self, at: usize) -> usize {
        self.text[at..]
            .find('\n')
            .map_or(self.text.len(), |i| at + i)
    }

    pub fn home(&mut self) {
        self.cursor = self.line_start(self.cursor);
    }

    pub fn end(&mut self) {
        self.cursor = self.line_end(self.cursor);
    }

    /// Up: the line above, or the previous prompt when on the first line.
    pub fn up(&mut self) {
        let start = self.line_start(self.cursor);
        if start == 0 {
            self.history_back();
            return;
        }
        let column = self.text[start..self.cursor].chars().count();
        let prev_start = self.line_start(start - 1);
        self.cursor = self.column_at(prev_start, start - 1, column);
    }

    /// Down: the line below, or the next prompt when on the last line.
    pub fn down(&mut self) {
        let end = self.line_end(self.cursor);
        if end == self.text.len() {
            self.history_forward();
            return;
        }
        let column = self.text[self.line_start(self.cursor)..self.cursor]
            .chars()
            .count();
        let next_end = self.line_end(end + 1);
        self.cursor = self.column_at(end + 1, next_end, column);
    }

    fn column_at(&self, start: usize, end: usize, column: usize) -> usize {
        self.text[start..end]
            .char_indices()
            .nth(column)
            .map_or(end, |(i, _)| start + i)
    }

    fn history_back(&mut self) {
        let at = match &self.browsing {
            Some((i, _)) => i.checked_sub(1),
            None => self.history.len().checked_sub(1),
        };
        let Some(at) = at else { return };
        let draft = match self.browsing.take() {
            Some((_, d)) => d,
            None => self.text.clone(),
        };
        self.text = self.history[at].clone();
        self.cursor = self.text.len();
        self.browsing = Some((at, draft));
    }

    fn history_forward(&mut self) {
        let Some((at, draft)) = self.browsing.take() else {
            return;
        };
        if at + 1 < self.history.len() {
            self.text = self.history[at + 1].clone();
            self.browsing = Some((at + 1, draft));
        } else {
            self.text = draft;
        }
        self.cursor = self.text.len();
    }

    /// The word under the cursor the menus complete.
    pub fn token(&self) -> Option<Token> {
        let before = &self.text[..self.cursor];
        let start = before.rfind(char::is_whitespace).map_or(0, |i| {
            i + before[i..].chars().next().map_or(1, char::len_utf8)
        });
        let word = &before[start..];
        if let Some(w) = word.strip_prefix('/')
            && start == 0
            && !self.text[..start].contains('\n')
        {
            return Some(Token::Slash {
                start,
                word: w.to_string(),
            });
        }
        if let Some(w) = word.strip_prefix('@') {
            return Some(Token::Mention {
                start,
                word: w.to_string(),
            });
        }
        None
    }

    /// Replaces the token starting at `start` (up to the cursor) with `with`.
    pub fn complete(&mut self, start: usize, with: &str) {
        self.text.replace_range(start..self.cursor, with);
        self.cursor = start + with.len();
        self.browsing = None;
    }

    /// The text wrapped to `width` columns, and the cursor's (row, column) in it.
    pub fn layout(&self, width: usize) -> (Vec<String>, (usize, usize)) {
        let width = width.max(2);
        let mut rows = vec![String::new()];
        let mut col = 0;
        let mut cursor = (0, 0);
        for (i, c) in self.text.char_indices() {
            if i == self.cursor {
                cursor = (rows.len() - 1, col);
            }
            if c == '\n' {
                rows.push(String::new());
                col = 0;
                continue;
            }
            let w = c.width().unwrap_or(0);
            if col + w > width {
                rows.push(String::new());
                col = 0;
            }
            if let Some(r) = rows.last_mut() {
                r.push(c);
            }
            col += w;
        }
        if self.cursor >= self.text.len() {
            if col >= width {
                rows.push(String::new());
                col = 0;
            }
            cursor = (rows.len() - 1, col);
        }
        (rows, cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn editing_moves_by_characters_and_lines() {
        let mut c = Composer::default();
        c.insert("héllo\r\nwörld");
        assert_eq!(c.text(), "héllo\nwörld");
        c.up();
        c.backspace();
        assert_eq!(c.text(), "héll\nwörld");
        c.home();
        c.delete();
        assert_eq!(c.text(), "éll\nwörld");
        c.down();
        c.end();
        c.delete_word();
        assert_eq!(c.text(), "éll\n");
        let (rows, cursor) = c.layout(10);
        assert_eq!(rows, vec!["éll".to_string(), String::new()]);
        assert_eq!(cursor, (1, 0));
    }

    #[test]
    fn history_keeps_the_draft() {
        let mut c = Composer::default();
        c.insert("first");
        assert_eq!(c.take(), "first");
        c.insert("second");
        c.take();
        c.insert("draft");
        c.up();
        assert_eq!(c.text(), "second");
        c.up();
        assert_eq!(c.text(), "first");
        c.down();
        c.down();
        assert_eq!(c.text(), "draft");
    }

    #[test]
    fn the_token_under_the_cursor() {
        let mut c = Composer::default();
        c.insert("/mo");
        assert_eq!(
            c.token(),
            Some(Token::Slash {
                start: 0,
                word: "mo".into()
            })
        );
        c.set("look at @src/ma");
        assert_eq!(
            c.token(),
            Some(Token::Mention {
                start: 8,
                word: "src/ma".into()
            })
        );
        c.complete(8, "@src/main.rs ");
        assert_eq!(c.text(), "look at @src/main.rs ");
        assert_eq!(c.token(), None);
        c.set("say /not-a-command");
        assert_eq!(c.token(), None);
    }
}
