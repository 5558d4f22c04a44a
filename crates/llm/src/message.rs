//! Messages and content blocks, with the exact JSON shapes dsh writes.
//!
//! Key order matters for byte-compatible logs: each constructor family of upstream writes
//! its own order (user/plugin: `content, source, role, id`; assistant: `role, content,
//! source, id`; tool result: `source, content, role, id`), and this module reproduces it.
//! Unknown block types and source kinds are kept verbatim (open vocabularies).

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Who speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
    System,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
        }
    }
}

/// One block of message content (open set).
#[derive(Clone, Debug, PartialEq)]
pub enum ContentBlock {
    Text {
        text: String,
    },
    Reasoning {
        text: String,
    },
    /// A tool call; `arguments` is the raw JSON text the model produced.
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    ToolResult {
        tool_call_id: String,
        content: Vec<ContentBlock>,
        is_error: Option<bool>,
    },
    /// Any other block type (images, plugin blocks), kept verbatim.
    Other(Map<String, Value>),
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    pub fn block_type(&self) -> &str {
        match self {
            ContentBlock::Text { .. } => "text",
            ContentBlock::Reasoning { .. } => "reasoning",
            ContentBlock::ToolCall { .. } => "tool-call",
            ContentBlock::ToolResult { .. } => "tool-result",
            ContentBlock::Other(map) => map.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }

    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text { text } => Some(text),
            _ => None,
        }
    }

    pub fn from_value(value: Value) -> Result<Self, String> {
        Self::from_json(&value)
    }

    /// Parses a block from borrowed JSON, copying only the strings it keeps.
    pub fn from_json(value: &Value) -> Result<Self, String> {
        let Value::Object(map) = value else {
            return Err("content block must be an object".into());
        };
        let Some(kind) = map.get("type").and_then(Value::as_str) else {
            return Err("content block needs a string `type`".into());
        };
        let known_keys = |keys: &[&str]| map.keys().all(|k| keys.contains(&k.as_str()));
        let string = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_owned);
        let block = match kind {
            "text" | "reasoning" if known_keys(&["type", "text"]) => {
                let Some(text) = string("text") else {
                    return Err(format!("{kind} block needs a string `text`"));
                };
                if kind == "text" {
                    ContentBlock::Text { text }
                } else {
                    ContentBlock::Reasoning { text }
                }
            }
            "tool-call" if known_keys(&["type", "id", "name", "arguments"]) => {
                let (Some(id), Some(name), Some(arguments)) =
                    (string("id"), string("name"), string("arguments"))
                else {
                    return Err("tool-call block needs string `id`, `name` and `arguments`".into());
                };
                ContentBlock::ToolCall {
                    id,
                    name,
                    arguments,
                }
            }
            "tool-result" if known_keys(&["type", "toolCallId", "content", "isError"]) => {
                let Some(tool_call_id) = string("toolCallId") else {
                    return Err("tool-result block needs a string `toolCallId`".into());
                };
                let Some(Value::Array(items)) = map.get("content") else {
                    return Err("tool-result block needs an array `content`".into());
                };
                let content = items
                    .iter()
                    .map(ContentBlock::from_json)
                    .collect::<Result<_, _>>()?;
                let is_error = match map.get("isError") {
                    None => None,
                    Some(Value::Bool(b)) => Some(*b),
                    Some(_) => return Err("tool-result `isError` must be a boolean".into()),
                };
                ContentBlock::ToolResult {
                    tool_call_id,
                    content,
                    is_error,
                }
            }
            _ => ContentBlock::Other(map.clone()),
        };
        Ok(block)
    }
}

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ContentBlock::Text { text } | ContentBlock::Reasoning { text } => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("type", self.block_type())?;
                m.serialize_entry("text", text)?;
                m.end()
            }
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => {
                let mut m = s.serialize_map(Some(4))?;
                m.serialize_entry("type", "tool-call")?;
                m.serialize_entry("id", id)?;
                m.serialize_entry("name", name)?;
                m.serialize_entry("arguments", arguments)?;
                m.end()
            }
            ContentBlock::ToolResult {
                tool_call_id,
                content,
                is_error,
            } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("type", "tool-result")?;
                m.serialize_entry("toolCallId", tool_call_id)?;
                m.serialize_entry("content", content)?;
                if let Some(e) = is_error {
                    m.serialize_entry("isError", e)?;
                }
                m.end()
            }
            ContentBlock::Other(map) => map.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ContentBlock::from_value(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Who produced a message (open set).
#[derive(Clone, Debug, PartialEq)]
pub enum MessageSource {
    User,
    Model {
        provider: String,
        model: String,
        replay_state: Option<Value>,
    },
    Tool {
        call_id: String,
    },
    /// Plugin sources and every other kind, kept verbatim (`kind` is always present).
    Other(Map<String, Value>),
}

impl MessageSource {
    pub fn kind(&self) -> &str {
        match self {
            MessageSource::User => "user",
            MessageSource::Model { .. } => "model",
            MessageSource::Tool { .. } => "tool",
            MessageSource::Other(map) => map.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// `{kind: "plugin", plugin, ...extra}` in that key order.
    pub fn plugin(plugin: &str, extra: impl IntoIterator<Item = (String, Value)>) -> Self {
        let mut map = Map::new();
        map.insert("kind".into(), Value::from("plugin"));
        map.insert("plugin".into(), Value::from(plugin));
        map.extend(extra);
        MessageSource::Other(map)
    }

    /// The `plugin` field of a plugin source.
    pub fn plugin_name(&self) -> Option<&str> {
        match self {
            MessageSource::Other(map) if self.kind() == "plugin" => {
                map.get("plugin").and_then(Value::as_str)
            }
            _ => None,
        }
    }

    pub fn from_value(value: Value) -> Result<Self, String> {
        Self::from_json(&value)
    }

    /// Parses a source from borrowed JSON.
    pub fn from_json(value: &Value) -> Result<Self, String> {
        let Value::Object(map) = value else {
            return Err("message source must be an object".into());
        };
        let kind = match map.get("kind") {
            Some(Value::String(k)) if !k.is_empty() => k.as_str(),
            _ => return Err("message source needs a non-empty string `kind`".into()),
        };
        let only = |keys: &[&str]| map.keys().all(|k| keys.contains(&k.as_str()));
        Ok(match kind {
            "user" if map.len() == 1 => MessageSource::User,
            "model" if only(&["kind", "provider", "model", "replayState"]) => {
                match (map.get("provider"), map.get("model")) {
                    (Some(Value::String(provider)), Some(Value::String(model))) => {
                        MessageSource::Model {
                            provider: provider.clone(),
                            model: model.clone(),
                            replay_state: map.get("replayState").cloned(),
                        }
                    }
                    _ => return Err("model source needs string `provider` and `model`".into()),
                }
            }
            "tool" if only(&["kind", "callId"]) => match map.get("callId") {
                Some(Value::String(call_id)) => MessageSource::Tool {
                    call_id: call_id.clone(),
                },
                _ => return Err("tool source needs a string `callId`".into()),
            },
            _ => MessageSource::Other(map.clone()),
        })
    }
}

impl Serialize for MessageSource {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MessageSource::User => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("kind", "user")?;
                m.end()
            }
            MessageSource::Model {
                provider,
                model,
                replay_state,
            } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("kind", "model")?;
                m.serialize_entry("provider", provider)?;
                m.serialize_entry("model", model)?;
                if let Some(r) = replay_state {
                    m.serialize_entry("replayState", r)?;
                }
                m.end()
            }
            MessageSource::Tool { call_id } => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("kind", "tool")?;
                m.serialize_entry("callId", call_id)?;
                m.end()
            }
            MessageSource::Other(map) => map.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for MessageSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        MessageSource::from_value(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// A model-visible message. Identity (`id`) is stable from inbox to log to request.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub id: String,
    pub role: Role,
    pub content: Vec<ContentBlock>,
    pub source: MessageSource,
}

/// A fresh random message id (UUID v4).
pub fn new_message_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

impl Message {
    /// A user-role message with a fresh id.
    pub fn user(content: Vec<ContentBlock>, source: MessageSource) -> Self {
        Self {
            id: new_message_id(),
            role: Role::User,
            content,
            source,
        }
    }

    /// A user-role text message from the user.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self::user(vec![ContentBlock::text(text)], MessageSource::User)
    }

    /// An assistant message with a fresh id.
    pub fn assistant(
        content: Vec<ContentBlock>,
        provider: &str,
        model: &str,
        replay_state: Option<Value>,
    ) -> Self {
        Self {
            id: new_message_id(),
            role: Role::Assistant,
            content,
            source: MessageSource::Model {
                provider: provider.into(),
                model: model.into(),
                replay_state,
            },
        }
    }

    /// The user-role message carrying one tool result.
    pub fn tool_result(call_id: &str, content: Vec<ContentBlock>, is_error: bool) -> Self {
        Self {
            id: new_message_id(),
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_call_id: call_id.into(),
                content,
                is_error: Some(is_error),
            }],
            source: MessageSource::Tool {
                call_id: call_id.into(),
            },
        }
    }

    /// Concatenated text of the `reasoning` blocks.
    pub fn reasoning_text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Reasoning { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Concatenated text of the `text` blocks.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(ContentBlock::as_text)
            .collect()
    }

    pub fn tool_calls(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => Some((id.as_str(), name.as_str(), arguments.as_str())),
            _ => None,
        })
    }

    pub fn from_value(value: Value) -> Result<Self, String> {
        Self::from_json(&value)
    }

    /// Parses a message from borrowed JSON, copying only what it keeps.
    pub fn from_json(value: &Value) -> Result<Self, String> {
        let Value::Object(map) = value else {
            return Err("message must be an object".into());
        };
        let id = match map.get("id") {
            Some(Value::String(id)) if !id.is_empty() => id.clone(),
            _ => return Err("message needs a non-empty string `id`".into()),
        };
        let role = match map.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some("system") => Role::System,
            Some(other) => return Err(format!("unknown message role \"{other}\"")),
            None => return Err("message needs a string `role`".into()),
        };
        let content = match map.get("content") {
            Some(Value::Array(items)) => items
                .iter()
                .map(ContentBlock::from_json)
                .collect::<Result<_, _>>()?,
            _ => return Err("message needs an array `content`".into()),
        };
        let source = match map.get("source") {
            Some(v) => MessageSource::from_json(v)?,
            None => return Err("message needs a `source`".into()),
        };
        Ok(Self {
            id,
            role,
            content,
            source,
        })
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(4))?;
        match (&self.role, &self.source) {
            (Role::Assistant, _) => {
                m.serialize_entry("role", self.role.as_str())?;
                m.serialize_entry("content", &self.content)?;
                m.serialize_entry("source", &self.source)?;
            }
            (_, MessageSource::Tool { .. }) => {
                m.serialize_entry("source", &self.source)?;
                m.serialize_entry("content", &self.content)?;
                m.serialize_entry("role", self.role.as_str())?;
            }
            _ => {
                m.serialize_entry("content", &self.content)?;
                m.serialize_entry("source", &self.source)?;
                m.serialize_entry("role", self.role.as_str())?;
            }
        }
        m.serialize_entry("id", &self.id)?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Message::from_value(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn roundtrip(text: &str) {
        let value: Value = serde_json::from_str(text).unwrap();
        let message = Message::from_value(value).unwrap();
        assert_eq!(dsh_kernel::json::to_string(&message.to_value()), text);
    }

    #[test]
    fn upstream_key_orders_roundtrip() {
        roundtrip(
            r#"{"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"},"role":"user","id":"u1"}"#,
        );
        roundtrip(
            r#"{"role":"assistant","content":[{"type":"reasoning","text":"r"},{"type":"tool-call","id":"c","name":"bash","arguments":"{}"}],"source":{"kind":"model","provider":"p","model":"m"},"id":"a1"}"#,
        );
        roundtrip(
            r#"{"source":{"kind":"tool","callId":"c"},"content":[{"type":"tool-result","toolCallId":"c","content":[{"type":"text","text":"ok"}],"isError":false}],"role":"user","id":"t1"}"#,
        );
        roundtrip(
            r#"{"content":[{"type":"text","text":"ctx"}],"source":{"kind":"plugin","plugin":"x","form":"snapshot","sections":[{"name":"a","text":"b"}]},"role":"user","id":"p1"}"#,
        );
        roundtrip(
            r#"{"content":[{"type":"image","attachment":{"sha256":"ab"}}],"source":{"kind":"user"},"role":"user","id":"i1"}"#,
        );
    }

    #[test]
    fn malformed_messages_are_errors() {
        for bad in [
            r#"{"role":"user","content":[],"source":{"kind":"user"}}"#,
            r#"{"id":"x","role":"robot","content":[],"source":{"kind":"user"}}"#,
            r#"{"id":"x","role":"user","content":[{"text":"no type"}],"source":{"kind":"user"}}"#,
        ] {
            assert!(
                Message::from_value(serde_json::from_str(bad).unwrap()).is_err(),
                "{bad}"
            );
        }
    }
}
