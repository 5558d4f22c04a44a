//! The job registry (upstream's `jobs-local`): background work owned by an agent's
//! session, with first-wins settlement, bounded waits, consuming reads, cancellation, and
//! teardown when the owner is disposed. Producers (bash `run_in_background`, terminal
//! sends) register work here; `tool-jobs` reads it and delivers completion notices.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use dsh_agent::{AgentRef, AgentStatus, Agents};
use dsh_kernel::{BoxError, Context};
use indexmap::IndexMap;
use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::status::{JobStatus, Terminal};

mod owners;

/// How long teardown waits for cancelled jobs to settle before recording them failed.
const TEARDOWN_WAIT: Duration = Duration::from_secs(15);

/// How a job ended, as its producer reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobOutcome {
    pub status: Terminal,
    pub detail: Option<String>,
    /// The final output of producers without an incremental reader.
    pub output: Option<String>,
}

impl JobOutcome {
    pub fn new(status: Terminal, detail: impl Into<String>) -> Self {
        Self {
            status,
            detail: Some(detail.into()),
            output: None,
        }
    }
}

/// A point-in-time view of one job.
#[derive(Clone, Debug, PartialEq)]
pub struct JobSnapshot {
    /// `<kind>-<n>`.
    pub id: String,
    pub kind: String,
    pub label: String,
    /// Bound on model-visible results about this job (terminal sends), if any.
    pub output_limit_bytes: Option<usize>,
    /// The owning session (agent) id; unowned jobs have none.
    pub owner_session: Option<String>,
    pub status: JobStatus,
    pub detail: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub started_at: u64,
    pub finished_at: Option<u64>,
    /// Whether the model has learned (or no longer needs to learn) how the job ended: a
    /// read or wait that observed the settlement, a kill, or teardown. A reported job gets
    /// no completion notice.
    pub reported: bool,
}

/// When a completion notice of an owned job may be announced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Announce {
    /// As soon as the job settles (work whose result is the answer to the starting call).
    AtSettlement,
    /// Not before the owner's next step boundary (`agent/pre-step`) after the step that
    /// started the job. OS processes use this: whatever the process does, its settlement
    /// reaches the model no earlier than a process that takes a moment, so the log reads
    /// the same whether a spawn fails at once or a command exits in a millisecond.
    AfterStartingStep,
}

/// What a producer asks for.
pub struct JobStart {
    pub kind: String,
    pub label: String,
    pub owner: Option<AgentRef>,
    pub output_limit_bytes: Option<usize>,
    pub announce: Announce,
    /// The tool call that started the job (recorded in `job/registered`).
    pub tool_call: Option<String>,
}

/// Requests cancellation; the reason is informational. Must not block.
pub type CancelFn = Box<dyn Fn(Option<&str>) -> Result<(), BoxError> + Send + Sync>;
/// Returns the output produced since the previous read (consuming).
pub type ReadFn = Box<dyn Fn() -> String + Send + Sync>;

/// The handle a producer returns for the work it started.
pub struct JobHooks {
    pub cancel: CancelFn,
    pub read_output: Option<ReadFn>,
    /// Anything that must live exactly as long as the job record (a watcher task that is
    /// aborted on drop, a process-group guard).
    pub keep_alive: Option<Box<dyn Send + Sync>>,
}

/// The result of a kill request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillOutcome {
    CancellationRequested,
    AlreadyFinished,
}

/// Why a job settled (`job/settled.cause`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cause {
    Producer,
    Kill,
    Teardown,
}

impl Cause {
    fn as_str(self) -> &'static str {
        match self {
            Cause::Producer => "producer",
            Cause::Kill => "kill",
            Cause::Teardown => "teardown",
        }
    }
}

/// Called once per unreported settlement of an owned job (`tool-jobs` delivers notices).
pub type JobDoneListener = Arc<dyn Fn(&JobSnapshot, &AgentRef) + Send + Sync>;

struct Tracked {
    kind: String,
    label: String,
    output_limit_bytes: Option<usize>,
    owner: Option<AgentRef>,
    cancel: Arc<CancelFn>,
    read_output: Option<Arc<ReadFn>>,
    _keep_alive: Option<Box<dyn Send + Sync>>,
    status: JobStatus,
    detail: Option<String>,
    output: Option<String>,
    started_at: u64,
    finished_at: Option<u64>,
    reported: bool,
    cause: Option<Cause>,
    waiters: usize,
    settled: watch::Sender<bool>,
    announce: Announce,
    /// The owner's step boundary count when the job started.
    start_epoch: u64,
    tool_call: Option<String>,
}

impl Tracked {
    fn snapshot(&self, id: &str) -> JobSnapshot {
        JobSnapshot {
            id: id.to_string(),
            kind: self.kind.clone(),
            label: self.label.clone(),
            output_limit_bytes: self.output_limit_bytes,
            owner_session: self.owner.as_ref().map(|o| o.id().to_string()),
            status: self.status,
            detail: self.detail.clone(),
            started_at: self.started_at,
            finished_at: self.finished_at,
            reported: self.reported,
        }
    }

    fn owned_by(&self, agent: &AgentRef) -> bool {
        self.owner.as_ref().is_some_and(|o| same_agent(o, agent))
    }
}

/// The exact agent instance (a replacement with the same id is another owner).
fn same_agent(a: &AgentRef, b: &AgentRef) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

#[derive(Default)]
struct State {
    jobs: IndexMap<String, Tracked>,
    counters: HashMap<String, u64>,
    controllers: usize,
    listeners: Vec<(u64, JobDoneListener)>,
    next_listener: u64,
    /// Step boundaries seen per owner id.
    epochs: HashMap<String, u64>,
    /// Settled jobs whose notice waits for the owner's next step boundary.
    pending: HashMap<String, Vec<String>>,
    /// Owners whose scope carries a cleanup effect.
    cleanups: Vec<String>,
    closed: bool,
}

/// The `jobs` service.
pub struct JobRegistry {
    me: Weak<JobRegistry>,
    ctx: Context,
    max_per_owner: usize,
    state: Mutex<State>,
    /// Serializes admission (limit check, spawn, record) across threads.
    admission: Mutex<()>,
}

impl JobRegistry {
    /// A registry serving at most `max_per_owner` active jobs per owner. `ctx` is the
    /// providing plugin's context (used to find the agent registry).
    pub fn new(ctx: Context, max_per_owner: usize) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            ctx,
            max_per_owner,
            state: Mutex::new(State::default()),
            admission: Mutex::new(()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live agent of `session_id`, the owner a producer passes in [`JobStart`].
    pub fn owner_of(&self, session_id: &str) -> Option<AgentRef> {
        self.ctx.get::<Agents>()?.get(session_id)
    }

    /// Attaches a job controller (a plugin that lets the model read and stop jobs) as an
    /// effect of `ctx`; producers may start work only while one is attached.
    pub fn attach_controller(&self, ctx: &Context) -> Result<(), BoxError> {
        self.state().controllers += 1;
        let me = self.me.clone();
        ctx.effect("jobs controller", move || {
            if let Some(me) = me.upgrade() {
                let mut s = me.state();
                s.controllers = s.controllers.saturating_sub(1);
            }
        })?;
        Ok(())
    }

    /// Registers a completion listener as an effect of `ctx`.
    pub fn on_job_done(&self, ctx: &Context, listener: JobDoneListener) -> Result<(), BoxError> {
        let id = {
            let mut s = self.state();
            s.next_listener += 1;
            let id = s.next_listener;
            s.listeners.push((id, listener));
            id
        };
        let me = self.me.clone();
        ctx.effect("jobs completion listener", move || {
            if let Some(me) = me.upgrade() {
                me.state().listeners.retain(|(l, _)| *l != id);
            }
        })?;
        Ok(())
    }

    /// The checks `start` makes before anything runs; producers call it before slow
    /// preparation (confinement) so a refusal costs nothing.
    pub fn preflight(&self, owner: Option<&AgentRef>) -> Result<(), BoxError> {
        let s = self.state();
        if s.controllers == 0 || s.closed {
            return Err("background jobs cannot start: no job controller serves this agent; add @deepseek-ai/dsh-tool-jobs to its composition".into());
        }
        self.check_limit(&s, owner)
    }

    fn check_limit(&self, s: &State, owner: Option<&AgentRef>) -> Result<(), BoxError> {
        let active = s
            .jobs
            .values()
            .filter(|j| match (&j.owner, owner) {
                (Some(a), Some(b)) => same_agent(a, b),
                (None, None) => true,
                _ => false,
            })
            .filter(|j| matches!(j.status, JobStatus::Running | JobStatus::Stopping))
            .count();
        if active >= self.max_per_owner {
            return Err(format!(
                "this agent already has {} background jobs running, the most it may have at once; stop one you no longer need with job_kill or wait until one finishes, then try again",
                self.max_per_owner
            )
            .into());
        }
        Ok(())
    }

    fn check_owner(&self, owner: &AgentRef) -> Result<(), BoxError> {
        let agents = self.ctx.get::<Agents>().ok_or(
            "background job ownership requires the agent registry (load @deepseek-ai/dsh-agent)",
        )?;
        match agents.get(owner.id()) {
            Some(live) if same_agent(&live, owner) => Ok(()),
            _ => Err(format!(
                "agent \"{}\" is not the live instance registered under that id; only a live agent can own background jobs",
                owner.id()
            )
            .into()),
        }
    }

    /// Admits and starts one job: checks, then `run` (which starts the work and returns its
    /// hooks; an error registers nothing and consumes no id), then the record. Returns the
    /// job id `<kind>-<n>` (a per-kind counter for the life of the process).
    pub fn start(
        &self,
        spec: JobStart,
        run: impl FnOnce(JobSettler) -> Result<JobHooks, BoxError>,
    ) -> Result<String, BoxError> {
        let _admission = self.admission.lock().unwrap_or_else(|p| p.into_inner());
        {
            let s = self.state();
            if s.controllers == 0 || s.closed {
                return Err("background jobs cannot start: no job controller serves this agent; add @deepseek-ai/dsh-tool-jobs to its composition".into());
            }
        }
        if spec.kind.is_empty() {
            return Err("invalid job kind: expected a non-empty string".into());
        }
        if spec.label.is_empty() {
            return Err("invalid job label: expected a non-empty string".into());
        }
        if spec.output_limit_bytes == Some(0) {
            return Err("invalid outputLimitBytes: expected a positive safe integer, got 0".into());
        }
        if let Some(owner) = &spec.owner {
            self.check_owner(owner)?;
            self.ensure_owner_cleanup(owner)?;
        }
        self.check_limit(&self.state(), spec.owner.as_ref())?;

        let cell = Arc::new(Mutex::new(Link::Unlinked(None)));
        let hooks = run(JobSettler { cell: cell.clone() })?;
        let started_at = now_ms();
        let (id, early) = {
            let mut s = self.state();
            let count = s.counters.entry(spec.kind.clone()).or_insert(0);
            *count += 1;
            let id = format!("{}-{count}", spec.kind);
            let start_epoch = spec
                .owner
                .as_ref()
                .and_then(|o| s.epochs.get(o.id()).copied())
                .unwrap_or(0);
            let (settled, _) = watch::channel(false);
            s.jobs.insert(
                id.clone(),
                Tracked {
                    kind: spec.kind,
                    label: spec.label,
                    output_limit_bytes: spec.output_limit_bytes,
                    owner: spec.owner,
                    cancel: Arc::new(hooks.cancel),
                    read_output: hooks.read_output.map(Arc::new),
                    _keep_alive: hooks.keep_alive,
                    status: JobStatus::Running,
                    detail: None,
                    output: None,
                    started_at,
                    finished_at: None,
                    reported: false,
                    cause: None,
                    waiters: 0,
                    settled,
                    announce: spec.announce,
                    start_epoch,
                    tool_call: spec.tool_call,
                },
            );
            let mut link = cell.lock().unwrap_or_else(|p| p.into_inner());
            let early = match std::mem::replace(&mut *link, Link::Done) {
                Link::Unlinked(outcome) => outcome,
                Link::Linked(..) | Link::Done => None,
            };
            *link = Link::Linked(self.me.clone(), id.clone());
            (id, early)
        };
        self.record_registered(&id);
        if let Some(outcome) = early {
            self.settle(&id, outcome, Cause::Producer);
        }
        Ok(id)
    }

    /// The caller's jobs and unowned jobs, in registration order.
    pub fn list(&self, caller: Option<&str>) -> Vec<JobSnapshot> {
        self.state()
            .jobs
            .iter()
            .filter(|(_, j)| match &j.owner {
                None => true,
                Some(o) => Some(o.id()) == caller,
            })
            .map(|(id, j)| j.snapshot(id))
            .collect()
    }

    fn access<'a>(
        s: &'a mut State,
        id: &str,
        caller: Option<&str>,
    ) -> Result<&'a mut Tracked, BoxError> {
        let job = s
            .jobs
            .get_mut(id)
            .ok_or_else(|| BoxError::from(format!("unknown job {id}")))?;
        if let Some(owner) = &job.owner
            && Some(owner.id()) != caller
        {
            return Err(format!("job {id} belongs to another session").into());
        }
        Ok(job)
    }

    /// A snapshot that consumes nothing.
    pub fn get(&self, id: &str, caller: Option<&str>) -> Result<JobSnapshot, BoxError> {
        let mut s = self.state();
        Ok(Self::access(&mut s, id, caller)?.snapshot(id))
    }

    /// The output since the previous read (or the final output) and the job's state. A
    /// read of a finished job reports it.
    pub fn read(&self, id: &str, caller: Option<&str>) -> Result<(String, JobSnapshot), BoxError> {
        // The state is taken before reading: a job that settles meanwhile is reported by a
        // later read, never by one that may have missed its last output.
        let (reader, mut snapshot, output) = {
            let mut s = self.state();
            let job = Self::access(&mut s, id, caller)?;
            (
                job.read_output.clone(),
                job.snapshot(id),
                job.output.clone(),
            )
        };
        let finished = snapshot.status.is_terminal();
        let text = match reader {
            Some(read) => read(),
            None if finished => output.unwrap_or_default(),
            None => String::new(),
        };
        if finished {
            if let Some(job) = self.state().jobs.get_mut(id) {
                job.reported = true;
            }
            snapshot.reported = true;
        }
        Ok((text, snapshot))
    }

    /// Requests cancellation. A finished job is reported and left alone.
    pub fn kill(
        &self,
        id: &str,
        caller: Option<&str>,
        reason: Option<&str>,
    ) -> Result<KillOutcome, BoxError> {
        let (cancel, was_reported) = {
            let mut s = self.state();
            let job = Self::access(&mut s, id, caller)?;
            if job.status.is_terminal() {
                job.reported = true;
                return Ok(KillOutcome::AlreadyFinished);
            }
            if job.status == JobStatus::Stopping {
                return Ok(KillOutcome::CancellationRequested);
            }
            // Claimed before the producer runs, so a cancel that settles inline is no notice.
            let was = std::mem::replace(&mut job.reported, true);
            job.cause = Some(Cause::Kill);
            (job.cancel.clone(), was)
        };
        let result = cancel(reason);
        let mut s = self.state();
        if let Some(job) = s.jobs.get_mut(id) {
            match &result {
                Ok(()) => {
                    if job.status == JobStatus::Running {
                        job.status = JobStatus::Stopping;
                    }
                }
                Err(_) if !job.status.is_terminal() => {
                    job.reported = was_reported;
                    job.cause = None;
                }
                Err(_) => {}
            }
        }
        result.map(|()| KillOutcome::CancellationRequested)
    }

    /// Waits until the job settles, `timeout` passes (not an error: the returned snapshot
    /// shows it still running), or `cancel` fires (`wait aborted`). `timeout_ms` must be a
    /// positive finite number.
    pub async fn wait(
        &self,
        id: &str,
        timeout_ms: f64,
        caller: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<JobSnapshot, BoxError> {
        let mut rx = {
            let mut s = self.state();
            let job = Self::access(&mut s, id, caller)?;
            if !(timeout_ms.is_finite() && timeout_ms > 0.0) {
                return Err(format!(
                    "invalid wait timeout: expected a positive number of milliseconds, got {}",
                    dsh_kernel::json::to_string(&Value::from(timeout_ms))
                )
                .into());
            }
            if job.status.is_terminal() {
                job.reported = true;
                return Ok(job.snapshot(id));
            }
            if cancel.is_cancelled() {
                return Err("wait aborted".into());
            }
            job.waiters += 1;
            job.settled.subscribe()
        };
        let timeout = Duration::from_secs_f64((timeout_ms / 1000.0).min(1e9));
        let aborted = tokio::select! {
            _ = rx.wait_for(|settled| *settled) => false,
            () = tokio::time::sleep(timeout) => false,
            () = cancel.cancelled() => true,
        };
        let mut s = self.state();
        let job = s
            .jobs
            .get_mut(id)
            .ok_or_else(|| BoxError::from(format!("unknown job {id}")))?;
        job.waiters = job.waiters.saturating_sub(1);
        if job.status.is_terminal() {
            job.reported = true;
            return Ok(job.snapshot(id));
        }
        if aborted {
            return Err("wait aborted".into());
        }
        Ok(job.snapshot(id))
    }

    /// Records the first terminal outcome; later ones are ignored.
    fn settle(&self, id: &str, outcome: JobOutcome, cause: Cause) {
        let (snapshot, owner, defer, event) = {
            let mut s = self.state();
            let closed = s.closed;
            let owner_epoch = s
                .jobs
                .get(id)
                .and_then(|j| j.owner.as_ref())
                .and_then(|o| s.epochs.get(o.id()).copied())
                .unwrap_or(0);
            let Some(job) = s.jobs.get_mut(id) else {
                return;
            };
            if job.status.is_terminal() {
                return;
            }
            job.status = outcome.status.into();
            job.detail = outcome.detail;
            job.output = outcome.output;
            job.finished_at = Some(now_ms());
            if job.waiters > 0 {
                job.reported = true;
            }
            job.settled.send_replace(true);
            let cause = job.cause.unwrap_or(cause);
            let snapshot = job.snapshot(id);
            let event = settled_event(job, &snapshot, cause);
            let owner = job.owner.clone();
            let (announce, start_epoch) = (job.announce, job.start_epoch);
            let defer = owner.is_some()
                && announce == Announce::AfterStartingStep
                && owner_epoch == start_epoch;
            let owner = owner.filter(|_| !closed && !snapshot.reported);
            (snapshot, owner, defer, event)
        };
        if let Some((agent, data)) = event {
            append(&agent, "job/settled", data);
        }
        let Some(owner) = owner else { return };
        // Still in the step that started it: the notice waits for the next boundary (or
        // for the owner to go idle).
        if defer && owner.status() == AgentStatus::Running {
            self.state()
                .pending
                .entry(owner.id().to_string())
                .or_default()
                .push(id.to_string());
            return;
        }
        self.announce(&snapshot, &owner);
    }

    fn record_registered(&self, id: &str) {
        let event = {
            let s = self.state();
            s.jobs.get(id).and_then(|job| {
                let owner = job.owner.clone()?;
                let mut data = Map::new();
                data.insert("jobId".into(), Value::from(id));
                data.insert(
                    "owner".into(),
                    Value::from(format!("session-{}", owner.id())),
                );
                data.insert("kind".into(), Value::from(job.kind.as_str()));
                data.insert("label".into(), Value::from(job.label.as_str()));
                data.insert("startedAt".into(), Value::from(job.started_at));
                if let Some(call) = &job.tool_call {
                    data.insert(
                        "toolCall".into(),
                        serde_json::json!({"callId": call, "rootCallId": call}),
                    );
                }
                Some((owner, Value::Object(data)))
            })
        };
        if let Some((owner, data)) = event {
            append(&owner, "job/registered", data);
        }
    }
}

/// The `job/settled` record of an owned job (0.2.x shape).
fn settled_event(job: &Tracked, snapshot: &JobSnapshot, cause: Cause) -> Option<(AgentRef, Value)> {
    let owner = job.owner.clone()?;
    let mut data = Map::new();
    data.insert("jobId".into(), Value::from(snapshot.id.as_str()));
    data.insert(
        "owner".into(),
        Value::from(format!("session-{}", owner.id())),
    );
    data.insert("kind".into(), Value::from(job.kind.as_str()));
    data.insert("label".into(), Value::from(job.label.as_str()));
    data.insert("startedAt".into(), Value::from(job.started_at));
    if let Some(call) = &job.tool_call {
        data.insert(
            "toolCall".into(),
            serde_json::json!({"callId": call, "rootCallId": call}),
        );
    }
    data.insert(
        "finishedAt".into(),
        Value::from(snapshot.finished_at.unwrap_or(snapshot.started_at)),
    );
    data.insert("status".into(), Value::from(snapshot.status.as_str()));
    data.insert("cause".into(), Value::from(cause.as_str()));
    data.insert("producerReported".into(), Value::from(snapshot.reported));
    if let Some(detail) = &snapshot.detail {
        data.insert("detail".into(), Value::from(detail.as_str()));
    }
    Some((owner, Value::Object(data)))
}

fn append(owner: &AgentRef, event_type: &str, data: Value) {
    if let Err(e) = owner.session().append(event_type, data, None) {
        tracing::warn!(
            "jobs: could not record {event_type} in session {}: {e}",
            owner.id()
        );
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

enum Link {
    /// `run` has not returned yet; an outcome reported meanwhile waits here.
    Unlinked(Option<JobOutcome>),
    Linked(Weak<JobRegistry>, String),
    Done,
}

/// The producer's end of a job: report how it ended, once. Settling again does nothing;
/// dropping it unsettled records the job `failed` (a producer must not vanish silently).
pub struct JobSettler {
    cell: Arc<Mutex<Link>>,
}

impl JobSettler {
    /// Records the outcome (first one wins), wakes waiters and announces the completion.
    pub fn settle(&self, outcome: JobOutcome) {
        let target = {
            let mut link = self.cell.lock().unwrap_or_else(|p| p.into_inner());
            match &mut *link {
                Link::Unlinked(slot) => {
                    if slot.is_none() {
                        *slot = Some(outcome);
                    }
                    return;
                }
                Link::Linked(registry, id) => {
                    let target = (registry.clone(), id.clone());
                    *link = Link::Done;
                    target
                }
                Link::Done => return,
            }
        };
        if let Some(registry) = target.0.upgrade() {
            registry.settle(&target.1, outcome, Cause::Producer);
        }
    }
}

impl Drop for JobSettler {
    fn drop(&mut self) {
        let linked = matches!(
            &*self.cell.lock().unwrap_or_else(|p| p.into_inner()),
            Link::Linked(..)
        );
        if linked {
            self.settle(JobOutcome::new(
                Terminal::Failed,
                "the job's producer stopped without reporting an outcome",
            ));
        }
    }
}
