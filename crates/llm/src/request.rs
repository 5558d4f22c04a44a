//! Request shapes: call config, tool schemas, generate options, model info, retry policy.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::message::Message;

/// The request controls logged in `request/header.config`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmCallConfig {
    pub provider: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
}

impl LlmCallConfig {
    pub fn route(provider: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            model: model.into(),
            ..Self::default()
        }
    }
}

/// Which config fields an adapter filled in (markers are only ever `true`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdapterDefaults {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reasoning_effort: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub max_tokens: bool,
}

impl AdapterDefaults {
    pub fn is_empty(&self) -> bool {
        !self.reasoning_effort && !self.max_tokens
    }
}

/// A model-facing tool description.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    pub name: String,
    pub description: String,
    /// Shared: schemas are copied into every request and header, never mutated.
    pub parameters: Arc<Value>,
}

/// Why an auxiliary (non-conversation) call is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallPurpose {
    Conversation,
    Compaction,
    SessionTitle,
    /// A short side call of a plugin (memory proposals): no reasoning, like a title.
    Auxiliary,
}

impl CallPurpose {
    /// A side call that runs without reasoning (titles, memory proposals).
    pub fn is_side_call(self) -> bool {
        matches!(self, CallPurpose::SessionTitle | CallPurpose::Auxiliary)
    }
}

/// One model request, frozen once built.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub config: LlmCallConfig,
    pub messages: Vec<Arc<Message>>,
    pub system: Option<String>,
    pub tools: Option<Vec<ToolSchema>>,
    pub session_id: Option<String>,
    pub purpose: CallPurpose,
    /// Cancels the call.
    pub cancel: CancellationToken,
    /// Set for requests built by the agent loop (observers tell them from auxiliary calls).
    pub agent_loop_request: bool,
}

impl GenerateOptions {
    pub fn new(config: LlmCallConfig, messages: Vec<Arc<Message>>) -> Self {
        Self {
            config,
            messages,
            system: None,
            tools: None,
            session_id: None,
            purpose: CallPurpose::Conversation,
            cancel: CancellationToken::new(),
            agent_loop_request: false,
        }
    }
}

/// Reasoning capabilities of a model.
#[derive(Clone, Debug, PartialEq)]
pub struct ReasoningInfo {
    pub efforts: Vec<String>,
    pub default_effort: Option<String>,
}

/// What an adapter knows about one model.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ModelInfo {
    pub id: String,
    pub name: Option<String>,
    pub context_window: Option<u64>,
    pub default_max_tokens: Option<u64>,
    pub reasoning: Option<ReasoningInfo>,
    pub input_modalities: Vec<String>,
}

/// A route's retry policy, executed by the retry plugin.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    pub mode: RetryMode,
    pub max_retries: u32,
    pub retryable_codes: Vec<String>,
    pub initial_delay_ms: u64,
    pub max_delay_ms: u64,
    pub jitter_ratio: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryMode {
    Normal,
    Always,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            mode: RetryMode::Normal,
            max_retries: 5,
            retryable_codes: crate::error::codes::DEFAULT_RETRYABLE
                .iter()
                .map(|s| s.to_string())
                .collect(),
            initial_delay_ms: 500,
            max_delay_ms: 10_000,
            jitter_ratio: 0.1,
        }
    }
}

impl RetryPolicy {
    /// The stable identity of the policy, as upstream logs it in `llm/retry.policyKey`:
    /// `["normal",maxRetries,[codes…],initialDelayMs,maxDelayMs,jitterRatio]`.
    pub fn policy_key(&self) -> String {
        let mode = match self.mode {
            RetryMode::Normal => "normal",
            RetryMode::Always => "always",
        };
        let mut codes = self.retryable_codes.clone();
        codes.sort();
        let value = match self.mode {
            RetryMode::Normal => serde_json::json!([
                mode,
                self.max_retries,
                codes,
                self.initial_delay_ms,
                self.max_delay_ms,
                self.jitter_ratio
            ]),
            RetryMode::Always => {
                serde_json::json!([
                    mode,
                    self.initial_delay_ms,
                    self.max_delay_ms,
                    self.jitter_ratio
                ])
            }
        };
        dsh_kernel::json::to_string(&value)
    }
}
