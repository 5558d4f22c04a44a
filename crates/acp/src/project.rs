//! The rich projection: what an editor sees of a session, derived from its durable events
//! (plus live tool output). Streamed text and reasoning as they arrive, every tool call as a
//! `tool_call` followed by `tool_call_update`s (diffs for edits), the todo list as a `plan`,
//! the title as `session_info_update`. The same mapping replays a stored log on
//! `session/load`, from committed messages instead of stream chunks.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dsh_session::{Event, types};
use serde_json::{Value, json};

use crate::protocol::{
    ContentBlock, PlanEntry, RawOutput, SessionUpdate, ToolCall, ToolCallContent, ToolCallLocation,
    ToolCallStatus, ToolCallUpdate,
};

/// Live tool output kept for one running call (the editor shows the tail).
const LIVE_OUTPUT_TAIL: usize = 16 * 1024;
/// Shortest interval between two live-output updates of one call.
const LIVE_OUTPUT_EVERY: Duration = Duration::from_millis(200);

/// The ACP tool kind of a tool.
pub fn tool_kind(name: &str, args: &Value) -> &'static str {
    match name {
        "bash" => "execute",
        "write" | "edit" => "edit",
        "str_replace_editor" => match args.get("command").and_then(Value::as_str) {
            Some("view") => "read",
            _ => "edit",
        },
        "read" | "read_image" | "skill" | "get_goal" => "read",
        "grep" | "glob" => "search",
        "todo_write" => "think",
        "web_fetch" | "web_search" => "fetch",
        _ => "other",
    }
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    if line.chars().count() <= max {
        return line.to_string();
    }
    let mut out: String = line.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// The parsed arguments of a call (`""` → `{}`, unparsable → the raw string).
pub fn parse_arguments(raw: &Value) -> Value {
    match raw {
        Value::String(s) if s.trim().is_empty() => json!({}),
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| raw.clone()),
        other => other.clone(),
    }
}

fn absolute(cwd: &Path, path: &str) -> String {
    let p = Path::new(path);
    if p.is_absolute() {
        path.to_string()
    } else {
        cwd.join(p).display().to_string()
    }
}

/// The file a call works on, made absolute against the session's directory.
fn call_path(name: &str, args: &Value, cwd: &Path) -> Option<String> {
    let key = match name {
        "read" | "write" | "edit" => "file_path",
        "str_replace_editor" | "grep" | "glob" => "path",
        _ => return None,
    };
    str_arg(args, key).map(|p| absolute(cwd, p))
}

/// A call as editors render it (`title`, `kind`, `rawInput`, `locations`), `pending`.
pub fn describe_call(call_id: &str, name: &str, args: &Value, cwd: &Path) -> ToolCall {
    let path = call_path(name, args, cwd);
    let title = match name {
        "bash" => str_arg(args, "command")
            .map(|c| first_line(c, 120))
            .or_else(|| str_arg(args, "description").map(str::to_owned)),
        "read" => path
            .as_ref()
            .map(|p| match args.get("offset").and_then(Value::as_u64) {
                Some(line) if line > 1 => format!("Read {p} (from line {line})"),
                _ => format!("Read {p}"),
            }),
        "write" => path.as_ref().map(|p| format!("Write {p}")),
        "edit" => path.as_ref().map(|p| format!("Edit {p}")),
        "str_replace_editor" => {
            let command = str_arg(args, "command").unwrap_or("edit");
            let mut verb = command.replace('_', " ");
            if let Some(first) = verb.get_mut(..1) {
                first.make_ascii_uppercase();
            }
            path.as_ref().map(|p| format!("{verb} {p}"))
        }
        "grep" | "glob" => str_arg(args, "pattern").map(|pattern| {
            let verb = if name == "grep" { "Grep" } else { "Glob" };
            match str_arg(args, "path") {
                Some(p) => format!("{verb} {pattern} in {p}"),
                None => format!("{verb} {pattern}"),
            }
        }),
        "todo_write" => Some("Update plan".to_string()),
        // Upstream 0.2.1's goal-tool titles.
        "get_goal" => Some("Read current goal".to_string()),
        "create_goal" => Some("Create goal".to_string()),
        "update_goal" => Some(match str_arg(args, "action") {
            Some("edit") => "Edit goal".to_string(),
            Some("pause") => "Pause goal".to_string(),
            Some("resume") => "Resume goal".to_string(),
            Some("complete") => "Complete goal".to_string(),
            Some("blocked") => "Mark goal".to_string(),
            _ => "Update goal".to_string(),
        }),
        "skill" => str_arg(args, "name").map(|n| format!("Load skill {n}")),
        _ => str_arg(args, "description").map(str::to_owned),
    }
    .unwrap_or_else(|| name.to_string());
    let locations = path.map(|path| {
        let line = if name == "read" {
            args.get("offset").and_then(Value::as_u64)
        } else {
            None
        };
        vec![ToolCallLocation { path, line }]
    });
    ToolCall {
        tool_call_id: call_id.to_string(),
        title,
        kind: tool_kind(name, args),
        raw_input: args.clone(),
        locations,
        status: ToolCallStatus::Pending,
        content: None,
    }
}

/// The text of a tool result's content blocks.
fn result_text(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `tool_call_update` that closes a call, from its `tool/result` event data.
pub fn result_update(data: &Value, cwd: &Path) -> Option<ToolCallUpdate> {
    let result = data.pointer("/message/content/0")?;
    let call_id = result["toolCallId"].as_str().or_else(|| {
        data.pointer("/message/source/callId")
            .and_then(Value::as_str)
    })?;
    let is_error = result["isError"].as_bool().unwrap_or(false);
    let text = result_text(result);
    let diffs: Vec<ToolCallContent> = data
        .pointer("/meta/diffs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|d| {
            Some(ToolCallContent::Diff {
                path: absolute(cwd, d["path"].as_str()?),
                old_text: d["oldText"].clone(),
                new_text: d["newText"].as_str().unwrap_or_default().to_string(),
            })
        })
        .collect();
    let content = if !diffs.is_empty() && !is_error {
        diffs
    } else if text.is_empty() {
        Vec::new()
    } else {
        vec![ToolCallContent::text(text.clone())]
    };
    Some(ToolCallUpdate {
        tool_call_id: call_id.to_string(),
        status: Some(if is_error {
            ToolCallStatus::Failed
        } else {
            ToolCallStatus::Completed
        }),
        content: Some(content),
        raw_output: Some(RawOutput {
            content: text,
            is_error,
        }),
    })
}

/// A `plan` update from a `todo/write` event.
fn plan(data: &Value) -> SessionUpdate {
    let entries = data["todos"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| PlanEntry {
            content: t["content"].as_str().unwrap_or_default().to_string(),
            priority: "medium",
            status: match t["status"].as_str() {
                Some("in_progress") => "in_progress",
                Some("completed") => "completed",
                _ => "pending",
            },
        })
        .collect();
    SessionUpdate::Plan { entries }
}

/// An ISO 8601 UTC time for epoch milliseconds.
pub fn iso_time(ms: i64) -> String {
    dsh_kernel::time::iso8601(ms)
}

struct LiveOutput {
    call_id: String,
    text: String,
    last_sent: Option<Instant>,
    /// Output arrived since the last update, and a later [`Projector::flush`] is due.
    held: bool,
}

/// What to do with a piece of live output.
#[derive(Debug, PartialEq)]
pub enum Live {
    /// Send this update now.
    Send(SessionUpdate),
    /// Held back by the interval: call [`Projector::flush`] after this long, so the last
    /// output of a burst still reaches the editor while the call runs.
    FlushAfter(Duration),
    /// Held back; a flush is already due.
    Held,
}

fn live_update(live: &LiveOutput) -> SessionUpdate {
    SessionUpdate::ToolCallUpdate(ToolCallUpdate {
        tool_call_id: live.call_id.clone(),
        status: None,
        content: Some(vec![ToolCallContent::text(live.text.clone())]),
        raw_output: None,
    })
}

/// The projection state of one session.
pub struct Projector {
    cwd: PathBuf,
    /// Calls announced with `tool_call` (a permission request announces it first when the
    /// projection has not yet).
    announced: Vec<String>,
    live: Vec<LiveOutput>,
}

impl Projector {
    pub fn new(cwd: PathBuf) -> Self {
        Self {
            cwd,
            announced: Vec::new(),
            live: Vec::new(),
        }
    }

    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// Marks a call announced; false when it already was.
    pub fn announce(&mut self, call_id: &str) -> bool {
        if self.announced.iter().any(|c| c == call_id) {
            return false;
        }
        if self.announced.len() >= 256 {
            self.announced.remove(0);
        }
        self.announced.push(call_id.to_string());
        true
    }

    /// The updates one live event produces.
    pub fn live(&mut self, e: &Event) -> Vec<SessionUpdate> {
        let data = e.data.as_value();
        match e.event_type.as_str() {
            types::ASSISTANT_CHUNK => {
                let chunk = &data["chunk"];
                let text = chunk["text"].as_str().unwrap_or_default();
                match chunk["type"].as_str() {
                    Some("text-delta") if !text.is_empty() => {
                        vec![SessionUpdate::agent_text(text)]
                    }
                    Some("reasoning-delta") if !text.is_empty() => {
                        vec![SessionUpdate::AgentThoughtChunk {
                            content: ContentBlock::text(text),
                            message_id: None,
                        }]
                    }
                    _ => Vec::new(),
                }
            }
            types::TOOL_CALL => self.tool_call(data),
            types::TOOL_RESULT => {
                let Some(update) = result_update(data, &self.cwd) else {
                    return Vec::new();
                };
                self.live.retain(|l| l.call_id != update.tool_call_id);
                vec![SessionUpdate::ToolCallUpdate(update)]
            }
            _ => self.common(e),
        }
    }

    /// Updates shared by live projection and replay.
    fn common(&self, e: &Event) -> Vec<SessionUpdate> {
        let data = e.data.as_value();
        match e.event_type.as_str() {
            types::TODO_WRITE => vec![plan(data)],
            "session/title" => match data["title"].as_str() {
                Some(title) if !title.is_empty() => vec![SessionUpdate::SessionInfoUpdate {
                    title: title.to_string(),
                    updated_at: iso_time(e.time),
                }],
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

    fn tool_call(&mut self, data: &Value) -> Vec<SessionUpdate> {
        let (Some(call_id), Some(name)) = (data["callId"].as_str(), data["name"].as_str()) else {
            return Vec::new();
        };
        if !self.announce(call_id) {
            return Vec::new();
        }
        let args = parse_arguments(&data["arguments"]);
        vec![SessionUpdate::ToolCall(describe_call(
            call_id, name, &args, &self.cwd,
        ))]
    }

    /// The update marking a call running.
    pub fn started(call_id: &str) -> SessionUpdate {
        SessionUpdate::ToolCallUpdate(ToolCallUpdate {
            tool_call_id: call_id.to_string(),
            status: Some(ToolCallStatus::InProgress),
            content: None,
            raw_output: None,
        })
    }

    /// Live output of a running call: an update with the output so far, at most every
    /// [`LIVE_OUTPUT_EVERY`] per call.
    pub fn output(&mut self, call_id: &str, text: &str) -> Live {
        let idx = match self.live.iter().position(|l| l.call_id == call_id) {
            Some(i) => i,
            None => {
                self.live.push(LiveOutput {
                    call_id: call_id.to_string(),
                    text: String::new(),
                    last_sent: None,
                    held: false,
                });
                self.live.len() - 1
            }
        };
        let live = &mut self.live[idx];
        live.text.push_str(text);
        if live.text.len() > LIVE_OUTPUT_TAIL {
            let mut cut = live.text.len() - LIVE_OUTPUT_TAIL;
            while !live.text.is_char_boundary(cut) {
                cut += 1;
            }
            live.text.replace_range(..cut, "");
        }
        let now = Instant::now();
        if let Some(sent) = live.last_sent
            && now.duration_since(sent) < LIVE_OUTPUT_EVERY
        {
            if live.held {
                return Live::Held;
            }
            live.held = true;
            return Live::FlushAfter(LIVE_OUTPUT_EVERY - now.duration_since(sent));
        }
        live.last_sent = Some(now);
        live.held = false;
        Live::Send(live_update(live))
    }

    /// The output held back for `call_id`, if any is still due (nothing once the call has
    /// its result).
    pub fn flush(&mut self, call_id: &str) -> Option<SessionUpdate> {
        let live = self
            .live
            .iter_mut()
            .find(|l| l.call_id == call_id && l.held)?;
        live.held = false;
        live.last_sent = Some(Instant::now());
        Some(live_update(live))
    }

    /// The history of a stored session as updates, oldest first (`session/load`): what the
    /// user typed, the committed answers and reasoning, every tool call with its result,
    /// plans, and the latest title.
    pub fn replay(&mut self, events: &[std::sync::Arc<Event>]) -> Vec<SessionUpdate> {
        let mut out = Vec::new();
        let mut title = None;
        for e in events {
            if e.is("session/title") {
                title = Some(e.clone());
            } else {
                out.extend(self.committed(e));
            }
        }
        if let Some(e) = title {
            out.extend(self.common(&e));
        }
        out
    }

    /// The updates one committed event makes: messages whole (no stream chunks), calls and
    /// their results, plans and titles. A session another process runs is followed this way.
    pub fn committed(&mut self, e: &Event) -> Vec<SessionUpdate> {
        let data = e.data.as_value();
        let mut out = Vec::new();
        match e.event_type.as_str() {
            types::USER_MESSAGE => {
                if data.pointer("/source/kind").and_then(Value::as_str) != Some("user") {
                    return out;
                }
                for block in data["content"].as_array().into_iter().flatten() {
                    if block["type"] == "text"
                        && let Some(text) = block["text"].as_str().filter(|t| !t.is_empty())
                    {
                        out.push(SessionUpdate::UserMessageChunk {
                            content: ContentBlock::text(text),
                            message_id: Some(data["id"].clone()),
                        });
                    }
                }
            }
            types::ASSISTANT_MESSAGE => {
                let message = &data["message"];
                for block in message["content"].as_array().into_iter().flatten() {
                    let thought = match block["type"].as_str() {
                        Some("reasoning") => true,
                        Some("text") => false,
                        _ => continue,
                    };
                    if let Some(text) = block["text"].as_str().filter(|t| !t.is_empty()) {
                        let (content, message_id) =
                            (ContentBlock::text(text), Some(message["id"].clone()));
                        out.push(if thought {
                            SessionUpdate::AgentThoughtChunk {
                                content,
                                message_id,
                            }
                        } else {
                            SessionUpdate::AgentMessageChunk {
                                content,
                                message_id,
                            }
                        });
                    }
                }
            }
            types::TOOL_CALL => out.extend(self.tool_call(data)),
            types::TOOL_RESULT => {
                if let Some(update) = result_update(data, &self.cwd) {
                    out.push(SessionUpdate::ToolCallUpdate(update));
                }
            }
            _ => out.extend(self.common(e)),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::to_value;
    use pretty_assertions::assert_eq;

    fn describe(call_id: &str, name: &str, args: &Value, cwd: &Path) -> Value {
        to_value(&describe_call(call_id, name, args, cwd))
    }

    #[test]
    fn calls_are_described_as_editors_render_them() {
        let cwd = Path::new("/w");
        let d = describe(
            "c",
            "bash",
            &json!({"command": "cargo test\nmore", "description": "x"}),
            cwd,
        );
        assert_eq!(d["title"], "cargo test");
        assert_eq!(d["kind"], "execute");
        assert!(d.get("locations").is_none());
        let d = describe(
            "c",
            "read",
            &json!({"file_path": "src/a.rs", "offset": 10}),
            cwd,
        );
        assert_eq!(d["title"], "Read /w/src/a.rs (from line 10)");
        assert_eq!(d["locations"], json!([{"path": "/w/src/a.rs", "line": 10}]));
        let d = describe(
            "c",
            "str_replace_editor",
            &json!({"command": "str_replace", "path": "/x/y"}),
            cwd,
        );
        assert_eq!(
            (d["title"].as_str(), d["kind"].as_str()),
            (Some("Str replace /x/y"), Some("edit"))
        );
        let d = describe(
            "c",
            "grep",
            &json!({"pattern": "fn main", "path": "src"}),
            cwd,
        );
        assert_eq!(d["title"], "Grep fn main in src");
        let goal = |name: &str, args: Value| {
            let d = describe("c", name, &args, cwd);
            (
                d["title"].as_str().map(str::to_owned),
                d["kind"].as_str().map(str::to_owned),
            )
        };
        let owned = |t: &str, k: &str| (Some(t.to_string()), Some(k.to_string()));
        assert_eq!(
            goal("get_goal", json!({})),
            owned("Read current goal", "read")
        );
        assert_eq!(
            goal("create_goal", json!({"objective": "x"})),
            owned("Create goal", "other")
        );
        assert_eq!(
            goal("update_goal", json!({"action": "blocked"})),
            owned("Mark goal", "other")
        );
        assert_eq!(
            goal("update_goal", json!({"action": "complete"})),
            owned("Complete goal", "other")
        );
        let d = describe("c", "mystery", &json!("not json"), cwd);
        assert_eq!(
            (d["title"].as_str(), d["kind"].as_str()),
            (Some("mystery"), Some("other"))
        );
    }

    #[test]
    fn results_carry_diffs_for_edits_and_text_otherwise() {
        let cwd = Path::new("/w");
        let edit = json!({"message": {"content": [{"type": "tool-result", "toolCallId": "c1",
            "content": [{"type": "text", "text": "edited"}]}]},
            "meta": {"diffs": [{"path": "a.txt", "oldText": "x", "newText": "y"}]}});
        let u = to_value(&result_update(&edit, cwd).unwrap());
        assert_eq!(u["status"], "completed");
        assert_eq!(
            u["content"],
            json!([{"type": "diff", "path": "/w/a.txt", "oldText": "x", "newText": "y"}])
        );
        let failed = json!({"message": {"content": [{"type": "tool-result", "toolCallId": "c2", "isError": true,
            "content": [{"type": "text", "text": "boom"}]}]}});
        let u = to_value(&result_update(&failed, cwd).unwrap());
        assert_eq!(u["status"], "failed");
        assert_eq!(u["content"][0]["content"]["text"], "boom");
        assert_eq!(u["rawOutput"], json!({"content": "boom", "isError": true}));
    }

    #[test]
    fn live_output_is_throttled_and_keeps_the_tail() {
        let mut p = Projector::new("/w".into());
        assert!(matches!(p.output("c", "a"), Live::Send(_)));
        assert!(
            matches!(p.output("c", "b"), Live::FlushAfter(d) if d <= LIVE_OUTPUT_EVERY),
            "within the interval: held, with a flush due"
        );
        assert_eq!(p.output("c", "c"), Live::Held, "one flush at a time");
        let flushed = to_value(&p.flush("c").unwrap());
        assert_eq!(flushed["content"][0]["content"]["text"], "abc");
        assert_eq!(p.flush("c"), None, "nothing held any more");
        std::thread::sleep(LIVE_OUTPUT_EVERY);
        let Live::Send(u) = p.output("c", &"é".repeat(LIVE_OUTPUT_TAIL)) else {
            panic!("past the interval, output is sent at once");
        };
        let u = to_value(&u);
        let text = u["content"][0]["content"]["text"].as_str().unwrap();
        assert!(text.len() <= LIVE_OUTPUT_TAIL && text.ends_with('é'));
    }

    #[test]
    fn times_are_iso_8601() {
        assert_eq!(iso_time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_time(1_796_142_036_014), "2026-12-01T16:20:36.014Z");
    }
}
