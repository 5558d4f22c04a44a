//! Inline image prompts: whether a connection may advertise them, strict decoding of ACP
//! `image` blocks, and admission into the attachment store before the prompt is queued.

use dsh_agent::AgentRef;
use dsh_attachments::{AttachmentStore, SaveImage, decode_canonical_base64};
use dsh_kernel::Context;
use dsh_llm::{IMAGE_MEDIA_TYPES, ImageAttachmentRef, LlmRuntime};
use serde_json::Value;

use crate::rpc::RpcError;

/// Whether `initialize` may truthfully advertise `promptCapabilities.image`: a store is
/// mounted, it accepts at least one raster type, and the configured route declares image
/// input. Anything unknown answers `false`.
pub(crate) fn supported(root: &Context, provider: &str, model: &str) -> bool {
    let (Some(store), Some(llm)) = (root.get::<AttachmentStore>(), root.get::<LlmRuntime>()) else {
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
    llm.model_info(provider, model)
        .is_ok_and(|info| info.input_modalities.iter().any(|m| m == "image"))
}

/// Decodes one ACP `image` block (mime type and canonical base64 checked).
pub(crate) fn decode(block: &Value) -> Result<SaveImage, RpcError> {
    let mime = block.get("mimeType").and_then(Value::as_str).unwrap_or("");
    if !IMAGE_MEDIA_TYPES.contains(&mime) {
        return Err(RpcError::invalid_params(
            "image mimeType must be image/png, image/jpeg, image/webp, or image/gif",
        ));
    }
    let data = block.get("data").and_then(Value::as_str).unwrap_or("");
    let data = decode_canonical_base64(data)
        .map_err(|_| RpcError::invalid_params("image data must be canonical base64"))?;
    Ok(SaveImage {
        data,
        media_type: mime.to_string(),
        name: None,
    })
}

/// Checks the session's current route and stores the batch (all validated before any is
/// written); references come back in prompt order.
pub(crate) async fn admit(
    root: &Context,
    agent: &AgentRef,
    default_route: (&str, &str),
    images: Vec<SaveImage>,
) -> Result<Vec<ImageAttachmentRef>, RpcError> {
    let Some(store) = root.get::<AttachmentStore>() else {
        return Err(RpcError::invalid_params("no attachment store is mounted"));
    };
    let routed = agent
        .session()
        .read(|s| s.request_header().map(|h| h.config.clone()));
    let options = agent.options();
    let provider = routed
        .as_ref()
        .map(|c| c.provider.clone())
        .or(options.provider)
        .unwrap_or_else(|| default_route.0.to_string());
    let model = routed
        .as_ref()
        .map(|c| c.model.clone())
        .or(options.model)
        .unwrap_or_else(|| default_route.1.to_string());
    let Some(llm) = root.get::<LlmRuntime>() else {
        return Err(RpcError::invalid_params(
            "the current model route could not be resolved for image input",
        ));
    };
    let info = llm.model_info(&provider, &model).map_err(|_| {
        RpcError::internal("the current model route could not be verified for image input")
    })?;
    if !info.input_modalities.iter().any(|m| m == "image") {
        return Err(RpcError::invalid_params(format!(
            "model \"{model}\" does not declare image input"
        )));
    }
    let saved = tokio::task::spawn_blocking(move || store.save_images(&images))
        .await
        .map_err(|_| RpcError::internal("unable to persist the prompt image batch"))?;
    saved.map_err(|e| {
        if e.code.is_admission() {
            RpcError::invalid_params(e.message)
        } else {
            RpcError::internal("unable to persist the prompt image batch")
        }
    })
}
