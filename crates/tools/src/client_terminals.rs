//! Client terminal routes: a frontend whose client offers terminals (an editor over ACP
//! with `clientCapabilities.terminal`) can have a session's shell commands run in a
//! terminal the client shows live. Only commands that would run unconfined anyway use it
//! (`danger-full-access`, or no sandbox in the composition): the client runs what it is
//! given outside dsh's sandbox, so a confined command never goes there.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_kernel::{BoxError, BoxFuture};
use tokio_util::sync::CancellationToken;

use crate::tool::ToolRunContext;

/// One command for a client terminal.
#[derive(Clone, Debug)]
pub struct TerminalCommand {
    /// The tool call the terminal belongs to (the client shows it in that call).
    pub call_id: String,
    /// A shell command line (`bash -c`).
    pub command: String,
    pub cwd: PathBuf,
    /// The complete environment the command gets.
    pub env: Vec<(String, String)>,
    /// Killed after this long (`timed_out`).
    pub timeout: Option<Duration>,
    /// Output the client keeps (it drops the oldest beyond it).
    pub output_limit: usize,
}

/// How a client-run command ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TerminalExit {
    /// Everything the terminal printed (stdout and stderr together), as the client kept it.
    pub output: String,
    /// The client dropped output beyond the limit.
    pub truncated: bool,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub timed_out: bool,
    pub aborted: bool,
}

/// Shell commands through a client's terminals.
pub trait ClientTerminals: Send + Sync + 'static {
    fn run(
        &self,
        command: TerminalCommand,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<TerminalExit, BoxError>>;
}

/// The routes, by session id (a service; the agent plugin provides it).
#[derive(Default)]
pub struct ClientTerminalRoutes {
    by_session: Mutex<HashMap<String, Arc<dyn ClientTerminals>>>,
}

impl ClientTerminalRoutes {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn route(&self, id: &str, terminals: Arc<dyn ClientTerminals>) {
        self.by_session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), terminals);
    }

    pub fn unroute(&self, id: &str) {
        self.by_session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    pub fn get(&self, id: &str) -> Option<Arc<dyn ClientTerminals>> {
        self.by_session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }
}

/// The terminal route of the session a tool call runs in, if its frontend set one.
pub fn client_terminals(run: &ToolRunContext) -> Option<Arc<dyn ClientTerminals>> {
    let id = run.session.as_ref()?.id();
    run.ctx.get::<ClientTerminalRoutes>()?.get(&id)
}
