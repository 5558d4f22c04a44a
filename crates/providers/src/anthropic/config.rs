//! The `llm-pi-ai` configuration, as far as this build serves it: one profile per provider
//! route, speaking the Anthropic Messages protocol (`api: anthropic-messages`, the default)
//! or the OpenAI Responses protocol (`api: openai-responses`).
//!
//! The shape follows upstream's multi-provider adapter: `{providers: {<route>: profile}}` with
//! `apiKeyEnv`, `baseURL`, `models` (`id`, `name`, `contextWindow`, `maxTokens`,
//! `reasoningEfforts`, `input`), `defaultContextWindow`, `defaultMaxTokens`, `defaultInput`,
//! `headers`, `reasoning`, `thinkingBudgets`, `cacheRetention`, `compat`
//! (`supportsTemperature`), `streamIdleTimeoutMs`, `requestTimeoutMs`, `maxResponseBytes`
//! (this build's bound on one response) and `retryPolicy`.
//! Other protocols are refused with a message naming the adapter that serves them.

use dsh_llm::RetryPolicy;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::response_limit::resolve_max_response_bytes;
use crate::retry_policy::{MAX_TIMER_DELAY_MS, resolve_retry_policy};

/// The plugin (and settings-section) name.
pub const ANTHROPIC_PLUGIN: &str = "llm-pi-ai";
/// The Anthropic Messages protocol (the default `api`).
pub const ANTHROPIC_MESSAGES_API: &str = "anthropic-messages";
/// The OpenAI Responses protocol.
pub const OPENAI_RESPONSES_API: &str = "openai-responses";
/// The endpoint of an `openai-responses` profile that names none.
pub const OPENAI_PUBLIC_BASE_URL: &str = "https://api.openai.com/v1";

/// The wire protocol of a profile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PiApi {
    #[default]
    AnthropicMessages,
    OpenAiResponses,
}
/// The endpoint of a profile that names none.
pub const ANTHROPIC_PUBLIC_BASE_URL: &str = "https://api.anthropic.com";
/// Context window of models that declare none.
pub const ANTHROPIC_DEFAULT_CONTEXT_WINDOW: u64 = 262_144;
/// Output cap of models that declare none.
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u64 = 32_768;
/// Default stream idle timeout (five minutes, as upstream's profile default).
pub const ANTHROPIC_DEFAULT_STREAM_IDLE_TIMEOUT_MS: u64 = 300_000;

/// The reasoning levels a profile may offer, in order.
pub const LEVELS: [&str; 7] = ["off", "minimal", "low", "medium", "high", "xhigh", "max"];

/// `{providers: {<route>: profile}}`; the key is the provider route.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnthropicConfig {
    #[serde(default)]
    pub providers: IndexMap<String, AnthropicProfile>,
}

/// One Anthropic Messages endpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnthropicProfile {
    /// `anthropic-messages` (default) or `openai-responses`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// Endpoint base; requests go to `<baseURL>/v1/messages`. Default
    /// `https://api.anthropic.com`.
    #[serde(rename = "baseURL", default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Credential reference (e.g. `ANTHROPIC_API_KEY`), sent as `x-api-key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    pub models: Vec<AnthropicModel>,
    #[serde(default)]
    pub compat: AnthropicCompat,
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub headers: IndexMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_context_window: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_max_tokens: Option<u64>,
    /// Input modalities of models that declare none (default `[text]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_input: Option<Vec<String>>,
    /// The deployment's default reasoning level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Thinking budget (tokens) per level; unset levels use built-in budgets.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub thinking_budgets: IndexMap<String, u64>,
    /// `none`, `short` (default: 5-minute ephemeral cache) or `long` (1 hour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_retention: Option<String>,
    /// Anthropic `anthropic-version` header (default `2023-06-01`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anthropic_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_idle_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout_ms: Option<u64>,
    /// Most bytes one response may carry; default 128 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<Value>,
}

/// One served model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnthropicModel {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// `{level: wire-or-null}` (the keys are the offered levels) or `false` (no reasoning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_efforts: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compat: Option<AnthropicCompat>,
}

/// Wire switches of the Messages protocol.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnthropicCompat {
    /// Whether `temperature` is sent (default true; never with thinking enabled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_temperature: Option<bool>,
}

/// How long the prompt cache should live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheRetention {
    None,
    Short,
    Long,
}

/// A validated model.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedAnthropicModel {
    pub id: String,
    pub name: String,
    pub context_window: u64,
    pub max_tokens: u64,
    /// The offered levels in canonical order; `None` when the model does not reason.
    pub efforts: Option<Vec<String>>,
    pub input: Vec<String>,
    pub supports_temperature: bool,
    /// The wire value of each offered level (`reasoningEfforts` values; `None` for null).
    pub wire_efforts: IndexMap<String, Option<String>>,
}

impl ResolvedAnthropicModel {
    /// The wire spelling of `level`: its configured string, else the canonical name. `off`
    /// has none unless a string is configured (`off` omits the reasoning option).
    pub fn wire_effort(&self, level: &str) -> Option<String> {
        match self.wire_efforts.get(level) {
            Some(Some(wire)) => Some(wire.clone()),
            _ if level == "off" => None,
            _ => Some(level.to_string()),
        }
    }
}

/// A validated profile.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedAnthropicProfile {
    pub route: String,
    pub api: PiApi,
    pub vendor: String,
    pub base_url: String,
    pub api_key_env: Option<String>,
    pub headers: IndexMap<String, String>,
    pub models: Vec<ResolvedAnthropicModel>,
    pub reasoning: Option<String>,
    pub thinking_budgets: IndexMap<String, u64>,
    pub cache_retention: CacheRetention,
    pub anthropic_version: String,
    pub stream_idle_timeout_ms: u64,
    pub request_timeout_ms: u64,
    pub max_response_bytes: u64,
    pub retry_policy: RetryPolicy,
}

/// Validated routes, in configured order.
pub type ResolvedAnthropic = IndexMap<String, ResolvedAnthropicProfile>;

/// The built-in thinking budget of a level.
pub fn default_budget(level: &str) -> u64 {
    match level {
        "minimal" => 1_024,
        "low" => 4_096,
        "medium" => 10_240,
        "high" => 20_480,
        _ => 32_000,
    }
}

impl ResolvedAnthropicProfile {
    pub fn model(&self, id: &str) -> Option<&ResolvedAnthropicModel> {
        self.models.iter().find(|m| m.id == id)
    }

    /// The thinking budget of `level`.
    pub fn budget(&self, level: &str) -> u64 {
        self.thinking_budgets
            .get(level)
            .copied()
            .unwrap_or_else(|| default_budget(level))
    }
}

impl AnthropicConfig {
    pub fn from_value(value: &Value) -> Result<Self, String> {
        serde_path_to_error::deserialize(value).map_err(|e| {
            format!(
                "{ANTHROPIC_PLUGIN}: invalid configuration at {}: {}",
                e.path(),
                e.inner()
            )
        })
    }

    pub fn resolve(&self) -> Result<ResolvedAnthropic, String> {
        self.providers
            .iter()
            .map(|(route, p)| Ok((route.clone(), resolve_profile(route, p)?)))
            .collect()
    }
}

fn positive(value: Option<u64>, at: &str, what: &str) -> Result<(), String> {
    if value == Some(0) {
        return Err(format!("{at} {what} must be a positive integer"));
    }
    Ok(())
}

fn efforts(value: Option<&Value>, at: &str) -> Result<Option<Vec<String>>, String> {
    match value {
        None | Some(Value::Bool(false)) => Ok(None),
        Some(Value::Object(map)) if !map.is_empty() => {
            for key in map.keys() {
                if !LEVELS.contains(&key.as_str()) {
                    return Err(format!(
                        "{at} reasoningEfforts has an unknown level \"{key}\" (levels: {})",
                        LEVELS.join(", ")
                    ));
                }
            }
            Ok(Some(
                LEVELS
                    .iter()
                    .filter(|l| map.contains_key(**l))
                    .map(|l| (*l).to_string())
                    .collect(),
            ))
        }
        Some(_) => Err(format!(
            "{at} reasoningEfforts must be false or a non-empty map of levels"
        )),
    }
}

fn resolve_profile(route: &str, p: &AnthropicProfile) -> Result<ResolvedAnthropicProfile, String> {
    let at = format!("{ANTHROPIC_PLUGIN}: provider \"{route}\"");
    if route.is_empty() {
        return Err(format!(
            "{ANTHROPIC_PLUGIN}: provider routes must be non-empty"
        ));
    }
    let api = match p.api.as_deref() {
        None | Some(ANTHROPIC_MESSAGES_API) => PiApi::AnthropicMessages,
        Some(OPENAI_RESPONSES_API) => PiApi::OpenAiResponses,
        Some(other) => {
            return Err(format!(
                "{at} api \"{other}\" is not served by this build (only \"{ANTHROPIC_MESSAGES_API}\" and \
                 \"{OPENAI_RESPONSES_API}\"; chat-completions endpoints are configured under the \
                 openai-compatible section)"
            ));
        }
    };
    if p.base_url.as_deref() == Some("") {
        return Err(format!("{at} baseURL must not be empty"));
    }
    if p.api_key_env.as_deref() == Some("") {
        return Err(format!("{at} apiKeyEnv must not be empty"));
    }
    if p.models.is_empty() {
        return Err(format!("{at} needs a non-empty models list"));
    }
    positive(p.default_context_window, &at, "defaultContextWindow")?;
    positive(p.default_max_tokens, &at, "defaultMaxTokens")?;
    if let Some(input) = &p.default_input
        && input.is_empty()
    {
        return Err(format!("{at} defaultInput must not be empty"));
    }
    for (level, budget) in &p.thinking_budgets {
        if !LEVELS.contains(&level.as_str()) || level == "off" {
            return Err(format!(
                "{at} thinkingBudgets has an unknown level \"{level}\""
            ));
        }
        if *budget < 1_024 {
            return Err(format!(
                "{at} thinkingBudgets.{level} must be at least 1024 tokens"
            ));
        }
    }
    let cache_retention = match p.cache_retention.as_deref() {
        None | Some("short") => CacheRetention::Short,
        Some("none") => CacheRetention::None,
        Some("long") => CacheRetention::Long,
        Some(other) => {
            return Err(format!(
                "{at} cacheRetention must be \"none\", \"short\" or \"long\", not \"{other}\""
            ));
        }
    };
    if let Some(level) = &p.reasoning
        && !LEVELS.contains(&level.as_str())
    {
        return Err(format!("{at} reasoning has an unknown level \"{level}\""));
    }
    let mut models = Vec::with_capacity(p.models.len());
    for (i, m) in p.models.iter().enumerate() {
        if m.id.is_empty() {
            return Err(format!("{at} model ids must be non-empty"));
        }
        if p.models[..i].iter().any(|o| o.id == m.id) {
            return Err(format!("{at} has a duplicate model \"{}\"", m.id));
        }
        models.push(resolve_model(&at, p, m)?);
    }
    let stream_idle_timeout_ms = p
        .stream_idle_timeout_ms
        .unwrap_or(ANTHROPIC_DEFAULT_STREAM_IDLE_TIMEOUT_MS);
    if !(1..=MAX_TIMER_DELAY_MS).contains(&stream_idle_timeout_ms) {
        return Err(format!(
            "{at} streamIdleTimeoutMs must be between 1 and {MAX_TIMER_DELAY_MS} milliseconds"
        ));
    }
    let request_timeout_ms = p
        .request_timeout_ms
        .unwrap_or(crate::deepseek_config::DEFAULT_REQUEST_TIMEOUT_MS);
    if !(1..=MAX_TIMER_DELAY_MS).contains(&request_timeout_ms) {
        return Err(format!(
            "{at} requestTimeoutMs must be between 1 and {MAX_TIMER_DELAY_MS} milliseconds"
        ));
    }
    let max_response_bytes = resolve_max_response_bytes(p.max_response_bytes, &format!("{at}:"))?;
    Ok(ResolvedAnthropicProfile {
        route: route.to_string(),
        api,
        vendor: p.display_name.clone().unwrap_or_else(|| route.to_string()),
        base_url: p.base_url.clone().unwrap_or_else(|| {
            match api {
                PiApi::AnthropicMessages => ANTHROPIC_PUBLIC_BASE_URL,
                PiApi::OpenAiResponses => OPENAI_PUBLIC_BASE_URL,
            }
            .to_string()
        }),
        api_key_env: p.api_key_env.clone(),
        headers: p.headers.clone(),
        models,
        reasoning: p.reasoning.clone(),
        thinking_budgets: p.thinking_budgets.clone(),
        cache_retention,
        anthropic_version: p
            .anthropic_version
            .clone()
            .unwrap_or_else(|| "2023-06-01".to_string()),
        stream_idle_timeout_ms,
        request_timeout_ms,
        max_response_bytes,
        retry_policy: resolve_retry_policy(p.retry_policy.as_ref(), &format!("{at} retryPolicy"))?,
    })
}

/// One model of a profile, its unset limits and inputs taken from the profile's defaults.
fn resolve_model(
    at: &str,
    p: &AnthropicProfile,
    m: &AnthropicModel,
) -> Result<ResolvedAnthropicModel, String> {
    let id = &m.id;
    let mat = format!("{at} model \"{id}\"");
    positive(m.context_window, &mat, "contextWindow")?;
    positive(m.max_tokens, &mat, "maxTokens")?;
    let input = match &m.input {
        Some(input) if !input.is_empty() => input.clone(),
        _ => p
            .default_input
            .clone()
            .unwrap_or_else(|| vec!["text".into()]),
    };
    Ok(ResolvedAnthropicModel {
        id: id.clone(),
        name: m.name.clone().unwrap_or_else(|| id.clone()),
        context_window: m
            .context_window
            .or(p.default_context_window)
            .unwrap_or(ANTHROPIC_DEFAULT_CONTEXT_WINDOW),
        max_tokens: m
            .max_tokens
            .or(p.default_max_tokens)
            .unwrap_or(ANTHROPIC_DEFAULT_MAX_TOKENS),
        efforts: efforts(m.reasoning_efforts.as_ref(), &mat)?,
        wire_efforts: match &m.reasoning_efforts {
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().map(str::to_owned)))
                .collect(),
            _ => IndexMap::new(),
        },
        input,
        supports_temperature: m
            .compat
            .as_ref()
            .and_then(|c| c.supports_temperature)
            .or(p.compat.supports_temperature)
            .unwrap_or(true),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn resolve(value: Value) -> Result<ResolvedAnthropic, String> {
        AnthropicConfig::from_value(&value)?.resolve()
    }

    #[test]
    fn a_minimal_profile_takes_the_defaults() {
        let r = resolve(
            json!({"providers": {"anthropic": {"apiKeyEnv": "ANTHROPIC_API_KEY",
            "models": [{"id": "claude-sonnet-4-5", "contextWindow": 200000,
                        "reasoningEfforts": {"high": "high", "off": null}}]}}}),
        )
        .unwrap();
        let p = &r["anthropic"];
        assert_eq!(p.base_url, "https://api.anthropic.com");
        assert_eq!(p.cache_retention, CacheRetention::Short);
        assert_eq!(p.stream_idle_timeout_ms, 300_000);
        let m = &p.models[0];
        assert_eq!(
            (m.context_window, m.max_tokens, m.efforts.clone()),
            (200_000, 32_768, Some(vec!["off".into(), "high".into()]))
        );
        assert_eq!(p.budget("high"), 20_480);
    }

    #[test]
    fn a_responses_profile_defaults_to_the_openai_endpoint() {
        let r = resolve(json!({"providers": {"openai": {"api": "openai-responses",
            "models": [{"id": "gpt-x", "reasoningEfforts": {"off": "none", "high": null}}]}}}))
        .unwrap();
        let p = &r["openai"];
        assert_eq!(
            (p.api, p.base_url.as_str()),
            (PiApi::OpenAiResponses, "https://api.openai.com/v1")
        );
        let m = &p.models[0];
        assert_eq!(
            (
                m.wire_effort("off"),
                m.wire_effort("high"),
                m.wire_effort("low")
            ),
            (Some("none".into()), Some("high".into()), Some("low".into()))
        );
    }

    #[test]
    fn invalid_profiles_are_refused_with_their_route() {
        let cases = [
            (
                json!({"api": "openai-completions", "models": [{"id": "m"}]}),
                "llm-pi-ai: provider \"p\" api \"openai-completions\" is not served by this build",
            ),
            (
                json!({"models": []}),
                "llm-pi-ai: provider \"p\" needs a non-empty models list",
            ),
            (
                json!({"models": [{"id": "m", "reasoningEfforts": {"turbo": null}}]}),
                "llm-pi-ai: provider \"p\" model \"m\" reasoningEfforts has an unknown level \"turbo\"",
            ),
            (
                json!({"models": [{"id": "m"}], "cacheRetention": "forever"}),
                "llm-pi-ai: provider \"p\" cacheRetention must be",
            ),
            (
                json!({"models": [{"id": "m"}], "thinkingBudgets": {"high": 10}}),
                "llm-pi-ai: provider \"p\" thinkingBudgets.high must be at least 1024 tokens",
            ),
        ];
        for (profile, message) in cases {
            let error = resolve(json!({"providers": {"p": profile}})).unwrap_err();
            assert!(error.starts_with(message), "{error}");
        }
        let unknown =
            resolve(json!({"providers": {"p": {"models": [{"id": "m"}], "transport": "ws"}}}))
                .unwrap_err();
        assert!(unknown.contains("providers.p.transport"), "{unknown}");
    }
}
