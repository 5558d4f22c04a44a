//! The vocabulary shared by the service, the backends and the tools.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{BoxError, BoxFuture, Context};
use dsh_session::LiveSession;
use tokio_util::sync::CancellationToken;

/// Why a send stopped waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitReason {
    /// The shell (or the program in the foreground) waits for input.
    StdinRead,
    /// Output went quiet for the idle period.
    InferredIdle,
    Timeout,
    SessionExit,
}

impl WaitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::StdinRead => "stdin_read",
            WaitReason::InferredIdle => "inferred_idle",
            WaitReason::Timeout => "timeout",
            WaitReason::SessionExit => "session_exit",
        }
    }
}

/// Whether the terminal's shell still runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionStatus {
    Running,
    Exited {
        code: Option<i32>,
        signal: Option<String>,
    },
}

impl SessionStatus {
    /// `running` or `exited code=<n|null> signal=<s|null>`.
    pub fn describe(&self) -> String {
        match self {
            SessionStatus::Running => "running".into(),
            SessionStatus::Exited { code, signal } => format!(
                "exited code={} signal={}",
                code.map_or("null".to_string(), |c| c.to_string()),
                signal.as_deref().unwrap_or("null")
            ),
        }
    }

    pub fn to_value(&self) -> serde_json::Value {
        match self {
            SessionStatus::Running => serde_json::json!({"kind": "running"}),
            SessionStatus::Exited { code, signal } => {
                serde_json::json!({"kind": "exited", "exitCode": code, "signal": signal})
            }
        }
    }
}

/// Text typed into a terminal.
#[derive(Clone, Debug, PartialEq)]
pub struct SendRequest {
    pub text: String,
    /// Press Enter after the text.
    pub submit: bool,
}

/// What a send saw.
#[derive(Clone, Debug, PartialEq)]
pub struct SendResult {
    /// Sanitized output since the send began (its tail when long).
    pub viewport: String,
    pub wait: WaitReason,
    pub status: SessionStatus,
    /// The viewport lost its beginning.
    pub truncated: bool,
}

/// A page of scrollback, counted in lines from the newest.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadPage {
    pub text: String,
    pub total_lines: usize,
    pub line_begin: usize,
    pub line_end: usize,
    pub truncated: bool,
}

/// Signals the model may deliver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TerminalSignal {
    Int,
    Term,
    Kill,
    Tstp,
    Hup,
}

impl TerminalSignal {
    pub const NAMES: [&'static str; 5] = ["SIGINT", "SIGTERM", "SIGKILL", "SIGTSTP", "SIGHUP"];

    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "SIGINT" => Self::Int,
            "SIGTERM" => Self::Term,
            "SIGKILL" => Self::Kill,
            "SIGTSTP" => Self::Tstp,
            "SIGHUP" => Self::Hup,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Int => "SIGINT",
            Self::Term => "SIGTERM",
            Self::Kill => "SIGKILL",
            Self::Tstp => "SIGTSTP",
            Self::Hup => "SIGHUP",
        }
    }
}

/// One running send: its result, and the output it produced since the last read.
pub struct SendHandle {
    pub done: BoxFuture<'static, Result<SendResult, BoxError>>,
    /// Output since the previous call (for background sends), and whether some was lost.
    pub read_output: Arc<dyn Fn() -> (String, bool) + Send + Sync>,
}

/// A live terminal. Implementations must be safe to call from any task, bound what they
/// keep, and make `close` end every process they started.
pub trait TerminalSession: Send + Sync + 'static {
    /// What the terminal printed at startup (normally the prompt).
    fn motd(&self) -> String;
    fn pid(&self) -> Option<u32>;
    fn status(&self) -> SessionStatus;
    /// Types `request` and waits for the terminal to settle; `cancel` interrupts the
    /// foreground program and keeps waiting.
    fn start_send(&self, request: SendRequest, cancel: CancellationToken) -> SendHandle;
    fn read(&self, offset: usize, count: usize) -> ReadPage;
    /// Delivers `signal` to the foreground process group; returns its id.
    fn signal(&self, signal: TerminalSignal) -> Result<i32, BoxError>;
    fn close(&self) -> BoxFuture<'static, Result<(), BoxError>>;
}

/// What a backend needs to start a terminal.
#[derive(Clone)]
pub struct SpawnSpec {
    /// `pty-<n>`.
    pub terminal_id: String,
    pub owner_session: Arc<LiveSession>,
    /// The context of the owning agent (services: sandbox policy, sandbox).
    pub ctx: Context,
    pub cwd: Option<PathBuf>,
}

/// A kind of terminal (`shell`).
pub trait TerminalBackend: Send + Sync + 'static {
    fn type_name(&self) -> &str;
    fn spawn(
        &self,
        spec: SpawnSpec,
    ) -> BoxFuture<'static, Result<Arc<dyn TerminalSession>, BoxError>>;
}
