//! One plugin process and its supervisor: spawning it in its own process group, the
//! line-delimited JSON-RPC 2.0 link (a writer thread, a reader thread, pending calls by
//! id), per-call timeouts, and restarts with backoff after a crash, a hang or garbage.
//!
//! Everything blocking runs on plain threads, so a plugin that stops reading its stdin or
//! never answers can stall neither the async runtime nor the session; every call is
//! bounded by the row's `timeoutMs`.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_jsonrpc::Pending;
use dsh_process::ProcessGroup;
use serde_json::Value;

/// How long a killed plugin gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_millis(500);
/// The longest line accepted from a plugin; a longer one counts as garbage.
const MAX_LINE_BYTES: u64 = 64 << 20;
/// The longest wait between two restarts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What the supervisor needs to start the process.
/// The least time a plugin gets to answer `initialize`: an interpreter starting on a
/// loaded machine is not a hung plugin, whatever the per-call `timeoutMs`.
pub const MIN_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct HostConfig {
    /// `plugin-host(<row id>)`, the prefix of every log line.
    pub label: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
    /// Bound of every call (stage, tool call); the handshake gets at least
    /// [`MIN_HANDSHAKE_TIMEOUT`], since it also waits for the interpreter to start.
    pub timeout: Duration,
    /// Restarts after the first start; `0` never restarts.
    pub max_restarts: u32,
    /// Delay before the first restart; doubled for each further one.
    pub backoff: Duration,
    /// The `params` of `initialize`.
    pub initialize: Value,
}

type Reply = Result<Value, String>;

enum Waiter {
    Async(tokio::sync::oneshot::Sender<Reply>),
    Sync(mpsc::Sender<Reply>),
}

impl Waiter {
    fn send(self, reply: Reply) {
        match self {
            Waiter::Async(tx) => {
                let _ = tx.send(reply);
            }
            Waiter::Sync(tx) => {
                let _ = tx.send(reply);
            }
        }
    }
}

/// One running process (one generation).
struct Conn {
    pid: u32,
    writer: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    /// This generation's calls awaiting an answer (ids count from 1 per process).
    pending: Mutex<Pending<Waiter>>,
    group: Mutex<ProcessGroup>,
}

impl Conn {
    fn kill(&self) {
        self.group
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .terminate();
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending<Waiter>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `waiter` and writes the request; its id, or `Err` when the process is gone.
    fn send(&self, method: &str, params: Value, waiter: Waiter) -> Result<u64, String> {
        let gone = || "the plugin process is not running".to_string();
        let id = self.pending().open(waiter).map_err(|_| gone())?;
        if self
            .write(&dsh_jsonrpc::request(id, method, params))
            .is_err()
        {
            self.pending().take(id);
            return Err(gone());
        }
        Ok(id)
    }

    fn write(&self, message: &Value) -> Result<(), ()> {
        let mut bytes = serde_json::to_vec(message).map_err(|_| ())?;
        bytes.push(b'\n');
        let writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        writer.as_ref().ok_or(())?.send(bytes).map_err(|_| ())
    }

    fn forget(&self, id: u64) {
        self.pending().take(id);
    }

    /// Marks the process gone and fails every call still waiting with `reason`.
    fn fail_all(&self, reason: &str) {
        let waiters = self.pending().close();
        for w in waiters {
            w.send(Err(reason.to_string()));
        }
        self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

/// A plugin process under supervision. Cheap to share; [`Host::stop`] ends it for good.
pub struct Host {
    cfg: HostConfig,
    conn: Mutex<Option<Arc<Conn>>>,
    stopped: AtomicBool,
    restarts: AtomicU32,
    wake: Mutex<Option<mpsc::Sender<()>>>,
}

impl Host {
    /// Starts the process and performs the handshake; the answer to `initialize` is
    /// returned. Later generations (restarts) are started by a supervisor thread.
    pub fn start(cfg: HostConfig) -> Result<(Arc<Host>, Value), String> {
        let host = Arc::new(Host {
            cfg,
            conn: Mutex::new(None),
            stopped: AtomicBool::new(false),
            restarts: AtomicU32::new(0),
            wake: Mutex::new(None),
        });
        let (wake_tx, wake_rx) = mpsc::channel();
        *host.wake.lock().unwrap_or_else(|p| p.into_inner()) = Some(wake_tx);
        let registration = host.generation()?;
        let h = host.clone();
        std::thread::Builder::new()
            .name("dsh-plugin-host".into())
            .spawn(move || h.supervise(wake_rx))
            .map_err(|e| format!("cannot start the plugin supervisor: {e}"))?;
        Ok((host, registration))
    }

    pub fn label(&self) -> &str {
        &self.cfg.label
    }

    /// The pid of the running process, if one is up.
    pub fn pid(&self) -> Option<u32> {
        self.current().map(|c| c.pid)
    }

    /// How many times the process was restarted.
    pub fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::Relaxed)
    }

    fn current(&self) -> Option<Arc<Conn>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn wake(&self) {
        if let Some(tx) = self.wake.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let _ = tx.send(());
        }
    }

    /// Ends the plugin: kills the process group and stops restarting. Idempotent.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        if let Some(conn) = self.conn.lock().unwrap_or_else(|p| p.into_inner()).take() {
            conn.kill();
        }
        self.wake();
    }

    /// Spawns one generation and performs the handshake on it.
    fn generation(self: &Arc<Self>) -> Result<Value, String> {
        let conn = self.spawn()?;
        let (tx, rx) = mpsc::channel();
        let id = conn.send("initialize", self.cfg.initialize.clone(), Waiter::Sync(tx))?;
        let bound = self.cfg.timeout.max(MIN_HANDSHAKE_TIMEOUT);
        let reply = match rx.recv_timeout(bound) {
            Ok(reply) => reply,
            Err(_) => {
                conn.forget(id);
                conn.kill();
                Err(format!(
                    "no answer to `initialize` within {} ms",
                    bound.as_millis()
                ))
            }
        };
        match reply {
            Ok(value) => {
                if self.stopped.load(Ordering::SeqCst) {
                    conn.kill();
                    return Err("the plugin was unloaded".into());
                }
                *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(conn);
                Ok(value)
            }
            Err(e) => {
                conn.kill();
                Err(format!("handshake failed: {e}"))
            }
        }
    }

    /// Restarts the process after each death, with doubling backoff, until the restart
    /// budget is spent or the host is stopped.
    fn supervise(self: Arc<Self>, wake: mpsc::Receiver<()>) {
        loop {
            // Wait for the running generation to die (or for stop).
            if wake.recv().is_err() || self.stopped.load(Ordering::SeqCst) {
                return;
            }
            loop {
                self.conn.lock().unwrap_or_else(|p| p.into_inner()).take();
                let n = self.restarts.load(Ordering::Relaxed) + 1;
                if n > self.cfg.max_restarts {
                    tracing::error!(
                        "{}: plugin process stopped; giving up after {} restart(s) — its stages now pass through and its tools fail",
                        self.cfg.label,
                        self.cfg.max_restarts
                    );
                    return;
                }
                let delay = self
                    .cfg
                    .backoff
                    .saturating_mul(1u32 << (n - 1).min(16))
                    .min(MAX_BACKOFF);
                // A stop during the backoff ends the wait early.
                match wake.recv_timeout(delay) {
                    Ok(()) | Err(mpsc::RecvTimeoutError::Timeout)
                        if !self.stopped.load(Ordering::SeqCst) => {}
                    _ => return,
                }
                self.restarts.store(n, Ordering::Relaxed);
                match self.generation() {
                    Ok(_) => {
                        tracing::warn!("{}: plugin process restarted ({n})", self.cfg.label);
                        // Deaths signalled while restarting belong to the old generation.
                        while wake.try_recv().is_ok() {}
                        break;
                    }
                    Err(e) => {
                        if self.stopped.load(Ordering::SeqCst) {
                            return;
                        }
                        tracing::error!("{}: restart {n} failed: {e}", self.cfg.label);
                        while wake.try_recv().is_ok() {}
                    }
                }
            }
        }
    }

    fn spawn(self: &Arc<Self>) -> Result<Arc<Conn>, String> {
        let cfg = &self.cfg;
        let mut command = Command::new(&cfg.command);
        command
            .args(&cfg.args)
            .envs(cfg.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(cwd) = &cfg.cwd {
            command.current_dir(cwd);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start `{}`: {e}", cfg.command))?;
        let pid = child.id();
        let group = ProcessGroup::new(Some(pid), KILL_GRACE);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the plugin process has no pipes".into());
        };
        let (wtx, wrx) = mpsc::channel::<Vec<u8>>();
        let conn = Arc::new(Conn {
            pid,
            writer: Mutex::new(Some(wtx)),
            pending: Mutex::new(Pending::new(1)),
            group: Mutex::new(group),
        });
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map(|_| ())
                .map_err(|e| format!("cannot start a plugin thread: {e}"))
        };
        spawn(
            "dsh-plugin-write",
            Box::new(move || {
                let mut stdin = stdin;
                while let Ok(bytes) = wrx.recv() {
                    if stdin
                        .write_all(&bytes)
                        .and_then(|()| stdin.flush())
                        .is_err()
                    {
                        break;
                    }
                }
            }),
        )?;
        let label = cfg.label.clone();
        spawn(
            "dsh-plugin-stderr",
            Box::new(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    tracing::info!("{label}: stderr: {line}");
                }
            }),
        )?;
        let (c, host) = (conn.clone(), Arc::downgrade(self));
        let label = cfg.label.clone();
        spawn(
            "dsh-plugin-read",
            Box::new(move || {
                let reason = read_loop(&c, stdout, &label);
                c.fail_all(&reason);
                c.kill();
                let status = wait(child);
                if let Some(host) = host.upgrade()
                    && !host.stopped.load(Ordering::SeqCst)
                {
                    tracing::error!("{label}: {reason}; process {status}");
                    host.wake();
                }
            }),
        )?;
        Ok(conn)
    }

    /// Sends a notification to the running process (dropped when none is running).
    pub fn notify(&self, method: &str, params: Value) {
        if let Some(conn) = self.current() {
            let _ = conn.write(&dsh_jsonrpc::notification(method, Some(params)));
        }
    }

    /// One request, bounded by the row's timeout. A timeout kills the process (it is
    /// restarted per the policy); the error says what went wrong.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, String> {
        let conn = self
            .current()
            .ok_or("the plugin process is not running (restarting or stopped)")?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let id = conn.send(method, params, Waiter::Async(tx))?;
        match tokio::time::timeout(self.cfg.timeout, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err("the plugin process is not running".into()),
            Err(_) => {
                conn.forget(id);
                tracing::error!(
                    "{}: `{method}` timed out after {} ms; killing the plugin process",
                    self.cfg.label,
                    self.cfg.timeout.as_millis()
                );
                conn.kill();
                Err(format!(
                    "timed out after {} ms",
                    self.cfg.timeout.as_millis()
                ))
            }
        }
    }
}

fn wait(mut child: Child) -> String {
    match child.wait() {
        Ok(status) => status.to_string(),
        Err(e) => format!("could not be waited for ({e})"),
    }
}

/// One line a plugin wrote on stdout, as the host understands it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PluginLine {
    /// Blank: skipped.
    Blank,
    /// A `log` notification with its message.
    Log(String),
    /// Some other request or notification (the host answers none).
    Ignored,
    /// The answer to call `id`.
    Reply {
        id: u64,
        reply: Result<Value, String>,
    },
    /// The link is broken: why (garbage, a response without a numeric id).
    Broken(String),
}

/// Classifies one line of plugin output (without its newline).
pub(crate) fn classify_line(line: &[u8]) -> PluginLine {
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    if text.is_empty() {
        return PluginLine::Blank;
    }
    let message: Value = match serde_json::from_str(text) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            let shown: String = text.chars().take(200).collect();
            return PluginLine::Broken(format!(
                "plugin wrote garbage to stdout (not a JSON-RPC message): {shown}"
            ));
        }
    };
    if message.get("method").is_some() {
        // Plugin → host messages: only `log` notifications are understood.
        if message.get("method").and_then(Value::as_str) == Some("log") {
            let text = message
                .pointer("/params/message")
                .and_then(Value::as_str)
                .unwrap_or_default();
            return PluginLine::Log(text.to_string());
        }
        return PluginLine::Ignored;
    }
    let Some(id) = message.get("id").and_then(Value::as_u64) else {
        return PluginLine::Broken("plugin wrote a response without a numeric id".into());
    };
    let reply = match (message.get("result"), message.get("error")) {
        (_, Some(error)) => Err(error
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| error.to_string(), str::to_string)),
        (Some(result), None) => Ok(result.clone()),
        (None, None) => Ok(Value::Null),
    };
    PluginLine::Reply { id, reply }
}

/// Reads one line (newline included) of at most `max` bytes into `line`. `Ok(false)` at
/// end of input; an over-long line is an error naming the limit.
pub(crate) fn read_bounded_line(
    reader: &mut impl std::io::BufRead,
    line: &mut Vec<u8>,
    max: u64,
) -> Result<bool, String> {
    line.clear();
    match std::io::Read::take(&mut *reader, max).read_until(b'\n', line) {
        Ok(0) | Err(_) => Ok(false),
        Ok(_) if line.last() != Some(&b'\n') && line.len() as u64 >= max => {
            Err(format!("plugin wrote a line longer than {max} bytes"))
        }
        Ok(_) => Ok(true),
    }
}

/// Reads responses until end of input or garbage; returns why it stopped.
fn read_loop(conn: &Conn, stdout: std::process::ChildStdout, label: &str) -> String {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        match read_bounded_line(&mut reader, &mut line, MAX_LINE_BYTES) {
            Ok(true) => {}
            Ok(false) => return "plugin process exited".into(),
            Err(why) => return why,
        }
        match classify_line(&line) {
            PluginLine::Blank => {}
            PluginLine::Log(text) => tracing::info!("{label}: {text}"),
            PluginLine::Ignored => {
                tracing::warn!("{label}: ignored a request or notification from the plugin");
            }
            PluginLine::Broken(why) => return why,
            PluginLine::Reply { id, reply } => {
                let waiter = conn.pending().take(id);
                if let Some(w) = waiter {
                    w.send(reply);
                }
            }
        }
    }
}

/// Entry point for the fuzz target (`fuzz/`): plugin stdout bytes through the host's
/// bounded line reader and classifier; returns how many lines were read.
pub(crate) fn fuzz_lines(bytes: &[u8], max_line: u64) -> usize {
    let mut reader = std::io::BufReader::with_capacity(64, bytes);
    let mut line = Vec::new();
    let mut n = 0;
    while let Ok(true) = read_bounded_line(&mut reader, &mut line, max_line) {
        let _ = classify_line(&line);
        n += 1;
    }
    n
}

#[cfg(test)]
mod line_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn plugin_lines_are_classified_and_bounded() {
        assert_eq!(classify_line(b"  \r\n"), PluginLine::Blank);
        assert_eq!(
            classify_line(br#"{"jsonrpc":"2.0","method":"log","params":{"message":"hi"}}"#),
            PluginLine::Log("hi".into())
        );
        assert_eq!(
            classify_line(br#"{"method":"other","id":3}"#),
            PluginLine::Ignored
        );
        assert_eq!(
            classify_line(br#"{"id":7,"result":{"ok":true}}"#),
            PluginLine::Reply {
                id: 7,
                reply: Ok(json!({"ok": true}))
            }
        );
        assert_eq!(
            classify_line(br#"{"id":8,"error":{"code":1,"message":"no"}}"#),
            PluginLine::Reply {
                id: 8,
                reply: Err("no".into())
            }
        );
        assert_eq!(
            classify_line(br#"{"id":"x","result":1}"#),
            PluginLine::Broken("plugin wrote a response without a numeric id".into())
        );
        assert!(matches!(classify_line(b"[1,2]"), PluginLine::Broken(_)));
        assert!(matches!(
            classify_line(&[0xFF, 0xFE]),
            PluginLine::Broken(_)
        ));

        let mut reader = std::io::BufReader::with_capacity(4, &b"ab\ncdefgh\nij"[..]);
        let mut line = Vec::new();
        assert_eq!(read_bounded_line(&mut reader, &mut line, 5), Ok(true));
        assert_eq!(line, b"ab\n");
        assert_eq!(
            read_bounded_line(&mut reader, &mut line, 5),
            Err("plugin wrote a line longer than 5 bytes".into())
        );
        assert_eq!(fuzz_lines(b"{}\n\n{\"id\":1}\nrest", 64), 4);
    }
}
