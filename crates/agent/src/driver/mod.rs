//! The default driver (`agent-loop`): the phase machine, inbox mutations and waking.
//! The turn/step algorithm is in `turn.rs`, request building in `request.rs`, the tool
//! scheduler in `scheduler.rs`, the runtime-context projection in `context.rs`.

mod context;
mod request;
mod scheduler;
mod turn;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use dsh_kernel::{BoxError, BoxFuture, Context};
use dsh_llm::{LlmRuntime, Message};
use dsh_prompt::SystemPrompt;
use dsh_session::{
    CancelCause, InboxTarget, LiveSession, SessionHeader, SessionSource, SessionStore, types,
};
use dsh_tools::ToolRegistry;
use tokio_util::sync::CancellationToken;

use crate::events::{
    AgentCreated, AgentDisposed, AgentDisposing, AgentPayload, AgentStatusChanged, InboxClaimed,
    InboxDiscarded, InboxInserted, InboxPayload, SessionStart, SessionStartPayload,
    SessionStartSource, StatusPayload,
};
use crate::handle::{Agent, AgentOptions, AgentRef, AgentStatus, InboxSnapshot, SendError};
use crate::inbox::Inbox;
use crate::registry::{AgentFactory, AgentSource, Agents, CreateAgent, SessionMeta};

pub use context::RuntimeContextProjection;

/// Settings of the agent-loop plugin.
#[derive(Clone, Debug)]
pub struct LoopConfig {
    pub max_parallel_tool_calls: usize,
    /// Run the "model-visible means logged" check before every request.
    pub check_invariants: bool,
    /// `maxStepsPerTurn`: a turn that would start one more step ends with `STEP_LIMIT`.
    pub max_steps_per_turn: u64,
    /// `maxToolCallsPerResponse`: a response asking for more calls ends the turn with
    /// `TOO_MANY_TOOL_CALLS` (none of them runs).
    pub max_tool_calls_per_response: usize,
    /// `maxIdenticalFailingCalls`: this many failures in a row of one call (same tool, same
    /// arguments) end the turn with `REPEATED_FAILING_CALL`.
    pub max_identical_failing_calls: usize,
}

/// Default `maxStepsPerTurn`: far above what a real task needs in one turn (long agentic
/// turns run tens to a few hundred steps), low enough that a provider stuck in a loop
/// stops in bounded time and cost.
pub const DEFAULT_MAX_STEPS_PER_TURN: u64 = 1000;
/// Default `maxToolCallsPerResponse`: models ask for a handful of parallel calls, rarely a
/// few dozen.
pub const DEFAULT_MAX_TOOL_CALLS_PER_RESPONSE: usize = 256;
/// Default `maxIdenticalFailingCalls`: a model retrying the very call that just failed,
/// unchanged, five times is not going to succeed the sixth.
pub const DEFAULT_MAX_IDENTICAL_FAILING_CALLS: usize = 5;

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            max_parallel_tool_calls: 10,
            check_invariants: cfg!(debug_assertions),
            max_steps_per_turn: DEFAULT_MAX_STEPS_PER_TURN,
            max_tool_calls_per_response: DEFAULT_MAX_TOOL_CALLS_PER_RESPONSE,
            max_identical_failing_calls: DEFAULT_MAX_IDENTICAL_FAILING_CALLS,
        }
    }
}

/// Services the driver uses.
#[derive(Clone)]
pub(crate) struct Services {
    pub llm: Arc<LlmRuntime>,
    pub tools: Arc<ToolRegistry>,
    pub prompt: Arc<SystemPrompt>,
    pub agents: Arc<Agents>,
    pub sessions: Arc<SessionStore>,
}

pub(crate) struct Run {
    pub abort: CancellationToken,
    pub cause: Option<CancelCause>,
    pub turn: u64,
    pub step: u64,
    pub wake_requested: bool,
    /// Consecutive failures of one identical call in this turn.
    pub failing: FailingStreak,
}

impl Run {
    fn new(turn: u64) -> Self {
        Self {
            abort: CancellationToken::new(),
            cause: None,
            turn,
            step: 0,
            wake_requested: false,
            failing: FailingStreak::default(),
        }
    }
}

/// The run of identical failing calls at the end of the turn so far: the call (tool name
/// and raw arguments), how many times in a row it failed, and its last error text.
#[derive(Debug, Default)]
pub(crate) struct FailingStreak {
    pub call: Option<(String, String)>,
    pub count: usize,
    pub last_error: String,
}

impl FailingStreak {
    /// Counts one committed result, in model order.
    pub fn record(&mut self, name: &str, arguments: &str, failed: Option<String>) {
        let Some(error) = failed else {
            *self = FailingStreak::default();
            return;
        };
        let same = self
            .call
            .as_ref()
            .is_some_and(|(n, a)| n == name && a == arguments);
        if !same {
            self.call = Some((name.to_string(), arguments.to_string()));
            self.count = 0;
        }
        self.count += 1;
        self.last_error = error;
    }
}

pub(crate) enum Phase {
    Idle,
    Running(Run),
}

pub(crate) struct State {
    pub phase: Phase,
    pub inbox: Inbox,
    pub last_turn: u64,
    pub disposed: bool,
}

/// The concrete agent of the default driver.
pub struct LoopAgent {
    id: String,
    me: Weak<LoopAgent>,
    session: Arc<LiveSession>,
    ctx: Context,
    options: AgentOptions,
    /// The directory the agent was created in.
    cwd: Option<PathBuf>,
    /// The latest `working-directory/change` of the log, and the next seq to look at.
    cwd_changed: Mutex<(u64, Option<PathBuf>)>,
    pub(crate) services: Services,
    pub(crate) config: LoopConfig,
    state: Mutex<State>,
    inbox_op: Mutex<()>,
    /// Whether the agent is idle, and how many times it became idle (the idle epoch): a
    /// waiter that saw it running resolves at the next idle even when a wake restarts the
    /// agent before the waiter is polled.
    idle: tokio::sync::watch::Sender<(bool, u64)>,
    pub(crate) header_logged: AtomicBool,
    pub(crate) runtime_context: Mutex<RuntimeContextProjection>,
}

impl LoopAgent {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn agent_ref(&self) -> Option<AgentRef> {
        self.me.upgrade().map(|a| a as AgentRef)
    }

    pub(crate) fn this(&self) -> Option<Arc<LoopAgent>> {
        self.me.upgrade()
    }

    fn set_status(&self, status: AgentStatus) {
        let announce = |status: AgentStatus| {
            if let Some(agent) = self.agent_ref() {
                self.ctx
                    .emit::<AgentStatusChanged>(&StatusPayload { agent, status });
            }
        };
        if status != AgentStatus::Idle {
            let changed = self
                .idle
                .send_if_modified(|s| std::mem::replace(&mut s.0, false));
            if changed {
                announce(status);
            }
            return;
        }
        if self.idle.borrow().0 {
            return;
        }
        // As upstream: `idle` is announced before idle waiters resume, so an SDK client
        // sees a child's `idle` before the `subagent.finished` its end causes.
        announce(status);
        let mut restarted = false;
        self.idle.send_if_modified(|s| {
            if s.0 {
                return false;
            }
            // Restarted meanwhile (by a status listener or another thread), whose own
            // announcement found the watch still running: waiters wait for the next idle.
            if self.status() == AgentStatus::Running {
                restarted = true;
                return false;
            }
            *s = (true, s.1 + 1);
            true
        });
        if restarted {
            announce(AgentStatus::Running);
        }
    }

    fn notify(&self, kind: Notification, messages: &[Arc<Message>], turn: Option<u64>) {
        let Some(agent) = self.agent_ref() else {
            return;
        };
        for message in messages {
            let payload = InboxPayload {
                agent: agent.clone(),
                message: message.clone(),
                turn,
            };
            match kind {
                Notification::Inserted => self.ctx.emit::<InboxInserted>(&payload),
                Notification::Claimed => self.ctx.emit::<InboxClaimed>(&payload),
                Notification::Discarded => self.ctx.emit::<InboxDiscarded>(&payload),
            }
        }
    }

    /// One durable inbox mutation: plan, validate, log, apply, notify. Returns the removed
    /// messages.
    pub(crate) fn mutate_inbox(
        &self,
        target: InboxTarget,
        start: Option<usize>,
        delete: usize,
        inserted: Vec<Arc<Message>>,
        canceled: bool,
    ) -> Result<Vec<Arc<Message>>, SendError> {
        let _op = self.inbox_op.lock().unwrap_or_else(|p| p.into_inner());
        let splice = {
            let state = self.state();
            let Some(splice) = state.inbox.plan(target, start, delete, inserted, canceled) else {
                return Ok(Vec::new());
            };
            state.inbox.validate(&splice).map_err(SendError)?;
            splice
        };
        self.session
            .append(types::INBOX_SPLICED, splice.to_data(), None)
            .map_err(|e| SendError(e.to_string()))?;
        self.state().inbox.apply(&splice);
        if canceled {
            self.notify(Notification::Discarded, &splice.removed, None);
        }
        self.notify(Notification::Inserted, &splice.inserted, None);
        Ok(splice.removed)
    }

    /// The claim rule: all of `next-step`, plus the head of `next-turn` at a turn boundary.
    /// Pure deletions; the claimed messages never return to the inbox.
    pub(crate) fn claim(
        &self,
        target: InboxTarget,
        turn: u64,
    ) -> Result<Vec<Arc<Message>>, SendError> {
        let steps = self.state().inbox.next_step.len();
        let mut claimed =
            self.mutate_inbox(InboxTarget::NextStep, Some(0), steps, Vec::new(), false)?;
        if target == InboxTarget::NextTurn {
            claimed.extend(self.mutate_inbox(
                InboxTarget::NextTurn,
                Some(0),
                1,
                Vec::new(),
                false,
            )?);
        }
        self.notify(Notification::Claimed, &claimed, Some(turn));
        Ok(claimed)
    }

    pub(crate) fn next_step_pending(&self) -> bool {
        !self.state().inbox.next_step.is_empty()
    }

    pub(crate) fn has_pending(&self) -> bool {
        self.state().inbox.has_pending()
    }

    /// Starts the driver when idle; otherwise latches a wake when the running activity was
    /// aborted (replayed when it converges to idle).
    fn wake_driver(&self, wake_after_abort: bool) {
        let start_run = {
            let mut state = self.state();
            if state.disposed {
                return;
            }
            match &mut state.phase {
                Phase::Idle => {
                    let last = state.last_turn;
                    state.phase = Phase::Running(Run::new(last));
                    true
                }
                Phase::Running(run) => {
                    if wake_after_abort && !matches!(run.cause, Some(CancelCause::Disposed)) {
                        run.wake_requested = true;
                    }
                    false
                }
            }
        };
        if !start_run {
            return;
        }
        self.set_status(AgentStatus::Running);
        // The synchronous prefix: `turn/start` and the claim happen before we return.
        let opened = self.open_turn();
        let Some(this) = self.this() else { return };
        let handle = tokio::runtime::Handle::try_current();
        match handle {
            Ok(h) => {
                h.spawn(async move { this.drive(opened).await });
            }
            Err(_) => {
                tracing::error!(
                    "agent {} woke outside a tokio runtime; the turn cannot run",
                    self.id
                );
                self.go_idle();
            }
        }
    }

    /// Converges to idle and replays a latched wake when work is still pending.
    pub(crate) fn go_idle(&self) {
        let replay = {
            let mut state = self.state();
            match std::mem::replace(&mut state.phase, Phase::Idle) {
                Phase::Running(run) => {
                    state.last_turn = run.turn;
                    run.wake_requested && state.inbox.has_pending() && !state.disposed
                }
                Phase::Idle => false,
            }
        };
        self.set_status(AgentStatus::Idle);
        if replay {
            self.wake_driver(false);
        }
    }

    pub(crate) fn abort_cause(&self) -> CancelCause {
        match &self.state().phase {
            Phase::Running(Run { cause: Some(c), .. }) => c.clone(),
            _ => CancelCause::User,
        }
    }
}

impl LoopAgent {
    /// Prompt variables `provider`, `model`, `cwd` for this agent's assemblies.
    fn register_variables(&self) {
        let prompt = self.services.prompt.clone();
        let vars: [(&str, dsh_prompt::VariableFn); 3] = [
            (
                "provider",
                Arc::new(|a: &dsh_prompt::AssembleContext| Some(a.provider.clone())),
            ),
            (
                "model",
                Arc::new(|a: &dsh_prompt::AssembleContext| Some(a.model.clone())),
            ),
            (
                "cwd",
                Arc::new(|a: &dsh_prompt::AssembleContext| {
                    a.cwd.as_ref().map(|p| p.display().to_string())
                }),
            ),
        ];
        for (name, f) in vars {
            if let Err(e) = prompt.variable(&self.ctx, name, f) {
                tracing::warn!("agent {}: prompt variable {name}: {e}", self.id);
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Notification {
    Inserted,
    Claimed,
    Discarded,
}

impl Agent for LoopAgent {
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
        self.options.clone()
    }

    /// The effective working directory: the latest `working-directory/change` in the log
    /// (a frontend moved the session), else the directory the agent was created in.
    fn cwd(&self) -> Option<PathBuf> {
        let mut changed = self.cwd_changed.lock().unwrap_or_else(|p| p.into_inner());
        let next = self.session.next_seq();
        if changed.0 < next {
            for e in self.session.events_from(changed.0) {
                if e.event_type == types::WORKING_DIRECTORY_CHANGE
                    && let Some(cwd) = e.data.get("cwd").and_then(serde_json::Value::as_str)
                {
                    changed.1 = Some(PathBuf::from(cwd));
                }
            }
            changed.0 = next;
        }
        changed.1.clone().or_else(|| self.cwd.clone())
    }

    fn status(&self) -> AgentStatus {
        match self.state().phase {
            Phase::Idle => AgentStatus::Idle,
            Phase::Running(_) => AgentStatus::Running,
        }
    }

    fn inbox(&self) -> InboxSnapshot {
        let s = self.state();
        InboxSnapshot {
            next_turn: s.inbox.next_turn.clone(),
            next_step: s.inbox.next_step.clone(),
        }
    }

    fn send(&self, message: Message, target: InboxTarget, wakeup: bool) -> Result<(), SendError> {
        let waking_after_abort = wakeup
            && match &self.state().phase {
                Phase::Running(run) => run.abort.is_cancelled(),
                Phase::Idle => false,
            };
        if self.state().disposed {
            return Err(SendError(format!("agent \"{}\" is disposed", self.id)));
        }
        let target = if waking_after_abort {
            InboxTarget::NextTurn
        } else {
            target
        };
        self.mutate_inbox(target, None, 0, vec![Arc::new(message)], false)?;
        if wakeup {
            self.wake_driver(waking_after_abort);
        }
        Ok(())
    }

    fn discard(&self, message_id: &str) -> bool {
        let position = {
            let s = self.state();
            s.inbox
                .next_turn
                .iter()
                .position(|m| m.id == message_id)
                .map(|i| (InboxTarget::NextTurn, i))
                .or_else(|| {
                    s.inbox
                        .next_step
                        .iter()
                        .position(|m| m.id == message_id)
                        .map(|i| (InboxTarget::NextStep, i))
                })
        };
        match position {
            Some((target, i)) => self
                .mutate_inbox(target, Some(i), 1, Vec::new(), true)
                .is_ok_and(|r| !r.is_empty()),
            None => false,
        }
    }

    fn cancel(&self, cause: CancelCause, keep_inbox: bool) {
        if !keep_inbox {
            let steps = self.state().inbox.next_step.len();
            if let Err(e) =
                self.mutate_inbox(InboxTarget::NextStep, Some(0), steps, Vec::new(), true)
            {
                tracing::warn!("agent {}: could not clear next-step inbox: {e}", self.id);
            }
            let turns = self.state().inbox.next_turn.len();
            if let Err(e) =
                self.mutate_inbox(InboxTarget::NextTurn, Some(0), turns, Vec::new(), true)
            {
                tracing::warn!("agent {}: could not clear next-turn inbox: {e}", self.id);
            }
        }
        let mut state = self.state();
        if let Phase::Running(run) = &mut state.phase {
            if !keep_inbox {
                run.wake_requested = false;
            }
            if run.cause.is_none() {
                run.cause = Some(cause);
            }
            run.abort.cancel();
        }
    }

    fn when_idle(&self) -> BoxFuture<'static, ()> {
        let mut rx = self.idle.subscribe();
        let (idle, seen) = *rx.borrow_and_update();
        Box::pin(async move {
            if idle {
                return;
            }
            let _ = rx.wait_for(|(_, epoch)| *epoch > seen).await;
        })
    }

    fn dispose(&self) -> BoxFuture<'static, ()> {
        let this = self.this();
        Box::pin(async move {
            let Some(this) = this else { return };
            this.cancel(CancelCause::Disposed, false);
            this.when_idle().await;
            this.state().disposed = true;
            if let Some(agent) = this.agent_ref()
                && let Err(e) = this
                    .ctx
                    .serial::<AgentDisposing>(&AgentPayload { agent })
                    .await
            {
                tracing::warn!("agent {}: a disposal listener failed: {e}", this.id);
            }
            this.ctx.dispose();
            this.services.agents.leave(&this.id);
            if let Some(agent) = this.agent_ref() {
                this.ctx.emit::<AgentDisposed>(&AgentPayload { agent });
            }
            this.services.sessions.dispose(&this.id);
        })
    }
}

/// The header of a new (fresh or seeded) session.
fn new_header(
    id: &str,
    now: u64,
    cwd: Option<String>,
    meta: SessionMeta,
    seed_length: Option<u64>,
) -> SessionHeader {
    let mut h = SessionHeader::new(id.to_string(), now);
    h.cwd = cwd;
    h.parent_session = meta.parent_session;
    h.seed_length = seed_length;
    h.origin = meta.origin;
    h.delegation_depth = meta.delegation_depth;
    h.agent_preset = meta.agent_preset;
    h
}

/// The factory installed by the agent-loop plugin.
pub struct LoopFactory {
    pub(crate) services: Services,
    pub(crate) config: LoopConfig,
}

impl LoopFactory {
    pub(crate) fn new(services: Services, config: LoopConfig) -> Self {
        Self { services, config }
    }
}

impl AgentFactory for LoopFactory {
    fn create(&self, owner: &Context, request: CreateAgent) -> Result<AgentRef, BoxError> {
        let sessions = &self.services.sessions;
        let id = match (&request.source, &request.session_id) {
            (AgentSource::Resume { header, .. }, _) => header.id.clone(),
            (_, Some(id)) => id.clone(),
            (_, None) => uuid::Uuid::new_v4().to_string(),
        };
        let scope = owner.create_scope(format!("agent {id}"));
        let now = sessions.now().max(0) as u64;
        let cwd_string = request.cwd.as_ref().map(|p| p.display().to_string());
        let (header, source, start) = match request.source {
            AgentSource::Fresh => {
                let h = new_header(&id, now, cwd_string, request.meta, None);
                (h, SessionSource::Fresh, SessionStartSource::Startup)
            }
            AgentSource::Seeded {
                prefix,
                seed_length,
            } => {
                let h = new_header(&id, now, cwd_string, request.meta, seed_length);
                (
                    h,
                    SessionSource::Seeded(prefix),
                    SessionStartSource::Startup,
                )
            }
            AgentSource::Resume {
                header,
                events,
                stored_len,
            } => (
                header,
                SessionSource::Restored { events, stored_len },
                SessionStartSource::Resume,
            ),
        };
        let cwd = request
            .cwd
            .or_else(|| header.cwd.as_ref().map(PathBuf::from));
        let session = match sessions.create(&scope, header, source) {
            Ok(s) => s,
            Err(e) => {
                scope.dispose();
                return Err(Box::new(e));
            }
        };
        if let Some(setup) = request.setup
            && let Err(e) = setup(&scope, &session)
        {
            sessions.dispose(&id);
            scope.dispose();
            return Err(e);
        }
        let (events, seed_length) =
            session.read(|s| (s.events().to_vec(), s.header().seed_length.unwrap_or(0)));
        let inbox = match Inbox::replay(&events, seed_length) {
            Ok(i) => i,
            Err(e) => {
                sessions.dispose(&id);
                scope.dispose();
                return Err(e.into());
            }
        };
        let last_turn = session.read(|s| s.last_turn());
        let projection = RuntimeContextProjection::from_log(
            &events,
            session.read(|s| s.surface().nodes().to_vec()),
        );
        let (idle, _) = tokio::sync::watch::channel((true, 0));
        let agent = Arc::new_cyclic(|me| LoopAgent {
            id: id.clone(),
            me: me.clone(),
            session,
            ctx: scope.clone(),
            options: request.options,
            cwd,
            cwd_changed: Mutex::new((0, None)),
            services: self.services.clone(),
            config: self.config.clone(),
            state: Mutex::new(State {
                phase: Phase::Idle,
                inbox,
                last_turn,
                disposed: false,
            }),
            inbox_op: Mutex::new(()),
            idle,
            header_logged: AtomicBool::new(false),
            runtime_context: Mutex::new(projection),
        });
        let agent_ref: AgentRef = agent.clone();
        if let Err(e) = self
            .services
            .agents
            .enter_owned(agent_ref.clone(), request.owner)
        {
            sessions.dispose(&id);
            scope.dispose();
            return Err(e);
        }
        agent.register_variables();
        scope.emit::<AgentCreated>(&AgentPayload {
            agent: agent_ref.clone(),
        });
        scope.emit::<SessionStart>(&SessionStartPayload {
            agent: agent_ref.clone(),
            source: start,
        });
        Ok(agent_ref)
    }
}

#[cfg(test)]
mod tests {
    use super::FailingStreak;
    use pretty_assertions::assert_eq;

    fn run(outcomes: &[(&str, &str, bool)]) -> usize {
        let mut streak = FailingStreak::default();
        for (name, args, failed) in outcomes {
            streak.record(name, args, failed.then(|| "boom".to_string()));
        }
        streak.count
    }

    #[test]
    fn only_the_same_call_failing_in_a_row_counts() {
        assert_eq!(run(&[("bash", "{x", true); 3]), 3);
        assert_eq!(
            run(&[
                ("bash", "{x", true),
                ("bash", "{x", false),
                ("bash", "{x", true)
            ]),
            1,
            "a success restarts the count"
        );
        assert_eq!(
            run(&[
                ("bash", "{x", true),
                ("bash", "{y", true),
                ("bash", "{y", true)
            ]),
            2,
            "other arguments start a new run"
        );
        assert_eq!(
            run(&[("bash", "{x", true), ("read", "{x", true)]),
            1,
            "another tool starts a new run"
        );
        assert_eq!(run(&[]), 0);
    }
}
