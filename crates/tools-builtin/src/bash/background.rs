//! `bash` with `run_in_background`: one process group registered as a job. The process
//! runs with no deadline; the job's reads return what it printed since the previous read
//! (each stream keeps an in-memory tail and spills the whole stream to the session's spill
//! area up to its cap); a kill terminates the whole group (SIGTERM, SIGKILL after the
//! grace period); dropping the job record terminates it too.

use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use dsh_jobs::{JobHooks, JobOutcome, JobSettler, Terminal};
use dsh_process::{AbortOnDrop, ProcessGroup, drain, spawn_reader};
use dsh_sandbox::runner::{RunnerFailureRule, denied, is_runner_spawn_failure, runner_failure};
use dsh_sandbox::{SandboxMode, denial_marker, escalation_hint, runner_failure_marker};

use super::process::{OutputCollector, signal_name};

/// What the producer needs to start one background command.
pub(crate) struct BackgroundSpec {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub max_output_bytes: usize,
    pub max_spill_bytes: u64,
    pub grace: Duration,
    pub spill_dir: Option<PathBuf>,
    /// Set when the command runs under a sandbox runner.
    pub confinement: Option<Confinement>,
    /// Advertise the escalation hint with a denial.
    pub escalation: bool,
}

/// The runner facts a confined command is classified with when it ends.
pub(crate) struct Confinement {
    pub mode: SandboxMode,
    pub denial_signatures: Vec<String>,
    pub runner_failure_rules: Vec<RunnerFailureRule>,
    /// [`dsh_sandbox::runner::Confined::runner`].
    pub runner: &'static str,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    Running,
    Killed,
    Completed,
}

/// What the sandbox made of the run, once it ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SandboxFact {
    None,
    RunnerFailed,
    Denied,
}

struct State {
    status: Status,
    /// The process ended and its pipes were drained: reads may flush partial characters.
    finished: bool,
    /// Delivered once, in place of stderr text (a process that never started has none).
    spawn_failure: Option<String>,
    fact: SandboxFact,
    out_offset: u64,
    err_offset: u64,
}

struct Shared {
    state: Mutex<State>,
    out: Arc<Mutex<OutputCollector>>,
    err: Arc<Mutex<OutputCollector>>,
    group: Mutex<Option<ProcessGroup>>,
    mode: Option<SandboxMode>,
    escalation: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// The job read: stdout delta, a `[stderr]` section, then the loss and sandbox notices.
    fn read(&self) -> String {
        let mut state = lock(&self.state);
        let out = lock(&self.out).read_from(state.out_offset, state.finished);
        let err = lock(&self.err).read_from(state.err_offset, state.finished);
        state.out_offset = out.next_offset;
        state.err_offset = err.next_offset;
        let err_text = if err.text.is_empty() {
            state.spawn_failure.take().unwrap_or_default()
        } else {
            err.text
        };
        let mut delta = out.text;
        if !err_text.is_empty() {
            if !delta.is_empty() && !delta.ends_with('\n') {
                delta.push('\n');
            }
            delta.push_str("[stderr]\n");
            delta.push_str(&err_text);
        }
        let mut notices = Vec::new();
        if out.lossy || err.lossy {
            let paths: Vec<String> = [out.spill_path, err.spill_path]
                .into_iter()
                .flatten()
                .map(|p| p.display().to_string())
                .collect();
            notices.push(format!(
                "[some output was dropped from memory; full output: {}]",
                if paths.is_empty() {
                    "(unavailable)".to_string()
                } else {
                    paths.join(", ")
                }
            ));
        }
        if let Some(mode) = self.mode {
            match state.fact {
                SandboxFact::RunnerFailed => notices.push(runner_failure_marker(mode)),
                SandboxFact::Denied => {
                    notices.push(denial_marker(mode));
                    if self.escalation {
                        notices.push(escalation_hint("command"));
                    }
                }
                SandboxFact::None => {}
            }
        }
        if notices.is_empty() {
            return delta;
        }
        if !delta.is_empty() && !delta.ends_with('\n') {
            delta.push('\n');
        }
        delta + &notices.join("\n")
    }

    fn kill(&self) {
        {
            let mut state = lock(&self.state);
            if state.status != Status::Running {
                return;
            }
            state.status = Status::Killed;
        }
        if let Some(group) = lock(&self.group).as_mut() {
            group.terminate();
        }
    }
}

/// Starts the command and returns the job hooks; the outcome reaches `settler` when the
/// process ends (or at once when it cannot be spawned: `killed before exit`, the spawn
/// failure delivered by the first read).
pub(crate) fn start(spec: BackgroundSpec, settler: JobSettler) -> JobHooks {
    let collector = |label| {
        OutputCollector::new(
            spec.max_output_bytes,
            spec.max_spill_bytes,
            label,
            spec.spill_dir.clone(),
        )
    };
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            status: Status::Running,
            finished: false,
            spawn_failure: None,
            fact: SandboxFact::None,
            out_offset: 0,
            err_offset: 0,
        }),
        out: Arc::new(Mutex::new(collector("stdout"))),
        err: Arc::new(Mutex::new(collector("stderr"))),
        group: Mutex::new(None),
        mode: spec.confinement.as_ref().map(|c| c.mode),
        escalation: spec.escalation,
    });

    let mut command =
        super::process::group_command(&spec.program, &spec.args, &spec.cwd, &spec.env);
    let watcher = match command.spawn() {
        Err(e) => {
            {
                let mut state = lock(&shared.state);
                state.status = Status::Killed;
                state.finished = true;
                state.spawn_failure = Some(format!(
                    "spawn failed: {}",
                    dsh_sandbox::runner::spawn_detail(std::path::Path::new(&spec.program), &e)
                ));
                if spec.confinement.is_some() && is_runner_spawn_failure(&e, &spec.cwd) {
                    state.fact = SandboxFact::RunnerFailed;
                }
            }
            settler.settle(JobOutcome::new(Terminal::Killed, "killed before exit"));
            None
        }
        Ok(mut child) => {
            *lock(&shared.group) = Some(ProcessGroup::new(child.id(), spec.grace));
            let mut readers = Vec::new();
            if let Some(s) = child.stdout.take() {
                readers.push(spawn_reader(s, shared.out.clone()));
            }
            if let Some(s) = child.stderr.take() {
                readers.push(spawn_reader(s, shared.err.clone()));
            }
            let s = shared.clone();
            let grace = spec.grace;
            let confinement = spec.confinement;
            Some(AbortOnDrop(tokio::spawn(async move {
                let status = child.wait().await;
                drain(&mut readers, grace).await;
                drop(readers);
                // An emptied group is forgotten, so its id can never be signalled after
                // the system reuses it; stragglers keep the guard armed.
                if let Some(group) = lock(&s.group).as_mut()
                    && !group.is_alive()
                {
                    group.disarm();
                }
                let (code, signal) = match &status {
                    Ok(st) => (st.code(), st.signal().map(signal_name)),
                    Err(_) => (None, None),
                };
                let fact = match &confinement {
                    Some(c) => {
                        let stderr = lock(&s.err).tail_text();
                        if runner_failure(code, &stderr, &c.runner_failure_rules).is_some() {
                            super::runner_failed(c.runner);
                            SandboxFact::RunnerFailed
                        } else if denied(code, &stderr, &c.denial_signatures) {
                            SandboxFact::Denied
                        } else {
                            SandboxFact::None
                        }
                    }
                    None => SandboxFact::None,
                };
                let final_status = {
                    let mut state = lock(&s.state);
                    if state.status == Status::Running {
                        state.status = if signal.is_some() {
                            Status::Killed
                        } else {
                            Status::Completed
                        };
                    }
                    state.finished = true;
                    state.fact = fact;
                    state.status
                };
                let outcome = match (final_status, &signal) {
                    (Status::Killed, Some(sig)) => {
                        JobOutcome::new(Terminal::Killed, format!("signal: {sig}"))
                    }
                    (Status::Killed, None) => {
                        JobOutcome::new(Terminal::Killed, "killed before exit")
                    }
                    (Status::Completed | Status::Running, _) => JobOutcome::new(
                        Terminal::Completed,
                        format!("exit code: {}", code.unwrap_or(0)),
                    ),
                };
                settler.settle(outcome);
            })))
        }
    };

    let reader = shared.clone();
    let killer = shared.clone();
    JobHooks {
        cancel: Box::new(move |_reason| {
            killer.kill();
            Ok(())
        }),
        read_output: Some(Box::new(move || reader.read())),
        // The watcher (aborted on drop) and the group guard (terminates on drop) live as
        // long as the job record.
        keep_alive: Some(Box::new((watcher, shared))),
    }
}
