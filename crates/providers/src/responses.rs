//! The OpenAI Responses protocol for `llm-pi-ai` routes with `api: openai-responses` (served
//! by [`crate::AnthropicAdapter`], which owns the `llm-pi-ai` section). Requests go to
//! `POST <baseURL>/responses` (default base `https://api.openai.com/v1`) with
//! `Authorization: Bearer <key>`, `stream: true` and `store: false`; encrypted reasoning
//! rides the finish's `replayState` and is replayed on the next request of the same route.
//!
//! HTTP errors use the shared classification (401/403 `AUTH`, 429 `RATE_LIMIT`, 5xx
//! `SERVER`, 400 `INVALID_REQUEST`, `context_length_exceeded` → `CONTEXT_WINDOW_EXCEEDED`);
//! `response.failed` and `error` events map their `code` the same way.

pub(crate) mod serialize;
pub(crate) mod translate;

use dsh_llm::{GenerateOptions, LlmError};
use reqwest::header::HeaderMap;

use crate::anthropic::config::{ResolvedAnthropicModel, ResolvedAnthropicProfile};
use crate::http::{header_map, user_agent};

/// `<baseURL>/responses` (trailing slashes of the base are dropped).
pub(crate) fn responses_url(base_url: &str) -> String {
    format!("{}/responses", base_url.trim_end_matches('/'))
}

/// The headers and body of one Responses request; `key` is the resolved credential.
pub(crate) fn request(
    options: &GenerateOptions,
    profile: &ResolvedAnthropicProfile,
    model: &ResolvedAnthropicModel,
    key: Option<String>,
) -> Result<(HeaderMap, String), LlmError> {
    let mut headers: Vec<(String, String)> = Vec::new();
    if let Some(key) = key {
        headers.push(("authorization".into(), format!("Bearer {key}")));
    }
    headers.push(("content-type".into(), "application/json".into()));
    headers.push(("accept".into(), "text/event-stream".into()));
    for (name, value) in &profile.headers {
        if !name.eq_ignore_ascii_case("user-agent") {
            headers.push((name.clone(), value.clone()));
        }
    }
    headers.push(("user-agent".into(), user_agent()));
    let headers = header_map(&headers, &profile.vendor, &profile.base_url)?;
    let body = serialize::serialize_responses_request(options, profile, model)?;
    Ok((headers, dsh_kernel::json::to_string(&body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_appends_responses() {
        assert_eq!(
            responses_url("https://api.openai.com/v1/"),
            "https://api.openai.com/v1/responses"
        );
    }
}
