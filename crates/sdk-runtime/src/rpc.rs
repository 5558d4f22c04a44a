//! What both servers (in-process and through a gateway) read from requests and answer.

use dsh_acp::RpcError;
use serde_json::Value;

/// Every failure answers `-32603` with a plain message, as upstream's runtime does.
pub(crate) fn fail(message: impl std::fmt::Display) -> RpcError {
    RpcError {
        code: -32603,
        message: message.to_string(),
        data: None,
    }
}

pub(crate) fn str_param<'a>(params: &'a Option<Value>, key: &str) -> Option<&'a str> {
    params.as_ref()?.get(key)?.as_str()
}

/// `initialize`'s optional `maxTokens`: a positive safe integer, or absent.
pub(crate) fn max_tokens(params: &Option<Value>) -> Result<Option<u64>, RpcError> {
    match params.as_ref().and_then(|p| p.get("maxTokens")) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 && n < (1 << 53) => Ok(Some(n)),
            _ => Err(fail("initialize maxTokens must be a positive safe integer")),
        },
    }
}

/// The request's non-empty `sessionId`.
pub(crate) fn session_id(params: &Option<Value>, method: &str) -> Result<String, RpcError> {
    match str_param(params, "sessionId") {
        Some(id) if !id.is_empty() => Ok(id.to_string()),
        _ => Err(fail(format!(
            "{method} requires a non-empty sessionId string"
        ))),
    }
}

/// A prompt's `contentBlocks`, in order (none when absent).
pub(crate) fn content_blocks(params: &Option<Value>) -> impl Iterator<Item = &Value> {
    params
        .as_ref()
        .and_then(|p| p.get("contentBlocks"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The refusal of a content block of type `kind`.
pub(crate) fn unsupported_block(kind: Option<&str>) -> RpcError {
    fail(format!(
        "unsupported content block type {}",
        kind.map_or_else(|| "(none)".to_string(), |t| format!("\"{t}\""))
    ))
}
