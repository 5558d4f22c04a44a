//! One language-server process and its JSON-RPC connection.
//!
//! The child runs in its own process group, registered with the reaper
//! (`dsh_process`), so it dies with its connection, its provider, or dsh itself. Its
//! pipes are served by plain threads (a writer fed by a channel, a frame reader, a bounded
//! stderr tail), so a connection works from any async runtime and can be shut down from the
//! synchronous unload path. Any transport failure (the process exiting, a write failing, a
//! malformed frame) is recorded once, fails every pending and later request with the same
//! message, and kills the group.

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dsh_jsonrpc::{Pending, RpcError};
use dsh_process::ProcessGroup;
use lsp_types::notification::{Cancel, Notification as _, Progress, PublishDiagnostics};
use lsp_types::request::{
    ApplyWorkspaceEdit, RegisterCapability, Request as _, UnregisterCapability,
    WorkDoneProgressCreate, WorkspaceConfiguration,
};
use lsp_types::{self as lsp, Url};
use serde::Deserialize as _;
use serde_json::Value;

use crate::framing::{encode, read_message};

/// How a request failed.
#[derive(Clone, Debug, PartialEq)]
pub enum CallError {
    /// The connection is unusable (exit, write failure, malformed output); a fresh process
    /// may succeed.
    Transport(String),
    /// The server answered with an error response.
    Response(String),
}

/// How to start a server.
#[derive(Clone, Debug)]
pub struct ServerCommand {
    /// The resolved executable.
    pub program: PathBuf,
    /// The name the child sees as `argv[0]`.
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub max_message_bytes: usize,
    pub max_stderr_bytes: usize,
    /// The answer to every `workspace/configuration` item.
    pub configuration: Value,
    /// SIGTERM → SIGKILL grace, and the grace a cancelled request gets.
    pub kill_grace: Duration,
}

type Callback = Box<dyn FnOnce(Result<Value, CallError>) + Send>;

struct State {
    /// Our requests awaiting an answer (ids from 1), closed by the first failure.
    pending: Pending<Callback>,
    failure: Option<String>,
}

/// What the server told about its own work and the documents' diagnostics.
#[derive(Default)]
struct Watch {
    /// Work-done progress in flight: token → its title and what it says now.
    progress: HashMap<String, (Option<String>, String)>,
    /// `experimental/serverStatus` (rust-analyzer): whether it is idle, once it said so.
    quiescent: Option<bool>,
    /// The status message that came with it.
    status: Option<String>,
    /// `textDocument/publishDiagnostics`: uri → (publication number, diagnostics).
    diagnostics: HashMap<Url, (u64, Vec<lsp::Diagnostic>)>,
    publications: u64,
    /// Whether the server announced any work or status yet.
    noticed: bool,
}

impl Watch {
    /// Why the server is not ready, or `None` when it is.
    fn busy(&self) -> Option<String> {
        let work = || {
            let mut items: Vec<&String> = self.progress.values().map(|(_, t)| t).collect();
            items.sort();
            items
                .into_iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join("; ")
        };
        match self.quiescent {
            Some(true) => None,
            Some(false) => Some(
                self.status
                    .clone()
                    .filter(|s| !s.is_empty())
                    .or_else(|| Some(work()).filter(|w| !w.is_empty()))
                    .unwrap_or_else(|| "indexing".into()),
            ),
            None if self.progress.is_empty() => None,
            None => Some(work()),
        }
    }
}

struct Shared {
    state: Mutex<State>,
    watch: Mutex<Watch>,
    /// Woken on every change of `watch`.
    watched: tokio::sync::Notify,
    stderr: Mutex<Vec<u8>>,
    max_stderr: usize,
    exited: AtomicBool,
    stderr_closed: AtomicBool,
    group: Mutex<ProcessGroup>,
    configuration: Value,
}

/// Lines of a dead server's stderr quoted in its error.
const QUOTED_LINES: usize = 4;
/// Characters of a dead server's stderr quoted in its error.
const QUOTED_CHARS: usize = 600;

/// The head of a dead server's stderr: what it said first (the reason, usually), not the
/// backtrace that follows.
fn quoted_stderr(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect();
    let mut out = lines
        .iter()
        .take(QUOTED_LINES)
        .copied()
        .collect::<Vec<_>>()
        .join("\n");
    let cut = out.chars().count() > QUOTED_CHARS;
    if cut {
        out = out.chars().take(QUOTED_CHARS).collect();
    }
    if cut || lines.len() > QUOTED_LINES {
        out.push_str(&format!(
            "\n… ({} more lines)",
            lines.len().saturating_sub(QUOTED_LINES)
        ));
    }
    out
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn exit_message(&self) -> String {
        let tail = lock(&self.stderr);
        let text = String::from_utf8_lossy(&tail);
        let text = quoted_stderr(&text);
        if text.is_empty() {
            "language server exited".into()
        } else {
            format!("language server exited; stderr: {text}")
        }
    }

    /// The process is gone: waits briefly for the rest of its stderr, so the failure can
    /// quote it, then fails with the exit message.
    fn fail_exited(&self) {
        let deadline = Instant::now() + Duration::from_millis(500);
        while !self.stderr_closed.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.fail(self.exit_message());
    }

    /// Records the first fatal failure, fails everything pending and kills the group.
    fn fail(&self, message: String) {
        let pending: Vec<Callback> = {
            let mut state = lock(&self.state);
            if state.failure.is_some() {
                return;
            }
            tracing::debug!("language server connection failed: {message}");
            state.failure = Some(message.clone());
            state.pending.close()
        };
        for cb in pending {
            cb(Err(CallError::Transport(message.clone())));
        }
        lock(&self.group).terminate();
    }

    fn settle(&self, id: u64, outcome: Result<Value, CallError>) {
        let cb = lock(&self.state).pending.take(id);
        if let Some(cb) = cb {
            cb(outcome);
        }
    }
}

/// A live connection. Dropping it kills the server's process group.
pub struct Connection {
    shared: Arc<Shared>,
    writer: Mutex<mpsc::Sender<Vec<u8>>>,
    pid: Option<u32>,
}

impl Connection {
    /// Spawns the server with piped stdio in its own process group.
    pub fn spawn(spec: &ServerCommand) -> Result<Arc<Self>, String> {
        let mut child = Command::new(&spec.program)
            .arg0(&spec.command)
            .args(&spec.args)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&spec.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start language server \"{}\": {e}", spec.command))?;
        let pid = child.id();
        let group = ProcessGroup::new(Some(pid), spec.kill_grace);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("language server started without stdio pipes".into());
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                pending: Pending::new(1),
                failure: None,
            }),
            watch: Mutex::default(),
            watched: tokio::sync::Notify::new(),
            stderr: Mutex::new(Vec::new()),
            max_stderr: spec.max_stderr_bytes,
            exited: AtomicBool::new(false),
            stderr_closed: AtomicBool::new(false),
            group: Mutex::new(group),
            configuration: spec.configuration.clone(),
        });
        let (tx, rx) = mpsc::channel::<Vec<u8>>();

        let s = shared.clone();
        spawn_thread("dsh-lsp-write", move || write_loop(stdin, rx, &s))?;
        let s = shared.clone();
        spawn_thread("dsh-lsp-stderr", move || {
            stderr_loop(stderr, &s);
            s.stderr_closed.store(true, Ordering::SeqCst);
        })?;
        let s = shared.clone();
        let reply = tx.clone();
        let max = spec.max_message_bytes;
        spawn_thread("dsh-lsp-read", move || {
            let mut reader = BufReader::new(stdout);
            loop {
                match read_message(&mut reader, max) {
                    Ok(Some(message)) => dispatch(&s, &reply, message),
                    Ok(None) => {
                        // End of output: the process is exiting.
                        s.fail_exited();
                        break;
                    }
                    Err(e) => {
                        s.fail(e);
                        break;
                    }
                }
            }
        })?;
        let s = shared.clone();
        spawn_thread("dsh-lsp-wait", move || {
            let _ = child.wait();
            s.exited.store(true, Ordering::SeqCst);
            lock(&s.group).disarm();
            s.fail_exited();
        })?;
        Ok(Arc::new(Self {
            shared,
            writer: Mutex::new(tx),
            pid: Some(pid),
        }))
    }

    /// The server's pid.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The recorded transport failure, if the connection is dead.
    pub fn failure(&self) -> Option<String> {
        lock(&self.shared.state).failure.clone()
    }

    fn send(&self, message: &Value) {
        let _ = lock(&self.writer).send(encode(message));
    }

    /// Why the server is not ready yet (indexing, loading), or `None` when it is.
    pub fn busy(&self) -> Option<String> {
        lock(&self.shared.watch).busy()
    }

    /// Waits until the server is ready, at most `limit`; returns what it is still busy
    /// with when the limit passed. A dead connection is not waited for.
    pub async fn wait_ready(&self, limit: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let woken = self.shared.watched.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let busy = self.busy();
            if busy.is_none() || self.failure().is_some() {
                return busy;
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return self.busy();
            }
        }
    }

    /// Waits at most `limit` for the server's first progress, status or diagnostics notice.
    pub async fn wait_noticed(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let woken = self.shared.watched.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if lock(&self.shared.watch).noticed || self.failure().is_some() {
                return;
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return;
            }
        }
    }

    /// The number of diagnostics publications so far (a mark for [`Self::diagnostics_after`]).
    pub fn publications(&self) -> u64 {
        lock(&self.shared.watch).publications
    }

    /// The diagnostics of `uri` published after publication `mark`, waiting at most `limit`
    /// for them; `None` when none came.
    pub async fn diagnostics_after(
        &self,
        uri: &Url,
        mark: u64,
        limit: Duration,
    ) -> Option<Vec<lsp::Diagnostic>> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let woken = self.shared.watched.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some((n, list)) = lock(&self.shared.watch).diagnostics.get(uri)
                && *n > mark
            {
                return Some(list.clone());
            }
            if self.failure().is_some() || tokio::time::timeout_at(deadline, woken).await.is_err() {
                return None;
            }
        }
    }

    /// Sends a notification (dropped silently on a dead connection).
    pub fn notify(&self, method: &str, params: Value) {
        if self.failure().is_none() {
            self.send(&dsh_jsonrpc::notification(method, Some(params)));
        }
    }

    /// Sends a request; `done` receives its outcome exactly once. Returns the request id.
    fn request_with(&self, method: &str, params: Value, done: Callback) -> u64 {
        let id = {
            let mut state = lock(&self.shared.state);
            match state.pending.open(done) {
                Ok(id) => id,
                Err(done) => {
                    let failure = state.failure.clone().unwrap_or_default();
                    drop(state);
                    done(Err(CallError::Transport(failure)));
                    return 0;
                }
            }
        };
        self.send(&dsh_jsonrpc::request(id, method, params));
        id
    }

    /// Sends a request and awaits its outcome. Dropping the future before it settles (a
    /// cancelled or timed-out tool call) sends `$/cancelRequest` and, when the server has
    /// not settled the request within the kill grace, kills it.
    pub async fn request(
        self: &Arc<Self>,
        method: &str,
        params: Value,
        grace: Duration,
    ) -> Result<Value, CallError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let id = self.request_with(
            method,
            params,
            Box::new(move |outcome| {
                let _ = tx.send(outcome);
            }),
        );
        let mut guard = CancelOnDrop {
            conn: self.clone(),
            id,
            grace,
            armed: true,
        };
        let outcome = rx.await.unwrap_or_else(|_| {
            Err(CallError::Transport(
                "language server connection closed".into(),
            ))
        });
        guard.armed = false;
        outcome
    }

    /// Graceful shutdown (`shutdown` request, `exit` notification) within `timeout`, then
    /// SIGTERM → grace → SIGKILL of the group; returns once the group is gone or the grace
    /// has run out. Blocking: called from the unload path.
    pub fn shutdown_blocking(&self, timeout: Duration, grace: Duration) {
        let deadline = Instant::now() + timeout;
        if self.failure().is_none() {
            let (tx, rx) = mpsc::channel();
            self.request_with(
                "shutdown",
                Value::Null,
                Box::new(move |outcome| {
                    let _ = tx.send(outcome);
                }),
            );
            if let Ok(Ok(_)) = rx.recv_timeout(timeout) {
                self.notify("exit", Value::Null);
                while Instant::now() < deadline && !self.shared.exited.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        self.shared.fail("language server was shut down".into());
        let stop = Instant::now() + grace + Duration::from_millis(200);
        while Instant::now() < stop && lock(&self.shared.group).is_alive() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Fails the connection and kills the server now.
    pub fn kill(&self, reason: &str) {
        self.shared.fail(reason.to_string());
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shared.fail("language server connection closed".into());
    }
}

struct CancelOnDrop {
    conn: Arc<Connection>,
    id: u64,
    grace: Duration,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.armed || self.conn.failure().is_some() {
            return;
        }
        if let Ok(id) = i32::try_from(self.id) {
            let params = lsp::CancelParams {
                id: lsp::NumberOrString::Number(id),
            };
            self.conn.notify(
                Cancel::METHOD,
                serde_json::to_value(params).unwrap_or_default(),
            );
        }
        let conn = self.conn.clone();
        let (id, grace) = (self.id, self.grace);
        // A server that ignores the cancel is torn down after the grace.
        let _ = std::thread::Builder::new()
            .name("dsh-lsp-cancel".into())
            .spawn(move || {
                let deadline = Instant::now() + grace;
                while Instant::now() < deadline {
                    if !lock(&conn.shared.state).pending.awaits(id) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                if lock(&conn.shared.state).pending.awaits(id) {
                    conn.kill("language server did not settle a cancelled request");
                }
            });
    }
}

fn spawn_thread(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(|_| ())
        .map_err(|e| format!("cannot start a language-server thread: {e}"))
}

fn write_loop(mut stdin: impl Write, rx: mpsc::Receiver<Vec<u8>>, shared: &Shared) {
    for frame in rx {
        if let Err(e) = stdin.write_all(&frame).and_then(|()| stdin.flush()) {
            shared.fail(format!("cannot write to the language server: {e}"));
            return;
        }
    }
}

fn stderr_loop(mut stderr: impl Read, shared: &Shared) {
    let mut buf = [0u8; 8192];
    loop {
        match stderr.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut tail = lock(&shared.stderr);
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > shared.max_stderr {
                    let cut = tail.len() - shared.max_stderr;
                    tail.drain(..cut);
                }
            }
        }
    }
}

/// Handles one message from the server.
fn dispatch(shared: &Shared, reply: &mpsc::Sender<Vec<u8>>, message: Value) {
    let method = message.get("method").and_then(Value::as_str);
    let id = message.get("id").cloned();
    match (method, id) {
        (None, Some(id)) => {
            let Some(id) = id.as_u64() else { return };
            if let Some(error) = message.get("error") {
                let text = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("LSP error response")
                    .to_string();
                shared.settle(id, Err(CallError::Response(text)));
            } else {
                let result = message.get("result").cloned().unwrap_or(Value::Null);
                shared.settle(id, Ok(result));
            }
        }
        (Some(method), Some(id)) => {
            let answer = match method {
                WorkspaceConfiguration::METHOD => {
                    let n = message
                        .get("params")
                        .and_then(|p| lsp::ConfigurationParams::deserialize(p).ok())
                        .map_or(0, |p| p.items.len());
                    Ok(Value::Array(vec![shared.configuration.clone(); n]))
                }
                WorkDoneProgressCreate::METHOD
                | RegisterCapability::METHOD
                | UnregisterCapability::METHOD => Ok(Value::Null),
                ApplyWorkspaceEdit::METHOD => {
                    Err(format!("{method} is not permitted by this host"))
                }
                other => Err(format!("unsupported server request: {other}")),
            };
            let frame = dsh_jsonrpc::response(
                id.clone(),
                answer.map_err(|message| RpcError::new(-32601, message)),
            );
            let _ = reply.send(encode(&frame));
        }
        (Some(method), None) => notice(shared, method, message.get("params")),
        (None, None) => {}
    }
}

/// One piece of a progress value as text: `title: message (42%)`.
fn progress_text(title: Option<&str>, message: Option<&str>, percentage: Option<u32>) -> String {
    let mut text = match (title, message) {
        (Some(t), Some(m)) => format!("{t}: {m}"),
        (Some(t), None) => t.to_string(),
        (None, Some(m)) => m.to_string(),
        (None, None) => "working".to_string(),
    };
    if let Some(p) = percentage {
        text.push_str(&format!(" ({p}%)"));
    }
    text
}

/// Notifications: work-done progress, the server's status, published diagnostics (logs
/// and the rest are not used; a notification this host cannot read is ignored).
fn notice(shared: &Shared, method: &str, params: Option<&Value>) {
    let Some(params) = params else { return };
    let mut watch = lock(&shared.watch);
    match method {
        Progress::METHOD => {
            let Ok(p) = lsp::ProgressParams::deserialize(params) else {
                return;
            };
            let token = match p.token {
                lsp::NumberOrString::String(s) => s,
                lsp::NumberOrString::Number(n) => n.to_string(),
            };
            let lsp::ProgressParamsValue::WorkDone(work) = p.value;
            match work {
                lsp::WorkDoneProgress::Begin(b) => {
                    let text = progress_text(Some(&b.title), b.message.as_deref(), b.percentage);
                    watch.progress.insert(token, (Some(b.title), text));
                }
                lsp::WorkDoneProgress::Report(r) => {
                    let title = watch.progress.get(&token).and_then(|(t, _)| t.clone());
                    let text = progress_text(title.as_deref(), r.message.as_deref(), r.percentage);
                    watch.progress.insert(token, (title, text));
                }
                lsp::WorkDoneProgress::End(_) => {
                    watch.progress.remove(&token);
                }
            }
        }
        // rust-analyzer's extension (not in the protocol types).
        "experimental/serverStatus" => {
            watch.quiescent = params.get("quiescent").and_then(Value::as_bool);
            watch.status = params
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        PublishDiagnostics::METHOD => {
            let Ok(p) = lsp::PublishDiagnosticsParams::deserialize(params) else {
                return;
            };
            watch.publications += 1;
            let n = watch.publications;
            watch.diagnostics.insert(p.uri, (n, p.diagnostics));
        }
        _ => return,
    }
    watch.noticed = true;
    drop(watch);
    shared.watched.notify_waiters();
}

#[cfg(test)]
mod tests {
    use super::quoted_stderr;

    #[test]
    fn a_dead_servers_stderr_is_quoted_by_its_head() {
        assert_eq!(
            quoted_stderr("  \nfailed: no component\n"),
            "failed: no component"
        );
        let backtrace: String = (0..40).map(|i| format!("frame {i}\n")).collect();
        let quoted = quoted_stderr(&format!("error: cannot run\n{backtrace}"));
        assert_eq!(
            quoted,
            "error: cannot run\nframe 0\nframe 1\nframe 2\n… (37 more lines)"
        );
    }
}
