//! Protocol answers → the service's shapes. `null` is no result; `Location` and
//! `LocationLink` (its target selection range) become locations; hover contents in any of
//! the protocol's forms become one text. Anything else is `LSP_MALFORMED_RESPONSE`.

use dsh_kernel::BoxError;
use serde_json::Value;

use crate::service::{Diagnostic, Hover, Location, Position, Range, lsp_error};

fn malformed(what: &str) -> BoxError {
    lsp_error(
        "LSP_MALFORMED_RESPONSE",
        format!("language server returned a malformed {what}"),
    )
}

fn position(v: &Value) -> Option<Position> {
    let line = v.get("line")?.as_u64()?;
    let character = v.get("character")?.as_u64()?;
    Some(Position { line, character })
}

fn range(v: &Value) -> Option<Range> {
    Some(Range {
        start: position(v.get("start")?)?,
        end: position(v.get("end")?)?,
    })
}

fn location(v: &Value) -> Option<Location> {
    if let Some(uri) = v.get("targetUri").and_then(Value::as_str) {
        return Some(Location {
            uri: uri.to_string(),
            range: range(v.get("targetSelectionRange")?)?,
        });
    }
    Some(Location {
        uri: v.get("uri")?.as_str()?.to_string(),
        range: range(v.get("range")?)?,
    })
}

/// A definition / references / implementation answer.
pub fn locations(result: &Value) -> Result<Vec<Location>, BoxError> {
    match result {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|i| location(i).ok_or_else(|| malformed("location")))
            .collect(),
        Value::Object(_) => Ok(vec![location(result).ok_or_else(|| malformed("location"))?]),
        _ => Err(malformed("location")),
    }
}

fn marked(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => {
            let value = o.get("value")?.as_str()?;
            match o.get("language").and_then(Value::as_str) {
                Some(lang) => Some(format!("```{lang}\n{value}\n```")),
                // MarkupContent (`kind` + `value`).
                None => Some(value.to_string()),
            }
        }
        _ => None,
    }
}

/// A hover answer.
pub fn hover(result: &Value) -> Result<Option<Hover>, BoxError> {
    if result.is_null() {
        return Ok(None);
    }
    let contents = result.get("contents").ok_or_else(|| malformed("hover"))?;
    let text = match contents {
        Value::Array(items) => items
            .iter()
            .map(|i| marked(i).ok_or_else(|| malformed("hover")))
            .collect::<Result<Vec<_>, _>>()?
            .join("\n\n"),
        other => marked(other).ok_or_else(|| malformed("hover"))?,
    };
    if text.is_empty() {
        return Ok(None);
    }
    let range = match result.get("range") {
        None | Some(Value::Null) => None,
        Some(r) => Some(range(r).ok_or_else(|| malformed("hover"))?),
    };
    Ok(Some(Hover {
        contents: text,
        range,
    }))
}

/// A diagnostics list (published, or a pull report's `items`).
pub fn diagnostics(list: &Value) -> Result<Vec<Diagnostic>, BoxError> {
    let items = match list {
        Value::Array(items) => items,
        Value::Object(o) => match o.get("items") {
            Some(Value::Array(items)) => items,
            _ => return Ok(Vec::new()),
        },
        Value::Null => return Ok(Vec::new()),
        _ => return Err(malformed("diagnostics list")),
    };
    let one = |d: &Value| -> Option<Diagnostic> {
        Some(Diagnostic {
            range: range(d.get("range")?)?,
            severity: d.get("severity").and_then(Value::as_u64),
            message: d.get("message")?.as_str()?.to_string(),
            source: d.get("source").and_then(Value::as_str).map(str::to_owned),
            code: match d.get("code") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            },
        })
    };
    items
        .iter()
        .map(|d| one(d).ok_or_else(|| malformed("diagnostic")))
        .collect()
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
