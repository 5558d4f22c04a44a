//! One hook process: `bash -c` in a fresh process group with the payload on stdin and
//! stdout/stderr captured (tail-capped). On timeout or cancellation the whole group gets
//! SIGTERM, then SIGKILL after a grace period; a run whose future is dropped before it
//! settles kills its group too.
//!
//! The group, reader and program-lookup mechanics are the ones the `bash` tool uses
//! (`dsh_process`); upstream runs hooks through its shell executor (`ctx.shell`).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_process::{AbortOnDrop, OutputSink, ProcessGroup, drain, resolve_program, spawn_reader};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

/// Per-stream in-memory tail (the executor's `maxOutputBytes` default).
pub const MAX_OUTPUT_BYTES: usize = 64_000;
/// SIGTERM → SIGKILL grace, and the bound on waiting for inherited pipes after exit.
pub const GRACE: Duration = Duration::from_secs(3);

/// Everything one run needs, fully resolved.
#[derive(Clone, Debug)]
pub struct ProcessSpec {
    pub command: String,
    /// A sandbox runner's program and arguments that run `bash -c command` confined.
    pub runner: Option<(PathBuf, Vec<std::ffi::OsString>)>,
    pub cwd: PathBuf,
    /// The complete child environment (nothing else is inherited).
    pub env: Vec<(String, String)>,
    pub stdin: Vec<u8>,
    pub timeout: Duration,
}

/// How a run settled.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessOutcome {
    /// `None` when the process died by a signal.
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    pub stdout: String,
    pub stderr: String,
}

struct Tail {
    bytes: Vec<u8>,
}

impl Tail {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > MAX_OUTPUT_BYTES {
            let excess = self.bytes.len() - MAX_OUTPUT_BYTES;
            self.bytes.drain(..excess);
        }
    }
}

impl OutputSink for Tail {
    fn push(&mut self, chunk: &[u8]) {
        Tail::push(self, chunk);
    }
}

/// Runs one hook process to settlement. Errors only when it could not be spawned.
pub async fn run_process(
    spec: ProcessSpec,
    cancel: &CancellationToken,
) -> std::io::Result<ProcessOutcome> {
    let mut command = match &spec.runner {
        Some((program, args)) => {
            let shown = program.to_string_lossy().into_owned();
            let mut c = tokio::process::Command::new(resolve_program(&shown, &spec.env, &spec.cwd));
            c.arg0(&shown).args(args);
            c
        }
        None => {
            let mut c = tokio::process::Command::new(resolve_program("bash", &spec.env, &spec.cwd));
            c.arg0("bash").arg("-c").arg(&spec.command);
            c
        }
    };
    let mut child = command
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let mut guard = ProcessGroup::new(child.id(), GRACE);
    let out = Arc::new(Mutex::new(Tail { bytes: Vec::new() }));
    let err = Arc::new(Mutex::new(Tail { bytes: Vec::new() }));
    let mut readers = Vec::new();
    if let Some(s) = child.stdout.take() {
        readers.push(spawn_reader(s, out.clone()));
    }
    if let Some(s) = child.stderr.take() {
        readers.push(spawn_reader(s, err.clone()));
    }
    // A hook that never reads its stdin must not block the run: write in the background
    // and ignore a closed pipe.
    let _writer = child.stdin.take().map(|mut stdin| {
        let bytes = spec.stdin;
        AbortOnDrop(tokio::spawn(async move {
            let _ = stdin.write_all(&bytes).await;
            let _ = stdin.shutdown().await;
        }))
    });

    let mut timed_out = false;
    let mut cancelled = false;
    let settled = tokio::select! {
        status = child.wait() => Some(status),
        () = tokio::time::sleep(spec.timeout) => { timed_out = true; None }
        () = cancel.cancelled() => { cancelled = true; None }
    };
    let status = match settled {
        Some(status) => status?,
        None => {
            guard.terminate();
            child.wait().await?
        }
    };
    // A descendant that inherited a pipe must not hold the result open.
    if !drain(&mut readers, GRACE).await {
        guard.terminate();
    }
    drop(readers);
    guard.disarm();
    let text = |tail: &Arc<Mutex<Tail>>| {
        String::from_utf8_lossy(&tail.lock().unwrap_or_else(|p| p.into_inner()).bytes).into_owned()
    };
    Ok(ProcessOutcome {
        exit_code: status.code(),
        timed_out,
        cancelled,
        stdout: text(&out),
        stderr: text(&err),
    })
}
