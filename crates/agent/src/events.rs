//! The `agent/*` live events. All are dispatched through the agent's scoped context: they
//! reach unscoped listeners and listeners scoped to the agent (or its ancestors).

use dsh_kernel::{EmitEvent, Event, SerialEvent, WaterfallEvent};
use dsh_llm::{LlmCallConfig, LlmFailure, Message, RetryPolicy};
use tokio_util::sync::CancellationToken;

use crate::handle::{AgentRef, AgentStatus};

macro_rules! emit_event {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $payload:ty) => {
        $(#[$doc])*
        pub struct $ty;
        impl Event for $ty {
            const NAME: &'static str = $name;
            type Payload = $payload;
        }
        impl EmitEvent for $ty {}
    };
}

/// Payload of events about an agent and nothing else.
pub struct AgentPayload {
    pub agent: AgentRef,
}

/// Payload of inbox notifications.
pub struct InboxPayload {
    pub agent: AgentRef,
    pub message: std::sync::Arc<Message>,
    /// The turn that claimed the message (claims only).
    pub turn: Option<u64>,
}

/// Payload of `agent/status`.
pub struct StatusPayload {
    pub agent: AgentRef,
    pub status: AgentStatus,
}

/// Why a session became live for an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionStartSource {
    Startup,
    Resume,
}

/// Payload of `agent/session-start`.
pub struct SessionStartPayload {
    pub agent: AgentRef,
    pub source: SessionStartSource,
}

/// Payload of `agent/error`.
pub struct AgentErrorPayload {
    pub agent: AgentRef,
    pub turn: u64,
    pub step: u64,
    pub message: String,
}

emit_event!(
    /// `agent/created` (emit): the agent is published.
    AgentCreated, "agent/created", AgentPayload
);
emit_event!(
    /// `agent/disposed` (emit, contained): after driver quiescence and scope unwind.
    AgentDisposed, "agent/disposed", AgentPayload
);
/// `agent/disposing` (serial): the agent is quiescent and marked disposed (it takes no more
/// input), its session still accepts appends, and its scope is about to unwind. Listeners
/// await the teardown of work the agent owns (background jobs, terminals) so that it ends
/// before the session closes. A failing listener is logged; disposal continues (fails open).
pub struct AgentDisposing;
impl Event for AgentDisposing {
    const NAME: &'static str = "agent/disposing";
    type Payload = AgentPayload;
}
impl SerialEvent for AgentDisposing {}

emit_event!(
    /// `agent/status` (emit, contained): only on an actual change.
    AgentStatusChanged, "agent/status", StatusPayload
);
emit_event!(
    /// `agent/inbox/inserted` (emit, contained).
    InboxInserted, "agent/inbox/inserted", InboxPayload
);
emit_event!(
    /// `agent/inbox/claimed` (emit, contained): the message was claimed by `turn`.
    InboxClaimed, "agent/inbox/claimed", InboxPayload
);
emit_event!(
    /// `agent/inbox/discarded` (emit, contained): a pending message was cancelled.
    InboxDiscarded, "agent/inbox/discarded", InboxPayload
);
emit_event!(
    /// `agent/session-start` (emit, contained).
    SessionStart, "agent/session-start", SessionStartPayload
);
emit_event!(
    /// `agent/error` (emit, contained): a turn failed (not for cancellation).
    AgentErrorEvent, "agent/error", AgentErrorPayload
);

/// What `agent/pre-step` decides.
#[derive(Clone, Debug, PartialEq)]
pub enum PreStepDecision {
    /// Enter these messages (ids and sources preserved) and run the step.
    Enter(Vec<std::sync::Arc<Message>>),
    /// Do not run the step; the turn ends `blocked`.
    Reject,
}

/// Payload of `agent/pre-step`.
pub struct PreStepPayload {
    pub agent: AgentRef,
    /// The exclusive claimed batch (without the runtime-context snapshot).
    pub messages: Vec<std::sync::Arc<Message>>,
    pub turn: u64,
    pub step: u64,
    pub cancel: CancellationToken,
}

/// `agent/pre-step` (waterfall): decides what the model sees for the proposed step.
/// Default: enter the claimed batch plus the runtime-context snapshot when it changed.
/// A throwing listener is a turn error (not a rejection).
pub struct PreStep;
impl Event for PreStep {
    const NAME: &'static str = "agent/pre-step";
    type Payload = PreStepPayload;
}
impl WaterfallEvent for PreStep {
    type Output = PreStepDecision;
}

/// Payload of `agent/request`.
pub struct RequestPayload {
    pub agent: AgentRef,
    pub turn: u64,
    pub step: u64,
    pub cancel: CancellationToken,
}

/// `agent/request` (waterfall): the call config of the next request. Default: the seed
/// config (route, restored explicit effort, max tokens). A throwing listener is a turn error.
pub struct Request;
impl Event for Request {
    const NAME: &'static str = "agent/request";
    type Payload = RequestPayload;
}
impl WaterfallEvent for Request {
    type Output = LlmCallConfig;
}

/// What `agent/request-error` decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestErrorAction {
    /// Re-derive history and request again within the same step.
    Retry,
}

/// Payload of `agent/request-error`.
pub struct RequestErrorPayload {
    pub agent: AgentRef,
    pub turn: u64,
    pub step: u64,
    pub provider: String,
    pub failure: LlmFailure,
    pub retry_policy: Option<RetryPolicy>,
    pub cancel: CancellationToken,
}

/// `agent/request-error` (waterfall): a provider attempt failed. Default: `None` (the
/// failure ends the turn). A throwing listener ends the turn with an error.
pub struct RequestError;
impl Event for RequestError {
    const NAME: &'static str = "agent/request-error";
    type Payload = RequestErrorPayload;
}
impl WaterfallEvent for RequestError {
    type Output = Option<RequestErrorAction>;
}

/// Payload of `agent/turn-stopping`.
pub struct TurnStoppingPayload {
    pub agent: AgentRef,
    pub turn: u64,
    pub cancel: CancellationToken,
}

/// `agent/turn-stopping` (serial): the turn is about to end naturally; a listener may
/// `steer()` to force another step. A throwing listener is a turn error.
pub struct TurnStopping;
impl Event for TurnStopping {
    const NAME: &'static str = "agent/turn-stopping";
    type Payload = TurnStoppingPayload;
}
impl SerialEvent for TurnStopping {}

/// Who a delegated run is: `subagent/start` and `subagent/end` carry it.
#[derive(Clone)]
pub struct SubagentRunInfo {
    /// A fresh id per run (per activation epoch of a continuable child).
    pub run_id: String,
    /// The provider name (`spawn`, `fork`, `codex`, …).
    pub provider: String,
    /// The child's session id (in-process) or the provider's run id.
    pub id: String,
    /// The delegating agent.
    pub parent: AgentRef,
    /// The child agent when it runs in this process (`local`); `None` for a product
    /// subagent in another program, which has no session here.
    pub child: Option<AgentRef>,
}

impl SubagentRunInfo {
    pub fn local(&self) -> bool {
        self.child.is_some()
    }
}

/// Payload of `subagent/end`.
pub struct SubagentRunEnd {
    pub info: SubagentRunInfo,
    /// `completed`, `aborted`, `error`, `max-tokens`, `refusal`.
    pub stop_reason: String,
    /// The child's final answer, omitted when it produced none.
    pub last_assistant_message: Option<Vec<dsh_llm::ContentBlock>>,
}

emit_event!(
    /// `subagent/start` (emit, contained; dispatched through the parent's scope): a delegated
    /// run started (a one-shot child was published, or a continuable child's activation
    /// began). Hook bridges fire `SubagentStart`; the SDK runtime reports nothing here (it
    /// announces children on their session's creation).
    SubagentStart, "subagent/start", SubagentRunInfo
);
emit_event!(
    /// `subagent/end` (emit, contained; parent's scope): a delegated run settled (a one-shot
    /// child's result is known, or a continuable child's activation was disposed after its
    /// settlement notice). Hook bridges fire `SubagentStop`; the SDK runtime sends
    /// `subagent.finished` for local runs.
    SubagentEnd, "subagent/end", SubagentRunEnd
);
