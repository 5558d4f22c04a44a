//! One tool call in flight, its result, the policy decisions and the `tools/*` events.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{BoxError, BoxFuture, Context, EmitEvent, Event, HarnessError, WaterfallEvent};
use dsh_llm::{ContentBlock, Message};
use dsh_session::{ErrorInfo, LiveSession};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A tool call as the pipeline sees it.
#[derive(Clone)]
pub struct ToolExecution {
    pub call_id: String,
    pub root_call_id: String,
    pub name: String,
    /// Parsed arguments: `""` → `{}`, invalid JSON → the raw string.
    pub arguments: Value,
    /// The calling agent's scoped context (events for this call are scoped to it).
    pub ctx: Context,
    pub session: Option<Arc<LiveSession>>,
    pub cwd: Option<PathBuf>,
    pub cancel: CancellationToken,
    /// The enclosing call of a nested (code-mode) dispatch.
    pub parent: Option<String>,
}

impl ToolExecution {
    pub fn new(
        call_id: impl Into<String>,
        name: impl Into<String>,
        arguments: Value,
        ctx: Context,
    ) -> Self {
        let call_id = call_id.into();
        Self {
            root_call_id: call_id.clone(),
            call_id,
            name: name.into(),
            arguments,
            ctx,
            session: None,
            cwd: None,
            cancel: CancellationToken::new(),
            parent: None,
        }
    }
}

impl std::fmt::Debug for ToolExecution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolExecution")
            .field("call_id", &self.call_id)
            .field("name", &self.name)
            .finish()
    }
}

/// Parses raw model arguments the way upstream does: `""` → `{}`, valid JSON → value,
/// invalid JSON → the raw string (the tool's validation then fails).
pub fn parse_arguments(raw: &str) -> Value {
    if raw.is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

/// Why a call failed.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolFailure {
    pub message: String,
    /// `{name, code}` of a typed failure; written durably.
    pub info: Option<ErrorInfo>,
}

/// The outcome of one call, before it becomes a durable `tool/result`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ToolResult {
    pub is_error: bool,
    pub content: Vec<ContentBlock>,
    pub error: Option<ToolFailure>,
    pub meta: Option<Value>,
    pub additional_contexts: Vec<Message>,
    pub concludes_turn: bool,
    /// The canonical JSON value the tool reported ([`crate::ToolRunContext::set_value`]);
    /// never model-visible or logged, only handed to a Code Mode program.
    pub value: Option<Value>,
}

impl ToolResult {
    pub fn success(content: Vec<ContentBlock>) -> Self {
        Self {
            content,
            ..Self::default()
        }
    }

    /// `Error: <message>`, with `{name, code}` when `error` is (or wraps) a [`HarnessError`].
    pub fn from_error(error: &(dyn std::error::Error + 'static)) -> Self {
        let info = HarnessError::find(error).map(|h| ErrorInfo {
            name: h.name.to_string(),
            code: h.code.to_string(),
        });
        Self::failure(error.to_string(), info)
    }

    pub fn failure(message: impl Into<String>, info: Option<ErrorInfo>) -> Self {
        let message = message.into();
        Self {
            is_error: true,
            content: vec![ContentBlock::text(format!("Error: {message}"))],
            error: Some(ToolFailure { message, info }),
            ..Self::default()
        }
    }

    /// A policy denial: `Error: <reason>` without a durable error code.
    pub fn denied(reason: &str) -> Self {
        Self::failure(reason, None)
    }

    pub fn aborted() -> Self {
        Self::failure(
            "tool call aborted",
            Some(ErrorInfo {
                name: "AbortError".into(),
                code: "ABORTED".into(),
            }),
        )
    }

    pub fn aborted_before_dispatch() -> Self {
        Self::failure(
            "tool call aborted before dispatch",
            Some(ErrorInfo {
                name: "AbortError".into(),
                code: "ABORTED_BEFORE_DISPATCH".into(),
            }),
        )
    }

    pub fn unknown_tool(name: &str) -> Self {
        Self::failure(
            format!("unknown tool \"{name}\""),
            Some(ErrorInfo {
                name: "ToolNotFoundError".into(),
                code: "UNKNOWN_TOOL".into(),
            }),
        )
    }

    pub fn invalid_args(message: String) -> Self {
        Self::failure(
            message,
            Some(ErrorInfo {
                name: "ToolArgsError".into(),
                code: "INVALID_ARGS".into(),
            }),
        )
    }
}

/// `tools/pre-execute` decision.
#[derive(Clone, Debug, PartialEq)]
pub enum PreToolDecision {
    Allow,
    Deny { reason: String },
    Ask { reason: Option<String> },
}

/// `tools/post-execute` decision.
#[derive(Clone, Debug, PartialEq)]
pub enum PostToolDecision {
    /// Keep the result, optionally replacing its content; contexts are added.
    Accept {
        content: Option<Vec<ContentBlock>>,
        additional_contexts: Vec<Message>,
    },
    /// Turn the result into an error carrying `feedback`.
    Block {
        feedback: Vec<ContentBlock>,
        additional_contexts: Vec<Message>,
    },
}

impl PostToolDecision {
    pub fn accept() -> Self {
        PostToolDecision::Accept {
            content: None,
            additional_contexts: Vec::new(),
        }
    }
}

/// `tools/pre-execute` (waterfall, scoped to the calling agent): allow, deny or ask before
/// the body runs. Default: allow. A throwing listener fails the call (error result, no
/// post-execute).
pub struct PreExecute;
impl Event for PreExecute {
    const NAME: &'static str = "tools/pre-execute";
    type Payload = ToolExecution;
}
impl WaterfallEvent for PreExecute {
    type Output = PreToolDecision;
}

/// `tools/execute` (waterfall, scoped): wraps the body. Default: run the tool body. A
/// throwing listener fails the call.
pub struct Execute;
impl Event for Execute {
    const NAME: &'static str = "tools/execute";
    type Payload = ToolExecution;
}
impl WaterfallEvent for Execute {
    type Output = ToolResult;
}

/// Payload of [`PostExecute`].
pub struct PostExecutePayload {
    pub exec: ToolExecution,
    pub result: ToolResult,
}

/// `tools/post-execute` (waterfall, scoped): accept, rewrite or block a result.
/// Default: accept. A throwing listener turns the result into an error result.
pub struct PostExecute;
impl Event for PostExecute {
    const NAME: &'static str = "tools/post-execute";
    type Payload = PostExecutePayload;
}
impl WaterfallEvent for PostExecute {
    type Output = PostToolDecision;
}

/// Payload of [`ToolResultEvent`].
pub struct ToolResultPayload {
    pub exec: ToolExecution,
    pub result: ToolResult,
}

/// `tools/result` (emit, contained): a call's final result.
pub struct ToolResultEvent;
impl Event for ToolResultEvent {
    const NAME: &'static str = "tools/result";
    type Payload = ToolResultPayload;
}
impl EmitEvent for ToolResultEvent {}

/// What an approval request resolves to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalOutcome {
    AllowedOnce,
    Rejected,
    Cancelled,
    Unavailable,
}

/// A request to the user to approve one call.
pub struct ApprovalRequest {
    /// The id the approval service logs in `approval/asked` / `approval/decided`; the
    /// service mints it before asking (requesters leave it empty), so a frontend can name
    /// the pending decision the log shows.
    pub approval_id: String,
    pub ctx: Context,
    pub session: Option<Arc<LiveSession>>,
    pub tool_name: String,
    pub call_id: String,
    pub arguments: Value,
    pub reason: Option<String>,
    pub cancel: CancellationToken,
}

/// The `ctx.approval` service. Implementations must resolve (never hang past `cancel`).
pub trait ApprovalService: Send + Sync + 'static {
    fn request(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalOutcome>;
}

/// A registered approval service (service key).
pub struct Approval(pub Arc<dyn ApprovalService>);

/// Answers to approvals that come from outside this process (service key): a session store
/// whose clients answer elsewhere provides it (a team worker's turn, whose gateway clients
/// answer), and a front end with no one to ask answers through it. It receives each request
/// after the approval service logged `approval/asked`, and resolves by `cancel` at the
/// latest.
pub struct RemoteApprovals(pub Arc<dyn ApprovalService>);

/// Result type of waterfall listeners in this crate.
pub type Decision<T> = Result<T, BoxError>;
