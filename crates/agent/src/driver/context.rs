//! The runtime-context projection: dynamic facts reach the model as a user message
//! appended only when they changed, so the system prompt and history stay byte-stable.

use std::sync::Arc;

use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_prompt::{AssembledSection, CONTEXT_CLEARED};
use dsh_session::{Event, types};
use serde_json::{Value, json};

/// The plugin name runtime-context snapshots are attributed to.
pub const SNAPSHOT_PLUGIN: &str = "@deepseek-ai/dsh-system-prompt";

#[derive(Clone, Debug, PartialEq)]
enum Retained {
    /// No snapshot was ever written.
    Unset,
    /// A snapshot existed but is no longer model-visible (or was the cleared marker).
    None,
    Some {
        seq: u64,
        text: String,
    },
}

/// What the last snapshot said, and whether it is still on the surface.
#[derive(Clone, Debug)]
pub struct RuntimeContextProjection {
    retained: Retained,
}

fn snapshot_text(data: &Value) -> Option<String> {
    let content = data.get("content")?.as_array()?;
    match content.as_slice() {
        [block] => block.get("text").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

fn is_snapshot(e: &Event) -> bool {
    e.is(types::USER_MESSAGE)
        && e.data.pointer("/source/kind").and_then(Value::as_str) == Some("plugin")
        && e.data.pointer("/source/plugin").and_then(Value::as_str) == Some(SNAPSHOT_PLUGIN)
}

impl RuntimeContextProjection {
    /// Rebuilds the retained snapshot from a (restored) log.
    pub fn from_log(events: &[Arc<Event>], surface: Vec<u64>) -> Self {
        let mut retained = Retained::Unset;
        for e in events.iter().rev().filter(|e| is_snapshot(e)) {
            if retained == Retained::Unset {
                retained = Retained::None;
            }
            if surface.contains(&e.seq) {
                if let Some(text) = snapshot_text(&e.data) {
                    retained = Retained::Some { seq: e.seq, text };
                }
                break;
            }
        }
        Self { retained }
    }

    /// The snapshot message to enter now, if the facts changed since the retained one.
    /// `surface` tells whether the retained snapshot is still model-visible.
    pub fn project(
        &self,
        current: &str,
        sections: &[AssembledSection],
        surface: &[u64],
    ) -> Option<Message> {
        let retained = match &self.retained {
            Retained::Some { seq, text } if surface.contains(seq) => Some(text.as_str()),
            Retained::Some { .. } | Retained::None => None,
            Retained::Unset if current.is_empty() => return None,
            Retained::Unset => None,
        };
        let text = if current.is_empty() {
            CONTEXT_CLEARED
        } else {
            current
        };
        if retained == Some(text) {
            return None;
        }
        let source = if current.is_empty() {
            MessageSource::plugin(SNAPSHOT_PLUGIN, [])
        } else {
            let sections: Vec<Value> = sections
                .iter()
                .map(|s| json!({"name": s.name, "text": s.text}))
                .collect();
            MessageSource::plugin(
                SNAPSHOT_PLUGIN,
                [
                    ("form".to_string(), Value::from("snapshot")),
                    ("sections".to_string(), Value::Array(sections)),
                ],
            )
        };
        Some(Message::user(vec![ContentBlock::text(text)], source))
    }

    /// Records that a snapshot message was entered at `seq`.
    pub fn entered(&mut self, seq: u64, message: &Message) {
        if message.source.plugin_name() == Some(SNAPSHOT_PLUGIN) {
            self.retained = Retained::Some {
                seq,
                text: message.text(),
            };
        }
    }
}
