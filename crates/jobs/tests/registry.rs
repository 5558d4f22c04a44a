//! The job registry and tool-jobs delivery against a scripted owner agent: admission,
//! ids, access, reads, kills, waits, first-wins settlement, notice timing, wake budget and
//! teardown. No processes: producers here are plain closures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_agent::{Agent, AgentOptions, AgentRef, AgentStatus, Agents, InboxSnapshot, SendError};
use dsh_jobs::{
    Announce, JobHooks, JobOutcome, JobRegistry, JobSettler, JobStart, JobStatus, KillOutcome,
    Terminal,
};
use dsh_kernel::{BoxFuture, Context};
use dsh_llm::Message;
use dsh_session::{
    CancelCause, InboxTarget, LiveSession, SessionHeader, SessionSource, SessionStore, system_clock,
};
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

/// An owner whose status the test sets, recording what it is sent.
struct Owner {
    id: String,
    session: Arc<LiveSession>,
    ctx: Context,
    running: AtomicBool,
    sent: Mutex<Vec<(String, InboxTarget, bool)>>,
}

impl Agent for Owner {
    fn id(&self) -> &str {
        &self.id
    }
    fn session(&self) -> &Arc<LiveSession> {
        &self.session
    }
    fn ctx(&self) -> &Context {
        &self.ctx
    }
    fn options(&self) -> AgentOptions {
        AgentOptions::default()
    }
    fn cwd(&self) -> Option<PathBuf> {
        None
    }
    fn status(&self) -> AgentStatus {
        if self.running.load(Ordering::SeqCst) {
            AgentStatus::Running
        } else {
            AgentStatus::Idle
        }
    }
    fn inbox(&self) -> InboxSnapshot {
        InboxSnapshot::default()
    }
    fn send(&self, message: Message, target: InboxTarget, wakeup: bool) -> Result<(), SendError> {
        let text = message.content[0].as_text().unwrap_or_default().to_string();
        self.sent.lock().unwrap().push((text, target, wakeup));
        if wakeup {
            self.running.store(true, Ordering::SeqCst);
        }
        Ok(())
    }
    fn discard(&self, _: &str) -> bool {
        false
    }
    fn cancel(&self, _: CancelCause, _: bool) {}
    fn when_idle(&self) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
    fn dispose(&self) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

struct World {
    root: Context,
    jobs: Arc<JobRegistry>,
    agents: Arc<Agents>,
    store: Arc<SessionStore>,
}

impl World {
    fn new(limit: usize) -> Self {
        let root = Context::new_root();
        let agents = Agents::new();
        root.provide(agents.clone()).unwrap();
        let jobs = JobRegistry::new(root.clone(), limit);
        jobs.attach_controller(&root).unwrap();
        Self {
            root,
            jobs,
            agents,
            store: SessionStore::new(system_clock()),
        }
    }

    fn owner(&self, id: &str) -> (Arc<Owner>, AgentRef) {
        let session = self
            .store
            .create(&self.root, SessionHeader::new(id, 1), SessionSource::Fresh)
            .unwrap();
        let owner = Arc::new(Owner {
            id: id.into(),
            session,
            ctx: self.root.create_scope(id),
            running: AtomicBool::new(true),
            sent: Mutex::new(Vec::new()),
        });
        let agent: AgentRef = owner.clone();
        self.agents.enter(agent.clone()).unwrap();
        (owner, agent)
    }

    /// Delivers notices the way tool-jobs does (followup when idle, else inject).
    fn deliver(&self) {
        self.jobs
            .on_job_done(
                &self.root,
                Arc::new(|snapshot, owner| {
                    let m = dsh_jobs::completion_message(snapshot);
                    let _ = if owner.status() == AgentStatus::Idle {
                        owner.followup(m)
                    } else {
                        owner.inject(m)
                    };
                }),
            )
            .unwrap();
    }
}

/// A producer whose settler the test keeps, counting cancels.
struct Manual {
    settler: Arc<Mutex<Option<JobSettler>>>,
    cancels: Arc<AtomicUsize>,
    reads: Arc<Mutex<Vec<String>>>,
}

impl Manual {
    fn new() -> Self {
        Self {
            settler: Arc::new(Mutex::new(None)),
            cancels: Arc::new(AtomicUsize::new(0)),
            reads: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn start(
        &self,
        jobs: &JobRegistry,
        owner: Option<AgentRef>,
        kind: &str,
    ) -> Result<String, String> {
        let (slot, cancels, reads) = (
            self.settler.clone(),
            self.cancels.clone(),
            self.reads.clone(),
        );
        jobs.start(
            JobStart {
                kind: kind.into(),
                label: "work".into(),
                owner,
                output_limit_bytes: None,
                announce: Announce::AfterStartingStep,
                tool_call: Some("call-1".into()),
            },
            move |settler| {
                *slot.lock().unwrap() = Some(settler);
                Ok(JobHooks {
                    cancel: Box::new(move |_| {
                        cancels.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    }),
                    read_output: Some(Box::new(move || {
                        let mut r = reads.lock().unwrap();
                        let text = r.join("");
                        r.clear();
                        text
                    })),
                    keep_alive: None,
                })
            },
        )
        .map_err(|e| e.to_string())
    }

    fn settle(&self, status: Terminal, detail: &str) {
        self.settler
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .settle(JobOutcome::new(status, detail));
    }
}

#[tokio::test]
async fn admission_ids_and_access_follow_upstream() {
    let w = World::new(2);
    let (_o, a) = w.owner("s1");
    let (_p, b) = w.owner("s2");
    // Each producer keeps its settler: a dropped one would settle its job `failed`.
    let m: Vec<Manual> = (0..6).map(|_| Manual::new()).collect();
    assert_eq!(
        m[0].start(&w.jobs, Some(a.clone()), "bash").unwrap(),
        "bash-1"
    );
    assert_eq!(
        m[1].start(&w.jobs, Some(a.clone()), "bash").unwrap(),
        "bash-2"
    );
    assert_eq!(
        m[2].start(&w.jobs, Some(a.clone()), "bash").unwrap_err(),
        "this agent already has 2 background jobs running, the most it may have at once; stop one you no longer need with job_kill or wait until one finishes, then try again"
    );
    // The limit is per owner; ids count per kind for the whole process.
    assert_eq!(
        m[3].start(&w.jobs, Some(b.clone()), "bash").unwrap(),
        "bash-3"
    );
    assert_eq!(
        m[4].start(&w.jobs, Some(b), "pty-send").unwrap(),
        "pty-send-1"
    );
    assert_eq!(
        w.jobs.get("bash-9", Some("s1")).unwrap_err().to_string(),
        "unknown job bash-9"
    );
    assert_eq!(
        w.jobs.get("bash-3", Some("s1")).unwrap_err().to_string(),
        "job bash-3 belongs to another session"
    );
    let ids: Vec<String> = w.jobs.list(Some("s1")).into_iter().map(|j| j.id).collect();
    assert_eq!(ids, ["bash-1", "bash-2"]);
    // A failing producer registers nothing and consumes no id.
    let refused = w.jobs.start(
        JobStart {
            kind: "pty-send".into(),
            label: "x".into(),
            owner: None,
            output_limit_bytes: None,
            announce: Announce::AtSettlement,
            tool_call: None,
        },
        |_| Err("no such terminal".into()),
    );
    assert_eq!(refused.unwrap_err().to_string(), "no such terminal");
    assert_eq!(m[5].start(&w.jobs, None, "pty-send").unwrap(), "pty-send-2");
    // A producer that vanishes settles its job `failed`, freeing the slot.
    drop(m);
    let s1 = w.jobs.get("bash-1", Some("s1")).unwrap();
    assert_eq!(
        (s1.status, s1.detail.as_deref()),
        (
            JobStatus::Failed,
            Some("the job's producer stopped without reporting an outcome")
        )
    );
}

#[tokio::test]
async fn a_registry_without_controller_refuses_to_start() {
    let root = Context::new_root();
    let jobs = JobRegistry::new(root, 10);
    assert_eq!(
        Manual::new().start(&jobs, None, "bash").unwrap_err(),
        "background jobs cannot start: no job controller serves this agent; add @deepseek-ai/dsh-tool-jobs to its composition"
    );
}

#[tokio::test]
async fn reads_consume_kills_report_and_the_first_outcome_wins() {
    let w = World::new(10);
    let (_o, a) = w.owner("s1");
    let m = Manual::new();
    let id = m.start(&w.jobs, Some(a), "bash").unwrap();
    m.reads.lock().unwrap().push("hello\n".into());
    let (text, snap) = w.jobs.read(&id, Some("s1")).unwrap();
    assert_eq!(
        (text.as_str(), snap.status, snap.reported),
        ("hello\n", JobStatus::Running, false)
    );
    assert_eq!(w.jobs.read(&id, Some("s1")).unwrap().0, "");
    assert_eq!(
        w.jobs.kill(&id, Some("s1"), Some("why")).unwrap(),
        KillOutcome::CancellationRequested
    );
    let snap = w.jobs.get(&id, Some("s1")).unwrap();
    assert_eq!((snap.status, snap.reported), (JobStatus::Stopping, true));
    assert_eq!(m.cancels.load(Ordering::SeqCst), 1);
    m.settle(Terminal::Killed, "signal: SIGTERM");
    m.settle(Terminal::Completed, "exit code: 0");
    let snap = w.jobs.get(&id, Some("s1")).unwrap();
    assert_eq!(
        (snap.status, snap.detail.as_deref()),
        (JobStatus::Killed, Some("signal: SIGTERM"))
    );
    assert_eq!(
        w.jobs.kill(&id, Some("s1"), None).unwrap(),
        KillOutcome::AlreadyFinished
    );
    assert_eq!(
        m.cancels.load(Ordering::SeqCst),
        1,
        "a finished job is not cancelled"
    );
}

#[tokio::test]
async fn waits_time_out_abort_and_observe_settlement() {
    let w = World::new(10);
    let (_o, a) = w.owner("s1");
    let m = Manual::new();
    let id = m.start(&w.jobs, Some(a), "bash").unwrap();
    let never = CancellationToken::new();
    assert_eq!(
        w.jobs
            .wait(&id, -1.0, Some("s1"), &never)
            .await
            .unwrap_err()
            .to_string(),
        "invalid wait timeout: expected a positive number of milliseconds, got -1"
    );
    let timed_out = w.jobs.wait(&id, 20.0, Some("s1"), &never).await.unwrap();
    assert_eq!(
        (timed_out.status, timed_out.reported),
        (JobStatus::Running, false)
    );
    let cancel = CancellationToken::new();
    cancel.cancel();
    assert_eq!(
        w.jobs
            .wait(&id, 1000.0, Some("s1"), &cancel)
            .await
            .unwrap_err()
            .to_string(),
        "wait aborted"
    );
    let settler = m.settler.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        settler
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .settle(JobOutcome::new(Terminal::Completed, "exit code: 0"));
    });
    let done = w
        .jobs
        .wait(&id, 10_000.0, Some("s1"), &never)
        .await
        .unwrap();
    // A wait that saw the settlement reports it: no notice follows.
    assert_eq!((done.status, done.reported), (JobStatus::Completed, true));
}

#[tokio::test]
async fn a_job_that_ends_in_its_starting_step_is_announced_at_the_next_boundary() {
    let w = World::new(10);
    w.deliver();
    let (o, a) = w.owner("s1");
    let m = Manual::new();
    let id = m.start(&w.jobs, Some(a.clone()), "bash").unwrap();
    m.settle(Terminal::Killed, "killed before exit");
    assert!(
        o.sent.lock().unwrap().is_empty(),
        "held until the next step boundary"
    );
    assert_eq!(
        w.jobs.get(&id, Some("s1")).unwrap().status,
        JobStatus::Killed,
        "state is never delayed"
    );
    dsh_jobs_step_boundary(&w, &a).await;
    assert_eq!(
        *o.sent.lock().unwrap(),
        [(
            "background job bash-1 (bash: work) finished [status: killed, killed before exit]. Use job_output to read what it produced.".to_string(),
            InboxTarget::NextStep,
            false
        )]
    );
    // A later settlement (after the boundary) is announced at once.
    let m2 = Manual::new();
    m2.start(&w.jobs, Some(a.clone()), "bash").unwrap();
    dsh_jobs_step_boundary(&w, &a).await;
    m2.settle(Terminal::Completed, "exit code: 0");
    assert_eq!(o.sent.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn an_idle_owner_is_woken_and_reported_jobs_stay_silent() {
    let w = World::new(10);
    w.deliver();
    let (o, a) = w.owner("s1");
    o.running.store(false, Ordering::SeqCst);
    let m = Manual::new();
    let id = m.start(&w.jobs, Some(a.clone()), "bash").unwrap();
    m.settle(Terminal::Completed, "exit code: 0");
    assert_eq!(
        o.sent.lock().unwrap()[0].1,
        InboxTarget::NextTurn,
        "followup wakes the owner"
    );
    assert_eq!(w.jobs.read(&id, Some("s1")).unwrap().1.reported, true);
    // Killed, then settled: reported, so no notice.
    let m2 = Manual::new();
    let id2 = m2.start(&w.jobs, Some(a), "bash").unwrap();
    w.jobs.kill(&id2, Some("s1"), None).unwrap();
    m2.settle(Terminal::Killed, "signal: SIGTERM");
    assert_eq!(o.sent.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn disposal_cancels_waits_and_forgets_without_notices() {
    let w = World::new(10);
    w.deliver();
    let (o, a) = w.owner("s1");
    let m = Manual::new();
    let id = m.start(&w.jobs, Some(a.clone()), "bash").unwrap();
    let settler = m.settler.clone();
    let cancels = m.cancels.clone();
    // The producer stops a moment after its cancel.
    tokio::spawn(async move {
        while cancels.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        settler.lock().unwrap().take();
    });
    w.jobs.dispose_owned(&a).await;
    assert_eq!(m.cancels.load(Ordering::SeqCst), 1);
    assert!(
        o.sent.lock().unwrap().is_empty(),
        "teardown is no completion notice"
    );
    assert_eq!(
        w.jobs.get(&id, Some("s1")).unwrap_err().to_string(),
        format!("unknown job {id}")
    );
    // The durable record: registered, then settled by teardown (the dropped producer).
    let events: Vec<(String, serde_json::Value)> = o
        .session
        .events_from(0)
        .iter()
        .map(|e| (e.event_type.to_string(), e.data.to_value()))
        .collect();
    assert_eq!(events[0].0, "job/registered");
    assert_eq!(events[1].0, "job/settled");
    assert_eq!(events[1].1["cause"], "teardown");
    assert_eq!(events[1].1["status"], "failed");
    assert_eq!(events[1].1["toolCall"]["callId"], "call-1");
}

/// `agent/pre-step` as the jobs-local row sees it.
async fn dsh_jobs_step_boundary(w: &World, agent: &AgentRef) {
    w.jobs.step_boundary(agent);
}
