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
pub(crate) fn build_client() -> Result<HttpClients, ProviderError> {
    Ok(HttpClients::default())
}

/// The HTTP clients of an adapter, built on first use (client construction loads the TLS
/// roots, which a run that never calls the network should not pay for).
///
/// Remote endpoints share a connection pool. Loopback endpoints get a fresh connection
/// per request: connecting costs microseconds there, and a reused connection lets a
/// simple local server that writes its response in several segments (Nagle) wait for our
/// delayed ACK — about 40 ms per request on Linux.
#[derive(Default, Clone)]
pub(crate) struct HttpClients {
    pooled: std::sync::Arc<std::sync::OnceLock<reqwest::Client>>,
    fresh: std::sync::Arc<std::sync::OnceLock<reqwest::Client>>,
}

impl HttpClients {
    pub(crate) fn for_url(&self, url: &str) -> Result<reqwest::Client, LlmError> {
        let loopback = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .is_some_and(|h| {
                h == "localhost" || h == "[::1]" || h == "::1" || h.starts_with("127.")
            });
        let (slot, idle) = if loopback {
            (&self.fresh, 0)
        } else {
            (&self.pooled, usize::MAX)
        };
        if let Some(c) = slot.get() {
            return Ok(c.clone());
        }
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(idle)
            .build()
            .map_err(|e| {
                LlmError::new(
                    codes::TRANSPORT,
                    format!("cannot create an HTTP client: {e}"),
                )
            })?;
        Ok(slot.get_or_init(|| client).clone())
    }
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
