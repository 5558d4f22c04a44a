//! Construction-time errors of the adapters (request-time failures are `LlmError`s).

/// Why an adapter could not be constructed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The row config (merged with the current settings section) failed validation; the
    /// message carries upstream's `llm-deepseek: …`-style wording. Not retryable.
    #[error("{0}")]
    InvalidConfig(String),
    /// The HTTP client could not be built (TLS backend initialisation). Not retryable.
    #[error("could not build the HTTP client")]
    HttpClient(#[source] reqwest::Error),
}
