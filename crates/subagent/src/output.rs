//! A child's final answer: its last non-empty assistant message, else the text it streamed.

use std::sync::Arc;

use dsh_llm::{ContentBlock, Message};
use dsh_session::{Event, types};
use serde_json::Value;

/// Folds `events` (a child's own suffix) into its final assistant output, `None` when it
/// produced no text at all. An empty message (a usage-only answer cut at the token limit)
/// does not replace an earlier answer.
pub fn final_assistant_output(events: &[Arc<Event>]) -> Option<Vec<ContentBlock>> {
    let mut message: Option<Vec<ContentBlock>> = None;
    let mut partial = String::new();
    for e in events {
        if e.is(types::ASSISTANT_MESSAGE) {
            let Some(m) = e
                .data
                .as_value()
                .get("message")
                .and_then(|m| Message::from_json(m).ok())
            else {
                continue;
            };
            if !m.content.is_empty() {
                message = Some(m.content);
            }
        } else if e.is(types::ASSISTANT_CHUNK) {
            let chunk = e.data.as_value().get("chunk");
            if chunk.and_then(|c| c.get("type")).and_then(Value::as_str) == Some("text-delta")
                && let Some(t) = chunk.and_then(|c| c.get("text")).and_then(Value::as_str)
            {
                partial.push_str(t);
            }
        }
    }
    message.or_else(|| (!partial.is_empty()).then(|| vec![ContentBlock::text(partial)]))
}
