//! One managed process group: spawn in a fresh group, capture stdout and stderr separately
//! with a byte-exact tail cap (overflow spilled to a private file), and terminate the whole
//! group on timeout or cancellation — SIGTERM, then SIGKILL after the grace period. A run
//! whose future is dropped before it settles still terminates its group (kill-on-drop).

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use dsh_process::{OutputSink, ProcessGroup, drain, resolve_program, spawn_reader};
use tokio_util::sync::CancellationToken;

/// Everything one run needs, fully resolved.
#[derive(Clone, Debug)]
pub(crate) struct SpawnSpec {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    /// The complete child environment (the parent's is not inherited).
    pub env: Vec<(String, String)>,
    /// `None`: no deadline.
    pub timeout: Option<Duration>,
    /// Per-stream in-memory tail.
    pub max_output_bytes: usize,
    /// Per-stream spill cap; a larger stream keeps only its tail.
    pub max_spill_bytes: u64,
    pub grace: Duration,
    /// Where spill files go; `None`: a private per-process directory under the temp dir.
    pub spill_dir: Option<PathBuf>,
    /// Live `tools/output` announcements of stdout and stderr (a call with a session).
    pub taps: Option<(dsh_tools::OutputTap, dsh_tools::OutputTap)>,
    /// Run `argv` in the session's resident sandbox when it can take it; `program` and
    /// `args` (the classic confined form) otherwise.
    pub resident: Option<(dsh_sandbox::resident::ResidentSpec, Vec<std::ffi::OsString>)>,
}

/// A started process: a child of ours, or a command in a resident sandbox.
enum Running {
    Local {
        child: tokio::process::Child,
        guard: ProcessGroup,
    },
    Resident(dsh_sandbox::resident::Run),
}

impl Running {
    /// (exit code, signal) once it ended.
    async fn wait(&mut self) -> std::io::Result<(Option<i32>, Option<i32>)> {
        match self {
            Running::Local { child, .. } => child.wait().await.map(|s| (s.code(), s.signal())),
            Running::Resident(run) => run.wait().await.map(|s| (s.code, s.signal)),
        }
    }

    /// Terminates it (SIGTERM, SIGKILL after `grace`) and waits.
    async fn stop(&mut self, grace: Duration) -> std::io::Result<(Option<i32>, Option<i32>)> {
        match self {
            Running::Local { guard, .. } => guard.terminate(),
            Running::Resident(run) => {
                run.terminate();
                let status = match tokio::time::timeout(grace, run.wait()).await {
                    Ok(done) => done?,
                    Err(_) => run.kill().await?,
                };
                return Ok((status.code, status.signal));
            }
        }
        self.wait().await
    }

    /// It settled: dropping it no longer terminates anything.
    fn disarm(&mut self) {
        if let Running::Local { guard, .. } = self {
            guard.disarm();
        }
    }
}

/// One captured stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Collected {
    pub text: String,
    /// Bytes were dropped from the in-memory tail.
    pub truncated: bool,
    /// The file holding the whole stream, when it could be kept.
    pub spill_path: Option<PathBuf>,
}

/// How a run settled.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RunOutcome {
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub timed_out: bool,
    pub aborted: bool,
    pub stdout: Collected,
    pub stderr: Collected,
}

/// One incremental read of a stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct StreamRead {
    pub text: String,
    /// Where the next read starts.
    pub next_offset: u64,
    /// Bytes between the requested offset and the held tail were dropped from memory.
    pub lossy: bool,
    /// The file holding the whole stream, while it can.
    pub spill_path: Option<PathBuf>,
}

/// Length of an incomplete UTF-8 sequence at the end of `bytes` (0 when it ends on a
/// complete character or on bytes that can never complete one).
fn incomplete_utf8_suffix(bytes: &[u8]) -> usize {
    let n = bytes.len();
    let mut i = n;
    while i > 0 && n - i < 3 && (bytes[i - 1] & 0xc0) == 0x80 {
        i -= 1;
    }
    if i == 0 {
        return 0;
    }
    let lead = bytes[i - 1];
    let expected = match lead {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => return 0,
    };
    let have = n - (i - 1);
    if have < expected { have } else { 0 }
}

static SPILL_COUNTER: AtomicU64 = AtomicU64::new(0);
static PRIVATE_SPILL_DIR: OnceLock<Option<PathBuf>> = OnceLock::new();

fn random_hex(len: usize) -> String {
    uuid::Uuid::new_v4()
        .simple()
        .to_string()
        .chars()
        .take(len)
        .collect()
}

/// A private (0700) per-process directory under the temp dir, created on first use, so
/// spill paths are neither predictable nor readable by other users.
fn private_spill_dir() -> Option<PathBuf> {
    PRIVATE_SPILL_DIR
        .get_or_init(|| {
            for _ in 0..8 {
                let dir = std::env::temp_dir().join(format!("dsh-subprocess-{}", random_hex(6)));
                if std::fs::DirBuilder::new().mode(0o700).create(&dir).is_ok() {
                    return Some(dir);
                }
            }
            None
        })
        .clone()
}

/// Tail-keeping collector of one stream. On the first overflow a spill file is opened and
/// receives the whole stream from byte 0, as long as the stream stays within the spill cap.
pub(crate) struct OutputCollector {
    chunks: VecDeque<Vec<u8>>,
    bytes: usize,
    dropped: bool,
    total: u64,
    max_bytes: usize,
    max_spill_bytes: u64,
    label: &'static str,
    spill_dir: Option<PathBuf>,
    spill: Option<(File, PathBuf)>,
    spill_disabled: bool,
    tap: Option<dsh_tools::OutputTap>,
}

impl OutputCollector {
    pub(crate) fn new(
        max_bytes: usize,
        max_spill_bytes: u64,
        label: &'static str,
        spill_dir: Option<PathBuf>,
    ) -> Self {
        Self {
            chunks: VecDeque::new(),
            bytes: 0,
            dropped: false,
            total: 0,
            max_bytes,
            max_spill_bytes,
            label,
            spill_dir,
            spill: None,
            spill_disabled: false,
            tap: None,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        if let Some(tap) = &mut self.tap {
            tap.push(chunk);
        }
        self.total += chunk.len() as u64;
        let overflows = self.bytes + chunk.len() > self.max_bytes;
        if !self.spill_disabled && (overflows || self.spill.is_some()) {
            self.spill_chunk(chunk);
        }
        self.chunks.push_back(chunk.to_vec());
        self.bytes += chunk.len();
        while self.bytes > self.max_bytes {
            let excess = self.bytes - self.max_bytes;
            let Some(head) = self.chunks.front_mut() else {
                break;
            };
            if head.len() <= excess {
                self.bytes -= head.len();
                self.chunks.pop_front();
            } else {
                head.drain(..excess);
                self.bytes -= excess;
            }
            self.dropped = true;
        }
    }

    fn spill_chunk(&mut self, chunk: &[u8]) {
        if self.total > self.max_spill_bytes {
            self.discard_spill();
            return;
        }
        if self.spill.is_none() {
            let dir = match self.spill_dir.clone() {
                Some(dir) => match std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&dir)
                {
                    Ok(()) => Some(dir),
                    Err(e) => {
                        tracing::warn!(dir = %dir.display(), error = %e, "bash: cannot create the session spill directory");
                        None
                    }
                },
                None => private_spill_dir(),
            };
            let Some(dir) = dir else {
                self.spill_disabled = true;
                return;
            };
            let n = SPILL_COUNTER.fetch_add(1, Ordering::Relaxed) + 1;
            let path = dir.join(format!(
                "dsh-subprocess-{}-{n}-{}-{}.log",
                std::process::id(),
                random_hex(12),
                self.label
            ));
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path);
            let mut file = match opened {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(error = %e, "bash: could not open a spill file; keeping only the output tail");
                    self.spill_disabled = true;
                    return;
                }
            };
            for prior in &self.chunks {
                if file.write_all(prior).is_err() {
                    self.spill = Some((file, path));
                    self.discard_spill();
                    return;
                }
            }
            self.spill = Some((file, path));
        }
        let failed = match &mut self.spill {
            Some((file, _)) => file.write_all(chunk).is_err(),
            None => false,
        };
        if failed {
            self.discard_spill();
        }
    }

    /// Stops spilling and removes the file once it can no longer hold the whole stream.
    fn discard_spill(&mut self) {
        self.spill_disabled = true;
        if let Some((file, path)) = self.spill.take() {
            drop(file);
            let _ = std::fs::remove_file(path);
        }
    }

    /// The stream from byte `offset` on, as far as it is still held: an offset that fell
    /// out of the in-memory tail reads the whole tail and is `lossy`. Unless the stream is
    /// `complete`, an incomplete UTF-8 sequence at the end is left for the next read, so a
    /// delta never splits a character.
    pub(crate) fn read_from(&self, offset: u64, complete: bool) -> StreamRead {
        let start = self.total - self.bytes as u64;
        let (from, lossy) = if offset < start {
            (start, true)
        } else {
            (offset.min(self.total), false)
        };
        let mut skip = (from - start) as usize;
        let mut bytes = Vec::with_capacity(self.bytes - skip);
        for chunk in &self.chunks {
            if skip >= chunk.len() {
                skip -= chunk.len();
                continue;
            }
            bytes.extend_from_slice(&chunk[skip..]);
            skip = 0;
        }
        // A cut tail may begin inside a character.
        let lead = if lossy {
            bytes
                .iter()
                .take_while(|b| (**b & 0xc0) == 0x80)
                .take(3)
                .count()
        } else {
            0
        };
        let keep = if complete {
            bytes.len()
        } else {
            bytes.len() - incomplete_utf8_suffix(&bytes[lead..])
        };
        StreamRead {
            text: String::from_utf8_lossy(&bytes[lead..keep.max(lead)]).into_owned(),
            next_offset: from + keep.max(lead) as u64,
            lossy,
            spill_path: self.spill.as_ref().map(|(_, path)| path.clone()),
        }
    }

    /// The retained tail as text (for classifying a finished run's stderr).
    pub(crate) fn tail_text(&self) -> String {
        let bytes: Vec<u8> = self.chunks.iter().flatten().copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn finish(&mut self) -> Collected {
        let spill_path = self
            .spill
            .take()
            .and_then(|(file, path)| file.sync_all().is_ok().then_some(path));
        self.spill_disabled = true;
        let bytes: Vec<u8> = self.chunks.iter().flatten().copied().collect();
        Collected {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            truncated: self.dropped,
            spill_path,
        }
    }
}

impl OutputSink for OutputCollector {
    fn push(&mut self, chunk: &[u8]) {
        OutputCollector::push(self, chunk);
    }
}

/// `program args…` in `cwd` with exactly `env`, as the leader of a new process group, stdin
/// closed and both outputs piped.
pub(crate) fn group_command(
    program: &str,
    args: &[String],
    cwd: &std::path::Path,
    env: &[(String, String)],
) -> tokio::process::Command {
    let resolved = resolve_program(program, env, cwd);
    let mut command = tokio::process::Command::new(&resolved);
    command
        .arg0(program)
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    command
}

/// Runs one process to settlement. Errors only when the process could not be spawned.
pub(crate) async fn run(spec: SpawnSpec, cancel: CancellationToken) -> std::io::Result<RunOutcome> {
    let (out_tap, err_tap) = match spec.taps {
        Some((o, e)) => (Some(o), Some(e)),
        None => (None, None),
    };
    let mut out = OutputCollector::new(
        spec.max_output_bytes,
        spec.max_spill_bytes,
        "stdout",
        spec.spill_dir.clone(),
    );
    out.tap = out_tap;
    let mut err = OutputCollector::new(
        spec.max_output_bytes,
        spec.max_spill_bytes,
        "stderr",
        spec.spill_dir.clone(),
    );
    err.tap = err_tap;
    let (out, err) = (Arc::new(Mutex::new(out)), Arc::new(Mutex::new(err)));
    let mut readers = Vec::new();

    let resident = match &spec.resident {
        // A missing working directory fails the classic way (the spawn error names it).
        Some((resident, argv)) if spec.cwd.is_dir() => {
            dsh_sandbox::resident::run(resident, argv, &spec.env, &spec.cwd).await
        }
        _ => None,
    };
    let mut running = match resident {
        Some(mut run) => {
            if let Some(s) = run.stdout.take() {
                readers.push(spawn_reader(s, out.clone()));
            }
            if let Some(s) = run.stderr.take() {
                readers.push(spawn_reader(s, err.clone()));
            }
            Running::Resident(run)
        }
        None => {
            let mut child =
                group_command(&spec.program, &spec.args, &spec.cwd, &spec.env).spawn()?;
            let guard = ProcessGroup::new(child.id(), spec.grace);
            if let Some(s) = child.stdout.take() {
                readers.push(spawn_reader(s, out.clone()));
            }
            if let Some(s) = child.stderr.take() {
                readers.push(spawn_reader(s, err.clone()));
            }
            Running::Local { child, guard }
        }
    };

    let deadline = async {
        match spec.timeout {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending::<()>().await,
        }
    };
    let mut timed_out = false;
    let mut aborted = false;
    let settled = tokio::select! {
        status = running.wait() => Some(status),
        () = deadline => { timed_out = true; None }
        () = cancel.cancelled() => { aborted = true; None }
    };
    let (exit_code, signal) = match settled {
        Some(status) => status?,
        None => running.stop(spec.grace).await?,
    };

    drain(&mut readers, spec.grace).await;
    drop(readers);
    running.disarm();

    let stdout = out.lock().unwrap_or_else(|p| p.into_inner()).finish();
    let stderr = err.lock().unwrap_or_else(|p| p.into_inner()).finish();
    Ok(RunOutcome {
        exit_code,
        signal: signal.map(signal_name),
        timed_out,
        aborted,
        stdout,
        stderr,
    })
}

/// The conventional name of a signal number (`SIGTERM`).
pub(crate) fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGSYS => "SIGSYS",
        other => return format!("SIG{other}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn collector_keeps_a_byte_exact_tail_and_spills_the_whole_stream() {
        let dir = std::env::temp_dir().join(format!("dsh-collector-test-{}", random_hex(8)));
        std::fs::create_dir(&dir).unwrap();
        let mut c = OutputCollector::new(4, 1 << 20, "stdout", Some(dir.clone()));
        c.push(b"ab");
        c.push(b"cdef");
        c.push(b"g");
        let got = c.finish();
        assert_eq!((got.text.as_str(), got.truncated), ("defg", true));
        let spilled = std::fs::read(got.spill_path.unwrap()).unwrap();
        assert_eq!(spilled, b"abcdefg");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn incremental_reads_resume_report_loss_and_never_split_a_character() {
        let mut c = OutputCollector::new(6, 1 << 20, "stdout", None);
        c.push(b"ab");
        let r = c.read_from(0, false);
        assert_eq!((r.text.as_str(), r.next_offset, r.lossy), ("ab", 2, false));
        // Half of `é` arrives: held back until it completes.
        c.push(&[b'c', 0xc3]);
        let r = c.read_from(2, false);
        assert_eq!((r.text.as_str(), r.next_offset), ("c", 3));
        c.push(&[0xa9]);
        let r = c.read_from(3, false);
        assert_eq!((r.text.as_str(), r.next_offset), ("é", 5));
        // The reader fell behind the 6-byte tail: it gets the tail and is told.
        c.push(b"0123456");
        let r = c.read_from(5, false);
        assert_eq!(
            (r.text.as_str(), r.next_offset, r.lossy),
            ("123456", 12, true)
        );
        // A tail cut inside a character starts at the next one.
        c.push(&[b'x', 0xe2, 0x82, 0xac, b'y', b'z']);
        c.push(b"wv");
        let r = c.read_from(12, true);
        assert_eq!((r.text.as_str(), r.lossy), ("yzwv", true));
        assert_eq!(r.next_offset, 20);
        assert_eq!(c.read_from(20, true).text, "");
    }

    #[test]
    fn collector_drops_the_spill_file_past_the_spill_cap() {
        let dir = std::env::temp_dir().join(format!("dsh-collector-test-{}", random_hex(8)));
        std::fs::create_dir(&dir).unwrap();
        let mut c = OutputCollector::new(2, 5, "stderr", Some(dir.clone()));
        c.push(b"abc");
        c.push(b"def");
        let got = c.finish();
        assert_eq!(
            got,
            Collected {
                text: "ef".into(),
                truncated: true,
                spill_path: None
            }
        );
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
