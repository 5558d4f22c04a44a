//! One child program: spawned in its own process group with the scrubbed environment,
//! its stdout read as lines, its stdin written line by line, and torn down as a tree
//! (stdin EOF, then SIGTERM, then SIGKILL after a grace period).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_process::{ProcessGroup, resolve_program};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt as _, BufReader};
use tokio::process::ChildStderr;
use tokio::sync::{mpsc, watch};

/// How the child's stderr is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StderrMode {
    /// Shares ours (diagnostics reach the user's terminal or log).
    Inherit,
    /// Piped to us (the caller reads it).
    Piped,
}

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct Launch {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    /// Added over the scrubbed process environment (later entries win).
    pub env: Vec<(String, String)>,
    pub stderr: StderrMode,
    /// SIGTERM → SIGKILL grace.
    pub grace: Duration,
}

/// How the child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl Exit {
    /// ` ; exit code: N` / `; signal: S` fields of a product diagnostic.
    pub fn fields(&self) -> String {
        let mut out = String::new();
        if let Some(c) = self.code {
            out.push_str(&format!("; exit code: {c}"));
        }
        if let Some(s) = self.signal {
            out.push_str(&format!("; signal: {}", signal_name(s)));
        }
        out
    }
}

fn signal_name(s: i32) -> String {
    match s {
        1 => "SIGHUP".into(),
        2 => "SIGINT".into(),
        6 => "SIGABRT".into(),
        9 => "SIGKILL".into(),
        11 => "SIGSEGV".into(),
        13 => "SIGPIPE".into(),
        15 => "SIGTERM".into(),
        n => n.to_string(),
    }
}

/// Writes lines to the child's stdin; `close` ends its input.
#[derive(Clone)]
pub(crate) struct Outbox(mpsc::UnboundedSender<Option<String>>);

impl Outbox {
    pub fn send(&self, line: String) {
        let _ = self.0.send(Some(line));
    }

    pub fn close(&self) {
        let _ = self.0.send(None);
    }
}

/// A running child.
pub(crate) struct Proc {
    group: Mutex<ProcessGroup>,
    exit: watch::Receiver<Option<Exit>>,
    pub out: Outbox,
}

/// A spawned child and its streams.
pub(crate) struct Spawned {
    pub proc: Arc<Proc>,
    /// Stdout lines; closed at end of output.
    pub lines: mpsc::UnboundedReceiver<String>,
    pub stderr: Option<ChildStderr>,
}

/// The child's complete environment: the scrubbed process environment, then `overlay`.
pub(crate) fn child_env(overlay: &[(String, String)]) -> Vec<(String, String)> {
    let mut env = dsh_host::secrets::scrubbed_process_env();
    for (k, v) in overlay {
        match env.iter_mut().find(|(key, _)| key == k) {
            Some(slot) => slot.1 = v.clone(),
            None => env.push((k.clone(), v.clone())),
        }
    }
    env
}

/// The longest stdout line kept from a child (a message may carry a file or an image); a
/// longer one is skipped up to its newline, never held whole.
pub(crate) const MAX_LINE_BYTES: usize = 64 << 20;

/// What [`read_line_bounded`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LineRead {
    Eof,
    Line,
    TooLong,
}

/// Reads one newline-terminated line into `buf` (cleared first), holding at most `max`
/// bytes of it: a longer line is consumed up to its newline and reported as too long.
pub(crate) async fn read_line_bounded<R: AsyncBufReadExt + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<LineRead> {
    buf.clear();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, buf.is_empty()) {
                (true, _) => LineRead::TooLong,
                (false, true) => LineRead::Eof,
                (false, false) => LineRead::Line,
            });
        }
        let (take, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if !too_long {
            if buf.len() + take > max {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&available[..take]);
            }
        }
        reader.consume(take);
        if done {
            return Ok(if too_long {
                LineRead::TooLong
            } else {
                LineRead::Line
            });
        }
    }
}

/// Spawns `launch`. Fails when the program cannot be started (missing, not executable).
pub(crate) fn spawn(launch: &Launch) -> std::io::Result<Spawned> {
    let env = child_env(&launch.env);
    let program = resolve_program(&launch.program, &env, &launch.cwd);
    let mut cmd = tokio::process::Command::new(&program);
    cmd.arg0(&launch.program)
        .args(&launch.args)
        .env_clear()
        .envs(env)
        .current_dir(&launch.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(match launch.stderr {
            StderrMode::Inherit => Stdio::inherit(),
            StderrMode::Piped => Stdio::piped(),
        })
        .process_group(0)
        .kill_on_drop(false);
    let mut child = cmd.spawn()?;
    let group = ProcessGroup::new(child.id(), launch.grace);
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();

    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Option<String>>();
    tokio::spawn(async move {
        let Some(mut stdin) = stdin else { return };
        while let Some(Some(line)) = out_rx.recv().await {
            let mut bytes = line.into_bytes();
            bytes.push(b'\n');
            if stdin.write_all(&bytes).await.is_err() || stdin.flush().await.is_err() {
                break;
            }
        }
        // Dropping stdin is the child's end of input.
    });

    let (line_tx, line_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let Some(stdout) = stdout else { return };
        let mut reader = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            match read_line_bounded(&mut reader, &mut buf, MAX_LINE_BYTES).await {
                Ok(LineRead::Eof) | Err(_) => break,
                Ok(LineRead::TooLong) => {
                    tracing::warn!(
                        "a child program wrote a line longer than {MAX_LINE_BYTES} bytes; it was skipped"
                    );
                }
                Ok(LineRead::Line) => {
                    let line = String::from_utf8_lossy(&buf).trim().to_string();
                    if !line.is_empty() && line_tx.send(line).is_err() {
                        // Nobody listens any more; keep draining so the child never
                        // blocks on a full pipe.
                    }
                }
            }
        }
    });

    let (exit_tx, exit_rx) = watch::channel(None);
    tokio::spawn(async move {
        let status = child.wait().await;
        let exit = match status {
            Ok(s) => {
                use std::os::unix::process::ExitStatusExt as _;
                Exit {
                    code: s.code(),
                    signal: s.signal(),
                }
            }
            Err(_) => Exit {
                code: None,
                signal: None,
            },
        };
        let _ = exit_tx.send(Some(exit));
    });

    Ok(Spawned {
        proc: Arc::new(Proc {
            group: Mutex::new(group),
            exit: exit_rx,
            out: Outbox(out_tx),
        }),
        lines: line_rx,
        stderr,
    })
}

impl Proc {
    /// The leader's exit, once it happened.
    pub fn exit_now(&self) -> Option<Exit> {
        *self.exit.borrow()
    }

    /// Waits for the leader to exit.
    pub async fn exited(&self) -> Exit {
        let mut rx = self.exit.clone();
        loop {
            if let Some(e) = *rx.borrow_and_update() {
                return e;
            }
            if rx.changed().await.is_err() {
                return Exit {
                    code: None,
                    signal: None,
                };
            }
        }
    }

    /// Waits up to `within` for the leader to exit.
    pub async fn exited_within(&self, within: Duration) -> Option<Exit> {
        tokio::time::timeout(within, self.exited()).await.ok()
    }

    /// Whether the leader exited and no member of its group is left.
    fn gone(&self) -> bool {
        self.exit_now().is_some()
            && !self
                .group
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_alive()
    }

    async fn gone_within(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.gone() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM to the whole tree now (SIGKILL after the grace period).
    pub fn terminate(&self) {
        self.group
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .terminate();
    }

    /// The teardown ladder: end of input, `eof_grace` for the child to quiesce on its
    /// own (none: signal at once), then SIGTERM → grace → SIGKILL of the whole group;
    /// resolves once the tree is gone (bounded: a process that survives SIGKILL is
    /// abandoned after `grace` + 5 s).
    pub async fn teardown(&self, eof_grace: Option<Duration>, grace: Duration) {
        self.out.close();
        if let Some(eof) = eof_grace
            && self.gone_within(eof).await
        {
            self.disarm();
            return;
        }
        self.terminate();
        let _ = self.gone_within(grace + Duration::from_secs(5)).await;
        self.disarm();
    }

    fn disarm(&self) {
        self.group
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .disarm();
    }
}

#[cfg(test)]
mod line_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    async fn all(bytes: &[u8], capacity: usize, max: usize) -> Vec<(LineRead, String)> {
        let mut reader = BufReader::with_capacity(capacity, bytes);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            let read = read_line_bounded(&mut reader, &mut buf, max).await.unwrap();
            if read == LineRead::Eof {
                return out;
            }
            out.push((read, String::from_utf8_lossy(&buf).into_owned()));
        }
    }

    #[tokio::test]
    async fn an_overlong_line_is_skipped_without_being_held_and_the_next_one_reads() {
        let mut input = b"{\"a\":1}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 1000));
        input.extend(b"\n{\"b\":2}\ntail");
        for capacity in [1, 7, 64, 4096] {
            assert_eq!(
                all(&input, capacity, 100).await,
                vec![
                    (LineRead::Line, "{\"a\":1}\n".to_string()),
                    (LineRead::TooLong, String::new()),
                    (LineRead::Line, "{\"b\":2}\n".to_string()),
                    (LineRead::Line, "tail".to_string()),
                ],
                "capacity {capacity}"
            );
        }
        // An endless line at the end of input is reported, not held.
        assert_eq!(
            all(&[b'y'; 500], 64, 100).await,
            vec![(LineRead::TooLong, String::new())]
        );
    }
}
