//! Text the session tools answer with: `JSON.stringify(value, null, 2)`, the in-memory
//! event object, and search snippets.

use dsh_session::{Event, RecordFormat, write_event};
use serde_json::Value;

/// `JSON.stringify(value, null, 2)`: two-space indent, `": "`, `[]`/`{}` for empties,
/// JavaScript number formatting and string escapes.
pub fn to_string_pretty(value: &Value) -> String {
    let mut out = String::new();
    write_pretty(&mut out, value, 0);
    out
}

fn indent(out: &mut String, depth: usize) {
    out.push('\n');
    for _ in 0..depth {
        out.push_str("  ");
    }
}

fn write_pretty(out: &mut String, value: &Value, depth: usize) {
    match value {
        Value::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                indent(out, depth + 1);
                write_pretty(out, item, depth + 1);
            }
            indent(out, depth);
            out.push(']');
        }
        Value::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                indent(out, depth + 1);
                dsh_kernel::json::write_string(out, k);
                out.push_str(": ");
                write_pretty(out, v, depth + 1);
            }
            indent(out, depth);
            out.push('}');
        }
        other => dsh_kernel::json::write_value(out, other),
    }
}

/// The event as the in-memory object upstream keeps: `{type, seq, time, data,
/// sourceEventSeqs?, surfaceOp?}` in the order the log writes them.
pub fn event_object(event: &Event) -> Value {
    let mut line = String::new();
    write_event(&mut line, event, RecordFormat::Full);
    serde_json::from_str(&line).unwrap_or(Value::Null)
}

/// Marks FTS5's `highlight()` puts around matches (noncharacters, sanitized out of
/// documents and queries).
pub const MATCH_START: char = '\u{FDD0}';
pub const MATCH_END: char = '\u{FDD1}';

/// Replaces characters that would collide with the match marks (and NUL).
pub fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\0' | MATCH_START | MATCH_END => '\u{FFFD}',
            c => c,
        })
        .collect()
}

/// Number of highlighted spans in a marked text.
pub fn match_count(marked: &str) -> usize {
    marked.chars().filter(|c| *c == MATCH_START).count()
}

/// A whitespace-normalized excerpt of a marked document of at most `max_chars` code
/// points, placed so the first match is in the first third, with `…` where cut.
pub fn snippet(marked: &str, max_chars: usize) -> String {
    let mut chars: Vec<char> = Vec::new();
    let mut match_start: Option<usize> = None;
    let mut pending_space = false;
    for c in marked.chars() {
        match c {
            MATCH_START => {
                if pending_space && !chars.is_empty() {
                    chars.push(' ');
                }
                pending_space = false;
                match_start.get_or_insert(chars.len());
            }
            MATCH_END => {}
            c if c.is_whitespace() => pending_space = true,
            c => {
                if pending_space && !chars.is_empty() {
                    chars.push(' ');
                }
                pending_space = false;
                chars.push(c);
            }
        }
    }
    if chars.len() <= max_chars {
        return chars.into_iter().collect();
    }
    if max_chars <= 1 {
        return "…".into();
    }
    let matched = match_start.unwrap_or(0).min(chars.len() - 1);
    let mut start = matched.saturating_sub(max_chars / 3);
    let prefix = if start > 0 { "…" } else { "" };
    let mut suffix = "…";
    let mut len = max_chars - prefix.chars().count() - 1;
    if len < 1 {
        start = matched;
        suffix = "";
        len = max_chars - prefix.chars().count();
    } else if matched >= start + len {
        start = matched + 1 - len;
    }
    let mut end = chars.len().min(start + len);
    if end == chars.len() {
        suffix = "";
        len = max_chars - prefix.chars().count();
        start = end.saturating_sub(len);
    }
    end = chars.len().min(start + len);
    let body: String = chars[start..end].iter().collect();
    format!("{prefix}{body}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn pretty_json_matches_javascript() {
        let v = json!({"a": [1, 2.5, {"b": []}], "c": {}, "d": "x\ny", "e": null});
        assert_eq!(
            to_string_pretty(&v),
            "{\n  \"a\": [\n    1,\n    2.5,\n    {\n      \"b\": []\n    }\n  ],\n  \"c\": {},\n  \"d\": \"x\\ny\",\n  \"e\": null\n}"
        );
    }

    #[test]
    fn snippets_center_the_first_match() {
        let marked = format!("aaaa  bbbb\n{MATCH_START}cc{MATCH_END} dddd eeee ffff");
        assert_eq!(snippet(&marked, 100), "aaaa bbbb cc dddd eeee ffff");
        assert_eq!(snippet(&marked, 9), "…bb cc d…");
        assert_eq!(match_count(&marked), 1);
    }
}
