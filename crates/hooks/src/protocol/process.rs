//! One hook process: `bash -c` in a fresh process group with the payload on stdin and
//! stdout/stderr captured (tail-capped). On timeout or cancellation the whole group gets
//! SIGTERM, then SIGKILL after a grace period; a run whose future is dropped before it
//! settles kills its group too.
//!
//! These are the mechanics of the `bash` executor in `dsh-tools-builtin` (private there);
//! upstream runs hooks through that same executor (`ctx.shell`).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group, test_kill_process_group};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Per-stream in-memory tail (the executor's `maxOutputBytes` default).
pub const MAX_OUTPUT_BYTES: usize = 64_000;
/// SIGTERM → SIGKILL grace, and the bound on waiting for inherited pipes after exit.
pub const GRACE: Duration = Duration::from_secs(3);

/// Everything one run needs, fully resolved.
#[derive(Clone, Debug)]
pub struct ProcessSpec {
    pub command: String,
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

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn spawn_reader<R: AsyncRead + Unpin + Send + 'static>(
    mut stream: R,
    tail: Arc<Mutex<Tail>>,
) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => tail
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(&buf[..n]),
            }
        }
    }))
}

/// Owns the process group: dropping it armed (a run dropped before settling) terminates
/// the group; termination is idempotent.
struct GroupGuard {
    pgid: Option<Pid>,
    terminated: bool,
    armed: bool,
}

impl GroupGuard {
    /// SIGTERM now, SIGKILL after [`GRACE`] if any member survives. The escalation runs on
    /// its own thread so a TERM-trapping survivor dies even when this run is dropped.
    fn terminate(&mut self) {
        if std::mem::replace(&mut self.terminated, true) {
            return;
        }
        let Some(pgid) = self.pgid else { return };
        if test_kill_process_group(pgid).is_err() {
            return;
        }
        let _ = kill_process_group(pgid, Signal::TERM);
        let spawned = std::thread::Builder::new()
            .name("dsh-hook-kill".into())
            .spawn(move || {
                let deadline = Instant::now() + GRACE;
                loop {
                    if test_kill_process_group(pgid).is_err() {
                        return;
                    }
                    if Instant::now() >= deadline {
                        let _ = kill_process_group(pgid, Signal::KILL);
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(15));
                }
            });
        if spawned.is_err() {
            let _ = kill_process_group(pgid, Signal::KILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            self.terminate();
        }
    }
}

/// Runs one hook process to settlement. Errors only when it could not be spawned.
pub async fn run_process(
    spec: ProcessSpec,
    cancel: &CancellationToken,
) -> std::io::Result<ProcessOutcome> {
    let mut child = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&spec.command)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let mut guard = GroupGuard {
        pgid: child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw),
        terminated: false,
        armed: true,
    };
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
    let drain = async {
        for reader in &mut readers {
            let _ = (&mut reader.0).await;
        }
    };
    if tokio::time::timeout(GRACE, drain).await.is_err() {
        guard.terminate();
    }
    drop(readers);
    guard.armed = false;
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
