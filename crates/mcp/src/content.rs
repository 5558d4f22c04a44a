//! What the model sees of an MCP `tools/call` result: text-like blocks join with newlines;
//! images (and embedded image resources) become image blocks when the caller stored them
//! (the attachment store; a text-only model then gets the runtime's placeholder), else a
//! diagnostic; embedded text resources are shown with their URI; resource links keep their
//! name and URI; audio, binary resources and unknown blocks become explicit diagnostics.
//! The raw result is untrusted: any JSON is accepted without a panic.

use std::collections::HashMap;

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
    project_result_with(result, raw_name, &HashMap::new())
}

/// An image of a result the caller stored: the block to show, or why it could not be.
pub type StoredImages = HashMap<usize, Result<ContentBlock, String>>;

/// The images of a result's content to store, by content index: (media type, bytes) of
/// each `image` block and of each embedded `resource` whose blob is an image. A block whose
/// data is not valid base64 is left out (it keeps its diagnostic).
pub fn result_images(result: &Value) -> Vec<(usize, String, Vec<u8>)> {
    use base64::Engine as _;
    let Some(content) = result.get("content").and_then(Value::as_array) else {
        return Vec::new();
    };
    content
        .iter()
        .enumerate()
        .filter_map(|(i, block)| {
            let (media, data) = match block.get("type").and_then(Value::as_str)? {
                "image" => (
                    block.get("mimeType")?.as_str()?,
                    block.get("data")?.as_str()?,
                ),
                "resource" => {
                    let r = block.get("resource")?;
                    let media = r.get("mimeType")?.as_str()?;
                    if !media.starts_with("image/") {
                        return None;
                    }
                    (media, r.get("blob")?.as_str()?)
                }
                _ => return None,
            };
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data)
                .ok()?;
            Some((i, media.to_string(), bytes))
        })
        .collect()
}

/// [`project_result`], showing the images the caller stored.
pub fn project_result_with(result: &Value, raw_name: &str, images: &StoredImages) -> CallOutcome {
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
    let blocks = project_content_with(content, raw_name, images);
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

fn image_diagnostic(block: &serde_json::Map<String, Value>, why: Option<&str>) -> String {
    let media = block
        .get("mimeType")
        .and_then(Value::as_str)
        .unwrap_or("unknown media type");
    match why {
        Some(why) => format!("[image not shown: {media}; {why}]"),
        None => format!("[image not shown: {media}; this setup stores no images for tool results]"),
    }
}

/// An embedded resource as text: its URI and text, or a diagnostic for binary contents.
fn resource_text(block: &serde_json::Map<String, Value>) -> String {
    let Some(resource) = block.get("resource").and_then(Value::as_object) else {
        return "[embedded resource not shown: the MCP block has no resource object]".into();
    };
    let uri = resource
        .get("uri")
        .and_then(Value::as_str)
        .unwrap_or("(no uri)");
    let media = resource.get("mimeType").and_then(Value::as_str);
    if let Some(text) = resource.get("text").and_then(Value::as_str) {
        return match media {
            Some(media) => format!("Resource {uri} ({media}):\n{text}"),
            None => format!("Resource {uri}:\n{text}"),
        };
    }
    let size = resource
        .get("blob")
        .and_then(Value::as_str)
        .map_or(0, |b| b.len() / 4 * 3);
    format!(
        "[embedded resource {uri} not shown: {} binary data, about {size} bytes]",
        media.unwrap_or("untyped")
    )
}

/// Ordered projection without stored images.
pub fn project_content(content: &[Value], raw_name: &str) -> Vec<ContentBlock> {
    project_content_with(content, raw_name, &HashMap::new())
}

/// Ordered projection: runs of text-like blocks are newline-joined; an image ends the run.
pub fn project_content_with(
    content: &[Value],
    raw_name: &str,
    images: &StoredImages,
) -> Vec<ContentBlock> {
    let mut projected = Vec::new();
    let mut run: Vec<String> = Vec::new();
    let flush = |run: &mut Vec<String>, projected: &mut Vec<ContentBlock>| {
        if !run.is_empty() {
            projected.push(ContentBlock::text(run.join("\n")));
            run.clear();
        }
    };
    for (index, value) in content.iter().enumerate() {
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
                projected.push(match images.get(&index) {
                    Some(Ok(image)) => image.clone(),
                    Some(Err(why)) => ContentBlock::text(image_diagnostic(block, Some(why))),
                    None => ContentBlock::text(image_diagnostic(block, None)),
                });
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
            Some("resource") => match images.get(&index) {
                Some(Ok(image)) => {
                    flush(&mut run, &mut projected);
                    projected.push(image.clone());
                }
                _ => run.push(resource_text(block)),
            },
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
                "[image not shown: image/png; this setup stores no images for tool results]".to_string(),
                "[audio not shown: unknown media type; audio returned by MCP tools is not passed on]\n[embedded resource (no uri) not shown: untyped binary data, about 0 bytes]\n[unsupported MCP content type: weird]\n[unsupported MCP content block: expected an object]\n[resource link not shown: the MCP block lacks a name or a URI]".to_string(),
            ]
        );
    }

    #[test]
    fn stored_images_and_embedded_resources_reach_the_model() {
        let r = json!({"content": [
            {"type": "text", "text": "here:"},
            {"type": "image", "mimeType": "image/png", "data": "aGk="},
            {"type": "resource", "resource": {"uri": "test://1", "mimeType": "text/plain", "text": "body"}},
            {"type": "resource", "resource": {"uri": "test://2", "mimeType": "image/png", "blob": "aGk="}},
            {"type": "image", "mimeType": "image/png", "data": "not base64!"}
        ]});
        let wanted: Vec<(usize, String)> = result_images(&r)
            .into_iter()
            .map(|(i, m, _)| (i, m))
            .collect();
        assert_eq!(
            wanted,
            [(1, "image/png".to_string()), (3, "image/png".to_string())]
        );
        let image = ContentBlock::image(json!({"attachmentId": "sha256:x"}));
        let stored: StoredImages = [(1, Ok(image.clone())), (3, Err("too big".to_string()))]
            .into_iter()
            .collect();
        let CallOutcome::Success(blocks) = project_result_with(&r, "t", &stored) else {
            panic!("a success");
        };
        assert_eq!(
            blocks,
            vec![
                ContentBlock::text("here:"),
                image,
                ContentBlock::text(
                    "Resource test://1 (text/plain):\nbody\n[embedded resource test://2 not shown: image/png binary data, about 3 bytes]"
                ),
                ContentBlock::text(
                    "[image not shown: image/png; this setup stores no images for tool results]"
                ),
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
