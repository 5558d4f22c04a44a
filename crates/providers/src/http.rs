//! Shared request plumbing: the HTTP client, attribution and header construction.

use dsh_llm::{LlmError, codes};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::error::ProviderError;

/// The `user-agent` every provider request carries:
/// `deepseek-harness/<dsh-providers version> (+https://github.com/deepseek-ai/deepseek-harness)`.
pub fn user_agent() -> String {
    format!(
        "deepseek-harness/{} (+https://github.com/deepseek-ai/deepseek-harness)",
        env!("CARGO_PKG_VERSION")
    )
}

/// A client without client-level timeouts: the adapters bound every wait with their own
/// idle timeout and cancellation.
pub(crate) fn build_client() -> Result<reqwest::Client, ProviderError> {
    reqwest::Client::builder()
        .build()
        .map_err(ProviderError::HttpClient)
}

/// `<baseURL>/chat/completions` (trailing slashes of the base are dropped).
pub(crate) fn completions_url(base_url: &str) -> String {
    format!("{}/chat/completions", base_url.trim_end_matches('/'))
}

/// Builds a header map in the given order. A name or value no header can carry fails the
/// request like a rejected fetch: `TRANSPORT` `<vendor> API request to <baseURL> failed`.
pub(crate) fn header_map(
    pairs: &[(String, String)],
    vendor: &str,
    base_url: &str,
) -> Result<HeaderMap, LlmError> {
    let mut headers = HeaderMap::with_capacity(pairs.len());
    for (name, value) in pairs {
        let parsed = HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
            .ok()
            .zip(HeaderValue::from_str(value).ok());
        let Some((name, value)) = parsed else {
            tracing::debug!(header = %name, "a request header cannot be sent");
            return Err(LlmError::new(
                codes::TRANSPORT,
                format!("{vendor} API request to {base_url} failed"),
            ));
        };
        headers.insert(name, value);
    }
    Ok(headers)
}
