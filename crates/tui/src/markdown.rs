//! Markdown (CommonMark with tables and strikethrough) as styled terminal lines, and code
//! coloured by language. Colours come from the terminal's own palette (the sixteen named
//! colours), never fixed RGB, so text reads on light and dark backgrounds; with `NO_COLOR`
//! only bold, italic and underline remain.

use std::sync::OnceLock;

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use syntect::parsing::{ParseState, Scope, ScopeStack, SyntaxSet};

/// Which styles the terminal gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Theme {
    pub color: bool,
}

impl Theme {
    /// Colour unless `NO_COLOR` is set to anything non-empty (no-color.org).
    pub fn from_env() -> Self {
        Self {
            color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }

    pub fn fg(&self, c: Color) -> Style {
        if self.color {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }

    pub fn muted(&self) -> Style {
        if self.color {
            Style::default().fg(Color::DarkGray)
        } else {
            Style::default().add_modifier(Modifier::DIM)
        }
    }
}

fn syntaxes() -> &'static SyntaxSet {
    static SET: OnceLock<SyntaxSet> = OnceLock::new();
    SET.get_or_init(SyntaxSet::load_defaults_newlines)
}

/// Loads the syntax definitions off the input path (call once at start, on a thread).
pub fn warm_up() {
    let _ = syntaxes();
}

/// The palette colour of a scope stack, innermost scope first.
fn scope_color(stack: &ScopeStack) -> Option<Color> {
    const RULES: &[(&str, Color)] = &[
        ("comment", Color::DarkGray),
        ("string", Color::Green),
        ("constant.numeric", Color::Magenta),
        ("constant.character", Color::Green),
        ("constant.language", Color::Magenta),
        ("constant", Color::Magenta),
        ("keyword", Color::Blue),
        ("storage", Color::Blue),
        ("entity.name.function", Color::Cyan),
        ("support.function", Color::Cyan),
        ("entity.name.type", Color::Yellow),
        ("entity.name", Color::Yellow),
        ("support.type", Color::Yellow),
        ("variable.parameter", Color::Red),
        ("punctuation.definition.string", Color::Green),
    ];
    static PARSED: OnceLock<Vec<(Scope, Color)>> = OnceLock::new();
    let rules = PARSED.get_or_init(|| {
        RULES
            .iter()
            .filter_map(|(s, c)| Scope::new(s).ok().map(|s| (s, *c)))
            .collect()
    });
    for scope in stack.as_slice().iter().rev() {
        if let Some((_, c)) = rules.iter().find(|(r, _)| r.is_prefix_of(*scope)) {
            return Some(*c);
        }
    }
    None
}

/// `code` as lines coloured for `lang` (a fence's info word or a file extension); plain
/// when the language is unknown or colour is off.
pub fn highlight(code: &str, lang: &str, theme: Theme) -> Vec<Line<'static>> {
    let plain = || {
        code.lines()
            .map(|l| Line::from(Span::raw(l.to_string())))
            .collect()
    };
    if !theme.color || lang.is_empty() {
        return plain();
    }
    let set = syntaxes();
    let Some(syntax) = set
        .find_syntax_by_token(lang)
        .or_else(|| set.find_syntax_by_extension(lang))
    else {
        return plain();
    };
    let mut state = ParseState::new(syntax);
    let mut stack = ScopeStack::new();
    let mut out = Vec::new();
    for line in code.split_inclusive('\n') {
        let Ok(ops) = state.parse_line(line, set) else {
            return plain();
        };
        let text = line.trim_end_matches(['\n', '\r']);
        let mut spans = Vec::new();
        let mut at = 0;
        for (pos, op) in ops {
            let pos = pos.min(text.len());
            if pos > at {
                spans.push(Span::styled(
                    text[at..pos].to_string(),
                    scope_color(&stack).map_or_else(Style::default, |c| theme.fg(c)),
                ));
                at = pos;
            }
            if stack.apply(&op).is_err() {
                return plain();
            }
        }
        if at < text.len() {
            spans.push(Span::styled(
                text[at..].to_string(),
                scope_color(&stack).map_or_else(Style::default, |c| theme.fg(c)),
            ));
        }
        out.push(Line::from(spans));
    }
    out
}

/// Renders `text` as markdown: logical lines (the caller wraps them to the width).
pub fn render(text: &str, theme: Theme) -> Vec<Line<'static>> {
    let mut r = Renderer {
        theme,
        lines: Vec::new(),
        current: Vec::new(),
        styles: vec![Style::default()],
        lists: Vec::new(),
        quote: 0,
        code: None,
        pending_item: None,
    };
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    for event in Parser::new_ext(text, options) {
        r.event(event);
    }
    r.flush();
    while r.lines.last().is_some_and(|l| l.spans.is_empty()) {
        r.lines.pop();
    }
    r.lines
}

struct Renderer {
    theme: Theme,
    lines: Vec<Line<'static>>,
    current: Vec<Span<'static>>,
    styles: Vec<Style>,
    /// Open lists: the next number of an ordered one.
    lists: Vec<Option<u64>>,
    quote: usize,
    /// An open code block: its language and text.
    code: Option<(String, String)>,
    /// The bullet of a list item not yet written.
    pending_item: Option<String>,
}

impl Renderer {
    fn style(&self) -> Style {
        self.styles.last().copied().unwrap_or_default()
    }

    fn push_style(&mut self, add: Style) {
        let s = self.style().patch(add);
        self.styles.push(s);
    }

    fn prefix(&mut self) {
        if !self.current.is_empty() {
            return;
        }
        for _ in 0..self.quote {
            self.current.push(Span::styled("│ ", self.theme.muted()));
        }
        let depth = self.lists.len();
        if let Some(bullet) = self.pending_item.take() {
            let indent = "  ".repeat(depth.saturating_sub(1));
            self.current.push(Span::styled(
                format!("{indent}{bullet}"),
                self.theme.muted(),
            ));
        } else if depth > 0 {
            self.current.push(Span::raw("  ".repeat(depth)));
        }
    }

    fn text(&mut self, t: &str) {
        for (i, part) in t.split('\n').enumerate() {
            if i > 0 {
                self.flush();
            }
            if part.is_empty() {
                continue;
            }
            self.prefix();
            self.current
                .push(Span::styled(part.to_string(), self.style()));
        }
    }

    fn flush(&mut self) {
        if !self.current.is_empty() {
            self.lines
                .push(Line::from(std::mem::take(&mut self.current)));
        }
    }

    fn blank(&mut self) {
        self.flush();
        if self.lines.last().is_some_and(|l| !l.spans.is_empty()) {
            self.lines.push(Line::default());
        }
    }

    fn event(&mut self, event: Event<'_>) {
        if let Some((_, code)) = &mut self.code {
            match event {
                Event::Text(t) => {
                    code.push_str(&t);
                    return;
                }
                Event::End(TagEnd::CodeBlock) => {}
                _ => return,
            }
        }
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(t) => self.text(&t),
            Event::Code(t) => {
                self.prefix();
                let style = self.style().patch(self.theme.fg(Color::Yellow));
                self.current.push(Span::styled(t.to_string(), style));
            }
            Event::SoftBreak => self.text(" "),
            Event::HardBreak => self.flush(),
            Event::Rule => {
                self.blank();
                self.lines
                    .push(Line::from(Span::styled("─".repeat(24), self.theme.muted())));
            }
            Event::TaskListMarker(done) => {
                self.prefix();
                self.current
                    .push(Span::raw(if done { "[x] " } else { "[ ] " }));
            }
            Event::Html(t) | Event::InlineHtml(t) => self.text(&t),
            Event::FootnoteReference(t) => self.text(&format!("[{t}]")),
            Event::InlineMath(t) | Event::DisplayMath(t) => self.text(&t),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph if self.pending_item.is_none() && self.lists.is_empty() => {
                self.blank();
            }
            Tag::Heading { level, .. } => {
                self.blank();
                let color = if level == HeadingLevel::H1 {
                    Color::Cyan
                } else {
                    Color::Blue
                };
                self.push_style(self.theme.fg(color).add_modifier(Modifier::BOLD));
            }
            Tag::BlockQuote(_) => {
                self.flush();
                self.quote += 1;
            }
            Tag::CodeBlock(kind) => {
                self.blank();
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => {
                        info.split_whitespace().next().unwrap_or("").to_string()
                    }
                    CodeBlockKind::Indented => String::new(),
                };
                self.code = Some((lang, String::new()));
            }
            Tag::List(start) => {
                if self.lists.is_empty() {
                    self.blank();
                } else {
                    self.flush();
                }
                self.lists.push(start);
            }
            Tag::Item => {
                self.flush();
                let bullet = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let b = format!("{n}. ");
                        *n += 1;
                        b
                    }
                    _ => "• ".to_string(),
                };
                self.pending_item = Some(bullet);
            }
            Tag::Emphasis => self.push_style(Style::default().add_modifier(Modifier::ITALIC)),
            Tag::Strong => self.push_style(Style::default().add_modifier(Modifier::BOLD)),
            Tag::Strikethrough => {
                self.push_style(Style::default().add_modifier(Modifier::CROSSED_OUT))
            }
            Tag::Link { .. } => self.push_style(
                self.theme
                    .fg(Color::Cyan)
                    .add_modifier(Modifier::UNDERLINED),
            ),
            Tag::Table(_) => self.blank(),
            Tag::TableRow | Tag::TableHead => self.flush(),
            Tag::TableCell => {
                self.prefix();
                if self.current.len() > self.quote {
                    self.current.push(Span::styled(" │ ", self.theme.muted()));
                }
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph => self.flush(),
            TagEnd::Heading(_) => {
                self.styles.pop();
                self.flush();
            }
            TagEnd::BlockQuote(_) => {
                self.flush();
                self.quote = self.quote.saturating_sub(1);
            }
            TagEnd::CodeBlock => {
                if let Some((lang, code)) = self.code.take() {
                    let gutter = Span::styled("▏ ", self.theme.muted());
                    if !lang.is_empty() {
                        self.lines
                            .push(Line::from(Span::styled(lang.clone(), self.theme.muted())));
                    }
                    for line in highlight(&code, &lang, self.theme) {
                        let mut spans = vec![gutter.clone()];
                        spans.extend(line.spans);
                        self.lines.push(Line::from(spans));
                    }
                    self.lines.push(Line::default());
                }
            }
            TagEnd::List(_) => {
                self.flush();
                self.lists.pop();
            }
            TagEnd::Item => {
                if self.pending_item.is_some() {
                    self.prefix();
                }
                self.flush();
            }
            TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough | TagEnd::Link => {
                self.styles.pop();
            }
            TagEnd::TableHead | TagEnd::TableRow => self.flush(),
            TagEnd::Table => self.blank(),
            _ => {}
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// Lines as plain text (for tests).
    pub(crate) fn plain(lines: &[Line<'_>]) -> Vec<String> {
        lines
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
            .collect()
    }

    #[test]
    fn blocks_lists_and_code_render_as_text() {
        let theme = Theme { color: false };
        let out = render(
            "# Title\n\nSome *text* and `code`.\n\n- one\n- two\n\n1. first\n2. second\n\n```rust\nfn main() {}\n```\n",
            theme,
        );
        assert_eq!(
            plain(&out),
            vec![
                "Title",
                "",
                "Some text and code.",
                "",
                "• one",
                "• two",
                "",
                "1. first",
                "2. second",
                "",
                "rust",
                "▏ fn main() {}",
            ]
        );
    }

    #[test]
    fn code_is_coloured_by_language() {
        let lines = highlight(
            "fn main() { let x = \"s\"; }\n",
            "rust",
            Theme { color: true },
        );
        let colours: Vec<Option<Color>> = lines[0].spans.iter().map(|s| s.style.fg).collect();
        assert!(colours.contains(&Some(Color::Blue)), "{colours:?}");
        assert!(colours.contains(&Some(Color::Green)), "{colours:?}");
        // Unknown languages and NO_COLOR stay plain.
        assert!(
            highlight("x", "no-such-language", Theme { color: true })[0]
                .spans
                .iter()
                .all(|s| s.style.fg.is_none())
        );
        assert!(
            highlight("fn x", "rust", Theme { color: false })[0]
                .spans
                .iter()
                .all(|s| s.style.fg.is_none())
        );
    }
}
