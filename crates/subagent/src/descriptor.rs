//! `subagent/descriptor` (format version 2): the log-only record of what kind of child a
//! session is — written once per child, never model-visible. Parsing is strict: an unknown
//! field makes the record corrupt, a version other than 2 makes it unclassifiable.

use std::sync::Arc;

use dsh_session::Event;
use serde_json::{Map, Value};

/// The event type.
pub const DESCRIPTOR_EVENT: &str = "subagent/descriptor";
/// The only version this build writes and classifies.
pub const DESCRIPTOR_VERSION: u64 = 2;

/// Tools a child keeps (`allow`) or loses (`deny`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolFilter {
    pub allow: Option<Vec<String>>,
    pub deny: Option<Vec<String>>,
}

impl ToolFilter {
    fn to_value(&self) -> Value {
        let mut m = Map::new();
        if let Some(a) = &self.allow {
            m.insert("allow".into(), Value::from(a.clone()));
        }
        if let Some(d) = &self.deny {
            m.insert("deny".into(), Value::from(d.clone()));
        }
        Value::Object(m)
    }
}

/// What a child session is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Descriptor {
    /// One delegated turn and one result (foreground calls, jobs, workflows).
    OneShot {
        provider: String,
        label: Option<String>,
    },
    /// A durable conversation the parent may continue with `send_message`.
    Continuable {
        provider: String,
        label: String,
        agent_provider: Option<String>,
        agent_model: Option<String>,
        persona: Option<String>,
        tool_filter: Option<ToolFilter>,
    },
}

/// Why a persisted descriptor could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    /// The record is malformed (an unknown field, a wrong type).
    #[error("{0}")]
    Corrupt(String),
    /// The record has another version: written by another harness, not classifiable.
    #[error("persisted subagent descriptor has unsupported version {0}")]
    Unsupported(String),
}

fn corrupt(message: impl Into<String>) -> DescriptorError {
    DescriptorError::Corrupt(message.into())
}

impl Descriptor {
    pub fn provider(&self) -> &str {
        match self {
            Descriptor::OneShot { provider, .. } | Descriptor::Continuable { provider, .. } => {
                provider
            }
        }
    }

    pub fn label(&self) -> Option<&str> {
        match self {
            Descriptor::OneShot { label, .. } => label.as_deref(),
            Descriptor::Continuable { label, .. } => Some(label),
        }
    }

    pub fn is_continuable(&self) -> bool {
        matches!(self, Descriptor::Continuable { .. })
    }

    /// The event data, keys in the order upstream writes them.
    pub fn to_data(&self) -> Value {
        let mut m = Map::new();
        m.insert("version".into(), Value::from(DESCRIPTOR_VERSION));
        match self {
            Descriptor::OneShot { provider, label } => {
                m.insert("mode".into(), Value::from("one-shot"));
                m.insert("provider".into(), Value::from(provider.clone()));
                if let Some(l) = label {
                    m.insert("label".into(), Value::from(l.clone()));
                }
            }
            Descriptor::Continuable {
                provider,
                label,
                agent_provider,
                agent_model,
                persona,
                tool_filter,
            } => {
                m.insert("mode".into(), Value::from("continuable"));
                m.insert("provider".into(), Value::from(provider.clone()));
                m.insert("label".into(), Value::from(label.clone()));
                for (k, v) in [
                    ("agentProvider", agent_provider),
                    ("agentModel", agent_model),
                    ("persona", persona),
                ] {
                    if let Some(v) = v {
                        m.insert(k.into(), Value::from(v.clone()));
                    }
                }
                if let Some(f) = tool_filter {
                    m.insert("toolFilter".into(), f.to_value());
                }
            }
        }
        Value::Object(m)
    }

    /// Parses a persisted descriptor strictly.
    pub fn parse(data: &Value) -> Result<Self, DescriptorError> {
        let Value::Object(m) = data else {
            return Err(corrupt(
                "persisted subagent descriptor payload must be an object",
            ));
        };
        let version = m
            .get("version")
            .and_then(Value::as_f64)
            .ok_or_else(|| corrupt("persisted subagent descriptor version must be a number"))?;
        if version != DESCRIPTOR_VERSION as f64 {
            return Err(DescriptorError::Unsupported(dsh_kernel::json::to_string(
                &m["version"],
            )));
        }
        let continuable = match m.get("mode").and_then(Value::as_str) {
            Some("one-shot") => false,
            Some("continuable") => true,
            _ => {
                return Err(corrupt(
                    "persisted subagent descriptor mode must be \"one-shot\" or \"continuable\"",
                ));
            }
        };
        let known: &[&str] = if continuable {
            &[
                "version",
                "mode",
                "provider",
                "label",
                "agentProvider",
                "agentModel",
                "persona",
                "toolFilter",
            ]
        } else {
            &["version", "mode", "provider", "label"]
        };
        if let Some(k) = m.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(corrupt(format!(
                "persisted subagent descriptor payload has unknown field \"{k}\""
            )));
        }
        let provider = m
            .get("provider")
            .and_then(Value::as_str)
            .ok_or_else(|| corrupt("persisted subagent descriptor provider must be a string"))?
            .to_string();
        let text = |k: &str| -> Result<Option<String>, DescriptorError> {
            match m.get(k) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(corrupt(format!(
                    "persisted subagent descriptor {k} must be a string"
                ))),
            }
        };
        if !continuable {
            return Ok(Descriptor::OneShot {
                provider,
                label: text("label")?,
            });
        }
        let label = m
            .get("label")
            .and_then(Value::as_str)
            .ok_or_else(|| corrupt("persisted subagent descriptor label must be a string"))?
            .to_string();
        let tool_filter = match m.get("toolFilter") {
            None => None,
            Some(v) => Some(parse_tool_filter(v)?),
        };
        Ok(Descriptor::Continuable {
            provider,
            label,
            agent_provider: text("agentProvider")?,
            agent_model: text("agentModel")?,
            persona: text("persona")?,
            tool_filter,
        })
    }
}

fn parse_tool_filter(v: &Value) -> Result<ToolFilter, DescriptorError> {
    let Value::Object(m) = v else {
        return Err(corrupt(
            "persisted subagent descriptor toolFilter must be an object",
        ));
    };
    if let Some(k) = m.keys().find(|k| *k != "allow" && *k != "deny") {
        return Err(corrupt(format!(
            "persisted subagent descriptor toolFilter has unknown field \"{k}\""
        )));
    }
    let list = |k: &str| -> Result<Option<Vec<String>>, DescriptorError> {
        let Some(v) = m.get(k) else { return Ok(None) };
        let bad = || {
            corrupt(format!(
                "persisted subagent descriptor toolFilter.{k} must be an array of strings"
            ))
        };
        let items = v.as_array().ok_or_else(bad)?;
        items
            .iter()
            .map(|i| i.as_str().map(str::to_owned).ok_or_else(bad))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    };
    let allow = list("allow")?;
    let deny = list("deny")?;
    if allow.is_none() && deny.is_none() {
        return Err(corrupt(
            "persisted subagent descriptor toolFilter must declare allow and/or deny",
        ));
    }
    Ok(ToolFilter { allow, deny })
}

/// The first descriptor of `events` (a child's own suffix), parsed. `Ok(None)`: none yet.
pub fn fold_first(events: &[Arc<Event>]) -> Result<Option<Descriptor>, DescriptorError> {
    match events.iter().find(|e| e.is(DESCRIPTOR_EVENT)) {
        None => Ok(None),
        Some(e) => Descriptor::parse(e.data.as_value()).map(Some),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn descriptors_round_trip_in_upstream_key_order() {
        let one = Descriptor::OneShot {
            provider: "spawn".into(),
            label: Some("Count the files".into()),
        };
        assert_eq!(
            dsh_kernel::json::to_string(&one.to_data()),
            r#"{"version":2,"mode":"one-shot","provider":"spawn","label":"Count the files"}"#
        );
        assert_eq!(Descriptor::parse(&one.to_data()).unwrap(), one);
        let unlabeled = Descriptor::OneShot {
            provider: "spawn".into(),
            label: None,
        };
        assert_eq!(
            dsh_kernel::json::to_string(&unlabeled.to_data()),
            r#"{"version":2,"mode":"one-shot","provider":"spawn"}"#
        );
        let cont = Descriptor::Continuable {
            provider: "spawn".into(),
            label: "L".into(),
            agent_provider: Some("deepseek-official".into()),
            agent_model: Some("deepseek-v4-flash".into()),
            persona: None,
            tool_filter: Some(ToolFilter {
                allow: None,
                deny: Some(vec!["bash".into()]),
            }),
        };
        assert_eq!(
            dsh_kernel::json::to_string(&cont.to_data()),
            r#"{"version":2,"mode":"continuable","provider":"spawn","label":"L","agentProvider":"deepseek-official","agentModel":"deepseek-v4-flash","toolFilter":{"deny":["bash"]}}"#
        );
        assert_eq!(Descriptor::parse(&cont.to_data()).unwrap(), cont);
    }

    #[test]
    fn parsing_is_strict() {
        let cases = [
            (
                json!([]),
                "persisted subagent descriptor payload must be an object",
            ),
            (
                json!({"version": "2"}),
                "persisted subagent descriptor version must be a number",
            ),
            (
                json!({"version": 2, "mode": "x", "provider": "p"}),
                "persisted subagent descriptor mode must be \"one-shot\" or \"continuable\"",
            ),
            (
                json!({"version": 2, "mode": "one-shot", "provider": "p", "agentModel": "m"}),
                "persisted subagent descriptor payload has unknown field \"agentModel\"",
            ),
            (
                json!({"version": 2, "mode": "continuable", "provider": "p"}),
                "persisted subagent descriptor label must be a string",
            ),
            (
                json!({"version": 2, "mode": "continuable", "provider": "p", "label": "l", "toolFilter": {}}),
                "persisted subagent descriptor toolFilter must declare allow and/or deny",
            ),
            (
                json!({"version": 2, "mode": "continuable", "provider": "p", "label": "l", "toolFilter": {"allow": [1]}}),
                "persisted subagent descriptor toolFilter.allow must be an array of strings",
            ),
        ];
        for (value, message) in cases {
            assert_eq!(
                Descriptor::parse(&value),
                Err(DescriptorError::Corrupt(message.into())),
                "{value}"
            );
        }
        assert_eq!(
            Descriptor::parse(&json!({"version": 3, "mode": "one-shot"})),
            Err(DescriptorError::Unsupported("3".into()))
        );
    }
}
