//! LLM provider adapters, each in three layers: HTTP transport (reqwest, per-read idle
//! timeout, cancellation) → SSE framing → provider-neutral `StreamChunk`s.
//!
//! * [`DeepSeekAdapter`] — route `deepseek-official`, configured by [`DeepSeekConfig`]
//!   (the `llm-deepseek` section).
//! * [`OpenAiCompatAdapter`] — plain OpenAI-compatible chat-completions routes, configured by
//!   [`OpenAiCompatConfig`] (the `openai-compatible` section).
//! * [`AnthropicAdapter`] — Anthropic Messages routes (`POST <baseURL>/v1/messages`,
//!   `x-api-key`, thinking signatures replayed through the message's `replayState`),
//!   configured by [`AnthropicConfig`] (the `llm-pi-ai` section, upstream's
//!   `api: anthropic-messages` profile shape). The same section's `api: openai-responses`
//!   profiles speak the OpenAI Responses protocol (`POST <baseURL>/responses`, Bearer key,
//!   `store: false`, encrypted reasoning replayed through `replayState`).
//!
//! All take [`ProviderDeps`]: a per-request credential resolver, an optional live
//! settings source layered over the row config ([`layer_settings`]), and an environment
//! lookup. Plugin wiring (registering with `LlmRuntime`) is the host's job.

mod anthropic;
mod deepseek;
mod deepseek_config;
mod deps;
mod error;
mod http;
mod http_error;
mod kept;
mod live;
mod openai_compat;
mod openai_compat_config;
mod plugins;
mod response_limit;
mod responses;
mod retry_policy;
mod serialize;
mod sse;
mod translate;
mod transport;

pub use anthropic::{
    ANTHROPIC_MESSAGES_API, ANTHROPIC_PLUGIN, AnthropicAdapter, AnthropicCompat, AnthropicConfig,
    AnthropicModel, AnthropicProfile, OPENAI_RESPONSES_API,
};
pub use deepseek::{DEEPSEEK_PLUGIN, DEEPSEEK_ROUTE, DeepSeekAdapter};
pub use deepseek_config::{
    BASE_URL_ENV, DEFAULT_API_KEY_ENV, DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_TOKENS,
    DEFAULT_STREAM_IDLE_TIMEOUT_MS, DeepSeekConfig, DeepSeekModelEntry, DeepSeekRelease,
    PUBLIC_BASE_URL, PUBLIC_MESSAGES_BASE_URL, ResolvedDeepSeek, default_models, messages_models,
};
pub use deps::{ApiKeyResolver, EnvLookup, ProviderDeps, SettingsSource, UserIdSource};
pub use error::ProviderError;
pub use http::user_agent;
pub use live::layer_settings;
pub use openai_compat::OpenAiCompatAdapter;
pub use openai_compat_config::{
    MaxTokensField, OPENAI_COMPAT_DEFAULT_CONTEXT_WINDOW, OPENAI_COMPAT_DEFAULT_MAX_TOKENS,
    OPENAI_COMPAT_PLUGIN, OpenAiCompatConfig, OpenAiCompatModel, OpenAiCompatProfile,
    OpenAiCompatSwitches, ResolvedOpenAiCompat, ResolvedProfile, ToolChoice,
};
pub use plugins::{AnthropicPlugin, DeepSeekPlugin, OpenAiCompatPlugin, register_catalog};
pub use response_limit::DEFAULT_MAX_RESPONSE_BYTES;
pub use retry_policy::{MAX_TIMER_DELAY_MS, resolve_retry_policy};
pub use serialize::{DeepSeekEffort, Thinking};

/// Entry points for the fuzz targets (`fuzz/`).
#[doc(hidden)]
pub mod fuzzing {
    /// Feeds `bytes` to the SSE decoder in pieces split at `cuts`; returns the payloads.
    pub fn sse(bytes: &[u8], cuts: &[usize]) -> Result<Vec<String>, String> {
        let mut decoder = crate::sse::SseDecoder::new();
        let mut out = Vec::new();
        let mut start = 0;
        for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
            let end = cut.clamp(start, bytes.len());
            out.extend(
                decoder
                    .feed(&bytes[start..end])
                    .map_err(|e| e.to_string())?,
            );
            start = end;
        }
        Ok(out)
    }
}
