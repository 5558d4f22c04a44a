//! Protocol answers → the service's shapes, read with `lsp-types`. `null` is no result;
//! `Location` and `LocationLink` (its target selection range) become locations, also when
//! a server mixes them in one list; hover contents in any of the protocol's forms become
//! one text; diagnostics come published (a list) or pulled (a `full` or `unchanged`
//! report). Anything else is `LSP_MALFORMED_RESPONSE`.

use dsh_kernel::BoxError;
use lsp_types as lsp;
use serde::Deserialize;
use serde_json::Value;

use crate::service::{Diagnostic, Hover, Location, Position, Range, lsp_error};

fn malformed(what: &str) -> BoxError {
    lsp_error(
        "LSP_MALFORMED_RESPONSE",
        format!("language server returned a malformed {what}"),
    )
}

fn position(p: lsp::Position) -> Position {
    Position {
        line: u64::from(p.line),
        character: u64::from(p.character),
    }
}

fn range(r: lsp::Range) -> Range {
    Range {
        start: position(r.start),
        end: position(r.end),
    }
}

/// One item of a definition-like answer.
#[derive(Deserialize)]
#[serde(untagged)]
enum Target {
    Link(lsp::LocationLink),
    Plain(lsp::Location),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Targets {
    Many(Vec<Target>),
    One(Target),
}

fn location(t: Target) -> Location {
    match t {
        Target::Link(l) => Location {
            uri: l.target_uri.to_string(),
            range: range(l.target_selection_range),
        },
        Target::Plain(l) => Location {
            uri: l.uri.to_string(),
            range: range(l.range),
        },
    }
}

/// A definition / references / implementation answer.
pub fn locations(result: &Value) -> Result<Vec<Location>, BoxError> {
    if result.is_null() {
        return Ok(Vec::new());
    }
    Ok(
        match Targets::deserialize(result).map_err(|_| malformed("location"))? {
            Targets::Many(items) => items.into_iter().map(location).collect(),
            Targets::One(item) => vec![location(item)],
        },
    )
}

fn marked(m: lsp::MarkedString) -> String {
    match m {
        lsp::MarkedString::String(s) => s,
        lsp::MarkedString::LanguageString(l) => format!("```{}\n{}\n```", l.language, l.value),
    }
}

/// A hover answer.
pub fn hover(result: &Value) -> Result<Option<Hover>, BoxError> {
    if result.is_null() {
        return Ok(None);
    }
    let answer = lsp::Hover::deserialize(result).map_err(|_| malformed("hover"))?;
    let text = match answer.contents {
        lsp::HoverContents::Scalar(m) => marked(m),
        lsp::HoverContents::Array(items) => items
            .into_iter()
            .map(marked)
            .collect::<Vec<_>>()
            .join("\n\n"),
        lsp::HoverContents::Markup(m) => m.value,
    };
    if text.is_empty() {
        return Ok(None);
    }
    Ok(Some(Hover {
        contents: text,
        range: answer.range.map(range),
    }))
}

fn diagnostic(d: lsp::Diagnostic) -> Diagnostic {
    Diagnostic {
        range: range(d.range),
        severity: d
            .severity
            .and_then(|s| serde_json::to_value(s).ok())
            .and_then(|v| v.as_u64()),
        message: d.message,
        source: d.source,
        code: d.code.map(|c| match c {
            lsp::NumberOrString::Number(n) => n.to_string(),
            lsp::NumberOrString::String(s) => s,
        }),
    }
}

/// A diagnostics list: published (an array), or a pulled report.
pub fn diagnostics(list: &Value) -> Result<Vec<Diagnostic>, BoxError> {
    let items = match list {
        Value::Null => Vec::new(),
        Value::Array(_) => {
            Vec::<lsp::Diagnostic>::deserialize(list).map_err(|_| malformed("diagnostic"))?
        }
        Value::Object(_) => match lsp::DocumentDiagnosticReport::deserialize(list)
            .map_err(|_| malformed("diagnostics report"))?
        {
            lsp::DocumentDiagnosticReport::Full(r) => r.full_document_diagnostic_report.items,
            lsp::DocumentDiagnosticReport::Unchanged(_) => Vec::new(),
        },
        _ => return Err(malformed("diagnostics list")),
    };
    Ok(items.into_iter().map(diagnostic).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn r(l: u64, c: u64) -> Range {
        Range {
            start: Position {
                line: l,
                character: c,
            },
            end: Position {
                line: l,
                character: c + 1,
            },
        }
    }

    #[test]
    fn locations_and_links_normalize() {
        let rng = json!({"start": {"line": 1, "character": 2}, "end": {"line": 1, "character": 3}});
        assert_eq!(locations(&Value::Null).unwrap(), vec![]);
        assert_eq!(
            locations(&json!([{"uri": "file:///a", "range": rng},
                {"targetUri": "file:///b", "targetRange": rng, "targetSelectionRange": rng}]))
            .unwrap(),
            vec![
                Location {
                    uri: "file:///a".into(),
                    range: r(1, 2)
                },
                Location {
                    uri: "file:///b".into(),
                    range: r(1, 2)
                },
            ]
        );
        assert_eq!(
            locations(&json!({"uri": "file:///a", "range": rng}))
                .unwrap()
                .len(),
            1
        );
        for bad in [json!(3), json!([{"uri": 1}]), json!([{"uri": "x"}])] {
            let e = locations(&bad).unwrap_err();
            assert_eq!(
                dsh_kernel::HarnessError::find(e.as_ref()).map(|h| h.code.to_string()),
                Some("LSP_MALFORMED_RESPONSE".into())
            );
        }
    }

    #[test]
    fn hover_forms() {
        let text = |v: Value| hover(&v).unwrap().map(|h| h.contents);
        assert_eq!(text(Value::Null), None);
        assert_eq!(
            text(json!({"contents": {"kind": "markdown", "value": "**x**"}})),
            Some("**x**".into())
        );
        assert_eq!(text(json!({"contents": "plain"})), Some("plain".into()));
        assert_eq!(
            text(json!({"contents": [{"language": "rust", "value": "fn f()"}, "doc"]})),
            Some("```rust\nfn f()\n```\n\ndoc".into())
        );
        assert_eq!(text(json!({"contents": ""})), None);
        assert!(hover(&json!({"contents": 5})).is_err());
    }
}
