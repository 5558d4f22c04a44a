//! The ACP messages this server sends, as typed structs of our own.
//!
//! Why not the official `agent-client-protocol` (or `-schema`) types: the conformance suite
//! compares our stdout with upstream's recorded frames byte for byte, key order included,
//! and the official types serialize in their own order and with their own defaults. Their
//! `InitializeResponse`, for one, writes `protocolVersion, agentCapabilities, authMethods,
//! agentInfo` and fills `agentCapabilities` with `loadSession: false` and
//! `mcpCapabilities`, where upstream's recorded answer is `protocolVersion, agentInfo,
//! agentCapabilities {promptCapabilities}, authMethods`. The full crate also brings its
//! own connection runtime (async-io, blocking, futures-concurrency, clap) next to ours, and
//! the schema crate `derive_more`, `serde_with` and `strum`, for types we would have to
//! re-order anyway. So the shapes follow the ACP schema, field order follows upstream's
//! frames, and an absent optional field is left out, as upstream leaves it.

use serde::Serialize;
use serde_json::Value;

/// `session/update` params.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionNotification<'a> {
    pub session_id: &'a str,
    pub update: SessionUpdate,
}

/// One session update, tagged by `sessionUpdate`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(
    tag = "sessionUpdate",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum SessionUpdate {
    UserMessageChunk {
        content: ContentBlock,
        #[serde(skip_serializing_if = "Option::is_none")]
        message_id: Option<Value>,
    },
    AgentMessageChunk {
        content: ContentBlock,
        #[serde(skip_serializing_if = "Option::is_none")]
        message_id: Option<Value>,
    },
    AgentThoughtChunk {
        content: ContentBlock,
        #[serde(skip_serializing_if = "Option::is_none")]
        message_id: Option<Value>,
    },
    ToolCall(ToolCall),
    ToolCallUpdate(ToolCallUpdate),
    Plan {
        entries: Vec<PlanEntry>,
    },
    SessionInfoUpdate {
        title: String,
        updated_at: String,
    },
    AvailableCommandsUpdate {
        available_commands: Vec<AvailableCommand>,
    },
    CurrentModeUpdate {
        current_mode_id: String,
    },
    UsageUpdate {
        used: u64,
        size: u64,
    },
}

impl SessionUpdate {
    /// A text chunk of the agent's answer.
    pub fn agent_text(text: impl Into<String>) -> Self {
        SessionUpdate::AgentMessageChunk {
            content: ContentBlock::text(text),
            message_id: None,
        }
    }
}

/// A content block (only text is sent).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text { text: String },
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }
}

/// Where a tool call runs or ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
}

/// A file a call works on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolCallLocation {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
}

/// A tool call as editors render it (`tool_call`, and the call of a permission request).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub tool_call_id: String,
    pub title: String,
    pub kind: &'static str,
    pub raw_input: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locations: Option<Vec<ToolCallLocation>>,
    pub status: ToolCallStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ToolCallContent>>,
}

/// What a call shows: text, or a diff of a file it changed.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum ToolCallContent {
    Content {
        content: ContentBlock,
    },
    Diff {
        path: String,
        /// The text before (`null` for a new file).
        old_text: Value,
        new_text: String,
    },
    /// A terminal of the client's, embedded live.
    Terminal {
        terminal_id: String,
    },
}

impl ToolCallContent {
    pub fn text(text: impl Into<String>) -> Self {
        ToolCallContent::Content {
            content: ContentBlock::text(text),
        }
    }
}

/// A change to an announced call; absent fields stay as they were.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallUpdate {
    pub tool_call_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ToolCallStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ToolCallContent>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<RawOutput>,
}

/// The result text of a finished call.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RawOutput {
    pub content: String,
    pub is_error: bool,
}

/// One line of the plan (the session's todo list).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanEntry {
    pub content: String,
    pub priority: &'static str,
    pub status: &'static str,
}

/// A slash command the client can offer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AvailableCommand {
    pub name: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<CommandInput>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CommandInput {
    pub hint: String,
}

/// The `initialize` answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResponse {
    pub protocol_version: u32,
    pub agent_info: Implementation,
    pub agent_capabilities: AgentCapabilities,
    pub auth_methods: Vec<Value>,
}

#[derive(Serialize)]
pub struct Implementation {
    pub name: &'static str,
    pub version: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_session: Option<bool>,
    pub prompt_capabilities: PromptCapabilities,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_capabilities: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_capabilities: Option<Value>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptCapabilities {
    pub image: bool,
    pub audio: bool,
    pub embedded_context: bool,
}

/// Why a prompt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    Cancelled,
}

/// The `session/prompt` answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptResponse {
    pub stop_reason: StopReason,
}

/// A choice a permission request offers.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionOption {
    pub option_id: &'static str,
    pub name: &'static str,
    pub kind: &'static str,
}

/// The call a permission request is about: described in full (rich projection), or by id.
#[derive(Serialize)]
#[serde(untagged)]
pub enum PermissionToolCall {
    Described(ToolCall),
    #[serde(rename_all = "camelCase")]
    Id {
        tool_call_id: String,
    },
}

/// `session/request_permission` params.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPermission<'a> {
    pub session_id: &'a str,
    pub tool_call: PermissionToolCall,
    pub options: Vec<PermissionOption>,
}

/// The `session/new` answer in the committed projection.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSession {
    pub session_id: String,
}

/// The `session/list` answer (every stored session, no cursor pages).
#[derive(Serialize)]
pub struct SessionList {
    pub sessions: Vec<SessionInfo>,
}

/// One stored session in a `session/list` answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub session_id: String,
    pub cwd: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub updated_at: String,
}

/// The answer to `session/new` (with the new id), `session/load` and `session/resume` in
/// the rich projection.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionAnswer {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modes: Option<SessionModes>,
    pub config_options: Vec<ConfigOption>,
}

/// The session modes (the permission presets) and the current one.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionModes {
    pub current_mode_id: String,
    pub available_modes: Vec<SessionMode>,
}

#[derive(Serialize)]
pub struct SessionMode {
    pub id: String,
    pub name: String,
    pub description: String,
}

/// A session setting the client can change (`session/set_config_option`): a select.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOption {
    pub id: &'static str,
    pub name: &'static str,
    pub category: &'static str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub current_value: String,
    pub options: Vec<ConfigValue>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConfigValue {
    pub value: String,
    pub name: String,
}

/// The `session/set_config_option` answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOptions {
    pub config_options: Vec<ConfigOption>,
}

/// `fs/read_text_file` params.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadTextFile<'a> {
    pub session_id: &'a str,
    pub path: String,
}

/// `fs/write_text_file` params.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteTextFile<'a> {
    pub session_id: &'a str,
    pub path: String,
    pub content: String,
}

/// `terminal/create` params.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateTerminal<'a> {
    pub session_id: &'a str,
    pub command: &'a str,
    pub args: Vec<&'a str>,
    pub env: Vec<EnvVariable<'a>>,
    pub cwd: String,
    pub output_byte_limit: u64,
}

#[derive(Serialize)]
pub struct EnvVariable<'a> {
    pub name: &'a str,
    pub value: &'a str,
}

/// The params naming one client terminal (`terminal/output`, `wait_for_exit`, `kill`,
/// `release`).
#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminalRef<'a> {
    pub session_id: &'a str,
    pub terminal_id: &'a str,
}

/// A message as a JSON value (these types always serialize).
pub fn to_value<T: Serialize>(message: &T) -> Value {
    serde_json::to_value(message).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn text<T: Serialize>(v: &T) -> String {
        serde_json::to_string(v).unwrap_or_default()
    }

    #[test]
    fn frames_keep_the_key_order_upstream_records() {
        let init = InitializeResponse {
            protocol_version: 1,
            agent_info: Implementation {
                name: "n",
                version: "v",
            },
            agent_capabilities: AgentCapabilities {
                load_session: None,
                prompt_capabilities: PromptCapabilities {
                    image: false,
                    audio: false,
                    embedded_context: false,
                },
                mcp_capabilities: None,
                session_capabilities: None,
            },
            auth_methods: Vec::new(),
        };
        assert_eq!(
            text(&init),
            r#"{"protocolVersion":1,"agentInfo":{"name":"n","version":"v"},"agentCapabilities":{"promptCapabilities":{"image":false,"audio":false,"embeddedContext":false}},"authMethods":[]}"#
        );
        let chunk = SessionNotification {
            session_id: "s",
            update: SessionUpdate::agent_text("hi"),
        };
        assert_eq!(
            text(&chunk),
            r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}"#
        );
        let ask = RequestPermission {
            session_id: "s",
            tool_call: PermissionToolCall::Id {
                tool_call_id: "c".into(),
            },
            options: vec![PermissionOption {
                option_id: "allow-once",
                name: "Allow once",
                kind: "allow_once",
            }],
        };
        assert_eq!(
            text(&ask),
            r#"{"sessionId":"s","toolCall":{"toolCallId":"c"},"options":[{"optionId":"allow-once","name":"Allow once","kind":"allow_once"}]}"#
        );
        assert_eq!(
            text(&PromptResponse {
                stop_reason: StopReason::EndTurn
            }),
            r#"{"stopReason":"end_turn"}"#
        );
    }

    #[test]
    fn tool_calls_and_updates_leave_absent_fields_out() {
        let call = SessionUpdate::ToolCall(ToolCall {
            tool_call_id: "c".into(),
            title: "Read /w/a".into(),
            kind: "read",
            raw_input: json!({"file_path": "a"}),
            locations: Some(vec![ToolCallLocation {
                path: "/w/a".into(),
                line: None,
            }]),
            status: ToolCallStatus::Pending,
            content: None,
        });
        assert_eq!(
            text(&call),
            r#"{"sessionUpdate":"tool_call","toolCallId":"c","title":"Read /w/a","kind":"read","rawInput":{"file_path":"a"},"locations":[{"path":"/w/a"}],"status":"pending"}"#
        );
        let done = SessionUpdate::ToolCallUpdate(ToolCallUpdate {
            tool_call_id: "c".into(),
            status: Some(ToolCallStatus::Completed),
            content: Some(vec![ToolCallContent::Diff {
                path: "/w/a".into(),
                old_text: Value::Null,
                new_text: "x".into(),
            }]),
            raw_output: Some(RawOutput {
                content: "ok".into(),
                is_error: false,
            }),
        });
        assert_eq!(
            text(&done),
            r#"{"sessionUpdate":"tool_call_update","toolCallId":"c","status":"completed","content":[{"type":"diff","path":"/w/a","oldText":null,"newText":"x"}],"rawOutput":{"content":"ok","isError":false}}"#
        );
    }
}
