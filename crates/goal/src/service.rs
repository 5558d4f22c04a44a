//! [`Goals`]: compare-and-set mutations over the logged goal, plus process-local activation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use dsh_agent::AgentRef;
use dsh_kernel::{EmitEvent, Event as KernelEvent, HarnessError};
use dsh_session::LiveSession;
use serde_json::{Value, json};

use crate::GOAL_CHANGE_EVENT;
use crate::state::{
    BlockedReason, GOAL_CHANGE_VERSION, GoalPhase, GoalRecord, GoalSnapshot, Operation, fold_goal,
    is_kebab,
};

/// Upstream's default round budget of a goal (`defaultMaxGoalRounds`).
pub const DEFAULT_MAX_GOAL_ROUNDS: u64 = 256;
const MAX_SAFE: u64 = (1 << 53) - 1;

/// Whether automatic rounds may run: process-local, never logged. A goal becomes armed when
/// it is created or resumed in this process; a new live agent (a resumed session) starts
/// disarmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Armed,
    Disarmed,
}

impl Activation {
    pub fn as_str(self) -> &'static str {
        match self {
            Activation::Armed => "armed",
            Activation::Disarmed => "disarmed",
        }
    }
}

/// The current goal as callers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoalView {
    pub record: GoalRecord,
    pub activation: Activation,
}

impl GoalView {
    pub fn goal(&self) -> &GoalSnapshot {
        &self.record.goal
    }

    /// Whether the round driver may start another round.
    pub fn drivable(&self) -> bool {
        self.record.goal.phase == GoalPhase::Active && self.activation == Activation::Armed
    }

    /// The compact value the goal tools return: `{goal: {id, revision, objective, phase,
    /// roundsStarted, maxGoalRounds[, blockedReason]}, activation}`.
    pub fn to_value(&self) -> Value {
        let g = &self.record.goal;
        let mut goal = serde_json::Map::new();
        goal.insert("id".into(), json!(g.id));
        goal.insert("revision".into(), json!(g.revision));
        goal.insert("objective".into(), json!(g.objective));
        goal.insert("phase".into(), json!(g.phase.as_str()));
        goal.insert("roundsStarted".into(), json!(self.record.rounds_started));
        goal.insert("maxGoalRounds".into(), json!(g.max_goal_rounds));
        if let Some(r) = &g.blocked_reason {
            goal.insert(
                "blockedReason".into(),
                json!({"code": r.code, "message": r.message}),
            );
        }
        json!({"goal": Value::Object(goal), "activation": self.activation.as_str()})
    }
}

/// The value for "no goal": `{goal: null}`.
pub fn no_goal_value() -> Value {
    json!({ "goal": null })
}

/// The exact revision a mutation expects to replace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoalRef {
    pub id: String,
    pub revision: u64,
}

impl From<&GoalView> for GoalRef {
    fn from(v: &GoalView) -> Self {
        GoalRef {
            id: v.record.goal.id.clone(),
            revision: v.record.goal.revision,
        }
    }
}

/// Replacement fields of an edit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GoalEdit {
    pub objective: Option<String>,
    pub max_goal_rounds: Option<f64>,
}

fn goal_error(code: &'static str, message: impl Into<String>) -> HarnessError {
    HarnessError::new("GoalError", code, message)
}

fn resolve_max_rounds(value: f64) -> Result<u64, HarnessError> {
    if value.fract() != 0.0 || value < 1.0 || value > MAX_SAFE as f64 {
        return Err(goal_error(
            "GOAL_INVALID_MAX_ROUNDS",
            "the round limit must be a whole number from 1 up",
        ));
    }
    Ok(value as u64)
}

fn resolve_objective(value: &str) -> Result<String, HarnessError> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(goal_error(
            "GOAL_INVALID_OBJECTIVE",
            "a goal needs an objective that is not blank",
        ));
    }
    Ok(trimmed.to_string())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Payload of [`GoalChanged`].
pub struct GoalChangedPayload {
    pub agent: AgentRef,
    pub operation: Operation,
}

/// `goal/changed` (emit): a mutation was logged (or the activation changed) for `agent`.
/// The round driver listens to start a round when the agent is idle. Failing listeners are
/// logged; the mutation stands (fails open).
pub struct GoalChanged;
impl KernelEvent for GoalChanged {
    const NAME: &'static str = "goal/changed";
    type Payload = GoalChangedPayload;
}
impl EmitEvent for GoalChanged {}

/// The `goals` service.
///
/// Invariants: the goal is always [`fold_goal`] of the agent's session log; every mutation
/// is one appended `goal/change` whose revision is one past the current one and is refused
/// unless the caller names the current revision; activation lives only in this process and
/// is `disarmed` for a session until a create or resume here arms it.
pub struct Goals {
    default_max_goal_rounds: u64,
    activation: Mutex<HashMap<String, Activation>>,
}

impl Goals {
    pub(crate) fn new(default_max_goal_rounds: u64) -> Arc<Self> {
        Arc::new(Self {
            default_max_goal_rounds,
            activation: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Activation>> {
        self.activation.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn activation_of(&self, session: &LiveSession) -> Activation {
        self.lock()
            .get(&session.id())
            .copied()
            .unwrap_or(Activation::Disarmed)
    }

    /// Forgets any activation of `session_id` (a new live agent starts disarmed).
    pub(crate) fn reset(&self, session_id: &str) {
        self.lock().remove(session_id);
    }

    fn record(session: &LiveSession) -> Result<Option<GoalRecord>, HarnessError> {
        session
            .read(|s| fold_goal(s.events()))
            .map(|f| f.current)
            .map_err(|e| goal_error("GOAL_REPLAY_FAILED", e))
    }

    /// The current goal of a session, if any.
    pub fn get_session(&self, session: &LiveSession) -> Result<Option<GoalView>, HarnessError> {
        Ok(Self::record(session)?.map(|record| GoalView {
            record,
            activation: self.activation_of(session),
        }))
    }

    /// The current goal of `agent`, if any.
    pub fn get(&self, agent: &AgentRef) -> Result<Option<GoalView>, HarnessError> {
        self.get_session(agent.session())
    }

    /// Removes automatic-round authority without changing the logged goal.
    pub fn disarm(&self, agent: &AgentRef) {
        self.lock().remove(&agent.session().id());
    }

    /// Creates an active, armed goal. Refused while a goal other than a complete one exists.
    pub fn create(
        &self,
        agent: &AgentRef,
        objective: &str,
        max_goal_rounds: Option<f64>,
    ) -> Result<GoalView, HarnessError> {
        let objective = resolve_objective(objective)?;
        let max = match max_goal_rounds {
            Some(n) => resolve_max_rounds(n)?,
            None => self.default_max_goal_rounds,
        };
        if let Some(current) = Self::record(agent.session())?
            && current.goal.phase != GoalPhase::Complete
        {
            return Err(goal_error(
                "GOAL_ALREADY_EXISTS",
                format!(
                    "goal \"{}\" is still {}; only a complete goal can be replaced",
                    current.goal.id,
                    current.goal.phase.as_str()
                ),
            ));
        }
        let now = now_ms();
        let goal = GoalSnapshot {
            id: format!("goal-{}", uuid::Uuid::new_v4()),
            revision: 1,
            objective,
            phase: GoalPhase::Active,
            max_goal_rounds: max,
            blocked_reason: None,
        };
        let record = GoalRecord {
            goal,
            rounds_started: 0,
            created_at: now,
            updated_at: now,
        };
        self.commit(agent, Operation::Create, record, Activation::Armed)
    }

    fn expect_current(agent: &AgentRef, expected: &GoalRef) -> Result<GoalRecord, HarnessError> {
        let current = Self::record(agent.session())?
            .ok_or_else(|| goal_error("GOAL_NOT_FOUND", "this session has no current goal"))?;
        if current.goal.id != expected.id || current.goal.revision != expected.revision {
            return Err(goal_error(
                "GOAL_STALE_REVISION",
                format!(
                    "goal \"{}\" revision {} is not current; the current goal is \"{}\" revision {}",
                    expected.id, expected.revision, current.goal.id, current.goal.revision
                ),
            ));
        }
        Ok(current)
    }

    fn next(current: &GoalRecord, goal: GoalSnapshot) -> GoalRecord {
        GoalRecord {
            goal,
            rounds_started: current.rounds_started,
            created_at: current.created_at,
            updated_at: now_ms().max(current.updated_at),
        }
    }

    fn with_phase(current: &GoalSnapshot, phase: GoalPhase) -> GoalSnapshot {
        GoalSnapshot {
            id: current.id.clone(),
            revision: current.revision + 1,
            objective: current.objective.clone(),
            phase,
            max_goal_rounds: current.max_goal_rounds,
            blocked_reason: None,
        }
    }

    fn bad_transition(current: &GoalSnapshot, op: &str, allowed: &[&str]) -> HarnessError {
        goal_error(
            "GOAL_INVALID_TRANSITION",
            format!(
                "goal \"{}\" is {}; {op} needs it to be {}",
                current.id,
                current.phase.as_str(),
                allowed.join(" or ")
            ),
        )
    }

    /// Replaces the objective and/or the round limit; phase and activation stay.
    pub fn edit(
        &self,
        agent: &AgentRef,
        expected: &GoalRef,
        edit: GoalEdit,
    ) -> Result<GoalView, HarnessError> {
        let current = Self::expect_current(agent, expected)?;
        if edit.objective.is_none() && edit.max_goal_rounds.is_none() {
            return Err(goal_error(
                "GOAL_INVALID_EDIT",
                "an edit needs a new objective, a new round limit, or both",
            ));
        }
        let mut goal = current.goal.clone();
        goal.revision += 1;
        if let Some(o) = &edit.objective {
            goal.objective = resolve_objective(o)?;
        }
        if let Some(n) = edit.max_goal_rounds {
            goal.max_goal_rounds = resolve_max_rounds(n)?;
        }
        let activation = self.activation_of(agent.session());
        self.commit(
            agent,
            Operation::Edit,
            Self::next(&current, goal),
            activation,
        )
    }

    /// Pauses an active goal and disarms it.
    pub fn pause(&self, agent: &AgentRef, expected: &GoalRef) -> Result<GoalView, HarnessError> {
        let current = Self::expect_current(agent, expected)?;
        if current.goal.phase != GoalPhase::Active {
            return Err(Self::bad_transition(&current.goal, "pause", &["active"]));
        }
        let goal = Self::with_phase(&current.goal, GoalPhase::Paused);
        self.commit(
            agent,
            Operation::Pause,
            Self::next(&current, goal),
            Activation::Disarmed,
        )
    }

    /// Resumes (and arms) a paused or blocked goal, or re-arms a disarmed active one, while
    /// its round budget lasts.
    pub fn resume(&self, agent: &AgentRef, expected: &GoalRef) -> Result<GoalView, HarnessError> {
        let current = Self::expect_current(agent, expected)?;
        let allowed = ["active", "paused", "blocked"];
        if current.goal.phase == GoalPhase::Complete {
            return Err(Self::bad_transition(&current.goal, "resume", &allowed));
        }
        if current.goal.phase == GoalPhase::Active
            && self.activation_of(agent.session()) == Activation::Armed
        {
            return Err(goal_error(
                "GOAL_INVALID_TRANSITION",
                format!("goal \"{}\" is active and armed already", current.goal.id),
            ));
        }
        if current.rounds_started >= current.goal.max_goal_rounds {
            return Err(goal_error(
                "GOAL_INVALID_TRANSITION",
                format!(
                    "goal \"{}\" has used all {} of its rounds; raise the limit with an edit first",
                    current.goal.id, current.goal.max_goal_rounds
                ),
            ));
        }
        let goal = Self::with_phase(&current.goal, GoalPhase::Active);
        self.commit(
            agent,
            Operation::Resume,
            Self::next(&current, goal),
            Activation::Armed,
        )
    }

    /// Marks a goal complete and disarms it.
    pub fn complete(&self, agent: &AgentRef, expected: &GoalRef) -> Result<GoalView, HarnessError> {
        let current = Self::expect_current(agent, expected)?;
        if current.goal.phase == GoalPhase::Complete {
            return Err(Self::bad_transition(
                &current.goal,
                "complete",
                &["active", "paused", "blocked"],
            ));
        }
        let goal = Self::with_phase(&current.goal, GoalPhase::Complete);
        self.commit(
            agent,
            Operation::Complete,
            Self::next(&current, goal),
            Activation::Disarmed,
        )
    }

    /// Marks an active goal blocked with `reason` and disarms it.
    pub fn block(
        &self,
        agent: &AgentRef,
        expected: &GoalRef,
        code: &str,
        message: &str,
    ) -> Result<GoalView, HarnessError> {
        let current = Self::expect_current(agent, expected)?;
        if current.goal.phase != GoalPhase::Active {
            return Err(Self::bad_transition(&current.goal, "block", &["active"]));
        }
        if !is_kebab(code) || message.trim().is_empty() {
            return Err(goal_error(
                "GOAL_INVALID_BLOCK_REASON",
                "a block reason needs a lower-kebab-case code and a message that is not blank",
            ));
        }
        let mut goal = Self::with_phase(&current.goal, GoalPhase::Blocked);
        goal.blocked_reason = Some(BlockedReason {
            code: code.into(),
            message: message.trim().into(),
        });
        self.commit(
            agent,
            Operation::Block,
            Self::next(&current, goal),
            Activation::Disarmed,
        )
    }

    /// Clears the current goal, logging a tombstone one revision past it.
    pub fn clear(&self, agent: &AgentRef, expected: &GoalRef) -> Result<GoalRef, HarnessError> {
        let current = Self::expect_current(agent, expected)?;
        let tombstone = GoalRef {
            id: current.goal.id.clone(),
            revision: current.goal.revision + 1,
        };
        let data = json!({
            "kind": GOAL_CHANGE_EVENT,
            "version": GOAL_CHANGE_VERSION,
            "operation": "clear",
            "cleared": {"id": tombstone.id, "revision": tombstone.revision},
            "clearedAt": now_ms().max(current.updated_at),
        });
        self.append(agent, data, Activation::Disarmed)?;
        self.announce(agent, Operation::Clear);
        Ok(tombstone)
    }

    fn append(
        &self,
        agent: &AgentRef,
        data: Value,
        activation: Activation,
    ) -> Result<(), HarnessError> {
        let session = agent.session();
        session.append(GOAL_CHANGE_EVENT, data, None).map_err(|e| {
            goal_error(
                "GOAL_LOG_FAILED",
                format!("the goal change was not logged: {e}"),
            )
        })?;
        let mut map = self.lock();
        match activation {
            Activation::Armed => {
                map.insert(session.id(), Activation::Armed);
            }
            Activation::Disarmed => {
                map.remove(&session.id());
            }
        }
        Ok(())
    }

    fn announce(&self, agent: &AgentRef, operation: Operation) {
        agent.ctx().emit::<GoalChanged>(&GoalChangedPayload {
            agent: agent.clone(),
            operation,
        });
    }

    fn commit(
        &self,
        agent: &AgentRef,
        operation: Operation,
        record: GoalRecord,
        activation: Activation,
    ) -> Result<GoalView, HarnessError> {
        let data = json!({
            "kind": GOAL_CHANGE_EVENT,
            "version": GOAL_CHANGE_VERSION,
            "operation": operation.as_str(),
            "goal": record.goal.to_value(),
            "roundsStarted": record.rounds_started,
            "createdAt": record.created_at,
            "updatedAt": record.updated_at,
        });
        self.append(agent, data, activation)?;
        let view = GoalView {
            record,
            activation: self.activation_of(agent.session()),
        };
        self.announce(agent, operation);
        Ok(view)
    }
}
