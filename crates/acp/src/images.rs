//! Inline image prompts: whether a connection may advertise them, strict decoding of ACP
//! `image` blocks, and admission into the attachment store before the prompt is queued.

use dsh_agent::AgentRef;
use dsh_attachments::{
    AdmissionError, AttachmentStore, SaveImage, admit_prompt_images, check_image_route,
    decode_prompt_image,
};
use dsh_kernel::Context;
use dsh_llm::{IMAGE_MEDIA_TYPES, ImageAttachmentRef};
use serde_json::Value;

use crate::rpc::RpcError;

/// Whether `initialize` may truthfully advertise `promptCapabilities.image`: a store is
/// mounted, it accepts at least one raster type, and the configured route declares image
/// input. Anything unknown answers `false`.
pub(crate) fn supported(root: &Context, provider: &str, model: &str) -> bool {
    let Some(store) = root.get::<AttachmentStore>() else {
        return false;
    };
    if !store
        .limits()
        .media_types
        .iter()
        .any(|m| IMAGE_MEDIA_TYPES.contains(m))
    {
        return false;
    }
    check_image_route(root, provider, model).is_ok()
}

/// Decodes one ACP `image` block (mime type and canonical base64 checked).
pub(crate) fn decode(block: &Value) -> Result<SaveImage, RpcError> {
    let mime = block.get("mimeType").and_then(Value::as_str).unwrap_or("");
    let data = block.get("data").and_then(Value::as_str).unwrap_or("");
    decode_prompt_image(mime, data, None).map_err(rpc_error)
}

fn rpc_error(e: AdmissionError) -> RpcError {
    match e {
        AdmissionError::Refused { message, .. } => RpcError::invalid_params(message),
        AdmissionError::Failed { message } => RpcError::internal(message),
    }
}

/// Checks the session's current route and stores the batch (all validated before any is
/// written); references come back in prompt order.
pub(crate) async fn admit(
    root: &Context,
    agent: &AgentRef,
    default_route: (&str, &str),
    images: Vec<SaveImage>,
) -> Result<Vec<ImageAttachmentRef>, RpcError> {
    let (provider, model) = agent.current_route(default_route);
    let root = root.clone();
    tokio::task::spawn_blocking(move || admit_prompt_images(&root, &provider, &model, &images))
        .await
        .map_err(|_| RpcError::internal("unable to persist the prompt image batch"))?
        .map_err(rpc_error)
}
