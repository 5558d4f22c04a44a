//! The stdin payloads of each dialect (field names and order as the reference tools
//! define them). Claude Code: `session_id`, `transcript_path` (`""` when unknown), `cwd`,
//! `hook_event_name`, then the event's fields. Codex: snake_case with `model` and
//! `permission_mode` on every event, `transcript_path: null` when unknown, and `turn_id`
//! on turn-scoped events.

use std::path::Path;
use std::sync::Arc;

use dsh_kernel::Context;
use dsh_llm::{ContentBlock, Message};
use dsh_persistence::SessionWriters;
use dsh_session::LiveSession;
use serde_json::{Map, Value, json};

use crate::config::HookPoint;
use crate::protocol::HookDialect;

/// Concatenated text of the `text` blocks (what a payload carries for content).
pub fn blocks_text(blocks: &[ContentBlock]) -> String {
    blocks.iter().filter_map(ContentBlock::as_text).collect()
}

/// Concatenated text of the `text` blocks of every message.
pub fn messages_text(messages: &[Arc<Message>]) -> String {
    messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(ContentBlock::as_text)
        .collect()
}

/// The `command` argument of a tool call, else `""` (Codex's `tool_input` shape).
pub fn command_of(arguments: &Value) -> &str {
    arguments
        .get("command")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The facts every payload starts from.
pub struct PayloadBase<'a> {
    pub dialect: HookDialect,
    /// Resolves services (the session log's location).
    pub ctx: &'a Context,
    pub session: Option<&'a Arc<LiveSession>>,
    /// Codex's `model` field.
    pub model: &'a str,
}

impl PayloadBase<'_> {
    /// Where the session log is persisted, as an absolute path.
    fn transcript_path(&self) -> Option<String> {
        let session = self.session?;
        let writers = self.ctx.get::<SessionWriters>()?;
        let path = writers.files().path_for(&session.header()).ok()?;
        let path = if path.is_absolute() {
            path
        } else {
            std::env::current_dir().ok()?.join(path)
        };
        Some(path.display().to_string())
    }

    fn cwd(&self) -> String {
        self.session
            .and_then(|s| s.header().cwd)
            .or_else(|| {
                std::env::current_dir()
                    .ok()
                    .map(|p| p.display().to_string())
            })
            .unwrap_or_default()
    }

    /// The dialect's base fields for `point`.
    pub fn base(&self, point: HookPoint) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert(
            "session_id".into(),
            json!(self.session.map(|s| s.id()).unwrap_or_default()),
        );
        let transcript = self.transcript_path();
        match self.dialect {
            HookDialect::ClaudeCode => {
                m.insert(
                    "transcript_path".into(),
                    json!(transcript.unwrap_or_default()),
                );
                m.insert("cwd".into(), json!(self.cwd()));
                m.insert("hook_event_name".into(), json!(point.as_str()));
            }
            HookDialect::Codex => {
                m.insert("transcript_path".into(), json!(transcript));
                m.insert("cwd".into(), json!(self.cwd()));
                m.insert("hook_event_name".into(), json!(point.as_str()));
                m.insert("model".into(), json!(self.model));
                m.insert("permission_mode".into(), json!("default"));
            }
        }
        m
    }

    /// The base fields plus Codex's `turn_id` (Claude Code has none).
    pub fn turn_base(&self, point: HookPoint, turn: u64) -> Map<String, Value> {
        let mut m = self.base(point);
        match self.dialect {
            HookDialect::ClaudeCode => {}
            HookDialect::Codex => {
                m.insert("turn_id".into(), json!(turn.to_string()));
            }
        }
        m
    }
}

/// `SessionStart`: base + `source`.
pub fn session_start(base: &PayloadBase<'_>, source: &str) -> Value {
    let mut m = base.base(HookPoint::SessionStart);
    m.insert("source".into(), json!(source));
    Value::Object(m)
}

/// `UserPromptSubmit`: base (+ Codex `turn_id`) + `prompt`.
pub fn prompt_submit(base: &PayloadBase<'_>, turn: u64, prompt: String) -> Value {
    let mut m = base.turn_base(HookPoint::UserPromptSubmit, turn);
    m.insert("prompt".into(), json!(prompt));
    Value::Object(m)
}

/// `PreToolUse` / `PostToolUse`: `tool_name`, `tool_input` (Claude Code: the arguments;
/// Codex: `{command}`), `tool_use_id`, and for PostToolUse `tool_response` text.
pub fn tool_use(
    base: &PayloadBase<'_>,
    point: HookPoint,
    turn: u64,
    name: &str,
    arguments: &Value,
    call_id: &str,
    response: Option<String>,
) -> Value {
    let mut m = base.turn_base(point, turn);
    m.insert("tool_name".into(), json!(name));
    let input = match base.dialect {
        HookDialect::ClaudeCode => arguments.clone(),
        HookDialect::Codex => json!({"command": command_of(arguments)}),
    };
    m.insert("tool_input".into(), input);
    m.insert("tool_use_id".into(), json!(call_id));
    if let Some(response) = response {
        m.insert("tool_response".into(), json!(response));
    }
    Value::Object(m)
}

/// `Stop`: `stop_hook_active: false` (Codex also `last_assistant_message: null`).
pub fn stop(base: &PayloadBase<'_>, turn: u64) -> Value {
    let mut m = base.turn_base(HookPoint::Stop, turn);
    m.insert("stop_hook_active".into(), json!(false));
    match base.dialect {
        HookDialect::ClaudeCode => {}
        HookDialect::Codex => {
            m.insert("last_assistant_message".into(), Value::Null);
        }
    }
    Value::Object(m)
}

/// The `agent_type` reported for `SubagentStart` / `SubagentStop`. Our delegation has no
/// notion of subagent kinds, so every child is reported as Claude Code's default Task-tool
/// kind: a matcher that is empty, `*` or this value fires, one naming another kind never does.
pub const SUBAGENT_TYPE: &str = "general-purpose";

/// `SubagentStart` / `SubagentStop` (Claude Code): the base of the child's session plus
/// `agent_id` and `agent_type`; SubagentStop also carries `stop_hook_active: false`.
pub fn subagent(base: &PayloadBase<'_>, point: HookPoint, agent_id: &str) -> Value {
    let mut m = base.base(point);
    m.insert("agent_id".into(), json!(agent_id));
    m.insert("agent_type".into(), json!(SUBAGENT_TYPE));
    if point == HookPoint::SubagentStop {
        m.insert("stop_hook_active".into(), json!(false));
    }
    Value::Object(m)
}

/// The session workspace a hook runs in (the session header's cwd), else `fallback`.
pub fn workdir(
    session: Option<&Arc<LiveSession>>,
    fallback: Option<&Path>,
) -> Option<std::path::PathBuf> {
    session
        .and_then(|s| s.header().cwd)
        .map(std::path::PathBuf::from)
        .or_else(|| fallback.map(Path::to_path_buf))
}
