//! The `llm-pi-ai` adapter: routes configured in the `llm-pi-ai` section with
//! `api: anthropic-messages` (see [`AnthropicConfig`]); profiles with `api: openai-responses`
//! are served through [`crate::responses`]. Requests go to
//! `POST <baseURL>/v1/messages` with `x-api-key` and `anthropic-version`; the SSE events are
//! translated into `StreamChunk`s, thinking signatures ride the finish's `replayState` and are
//! replayed on the next request of the same route.
//!
//! HTTP errors use the shared classification (401/403 `AUTH`, 429 `RATE_LIMIT`, 529 and other
//! 5xx `SERVER`, 400 `INVALID_REQUEST`), with Anthropic's overflow wording (`prompt is too
//! long`, `exceed context limit`) recognized as `CONTEXT_WINDOW_EXCEEDED`.

pub(crate) mod config;
pub(crate) mod serialize;
pub(crate) mod translate;

use std::sync::Arc;

use dsh_llm::{
    AdapterStream, GenerateOptions, LlmAdapter, LlmError, ModelInfo, ReasoningInfo, RetryPolicy,
    codes,
};
use futures::StreamExt;

use config::PiApi;
pub use config::{
    ANTHROPIC_MESSAGES_API, ANTHROPIC_PLUGIN, AnthropicCompat, AnthropicConfig, AnthropicModel,
    AnthropicProfile, OPENAI_RESPONSES_API, ResolvedAnthropic, ResolvedAnthropicProfile,
};

use crate::deps::{ProviderDeps, usable_api_key};
use crate::error::ProviderError;
use crate::http::{header_map, user_agent};
use crate::http_error::HttpFailure;
use crate::live::LiveConfig;
use crate::serialize::{has_image, images_prepared};
use crate::transport::{HttpCall, Protocol, stream_call};

/// Whether an Anthropic error text describes a context-window overflow.
pub(crate) fn is_context_overflow(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("prompt is too long")
        || lower.contains("exceed context limit")
        || dsh_llm::is_context_window_exceeded(message)
}

/// Classifies a failed Messages response: the shared classification, plus Anthropic's
/// overflow wording on a 400.
pub(crate) fn classify_http(vendor: &str, failure: &HttpFailure<'_>) -> LlmError {
    let mut error = crate::http_error::classify(vendor, failure);
    if failure.status == 400 && is_context_overflow(&error.failure.message) {
        error.failure.code = codes::CONTEXT_WINDOW_EXCEEDED.into();
    }
    error
}

/// `<baseURL>/v1/messages` (trailing slashes of the base are dropped).
pub(crate) fn messages_url(base_url: &str) -> String {
    format!("{}/v1/messages", base_url.trim_end_matches('/'))
}

/// Streams Anthropic Messages responses for the configured routes. The route set is fixed
/// at construction; profiles are re-read per call from the live settings.
pub struct AnthropicAdapter {
    client: crate::http::HttpClients,
    live: LiveConfig<ResolvedAnthropic>,
    routes: Vec<String>,
    deps: ProviderDeps,
}

impl AnthropicAdapter {
    /// Validates `config` (merged with the current settings section, if any).
    pub fn new(config: AnthropicConfig, deps: ProviderDeps) -> Result<Self, ProviderError> {
        let base = serde_json::to_value(&config)
            .map_err(|e| ProviderError::InvalidConfig(e.to_string()))?;
        let live = LiveConfig::new(
            base,
            deps.settings.clone(),
            deps.settings_origin.as_deref(),
            ANTHROPIC_PLUGIN,
            Box::new(|raw| AnthropicConfig::from_value(raw)?.resolve()),
        )
        .map_err(ProviderError::InvalidConfig)?;
        let routes = live.current().keys().cloned().collect();
        Ok(Self {
            client: crate::http::build_client()?,
            live,
            routes,
            deps,
        })
    }

    /// The routes to register the adapter under, in configured order.
    pub fn routes(&self) -> Vec<String> {
        self.routes.clone()
    }

    fn prepare(
        &self,
        profile: &ResolvedAnthropicProfile,
        options: &GenerateOptions,
    ) -> Result<HttpCall, LlmError> {
        let vendor = profile.vendor.clone();
        let model = profile
            .model(&options.config.model)
            .ok_or_else(|| unknown_model(profile, &options.config.model))?;
        if options.messages.iter().any(|m| has_image(&m.content)) {
            if !model.input.iter().any(|m| m == "image") {
                return Err(LlmError::new(
                    "UNSUPPORTED_CONTENT",
                    format!(
                        "{vendor} model \"{}\" does not accept image input.",
                        model.id
                    ),
                ));
            }
            if !images_prepared(&options.messages) {
                return Err(LlmError::new(
                    "UNSUPPORTED_CONTENT",
                    format!("{vendor} image conversion requires the durable attachment service."),
                ));
            }
        }
        let mut headers: Vec<(String, String)> = Vec::new();
        let mut responses_key = None;
        if let Some(reference) = &profile.api_key_env {
            let key = match (self.deps.api_key)(reference) {
                Some(raw) if !raw.trim().is_empty() => {
                    usable_api_key(&raw, ANTHROPIC_PLUGIN, reference)?
                }
                _ => {
                    return Err(LlmError::new(
                        codes::MISSING_CREDENTIAL,
                        format!(
                            "{ANTHROPIC_PLUGIN}: provider route \"{}\" has no credential because its profile \
                             names {reference}, which is not set; save {reference} with the credentials service or \
                             set it in the environment dsh starts from",
                            profile.route
                        ),
                    ));
                }
            };
            if profile.api == PiApi::OpenAiResponses {
                responses_key = Some(key);
            } else {
                headers.push(("x-api-key".into(), key));
            }
        }
        if profile.api == PiApi::OpenAiResponses {
            let (headers, body) =
                crate::responses::request(options, profile, model, responses_key)?;
            let url = crate::responses::responses_url(&profile.base_url);
            return Ok(HttpCall {
                client: self.client.for_url(&url)?,
                url,
                base_url: profile.base_url.clone(),
                headers,
                body,
                idle_timeout_ms: profile.stream_idle_timeout_ms,
                request_timeout_ms: profile.request_timeout_ms,
                cancel: options.cancel.clone(),
                vendor,
                protocol: Protocol::OpenAiResponses,
                limit: response_limit(profile),
                rejection_hint: None,
                extensions: None,
            });
        }
        headers.push((
            "anthropic-version".into(),
            profile.anthropic_version.clone(),
        ));
        headers.push(("content-type".into(), "application/json".into()));
        headers.push(("accept".into(), "text/event-stream".into()));
        for (name, value) in &profile.headers {
            if !name.eq_ignore_ascii_case("user-agent") {
                headers.push((name.clone(), value.clone()));
            }
        }
        headers.push(("user-agent".into(), user_agent()));
        let headers = header_map(&headers, &vendor, &profile.base_url)?;
        let body = serialize::serialize_messages_request(options, profile, model)?;
        let url = messages_url(&profile.base_url);
        Ok(HttpCall {
            client: self.client.for_url(&url)?,
            url,
            base_url: profile.base_url.clone(),
            headers,
            body: serialize::body_text(&body, options),
            idle_timeout_ms: profile.stream_idle_timeout_ms,
            request_timeout_ms: profile.request_timeout_ms,
            cancel: options.cancel.clone(),
            vendor,
            protocol: Protocol::AnthropicMessages,
            limit: response_limit(profile),
            rejection_hint: None,
            extensions: None,
        })
    }
}

fn response_limit(profile: &ResolvedAnthropicProfile) -> crate::response_limit::ResponseLimit {
    crate::response_limit::ResponseLimit {
        bytes: profile.max_response_bytes,
        setting: format!(
            "of provider \"{}\" in the {ANTHROPIC_PLUGIN} settings",
            profile.route
        ),
    }
}

fn unknown_route(provider: &str) -> LlmError {
    LlmError::new(
        codes::NO_ADAPTER,
        format!("{ANTHROPIC_PLUGIN}: provider route \"{provider}\" is not configured"),
    )
}

fn unknown_model(profile: &ResolvedAnthropicProfile, model: &str) -> LlmError {
    LlmError::new(
        "UNKNOWN_MODEL",
        format!(
            "{ANTHROPIC_PLUGIN} provider \"{}\" has no configured model \"{model}\"",
            profile.route
        ),
    )
}

fn model_info(profile: &ResolvedAnthropicProfile, model: &str) -> Result<ModelInfo, LlmError> {
    let m = profile
        .model(model)
        .ok_or_else(|| unknown_model(profile, model))?;
    Ok(ModelInfo {
        id: m.id.clone(),
        name: Some(m.name.clone()),
        context_window: Some(m.context_window),
        default_max_tokens: Some(m.max_tokens),
        reasoning: m.efforts.clone().map(|efforts| ReasoningInfo {
            default_effort: profile.reasoning.clone().filter(|d| efforts.contains(d)),
            efforts,
        }),
        input_modalities: m.input.clone(),
    })
}

impl LlmAdapter for AnthropicAdapter {
    fn models(&self, provider: &str) -> Vec<ModelInfo> {
        let config = self.live.current();
        let Some(profile) = config.get(provider) else {
            return Vec::new();
        };
        profile
            .models
            .iter()
            .filter_map(|m| model_info(profile, &m.id).ok())
            .collect()
    }

    fn model_info(&self, provider: &str, model: &str) -> Result<ModelInfo, LlmError> {
        let config = self.live.current();
        let profile = config
            .get(provider)
            .ok_or_else(|| unknown_route(provider))?;
        model_info(profile, model)
    }

    fn retry_policy(&self, provider: &str) -> RetryPolicy {
        self.live
            .current()
            .get(provider)
            .map(|p| p.retry_policy.clone())
            .unwrap_or_default()
    }

    fn stream(&self, options: Arc<GenerateOptions>) -> AdapterStream {
        let config = self.live.current();
        let provider = options.config.provider.as_str();
        let prepared = match config.get(provider) {
            Some(profile) => self.prepare(profile, &options),
            None => Err(unknown_route(provider)),
        };
        match prepared {
            Ok(call) => stream_call(call),
            Err(error) => futures::stream::iter([Err(error)]).boxed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn failure(status: u16, body: &str) -> LlmError {
        classify_http(
            "Anthropic",
            &HttpFailure {
                status,
                retry_after: None,
                x_request_id: None,
                x_deepseek_request_id: None,
                body,
            },
        )
    }

    #[test]
    fn http_errors_classify_for_retry() {
        let body = |kind: &str, message: &str| {
            serde_json::json!({"type": "error", "error": {"type": kind, "message": message}})
                .to_string()
        };
        let cases = [
            (429, body("rate_limit_error", "Rate limited"), "RATE_LIMIT"),
            (529, body("overloaded_error", "Overloaded"), "SERVER"),
            (500, body("api_error", "Internal"), "SERVER"),
            (
                400,
                body("invalid_request_error", "messages: bad"),
                "INVALID_REQUEST",
            ),
            (
                400,
                body(
                    "invalid_request_error",
                    "prompt is too long: 210000 tokens > 200000 maximum",
                ),
                "CONTEXT_WINDOW_EXCEEDED",
            ),
            (
                400,
                body(
                    "invalid_request_error",
                    "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000",
                ),
                "CONTEXT_WINDOW_EXCEEDED",
            ),
            (
                401,
                body("authentication_error", "invalid x-api-key"),
                "AUTH",
            ),
        ];
        for (status, body, code) in cases {
            let e = failure(status, &body);
            assert_eq!(e.code(), code, "{status} {body}");
            assert_eq!(e.failure.status, Some(status));
        }
        let retryable = dsh_llm::codes::DEFAULT_RETRYABLE;
        assert!(retryable.contains(&failure(529, "").code()));
        assert!(!retryable.contains(&failure(400, "").code()));
    }

    #[test]
    fn the_url_appends_v1_messages() {
        assert_eq!(messages_url("http://h:1/"), "http://h:1/v1/messages");
    }
}
