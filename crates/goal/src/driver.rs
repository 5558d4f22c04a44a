//! The round driver (`@deepseek-ai/dsh-goal-round-driver`): when an agent goes idle after a
//! completed turn and its goal is active and armed, it queues the next goal round as a
//! follow-up prompt whose source names the goal revision and round.

use std::sync::Arc;

use dsh_agent::{AgentRef, AgentStatus, AgentStatusChanged, PreStep, PreStepDecision};
use dsh_kernel::{BoxError, Context, ListenOptions};
use dsh_llm::{ContentBlock, Message, MessageSource};
use serde_json::{Map, Value, json};

use crate::service::{GoalChanged, GoalRef, GoalView, Goals};
use crate::state::{RoundSource, last_turn_end_kind};

/// The continuation prompt of round `round` of `goal`.
pub fn round_prompt(goal: &GoalView, round: u64) -> String {
    let g = goal.goal();
    let quoted = serde_json::to_string(&g.objective).unwrap_or_default();
    format!(
        "<goal_round>\nObjective: {quoted}\nRound: {round}/{}\n\nKeep going on this objective in the same session. The files, tool results and saved session state are the truth: look at them again rather than trusting what earlier messages said. Take the next concrete step. When the objective is fully met and checked, call update_goal with action complete; if one specific obstacle has stopped all progress for several rounds, report it with action blocked and name it in blocked_reason.\n</goal_round>",
        g.max_goal_rounds
    )
}

/// The message source of a round: `{kind: "goal", goalId, revision, round}`.
fn round_source(goal: &GoalView, round: u64) -> Result<MessageSource, BoxError> {
    let mut m = Map::new();
    m.insert("kind".into(), json!("goal"));
    m.insert("goalId".into(), json!(goal.goal().id));
    m.insert("revision".into(), json!(goal.goal().revision));
    m.insert("round".into(), json!(round));
    MessageSource::from_value(Value::Object(m)).map_err(|e| e.into())
}

/// Which event woke the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trigger {
    /// The agent went idle: only a turn that completed keeps the goal going.
    Idle,
    /// The goal changed (a command between turns may have created or resumed it).
    Changed,
}

fn drive(goals: &Goals, agent: &AgentRef, trigger: Trigger) {
    if agent.status() != AgentStatus::Idle {
        return;
    }
    let goal = match goals.get(agent) {
        Ok(Some(g)) => g,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(
                "goal-round-driver: the goal of {} is unreadable: {e}",
                agent.id()
            );
            goals.disarm(agent);
            return;
        }
    };
    if !goal.drivable() {
        return;
    }
    if trigger == Trigger::Idle {
        let ended = agent.session().read(|s| last_turn_end_kind(s.events()));
        // A cancelled, failed or truncated turn takes the automatic authority away; a person
        // re-arms the goal with resume.
        if ended.as_deref() != Some("completed") {
            goals.disarm(agent);
            return;
        }
    }
    let inbox = agent.inbox();
    if !inbox.next_turn.is_empty() || !inbox.next_step.is_empty() {
        // Queued input from someone else runs first; the driver looks again at the next idle.
        return;
    }
    let expected = GoalRef::from(&goal);
    let g = goal.goal();
    if goal.record.rounds_started >= g.max_goal_rounds {
        let message = format!(
            "The goal used all {} rounds it was allowed.",
            g.max_goal_rounds
        );
        if let Err(e) = goals.block(agent, &expected, "round-limit", &message) {
            tracing::warn!("goal-round-driver: could not block {}: {e}", g.id);
        }
        return;
    }
    let round = goal.record.rounds_started + 1;
    let message = round_source(&goal, round)
        .map(|source| Message::user(vec![ContentBlock::text(round_prompt(&goal, round))], source));
    let queued = message.and_then(|m| agent.followup(m).map_err(|e| e.0.into()));
    if let Err(e) = queued {
        tracing::warn!(
            "goal-round-driver: round {round} of {} was not queued: {e}",
            g.id
        );
        let text = format!("Goal round {round} could not be queued: {e}");
        if let Err(e) = goals.block(agent, &expected, "queue-failed", &text) {
            tracing::warn!("goal-round-driver: could not block {}: {e}", g.id);
        }
    }
}

/// Whether a claimed round prompt still belongs to the goal as it is now.
fn round_is_current(goals: &Goals, agent: &AgentRef, source: &RoundSource) -> bool {
    match goals.get(agent) {
        Ok(Some(goal)) => {
            goal.drivable()
                && goal.goal().id == source.goal_id
                && goal.goal().revision == source.revision
                && source.round == goal.record.rounds_started + 1
                && source.round <= goal.goal().max_goal_rounds
        }
        _ => false,
    }
}

/// Installs the driver's listeners under `ctx`.
pub(crate) fn install(ctx: &Context, goals: Arc<Goals>) -> Result<(), BoxError> {
    let g = goals.clone();
    // Synchronously inside the idle announcement: the agent restarts before idle waiters
    // (headless, `session/wait`) resume, so they wait for the goal's rounds too.
    ctx.on_emit::<AgentStatusChanged>(ListenOptions::GLOBAL, move |p| {
        if p.status == AgentStatus::Idle {
            drive(&g, &p.agent, Trigger::Idle);
        }
        Ok(())
    })?;
    let g = goals.clone();
    ctx.on_emit::<GoalChanged>(ListenOptions::GLOBAL, move |p| {
        drive(&g, &p.agent, Trigger::Changed);
        Ok(())
    })?;
    // A round prompt that no longer matches the goal (paused, edited, cleared, disarmed
    // while it waited) never reaches the model.
    let g = goals;
    ctx.on_waterfall::<PreStep>(ListenOptions::default(), move |p, next| {
        let g = g.clone();
        Box::pin(async move {
            let stale: Vec<String> = p
                .messages
                .iter()
                .filter_map(|m| {
                    let source = serde_json::to_value(&m.source).ok()?;
                    let round = RoundSource::from_source(&source)?.ok();
                    match round {
                        Some(r) if round_is_current(&g, &p.agent, &r) => None,
                        _ => Some(m.id.clone()),
                    }
                })
                .collect();
            let decision = next.run().await?;
            if stale.is_empty() {
                return Ok(decision);
            }
            match decision {
                PreStepDecision::Enter(messages) => {
                    let kept: Vec<_> = messages
                        .into_iter()
                        .filter(|m| !stale.contains(&m.id))
                        .collect();
                    let user_input = kept.iter().any(|m| m.role == dsh_llm::Role::User);
                    Ok(if user_input {
                        PreStepDecision::Enter(kept)
                    } else {
                        PreStepDecision::Reject
                    })
                }
                PreStepDecision::Reject => Ok(PreStepDecision::Reject),
            }
        })
    })?;
    Ok(())
}
