//! `terminal-bash`: an interactive bash on a real pseudo-terminal (portable-pty), confined
//! like bash commands in confined modes, with a controlled prompt (`dsh> ` after an OSC
//! `133;D;<status>` marker) that tells when the shell waits for the next command.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dsh_kernel::{BoxError, BoxFuture};
use dsh_process::ProcessGroup;
use dsh_sandbox::{Sandbox, SandboxPolicy};
use portable_pty::{ChildKiller, CommandBuilder, MasterPty, PtySize, native_pty_system};
use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use tokio_util::sync::CancellationToken;

use crate::inspect;
use crate::sanitize::Sanitizer;
use crate::types::{
    ReadPage, SendHandle, SendRequest, SendResult, SessionStatus, SpawnSpec, TerminalBackend,
    TerminalSession, TerminalSignal, WaitReason,
};

/// `terminal-bash` settings (upstream's defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct LocalConfig {
    pub backend_type: String,
    pub shell_path: String,
    pub shell_args: Vec<String>,
    pub rows: u16,
    pub cols: u16,
    pub scrollback_lines: usize,
    pub scrollback_max_bytes: usize,
    pub max_read_bytes: usize,
    pub poll: Duration,
    pub exact_probe_after: Duration,
    pub idle_silence: Duration,
    pub handoff_grace: Duration,
    pub timeout: Duration,
    pub dispose_grace: Duration,
}

impl Default for LocalConfig {
    fn default() -> Self {
        Self {
            backend_type: "shell".into(),
            shell_path: "/bin/bash".into(),
            shell_args: vec!["--noprofile".into(), "--norc".into(), "-i".into()],
            rows: 40,
            cols: 160,
            scrollback_lines: 10_000,
            scrollback_max_bytes: 4 * 1024 * 1024,
            max_read_bytes: 256 * 1024,
            poll: Duration::from_millis(50),
            exact_probe_after: Duration::from_millis(150),
            idle_silence: Duration::from_millis(3000),
            handoff_grace: Duration::from_millis(500),
            timeout: Duration::from_millis(30_000),
            dispose_grace: Duration::from_millis(3000),
        }
    }
}

/// The local backend.
pub struct LocalBackend {
    pub config: LocalConfig,
}

/// Text kept from the front or the back within a byte bound.
#[derive(Default)]
struct Tail {
    text: String,
    truncated: bool,
}

impl Tail {
    fn push(&mut self, s: &str, max: usize) {
        self.text.push_str(s);
        if self.text.len() > max {
            let mut cut = self.text.len() - max;
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            self.text.drain(..cut);
            self.truncated = true;
        }
    }

    fn take(&mut self) -> (String, bool) {
        let t = std::mem::take(&mut self.text);
        (t, std::mem::replace(&mut self.truncated, false))
    }
}

struct Inner {
    sanitizer: Sanitizer,
    /// Completed lines plus the current partial line (last element).
    lines: VecDeque<String>,
    line_bytes: usize,
    scrollback_truncated: bool,
    send: Tail,
    background: Tail,
    last_output: Instant,
    /// Prompt markers seen since the current send began.
    prompts_since_send: u64,
    exited: Option<SessionStatus>,
    reader_done: bool,
    /// The shell's own process group, learned at its first prompt.
    shell_pgid: Option<i32>,
}

struct Shared {
    config: LocalConfig,
    inner: Mutex<Inner>,
    writer: Mutex<Option<Box<dyn Write + Send>>>,
    master: Mutex<Box<dyn MasterPty + Send>>,
    killer: Mutex<Box<dyn ChildKiller + Send + Sync>>,
    pid: Option<u32>,
    group: Mutex<Option<ProcessGroup>>,
    motd: Mutex<String>,
    closing: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn absorb(&self, chunk: &[u8]) {
        let mut g = lock(&self.inner);
        let inner = &mut *g;
        let out = inner.sanitizer.push(chunk);
        if out.prompt {
            inner.prompts_since_send += 1;
            if inner.shell_pgid.is_none() {
                inner.shell_pgid = lock(&self.master).process_group_leader();
            }
        }
        if out.text.is_empty() && !out.prompt {
            return;
        }
        inner.last_output = Instant::now();
        inner.send.push(&out.text, self.config.max_read_bytes);
        inner.background.push(&out.text, self.config.max_read_bytes);
        let mut parts = out.text.split('\n');
        if let Some(first) = parts.next() {
            if inner.lines.is_empty() {
                inner.lines.push_back(String::new());
            }
            if let Some(last) = inner.lines.back_mut() {
                last.push_str(first);
            }
            inner.line_bytes += first.len();
        }
        for part in parts {
            inner.lines.push_back(part.to_string());
            inner.line_bytes += part.len() + 1;
        }
        while inner.lines.len() > self.config.scrollback_lines.max(1)
            || (inner.line_bytes > self.config.scrollback_max_bytes && inner.lines.len() > 1)
        {
            if let Some(front) = inner.lines.pop_front() {
                inner.line_bytes = inner.line_bytes.saturating_sub(front.len() + 1);
                inner.scrollback_truncated = true;
            }
        }
    }

    fn status(&self) -> SessionStatus {
        lock(&self.inner)
            .exited
            .clone()
            .unwrap_or(SessionStatus::Running)
    }

    fn foreground(&self) -> Option<i32> {
        lock(&self.master).process_group_leader()
    }

    fn write(self: &Arc<Self>, bytes: Vec<u8>) -> tokio::task::JoinHandle<std::io::Result<()>> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut w = lock(&this.writer);
            match w.as_mut() {
                Some(w) => {
                    w.write_all(&bytes)?;
                    w.flush()
                }
                None => Err(std::io::Error::other("the terminal is closed")),
            }
        })
    }

    /// Waits until the terminal settles after a write (see [`WaitReason`]).
    async fn settle(self: &Arc<Self>, started: Instant, cancel: &CancellationToken) -> WaitReason {
        let c = &self.config;
        let mut interrupted = false;
        loop {
            tokio::time::sleep(c.poll).await;
            if cancel.is_cancelled() && !interrupted {
                interrupted = true;
                if let Some(fg) = self.foreground().and_then(Pid::from_raw) {
                    let _ = kill_process_group(fg, Signal::INT);
                }
            }
            let (exited, idle, prompted, at_prompt, shell_pgid, prompt_seen) = {
                let g = lock(&self.inner);
                (
                    g.exited.is_some() || g.reader_done,
                    g.last_output.elapsed(),
                    g.prompts_since_send > 0,
                    g.sanitizer.after_prompt == "dsh> ",
                    g.shell_pgid,
                    g.sanitizer.prompt_seen,
                )
            };
            if exited {
                return WaitReason::SessionExit;
            }
            let fg = self.foreground();
            if prompted && at_prompt && idle >= c.poll && fg.is_some() && fg == shell_pgid {
                return WaitReason::StdinRead;
            }
            let elapsed = started.elapsed();
            if elapsed >= c.exact_probe_after
                && !at_prompt
                && let Some(fg) = fg
                && inspect::group_waits_on_stdin(fg)
            {
                return WaitReason::StdinRead;
            }
            let quiet = c.idle_silence
                + if prompt_seen {
                    c.handoff_grace
                } else {
                    Duration::ZERO
                };
            if idle >= quiet {
                return WaitReason::InferredIdle;
            }
            if elapsed >= c.timeout {
                return WaitReason::Timeout;
            }
        }
    }

    /// Ends every process of the terminal's session: SIGHUP/SIGTERM, the grace period,
    /// then SIGKILL.
    async fn shut_down(self: &Arc<Self>) -> Result<(), BoxError> {
        if self.closing.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let Some(pid) = self.pid.and_then(|p| i32::try_from(p).ok()) else {
            return Ok(());
        };
        let members = |with_shell: bool| {
            let mut m = inspect::session_members(pid);
            if with_shell && !m.contains(&pid) && inspect::alive(pid) {
                m.push(pid);
            }
            m
        };
        for p in members(true) {
            if let Some(p) = Pid::from_raw(p) {
                let _ = kill_process(
                    p,
                    if p.as_raw_nonzero().get() == pid {
                        Signal::HUP
                    } else {
                        Signal::TERM
                    },
                );
            }
        }
        let deadline = Instant::now() + self.config.dispose_grace;
        while Instant::now() < deadline && !members(true).is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for p in members(true) {
            if let Some(p) = Pid::from_raw(p) {
                let _ = kill_process(p, Signal::KILL);
            }
        }
        let _ = lock(&self.killer).kill();
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline && !members(true).is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        *lock(&self.writer) = None;
        if let Some(mut g) = lock(&self.group).take() {
            g.disarm();
        }
        let left = members(true);
        if left.is_empty() {
            Ok(())
        } else {
            let list: Vec<String> = left.iter().map(ToString::to_string).collect();
            Err(format!(
                "terminal cleanup failed; surviving pid(s): {}",
                list.join(", ")
            )
            .into())
        }
    }
}

/// The local terminal.
pub struct LocalSession {
    shared: Arc<Shared>,
}

impl Drop for LocalSession {
    fn drop(&mut self) {
        // A session dropped without close still takes its processes with it.
        if !self.shared.closing.load(Ordering::SeqCst) {
            let _ = lock(&self.shared.killer).kill();
        }
    }
}

impl TerminalSession for LocalSession {
    fn motd(&self) -> String {
        lock(&self.shared.motd).clone()
    }

    fn pid(&self) -> Option<u32> {
        self.shared.pid
    }

    fn status(&self) -> SessionStatus {
        self.shared.status()
    }

    fn start_send(&self, request: SendRequest, cancel: CancellationToken) -> SendHandle {
        let shared = self.shared.clone();
        let reader = self.shared.clone();
        SendHandle {
            done: Box::pin(async move {
                {
                    let mut g = lock(&shared.inner);
                    g.send = Tail::default();
                    g.prompts_since_send = 0;
                }
                let started = Instant::now();
                let mut bytes = request.text.into_bytes();
                if request.submit {
                    bytes.push(b'\r');
                }
                if !bytes.is_empty() {
                    match shared.write(bytes).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => return Err(format!("terminal write failed: {e}").into()),
                        Err(e) => return Err(format!("terminal write failed: {e}").into()),
                    }
                }
                let wait = shared.settle(started, &cancel).await;
                let (viewport, truncated) = lock(&shared.inner).send.take();
                Ok(SendResult {
                    viewport,
                    wait,
                    status: shared.status(),
                    truncated,
                })
            }),
            read_output: Arc::new(move || lock(&reader.inner).background.take()),
        }
    }

    fn read(&self, offset: usize, count: usize) -> ReadPage {
        let g = lock(&self.shared.inner);
        let total = g.lines.len();
        let end = total.saturating_sub(offset);
        let start = end.saturating_sub(count);
        let text: Vec<&str> = g.lines.range(start..end).map(String::as_str).collect();
        let n = text.len();
        ReadPage {
            text: text.join("\n"),
            total_lines: total,
            line_begin: offset,
            line_end: offset + n,
            truncated: g.scrollback_truncated && start == 0,
        }
    }

    fn signal(&self, signal: TerminalSignal) -> Result<i32, BoxError> {
        let pid = self.shared.pid.unwrap_or(0);
        let Some(fg) = self.shared.foreground() else {
            return Err(
                format!("cannot resolve foreground process group for terminal {pid}").into(),
            );
        };
        let shell = lock(&self.shared.inner).shell_pgid.unwrap_or(pid as i32);
        if signal == TerminalSignal::Kill && fg == shell {
            return Err(
                "refusing to SIGKILL the terminal shell; terminate the terminal session instead"
                    .into(),
            );
        }
        let sig = match signal {
            TerminalSignal::Int => Signal::INT,
            TerminalSignal::Term => Signal::TERM,
            TerminalSignal::Kill => Signal::KILL,
            TerminalSignal::Tstp => Signal::TSTP,
            TerminalSignal::Hup => Signal::HUP,
        };
        let group = Pid::from_raw(fg).ok_or("the foreground process group is invalid")?;
        kill_process_group(group, sig)
            .map_err(|e| format!("cannot deliver {}: {e}", signal.name()))?;
        Ok(fg)
    }

    fn close(&self) -> BoxFuture<'static, Result<(), BoxError>> {
        let shared = self.shared.clone();
        Box::pin(async move { shared.shut_down().await })
    }
}

/// For an interactive shell bubblewrap must not start a new session: the shell keeps the
/// terminal as its controlling terminal (input injection through it reaches only itself).
fn interactive(mut confined: dsh_sandbox::runner::Confined) -> dsh_sandbox::runner::Confined {
    if confined.runner == "bwrap"
        && let Some(end) = confined.args.iter().position(|a| a == "--")
        && let Some(i) = confined.args[..end]
            .iter()
            .position(|a| a == "--new-session")
    {
        confined.args.remove(i);
    }
    confined
}

fn child_env(spec: &SpawnSpec) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, v)| {
            !dsh_sandbox::secrets::is_secret_name(k)
                && !dsh_sandbox::secrets::is_secret_value(v)
                && !k.starts_with("DSH_")
        })
        .collect();
    let overrides = [
        ("TERM", "dumb".to_string()),
        ("PAGER", "cat".into()),
        ("GIT_PAGER", "cat".into()),
        ("DSH_SHELL", "1".into()),
        ("DSH_SESSION_ID", spec.owner_session.id()),
        ("DSH_PTY_SESSION_ID", spec.terminal_id.clone()),
        ("PS1", "dsh> ".into()),
        (
            "PROMPT_COMMAND",
            "printf \"\\033]133;D;%s\\007\" \"$?\"; PS1='dsh> '".into(),
        ),
        ("BASH_SILENCE_DEPRECATION_WARNING", "1".into()),
    ];
    for (k, v) in overrides {
        env.retain(|(e, _)| e != k);
        env.push((k.to_string(), v));
    }
    env
}

/// Starts the threads that feed the terminal's output into `shared` and record the shell's
/// exit.
fn spawn_watchers(
    shared: &Arc<Shared>,
    reader: Box<dyn std::io::Read + Send>,
    mut child: Box<dyn portable_pty::Child + Send + Sync>,
) -> Result<(), BoxError> {
    let s = shared.clone();
    std::thread::Builder::new()
        .name("dsh-pty-read".into())
        .spawn(move || {
            let mut reader = reader;
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => s.absorb(&buf[..n]),
                }
            }
            lock(&s.inner).reader_done = true;
        })
        .map_err(|e| format!("cannot start the terminal reader: {e}"))?;
    let s = shared.clone();
    std::thread::Builder::new()
        .name("dsh-pty-wait".into())
        .spawn(move || {
            let status = child.wait();
            let exited = match status {
                Ok(st) => SessionStatus::Exited {
                    code: if st.signal().is_some() {
                        None
                    } else {
                        i32::try_from(st.exit_code()).ok()
                    },
                    signal: st.signal().map(str::to_owned),
                },
                Err(_) => SessionStatus::Exited {
                    code: None,
                    signal: None,
                },
            };
            lock(&s.inner).exited = Some(exited);
        })
        .map_err(|e| format!("cannot watch the terminal shell: {e}"))?;
    Ok(())
}

impl TerminalBackend for LocalBackend {
    fn type_name(&self) -> &str {
        &self.config.backend_type
    }

    fn spawn(
        &self,
        spec: SpawnSpec,
    ) -> BoxFuture<'static, Result<Arc<dyn TerminalSession>, BoxError>> {
        let config = self.config.clone();
        Box::pin(async move {
            let policy = spec
                .ctx
                .get::<SandboxPolicy>()
                .map(|p| p.resolve(Some(&spec.owner_session)));
            let mut argv: Vec<std::ffi::OsString> =
                std::iter::once(config.shell_path.clone().into())
                    .chain(config.shell_args.iter().map(Into::into))
                    .collect();
            if let Some(p) = &policy
                && p.mode.is_confined()
            {
                let Some(sandbox) = spec.ctx.get::<Sandbox>() else {
                    return Err(format!(
                        "terminal-bash: sandbox mode \"{}\" requires a ctx.sandbox provider in the execution world",
                        p.mode.as_str()
                    )
                    .into());
                };
                let confined = sandbox
                    .0
                    .confine(argv, p.clone())
                    .await
                    .map_err(|e| BoxError::from(e.into_error()))?;
                let confined = interactive(confined);
                argv = std::iter::once(confined.program.into_os_string())
                    .chain(confined.args)
                    .collect();
            }
            let cwd: PathBuf = spec
                .cwd
                .clone()
                .or_else(|| policy.as_ref().map(|p| p.workspace_root.clone()))
                .or_else(|| spec.owner_session.header().cwd.map(PathBuf::from))
                .unwrap_or_else(|| PathBuf::from("/"));
            let pair = native_pty_system()
                .openpty(PtySize {
                    rows: config.rows,
                    cols: config.cols,
                    pixel_width: 0,
                    pixel_height: 0,
                })
                .map_err(|e| format!("cannot open a pseudo-terminal: {e}"))?;
            let mut cmd = CommandBuilder::from_argv(argv);
            cmd.env_clear();
            for (k, v) in child_env(&spec) {
                cmd.env(k, v);
            }
            cmd.cwd(&cwd);
            let child = pair
                .slave
                .spawn_command(cmd)
                .map_err(|e| format!("cannot start the terminal shell: {e}"))?;
            drop(pair.slave);
            let pid = child.process_id();
            let reader = pair
                .master
                .try_clone_reader()
                .map_err(|e| format!("cannot read the terminal: {e}"))?;
            let writer = pair
                .master
                .take_writer()
                .map_err(|e| format!("cannot write to the terminal: {e}"))?;
            let shared = Arc::new(Shared {
                inner: Mutex::new(Inner {
                    sanitizer: Sanitizer::default(),
                    lines: VecDeque::new(),
                    line_bytes: 0,
                    scrollback_truncated: false,
                    send: Tail::default(),
                    background: Tail::default(),
                    last_output: Instant::now(),
                    prompts_since_send: 0,
                    exited: None,
                    reader_done: false,
                    shell_pgid: None,
                }),
                writer: Mutex::new(Some(writer)),
                master: Mutex::new(pair.master),
                killer: Mutex::new(child.clone_killer()),
                pid,
                group: Mutex::new(Some(ProcessGroup::new(pid, config.dispose_grace))),
                motd: Mutex::new(String::new()),
                closing: AtomicBool::new(false),
                config,
            });
            spawn_watchers(&shared, reader, child)?;
            let session = LocalSession {
                shared: shared.clone(),
            };
            // Startup: wait for the first prompt without typing anything.
            let handle = session.start_send(
                SendRequest {
                    text: String::new(),
                    submit: false,
                },
                CancellationToken::new(),
            );
            let startup = handle.done.await?;
            match startup.wait {
                WaitReason::SessionExit => {
                    let _ = shared.shut_down().await;
                    return Err("PTY shell exited during startup".into());
                }
                WaitReason::Timeout => {
                    let _ = shared.shut_down().await;
                    return Err("PTY shell did not reach readiness before startup timeout".into());
                }
                WaitReason::StdinRead | WaitReason::InferredIdle => {}
            }
            lock(&shared.inner).background = Tail::default();
            *lock(&shared.motd) = startup.viewport;
            Ok(Arc::new(session) as Arc<dyn TerminalSession>)
        })
    }
}
