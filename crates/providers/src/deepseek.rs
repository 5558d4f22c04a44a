//! The DeepSeek chat-completions adapter (route `deepseek-official`).

use std::sync::Arc;

use dsh_llm::{
    AdapterStream, CallPurpose, GenerateOptions, LlmAdapter, LlmError, ModelInfo, ReasoningInfo,
    RetryPolicy, codes,
};
use futures::StreamExt;

use crate::deepseek_config::{
    DeepSeekConfig, DeepSeekRelease, PUBLIC_MESSAGES_BASE_URL, ResolvedDeepSeek,
};
use crate::deps::{ProviderDeps, usable_api_key};
use crate::error::ProviderError;
use crate::http::{build_client, completions_url, header_map, user_agent};
use crate::live::LiveConfig;
use crate::response_limit::ResponseLimit;
use crate::serialize::{
    DeepSeekEffort, Dialect, Thinking, has_image, images_prepared, serialize_request,
};
use crate::translate::ReasoningField;
use crate::transport::{HttpCall, stream_call};

/// The one route the adapter serves.
pub const DEEPSEEK_ROUTE: &str = "deepseek-official";
/// The plugin (and settings-section) name.
pub const DEEPSEEK_PLUGIN: &str = "llm-deepseek";
const VENDOR: &str = "DeepSeek";
const UNSUPPORTED_CONTENT: &str = "UNSUPPORTED_CONTENT";
const REQUEST_EXTENSION: &str = "REQUEST_EXTENSION";

/// Streams DeepSeek chat completions. Connection facts and the key are resolved once per
/// call from the live configuration; an in-flight stream keeps its snapshot.
pub struct DeepSeekAdapter {
    client: crate::http::HttpClients,
    live: LiveConfig<ResolvedDeepSeek>,
    deps: ProviderDeps,
}

impl DeepSeekAdapter {
    /// Validates `config` (merged with the current settings section, if any) and builds the
    /// adapter with 0.1's defaults. Later invalid settings snapshots keep the last good
    /// configuration.
    pub fn new(config: DeepSeekConfig, deps: ProviderDeps) -> Result<Self, ProviderError> {
        Self::for_release(config, deps, DeepSeekRelease::V01)
    }

    /// [`DeepSeekAdapter::new`] with the defaults of `release`.
    pub fn for_release(
        config: DeepSeekConfig,
        deps: ProviderDeps,
        release: DeepSeekRelease,
    ) -> Result<Self, ProviderError> {
        let base = serde_json::to_value(&config)
            .map_err(|e| ProviderError::InvalidConfig(e.to_string()))?;
        let env = deps.env.clone();
        let live = LiveConfig::new(
            base,
            deps.settings.clone(),
            deps.settings_origin.as_deref(),
            DEEPSEEK_PLUGIN,
            Box::new(move |raw| DeepSeekConfig::from_value(raw)?.resolve_for(release, &*env)),
        )
        .map_err(ProviderError::InvalidConfig)?;
        Ok(Self {
            client: build_client()?,
            live,
            deps,
        })
    }

    /// The routes to register the adapter under.
    pub fn routes() -> Vec<String> {
        vec![DEEPSEEK_ROUTE.to_string()]
    }

    /// The configuration the next call will use.
    pub fn current_config(&self) -> Arc<ResolvedDeepSeek> {
        self.live.current()
    }

    /// The advisory catalog, in configured order.
    pub fn list_models(&self) -> Vec<ModelInfo> {
        let config = self.live.current();
        config
            .models
            .iter()
            .map(|m| model_info_for(&config, &m.id))
            .collect()
    }

    fn prepare(
        &self,
        config: &ResolvedDeepSeek,
        options: &GenerateOptions,
    ) -> Result<HttpCall, LlmError> {
        let model = &options.config.model;
        if options.messages.iter().any(|m| has_image(&m.content)) {
            let accepts_images = config
                .models
                .iter()
                .find(|m| m.id == *model)
                .is_some_and(|m| m.modalities().iter().any(|x| x == "image"));
            if !accepts_images {
                return Err(LlmError::new(
                    UNSUPPORTED_CONTENT,
                    format!("DeepSeek model \"{model}\" does not accept image input."),
                ));
            }
            if !images_prepared(&options.messages) {
                return Err(LlmError::new(
                    UNSUPPORTED_CONTENT,
                    "DeepSeek image conversion requires the durable attachment service.",
                ));
            }
        }
        let reference = &config.api_key_env;
        let key = match (self.deps.api_key)(reference) {
            Some(raw) => usable_api_key(&raw, DEEPSEEK_PLUGIN, reference)?,
            None => {
                return Err(LlmError::new(
                    codes::MISSING_CREDENTIAL,
                    format!(
                        "llm-deepseek: provider route \"{DEEPSEEK_ROUTE}\" has no API key because {reference} is not \
                         set; save {reference} with the credentials service (the Models page of dsh web does that) or \
                         set it in the environment dsh starts from"
                    ),
                ));
            }
        };
        let mut headers = vec![
            ("authorization".to_string(), format!("Bearer {key}")),
            ("content-type".to_string(), "application/json".to_string()),
            ("accept".to_string(), "text/event-stream".to_string()),
            ("user-agent".to_string(), user_agent()),
        ];
        if let Some(user_id) = self.deps.user_id.as_ref().and_then(|f| f()) {
            headers.push(("x-deepseek-harness-user-id".into(), user_id));
        }
        if let Some(session_id) = &options.session_id {
            headers.push(("x-deepseek-harness-session-id".into(), session_id.clone()));
        }
        if options.purpose == CallPurpose::Compaction {
            headers.push(("x-deepseek-harness-compact".into(), "1".into()));
        }
        if config.messages_api {
            return self.prepare_messages(config, options, key, headers);
        }
        let headers = header_map(&headers, VENDOR, &config.base_url)?;
        let body = serialize_request(
            options,
            &Dialect::deepseek(config.thinking, config.reasoning_effort),
        )?;
        let (body, extensions) = self.with_extensions(
            options,
            &body.fields,
            crate::serialize::body_text(&body, options, crate::serialize::ToolsWire::Chat),
        )?;
        Ok(HttpCall {
            client: self.client.for_url(&completions_url(&config.base_url))?,
            url: completions_url(&config.base_url),
            base_url: config.base_url.clone(),
            headers,
            body,
            idle_timeout_ms: config.stream_idle_timeout_ms,
            request_timeout_ms: config.request_timeout_ms,
            cancel: options.cancel.clone(),
            vendor: VENDOR.into(),
            protocol: crate::transport::Protocol::ChatCompletions(ReasoningField::ReasoningContent),
            limit: response_limit(config),
            rejection_hint: None,
            extensions,
        })
    }
}

impl DeepSeekAdapter {
    /// The opt-in Messages request (`api: anthropic-messages`) in DeepSeek's own dialect, as
    /// upstream 0.2.1 sends it: `thinking: {type: enabled|disabled}` (no budget) with the
    /// effort in `output_config: {effort}` (absent for `off`), the system prompt as one string,
    /// no prompt-cache marks. The message list is built by the Anthropic serializer.
    fn prepare_messages(
        &self,
        config: &ResolvedDeepSeek,
        options: &GenerateOptions,
        key: String,
        mut headers: Vec<(String, String)>,
    ) -> Result<HttpCall, LlmError> {
        use crate::anthropic::config::{
            CacheRetention, ResolvedAnthropicModel, ResolvedAnthropicProfile,
        };
        let info = model_info_for(config, &options.config.model);
        let effort = messages_effort(config, options)?;
        // The Anthropic serializer builds messages and tools only: no budgets, no cache marks
        // (the effort goes in DeepSeek's own field below).
        let reasoning = ReasoningInfo {
            efforts: vec!["off".into()],
            default_effort: None,
        };
        let model = ResolvedAnthropicModel {
            id: info.id.clone(),
            name: info.id.clone(),
            context_window: info.context_window.unwrap_or(config.default_context_window),
            max_tokens: info.default_max_tokens.unwrap_or(config.max_tokens),
            efforts: Some(reasoning.efforts),
            input: info.input_modalities.clone(),
            supports_temperature: true,
            wire_efforts: Default::default(),
        };
        let profile = ResolvedAnthropicProfile {
            route: DEEPSEEK_ROUTE.into(),
            api: crate::anthropic::config::PiApi::AnthropicMessages,
            vendor: VENDOR.into(),
            base_url: config.base_url.clone(),
            api_key_env: Some(config.api_key_env.clone()),
            headers: Default::default(),
            models: vec![model.clone()],
            reasoning: reasoning.default_effort,
            thinking_budgets: Default::default(),
            cache_retention: CacheRetention::None,
            anthropic_version: "2023-06-01".into(),
            stream_idle_timeout_ms: config.stream_idle_timeout_ms,
            request_timeout_ms: config.request_timeout_ms,
            max_response_bytes: config.max_response_bytes,
            retry_policy: config.retry_policy.clone(),
        };
        headers.retain(|(name, _)| name != "authorization");
        headers.insert(0, ("x-api-key".into(), key));
        headers.insert(
            1,
            (
                "anthropic-version".into(),
                profile.anthropic_version.clone(),
            ),
        );
        let headers = header_map(&headers, VENDOR, &config.base_url)?;
        let mut body =
            crate::anthropic::serialize::serialize_with_effort(options, &profile, &model, None)?;
        deepseek_messages_dialect(&mut body.fields, effort);
        let text = crate::anthropic::serialize::body_text(&body, options);
        let (body, extensions) = self.with_extensions(options, &body.fields, text)?;
        let url = deepseek_messages_url(&config.base_url);
        let hint = messages_rejection_hint(&url, &config.base_url);
        Ok(HttpCall {
            client: self.client.for_url(&url)?,
            url,
            base_url: config.base_url.clone(),
            headers,
            body,
            idle_timeout_ms: config.stream_idle_timeout_ms,
            request_timeout_ms: config.request_timeout_ms,
            cancel: options.cancel.clone(),
            vendor: VENDOR.into(),
            protocol: crate::transport::Protocol::AnthropicMessages,
            limit: response_limit(config),
            rejection_hint: Some(hint),
            extensions,
        })
    }
}

impl DeepSeekAdapter {
    /// The request body with the fields other plugins contribute (upstream 0.2's DeepSeek
    /// request extensions), and what to tell them once the request is accepted. A field that
    /// would replace one of the request's own is an error.
    /// `text` (the written form of `body`) with the request extensions' fields added.
    fn with_extensions(
        &self,
        options: &GenerateOptions,
        body: &serde_json::Value,
        text: String,
    ) -> Result<(String, Option<dsh_llm::PreparedExtensions>), LlmError> {
        let Some(registry) = self.deps.extensions.as_ref().and_then(|source| source()) else {
            return Ok((text, None));
        };
        let prepared = registry.prepare(&dsh_llm::ExtensionRequest {
            provider: DEEPSEEK_ROUTE,
            model: &options.config.model,
            session_id: options.session_id.as_deref(),
            purpose: options.purpose,
        });
        if prepared.is_empty() {
            return Ok((text, None));
        }
        let empty = serde_json::Map::new();
        let base = body.as_object().unwrap_or(&empty);
        let text = dsh_llm::splice_fields(&text, base, &prepared.fields).map_err(|e| {
            LlmError::new(
                REQUEST_EXTENSION,
                format!("DeepSeek request extension: {e}"),
            )
        })?;
        Ok((text, Some(prepared)))
    }
}

/// The effort of one Messages request: the call's, else the deployment default, else `high`
/// (`off` when thinking is disabled); a session title asks for none. Anything but
/// `off|low|high|max`, or an effort with thinking disabled, is refused.
fn messages_effort(
    config: &ResolvedDeepSeek,
    options: &GenerateOptions,
) -> Result<DeepSeekEffort, LlmError> {
    let disabled = config.thinking == Some(Thinking::Disabled);
    let effort = match options.config.reasoning_effort.as_deref() {
        Some(requested) => DeepSeekEffort::parse(requested).ok_or_else(|| {
            LlmError::new(
                codes::UNSUPPORTED_REASONING_EFFORT,
                format!(
                    "DeepSeek Messages offers reasoning efforts off, low, high and max, not \"{requested}\""
                ),
            )
        })?,
        None if options.purpose.is_side_call() || disabled => DeepSeekEffort::Off,
        None => config.reasoning_effort.unwrap_or(DeepSeekEffort::High),
    };
    if disabled && effort != DeepSeekEffort::Off {
        return Err(LlmError::new(
            codes::UNSUPPORTED_REASONING_EFFORT,
            format!(
                "thinking is disabled for {DEEPSEEK_ROUTE}, so reasoning effort \"{}\" cannot be used (only \"off\")",
                effort.as_str()
            ),
        ));
    }
    Ok(effort)
}

/// Rewrites an Anthropic-dialect body into DeepSeek's: the system blocks become one string,
/// `thinking` carries only its switch and the effort travels in `output_config`.
fn deepseek_messages_dialect(body: &mut serde_json::Value, effort: DeepSeekEffort) {
    use serde_json::{Value, json};
    let Some(map) = body.as_object_mut() else {
        return;
    };
    if let Some(Value::Array(blocks)) = map.get("system") {
        let text: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
        let text = text.join("\n\n");
        map.insert("system".into(), Value::String(text));
    }
    // `thinking` with a budget would make temperature and max_tokens adjustments: the
    // serializer saw no effort, so neither happened.
    map.remove("thinking");
    if effort == DeepSeekEffort::Off {
        map.insert("thinking".into(), json!({"type": "disabled"}));
    } else {
        map.insert("thinking".into(), json!({"type": "enabled"}));
        map.insert("output_config".into(), json!({"effort": effort.as_str()}));
    }
}

/// What to change when the Messages endpoint is not there (404/405): a base URL of the chat
/// endpoint (0.1's `https://api.deepseek.com`, often still in `DEEPSEEK_BASE_URL`) has no
/// `/v1/messages`.
fn messages_rejection_hint(url: &str, base_url: &str) -> crate::transport::RejectionHint {
    let (url, base_url) = (url.to_string(), base_url.to_string());
    std::sync::Arc::new(move |failure: &dsh_llm::LlmFailure| {
        if !matches!(failure.status, Some(404 | 405)) {
            return None;
        }
        Some(format!(
            "no Messages API answers at {url}: the DeepSeek route speaks DeepSeek's Messages API \
             by default, whose base is {PUBLIC_MESSAGES_BASE_URL}; set DEEPSEEK_BASE_URL (or \
             baseURL in the {DEEPSEEK_PLUGIN} settings section) to it, or set `api: \
             openai-completions` there to use chat completions at {base_url}"
        ))
    })
}

/// `<base>/v1/messages`, or `<base>/messages` when the base's path already ends in `/v1`
/// (`https://api.deepseek.com/anthropic/v1` is as good a base as the root).
fn deepseek_messages_url(base_url: &str) -> String {
    let base = base_url.trim_end_matches('/');
    let host_and_path = base.split_once("://").map_or(base, |(_, rest)| rest);
    if host_and_path.contains('/') && host_and_path.ends_with("/v1") {
        format!("{base}/messages")
    } else {
        format!("{base}/v1/messages")
    }
}

fn response_limit(config: &ResolvedDeepSeek) -> ResponseLimit {
    ResponseLimit {
        bytes: config.max_response_bytes,
        setting: format!("in the {DEEPSEEK_PLUGIN} settings"),
    }
}

/// Model facts: catalog entry or an id-only text model; window and output cap fall back to
/// the deployment defaults; efforts `off|low|high|max` (default the configured effort, else
/// `high`), or only `off` when thinking is disabled.
pub(crate) fn model_info_for(config: &ResolvedDeepSeek, model: &str) -> ModelInfo {
    let entry = config.models.iter().find(|m| m.id == model);
    let reasoning = if config.thinking == Some(Thinking::Disabled) {
        ReasoningInfo {
            efforts: vec!["off".into()],
            default_effort: Some("off".into()),
        }
    } else {
        ReasoningInfo {
            efforts: DeepSeekEffort::ALL
                .iter()
                .map(|e| e.as_str().to_string())
                .collect(),
            default_effort: Some(
                config
                    .reasoning_effort
                    .unwrap_or(DeepSeekEffort::High)
                    .as_str()
                    .into(),
            ),
        }
    };
    ModelInfo {
        id: model.into(),
        name: Some(
            entry
                .and_then(|e| e.name.clone())
                .unwrap_or_else(|| model.into()),
        ),
        context_window: Some(
            entry
                .and_then(|e| e.context_window)
                .unwrap_or(config.default_context_window),
        ),
        default_max_tokens: Some(
            entry
                .and_then(|e| e.max_tokens)
                .unwrap_or(config.max_tokens),
        ),
        reasoning: Some(reasoning),
        input_modalities: entry.map_or_else(|| vec!["text".into()], |e| e.modalities()),
    }
}

impl LlmAdapter for DeepSeekAdapter {
    fn models(&self, _provider: &str) -> Vec<ModelInfo> {
        self.list_models()
    }

    fn model_info(&self, _provider: &str, model: &str) -> Result<ModelInfo, LlmError> {
        Ok(model_info_for(&self.live.current(), model))
    }

    fn retry_policy(&self, _provider: &str) -> RetryPolicy {
        self.live.current().retry_policy.clone()
    }

    fn stream(&self, options: Arc<GenerateOptions>) -> AdapterStream {
        let config = self.live.current();
        match self.prepare(&config, &options) {
            Ok(call) => stream_call(call),
            Err(error) => futures::stream::iter([Err(error)]).boxed(),
        }
    }
}

#[cfg(test)]
mod tests;
