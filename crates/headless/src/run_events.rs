//! `dsh headless --json`: the run events upstream 0.2 prints, one JSON object per line —
//! `session`, `status` (turn and step phases, a step's token usage), `thinking`, `text`,
//! `tool_call`, `tool_result`, `final` and `error`. Scripts written for upstream read
//! `session.sessionId` to continue a session and wait for `final`.
//!
//! The lines are derived from the session's durable events (see `stream_json`), so a line
//! read is never lost to a crash; `final` and `error` are written by the headless app when
//! the run ends.

use dsh_llm::{ContentBlock, Message};
use dsh_session::{Event, types};
use serde_json::{Map, Value, json};

/// The state carried between events: the token usage of the step in progress.
#[derive(Default)]
pub struct RunEvents {
    step_usage: Option<Value>,
}

impl RunEvents {
    /// The first line of a run.
    pub fn session_line(session_id: &str, cwd: Option<&str>) -> Value {
        json!({"type": "session", "sessionId": session_id, "cwd": cwd.unwrap_or_default()})
    }

    /// The last line of a run: the final answer (empty when the turn produced none).
    pub fn final_line(text: &str) -> Value {
        json!({"type": "final", "text": text})
    }

    /// A failure that ended the run before or outside a turn.
    pub fn error_line(message: &str) -> Value {
        json!({"type": "error", "message": message})
    }

    /// Appends the run-event lines that `event` stands for to `out`.
    pub fn map(&mut self, event: &Event, out: &mut Vec<Value>) {
        let data = event.data.as_value();
        let number = |key: &str| data.get(key).and_then(Value::as_u64).unwrap_or(0);
        match event.event_type.as_str() {
            types::TURN_START => out.push(json!({
                "type": "status", "phase": "turn_start", "turn": number("turn"),
            })),
            types::STEP_START => {
                self.step_usage = None;
                out.push(json!({
                    "type": "status", "phase": "step_start",
                    "turn": number("turn"), "step": number("step"),
                }));
            }
            types::ASSISTANT_MESSAGE => {
                if let Some(usage) = data.get("usage").filter(|u| u.is_object()) {
                    self.step_usage = Some(usage_of(usage));
                }
                let Ok(message) = Message::from_json(&data["message"]) else {
                    return;
                };
                let thinking = message.reasoning_text();
                if !thinking.is_empty() {
                    out.push(json!({"type": "thinking", "text": thinking}));
                }
                let text = message.text();
                if !text.is_empty() {
                    out.push(json!({"type": "text", "text": text}));
                }
            }
            types::TOOL_CALL => {
                let raw = data.get("arguments").cloned().unwrap_or(Value::Null);
                // The model's arguments as an object when they parse, else the raw text.
                let input = match &raw {
                    Value::String(s) => serde_json::from_str::<Value>(s).unwrap_or(raw.clone()),
                    other => other.clone(),
                };
                out.push(json!({
                    "type": "tool_call",
                    "callId": data.get("callId").cloned().unwrap_or(Value::Null),
                    "tool": data.get("name").cloned().unwrap_or(Value::Null),
                    "input": input,
                }));
            }
            types::TOOL_RESULT => {
                let Ok(message) = Message::from_json(&data["message"]) else {
                    return;
                };
                for block in &message.content {
                    if let ContentBlock::ToolResult {
                        tool_call_id,
                        content,
                        is_error,
                    } = block
                    {
                        let failed = is_error.unwrap_or(false) || data.get("error").is_some();
                        let result: String =
                            content.iter().filter_map(ContentBlock::as_text).collect();
                        out.push(json!({
                            "type": "tool_result",
                            "callId": tool_call_id,
                            "status": if failed { "error" } else { "completed" },
                            "result": result,
                        }));
                    }
                }
            }
            types::STEP_END => {
                let mut line = Map::new();
                line.insert("type".into(), "status".into());
                line.insert("phase".into(), "step_end".into());
                line.insert("turn".into(), number("turn").into());
                line.insert("step".into(), number("step").into());
                if let Some(usage) = self.step_usage.take() {
                    line.insert("usage".into(), usage);
                }
                out.push(Value::Object(line));
            }
            types::TURN_END => out.push(json!({
                "type": "status", "phase": "turn_end", "turn": number("turn"),
                "reason": data.get("reason").cloned().unwrap_or(Value::Null),
            })),
            _ => {}
        }
    }
}

/// A step's usage in upstream's shape: every counter present, with the total.
fn usage_of(usage: &Value) -> Value {
    let n = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    let (input, output) = (n("inputTokens"), n("outputTokens"));
    json!({
        "inputTokens": input,
        "outputTokens": output,
        "cacheReadTokens": n("cacheReadTokens"),
        "cacheWriteTokens": n("cacheWriteTokens"),
        "totalTokens": input + output,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_session::{EventType, SurfaceKeyOrder};

    fn lines(events: &[(&str, Value)]) -> Vec<Value> {
        let mut run = RunEvents::default();
        let mut out = Vec::new();
        for (seq, (t, data)) in events.iter().enumerate() {
            let e = Event {
                event_type: EventType::new(t),
                seq: seq as u64,
                time: 0,
                data: data.clone().into(),
                source_event_seqs: None,
                surface_op: None,
                ignorable: false,
                key_order: SurfaceKeyOrder::default(),
            };
            run.map(&e, &mut out);
        }
        out
    }

    #[test]
    fn a_step_with_reasoning_a_call_and_its_result() {
        let message = Message::assistant(
            vec![
                ContentBlock::Reasoning {
                    text: "think".into(),
                },
                ContentBlock::ToolCall {
                    id: "c1".into(),
                    name: "bash".into(),
                    arguments: r#"{"command":"ls"}"#.into(),
                },
            ],
            "p",
            "m",
            None,
        );
        let assistant = json!({"turn": 1, "step": 1, "usage": {"inputTokens": 10, "outputTokens": 4},
            "message": message.to_value()});
        let output = Message::tool_result("c1", vec![ContentBlock::text("a\n")], false);
        let result = json!({"turn": 1, "step": 1, "message": output.to_value()});
        let got = lines(&[
            (types::TURN_START, json!({"turn": 1})),
            (types::STEP_START, json!({"turn": 1, "step": 1})),
            (types::ASSISTANT_MESSAGE, assistant),
            (
                types::TOOL_CALL,
                json!({"turn": 1, "step": 1, "callId": "c1", "name": "bash",
                "arguments": "{\"command\":\"ls\"}"}),
            ),
            (types::TOOL_RESULT, result),
            (types::STEP_END, json!({"turn": 1, "step": 1})),
            (
                types::TURN_END,
                json!({"turn": 1, "reason": {"kind": "completed"}}),
            ),
        ]);
        assert_eq!(
            got,
            vec![
                json!({"type": "status", "phase": "turn_start", "turn": 1}),
                json!({"type": "status", "phase": "step_start", "turn": 1, "step": 1}),
                json!({"type": "thinking", "text": "think"}),
                json!({"type": "tool_call", "callId": "c1", "tool": "bash", "input": {"command": "ls"}}),
                json!({"type": "tool_result", "callId": "c1", "status": "completed", "result": "a\n"}),
                json!({"type": "status", "phase": "step_end", "turn": 1, "step": 1,
                    "usage": {"inputTokens": 10, "outputTokens": 4, "cacheReadTokens": 0,
                        "cacheWriteTokens": 0, "totalTokens": 14}}),
                json!({"type": "status", "phase": "turn_end", "turn": 1, "reason": {"kind": "completed"}}),
            ]
        );
    }

    #[test]
    fn a_failed_step_has_no_usage_and_bad_arguments_stay_text() {
        let got = lines(&[
            (types::STEP_START, json!({"turn": 1, "step": 1})),
            (
                types::TOOL_CALL,
                json!({"turn": 1, "step": 1, "callId": "c", "name": "read", "arguments": "{oops"}),
            ),
            (types::STEP_END, json!({"turn": 1, "step": 1})),
        ]);
        assert_eq!(got[1]["input"], json!("{oops"));
        assert!(got[2].get("usage").is_none(), "{:?}", got[2]);
    }
}
