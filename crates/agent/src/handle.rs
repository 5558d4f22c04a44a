//! The `Agent` handle every frontend and plugin drives.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{BoxFuture, Context};
use dsh_llm::Message;
use dsh_session::{CancelCause, InboxTarget, LiveSession};

/// `idle` or `running` (maintenance reports idle).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentStatus {
    Idle,
    Running,
}

impl AgentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentStatus::Idle => "idle",
            AgentStatus::Running => "running",
        }
    }
}

/// Route and limits of an agent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentOptions {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub max_tokens: Option<u64>,
    /// The selection's reasoning effort (`agent-default-model.reasoningEffort`); `None`
    /// leaves it to the adapter's default.
    pub reasoning_effort: Option<String>,
}

/// An input was refused (invalid message, duplicate id, log failure).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct SendError(pub String);

/// Pending inbox items.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InboxSnapshot {
    pub next_turn: Vec<Arc<Message>>,
    pub next_step: Vec<Arc<Message>>,
}

/// A live agent: one session, one inbox, one driver. Implementations (drivers) must:
/// run the synchronous prefix of a wake inline (by the time `followup`/`steer` returns on
/// an idle agent, `turn/start` and the claim are logged); record every model-visible input
/// in the session before a request uses it; close every turn they open; and honour
/// `cancel` at every await point, leaving the log consistent.
pub trait Agent: Send + Sync + 'static {
    fn id(&self) -> &str;
    fn session(&self) -> &Arc<LiveSession>;
    /// The agent-scoped context: registrations made through it are visible to this agent
    /// only and are undone when the agent is disposed.
    fn ctx(&self) -> &Context;
    fn options(&self) -> AgentOptions;
    fn cwd(&self) -> Option<PathBuf>;
    fn status(&self) -> AgentStatus;
    fn inbox(&self) -> InboxSnapshot;
    /// Queues `message` durably; `wakeup` starts the driver when idle.
    fn send(&self, message: Message, target: InboxTarget, wakeup: bool) -> Result<(), SendError>;
    /// Removes one pending inbox message (a durable cancellation); false if it is not pending.
    fn discard(&self, message_id: &str) -> bool;
    /// Cancels the current activity with `cause`; unless `keep_inbox`, pending input is
    /// discarded durably (even when idle).
    fn cancel(&self, cause: CancelCause, keep_inbox: bool);
    /// Resolves when the agent is idle (following replacement activities).
    fn when_idle(&self) -> BoxFuture<'static, ()>;
    /// Cancels with `disposed`, waits for quiescence, unwinds the agent scope, and
    /// announces `agent/disposed` then `session/disposed`.
    fn dispose(&self) -> BoxFuture<'static, ()>;

    /// A queued prompt: its own turn.
    fn followup(&self, message: Message) -> Result<(), SendError> {
        self.send(message, InboxTarget::NextTurn, true)
    }
    /// Steering: the next step boundary, waking the driver.
    fn steer(&self, message: Message) -> Result<(), SendError> {
        self.send(message, InboxTarget::NextStep, true)
    }
    /// Context for the next step without waking the driver.
    fn inject(&self, message: Message) -> Result<(), SendError> {
        self.send(message, InboxTarget::NextStep, false)
    }
    /// The (provider, model) the next request routes to: the latest logged
    /// `request/header`, else this agent's options, else `default`.
    fn current_route(&self, default: (&str, &str)) -> (String, String) {
        let routed = self
            .session()
            .read(|s| s.request_header().map(|h| h.config.clone()));
        let options = self.options();
        let provider = routed
            .as_ref()
            .map(|c| c.provider.clone())
            .or(options.provider)
            .unwrap_or_else(|| default.0.to_string());
        let model = routed
            .map(|c| c.model)
            .or(options.model)
            .unwrap_or_else(|| default.1.to_string());
        (provider, model)
    }
}

/// A shared agent handle.
pub type AgentRef = Arc<dyn Agent>;
