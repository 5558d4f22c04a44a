//! The `lsp` tool's text: locations grouped by path as one-based `path:line:col` (paths
//! relative to the workspace when inside it), hover text, and the complete-result cap. Lengths
//! are counted in UTF-16 units, as upstream's are.

use dsh_tools::text::{utf16_len, utf16_prefix};
use std::path::Path;

use crate::service::{Diagnostic, Hover, Location};

/// Caps a complete result, the truncation notice included.
fn bound(text: String, max: usize, label: &str) -> String {
    if utf16_len(&text) <= max {
        return text;
    }
    let notice = format!("\n\u{2026} {label} truncated (limit {max} characters).");
    let notice_len = utf16_len(&notice);
    if notice_len >= max {
        return utf16_prefix(&notice, max).to_string();
    }
    format!("{}{notice}", utf16_prefix(&text, max - notice_len))
}

/// How a location URI is shown: workspace-relative for a `file:` URI under the workspace
/// (`.` for the workspace itself), the absolute path for other `file:` URIs, anything else
/// verbatim.
pub fn render_uri(uri: &str, workspace_uri: &str) -> String {
    if !uri.starts_with("file:") {
        return uri.to_string();
    }
    let (Ok(target), Ok(workspace)) = (url::Url::parse(uri), url::Url::parse(workspace_uri)) else {
        return uri.to_string();
    };
    let (Ok(target), Ok(workspace)) = (target.to_file_path(), workspace.to_file_path()) else {
        return uri.to_string();
    };
    match target.strip_prefix(&workspace) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
        Ok(rel) => rel.to_string_lossy().into_owned(),
        Err(_) => display(&target),
    }
}

fn display(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Renders a locations answer.
pub fn format_locations(
    locations: &[Location],
    workspace_uri: &str,
    max_locations: usize,
    max_chars: usize,
) -> String {
    if locations.is_empty() {
        return bound("No results.".into(), max_chars, "locations");
    }
    let shown = &locations[..locations.len().min(max_locations)];
    let omitted = locations.len() - shown.len();
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for l in shown {
        let path = render_uri(&l.uri, workspace_uri);
        let entry = format!(
            "{path}:{}:{}",
            l.range.start.line + 1,
            l.range.start.character + 1
        );
        match groups.iter_mut().find(|(p, _)| *p == path) {
            Some((_, entries)) => entries.push(entry),
            None => groups.push((path, vec![entry])),
        }
    }
    let mut lines: Vec<String> = groups.into_iter().flat_map(|(_, e)| e).collect();
    if omitted > 0 {
        let s = if omitted == 1 { "" } else { "s" };
        lines.push(format!(
            "\u{2026} {omitted} more location{s} omitted (limit {max_locations})."
        ));
    }
    bound(lines.join("\n"), max_chars, "locations")
}

/// Renders a hover answer.
pub fn format_hover(hover: Option<&Hover>, max_chars: usize) -> String {
    let text = hover.map_or_else(
        || "No hover information.".to_string(),
        |h| h.contents.clone(),
    );
    bound(text, max_chars, "hover")
}

/// A file's diagnostics, one per line, most severe first: `path:line:col severity
/// [source code]: message` (one-based); `None` says the server reported nothing in time.
pub fn format_diagnostics(path: &str, items: Option<&[Diagnostic]>, max_chars: usize) -> String {
    let Some(items) = items else {
        return format!(
            "The language server reported no diagnostics for {path} in time (some servers report them only for saved or built files)."
        );
    };
    if items.is_empty() {
        return format!("No diagnostics in {path}.");
    }
    let mut sorted: Vec<&Diagnostic> = items.iter().collect();
    sorted.sort_by_key(|d| {
        (
            d.severity.unwrap_or(1),
            d.range.start.line,
            d.range.start.character,
        )
    });
    let lines: Vec<String> = sorted
        .iter()
        .map(|d| {
            let severity = match d.severity {
                Some(2) => "warning",
                Some(3) => "information",
                Some(4) => "hint",
                _ => "error",
            };
            let origin = match (&d.source, &d.code) {
                (Some(s), Some(c)) => format!(" [{s} {c}]"),
                (Some(s), None) => format!(" [{s}]"),
                (None, Some(c)) => format!(" [{c}]"),
                (None, None) => String::new(),
            };
            format!(
                "{path}:{}:{} {severity}{origin}: {}",
                d.range.start.line + 1,
                d.range.start.character + 1,
                d.message.trim()
            )
        })
        .collect();
    let head = format!(
        "{} diagnostic{} in {path}:\n",
        items.len(),
        if items.len() == 1 { "" } else { "s" }
    );
    bound(head + &lines.join("\n"), max_chars, "diagnostics")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::{Position, Range};
    use pretty_assertions::assert_eq;

    fn loc(uri: &str, line: u64, character: u64) -> Location {
        let p = Position { line, character };
        Location {
            uri: uri.into(),
            range: Range { start: p, end: p },
        }
    }

    #[test]
    fn locations_group_by_path_and_count_omissions() {
        let ws = "file:///w";
        let all = vec![
            loc("file:///w/a.ts", 0, 6),
            loc("file:///other/b.ts", 2, 0),
            loc("file:///w/a.ts", 1, 6),
            loc("untitled:x", 0, 0),
        ];
        assert_eq!(
            format_locations(&all, ws, 100, 16_000),
            "a.ts:1:7\na.ts:2:7\n/other/b.ts:3:1\nuntitled:x:1:1"
        );
        assert_eq!(
            format_locations(&all[..2], ws, 1, 16_000),
            "a.ts:1:7\n\u{2026} 1 more location omitted (limit 1)."
        );
        assert_eq!(
            format_locations(&all, ws, 1, 16_000),
            "a.ts:1:7\n\u{2026} 3 more locations omitted (limit 1)."
        );
        assert_eq!(format_locations(&[], ws, 1, 16_000), "No results.");
        assert_eq!(render_uri("file:///w", ws), ".");
        assert_eq!(render_uri("file:///w2/x", ws), "/w2/x");
    }

    #[test]
    fn results_are_capped_with_their_notice() {
        let text = "x".repeat(100);
        let h = Hover {
            contents: text,
            range: None,
        };
        let out = format_hover(Some(&h), 60);
        assert_eq!(utf16_len(&out), 60);
        assert!(out.ends_with("\n\u{2026} hover truncated (limit 60 characters)."));
        assert_eq!(format_hover(None, 100), "No hover information.");
        assert_eq!(format_hover(Some(&h), 5), "\n\u{2026} ho");
    }
}
