//! HTML → Markdown, producing what upstream's converter produces (turndown 7.2 with
//! `headingStyle: atx`, `codeBlockStyle: fenced`, `bulletListMarker: -`, the GFM plugin's
//! tables and strikethrough, script/style/noscript removed, and upstream's two table rules
//! that ignore spans). Our own implementation of the same rules over an arena DOM.

mod dom;
mod rules;

use dom::{Dom, Kind};

/// Nesting depth above which HTML is returned unconverted (a robustness bound).
const MAX_CONVERSION_DEPTH: usize = 512;

/// Converts an HTML document (or fragment) to Markdown. Markup nested deeper than the
/// conversion bound is returned as it is.
pub fn html_to_markdown(html: &str) -> String {
    if html.is_empty() {
        return String::new();
    }
    if exceeds_depth(html) {
        return html.to_string();
    }
    let mut dom = Dom::parse(&format!(
        "<x-turndown id=\"turndown-root\">{html}</x-turndown>"
    ));
    let Some(root) = dom.element_by_id("turndown-root") else {
        return html.to_string();
    };
    collapse_whitespace(&mut dom, root);
    let out = rules::Converter::new(&dom).process(root, 0);
    post_process(&out)
}

fn post_process(output: &str) -> String {
    let trimmed = output.trim_start_matches(['\t', '\r', '\n']);
    trimmed.trim_end().to_string()
}

pub(crate) fn is_block(tag: &str) -> bool {
    matches!(
        tag,
        "ADDRESS"
            | "ARTICLE"
            | "ASIDE"
            | "AUDIO"
            | "BLOCKQUOTE"
            | "BODY"
            | "CANVAS"
            | "CENTER"
            | "DD"
            | "DIR"
            | "DIV"
            | "DL"
            | "DT"
            | "FIELDSET"
            | "FIGCAPTION"
            | "FIGURE"
            | "FOOTER"
            | "FORM"
            | "FRAMESET"
            | "H1"
            | "H2"
            | "H3"
            | "H4"
            | "H5"
            | "H6"
            | "HEADER"
            | "HGROUP"
            | "HR"
            | "HTML"
            | "ISINDEX"
            | "LI"
            | "MAIN"
            | "MENU"
            | "NAV"
            | "NOFRAMES"
            | "NOSCRIPT"
            | "OL"
            | "OUTPUT"
            | "P"
            | "PRE"
            | "SECTION"
            | "TABLE"
            | "TBODY"
            | "TD"
            | "TFOOT"
            | "TH"
            | "THEAD"
            | "TR"
            | "UL"
    )
}

pub(crate) fn is_void(tag: &str) -> bool {
    matches!(
        tag,
        "AREA"
            | "BASE"
            | "BR"
            | "COL"
            | "COMMAND"
            | "EMBED"
            | "HR"
            | "IMG"
            | "INPUT"
            | "KEYGEN"
            | "LINK"
            | "META"
            | "PARAM"
            | "SOURCE"
            | "TRACK"
            | "WBR"
    )
}

/// Turndown's whitespace collapsing: runs of ASCII whitespace become one space, spaces at
/// block boundaries go, `pre` contents are left alone, comments are removed.
fn collapse_whitespace(dom: &mut Dom, root: usize) {
    if dom.nodes[root].children.is_empty() || dom.tag(root) == "PRE" {
        return;
    }
    let mut prev_text: Option<usize> = None;
    let mut keep_leading_ws = false;
    let mut prev: Option<usize> = None;
    let mut node = next(dom, prev, root);
    while node != root {
        match dom.nodes[node].kind.clone() {
            Kind::Text(data) => {
                let mut text = collapse_ascii_ws(&data);
                let prev_ends_space = prev_text.is_none_or(|p| match &dom.nodes[p].kind {
                    Kind::Text(t) => t.ends_with(' '),
                    _ => false,
                });
                if prev_ends_space && !keep_leading_ws && text.starts_with(' ') {
                    text.remove(0);
                }
                if text.is_empty() {
                    node = remove_node(dom, node);
                    continue;
                }
                dom.nodes[node].kind = Kind::Text(text);
                prev_text = Some(node);
            }
            Kind::Element => {
                let tag = dom.tag(node);
                if is_block(&tag) || tag == "BR" {
                    if let Some(p) = prev_text {
                        strip_trailing_space(dom, p);
                    }
                    prev_text = None;
                    keep_leading_ws = false;
                } else if is_void(&tag) || tag == "PRE" {
                    prev_text = None;
                    keep_leading_ws = true;
                } else if prev_text.is_some() {
                    keep_leading_ws = false;
                }
            }
            Kind::Other | Kind::Document => {
                node = remove_node(dom, node);
                continue;
            }
        }
        let n = next(dom, prev, node);
        prev = Some(node);
        node = n;
    }
    if let Some(p) = prev_text {
        strip_trailing_space(dom, p);
        if matches!(&dom.nodes[p].kind, Kind::Text(t) if t.is_empty()) {
            remove_node(dom, p);
        }
    }
}

fn collapse_ascii_ws(data: &str) -> String {
    let mut out = String::with_capacity(data.len());
    let mut in_ws = false;
    for c in data.chars() {
        if matches!(c, ' ' | '\r' | '\n' | '\t') {
            if !in_ws {
                out.push(' ');
            }
            in_ws = true;
        } else {
            out.push(c);
            in_ws = false;
        }
    }
    out
}

fn strip_trailing_space(dom: &mut Dom, id: usize) {
    if let Kind::Text(t) = &mut dom.nodes[id].kind
        && t.ends_with(' ')
    {
        t.pop();
    }
}

/// Removes `id`; returns where the walk continues (its next sibling, else its parent).
fn remove_node(dom: &mut Dom, id: usize) -> usize {
    let next = dom.next_sibling(id).or(dom.nodes[id].parent).unwrap_or(0);
    dom.remove(id);
    next
}

fn next(dom: &Dom, prev: Option<usize>, current: usize) -> usize {
    let came_up = prev.is_some_and(|p| dom.nodes[p].parent == Some(current));
    if came_up || dom.tag(current) == "PRE" {
        return dom
            .next_sibling(current)
            .or(dom.nodes[current].parent)
            .unwrap_or(0);
    }
    dom.nodes[current]
        .children
        .first()
        .copied()
        .or_else(|| dom.next_sibling(current))
        .or(dom.nodes[current].parent)
        .unwrap_or(0)
}

const VOID_NAMES: [&str; 14] = [
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr",
];
const RAW_TEXT: [&str; 3] = ["script", "style", "noscript"];

/// A single lexical pass that over-counts nesting (comments and raw text aware, quotes
/// respected, only the current element's end tag pops).
fn exceeds_depth(html: &str) -> bool {
    let lower = html.to_ascii_lowercase();
    let b = html.as_bytes();
    let mut open: Vec<String> = Vec::new();
    let mut offset = 0;
    let mut in_comment = false;
    while offset < b.len() {
        let start = html[offset..].find('<').map(|i| i + offset);
        if in_comment {
            let end = html[offset..].find("-->").map(|i| i + offset);
            if let Some(end) = end
                && start.is_none_or(|s| end < s)
            {
                in_comment = false;
                offset = end + 3;
                continue;
            }
        }
        let Some(start) = start else { break };
        if !in_comment && html[start..].starts_with("<!--") {
            in_comment = true;
            offset = start + 4;
            continue;
        }
        let mut cursor = start + 1;
        let closing = b.get(cursor) == Some(&b'/');
        if closing {
            cursor += 1;
        }
        let name_start = cursor;
        while b
            .get(cursor)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'-')
        {
            cursor += 1;
        }
        if cursor == name_start || !b[name_start].is_ascii_alphabetic() {
            offset = start + 1;
            continue;
        }
        let name = lower[name_start..cursor].to_string();
        let mut quote: Option<u8> = None;
        let mut closed = false;
        while cursor < b.len() {
            let c = b[cursor];
            cursor += 1;
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None if c == b'"' || c == b'\'' => quote = Some(c),
                None if c == b'>' => {
                    closed = true;
                    break;
                }
                None => {}
            }
        }
        if !closed {
            break;
        }
        if closing {
            if !in_comment && open.last() == Some(&name) {
                open.pop();
            }
        } else {
            let mut last = cursor - 2;
            while last > 0 && b[last].is_ascii_whitespace() {
                last -= 1;
            }
            if !VOID_NAMES.contains(&name.as_str()) && b[last] != b'/' {
                let raw = RAW_TEXT.contains(&name.as_str());
                open.push(name.clone());
                if open.len() > MAX_CONVERSION_DEPTH {
                    return true;
                }
                if !in_comment && raw {
                    match find_raw_text_end(&lower, &name, cursor) {
                        Some(end) => {
                            offset = end;
                            continue;
                        }
                        None => break,
                    }
                }
            }
        }
        offset = cursor;
    }
    false
}

fn find_raw_text_end(lower: &str, name: &str, from: usize) -> Option<usize> {
    let prefix = format!("</{name}");
    let mut at = from;
    loop {
        let candidate = lower[at..].find(&prefix)? + at;
        let after = lower.as_bytes().get(candidate + prefix.len());
        if after.is_none_or(|c| *c == b'>' || *c == b'/' || c.is_ascii_whitespace()) {
            return Some(candidate);
        }
        at = candidate + prefix.len();
    }
}

#[cfg(test)]
mod tests;
