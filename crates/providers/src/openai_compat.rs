//! A generic adapter for plain OpenAI-compatible chat-completions endpoints: the DeepSeek
//! serializer and translator with per-route compatibility switches.
//!
//! Image input is per model: a `models` entry's `input` (e.g. `[text, image]`), else the
//! profile's `defaultInput`, else `[text]` (upstream's pi-ai resolution order). A model
//! declaring `image` advertises it through [`ModelInfo::input_modalities`] (so ACP prompt
//! images and `read_image` are offered) and receives images as `image_url` data URLs; any
//! other model refuses image content with `UNSUPPORTED_CONTENT` naming the model.

use std::sync::Arc;

use dsh_llm::{
    AdapterStream, GenerateOptions, LlmAdapter, LlmError, ModelInfo, ReasoningInfo, RetryPolicy,
    codes,
};
use futures::StreamExt;

use crate::deps::{ProviderDeps, usable_api_key};
use crate::error::ProviderError;
use crate::http::{build_client, completions_url, header_map, user_agent};
use crate::live::LiveConfig;
use crate::openai_compat_config::{
    OPENAI_COMPAT_DEFAULT_CONTEXT_WINDOW, OPENAI_COMPAT_DEFAULT_MAX_TOKENS, OPENAI_COMPAT_PLUGIN,
    OpenAiCompatConfig, ResolvedOpenAiCompat, ResolvedProfile, ToolChoice,
};
use crate::serialize::{Dialect, ReasoningWire, has_image, images_prepared, serialize_request};
use crate::translate::ReasoningField;
use crate::transport::{HttpCall, stream_call};

/// Streams chat completions from the configured routes. The route set is fixed at
/// construction (register the adapter under [`OpenAiCompatAdapter::routes`]); profiles are
/// re-read per call from the live settings.
pub struct OpenAiCompatAdapter {
    client: crate::http::HttpClients,
    live: LiveConfig<ResolvedOpenAiCompat>,
    routes: Vec<String>,
    deps: ProviderDeps,
}

impl OpenAiCompatAdapter {
    /// Validates `config` (merged with the current settings section, if any).
    pub fn new(config: OpenAiCompatConfig, deps: ProviderDeps) -> Result<Self, ProviderError> {
        let base = serde_json::to_value(&config)
            .map_err(|e| ProviderError::InvalidConfig(e.to_string()))?;
        let live = LiveConfig::new(
            base,
            deps.settings.clone(),
            deps.settings_origin.as_deref(),
            OPENAI_COMPAT_PLUGIN,
            Box::new(|raw| OpenAiCompatConfig::from_value(raw)?.resolve()),
        )
        .map_err(ProviderError::InvalidConfig)?;
        let routes = live.current().keys().cloned().collect();
        Ok(Self {
            client: build_client()?,
            live,
            routes,
            deps,
        })
    }

    /// The routes to register the adapter under, in configured order.
    pub fn routes(&self) -> Vec<String> {
        self.routes.clone()
    }

    /// The configured models of `provider`.
    pub fn list_models(&self, provider: &str) -> Vec<ModelInfo> {
        let config = self.live.current();
        let Some(profile) = config.get(provider) else {
            return Vec::new();
        };
        profile
            .profile
            .models
            .iter()
            .filter_map(|m| model_info_for(profile, provider, &m.id).ok())
            .collect()
    }

    /// The credential header of a request to `profile` (none without `apiKeyEnv`).
    fn auth_headers(
        &self,
        profile: &ResolvedProfile,
        provider: &str,
    ) -> Result<Vec<(String, String)>, LlmError> {
        let mut headers: Vec<(String, String)> = Vec::new();
        if let Some(reference) = &profile.profile.api_key_env {
            let key = match (self.deps.api_key)(reference) {
                Some(raw) if !raw.trim().is_empty() => {
                    usable_api_key(&raw, OPENAI_COMPAT_PLUGIN, reference)?
                }
                _ => {
                    return Err(LlmError::new(
                        codes::MISSING_CREDENTIAL,
                        format!(
                            "{OPENAI_COMPAT_PLUGIN}: provider route \"{provider}\" has no credential because its \
                             profile names {reference}, which is not set; save {reference} with the credentials \
                             service (the Models page of dsh web does that) or set it in the environment. If the \
                             endpoint needs no authentication, remove apiKeyEnv from the profile instead"
                        ),
                    ));
                }
            };
            headers.push(("authorization".into(), format!("Bearer {key}")));
        }
        Ok(headers)
    }

    fn prepare(
        &self,
        profile: &ResolvedProfile,
        provider: &str,
        options: &GenerateOptions,
    ) -> Result<HttpCall, LlmError> {
        let vendor = profile.vendor(provider);
        let base_url = &profile.profile.base_url;
        let model = &options.config.model;
        let info = model_info_for(profile, provider, model)?;
        if options.messages.iter().any(|m| has_image(&m.content)) {
            if !info.input_modalities.iter().any(|m| m == "image") {
                return Err(LlmError::new(
                    "UNSUPPORTED_CONTENT",
                    format!(
                        "{OPENAI_COMPAT_PLUGIN} model \"{model}\" of provider \"{provider}\" does not \
                         accept image input; declare input: [text, image] on its models entry (or \
                         defaultInput on the provider) if the endpoint takes images"
                    ),
                ));
            }
            if !images_prepared(&options.messages) {
                return Err(LlmError::new(
                    "UNSUPPORTED_CONTENT",
                    format!("{vendor} image input requires the durable attachment service."),
                ));
            }
        }
        let mut headers = self.auth_headers(profile, provider)?;
        headers.push(("content-type".into(), "application/json".into()));
        let compat = &profile.profile.compat;
        let accept = if compat.stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        headers.push(("accept".into(), accept.into()));
        headers.extend(configured_headers(profile));
        let headers = header_map(&headers, &vendor, base_url)?;
        let dialect = Dialect {
            system_role: if compat.supports_developer_role {
                "developer"
            } else {
                "system"
            },
            streaming: compat.stream,
            include_usage: compat.supports_usage_in_streaming,
            tool_choice: compat.tool_choice.map(ToolChoice::wire),
            max_tokens_field: compat.max_tokens_field.wire(),
            reasoning_passback: compat.reasoning_passback,
            reasoning: if compat.supports_reasoning_effort {
                ReasoningWire::EffortField
            } else {
                ReasoningWire::None
            },
        };
        let body = serialize_request(options, &dialect)?;
        Ok(HttpCall {
            client: self.client.for_url(&completions_url(base_url))?,
            url: completions_url(base_url),
            base_url: base_url.clone(),
            headers,
            body: crate::serialize::body_text(&body, options, crate::serialize::ToolsWire::Chat),
            // A reply in one piece sends nothing until it is complete: only the request's
            // deadline bounds the wait.
            idle_timeout_ms: if compat.stream {
                profile.stream_idle_timeout_ms
            } else {
                profile.request_timeout_ms
            },
            request_timeout_ms: profile.request_timeout_ms,
            cancel: options.cancel.clone(),
            vendor,
            protocol: if compat.stream {
                crate::transport::Protocol::ChatCompletions(
                    ReasoningField::ReasoningContentOrReasoning,
                )
            } else {
                crate::transport::Protocol::ChatCompletion(
                    ReasoningField::ReasoningContentOrReasoning,
                )
            },
            limit: crate::response_limit::ResponseLimit {
                bytes: profile.max_response_bytes,
                setting: format!(
                    "of provider \"{}\" in the {OPENAI_COMPAT_PLUGIN} settings",
                    options.config.provider
                ),
            },
            rejection_hint: Some(rejection_hint(&options.config.provider, model, base_url)),
            extensions: None,
        })
    }
}

/// What to change when an endpoint rejects a request: a model it does not serve, or a
/// parameter it does not take (each has a compat switch).
fn rejection_hint(route: &str, model: &str, base_url: &str) -> crate::transport::RejectionHint {
    let (route, model, base_url) = (route.to_string(), model.to_string(), base_url.to_string());
    std::sync::Arc::new(move |failure: &dsh_llm::LlmFailure| {
        let text = failure.message.to_ascii_lowercase();
        let status = failure.status.unwrap_or(0);
        let at = format!(
            "on provider \"{route}\" in the {OPENAI_COMPAT_PLUGIN} section of settings.yaml"
        );
        // llama-cpp-python's chatml-function-calling cannot stream a call its model chose:
        // it fails after answering 200 (the stream ends before any event) or says so.
        let no_stream = || {
            format!(
                "llama-cpp-python's server fails a stream this way for a tool call its model chose and for a prompt past its context; with compat: {{stream: false}} {at} it answers, or names its error, in one reply"
            )
        };
        if failure.code == dsh_llm::codes::STREAM_CLOSED {
            return Some(format!(
                "the endpoint ended the stream before sending anything (its own log says why); {}",
                no_stream()
            ));
        }
        if text.contains("streaming") && text.contains("tool") {
            return Some(format!(
                "the endpoint cannot stream that reply; {}",
                no_stream()
            ));
        }
        if matches!(status, 400 | 422) {
            if text.contains("tool_choice") {
                return Some(format!(
                    "the endpoint does not take that tool_choice: remove compat.toolChoice (or pick auto, required or none) {at}"
                ));
            }
            // The first parameter named in the refusal, and the switch that drops it.
            const SWITCHES: [(&str, &str, &str); 6] = [
                ("stream_options", "supportsUsageInStreaming", "false"),
                ("reasoning_effort", "supportsReasoningEffort", "false"),
                ("max_completion_tokens", "maxTokensField", "max_tokens"),
                ("max_tokens", "maxTokensField", "max_completion_tokens"),
                ("developer", "supportsDeveloperRole", "false"),
                ("reasoning_content", "reasoningPassback", "false"),
            ];
            if let Some((_, name, value)) = SWITCHES.iter().find(|(p, _, _)| text.contains(p)) {
                return Some(format!(
                    "the endpoint does not take that parameter: set compat: {{{name}: {value}}} {at}"
                ));
            }
        }
        let unknown_model = text.contains("model")
            && [
                "not found",
                "does not exist",
                "not exist",
                "unknown",
                "no such",
                "invalid model",
            ]
            .iter()
            .any(|w| text.contains(w));
        if unknown_model || status == 404 {
            return Some(format!(
                "provider \"{route}\" may not serve model \"{model}\" at {base_url}: `dsh models --probe` lists what it serves; fix the models list of \"{route}\" (or its baseURL, which should end where /chat/completions begins, such as …/v1) in the {OPENAI_COMPAT_PLUGIN} section of settings.yaml"
            ));
        }
        None
    })
}

/// The profile's configured headers, then the attribution user agent (which wins over a
/// configured one).
fn configured_headers(profile: &ResolvedProfile) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = profile
        .profile
        .headers
        .iter()
        .filter(|(name, _)| !name.eq_ignore_ascii_case("user-agent"))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    headers.push(("user-agent".into(), user_agent()));
    headers
}

fn unknown_route(provider: &str) -> LlmError {
    LlmError::new(
        codes::NO_ADAPTER,
        format!("{OPENAI_COMPAT_PLUGIN}: provider route \"{provider}\" is not configured"),
    )
}

fn model_info_for(
    profile: &ResolvedProfile,
    provider: &str,
    model: &str,
) -> Result<ModelInfo, LlmError> {
    let p = &profile.profile;
    let entry = p.models.iter().find(|m| m.id == model).ok_or_else(|| {
        LlmError::new(
            "UNKNOWN_MODEL",
            format!(
                "{OPENAI_COMPAT_PLUGIN} provider \"{provider}\" has no configured model \"{model}\""
            ),
        )
    })?;
    Ok(ModelInfo {
        id: model.into(),
        name: Some(entry.name.clone().unwrap_or_else(|| model.into())),
        context_window: Some(
            entry
                .context_window
                .or(p.default_context_window)
                .unwrap_or(OPENAI_COMPAT_DEFAULT_CONTEXT_WINDOW),
        ),
        default_max_tokens: Some(
            entry
                .max_tokens
                .or(p.default_max_tokens)
                .unwrap_or(OPENAI_COMPAT_DEFAULT_MAX_TOKENS),
        ),
        reasoning: entry
            .reasoning_efforts
            .clone()
            .map(|efforts| ReasoningInfo {
                efforts,
                default_effort: entry.default_reasoning_effort.clone(),
            }),
        input_modalities: profile.input_modalities(entry),
    })
}

impl LlmAdapter for OpenAiCompatAdapter {
    fn models(&self, provider: &str) -> Vec<ModelInfo> {
        self.list_models(provider)
    }

    fn served_models(
        &self,
        provider: &str,
    ) -> Option<dsh_kernel::BoxFuture<'static, Result<Vec<String>, LlmError>>> {
        let config = self.live.current();
        let profile = config.get(provider)?;
        let base_url = profile.profile.base_url.trim_end_matches('/').to_string();
        let url = format!("{base_url}/models");
        let vendor = profile.vendor(provider);
        let prepared = self.auth_headers(profile, provider).and_then(|mut h| {
            h.push(("accept".into(), "application/json".into()));
            h.extend(configured_headers(profile));
            Ok((
                header_map(&h, &vendor, &base_url)?,
                self.client.for_url(&url)?,
            ))
        });
        Some(Box::pin(async move {
            let (headers, client) = prepared?;
            let failed =
                |what: String| LlmError::new(codes::TRANSPORT, format!("GET {url}: {what}"));
            let response = client
                .get(&url)
                .headers(headers)
                .timeout(std::time::Duration::from_secs(10))
                .send()
                .await
                .map_err(|e| failed(e.to_string()))?;
            let status = response.status();
            if !status.is_success() {
                return Err(failed(format!("HTTP {status}")));
            }
            // A listing is small; a larger answer is not a listing.
            let body = response.bytes().await.map_err(|e| failed(e.to_string()))?;
            if body.len() > 8 << 20 {
                return Err(failed(format!(
                    "{} bytes is too large for a model list",
                    body.len()
                )));
            }
            let value: serde_json::Value =
                serde_json::from_slice(&body).map_err(|e| failed(format!("not JSON: {e}")))?;
            let ids = value["data"]
                .as_array()
                .or_else(|| value["models"].as_array())
                .ok_or_else(|| failed("no `data` list of models in the answer".into()))?
                .iter()
                .filter_map(|m| m["id"].as_str().or_else(|| m["name"].as_str()))
                .map(str::to_owned)
                .collect();
            Ok(ids)
        }))
    }

    fn model_info(&self, provider: &str, model: &str) -> Result<ModelInfo, LlmError> {
        let config = self.live.current();
        let profile = config
            .get(provider)
            .ok_or_else(|| unknown_route(provider))?;
        model_info_for(profile, provider, model)
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
            Some(profile) => self.prepare(profile, provider, &options),
            None => Err(unknown_route(provider)),
        };
        match prepared {
            Ok(call) => stream_call(call),
            Err(error) => futures::stream::iter([Err(error)]).boxed(),
        }
    }
}

#[cfg(test)]
mod tests;
