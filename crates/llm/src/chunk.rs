//! The stream vocabulary an adapter produces (closed) and its finish reasons (open).

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::message::ContentBlock;

/// Token counts of one provider attempt. Counts are disjoint: `input_tokens` excludes
/// cached input; `reasoning_tokens` is informational and included in `output_tokens`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

/// Why a provider call failed, as recorded in finish chunks and turn ends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmFailure {
    pub message: String,
    pub code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_retry_after_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl LlmFailure {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: code.into(),
            status: None,
            provider_retry_after_ms: None,
            request_id: None,
        }
    }
}

/// How a stream ended (open set).
#[derive(Clone, Debug, PartialEq)]
pub enum FinishReason {
    Stop,
    ToolCalls,
    MaxTokens,
    Aborted(LlmFailure),
    Error(LlmFailure),
    /// A plugin-defined finish kind, kept verbatim; treated as success.
    Other(Map<String, Value>),
}

impl FinishReason {
    pub fn kind(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::ToolCalls => "tool-calls",
            FinishReason::MaxTokens => "max-tokens",
            FinishReason::Aborted(_) => "aborted",
            FinishReason::Error(_) => "error",
            FinishReason::Other(m) => m.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// The failure of an `error`/`aborted` finish.
    pub fn failure(&self) -> Option<&LlmFailure> {
        match self {
            FinishReason::Aborted(f) | FinishReason::Error(f) => Some(f),
            _ => None,
        }
    }
}

impl Serialize for FinishReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            FinishReason::Other(map) => map.serialize(s),
            _ => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("kind", self.kind())?;
                if let Some(f) = self.failure() {
                    m.serialize_entry("failure", f)?;
                }
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for FinishReason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Value::Object(mut map) = Value::deserialize(d)? else {
            return Err(serde::de::Error::custom("finish reason must be an object"));
        };
        let kind = map
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let only_kind = map.len() == 1;
        let failure = |map: &mut Map<String, Value>| -> Result<LlmFailure, D::Error> {
            let v = map
                .remove("failure")
                .ok_or_else(|| serde::de::Error::custom("missing failure"))?;
            serde_json::from_value(v).map_err(serde::de::Error::custom)
        };
        Ok(match kind.as_str() {
            "stop" if only_kind => FinishReason::Stop,
            "tool-calls" if only_kind => FinishReason::ToolCalls,
            "max-tokens" if only_kind => FinishReason::MaxTokens,
            "error" if map.len() == 2 => FinishReason::Error(failure(&mut map)?),
            "aborted" if map.len() == 2 => FinishReason::Aborted(failure(&mut map)?),
            "" => {
                return Err(serde::de::Error::custom(
                    "finish reason needs a string `kind`",
                ));
            }
            _ => FinishReason::Other(map),
        })
    }
}

/// One piece of a provider stream. Closed: adapters produce exactly these.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum StreamChunk {
    BlockStart {
        index: u32,
        #[serde(rename = "blockType")]
        block_type: String,
    },
    TextDelta {
        index: u32,
        text: String,
    },
    ReasoningDelta {
        index: u32,
        text: String,
    },
    ToolCallDelta {
        index: u32,
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(rename = "argumentsDelta")]
        arguments_delta: String,
    },
    BlockEnd {
        index: u32,
        block: ContentBlock,
    },
    Usage {
        usage: TokenUsage,
    },
    Finish {
        reason: FinishReason,
        #[serde(
            rename = "replayState",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        replay_state: Option<Value>,
    },
}

impl StreamChunk {
    pub fn finish(reason: FinishReason) -> Self {
        StreamChunk::Finish {
            reason,
            replay_state: None,
        }
    }

    pub fn error(failure: LlmFailure) -> Self {
        StreamChunk::finish(FinishReason::Error(failure))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn chunks_roundtrip_with_upstream_shapes() {
        for text in [
            r#"{"type":"block-start","index":0,"blockType":"reasoning"}"#,
            r#"{"type":"tool-call-delta","index":1,"id":"c","name":"bash","argumentsDelta":""}"#,
            r#"{"type":"tool-call-delta","index":1,"id":"c","argumentsDelta":"{"}"#,
            r#"{"type":"block-end","index":1,"block":{"type":"text","text":"DONE"}}"#,
            r#"{"type":"usage","usage":{"inputTokens":168,"outputTokens":25,"cacheReadTokens":2816,"reasoningTokens":22}}"#,
            r#"{"type":"finish","reason":{"kind":"tool-calls"}}"#,
            r#"{"type":"finish","reason":{"kind":"error","failure":{"message":"m","code":"AUTH"}}}"#,
            r#"{"type":"finish","reason":{"kind":"custom","x":1}}"#,
        ] {
            let chunk: StreamChunk = serde_json::from_str(text).unwrap();
            assert_eq!(
                dsh_kernel::json::to_string(&serde_json::to_value(&chunk).unwrap()),
                text
            );
        }
    }
}
