//! The conversation as the terminal shows it, folded from the session's durable events
//! (the same events every frontend reads): user messages, streamed reasoning and text,
//! tool cards with their live output, result and diffs, notices, the todo list and the
//! token meter. Folding is pure: replaying a stored log gives the screen a live run showed.

use std::collections::HashMap;

use dsh_session::{Event, TurnEndReason, types};
use serde_json::Value;

use crate::summary::{outcome_of, summarize_arguments};

/// Most live output kept per running call (its tail).
const OUTPUT_TAIL: usize = 16 * 1024;

/// One hunk of an applied edit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hunk {
    pub path: String,
    pub old: Option<String>,
    pub new: String,
    /// The 1-based line where `new` starts in the file, when it could be found.
    pub start_line: Option<usize>,
}

/// How a tool call ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolEnd {
    pub ok: bool,
    /// `ok`, `exit code: 1`, `error …`.
    pub outcome: String,
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    User(String),
    Reasoning {
        text: String,
        done: bool,
    },
    Assistant {
        text: String,
        done: bool,
    },
    Tool {
        call_id: String,
        name: String,
        summary: String,
        output: String,
        end: Option<ToolEnd>,
        hunks: Vec<Hunk>,
    },
    /// Something the harness says (retries, a cancelled or failed turn, command replies).
    Notice {
        error: bool,
        text: String,
    },
}

/// A todo entry of the latest `todo/write`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Todo {
    pub status: String,
    pub content: String,
}

/// The folded conversation. Every item carries a revision that moves when it changes, so
/// a renderer can keep its layout of unchanged items.
#[derive(Default)]
pub struct Transcript {
    pub items: Vec<(u64, Item)>,
    next_rev: u64,
    /// (turn, step, kind, block index) → item of a streaming block.
    streams: HashMap<(u64, u64, u8, u64), usize>,
    calls: HashMap<String, usize>,
    pub todos: Vec<Todo>,
    /// The model that answered last (`provider / model`).
    pub model: Option<String>,
    /// Input tokens of the last request (how full the context is) and totals.
    pub context_tokens: u64,
    pub input_total: u64,
    pub output_total: u64,
    pub title: Option<String>,
    /// The last event folded.
    pub last_seq: Option<u64>,
    pub turn: u64,
    pub step: u64,
}

impl Transcript {
    fn bump(&mut self) -> u64 {
        self.next_rev += 1;
        self.next_rev
    }

    fn push(&mut self, item: Item) -> usize {
        let rev = self.bump();
        self.items.push((rev, item));
        self.items.len() - 1
    }

    fn touch(&mut self, at: usize) -> Option<&mut Item> {
        let rev = self.bump();
        let slot = self.items.get_mut(at)?;
        slot.0 = rev;
        Some(&mut slot.1)
    }

    /// A notice from the frontend itself (not in the log).
    pub fn notice(&mut self, error: bool, text: impl Into<String>) {
        self.push(Item::Notice {
            error,
            text: text.into(),
        });
    }

    /// Appends live output of a running call (not logged; the result carries the whole).
    pub fn tool_output(&mut self, call_id: &str, text: &str) {
        let Some(&at) = self.calls.get(call_id) else {
            return;
        };
        if let Some(Item::Tool { output, end, .. }) = self.touch(at)
            && end.is_none()
        {
            output.push_str(text);
            if output.len() > OUTPUT_TAIL {
                let mut cut = output.len() - OUTPUT_TAIL;
                while !output.is_char_boundary(cut) {
                    cut += 1;
                }
                output.replace_range(..cut, "");
            }
        }
    }

    /// Whether a call is still waiting for its result.
    pub fn running_calls(&self) -> usize {
        self.items
            .iter()
            .filter(|(_, i)| matches!(i, Item::Tool { end: None, .. }))
            .count()
    }

    /// Folds one durable event (events at or before the last folded seq are ignored).
    pub fn fold(&mut self, e: &Event) {
        if self.last_seq.is_some_and(|s| e.seq <= s) {
            return;
        }
        self.last_seq = Some(e.seq);
        let data = e.data.as_value();
        match e.event_type.as_str() {
            types::USER_MESSAGE => {
                // The event's data is the message itself.
                let message = data;
                let kind = message.pointer("/source/kind").and_then(Value::as_str);
                if matches!(kind, None | Some("user")) {
                    let mut text = message_text(message);
                    let images = message["content"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|b| b["type"] == "image")
                        .count();
                    if images > 0 {
                        text.push_str(&format!(
                            " [{images} image{}]",
                            if images == 1 { "" } else { "s" }
                        ));
                    }
                    if !text.trim().is_empty() {
                        self.push(Item::User(text));
                    }
                }
            }
            types::TURN_START => {
                self.turn = data["turn"].as_u64().unwrap_or(self.turn + 1);
                self.step = 0;
            }
            types::STEP_START => {
                self.step = data["step"].as_u64().unwrap_or(self.step + 1);
            }
            types::ASSISTANT_CHUNK => self.chunk(data),
            types::ASSISTANT_MESSAGE => self.assistant(data),
            types::TOOL_CALL => {
                let call_id = data["callId"].as_str().unwrap_or_default().to_string();
                let name = data["name"].as_str().unwrap_or("tool").to_string();
                let summary = summarize_arguments(&name, &data["arguments"]);
                if let Some(&at) = self.calls.get(&call_id) {
                    if let Some(Item::Tool {
                        name: n,
                        summary: s,
                        ..
                    }) = self.touch(at)
                    {
                        *n = name;
                        *s = summary;
                    }
                } else {
                    let at = self.push(Item::Tool {
                        call_id: call_id.clone(),
                        name,
                        summary,
                        output: String::new(),
                        end: None,
                        hunks: Vec::new(),
                    });
                    self.calls.insert(call_id, at);
                }
            }
            types::TOOL_RESULT => self.result(data),
            types::TURN_END => {
                self.close_streams();
                match TurnEndReason::from_value(&data["reason"]) {
                    Some(TurnEndReason::Completed) | None => {}
                    Some(TurnEndReason::Aborted(_) | TurnEndReason::Interrupted) => {
                        self.notice(false, "turn cancelled")
                    }
                    Some(TurnEndReason::MaxTokens) => self.notice(
                        true,
                        "the model stopped at its output limit; the answer is cut short",
                    ),
                    Some(TurnEndReason::Error(f)) => self.notice(
                        true,
                        format!(
                            "the turn failed: {}: {} (/retry sends your message again)",
                            f.code, f.message
                        ),
                    ),
                    Some(TurnEndReason::Blocked) => {
                        self.notice(true, "the turn was blocked by a policy")
                    }
                    Some(TurnEndReason::Other(m)) => {
                        let kind = m.get("kind").and_then(Value::as_str).unwrap_or("unknown");
                        self.notice(true, format!("the turn ended: {kind}"))
                    }
                }
            }
            types::TODO_WRITE => {
                self.todos = data["todos"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| Todo {
                        status: t["status"].as_str().unwrap_or("pending").to_string(),
                        content: t["content"]
                            .as_str()
                            .or_else(|| t["activeForm"].as_str())
                            .unwrap_or_default()
                            .to_string(),
                    })
                    .collect();
            }
            types::SESSION_TITLE => {
                self.title = data["title"].as_str().map(str::to_owned);
            }
            types::LLM_RETRY | types::LLM_RETRY_STARTED => {
                let code = data
                    .pointer("/error/code")
                    .and_then(Value::as_str)
                    .unwrap_or("error");
                let message = data
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if e.event_type == types::LLM_RETRY {
                    self.notice(
                        true,
                        format!("the model request failed ({code}: {message}); retrying"),
                    );
                }
            }
            "command/done" => {
                if let Some(text) = data["text"].as_str()
                    && !text.trim().is_empty()
                {
                    self.notice(data["kind"] == "error", text);
                }
            }
            _ => {}
        }
    }

    fn chunk(&mut self, data: &Value) {
        let kind = match data.pointer("/chunk/type").and_then(Value::as_str) {
            Some("reasoning-delta") => 0u8,
            Some("text-delta") => 1,
            _ => return,
        };
        let text = data
            .pointer("/chunk/text")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let key = (
            data["turn"].as_u64().unwrap_or(0),
            data["step"].as_u64().unwrap_or(0),
            kind,
            data.pointer("/chunk/index")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        );
        match self.streams.get(&key).copied() {
            Some(at) => {
                if let Some(Item::Reasoning { text: t, .. } | Item::Assistant { text: t, .. }) =
                    self.touch(at)
                {
                    t.push_str(text);
                }
            }
            None => {
                let item = if kind == 0 {
                    Item::Reasoning {
                        text: text.to_string(),
                        done: false,
                    }
                } else {
                    Item::Assistant {
                        text: text.to_string(),
                        done: false,
                    }
                };
                let at = self.push(item);
                self.streams.insert(key, at);
            }
        }
    }

    /// A committed reply: its text replaces what streamed (a resumed log may hold the
    /// reply without its chunks).
    fn assistant(&mut self, data: &Value) {
        let message = &data["message"];
        if let Some(usage) = data.get("usage") {
            let input = usage["inputTokens"].as_u64().unwrap_or(0);
            self.context_tokens = input;
            self.input_total += input;
            self.output_total += usage["outputTokens"].as_u64().unwrap_or(0);
        }
        if let (Some(p), Some(m)) = (
            message.pointer("/source/provider").and_then(Value::as_str),
            message.pointer("/source/model").and_then(Value::as_str),
        ) {
            self.model = Some(format!("{p} / {m}"));
        }
        let streamed: Vec<usize> = self.streams.values().copied().collect();
        let mut reasoning = String::new();
        let mut text = String::new();
        for block in message["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("reasoning") => reasoning.push_str(block["text"].as_str().unwrap_or("")),
                Some("text") => text.push_str(block["text"].as_str().unwrap_or("")),
                _ => {}
            }
        }
        let has = |want: u8, items: &[(u64, Item)]| {
            streamed.iter().any(|&at| {
                matches!(
                    (&items.get(at).map(|x| &x.1), want),
                    (Some(Item::Reasoning { .. }), 0) | (Some(Item::Assistant { .. }), 1)
                )
            })
        };
        if !reasoning.trim().is_empty() && !has(0, &self.items) {
            self.push(Item::Reasoning {
                text: reasoning,
                done: true,
            });
        }
        if !text.trim().is_empty() && !has(1, &self.items) {
            self.push(Item::Assistant { text, done: true });
        }
        self.close_streams();
    }

    fn close_streams(&mut self) {
        let open: Vec<usize> = self.streams.drain().map(|(_, at)| at).collect();
        for at in open {
            if let Some(Item::Reasoning { done, .. } | Item::Assistant { done, .. }) =
                self.touch(at)
            {
                *done = true;
            }
        }
    }

    fn result(&mut self, data: &Value) {
        let call_id = data
            .pointer("/message/source/callId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let (ok, outcome) = outcome_of(data);
        let text = crate::summary::result_text(data);
        let hunks: Vec<Hunk> = data
            .pointer("/meta/diffs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|d| {
                Some(Hunk {
                    path: d["path"].as_str()?.to_string(),
                    old: d["oldText"].as_str().map(str::to_owned),
                    new: d["newText"].as_str().unwrap_or_default().to_string(),
                    start_line: None,
                })
            })
            .collect();
        let end = ToolEnd { ok, outcome, text };
        match self.calls.get(&call_id).copied() {
            Some(at) => {
                if let Some(Item::Tool {
                    end: e, hunks: h, ..
                }) = self.touch(at)
                {
                    *e = Some(end);
                    *h = hunks;
                }
            }
            None => {
                let at = self.push(Item::Tool {
                    call_id: call_id.clone(),
                    name: "tool".into(),
                    summary: String::new(),
                    output: String::new(),
                    end: Some(end),
                    hunks,
                });
                self.calls.insert(call_id, at);
            }
        }
    }

    /// Hunks that still need their line numbers: (item, hunk index, path, new text).
    pub fn hunks_without_lines(&self) -> Vec<(usize, usize, String, String)> {
        let mut out = Vec::new();
        for (at, (_, item)) in self.items.iter().enumerate() {
            if let Item::Tool { hunks, .. } = item {
                for (i, h) in hunks.iter().enumerate() {
                    if h.start_line.is_none() {
                        out.push((at, i, h.path.clone(), h.new.clone()));
                    }
                }
            }
        }
        out
    }

    /// Sets where a hunk starts (0 when it could not be found: no numbers shown).
    pub fn set_hunk_line(&mut self, at: usize, hunk: usize, line: usize) {
        if let Some(Item::Tool { hunks, .. }) = self.touch(at)
            && let Some(h) = hunks.get_mut(hunk)
        {
            h.start_line = Some(line);
        }
    }
}

/// The text blocks of a message.
pub fn message_text(message: &Value) -> String {
    message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The 1-based line at which `new` starts in `file`, 0 when it is not there.
pub fn line_of(file: &str, new: &str) -> usize {
    if new.is_empty() {
        return 0;
    }
    match file.find(new) {
        Some(at) => file[..at].matches('\n').count() + 1,
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn fold_all(events: &[(&str, Value)]) -> Transcript {
        let events: Vec<Event> = events
            .iter()
            .enumerate()
            .map(|(seq, (t, data))| Event {
                event_type: (*t).into(),
                seq: seq as u64,
                time: 0,
                data: data.clone().into(),
                source_event_seqs: None,
                surface_op: None,
                ignorable: false,
                key_order: Default::default(),
            })
            .collect();
        let mut tr = Transcript::default();
        for e in &events {
            tr.fold(e);
        }
        // Folding again changes nothing (the seq guard).
        let before = tr.items.len();
        for e in &events {
            tr.fold(e);
        }
        assert_eq!(tr.items.len(), before);
        tr
    }

    fn items(t: &Transcript) -> Vec<Item> {
        t.items.iter().map(|(_, i)| i.clone()).collect()
    }

    #[test]
    fn a_turn_folds_into_items() {
        let t = fold_all(&[
            (
                types::USER_MESSAGE,
                json!({"role": "user", "id": "u", "source": {"kind": "user"}, "content": [{"type": "text", "text": "fix it"}]}),
            ),
            (
                types::USER_MESSAGE,
                json!({"role": "user", "id": "m", "source": {"kind": "memory", "form": "recall"}, "content": [{"type": "text", "text": "context"}]}),
            ),
            (types::TURN_START, json!({"turn": 1})),
            (types::STEP_START, json!({"turn": 1, "step": 1})),
            (
                types::ASSISTANT_CHUNK,
                json!({"turn": 1, "step": 1, "chunk": {"type": "reasoning-delta", "index": 0, "text": "think"}}),
            ),
            (
                types::ASSISTANT_CHUNK,
                json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 1, "text": "Edit"}}),
            ),
            (
                types::ASSISTANT_CHUNK,
                json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 1, "text": "ing."}}),
            ),
            (
                types::ASSISTANT_MESSAGE,
                json!({"turn": 1, "step": 1, "usage": {"inputTokens": 900, "outputTokens": 20},
                "message": {"role": "assistant", "id": "a", "source": {"kind": "model", "provider": "p", "model": "m"},
                "content": [{"type": "reasoning", "text": "think"}, {"type": "text", "text": "Editing."},
                    {"type": "tool-call", "id": "c1", "name": "edit", "arguments": "{\"file_path\":\"a.txt\"}"}]}}),
            ),
            (
                types::TOOL_CALL,
                json!({"turn": 1, "step": 1, "callId": "c1", "name": "edit", "arguments": "{\"file_path\":\"a.txt\"}"}),
            ),
            (
                types::TOOL_RESULT,
                json!({"turn": 1, "step": 1, "meta": {"diffs": [{"path": "a.txt", "oldText": "x", "newText": "y"}]},
                "message": {"role": "user", "id": "r", "source": {"kind": "tool", "callId": "c1"},
                "content": [{"type": "tool-result", "toolCallId": "c1", "content": [{"type": "text", "text": "edited"}]}]}}),
            ),
            (
                types::TODO_WRITE,
                json!({"todos": [{"content": "one", "status": "in_progress"}]}),
            ),
            (
                types::TURN_END,
                json!({"turn": 1, "reason": {"kind": "error", "error": {"code": "RATE_LIMIT", "message": "slow down"}}}),
            ),
        ]);
        assert_eq!(
            items(&t),
            vec![
                Item::User("fix it".into()),
                Item::Reasoning {
                    text: "think".into(),
                    done: true
                },
                Item::Assistant {
                    text: "Editing.".into(),
                    done: true
                },
                Item::Tool {
                    call_id: "c1".into(),
                    name: "edit".into(),
                    summary: "a.txt".into(),
                    output: String::new(),
                    end: Some(ToolEnd {
                        ok: true,
                        outcome: "ok".into(),
                        text: "edited".into()
                    }),
                    hunks: vec![Hunk {
                        path: "a.txt".into(),
                        old: Some("x".into()),
                        new: "y".into(),
                        start_line: None
                    }],
                },
                Item::Notice {
                    error: true,
                    text:
                        "the turn failed: RATE_LIMIT: slow down (/retry sends your message again)"
                            .into()
                },
            ]
        );
        assert_eq!(t.model.as_deref(), Some("p / m"));
        assert_eq!((t.context_tokens, t.output_total), (900, 20));
        assert_eq!(
            t.todos,
            vec![Todo {
                status: "in_progress".into(),
                content: "one".into()
            }]
        );
        assert_eq!(t.hunks_without_lines().len(), 1);
    }

    #[test]
    fn a_resumed_reply_without_chunks_still_shows() {
        let t = fold_all(&[(
            types::ASSISTANT_MESSAGE,
            json!({"turn": 1, "step": 1,
            "message": {"role": "assistant", "id": "a", "content": [{"type": "text", "text": "from the log"}]}}),
        )]);
        assert_eq!(
            items(&t),
            vec![Item::Assistant {
                text: "from the log".into(),
                done: true
            }]
        );
    }

    #[test]
    fn live_output_keeps_its_tail_until_the_result() {
        let mut t = fold_all(&[(
            types::TOOL_CALL,
            json!({"callId": "c", "name": "bash", "arguments": {"command": "yes"}}),
        )]);
        let chunk = "y\n".repeat(10_000);
        t.tool_output("c", &chunk);
        t.tool_output("c", "last\n");
        let Item::Tool { output, .. } = &t.items[0].1 else {
            panic!("a tool card")
        };
        assert!(output.len() <= OUTPUT_TAIL && output.ends_with("last\n"));
        assert_eq!(t.running_calls(), 1);
        assert_eq!(line_of("a\nb\nc\n", "b\nc"), 2);
        assert_eq!(line_of("a\n", "zzz"), 0);
    }
}
