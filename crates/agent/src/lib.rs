//! Agents: the `Agent` handle, the inbox and its claim rule, the `agent/*` events, the agent
//! registry with its factory seam, and the default turn/step driver (the `agent-loop`
//! plugin) — replaceable by any other driver that installs an `AgentFactory`.

mod consumed;
mod driver;
mod events;
mod handle;
mod inbox;
mod plugins;
mod registry;

pub use consumed::{ConsumedWork, fold_consumed_work};
pub use driver::{
    DEFAULT_MAX_IDENTICAL_FAILING_CALLS, DEFAULT_MAX_STEPS_PER_TURN,
    DEFAULT_MAX_TOOL_CALLS_PER_RESPONSE, LoopAgent, LoopConfig, RuntimeContextProjection,
};
pub use events::{
    AgentCreated, AgentDisposed, AgentDisposing, AgentErrorEvent, AgentErrorPayload, AgentPayload,
    AgentStatusChanged, InboxClaimed, InboxDiscarded, InboxInserted, InboxPayload, PreStep,
    PreStepDecision, PreStepPayload, Request, RequestError, RequestErrorAction,
    RequestErrorPayload, RequestPayload, SessionStart, SessionStartPayload, SessionStartSource,
    StatusPayload, SubagentEnd, SubagentRunEnd, SubagentRunInfo, SubagentStart, TurnStopping,
    TurnStoppingPayload,
};
pub use handle::{Agent, AgentOptions, AgentRef, AgentStatus, InboxSnapshot, SendError};
pub use inbox::{Inbox, Splice};
pub use plugins::{
    AgentLoopPlugin, AgentPlugin, LlmPlugin, SessionPlugin, SystemPromptPlugin, ToolsPlugin,
    install_request_invariant, register_core,
};
pub use registry::{AgentFactory, AgentSource, Agents, CreateAgent, SessionMeta, SetupFn};
