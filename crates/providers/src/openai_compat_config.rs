//! The `openai-compatible` configuration: one profile per provider route.

use dsh_llm::RetryPolicy;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::response_limit::resolve_max_response_bytes;
use crate::retry_policy::{MAX_TIMER_DELAY_MS, resolve_retry_policy};

/// The plugin (and settings-section) name.
pub const OPENAI_COMPAT_PLUGIN: &str = "openai-compatible";
/// Context window of models that declare none.
pub const OPENAI_COMPAT_DEFAULT_CONTEXT_WINDOW: u64 = 262_144;
/// Output cap of models that declare none.
pub const OPENAI_COMPAT_DEFAULT_MAX_TOKENS: u64 = 32_768;

/// `{providers: {<route>: profile}}`; the key is the provider route.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenAiCompatConfig {
    #[serde(default)]
    pub providers: IndexMap<String, OpenAiCompatProfile>,
}

/// One plain chat-completions endpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenAiCompatProfile {
    /// Endpoint base; requests go to `<baseURL>/chat/completions`.
    #[serde(rename = "baseURL")]
    pub base_url: String,
    /// Credential reference; without one no `authorization` header is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Product name used in messages (default: the route).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The served models (non-empty, unique ids); other ids are `UNKNOWN_MODEL`.
    pub models: Vec<OpenAiCompatModel>,
    #[serde(default)]
    pub compat: OpenAiCompatSwitches,
    /// Extra request headers; the attribution `user-agent` wins over a configured one.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub headers: IndexMap<String, String>,
    /// Default 262,144.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_context_window: Option<u64>,
    /// Default 32,768.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_max_tokens: Option<u64>,
    /// Input modalities of models whose entry declares none (`text` and/or `image`;
    /// default `[text]`, never empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_input: Option<Vec<String>>,
    /// Default 120,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_idle_timeout_ms: Option<u64>,
    /// Overall deadline of one attempt; default 900,000.
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
pub struct OpenAiCompatModel {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Offered efforts (wire spellings, e.g. `["low","medium","high"]`); without it the model
    /// has no reasoning controls and an explicit effort is rejected by the runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_efforts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_reasoning_effort: Option<String>,
    /// Input modalities (`text` and/or `image`); absent or empty falls back to the
    /// profile's `defaultInput`. With `image`, image blocks are sent as `image_url` data URLs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Vec<String>>,
}

/// Which output-cap field the endpoint reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    #[default]
    MaxTokens,
    MaxCompletionTokens,
}

impl MaxTokensField {
    pub fn wire(self) -> &'static str {
        match self {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

/// Wire-compatibility switches of a plain chat-completions endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct OpenAiCompatSwitches {
    /// `max_tokens` (default) or `max_completion_tokens`.
    pub max_tokens_field: MaxTokensField,
    /// Send `stream_options: {include_usage: true}` (default true).
    pub supports_usage_in_streaming: bool,
    /// Send `reasoning_effort: <effort>` for efforts other than `off` (default false).
    pub supports_reasoning_effort: bool,
    /// Send the system prompt with role `developer` (default false).
    pub supports_developer_role: bool,
    /// Replay assistant reasoning as `reasoning_content` (default false).
    pub reasoning_passback: bool,
    /// Ask for a streamed reply (default true). `false` asks for one JSON completion, for
    /// servers that cannot stream some replies: llama-cpp-python streams no usage and no tool
    /// call its `chatml-function-calling` format chose itself. Such a reply is bounded by
    /// `requestTimeoutMs` only (it sends nothing until done; `streamIdleTimeoutMs` does not
    /// apply).
    pub stream: bool,
    /// `tool_choice` sent with the tools (default: not sent). Servers that offer tools to
    /// the model only when asked (llama-cpp-python's `chatml-function-calling`) need `auto`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
}

/// The `tool_choice` values a configuration may send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    Auto,
    Required,
    None,
}

impl ToolChoice {
    pub fn wire(self) -> &'static str {
        match self {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
            ToolChoice::None => "none",
        }
    }
}

impl Default for OpenAiCompatSwitches {
    fn default() -> Self {
        Self {
            max_tokens_field: MaxTokensField::MaxTokens,
            supports_usage_in_streaming: true,
            supports_reasoning_effort: false,
            supports_developer_role: false,
            reasoning_passback: false,
            stream: true,
            tool_choice: None,
        }
    }
}

/// A validated profile with its resolved retry policy.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedProfile {
    pub profile: OpenAiCompatProfile,
    pub stream_idle_timeout_ms: u64,
    pub request_timeout_ms: u64,
    pub max_response_bytes: u64,
    pub retry_policy: RetryPolicy,
}

impl ResolvedProfile {
    /// The input modalities of `model` (entry `input` → profile `defaultInput` → `[text]`).
    pub fn input_modalities(&self, model: &OpenAiCompatModel) -> Vec<String> {
        model
            .input
            .clone()
            .filter(|m| !m.is_empty())
            .or_else(|| self.profile.default_input.clone())
            .unwrap_or_else(|| vec!["text".into()])
    }

    /// The product name used in messages.
    pub fn vendor(&self, route: &str) -> String {
        self.profile
            .display_name
            .clone()
            .unwrap_or_else(|| route.to_string())
    }
}

/// Validated routes, in configured order.
pub type ResolvedOpenAiCompat = IndexMap<String, ResolvedProfile>;

impl OpenAiCompatConfig {
    pub fn from_value(value: &Value) -> Result<Self, String> {
        serde_path_to_error::deserialize(value).map_err(|e| {
            format!(
                "{OPENAI_COMPAT_PLUGIN}: invalid configuration at {}: {}",
                e.path(),
                e.inner()
            )
        })
    }

    pub fn resolve(&self) -> Result<ResolvedOpenAiCompat, String> {
        self.providers
            .iter()
            .map(|(route, p)| Ok((route.clone(), resolve_profile(route, p)?)))
            .collect()
    }
}

fn resolve_profile(route: &str, profile: &OpenAiCompatProfile) -> Result<ResolvedProfile, String> {
    let at = format!("{OPENAI_COMPAT_PLUGIN}: provider \"{route}\"");
    if route.is_empty() {
        return Err(format!(
            "{OPENAI_COMPAT_PLUGIN}: provider routes must be non-empty"
        ));
    }
    if profile.base_url.is_empty() {
        return Err(format!("{at} needs a baseURL"));
    }
    if profile.api_key_env.as_deref() == Some("") {
        return Err(format!("{at} apiKeyEnv must not be empty"));
    }
    if profile.models.is_empty() {
        return Err(format!("{at} needs a non-empty models list"));
    }
    if profile.default_context_window == Some(0) || profile.default_max_tokens == Some(0) {
        return Err(format!(
            "{at} defaultContextWindow and defaultMaxTokens must be positive integers"
        ));
    }
    let check_modalities = |list: &[String], what: &str| -> Result<(), String> {
        if let Some(bad) = list.iter().find(|m| *m != "text" && *m != "image") {
            return Err(format!(
                "{at} {what} may contain only \"text\" and \"image\" (found \"{bad}\")"
            ));
        }
        Ok(())
    };
    if let Some(default_input) = &profile.default_input {
        if default_input.is_empty() {
            return Err(format!("{at} defaultInput must name at least one modality"));
        }
        check_modalities(default_input, "defaultInput")?;
    }
    for (i, model) in profile.models.iter().enumerate() {
        if let Some(input) = &model.input {
            check_modalities(input, &format!("model \"{}\" input", model.id))?;
        }
        let id = &model.id;
        if id.is_empty() {
            return Err(format!("{at} model ids must be non-empty"));
        }
        if profile.models[..i].iter().any(|m| m.id == *id) {
            return Err(format!("{at} has a duplicate model \"{id}\""));
        }
        if model.context_window == Some(0) || model.max_tokens == Some(0) {
            return Err(format!(
                "{at} model \"{id}\" contextWindow and maxTokens must be positive integers"
            ));
        }
        if let Some(efforts) = &model.reasoning_efforts
            && (efforts.is_empty() || efforts.iter().any(String::is_empty))
        {
            return Err(format!(
                "{at} model \"{id}\" reasoningEfforts must be non-empty strings"
            ));
        }
        if let Some(default) = &model.default_reasoning_effort
            && !model
                .reasoning_efforts
                .as_ref()
                .is_some_and(|e| e.contains(default))
        {
            return Err(format!(
                "{at} model \"{id}\" defaultReasoningEffort must be one of its reasoningEfforts"
            ));
        }
    }
    let stream_idle_timeout_ms = profile
        .stream_idle_timeout_ms
        .unwrap_or(crate::deepseek_config::DEFAULT_STREAM_IDLE_TIMEOUT_MS);
    if !(1..=MAX_TIMER_DELAY_MS).contains(&stream_idle_timeout_ms) {
        return Err(format!(
            "{at} streamIdleTimeoutMs must be between 1 and {MAX_TIMER_DELAY_MS} milliseconds"
        ));
    }
    let request_timeout_ms = profile
        .request_timeout_ms
        .unwrap_or(crate::deepseek_config::DEFAULT_REQUEST_TIMEOUT_MS);
    if !(1..=MAX_TIMER_DELAY_MS).contains(&request_timeout_ms) {
        return Err(format!(
            "{at} requestTimeoutMs must be between 1 and {MAX_TIMER_DELAY_MS} milliseconds"
        ));
    }
    let max_response_bytes =
        resolve_max_response_bytes(profile.max_response_bytes, &format!("{at}:"))?;
    Ok(ResolvedProfile {
        profile: profile.clone(),
        stream_idle_timeout_ms,
        request_timeout_ms,
        max_response_bytes,
        retry_policy: resolve_retry_policy(
            profile.retry_policy.as_ref(),
            &format!("{at} retryPolicy"),
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn resolve(value: Value) -> Result<ResolvedOpenAiCompat, String> {
        OpenAiCompatConfig::from_value(&value)?.resolve()
    }

    #[test]
    fn parses_a_minimal_profile_with_defaults() {
        let resolved = resolve(
            json!({"providers": {"local": {"baseURL": "http://127.0.0.1:8000/v1",
            "models": [{"id": "qwen"}]}}}),
        )
        .expect("valid");
        let local = &resolved["local"];
        assert_eq!(local.profile.compat, OpenAiCompatSwitches::default());
        assert_eq!(
            (local.stream_idle_timeout_ms, local.retry_policy.clone()),
            (120_000, RetryPolicy::default())
        );
        assert_eq!(local.vendor("local"), "local");
    }

    #[test]
    fn validation_messages() {
        let profile = |extra: Value| {
            let mut p = json!({"baseURL": "http://x", "models": [{"id": "m"}]});
            crate::live::layer_settings(&mut p, extra);
            json!({"providers": {"p": p}})
        };
        let cases = [
            (
                profile(json!({"baseURL": ""})),
                "openai-compatible: provider \"p\" needs a baseURL",
            ),
            (
                profile(json!({"models": []})),
                "openai-compatible: provider \"p\" needs a non-empty models list",
            ),
            (
                profile(json!({"models": [{"id": "a"}, {"id": "a"}]})),
                "openai-compatible: provider \"p\" has a duplicate model \"a\"",
            ),
            (
                profile(json!({"models": [{"id": "a", "defaultReasoningEffort": "high"}]})),
                "openai-compatible: provider \"p\" model \"a\" defaultReasoningEffort must be one of its reasoningEfforts",
            ),
            (
                profile(json!({"defaultInput": []})),
                "openai-compatible: provider \"p\" defaultInput must name at least one modality",
            ),
            (
                profile(json!({"models": [{"id": "a", "input": ["text", "audio"]}]})),
                "openai-compatible: provider \"p\" model \"a\" input may contain only \"text\" and \"image\" (found \"audio\")",
            ),
            (
                profile(json!({"retryPolicy": {"mode": "x"}})),
                "openai-compatible: provider \"p\" retryPolicy.mode must be \"normal\" or \"always\"",
            ),
        ];
        for (value, message) in cases {
            assert_eq!(
                resolve(value.clone()).map(|_| ()),
                Err(message.to_string()),
                "{value}"
            );
        }
        let unknown =
            resolve(profile(json!({"compat": {"thinkingFormat": "x"}}))).expect_err("unknown key");
        assert!(unknown.starts_with("openai-compatible: invalid configuration at providers.p.compat.thinkingFormat: unknown field"), "{unknown}");
    }

    #[test]
    fn input_modalities_resolve_entry_then_route_default_then_text() {
        let resolved = resolve(json!({"providers": {"p": {"baseURL": "http://x",
            "defaultInput": ["text", "image"],
            "models": [{"id": "a"}, {"id": "b", "input": ["text"]}, {"id": "c", "input": []}]}}}))
        .expect("valid");
        let p = &resolved["p"];
        let of = |i: usize| p.input_modalities(&p.profile.models[i]);
        assert_eq!(of(0), vec!["text", "image"]);
        assert_eq!(of(1), vec!["text"]);
        assert_eq!(of(2), vec!["text", "image"]);
        let plain = resolve(json!({"providers": {"p": {"baseURL": "http://x",
            "models": [{"id": "a"}, {"id": "b", "input": ["text", "image"]}]}}}))
        .expect("valid");
        let p = &plain["p"];
        assert_eq!(p.input_modalities(&p.profile.models[0]), vec!["text"]);
        assert_eq!(
            p.input_modalities(&p.profile.models[1]),
            vec!["text", "image"]
        );
    }
}
