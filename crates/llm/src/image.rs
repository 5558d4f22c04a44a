//! Image content: the durable attachment reference an `image` block carries, and the
//! request-time projections every adapter shares (text-only models, request image budgets).
//!
//! Image blocks stay [`ContentBlock::Other`] maps so their key order round-trips byte for
//! byte (the store, the `read_image` tool and ACP prompts each write their own order); this
//! module reads them through [`ImageAttachmentRef`].

use serde_json::{Map, Value};

use crate::message::{ContentBlock, Message};

/// Media types an image attachment may have.
pub const IMAGE_MEDIA_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/webp", "image/gif"];

/// Model-facing stand-in for an image dropped to keep a request within its image budget.
pub const OFFLOADED_IMAGE_TEXT: &str = "[image left out: this request already carries as many images as it may, and the oldest ones are dropped first. If you still need it, read its file again if you know the path; if not, ask the user to attach it again.]";

/// A durable reference to one stored image (`{attachmentId, mediaType, bytes, width,
/// height, name?, originalDimensions?}`); the bytes live in the attachment store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageAttachmentRef {
    /// `sha256:<64 hex>` of the stored bytes.
    pub attachment_id: String,
    pub media_type: String,
    pub bytes: u64,
    pub width: u64,
    pub height: u64,
    pub name: Option<String>,
    /// Dimensions before the store reduced the image (absent when it did not).
    pub original_dimensions: Option<(u64, u64)>,
}

impl ImageAttachmentRef {
    /// The hex digest of [`Self::attachment_id`], when it has the `sha256:<64 hex>` form.
    pub fn sha256_hex(&self) -> Option<&str> {
        let hex = self.attachment_id.strip_prefix("sha256:")?;
        (hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then_some(hex)
    }

    /// Parses the `attachment` object of an image block.
    pub fn from_json(value: &Value) -> Result<Self, String> {
        let Value::Object(map) = value else {
            return Err("image attachment must be an object".into());
        };
        let string = |key: &str| -> Result<String, String> {
            map.get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("image attachment needs a string `{key}`"))
        };
        let count = |v: Option<&Value>, key: &str| -> Result<u64, String> {
            v.and_then(Value::as_u64)
                .ok_or_else(|| format!("image attachment needs a non-negative integer `{key}`"))
        };
        let media_type = string("mediaType")?;
        if !IMAGE_MEDIA_TYPES.contains(&media_type.as_str()) {
            return Err(format!(
                "image attachment mediaType \"{media_type}\" is not one of {}",
                IMAGE_MEDIA_TYPES.join(", ")
            ));
        }
        let original_dimensions = match map.get("originalDimensions") {
            None => None,
            Some(Value::Object(d)) => Some((
                count(d.get("width"), "originalDimensions.width")?,
                count(d.get("height"), "originalDimensions.height")?,
            )),
            Some(_) => return Err("image attachment `originalDimensions` must be an object".into()),
        };
        Ok(Self {
            attachment_id: string("attachmentId")?,
            media_type,
            bytes: count(map.get("bytes"), "bytes")?,
            width: count(map.get("width"), "width")?,
            height: count(map.get("height"), "height")?,
            name: map.get("name").and_then(Value::as_str).map(str::to_owned),
            original_dimensions,
        })
    }

    /// The store's key order: `attachmentId, mediaType, width, height, bytes, name?,
    /// originalDimensions?` (what ACP prompt images record).
    pub fn to_store_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("attachmentId".into(), self.attachment_id.clone().into());
        m.insert("mediaType".into(), self.media_type.clone().into());
        m.insert("width".into(), self.width.into());
        m.insert("height".into(), self.height.into());
        m.insert("bytes".into(), self.bytes.into());
        self.tail(&mut m);
        Value::Object(m)
    }

    /// The `read_image` result's key order: `attachmentId, mediaType, bytes, width,
    /// height, name?, originalDimensions?`.
    pub fn to_tool_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("attachmentId".into(), self.attachment_id.clone().into());
        m.insert("mediaType".into(), self.media_type.clone().into());
        m.insert("bytes".into(), self.bytes.into());
        m.insert("width".into(), self.width.into());
        m.insert("height".into(), self.height.into());
        self.tail(&mut m);
        Value::Object(m)
    }

    fn tail(&self, m: &mut Map<String, Value>) {
        if let Some(name) = &self.name {
            m.insert("name".into(), name.clone().into());
        }
        if let Some((w, h)) = self.original_dimensions {
            m.insert(
                "originalDimensions".into(),
                serde_json::json!({"width": w, "height": h}),
            );
        }
    }

    /// The text a text-only model sees in place of this image.
    pub fn text_only_text(&self) -> String {
        let digest: String = self
            .attachment_id
            .strip_prefix("sha256:")
            .unwrap_or(&self.attachment_id)
            .chars()
            .take(8)
            .collect();
        format!("[image omitted because this model accepts text only; attachment sha256:{digest}]")
    }

    /// The handle an image-capable model sees beside the image itself.
    pub fn request_handle_text(&self) -> String {
        format!(
            "Image {}; request image {}x{}px.",
            self.attachment_id, self.width, self.height
        )
    }
}

impl ContentBlock {
    /// An `image` block over `attachment` (a value from [`ImageAttachmentRef::to_store_value`]
    /// or [`ImageAttachmentRef::to_tool_value`]).
    pub fn image(attachment: Value) -> Self {
        let mut m = Map::new();
        m.insert("type".into(), Value::from("image"));
        m.insert("attachment".into(), attachment);
        ContentBlock::Other(m)
    }

    /// The reference of an `image` block (`None` for other blocks); a malformed
    /// reference is an error naming the problem.
    pub fn image_ref(&self) -> Option<Result<ImageAttachmentRef, String>> {
        match self {
            ContentBlock::Other(map)
                if map.get("type").and_then(Value::as_str) == Some("image") =>
            {
                Some(match map.get("attachment") {
                    Some(a) => ImageAttachmentRef::from_json(a),
                    None => Err("image block has no `attachment`".into()),
                })
            }
            _ => None,
        }
    }
}

/// Whether any block, including inside tool results, is an image.
pub fn content_has_image(blocks: &[ContentBlock]) -> bool {
    blocks.iter().any(|b| match b {
        ContentBlock::ToolResult { content, .. } => content_has_image(content),
        other => other.block_type() == "image",
    })
}

/// Replaces each image (nested ones too) with `replace(image)`; `None` when nothing changed.
fn map_images(
    blocks: &[ContentBlock],
    replace: &mut dyn FnMut(&ContentBlock) -> Option<ContentBlock>,
) -> Option<Vec<ContentBlock>> {
    let mut changed = false;
    let out = blocks
        .iter()
        .map(|b| match b {
            ContentBlock::ToolResult {
                tool_call_id,
                content,
                is_error,
            } => match map_images(content, replace) {
                Some(content) => {
                    changed = true;
                    ContentBlock::ToolResult {
                        tool_call_id: tool_call_id.clone(),
                        content,
                        is_error: *is_error,
                    }
                }
                None => b.clone(),
            },
            other if other.block_type() == "image" => match replace(other) {
                Some(new) => {
                    changed = true;
                    new
                }
                None => b.clone(),
            },
            other => other.clone(),
        })
        .collect();
    changed.then_some(out)
}

fn map_messages(
    messages: &[std::sync::Arc<Message>],
    replace: &mut dyn FnMut(&ContentBlock) -> Option<ContentBlock>,
) -> Option<Vec<std::sync::Arc<Message>>> {
    if !messages.iter().any(|m| content_has_image(&m.content)) {
        return None;
    }
    let mut changed = false;
    let out = messages
        .iter()
        .map(|m| match map_images(&m.content, replace) {
            Some(content) => {
                changed = true;
                std::sync::Arc::new(Message {
                    content,
                    ..(**m).clone()
                })
            }
            None => m.clone(),
        })
        .collect();
    changed.then_some(out)
}

/// The request history a text-only model sees: every image becomes a fixed placeholder
/// naming its digest. `None` when the history has no image (use it unchanged).
pub fn project_images_for_text_model(
    messages: &[std::sync::Arc<Message>],
) -> Option<Vec<std::sync::Arc<Message>>> {
    map_messages(messages, &mut |b| {
        let text = match b.image_ref() {
            Some(Ok(r)) => r.text_only_text(),
            _ => "[image omitted because this model accepts text only]".to_string(),
        };
        Some(ContentBlock::text(text))
    })
}

/// Replaces the oldest images until the base64 size of the rest fits `max_base64_bytes`
/// (`byte_len` gives an image's raw size). `None` when everything fits.
pub fn offload_request_images(
    messages: &[std::sync::Arc<Message>],
    max_base64_bytes: u64,
    byte_len: &dyn Fn(&ImageAttachmentRef) -> u64,
) -> Option<Vec<std::sync::Arc<Message>>> {
    fn collect(
        blocks: &[ContentBlock],
        out: &mut Vec<u64>,
        len: &dyn Fn(&ImageAttachmentRef) -> u64,
    ) {
        for b in blocks {
            match b {
                ContentBlock::ToolResult { content, .. } => collect(content, out, len),
                other => {
                    if let Some(r) = other.image_ref() {
                        let raw = r.map(|r| len(&r)).unwrap_or(0);
                        out.push(raw.div_ceil(3) * 4);
                    }
                }
            }
        }
    }
    let mut lengths = Vec::new();
    for m in messages {
        collect(&m.content, &mut lengths, byte_len);
    }
    let total: u64 = lengths.iter().sum();
    if total <= max_base64_bytes {
        return None;
    }
    let excess = total - max_base64_bytes;
    let mut removed = 0u64;
    let mut count = 0usize;
    for len in &lengths {
        if removed >= excess {
            break;
        }
        removed += len;
        count += 1;
    }
    let mut remaining = count;
    map_messages(messages, &mut |_| {
        if remaining == 0 {
            return None;
        }
        remaining -= 1;
        Some(ContentBlock::text(OFFLOADED_IMAGE_TEXT))
    })
}

/// Default bound of the base64 image bytes one request inlines (20 MiB, upstream's
/// DeepSeek default); older images over it become [`OFFLOADED_IMAGE_TEXT`].
pub const DEFAULT_MAX_INLINE_REQUEST_IMAGE_BYTES: u64 = 20 * 1024 * 1024;

/// Reads a stored image as standard base64 for a provider request: the `ctx` service the
/// attachment store mounts beside itself. Errors carry the store's code and message.
#[allow(clippy::type_complexity)]
pub struct RequestImageReader(
    pub Box<dyn Fn(&ImageAttachmentRef) -> Result<String, crate::LlmError> + Send + Sync>,
);

/// The base64 bytes an image block carries for the adapter (`data`, set only on the
/// transient request copy, never on the durable log).
pub fn image_request_data(block: &ContentBlock) -> Option<&str> {
    match block {
        ContentBlock::Other(map) if map.get("type").and_then(Value::as_str) == Some("image") => {
            map.get("data").and_then(Value::as_str)
        }
        _ => None,
    }
}

/// The request copy of `messages` with each image's bytes inlined as base64 (`data`),
/// after the oldest images over `max_base64_bytes` were replaced by fixed text. `None`
/// when the history has no image. A stored image that cannot be read fails the request.
pub fn inline_request_images(
    messages: &[std::sync::Arc<Message>],
    reader: &RequestImageReader,
    max_base64_bytes: u64,
) -> Result<Option<Vec<std::sync::Arc<Message>>>, crate::LlmError> {
    if !messages.iter().any(|m| content_has_image(&m.content)) {
        return Ok(None);
    }
    let offloaded = offload_request_images(messages, max_base64_bytes, &|r| r.bytes);
    let source = offloaded.as_deref().unwrap_or(messages);
    let mut failure = None;
    let inlined = map_messages(source, &mut |b| {
        if failure.is_some() {
            return None;
        }
        let reference = match b.image_ref()? {
            Ok(r) => r,
            Err(e) => {
                failure = Some(crate::LlmError::new(
                    crate::codes::INVALID_REQUEST,
                    format!("request image is malformed: {e}"),
                ));
                return None;
            }
        };
        match (reader.0)(&reference) {
            Ok(data) => {
                let ContentBlock::Other(mut map) = b.clone() else {
                    return None;
                };
                map.insert("data".into(), Value::from(data));
                Some(ContentBlock::Other(map))
            }
            Err(e) => {
                failure = Some(e);
                None
            }
        }
    });
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(inlined.or(offloaded))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn request_images_are_inlined_on_a_copy_and_read_failures_fail_the_request() {
        let id = format!("sha256:{}", "c".repeat(64));
        let history = vec![Arc::new(Message::user(
            vec![ContentBlock::text("look"), image(&id, 3)],
            crate::MessageSource::User,
        ))];
        let reader = RequestImageReader(Box::new(|r| Ok(format!("b64-of-{}", r.bytes))));
        let out = inline_request_images(&history, &reader, 1024)
            .unwrap()
            .unwrap();
        assert_eq!(image_request_data(&out[0].content[1]), Some("b64-of-3"));
        assert_eq!(image_request_data(&history[0].content[1]), None);
        let failing = RequestImageReader(Box::new(|_| {
            Err(crate::LlmError::new("ATTACHMENT_NOT_FOUND", "gone"))
        }));
        let err = inline_request_images(&history, &failing, 1024).unwrap_err();
        assert_eq!(err.failure.code, "ATTACHMENT_NOT_FOUND");
        let plain = vec![Arc::new(Message::user_text("hi"))];
        assert!(
            inline_request_images(&plain, &failing, 1024)
                .unwrap()
                .is_none()
        );
    }

    fn image(id: &str, bytes: u64) -> ContentBlock {
        ContentBlock::image(
            json!({"attachmentId": id, "mediaType": "image/png", "width": 1, "height": 2, "bytes": bytes}),
        )
    }

    #[test]
    fn references_parse_and_keep_both_key_orders() {
        let value = json!({"attachmentId": format!("sha256:{}", "a".repeat(64)), "mediaType": "image/png", "bytes": 69, "width": 1, "height": 1, "name": "red.png"});
        let r = ImageAttachmentRef::from_json(&value).unwrap();
        assert_eq!(r.sha256_hex(), Some("a".repeat(64).as_str()));
        assert_eq!(
            dsh_kernel::json::to_string(&r.to_tool_value()),
            dsh_kernel::json::to_string(&value)
        );
        assert_eq!(
            dsh_kernel::json::to_string(&r.to_store_value()),
            format!(
                r#"{{"attachmentId":"sha256:{}","mediaType":"image/png","width":1,"height":1,"bytes":69,"name":"red.png"}}"#,
                "a".repeat(64)
            )
        );
        for bad in [
            json!({"attachmentId": "x", "mediaType": "image/tiff", "bytes": 1, "width": 1, "height": 1}),
            json!({"attachmentId": "x", "mediaType": "image/png", "bytes": -1, "width": 1, "height": 1}),
            json!({"mediaType": "image/png", "bytes": 1, "width": 1, "height": 1}),
            json!("x"),
        ] {
            assert!(ImageAttachmentRef::from_json(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn text_models_see_placeholders_even_inside_tool_results() {
        let plain = Arc::new(Message::user_text("hi"));
        assert_eq!(
            project_images_for_text_model(std::slice::from_ref(&plain)),
            None
        );
        let id = format!("sha256:{}", "b".repeat(64));
        let visual = Arc::new(Message::tool_result(
            "c",
            vec![ContentBlock::text("t"), image(&id, 5)],
            false,
        ));
        let out = project_images_for_text_model(&[plain.clone(), visual]).unwrap();
        assert!(Arc::ptr_eq(&out[0], &plain));
        assert_eq!(
            out[1].content,
            vec![ContentBlock::ToolResult {
                tool_call_id: "c".into(),
                content: vec![
                    ContentBlock::text("t"),
                    ContentBlock::text(
                        "[image omitted because this model accepts text only; attachment sha256:bbbbbbbb]"
                    )
                ],
                is_error: Some(false),
            }]
        );
    }

    #[test]
    fn offloading_drops_oldest_images_first() {
        let messages: Vec<Arc<Message>> = (0..3)
            .map(|i| {
                Arc::new(Message::user(
                    vec![image(&format!("sha256:{i}"), 300)],
                    crate::MessageSource::User,
                ))
            })
            .collect();
        // 300 raw bytes are 400 base64 bytes: 1200 in all.
        assert_eq!(offload_request_images(&messages, 1200, &|r| r.bytes), None);
        let out = offload_request_images(&messages, 900, &|r| r.bytes).unwrap();
        assert_eq!(
            out[0].content,
            vec![ContentBlock::text(OFFLOADED_IMAGE_TEXT)]
        );
        assert_eq!(out[1].content, messages[1].content);
        let out = offload_request_images(&messages, 0, &|r| r.bytes).unwrap();
        assert!(out.iter().all(|m| !content_has_image(&m.content)));
    }
}
