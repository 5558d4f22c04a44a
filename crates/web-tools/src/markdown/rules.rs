//! The conversion rules, in turndown's precedence: blank nodes, upstream's table rules,
//! GFM (tables, strikethrough, highlighted code, task lists), CommonMark, keep, remove,
//! default.

use super::dom::{Dom, Kind};
use super::{is_block, is_void};

/// Recursion bound of the conversion walk (the lexical guard keeps real input far below).
const MAX_WALK_DEPTH: usize = 1024;

pub struct Converter<'a> {
    dom: &'a Dom,
}

fn meaningful_when_blank(tag: &str) -> bool {
    matches!(
        tag,
        "A" | "TABLE"
            | "THEAD"
            | "TBODY"
            | "TFOOT"
            | "TH"
            | "TD"
            | "IFRAME"
            | "SCRIPT"
            | "AUDIO"
            | "VIDEO"
    )
}

/// `a` and `b` joined with the larger of the newline runs they touch (at most two).
pub fn join(output: &str, replacement: &str) -> String {
    let s1 = output.trim_end_matches('\n');
    let s2 = replacement.trim_start_matches('\n');
    let nls = (output.len() - s1.len())
        .max(replacement.len() - s2.len())
        .min(2);
    format!("{s1}{}{s2}", &"\n\n"[..nls])
}

/// Turndown's Markdown escapes of ordinary text.
pub fn escape(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '*' => s.push_str("\\*"),
            '`' => s.push_str("\\`"),
            '[' => s.push_str("\\["),
            ']' => s.push_str("\\]"),
            '_' => s.push_str("\\_"),
            c => s.push(c),
        }
    }
    // Escapes that only apply at the very start of the text.
    if let Some(rest) = s.strip_prefix('-') {
        s = format!("\\-{rest}");
    } else if let Some(rest) = s.strip_prefix("+ ") {
        s = format!("\\+ {rest}");
    } else if s.starts_with('=') || heading_prefix(&s) || s.starts_with("~~~") || s.starts_with('>')
    {
        s = format!("\\{s}");
    } else if let Some(digits) = ordered_prefix(&s) {
        s = format!("{}\\. {}", &s[..digits], &s[digits + 2..]);
    }
    s
}

/// `#{1,6} ` at the start.
fn heading_prefix(s: &str) -> bool {
    let n = s.bytes().take_while(|b| *b == b'#').count();
    (1..=6).contains(&n) && s.as_bytes().get(n) == Some(&b' ')
}

/// `\d+\. ` at the start: the digit count.
fn ordered_prefix(s: &str) -> Option<usize> {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    (n > 0 && s[n..].starts_with(". ")).then_some(n)
}

struct Flank {
    leading: String,
    trailing: String,
}

fn is_ascii_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

impl<'a> Converter<'a> {
    pub fn new(dom: &'a Dom) -> Self {
        Self { dom }
    }

    fn tag(&self, id: usize) -> String {
        self.dom.tag(id)
    }

    fn is_code(&self, id: usize) -> bool {
        let mut n = Some(id);
        while let Some(x) = n {
            if self.tag(x) == "CODE" {
                return true;
            }
            n = self.dom.nodes[x].parent;
        }
        false
    }

    fn has_descendant(&self, id: usize, pred: impl Fn(&str) -> bool) -> bool {
        self.dom
            .descendants(id)
            .into_iter()
            .any(|d| self.dom.is_element(d) && pred(&self.tag(d)))
    }

    fn is_blank(&self, id: usize) -> bool {
        let tag = self.tag(id);
        !is_void(&tag)
            && !meaningful_when_blank(&tag)
            && self.dom.text_content(id).trim().is_empty()
            && !self.has_descendant(id, is_void)
            && !self.has_descendant(id, meaningful_when_blank)
    }

    /// The children of `id`, converted and joined.
    pub fn process(&self, id: usize, depth: usize) -> String {
        let mut output = String::new();
        for &child in &self.dom.nodes[id].children {
            let replacement = match &self.dom.nodes[child].kind {
                Kind::Text(t) => {
                    if self.is_code(child) {
                        t.clone()
                    } else {
                        escape(t)
                    }
                }
                Kind::Element => {
                    if depth > MAX_WALK_DEPTH {
                        self.dom.text_content(child)
                    } else {
                        self.replacement_for(child, depth + 1)
                    }
                }
                Kind::Document | Kind::Other => String::new(),
            };
            output = join(&output, &replacement);
        }
        output
    }

    fn replacement_for(&self, id: usize, depth: usize) -> String {
        let mut content = self.process(id, depth);
        let flank = self.flanking_whitespace(id);
        if !flank.leading.is_empty() || !flank.trailing.is_empty() {
            content = content.trim().to_string();
        }
        format!(
            "{}{}{}",
            flank.leading,
            self.apply_rule(id, &content),
            flank.trailing
        )
    }

    fn flanking_whitespace(&self, id: usize) -> Flank {
        let none = Flank {
            leading: String::new(),
            trailing: String::new(),
        };
        if is_block(&self.tag(id)) {
            return none;
        }
        let text = self.dom.text_content(id);
        if text.trim().is_empty() {
            // The whole whitespace run counts as leading.
            let ascii: String = text.chars().take_while(|c| is_ascii_ws(*c)).collect();
            let leading = if !ascii.is_empty() && self.flanked(id, Side::Left) {
                text[ascii.len()..].to_string()
            } else {
                text
            };
            return Flank {
                leading,
                trailing: String::new(),
            };
        }
        let lead_all: String = text.chars().take_while(|c| c.is_whitespace()).collect();
        let lead_ascii: String = lead_all.chars().take_while(|c| is_ascii_ws(*c)).collect();
        let trail_all: String = {
            let mut v: Vec<char> = text
                .chars()
                .rev()
                .take_while(|c| c.is_whitespace())
                .collect();
            v.reverse();
            v.into_iter().collect()
        };
        let trail_ascii: String = {
            let mut v: Vec<char> = trail_all
                .chars()
                .rev()
                .take_while(|c| is_ascii_ws(*c))
                .collect();
            v.reverse();
            v.into_iter().collect()
        };
        let mut leading = lead_all.clone();
        if !lead_ascii.is_empty() && self.flanked(id, Side::Left) {
            leading = lead_all[lead_ascii.len()..].to_string();
        }
        let mut trailing = trail_all.clone();
        if !trail_ascii.is_empty() && self.flanked(id, Side::Right) {
            trailing = trail_all[..trail_all.len() - trail_ascii.len()].to_string();
        }
        Flank { leading, trailing }
    }

    fn flanked(&self, id: usize, side: Side) -> bool {
        let sibling = match side {
            Side::Left => self.dom.previous_sibling(id),
            Side::Right => self.dom.next_sibling(id),
        };
        let Some(s) = sibling else { return false };
        let test = |t: &str| match side {
            Side::Left => t.ends_with(' '),
            Side::Right => t.starts_with(' '),
        };
        match &self.dom.nodes[s].kind {
            Kind::Text(t) => test(t),
            Kind::Element if !is_block(&self.tag(s)) => test(&self.dom.text_content(s)),
            Kind::Element | Kind::Document | Kind::Other => false,
        }
    }

    fn apply_rule(&self, id: usize, content: &str) -> String {
        let tag = self.tag(id);
        let block = is_block(&tag);
        if self.is_blank(id) {
            return if block { "\n\n".into() } else { String::new() };
        }
        match tag.as_str() {
            "TH" | "TD" => return self.table_cell(id, content),
            "TR" => return self.table_row(id, content),
            "TABLE" if !self.table_keeps_html(id) => return self.table(id, content),
            "THEAD" | "TBODY" | "TFOOT" => return content.to_string(),
            "DEL" | "S" | "STRIKE" => return format!("~~{content}~~"),
            "DIV" if self.highlighted_code(id).is_some() => {
                if let Some((lang, code)) = self.highlighted_code(id) {
                    return fenced(&lang, &code);
                }
            }
            "INPUT" if self.is_task_checkbox(id) => {
                let checked = self.dom.attr(id, "checked").is_some();
                return format!("{} ", if checked { "[x]" } else { "[ ]" });
            }
            _ => {}
        }
        match tag.as_str() {
            "P" => format!("\n\n{content}\n\n"),
            "BR" => "  \n".into(),
            "H1" | "H2" | "H3" | "H4" | "H5" | "H6" => {
                let level = usize::from(tag.as_bytes()[1] - b'0');
                format!("\n\n{} {content}\n\n", "#".repeat(level))
            }
            "BLOCKQUOTE" => {
                let inner = content.trim_matches('\n');
                let quoted: Vec<String> = inner.split('\n').map(|l| format!("> {l}")).collect();
                format!("\n\n{}\n\n", quoted.join("\n"))
            }
            "UL" | "OL" => {
                let parent = self.dom.nodes[id].parent;
                let last_in_li = parent.is_some_and(|p| {
                    self.tag(p) == "LI"
                        && self.dom.nodes[p]
                            .children
                            .iter()
                            .rev()
                            .find(|c| self.dom.is_element(**c))
                            == Some(&id)
                });
                if last_in_li {
                    format!("\n{content}")
                } else {
                    format!("\n\n{content}\n\n")
                }
            }
            "LI" => self.list_item(id, content),
            "PRE" if self.first_child_is_code(id) => {
                let code_el = self.dom.nodes[id].children[0];
                let class = self.dom.attr(code_el, "class").unwrap_or("");
                let lang = class
                    .split_whitespace()
                    .find_map(|c| c.strip_prefix("language-"))
                    .unwrap_or("");
                fenced(lang, &self.dom.text_content(code_el))
            }
            "HR" => "\n\n* * *\n\n".into(),
            "A" if self.dom.attr(id, "href").is_some_and(|h| !h.is_empty()) => {
                let href = self.dom.attr(id, "href").unwrap_or("");
                let href = href.replace('(', "\\(").replace(')', "\\)");
                let title = clean_attribute(self.dom.attr(id, "title"));
                let title = if title.is_empty() {
                    String::new()
                } else {
                    format!(" \"{}\"", title.replace('"', "\\\""))
                };
                format!("[{content}]({href}{title})")
            }
            "EM" | "I" => {
                if content.trim().is_empty() {
                    String::new()
                } else {
                    format!("_{content}_")
                }
            }
            "STRONG" | "B" => {
                if content.trim().is_empty() {
                    String::new()
                } else {
                    format!("**{content}**")
                }
            }
            "CODE" if !self.is_code_block_child(id) => inline_code(content),
            "IMG" => {
                let alt = clean_attribute(self.dom.attr(id, "alt"));
                let src = self.dom.attr(id, "src").unwrap_or("");
                let title = clean_attribute(self.dom.attr(id, "title"));
                let title = if title.is_empty() {
                    String::new()
                } else {
                    format!(" \"{title}\"")
                };
                if src.is_empty() {
                    String::new()
                } else {
                    format!("![{alt}]({src}{title})")
                }
            }
            "TABLE" => {
                let html = self.dom.outer_html(id);
                format!("\n\n{html}\n\n")
            }
            "SCRIPT" | "STYLE" | "NOSCRIPT" => String::new(),
            _ => {
                if block {
                    format!("\n\n{content}\n\n")
                } else {
                    content.to_string()
                }
            }
        }
    }

    fn first_child_is_code(&self, id: usize) -> bool {
        self.dom.nodes[id]
            .children
            .first()
            .is_some_and(|c| self.tag(*c) == "CODE")
    }

    fn is_code_block_child(&self, id: usize) -> bool {
        let has_siblings =
            self.dom.previous_sibling(id).is_some() || self.dom.next_sibling(id).is_some();
        self.dom.nodes[id]
            .parent
            .is_some_and(|p| self.tag(p) == "PRE" && !has_siblings)
    }

    /// GFM `highlightedCodeBlock`: `div.highlight-source-<lang>` whose first child is `pre`.
    fn highlighted_code(&self, id: usize) -> Option<(String, String)> {
        let class = self.dom.attr(id, "class")?;
        let lang = class.split_whitespace().find_map(|c| {
            c.strip_prefix("highlight-text-")
                .or(c.strip_prefix("highlight-source-"))
        })?;
        let first = *self.dom.nodes[id].children.first()?;
        (self.tag(first) == "PRE").then(|| (lang.to_string(), self.dom.text_content(first)))
    }

    fn is_task_checkbox(&self, id: usize) -> bool {
        self.dom.attr(id, "type") == Some("checkbox")
            && self.dom.nodes[id]
                .parent
                .is_some_and(|p| self.tag(p) == "LI")
    }

    fn list_item(&self, id: usize, content: &str) -> String {
        let parent = self.dom.nodes[id].parent;
        let mut prefix = "-   ".to_string();
        if let Some(p) = parent
            && self.tag(p) == "OL"
        {
            let index = self.dom.nodes[p]
                .children
                .iter()
                .filter(|c| self.dom.is_element(**c))
                .position(|c| *c == id)
                .unwrap_or(0);
            let start = self
                .dom
                .attr(p, "start")
                .and_then(|s| s.trim().parse::<i64>().ok());
            let n = match start {
                Some(s) => s + index as i64,
                None => index as i64 + 1,
            };
            prefix = format!("{n}.  ");
        }
        let mut c = content.trim_start_matches('\n').to_string();
        let trimmed_len = c.trim_end_matches('\n').len();
        if trimmed_len < c.len() {
            c.truncate(trimmed_len);
            c.push('\n');
        }
        let c = c.replace('\n', &format!("\n{}", " ".repeat(prefix.len())));
        let more = self.dom.next_sibling(id).is_some() && !c.ends_with('\n');
        format!("{prefix}{c}{}", if more { "\n" } else { "" })
    }

    fn cell_index(&self, id: usize) -> usize {
        self.dom.nodes[id]
            .parent
            .and_then(|p| self.dom.nodes[p].children.iter().position(|c| *c == id))
            .unwrap_or(0)
    }

    fn table_cell(&self, id: usize, content: &str) -> String {
        render_cell(content, self.cell_index(id))
    }

    fn cells(&self, row: usize) -> Vec<usize> {
        self.dom.nodes[row]
            .children
            .iter()
            .copied()
            .filter(|c| matches!(self.tag(*c).as_str(), "TH" | "TD"))
            .collect()
    }

    fn table_of(&self, row: usize) -> Option<usize> {
        let section = self.dom.nodes[row].parent?;
        if self.tag(section) == "TABLE" {
            return Some(section);
        }
        self.dom.nodes[section].parent
    }

    fn rows(&self, table: usize) -> Vec<usize> {
        let mut rows = Vec::new();
        for &c in &self.dom.nodes[table].children {
            match self.tag(c).as_str() {
                "TR" => rows.push(c),
                "THEAD" | "TBODY" | "TFOOT" => rows.extend(
                    self.dom.nodes[c]
                        .children
                        .iter()
                        .copied()
                        .filter(|r| self.tag(*r) == "TR"),
                ),
                _ => {}
            }
        }
        rows
    }

    fn is_heading_row(&self, row: usize) -> bool {
        let cells = self.cells(row);
        let Some(section) = self.dom.nodes[row].parent else {
            return false;
        };
        let first_row = self
            .table_of(row)
            .and_then(|t| self.rows(t).first().copied())
            == Some(row);
        (self.tag(section) == "THEAD" || first_row) && cells.iter().all(|c| self.tag(*c) == "TH")
    }

    fn table_row(&self, id: usize, content: &str) -> String {
        let border = if self.is_heading_row(id) {
            self.cells(id)
                .iter()
                .enumerate()
                .map(|(i, c)| render_cell(&self.border(*c), i))
                .collect::<String>()
        } else {
            String::new()
        };
        if border.is_empty() {
            format!("\n{content}")
        } else {
            format!("\n{content}\n{border}")
        }
    }

    fn border(&self, cell: usize) -> String {
        let style_align = self.dom.attr(cell, "style").and_then(|s| {
            s.split(';').find_map(|decl| {
                let (k, v) = decl.split_once(':')?;
                (k.trim().eq_ignore_ascii_case("text-align")).then(|| v.trim().to_string())
            })
        });
        let align = self
            .dom
            .attr(cell, "align")
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .or(style_align)
            .unwrap_or_default()
            .to_ascii_lowercase();
        match align.as_str() {
            "left" => ":---",
            "right" => "---:",
            "center" => ":---:",
            _ => "---",
        }
        .to_string()
    }

    /// Tables holding block structure Markdown tables cannot express stay HTML.
    fn table_keeps_html(&self, id: usize) -> bool {
        self.has_descendant(id, |t| {
            matches!(
                t,
                "PRE" | "UL" | "OL" | "H1" | "H2" | "H3" | "H4" | "H5" | "H6" | "HR" | "BLOCKQUOTE"
            )
        })
    }

    fn table(&self, id: usize, content: &str) -> String {
        let rows = self.rows(id);
        // A single cell is content, not a table.
        if rows.len() == 1 && self.cells(rows[0]).len() == 1 {
            return content.to_string();
        }
        let mut collapsed = String::with_capacity(content.len());
        let mut last_nl = false;
        for c in content.chars() {
            if c == '\n' {
                if !last_nl {
                    collapsed.push('\n');
                }
                last_nl = true;
            } else {
                collapsed.push(c);
                last_nl = false;
            }
        }
        let second = collapsed.trim().split('\n').nth(1).unwrap_or("");
        let divider = second.contains("| ---") || second.contains("| :---");
        let columns = rows.iter().map(|r| self.cells(*r).len()).max().unwrap_or(0);
        let header = if columns > 0 && !divider {
            format!(
                "|{}\n|{}",
                "     |".repeat(columns),
                " --- |".repeat(columns)
            )
        } else {
            String::new()
        };
        format!("\n\n{header}{collapsed}\n\n")
    }
}

enum Side {
    Left,
    Right,
}

fn render_cell(content: &str, index: usize) -> String {
    let prefix = if index == 0 { "| " } else { " " };
    let escaped = content.trim().replace("\n\r", "<br>").replace('\n', "<br>");
    let mut piped = String::with_capacity(escaped.len());
    let mut in_pipes = false;
    for c in escaped.chars() {
        if c == '|' {
            if !in_pipes {
                piped.push_str("\\|");
            }
            in_pipes = true;
        } else {
            piped.push(c);
            in_pipes = false;
        }
    }
    let units = piped.encode_utf16().count();
    if units < 3 {
        piped.push_str(&" ".repeat(3 - units));
    }
    format!("{prefix}{piped} |")
}

fn clean_attribute(value: Option<&str>) -> String {
    let Some(v) = value else {
        return String::new();
    };
    // Runs of newlines (with the whitespace after them) become one newline.
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            while chars.peek().is_some_and(|n| n.is_whitespace()) {
                chars.next();
            }
            out.push('\n');
        } else {
            out.push(c);
        }
    }
    out
}

fn fenced(lang: &str, code: &str) -> String {
    let mut size = 3;
    for line in code.split('\n') {
        let run = line.bytes().take_while(|b| *b == b'`').count();
        if run >= size {
            size = run + 1;
        }
    }
    let fence = "`".repeat(size);
    let code = code.strip_suffix('\n').unwrap_or(code);
    format!("\n\n{fence}{lang}\n{code}\n{fence}\n\n")
}

fn inline_code(content: &str) -> String {
    if content.is_empty() {
        return String::new();
    }
    let content = content.replace("\r\n", " ").replace(['\n', '\r'], " ");
    let padded = content.starts_with('`')
        || content.ends_with('`')
        || (content.starts_with(' ')
            && content.ends_with(' ')
            && content.len() >= 2
            && content.trim() != "");
    let extra = if padded { " " } else { "" };
    let mut delimiter = "`".to_string();
    let runs: Vec<usize> = content
        .split(|c| c != '`')
        .filter(|r| !r.is_empty())
        .map(str::len)
        .collect();
    while runs.contains(&delimiter.len()) {
        delimiter.push('`');
    }
    format!("{delimiter}{extra}{content}{extra}{delimiter}")
}
