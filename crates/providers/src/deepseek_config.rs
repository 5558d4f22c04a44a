//! The `llm-deepseek` configuration: the row config / settings-section shape, and its
//! validated, defaulted resolution.

use dsh_llm::RetryPolicy;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::response_limit::resolve_max_response_bytes;
use crate::retry_policy::{MAX_TIMER_DELAY_MS, resolve_retry_policy};
use crate::serialize::{DeepSeekEffort, Thinking};

/// The environment variable naming the default credential.
pub const DEFAULT_API_KEY_ENV: &str = "DEEPSEEK_API_KEY";
/// The environment variable that may supply the endpoint.
pub const BASE_URL_ENV: &str = "DEEPSEEK_BASE_URL";
/// The public endpoint of the chat-completions route (0.1's plugin).
pub const PUBLIC_BASE_URL: &str = "https://api.deepseek.com";
/// The public endpoint of DeepSeek's Messages API (0.2's plugin); `/v1/messages` is
/// appended (`/messages` alone when the base already ends in `/v1`).
pub const PUBLIC_MESSAGES_BASE_URL: &str = "https://api.deepseek.com/anthropic";

/// Which upstream release's `llm-deepseek` plugin a row names; they differ only in defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeepSeekRelease {
    /// `@deepseek-ai/dsh-llm-deepseek` (0.1.x): chat completions at `https://api.deepseek.com`,
    /// the V4 catalog.
    V01,
    /// `@deepseek-ai/dsh-llm-deepseek-api-key` (0.2.x): DeepSeek's Messages API at
    /// `https://api.deepseek.com/anthropic`, the catalog led by `deepseek-flash`.
    V02,
}
pub const DEFAULT_MAX_TOKENS: u64 = 256_000;
pub const DEFAULT_CONTEXT_WINDOW: u64 = 1_000_000;
/// Two minutes of provider silence fail an attempt (upstream waits five; with one TIMEOUT
/// retry a dead provider now fails a step within about four minutes, not thirty).
pub const DEFAULT_STREAM_IDLE_TIMEOUT_MS: u64 = 120_000;
/// The overall deadline of one attempt; keep-alive comments do not extend it.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 900_000;
const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// One catalog entry. Image knobs (`imagePixelBudget`, `imageMaxBytes`, `imageDetail`) are
/// kept verbatim in `extra` and ignored: this port has no image path yet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeepSeekModelEntry {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// `text` and/or `image`; defaults to `[text]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_modalities: Option<Vec<String>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl DeepSeekModelEntry {
    fn named(id: &str, name: &str, modalities: Option<Vec<String>>) -> Self {
        Self {
            id: id.into(),
            name: Some(name.into()),
            context_window: Some(DEFAULT_CONTEXT_WINDOW),
            input_modalities: modalities,
            ..Self::default()
        }
    }

    /// The declared input modalities (default `[text]`).
    pub fn modalities(&self) -> Vec<String> {
        self.input_modalities
            .clone()
            .unwrap_or_else(|| vec!["text".into()])
    }
}

/// The default catalog of `release`.
pub fn release_models(release: DeepSeekRelease) -> Vec<DeepSeekModelEntry> {
    match release {
        DeepSeekRelease::V01 => default_models(),
        DeepSeekRelease::V02 => messages_models(),
    }
}

/// 0.2's catalog: `deepseek-flash` (text and images; a changed system prompt or an added
/// tool travels in the history rather than rewriting the prefix) and `deepseek-v4-pro`.
pub fn messages_models() -> Vec<DeepSeekModelEntry> {
    let mut flash = DeepSeekModelEntry::named(
        "deepseek-flash",
        "DeepSeek-V4.1-Flash",
        Some(vec!["text".into(), "image".into()]),
    );
    flash
        .extra
        .insert("systemPromptUpdate".into(), Value::from("in-history"));
    flash
        .extra
        .insert("toolUpdate".into(), Value::from("addition-only"));
    let mut pro = DeepSeekModelEntry::named("deepseek-v4-pro", "DeepSeek-V4-Pro", None);
    pro.description = Some(
        "The larger model: slower and pricier, for hard reasoning and long agentic coding work."
            .into(),
    );
    vec![flash, pro]
}

/// 0.1's catalog: V4 Flash, V4 Pro and V4 Flash Vision Exp, each with a 1M window.
pub fn default_models() -> Vec<DeepSeekModelEntry> {
    vec![
        DeepSeekModelEntry::named("deepseek-v4-flash", "DeepSeek-V4-Flash", None),
        DeepSeekModelEntry::named("deepseek-v4-pro", "DeepSeek-V4-Pro", None),
        DeepSeekModelEntry::named(
            "deepseek-v4-flash-vision-exp",
            "DeepSeek-V4-Flash-Vision-Exp",
            Some(vec!["text".into(), "image".into()]),
        ),
    ]
}

/// Upstream's `llm-deepseek` keys for its Files API uploads and image offloading (0.1's
/// compositions set them too): accepted with a warning, since they tune what this build
/// does not do.
pub const UPSTREAM_KEYS_WITHOUT_EFFECT: &[(&str, &str)] = &[
    ("fileExpiresAfterSeconds", FILES_API),
    ("fileQuotaCleanupBatch", FILES_API),
    ("fileRefreshMarginSeconds", FILES_API),
    ("filesApiTimeoutMs", FILES_API),
    ("maxRequestFilesBytes", FILES_API),
    ("maxInlineRequestImageBytes", FILES_API),
    ("imageOffloadByteQuantum", IMAGE_OFFLOAD),
    ("imageOffloadCountQuantum", IMAGE_OFFLOAD),
    ("inlineImageOffloadByteQuantum", IMAGE_OFFLOAD),
    ("maxImagesPerRequest", IMAGE_OFFLOAD),
];
const FILES_API: &str =
    "this build sends images inline in the request and never uploads them to DeepSeek's Files API";
const IMAGE_OFFLOAD: &str = "this build does not offload images from a request that is too large (image-offload compaction is not part of it)";

/// The `llm-deepseek` row config, doubling as the settings-section shape. Every field is
/// optional; any other key is an error (upstream's Files API knobs are accepted by the row
/// loader with a warning, [`UPSTREAM_KEYS_WITHOUT_EFFECT`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeepSeekConfig {
    /// Credential reference resolved per request (default `DEEPSEEK_API_KEY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Endpoint base; else `$DEEPSEEK_BASE_URL`, else `https://api.deepseek.com`.
    #[serde(rename = "baseURL", default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Wire protocol: `openai-completions` or `anthropic-messages` (DeepSeek's dialect, as
    /// upstream 0.2.1 speaks it: `POST <baseURL>/v1/messages` with `thinking: {type}` and
    /// `output_config: {effort}`). The default is the release's: chat completions for
    /// 0.1's plugin name, Messages for 0.2's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// Deployment thinking policy; `disabled` limits every request to effort `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
    /// Default effort (acts as `high` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<DeepSeekEffort>,
    /// Default output cap (256,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Context window of models without their own (1,000,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_context_window: Option<u64>,
    /// The catalog; an explicit list replaces the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<DeepSeekModelEntry>>,
    /// Maximum provider silence while one read is outstanding (120,000 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_idle_timeout_ms: Option<u64>,
    /// Overall deadline of one attempt (900,000 ms); nothing resets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout_ms: Option<u64>,
    /// Most bytes one response may carry (128 MiB); past it the attempt fails with
    /// `RESPONSE_TOO_LARGE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<u64>,
    /// `{mode: normal|always, maxRetries?, retryableCodes?, backoff?}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<Value>,
}

/// Validated connection facts of one configuration generation.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedDeepSeek {
    /// Whether requests speak the Anthropic Messages protocol (`api: anthropic-messages`).
    pub messages_api: bool,
    pub api_key_env: String,
    pub base_url: String,
    pub thinking: Option<Thinking>,
    pub reasoning_effort: Option<DeepSeekEffort>,
    pub max_tokens: u64,
    pub default_context_window: u64,
    pub models: Vec<DeepSeekModelEntry>,
    pub stream_idle_timeout_ms: u64,
    pub request_timeout_ms: u64,
    pub max_response_bytes: u64,
    pub retry_policy: RetryPolicy,
}

impl DeepSeekConfig {
    /// Parses a raw config value (row config merged with settings).
    pub fn from_value(value: &Value) -> Result<Self, String> {
        serde_path_to_error::deserialize(value).map_err(|e| {
            format!(
                "llm-deepseek: invalid configuration at {}: {}",
                e.path(),
                e.inner()
            )
        })
    }

    /// Validates and defaults with 0.1's defaults. `env` supplies `DEEPSEEK_BASE_URL`.
    pub fn resolve(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ResolvedDeepSeek, String> {
        self.resolve_for(DeepSeekRelease::V01, env)
    }

    /// Validates and defaults with the defaults of `release`.
    pub fn resolve_for(
        &self,
        release: DeepSeekRelease,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ResolvedDeepSeek, String> {
        if self.thinking == Some(Thinking::Disabled)
            && self
                .reasoning_effort
                .is_some_and(|e| e != DeepSeekEffort::Off)
        {
            return Err(
                "llm-deepseek: with thinking disabled, reasoningEffort can only be \"off\"; remove reasoningEffort or enable thinking".into()
            );
        }
        if self.default_context_window == Some(0) {
            return Err("llm-deepseek: defaultContextWindow must be a positive integer".into());
        }
        if self
            .max_tokens
            .is_some_and(|n| n == 0 || n > MAX_SAFE_INTEGER)
        {
            return Err("llm-deepseek: maxTokens must be a positive safe integer".into());
        }
        let stream_idle_timeout_ms = self
            .stream_idle_timeout_ms
            .unwrap_or(DEFAULT_STREAM_IDLE_TIMEOUT_MS);
        if !(1..=MAX_TIMER_DELAY_MS).contains(&stream_idle_timeout_ms) {
            return Err(format!(
                "llm-deepseek: streamIdleTimeoutMs must be between 1 and {MAX_TIMER_DELAY_MS} milliseconds"
            ));
        }
        let request_timeout_ms = self
            .request_timeout_ms
            .unwrap_or(DEFAULT_REQUEST_TIMEOUT_MS);
        if !(1..=MAX_TIMER_DELAY_MS).contains(&request_timeout_ms) {
            return Err(format!(
                "llm-deepseek: requestTimeoutMs must be between 1 and {MAX_TIMER_DELAY_MS} milliseconds"
            ));
        }
        let max_response_bytes =
            resolve_max_response_bytes(self.max_response_bytes, "llm-deepseek:")?;
        let models = match &self.models {
            None => release_models(release),
            Some(models) => {
                validate_models(models)?;
                models.clone()
            }
        };
        let api_key_env = self
            .api_key_env
            .clone()
            .unwrap_or_else(|| DEFAULT_API_KEY_ENV.into());
        if api_key_env.is_empty() {
            return Err("llm-deepseek: apiKeyEnv must not be empty".into());
        }
        let messages_api = match self.api.as_deref() {
            None => release == DeepSeekRelease::V02,
            Some("openai-completions") => false,
            Some("anthropic-messages") => true,
            Some(other) => {
                return Err(format!(
                    "llm-deepseek: api must be \"openai-completions\" or \"anthropic-messages\", not \"{other}\""
                ));
            }
        };
        Ok(ResolvedDeepSeek {
            messages_api,
            api_key_env,
            base_url: self
                .base_url
                .clone()
                .or_else(|| env(BASE_URL_ENV))
                .unwrap_or_else(|| match release {
                    DeepSeekRelease::V01 => PUBLIC_BASE_URL.into(),
                    DeepSeekRelease::V02 => PUBLIC_MESSAGES_BASE_URL.into(),
                }),
            thinking: self.thinking,
            reasoning_effort: self.reasoning_effort,
            max_tokens: self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            default_context_window: self
                .default_context_window
                .unwrap_or(DEFAULT_CONTEXT_WINDOW),
            models,
            stream_idle_timeout_ms,
            request_timeout_ms,
            max_response_bytes,
            retry_policy: resolve_retry_policy(
                self.retry_policy.as_ref(),
                "llm-deepseek: retryPolicy",
            )?,
        })
    }
}

fn validate_models(models: &[DeepSeekModelEntry]) -> Result<(), String> {
    for (i, model) in models.iter().enumerate() {
        let id = &model.id;
        if id.is_empty() {
            return Err("llm-deepseek: catalog model ids must be non-empty".into());
        }
        if model.name.as_deref() == Some("") {
            return Err(format!(
                "llm-deepseek: catalog model \"{id}\" has an empty name"
            ));
        }
        if model.context_window == Some(0) {
            return Err(format!(
                "llm-deepseek: catalog model \"{id}\" contextWindow must be a positive integer"
            ));
        }
        if model.max_tokens == Some(0) {
            return Err(format!(
                "llm-deepseek: catalog model \"{id}\" maxTokens must be a positive integer"
            ));
        }
        let modalities = model.modalities();
        if modalities.is_empty() {
            return Err(format!(
                "llm-deepseek: catalog model \"{id}\" inputModalities must not be empty"
            ));
        }
        if modalities.iter().any(|m| m != "text" && m != "image") {
            return Err(format!(
                "llm-deepseek: catalog model \"{id}\" inputModalities must contain only \"text\" and \"image\""
            ));
        }
        if (1..modalities.len()).any(|i| modalities[..i].contains(&modalities[i])) {
            return Err(format!(
                "llm-deepseek: catalog model \"{id}\" inputModalities must not contain duplicates"
            ));
        }
        if models[..i].iter().any(|m| m.id == *id) {
            return Err(format!("llm-deepseek: duplicate catalog model \"{id}\""));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn resolve(value: Value) -> Result<ResolvedDeepSeek, String> {
        DeepSeekConfig::from_value(&value)?.resolve(&|_| None)
    }

    #[test]
    fn defaults() {
        let resolved = resolve(json!({})).expect("valid");
        assert_eq!(
            resolved,
            ResolvedDeepSeek {
                messages_api: false,
                api_key_env: "DEEPSEEK_API_KEY".into(),
                base_url: "https://api.deepseek.com".into(),
                thinking: None,
                reasoning_effort: None,
                max_tokens: 256_000,
                default_context_window: 1_000_000,
                models: default_models(),
                stream_idle_timeout_ms: 120_000,
                request_timeout_ms: 900_000,
                max_response_bytes: 128 << 20,
                retry_policy: RetryPolicy::default(),
            }
        );
        assert_eq!(
            resolved
                .models
                .iter()
                .map(|m| m.id.as_str())
                .collect::<Vec<_>>(),
            [
                "deepseek-v4-flash",
                "deepseek-v4-pro",
                "deepseek-v4-flash-vision-exp"
            ]
        );
    }

    #[test]
    fn base_url_precedence() {
        let env =
            |name: &str| (name == "DEEPSEEK_BASE_URL").then(|| "https://gw.example".to_string());
        let from_env = DeepSeekConfig::default().resolve(&env).expect("valid");
        assert_eq!(from_env.base_url, "https://gw.example");
        let config = DeepSeekConfig {
            base_url: Some("http://cfg".into()),
            ..DeepSeekConfig::default()
        };
        assert_eq!(config.resolve(&env).expect("valid").base_url, "http://cfg");
    }

    #[test]
    fn round_trips_upstream_keys_and_refuses_unknown_ones() {
        let value = json!({"apiKeyEnv": "K", "baseURL": "http://x", "thinking": "enabled", "reasoningEffort": "max",
            "maxTokens": 10, "models": [{"id": "m", "contextWindow": 5, "imageDetail": "low"}]});
        let config = DeepSeekConfig::from_value(&value).expect("parses");
        assert_eq!(config.base_url.as_deref(), Some("http://x"));
        assert_eq!(serde_json::to_value(&config).expect("json"), value);
        // The row loader strips upstream's Files API knobs (with a warning); anywhere else
        // they are as unknown as a typo.
        let err = DeepSeekConfig::from_value(&json!({"maxImagesPerReqest": 3})).unwrap_err();
        assert!(err.contains("maxImagesPerReqest"), "{err}");
    }

    #[test]
    fn validation_messages() {
        let cases = [
            (
                json!({"thinking": "disabled", "reasoningEffort": "high"}),
                "llm-deepseek: with thinking disabled, reasoningEffort can only be \"off\"; remove reasoningEffort or enable thinking",
            ),
            (
                json!({"defaultContextWindow": 0}),
                "llm-deepseek: defaultContextWindow must be a positive integer",
            ),
            (
                json!({"maxTokens": 0}),
                "llm-deepseek: maxTokens must be a positive safe integer",
            ),
            (
                json!({"streamIdleTimeoutMs": 0}),
                "llm-deepseek: streamIdleTimeoutMs must be between 1 and 2147483647 milliseconds",
            ),
            (
                json!({"models": [{"id": ""}]}),
                "llm-deepseek: catalog model ids must be non-empty",
            ),
            (
                json!({"models": [{"id": "a", "name": ""}]}),
                "llm-deepseek: catalog model \"a\" has an empty name",
            ),
            (
                json!({"models": [{"id": "a", "inputModalities": ["audio"]}]}),
                "llm-deepseek: catalog model \"a\" inputModalities must contain only \"text\" and \"image\"",
            ),
            (
                json!({"models": [{"id": "a"}, {"id": "a"}]}),
                "llm-deepseek: duplicate catalog model \"a\"",
            ),
            (
                json!({"retryPolicy": {"mode": "never"}}),
                "llm-deepseek: retryPolicy.mode must be \"normal\" or \"always\"",
            ),
        ];
        for (value, message) in cases {
            assert_eq!(resolve(value.clone()), Err(message.to_string()), "{value}");
        }
        let bad_enum = resolve(json!({"reasoningEffort": "medium"})).expect_err("bad enum");
        assert!(
            bad_enum.starts_with("llm-deepseek: invalid configuration at reasoningEffort: "),
            "{bad_enum}"
        );
    }
}
