//! Typed payloads of the core events, declared in upstream's key order.

use dsh_llm::{
    AdapterDefaults, ContentBlock, LlmCallConfig, LlmFailure, Message, StreamChunk, TokenUsage,
    ToolSchema,
};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

/// Why the user (or a parent, hook, disposal) cancelled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum CancelCause {
    User,
    Parent,
    Hook { reason: String },
    Disposed,
    Legacy,
}

/// How a turn ended (open set).
#[derive(Clone, Debug, PartialEq)]
pub enum TurnEndReason {
    Completed,
    Aborted(CancelCause),
    Blocked,
    Error(LlmFailure),
    MaxTokens,
    Interrupted,
    Other(Map<String, Value>),
}

impl TurnEndReason {
    pub fn kind(&self) -> &str {
        match self {
            TurnEndReason::Completed => "completed",
            TurnEndReason::Aborted(_) => "aborted",
            TurnEndReason::Blocked => "blocked",
            TurnEndReason::Error(_) => "error",
            TurnEndReason::MaxTokens => "max-tokens",
            TurnEndReason::Interrupted => "interrupted",
            TurnEndReason::Other(m) => m.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    pub fn from_value(v: &Value) -> Option<Self> {
        let m = v.as_object()?;
        let kind = m.get("kind")?.as_str()?;
        Some(match kind {
            "completed" => TurnEndReason::Completed,
            "blocked" => TurnEndReason::Blocked,
            "max-tokens" => TurnEndReason::MaxTokens,
            "interrupted" => TurnEndReason::Interrupted,
            "aborted" => {
                TurnEndReason::Aborted(serde_json::from_value(m.get("reason")?.clone()).ok()?)
            }
            "error" => TurnEndReason::Error(serde_json::from_value(m.get("error")?.clone()).ok()?),
            _ => TurnEndReason::Other(m.clone()),
        })
    }
}

impl Serialize for TurnEndReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let TurnEndReason::Other(m) = self {
            return m.serialize(s);
        }
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("kind", self.kind())?;
        match self {
            TurnEndReason::Aborted(cause) => m.serialize_entry("reason", cause)?,
            TurnEndReason::Error(failure) => m.serialize_entry("error", failure)?,
            _ => {}
        }
        m.end()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnStart {
    pub turn: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TurnEnd {
    pub turn: u64,
    pub reason: TurnEndReason,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepMark {
    pub turn: u64,
    pub step: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AssistantChunk {
    pub turn: u64,
    pub step: u64,
    pub chunk: StreamChunk,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AssistantMessageData<'a> {
    pub turn: u64,
    pub step: u64,
    pub message: &'a Message,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<&'a TokenUsage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallData {
    pub turn: u64,
    pub step: u64,
    pub call_id: String,
    pub name: String,
    pub arguments: String,
}

/// `{name, code}` of a typed tool failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    pub name: String,
    pub code: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolResultData<'a> {
    pub turn: u64,
    pub step: u64,
    pub message: &'a Message,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'a ErrorInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<&'a Value>,
}

/// `request/header.data.header`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EpochHeader {
    pub config: LlmCallConfig,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_defaults: Option<AdapterDefaults>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolSchema>>,
}

impl EpochHeader {
    /// Canonical form: empty system/tools absent, adapter defaults only with a marker.
    pub fn canonical(mut self) -> Self {
        if self.system.as_deref() == Some("") {
            self.system = None;
        }
        if self.tools.as_ref().is_some_and(Vec::is_empty) {
            self.tools = None;
        }
        if self
            .adapter_defaults
            .as_ref()
            .is_some_and(AdapterDefaults::is_empty)
        {
            self.adapter_defaults = None;
        }
        self
    }

    /// The config a new request starts from: adapter-default-marked fields removed so the
    /// current route re-materializes its own defaults.
    pub fn proposal(&self) -> LlmCallConfig {
        let mut config = self.config.clone();
        if let Some(d) = &self.adapter_defaults {
            if d.reasoning_effort {
                config.reasoning_effort = None;
            }
            if d.max_tokens {
                config.max_tokens = None;
            }
        }
        config
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeaderReason {
    Initial,
    Resume,
    Change,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestHeaderData {
    pub header: EpochHeader,
    pub reason: HeaderReason,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestContext {
    pub provider: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum InboxTarget {
    #[serde(rename = "next-turn")]
    NextTurn,
    #[serde(rename = "next-step")]
    NextStep,
}

/// `agent/inbox/spliced` data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InboxSplice {
    pub target: InboxTarget,
    pub start: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_count: Option<u64>,
    pub inserted: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

/// Text of a list of content blocks joined by nothing (text blocks only).
pub fn text_of(blocks: &[ContentBlock]) -> String {
    blocks.iter().filter_map(ContentBlock::as_text).collect()
}

/// Serializes typed data for an append.
pub fn to_data<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}
