//! The content of a `session/prompt`: ACP content blocks turned into the message the agent
//! receives.

use super::*;

/// Builds the user message content from ACP prompt blocks (embedded text resources only
/// when the connection advertised them, i.e. in the rich projection). Images (only when
/// the connection advertised them) are decoded and returned beside the content, which
/// holds an `image` placeholder at each one's position until the store admits them.
pub(crate) fn prompt_content(
    blocks: &[Value],
    embedded: bool,
    images_enabled: bool,
) -> Result<(Vec<ContentBlock>, Vec<dsh_attachments::SaveImage>), RpcError> {
    let mut content = Vec::new();
    let mut images = Vec::new();
    let mut run = String::new();
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => run.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("resource_link") => {
                let name = b.get("name").and_then(Value::as_str).unwrap_or("");
                let uri = b.get("uri").and_then(Value::as_str).unwrap_or("");
                run.push_str(&format!(
                    "\n[resource_link name={} uri={}]\n",
                    serde_json::to_string(name).unwrap_or_default(),
                    serde_json::to_string(uri).unwrap_or_default()
                ));
            }
            Some("image") if images_enabled => {
                images.push(crate::images::decode(b)?);
                if !run.is_empty() {
                    content.push(ContentBlock::text(std::mem::take(&mut run)));
                }
                content.push(ContentBlock::image(Value::Null));
            }
            Some("image") => {
                return Err(RpcError::invalid_params(
                    "inline image prompts were not advertised by this connection",
                ));
            }
            Some("audio") => {
                return Err(RpcError::invalid_params(
                    "audio prompt content is not supported",
                ));
            }
            Some("resource") if embedded => {
                let resource = &b["resource"];
                let uri = resource["uri"].as_str().unwrap_or("");
                let Some(text) = resource["text"].as_str() else {
                    return Err(RpcError::invalid_params(
                        "binary embedded resources are not supported",
                    ));
                };
                run.push_str(&format!(
                    "\n<resource uri={}>\n{text}\n</resource>\n",
                    serde_json::to_string(uri).unwrap_or_default()
                ));
            }
            Some("resource") => {
                return Err(RpcError::invalid_params(
                    "embedded resource prompt content is not supported",
                ));
            }
            _ => {
                return Err(RpcError::schema(
                    json!({"_errors": [], "prompt": {"_errors": ["Invalid input"]}}),
                ));
            }
        }
    }
    let has_text = content
        .iter()
        .chain(std::iter::once(&ContentBlock::text(run.clone())))
        .any(|b| b.as_text().is_some_and(|t| !t.trim().is_empty()));
    if images.is_empty() && !has_text {
        return Err(RpcError::invalid_params("empty prompt"));
    }
    if !run.is_empty() || content.is_empty() {
        content.push(ContentBlock::text(run));
    }
    Ok((content, images))
}
