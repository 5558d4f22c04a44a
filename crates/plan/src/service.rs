//! [`PlanMode`]: the logged state, pending selections, and the step-start append.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use dsh_agent::{AgentRef, PreStep, PreStepDecision};
use dsh_kernel::{BoxError, Context, ListenOptions};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_session::LiveSession;
use serde_json::{Value, json};

use crate::state::{fold_plan_mode, has_open_turn, mode_at_last_header};
use crate::{PLAN_MODE_EVENT, PLAN_SECTION, PLAN_SECTION_ORDER};

/// The plugin name recorded in the notice's source.
const NOTICE_PLUGIN: &str = "plan-mode";
const NOTICE_ON: &str = "Plan mode is now on: the user switched this session to planning.";
const NOTICE_OFF: &str =
    "Plan mode is now off: the user switched this session back to its normal mode.";

/// The logged state of one agent and the selection waiting to be appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanModeState {
    /// The logged mode (the fold of `plan/mode`).
    pub active: bool,
    /// The selected mode awaiting the next accepted in-turn pre-step, if any.
    pub pending: Option<bool>,
}

/// What [`PlanMode::set`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetOutcome {
    /// Logged now (no turn was open).
    Committed,
    /// Waiting for the next accepted in-turn pre-step.
    Queued,
    /// An opposite pending selection was cleared; the log already matches.
    Cancelled,
    /// Already in (or already heading to) that mode.
    Noop,
}

/// Who selected a pending mode: a user selection is narrated to the model when its context
/// changes; the exit tool's approval is not (its result already says so).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Narrate {
    Yes,
    No,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    active: bool,
    narrate: Narrate,
}

/// The `plan-mode` service: owns the logged plan state, the selection waiting for the next
/// accepted in-turn pre-step, and the `plan:policy` section text.
///
/// Invariants: the mode in force is always [`fold_plan_mode`] of the session log; a pending
/// selection is process-local and is appended only after every other `agent/pre-step`
/// listener accepted the step; a failed append leaves it pending.
pub struct PlanMode {
    section: String,
    pending: Mutex<HashMap<String, Pending>>,
    disposed: AtomicBool,
}

impl PlanMode {
    pub(crate) fn new(section: String) -> Arc<Self> {
        Arc::new(Self {
            section,
            pending: Mutex::new(HashMap::new()),
            disposed: AtomicBool::new(false),
        })
    }

    fn pending_of(&self, session: &LiveSession) -> Option<Pending> {
        self.lock().get(&session.id()).copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The logged mode of `agent` plus any selection awaiting the next accepted pre-step.
    pub fn get(&self, agent: &AgentRef) -> PlanModeState {
        let session = agent.session();
        PlanModeState {
            active: session.read(|s| fold_plan_mode(s.events())),
            pending: self.pending_of(session).map(|p| p.active),
        }
    }

    /// Whether `agent`'s next request assembly renders the plan section: the pending
    /// selection when there is one, else the logged mode.
    pub fn section_active(&self, session: &LiveSession) -> bool {
        match self.pending_of(session) {
            Some(p) => p.active,
            None => session.read(|s| fold_plan_mode(s.events())),
        }
    }

    /// Selects whether plan mode should be active for `agent`. With no open turn the change
    /// is logged now; during a turn it waits for the next accepted in-turn pre-step.
    /// Selecting the current or already-pending mode is a no-op. Either way the model is
    /// told at the step that first sees the change, when the last request header described
    /// the other mode.
    pub fn set(&self, agent: &AgentRef, active: bool) -> Result<SetOutcome, BoxError> {
        let session = agent.session();
        let logged = session.read(|s| fold_plan_mode(s.events()));
        let pending = self.pending_of(session);
        if active == pending.map_or(logged, |p| p.active) {
            return Ok(SetOutcome::Noop);
        }
        let id = session.id();
        if session.read(|s| has_open_turn(s.events())) {
            self.lock().insert(
                id,
                Pending {
                    active,
                    narrate: Narrate::Yes,
                },
            );
            return Ok(if logged == active {
                SetOutcome::Cancelled
            } else {
                SetOutcome::Queued
            });
        }
        if logged == active {
            self.lock().remove(&id);
            return Ok(SetOutcome::Cancelled);
        }
        session.append(PLAN_MODE_EVENT, json!({ "active": active }), None)?;
        self.lock().remove(&id);
        // The notice is derived from the log at the next accepted pre-step (the logged mode
        // differs from the last header's), so it survives a process exit before that step.
        Ok(SetOutcome::Committed)
    }

    /// Records the exit tool's approval: a silent exit appended at the next accepted pre-step.
    pub(crate) fn approve_exit(&self, session: &LiveSession) {
        self.lock().insert(
            session.id(),
            Pending {
                active: false,
                narrate: Narrate::No,
            },
        );
    }

    pub(crate) fn is_disposed(&self) -> bool {
        self.disposed.load(Ordering::Acquire)
    }

    /// The user-switch notice, only when the last request header described the other mode.
    fn notice(&self, session: &LiveSession, target: bool) -> Option<Message> {
        let told = session.read(|s| mode_at_last_header(s.events()))?;
        if told == target {
            return None;
        }
        let text = if target { NOTICE_ON } else { NOTICE_OFF };
        Some(Message::user(
            vec![ContentBlock::text(text)],
            MessageSource::plugin(
                NOTICE_PLUGIN,
                [
                    ("form".to_string(), Value::from("notice")),
                    ("summary".to_string(), Value::from(text)),
                ],
            ),
        ))
    }

    /// Appends `session`'s pending selection; `Ok(None)` when nothing was pending.
    fn append_pending(&self, session: &Arc<LiveSession>) -> Result<Option<Pending>, BoxError> {
        let Some(pending) = self.pending_of(session) else {
            return Ok(None);
        };
        if pending.active != session.read(|s| fold_plan_mode(s.events())) {
            session.append(PLAN_MODE_EVENT, json!({ "active": pending.active }), None)?;
        }
        // Removed only after the append succeeded, so a failed write stays retryable.
        self.lock().remove(&session.id());
        Ok(Some(pending))
    }

    /// Installs the pre-step listener, the section, and the disposal flag under `ctx`.
    pub(crate) fn install(self: &Arc<Self>, ctx: &Context) -> Result<(), BoxError> {
        let this = self.clone();
        ctx.effect("plan-mode service lifetime", move || {
            this.disposed.store(true, Ordering::Release);
        })?;

        // Prepended so that it sees every proposed step and appends only after every other
        // listener accepted it. An append failure never blocks the step.
        let this = self.clone();
        ctx.on_waterfall::<PreStep>(ListenOptions::PREPEND, move |p, next| {
            let this = this.clone();
            Box::pin(async move {
                let decision = next.run().await?;
                let PreStepDecision::Enter(mut messages) = decision else {
                    return Ok(decision);
                };
                if p.cancel.is_cancelled() {
                    return Ok(PreStepDecision::Enter(messages));
                }
                let session = p.agent.session().clone();
                let Some(pending) = this.pending_of(&session) else {
                    // A user selection committed between turns (possibly by an earlier
                    // process): tell the model before the prompt that follows it.
                    let logged = session.read(|s| fold_plan_mode(s.events()));
                    if let Some(notice) = this.notice(&session, logged) {
                        messages.insert(0, Arc::new(notice));
                    }
                    return Ok(PreStepDecision::Enter(messages));
                };
                let notice = match pending.narrate {
                    Narrate::Yes => this.notice(&session, pending.active),
                    Narrate::No => None,
                };
                match this.append_pending(&session) {
                    Ok(_) => messages.extend(notice.map(Arc::new)),
                    Err(e) => {
                        tracing::warn!(
                            "plan mode: the selected mode was not logged at step start: {e}"
                        );
                    }
                }
                Ok(PreStepDecision::Enter(messages))
            })
        })?;

        if let Some(prompt) = ctx.get::<dsh_prompt::SystemPrompt>() {
            let this = self.clone();
            prompt.section(
                ctx,
                PLAN_SECTION,
                PLAN_SECTION_ORDER,
                Arc::new(move |a| match &a.session {
                    Some(session) if this.section_active(session) => this.section.clone(),
                    _ => String::new(),
                }),
            )?;
        }
        Ok(())
    }
}
