//! What the model sees of an MCP `tools/call` result (upstream's projection, with its
//! diagnostic texts): text-like blocks join with newlines, images split the run and appear
//! as a diagnostic (this build has no durable image store for tool results), resource links
//! keep their name and URI, audio and embedded resources and unknown blocks become explicit
//! diagnostics. The raw result is untrusted: any JSON is accepted without a panic.

use dsh_llm::ContentBlock;
use serde_json::Value;

/// The outcome of one call as the tool pipeline needs it.
#[derive(Clone, Debug, PartialEq)]
pub enum CallOutcome {
    /// Model-visible blocks of a successful call.
    Success(Vec<ContentBlock>),
    /// `isError: true`: the joined text becomes the failure message.
    ToolError(String),
}

/// Projects a raw `tools/call` result of tool `raw_name`.
pub fn project_result(result: &Value, raw_name: &str) -> CallOutcome {
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    let Some(content) = result.get("content").and_then(Value::as_array) else {
        // Legacy `toolResult` shape, or no content at all.
        let text = match result.get("toolResult") {
            Some(v) => serde_json::to_string(v).unwrap_or_else(|_| "(no output)".into()),
            None => "(no output)".into(),
        };
        return if is_error {
            CallOutcome::ToolError(text)
        } else {
            CallOutcome::Success(vec![ContentBlock::text(text)])
        };
    };
    let blocks = project_content(content, raw_name);
    if is_error {
        return CallOutcome::ToolError(join_text(&blocks));
    }
    CallOutcome::Success(blocks)
}

fn join_text(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn image_diagnostic(block: &serde_json::Map<String, Value>) -> String {
    let media = block
        .get("mimeType")
        .and_then(Value::as_str)
        .unwrap_or("unknown media type");
    format!("[image not shown: {media}; images returned by MCP tools are not passed on]")
}

/// Ordered projection: runs of text-like blocks are newline-joined; an image ends the run.
pub fn project_content(content: &[Value], raw_name: &str) -> Vec<ContentBlock> {
    let mut projected = Vec::new();
    let mut run: Vec<String> = Vec::new();
    let flush = |run: &mut Vec<String>, projected: &mut Vec<ContentBlock>| {
        if !run.is_empty() {
            projected.push(ContentBlock::text(run.join("\n")));
            run.clear();
        }
    };
    for value in content {
        let Some(block) = value.as_object() else {
            run.push("[unsupported MCP content block: expected an object]".into());
            continue;
        };
        let kind = block.get("type");
        match kind.and_then(Value::as_str) {
            Some("text") => {
                if let Some(text) = block.get("text").and_then(Value::as_str) {
                    run.push(text.to_string());
                }
            }
            Some("image") => {
                flush(&mut run, &mut projected);
                projected.push(ContentBlock::text(image_diagnostic(block)));
            }
            Some("resource_link") => {
                match (
                    block.get("name").and_then(Value::as_str),
                    block.get("uri").and_then(Value::as_str),
                ) {
                    (Some(name), Some(uri)) => run.push(format!("Resource link: {name} ({uri})")),
                    _ => run.push(
                        "[resource link not shown: the MCP block lacks a name or a URI]".into(),
                    ),
                }
            }
            Some("audio") => {
                let media = block
                    .get("mimeType")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown media type");
                run.push(format!(
                    "[audio not shown: {media}; audio returned by MCP tools is not passed on]"
                ));
            }
            Some("resource") => run.push(
                "[embedded resource not shown; resources embedded by MCP tools are not passed on]"
                    .into(),
            ),
            Some(other) => run.push(format!("[unsupported MCP content type: {other}]")),
            None => {
                let shown = match kind {
                    None => "undefined".to_string(),
                    Some(v) => v.to_string(),
                };
                run.push(format!("[unsupported MCP content type: {shown}]"));
            }
        }
    }
    flush(&mut run, &mut projected);
    if projected.is_empty() {
        projected.push(ContentBlock::text(format!(
            "({raw_name} returned no model-visible content)"
        )));
    }
    projected
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn texts(o: CallOutcome) -> Vec<String> {
        match o {
            CallOutcome::Success(blocks) => blocks
                .into_iter()
                .map(|b| match b {
                    ContentBlock::Text { text, .. } => text,
                    other => panic!("unexpected block {other:?}"),
                })
                .collect(),
            CallOutcome::ToolError(e) => vec![format!("ERROR {e}")],
        }
    }

    #[test]
    fn blocks_project_in_order() {
        let r = json!({"content": [
            {"type": "text", "text": "a"},
            {"type": "resource_link", "name": "n", "uri": "file:///x"},
            {"type": "image", "mimeType": "image/png", "data": "AAAA"},
            {"type": "audio"},
            {"type": "resource", "resource": {}},
            {"type": "weird"},
            7,
            {"type": "resource_link", "uri": "u"}
        ]});
        assert_eq!(
            texts(project_result(&r, "t")),
            vec![
                "a\nResource link: n (file:///x)".to_string(),
                "[image not shown: image/png; images returned by MCP tools are not passed on]".to_string(),
                "[audio not shown: unknown media type; audio returned by MCP tools is not passed on]\n[embedded resource not shown; resources embedded by MCP tools are not passed on]\n[unsupported MCP content type: weird]\n[unsupported MCP content block: expected an object]\n[resource link not shown: the MCP block lacks a name or a URI]".to_string(),
            ]
        );
    }

    #[test]
    fn errors_empty_and_legacy_results() {
        let e = json!({"isError": true, "content": [{"type": "text", "text": "bad"}, {"type": "text", "text": "worse"}]});
        assert_eq!(texts(project_result(&e, "t")), vec!["ERROR bad\nworse"]);
        assert_eq!(
            texts(project_result(&json!({"content": []}), "echo")),
            vec!["(echo returned no model-visible content)"]
        );
        assert_eq!(
            texts(project_result(&json!({"toolResult": {"x": 1}}), "t")),
            vec![r#"{"x":1}"#]
        );
        assert_eq!(
            texts(project_result(&json!(null), "t")),
            vec!["(no output)"]
        );
    }
}
