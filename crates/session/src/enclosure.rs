//! The session invariant: turn/step numbering and nesting, and which events must sit
//! inside an open turn or step. Checked before every live append (a violation vetoes it).

use std::collections::HashSet;

use serde_json::Value;

use crate::event::{Event, types};

#[derive(Debug, Clone, Default)]
pub struct Enclosure {
    open_turn: Option<u64>,
    open_step: Option<u64>,
    last_turn: u64,
    last_step: u64,
    pending_calls: HashSet<String>,
}

impl Enclosure {
    pub fn open_turn(&self) -> Option<u64> {
        self.open_turn
    }

    pub fn open_step(&self) -> Option<u64> {
        self.open_step
    }

    /// The number of the last `turn/start` seen.
    pub fn last_turn(&self) -> u64 {
        self.last_turn
    }

    fn names_open_step(&self, e: &Event) -> Result<(), String> {
        match (self.open_turn, self.open_step, e.turn(), e.step()) {
            (Some(t), Some(s), Some(et), Some(es)) if t == et && s == es => Ok(()),
            _ => Err(format!(
                "\"{}\" must name the open turn/step (open: {:?}/{:?})",
                e.event_type, self.open_turn, self.open_step
            )),
        }
    }

    /// Checks `e` against the current state without changing it.
    pub fn check(&self, e: &Event) -> Result<(), String> {
        match e.event_type.as_str() {
            types::TURN_START => {
                if let Some(open) = self.open_turn {
                    return Err(format!("turn/start while turn {open} is open"));
                }
                match e.turn() {
                    Some(t) if t == self.last_turn + 1 => Ok(()),
                    other => Err(format!(
                        "turn/start {other:?} does not follow turn {}",
                        self.last_turn
                    )),
                }
            }
            types::TURN_END => {
                if self.open_step.is_some() {
                    return Err("turn/end while a step is open".into());
                }
                match (self.open_turn, e.turn()) {
                    (Some(t), Some(et)) if t == et => Ok(()),
                    _ => Err(format!(
                        "turn/end does not match the open turn {:?}",
                        self.open_turn
                    )),
                }
            }
            types::STEP_START => {
                if self.open_step.is_some() {
                    return Err("step/start while a step is open".into());
                }
                match (self.open_turn, e.turn(), e.step()) {
                    (Some(t), Some(et), Some(s)) if t == et && s == self.last_step + 1 => Ok(()),
                    _ => Err(format!(
                        "step/start does not follow step {} of the open turn",
                        self.last_step
                    )),
                }
            }
            types::STEP_END
            | types::ASSISTANT_CHUNK
            | types::ASSISTANT_MESSAGE
            | types::TOOL_CALL => self.names_open_step(e),
            types::TOOL_RESULT => {
                if matches!(e.surface_op, Some(crate::event::SurfaceOp::Replace { .. })) {
                    return if self.open_turn.is_some() {
                        Ok(())
                    } else {
                        Err("tool/result replacement outside a turn".into())
                    };
                }
                self.names_open_step(e)?;
                let call_id = e
                    .data
                    .pointer("/message/source/callId")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let synthetic = e.data.pointer("/error/code").and_then(Value::as_str)
                    == Some("TOOL_NOT_STARTED");
                if self.pending_calls.contains(call_id) || synthetic {
                    Ok(())
                } else {
                    Err(format!(
                        "tool/result for \"{call_id}\" has no pending tool/call in this step"
                    ))
                }
            }
            types::TODO_WRITE | types::REQUEST_HEADER | types::REQUEST_CONTEXT => {
                if self.open_turn.is_some() {
                    Ok(())
                } else {
                    Err(format!("\"{}\" must be inside an open turn", e.event_type))
                }
            }
            _ => Ok(()),
        }
    }

    /// Applies `e` (assumed checked, or part of a seed).
    pub fn apply(&mut self, e: &Event) {
        match e.event_type.as_str() {
            types::TURN_START => {
                let t = e.turn().unwrap_or(self.last_turn + 1);
                self.open_turn = Some(t);
                self.last_turn = t;
                self.open_step = None;
                self.last_step = 0;
                self.pending_calls.clear();
            }
            types::TURN_END => {
                self.open_turn = None;
                self.open_step = None;
                self.pending_calls.clear();
            }
            types::STEP_START => {
                let s = e.step().unwrap_or(self.last_step + 1);
                self.open_step = Some(s);
                self.last_step = s;
            }
            types::STEP_END => {
                self.open_step = None;
                self.pending_calls.clear();
            }
            types::TOOL_CALL => {
                if let Some(id) = e.data.get("callId").and_then(Value::as_str) {
                    self.pending_calls.insert(id.to_string());
                }
            }
            types::TOOL_RESULT => {
                if let Some(id) = e
                    .data
                    .pointer("/message/source/callId")
                    .and_then(Value::as_str)
                {
                    self.pending_calls.remove(id);
                }
            }
            _ => {}
        }
    }
}
