//! The vocabulary of delegation: stop reasons, results, start requests and runs.

use std::sync::{Arc, Mutex};

use dsh_agent::{AgentOptions, AgentRef, ConsumedWork};
use dsh_kernel::{BoxError, BoxFuture, HarnessError};
use dsh_llm::ContentBlock;
use dsh_session::TurnEndReason;
use futures::FutureExt;
use futures::future::Shared;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::descriptor::{Descriptor, ToolFilter};

/// How a delegated run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    Completed,
    Aborted,
    Error,
    MaxTokens,
    Refusal,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Completed => "completed",
            StopReason::Aborted => "aborted",
            StopReason::Error => "error",
            StopReason::MaxTokens => "max-tokens",
            StopReason::Refusal => "refusal",
        }
    }

    /// A one-shot in-process child's stop reason from the turn that accounts for its work
    /// (an interrupted or missing turn is an error).
    pub fn of_run(end: Option<&TurnEndReason>) -> Self {
        match end {
            Some(TurnEndReason::Completed) => StopReason::Completed,
            Some(TurnEndReason::MaxTokens) => StopReason::MaxTokens,
            Some(TurnEndReason::Aborted(_)) => StopReason::Aborted,
            Some(TurnEndReason::Blocked) => StopReason::Refusal,
            Some(
                TurnEndReason::Error(_) | TurnEndReason::Interrupted | TurnEndReason::Other(_),
            )
            | None => StopReason::Error,
        }
    }

    /// A continuable child's activation epoch (interrupted counts as stopped; input
    /// cancelled unrun after a completed turn means the epoch was stopped).
    pub fn of_epoch(work: &ConsumedWork) -> Self {
        match &work.end {
            Some(TurnEndReason::MaxTokens) => StopReason::MaxTokens,
            Some(TurnEndReason::Aborted(_) | TurnEndReason::Interrupted) => StopReason::Aborted,
            Some(TurnEndReason::Error(_)) => StopReason::Error,
            Some(TurnEndReason::Blocked) => StopReason::Refusal,
            Some(TurnEndReason::Completed) | None if work.dropped_unrun => StopReason::Aborted,
            Some(TurnEndReason::Completed) | None => StopReason::Completed,
            Some(TurnEndReason::Other(_)) => StopReason::Error,
        }
    }
}

/// The terminal result of one delegated run.
#[derive(Clone, Debug, PartialEq)]
pub struct SubagentResult {
    /// The child's final answer (its last non-empty assistant message).
    pub output: Vec<ContentBlock>,
    /// The value captured through `structured_output`, when a schema was requested.
    pub structured: Option<Value>,
    /// Provider-authored failure detail (product subagents).
    pub diagnostic: Option<String>,
    pub stop_reason: StopReason,
}

impl SubagentResult {
    pub fn new(output: Vec<ContentBlock>, stop_reason: StopReason) -> Self {
        Self {
            output,
            structured: None,
            diagnostic: None,
            stop_reason,
        }
    }

    /// The text blocks of the output, concatenated.
    pub fn text(&self) -> String {
        text_of(&self.output)
    }
}

/// The concatenated text blocks of `content`.
pub fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// A run or its disposal failed outright (not a stop reason: the run could not produce a
/// result). Renders like a JavaScript `Error` in aggregate messages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RunFault(pub String);

impl RunFault {
    /// `String(error)` of the JavaScript original: `Error: <message>`.
    pub fn js(&self) -> String {
        format!("Error: {}", self.0)
    }
}

/// What a provider may be asked for beyond a plain prompt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    pub output_schema: bool,
    pub depth_limit: bool,
    pub tool_filter: bool,
    pub persona: bool,
    /// Starts the child in a directory of the caller's choosing (the tools' `cwd`).
    pub cwd: bool,
}

impl Capabilities {
    /// Everything (the in-process providers).
    pub const ALL: Capabilities = Capabilities {
        output_schema: true,
        depth_limit: true,
        tool_filter: true,
        persona: true,
        cwd: true,
    };
}

/// A request to start one child.
#[derive(Clone)]
pub struct StartRequest {
    /// The display label (the tool's `description`); workflow children have none.
    pub label: Option<String>,
    pub prompt: Vec<ContentBlock>,
    /// The delegating agent.
    pub parent: AgentRef,
    /// Cancelling it cancels the child (`{kind: "parent"}`).
    pub cancel: CancellationToken,
    /// Route overrides; unset fields inherit the parent's.
    pub agent_options: Option<AgentOptions>,
    /// Finish through `structured_output` with a value matching this object schema.
    pub output_schema: Option<Value>,
    /// Refuse to start when the child would be deeper than this.
    pub max_depth: Option<u64>,
    pub tool_filter: Option<ToolFilter>,
    /// Shadows the deployment persona in the child's prompt.
    pub persona: Option<String>,
    /// The child's starting directory (upstream 0.2's `cwd` argument), already checked;
    /// `None`: the parent's.
    pub cwd: Option<std::path::PathBuf>,
}

impl StartRequest {
    pub fn new(parent: AgentRef, prompt: Vec<ContentBlock>, cancel: CancellationToken) -> Self {
        Self {
            label: None,
            prompt,
            parent,
            cancel,
            agent_options: None,
            output_schema: None,
            max_depth: None,
            tool_filter: None,
            persona: None,
            cwd: None,
        }
    }
}

/// A start request with the descriptor the service built for it.
#[derive(Clone)]
pub struct ResolvedStart {
    pub request: StartRequest,
    pub descriptor: Descriptor,
}

/// The eventual result of a run (cloneable; every clone sees the same outcome).
pub type ResultFuture = Shared<BoxFuture<'static, Result<SubagentResult, RunFault>>>;

type DisposeFn = Box<dyn FnOnce() -> BoxFuture<'static, Result<(), RunFault>> + Send>;

/// One started child. The caller must [`SubagentRun::dispose`] it once the result is in
/// (or to abandon it): disposal stops the child and releases everything it holds.
pub struct SubagentRun {
    /// The child's session id (in process) or a fresh run id (another program).
    pub id: String,
    /// The child agent when it runs in this process.
    pub local: Option<AgentRef>,
    pub result: ResultFuture,
    dispose: Mutex<Option<DisposeFn>>,
}

impl SubagentRun {
    pub fn new(
        id: String,
        local: Option<AgentRef>,
        result: BoxFuture<'static, Result<SubagentResult, RunFault>>,
        dispose: impl FnOnce() -> BoxFuture<'static, Result<(), RunFault>> + Send + 'static,
    ) -> Self {
        Self {
            id,
            local,
            result: result.shared(),
            dispose: Mutex::new(Some(Box::new(dispose))),
        }
    }

    /// Stops the child if it still runs, releases it and waits for its result to settle.
    /// Only a failed disposal is an error; a second call does nothing.
    pub async fn dispose(&self) -> Result<(), RunFault> {
        let f = self
            .dispose
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let disposed = match f {
            Some(f) => f().await,
            None => return Ok(()),
        };
        let _ = self.result.clone().await;
        disposed
    }
}

impl std::fmt::Debug for SubagentRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubagentRun").field("id", &self.id).finish()
    }
}

/// The `SubagentError` family (upstream's codes).
pub fn subagent_error(code: &'static str, message: impl Into<String>) -> BoxError {
    Box::new(HarnessError::new("SubagentError", code, message))
}

/// An [`Arc`]'d provider handle.
pub type ProviderRef = Arc<dyn crate::provider::SubagentProvider>;
