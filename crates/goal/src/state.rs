//! The durable goal: a pure fold over the session log. `goal/change` events carry whole
//! snapshots (or a clear tombstone); an admitted goal-round prompt (a `user/message` whose
//! source is `{kind: "goal", goalId, revision, round}`) advances `roundsStarted`. Resume,
//! fork and compaction therefore recover the goal from the log alone.

use std::collections::HashSet;
use std::sync::Arc;

use dsh_session::{Event, types};
use serde_json::{Map, Value, json};

use crate::GOAL_CHANGE_EVENT;

/// The version of the `goal/change` payload this build reads and writes.
pub const GOAL_CHANGE_VERSION: u64 = 1;

/// A goal's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoalPhase {
    Active,
    Paused,
    Blocked,
    Complete,
}

impl GoalPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            GoalPhase::Active => "active",
            GoalPhase::Paused => "paused",
            GoalPhase::Blocked => "blocked",
            GoalPhase::Complete => "complete",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(GoalPhase::Active),
            "paused" => Some(GoalPhase::Paused),
            "blocked" => Some(GoalPhase::Blocked),
            "complete" => Some(GoalPhase::Complete),
            _ => None,
        }
    }
}

/// Why a goal is blocked: a lower-kebab-case code and a non-empty message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedReason {
    pub code: String,
    pub message: String,
}

/// One revision of a goal, as a `goal/change` snapshot records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoalSnapshot {
    pub id: String,
    pub revision: u64,
    pub objective: String,
    pub phase: GoalPhase,
    pub max_goal_rounds: u64,
    pub blocked_reason: Option<BlockedReason>,
}

impl GoalSnapshot {
    /// The snapshot as logged: `{id, revision, objective, phase, maxGoalRounds[, blockedReason]}`.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), json!(self.id));
        m.insert("revision".into(), json!(self.revision));
        m.insert("objective".into(), json!(self.objective));
        m.insert("phase".into(), json!(self.phase.as_str()));
        m.insert("maxGoalRounds".into(), json!(self.max_goal_rounds));
        if let Some(r) = &self.blocked_reason {
            m.insert(
                "blockedReason".into(),
                json!({"code": r.code, "message": r.message}),
            );
        }
        Value::Object(m)
    }
}

/// The current goal with its derived counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoalRecord {
    pub goal: GoalSnapshot,
    pub rounds_started: u64,
    pub created_at: u64,
    pub updated_at: u64,
}

/// The fold's result: the current goal (if any) and every goal id ever created here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GoalFold {
    pub current: Option<GoalRecord>,
    pub seen_ids: HashSet<String>,
}

/// A `goal/change` operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Edit,
    Pause,
    Resume,
    Complete,
    Block,
    Clear,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "create",
            Operation::Edit => "edit",
            Operation::Pause => "pause",
            Operation::Resume => "resume",
            Operation::Complete => "complete",
            Operation::Block => "block",
            Operation::Clear => "clear",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "create" => Some(Operation::Create),
            "edit" => Some(Operation::Edit),
            "pause" => Some(Operation::Pause),
            "resume" => Some(Operation::Resume),
            "complete" => Some(Operation::Complete),
            "block" => Some(Operation::Block),
            "clear" => Some(Operation::Clear),
            _ => None,
        }
    }
}

/// Whether `code` is lower-kebab-case (`round-limit`, `model-reported`).
pub(crate) fn is_kebab(code: &str) -> bool {
    let mut parts = code.split('-');
    let first_ok = parts.next().is_some_and(|p| {
        p.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    });
    first_ok
        && parts.all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

fn keys(map: &Map<String, Value>) -> String {
    let mut k: Vec<&str> = map.keys().map(String::as_str).collect();
    k.sort_unstable();
    k.join(",")
}

fn positive(value: &Value, field: &str) -> Result<u64, String> {
    value
        .as_u64()
        .filter(|n| *n >= 1 && *n < (1 << 53))
        .ok_or_else(|| format!("goal change {field} is not a positive safe integer"))
}

fn non_negative(value: &Value, field: &str) -> Result<u64, String> {
    value
        .as_u64()
        .filter(|n| *n < (1 << 53))
        .ok_or_else(|| format!("goal change {field} is not a non-negative safe integer"))
}

fn decode_snapshot(value: &Value) -> Result<GoalSnapshot, String> {
    let map = value
        .as_object()
        .ok_or("goal change `goal` is not an object")?;
    let id = map
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("goal change goal.id must be a non-empty string")?;
    let objective = map
        .get("objective")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty() && s.trim() == *s)
        .ok_or("goal change goal.objective must be non-blank and trimmed")?;
    let phase = map
        .get("phase")
        .and_then(Value::as_str)
        .and_then(GoalPhase::parse)
        .ok_or("goal change goal.phase is not a known phase")?;
    let expected = if phase == GoalPhase::Blocked {
        "blockedReason,id,maxGoalRounds,objective,phase,revision"
    } else {
        "id,maxGoalRounds,objective,phase,revision"
    };
    if keys(map) != expected {
        return Err(format!(
            "goal change goal in phase {} has fields {} (expected {expected})",
            phase.as_str(),
            keys(map)
        ));
    }
    let blocked_reason = match map.get("blockedReason") {
        None => None,
        Some(r) => {
            let r = r
                .as_object()
                .filter(|r| keys(r) == "code,message")
                .ok_or("goal change goal.blockedReason must hold exactly code and message")?;
            let code = r["code"]
                .as_str()
                .filter(|c| is_kebab(c))
                .ok_or("goal change goal.blockedReason.code is not lower-kebab-case")?;
            let message = r["message"]
                .as_str()
                .filter(|m| !m.trim().is_empty() && m.trim() == *m)
                .ok_or("goal change goal.blockedReason.message must be non-blank and trimmed")?;
            Some(BlockedReason {
                code: code.into(),
                message: message.into(),
            })
        }
    };
    Ok(GoalSnapshot {
        id: id.into(),
        revision: positive(&map["revision"], "goal.revision")?,
        objective: objective.into(),
        phase,
        max_goal_rounds: positive(&map["maxGoalRounds"], "goal.maxGoalRounds")?,
        blocked_reason,
    })
}

fn advance_check(current: &GoalSnapshot, id: &str, revision: u64, op: &str) -> Result<(), String> {
    if id != current.id || revision != current.revision + 1 {
        return Err(format!(
            "goal {op} must advance the current goal by exactly one revision"
        ));
    }
    Ok(())
}

/// Applies one `goal/change` payload to `fold`.
fn apply_change(fold: &mut GoalFold, data: &Value) -> Result<(), String> {
    let map = data.as_object().ok_or("goal change is not an object")?;
    if map.get("kind").and_then(Value::as_str) != Some(GOAL_CHANGE_EVENT) {
        return Err("goal change has no kind \"goal/change\"".into());
    }
    if map.get("version").and_then(Value::as_u64) != Some(GOAL_CHANGE_VERSION) {
        return Err(format!(
            "goal change version {} is not supported",
            map.get("version").unwrap_or(&Value::Null)
        ));
    }
    let op = map
        .get("operation")
        .and_then(Value::as_str)
        .and_then(Operation::parse)
        .ok_or("goal change operation is not known")?;
    if op == Operation::Clear {
        if keys(map) != "cleared,clearedAt,kind,operation,version" {
            return Err(format!("goal clear has fields {}", keys(map)));
        }
        let cleared = map["cleared"]
            .as_object()
            .filter(|c| keys(c) == "id,revision")
            .ok_or("goal clear `cleared` must hold exactly id and revision")?;
        let current = fold
            .current
            .as_ref()
            .ok_or("goal clear needs a current goal")?;
        let id = cleared["id"].as_str().unwrap_or("");
        advance_check(
            &current.goal,
            id,
            positive(&cleared["revision"], "cleared.revision")?,
            "clear",
        )?;
        non_negative(&map["clearedAt"], "clearedAt")?;
        fold.current = None;
        return Ok(());
    }
    if keys(map) != "createdAt,goal,kind,operation,roundsStarted,updatedAt,version" {
        return Err(format!("goal snapshot change has fields {}", keys(map)));
    }
    let goal = decode_snapshot(&map["goal"])?;
    let rounds_started = non_negative(&map["roundsStarted"], "roundsStarted")?;
    let created_at = non_negative(&map["createdAt"], "createdAt")?;
    let updated_at = non_negative(&map["updatedAt"], "updatedAt")?;
    if updated_at < created_at {
        return Err("goal change updatedAt precedes createdAt".into());
    }
    let name = op.as_str();
    match (&fold.current, op) {
        (current, Operation::Create) => {
            let replaceable = current
                .as_ref()
                .is_none_or(|c| c.goal.phase == GoalPhase::Complete);
            if goal.revision != 1
                || goal.phase != GoalPhase::Active
                || rounds_started != 0
                || !replaceable
                || fold.seen_ids.contains(&goal.id)
            {
                return Err(
                    "goal create needs a fresh id at revision 1, active, with no rounds, \
                     and no current goal other than a complete one"
                        .into(),
                );
            }
            fold.seen_ids.insert(goal.id.clone());
        }
        (None, _) => return Err(format!("goal {name} needs a current goal")),
        (Some(current), op) => {
            let cur = &current.goal;
            advance_check(cur, &goal.id, goal.revision, name)?;
            if created_at != current.created_at
                || updated_at < current.updated_at
                || rounds_started != current.rounds_started
            {
                return Err(format!(
                    "goal {name} does not keep the current counters and times"
                ));
            }
            let same_definition =
                goal.objective == cur.objective && goal.max_goal_rounds == cur.max_goal_rounds;
            let ok = match op {
                Operation::Edit => {
                    goal.phase == cur.phase && goal.blocked_reason == cur.blocked_reason
                }
                Operation::Pause => {
                    same_definition
                        && cur.phase == GoalPhase::Active
                        && goal.phase == GoalPhase::Paused
                }
                Operation::Resume => {
                    same_definition
                        && cur.phase != GoalPhase::Complete
                        && goal.phase == GoalPhase::Active
                        && rounds_started < goal.max_goal_rounds
                }
                Operation::Complete => {
                    same_definition
                        && cur.phase != GoalPhase::Complete
                        && goal.phase == GoalPhase::Complete
                }
                Operation::Block => {
                    same_definition
                        && cur.phase == GoalPhase::Active
                        && goal.phase == GoalPhase::Blocked
                }
                Operation::Create | Operation::Clear => false,
            };
            if !ok {
                return Err(format!("goal {name} is not a valid transition"));
            }
        }
    }
    fold.current = Some(GoalRecord {
        goal,
        rounds_started,
        created_at,
        updated_at,
    });
    Ok(())
}

/// The goal-round identity of a message source, when it is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundSource {
    pub goal_id: String,
    pub revision: u64,
    pub round: u64,
}

impl RoundSource {
    /// Reads `{kind: "goal", goalId, revision, round}`; `None` for any other kind.
    pub fn from_source(source: &Value) -> Option<Result<Self, String>> {
        if source.get("kind").and_then(Value::as_str) != Some("goal") {
            return None;
        }
        let parsed = (|| {
            Some(RoundSource {
                goal_id: source
                    .get("goalId")?
                    .as_str()
                    .filter(|s| !s.is_empty())?
                    .to_string(),
                revision: source.get("revision")?.as_u64().filter(|n| *n >= 1)?,
                round: source.get("round")?.as_u64().filter(|n| *n >= 1)?,
            })
        })();
        Some(parsed.ok_or_else(|| "goal message source is invalid".to_string()))
    }
}

/// Applies one event; unrelated events change nothing.
pub fn apply_goal_event(fold: &mut GoalFold, event: &Event) -> Result<(), String> {
    if event.is(GOAL_CHANGE_EVENT) {
        return apply_change(fold, event.data.as_value())
            .map_err(|e| format!("goal replay failed at session event {}: {e}", event.seq));
    }
    if event.is(types::USER_MESSAGE) {
        let Some(source) = RoundSource::from_source(&event.data["source"]) else {
            return Ok(());
        };
        let fail = |e: &str| format!("goal replay failed at session event {}: {e}", event.seq);
        let source = source.map_err(|e| fail(&e))?;
        let current = fold
            .current
            .as_mut()
            .filter(|c| {
                c.goal.phase == GoalPhase::Active
                    && c.goal.id == source.goal_id
                    && c.goal.revision == source.revision
                    && source.round == c.rounds_started + 1
                    && source.round <= c.goal.max_goal_rounds
            })
            .ok_or_else(|| fail("the goal round does not continue the current active goal"))?;
        current.rounds_started = source.round;
    }
    Ok(())
}

/// Folds the goal from a whole log. An invalid goal event fails the fold, naming its seq.
pub fn fold_goal(events: &[Arc<Event>]) -> Result<GoalFold, String> {
    let mut fold = GoalFold::default();
    for e in events {
        apply_goal_event(&mut fold, e)?;
    }
    Ok(fold)
}

/// Whether the log holds a `turn/start` without its `turn/end`; with it, the seq of that
/// `turn/start`.
pub fn open_turn_start(events: &[Arc<Event>]) -> Option<usize> {
    let i = events
        .iter()
        .rposition(|e| e.is(types::TURN_START) || e.is(types::TURN_END))?;
    events[i].is(types::TURN_START).then_some(i)
}

/// The reason kind of the last `turn/end` (`completed`, `aborted`, `error`, …).
pub fn last_turn_end_kind(events: &[Arc<Event>]) -> Option<String> {
    events
        .iter()
        .rev()
        .find(|e| e.is(types::TURN_END))
        .and_then(|e| e.data["reason"]["kind"].as_str().map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn snap(op: &str, id: &str, rev: u64, phase: &str, rounds: u64) -> Value {
        let mut goal = json!({"id": id, "revision": rev, "objective": "Ship it",
            "phase": phase, "maxGoalRounds": 4});
        if phase == "blocked" {
            goal["blockedReason"] = json!({"code": "round-limit", "message": "Out of rounds."});
        }
        json!({"kind": "goal/change", "version": 1, "operation": op, "goal": goal,
            "roundsStarted": rounds, "createdAt": 10, "updatedAt": 20})
    }

    fn fold(changes: &[Value]) -> Result<GoalFold, String> {
        let mut f = GoalFold::default();
        for c in changes {
            apply_change(&mut f, c)?;
        }
        Ok(f)
    }

    #[test]
    fn a_goal_lives_through_its_phases_and_can_be_replaced_once_complete() {
        let f = fold(&[
            snap("create", "g1", 1, "active", 0),
            snap("pause", "g1", 2, "paused", 0),
            snap("resume", "g1", 3, "active", 0),
            snap("block", "g1", 4, "blocked", 0),
            snap("complete", "g1", 5, "complete", 0),
            snap("create", "g2", 1, "active", 0),
        ])
        .unwrap();
        let current = f.current.unwrap();
        assert_eq!(
            (
                current.goal.id.as_str(),
                current.goal.revision,
                current.goal.phase
            ),
            ("g2", 1, GoalPhase::Active)
        );
        let cleared = fold(&[
            snap("create", "g1", 1, "active", 0),
            json!({"kind": "goal/change", "version": 1, "operation": "clear",
                "cleared": {"id": "g1", "revision": 2}, "clearedAt": 30}),
        ])
        .unwrap();
        assert_eq!(cleared.current, None);
    }

    #[test]
    fn invalid_histories_do_not_fold() {
        let bad = [
            // A second create while the first goal is active.
            vec![
                snap("create", "g1", 1, "active", 0),
                snap("create", "g2", 1, "active", 0),
            ],
            // A revision that skips one.
            vec![
                snap("create", "g1", 1, "active", 0),
                snap("pause", "g1", 3, "paused", 0),
            ],
            // Pause of a paused goal.
            vec![
                snap("create", "g1", 1, "active", 0),
                snap("pause", "g1", 2, "paused", 0),
                snap("pause", "g1", 3, "paused", 0),
            ],
            // Rounds that change outside a round prompt.
            vec![
                snap("create", "g1", 1, "active", 0),
                snap("edit", "g1", 2, "active", 2),
            ],
            // A reused id.
            vec![
                snap("create", "g1", 1, "active", 0),
                snap("complete", "g1", 2, "complete", 0),
                snap("create", "g1", 1, "active", 0),
            ],
            // Unknown version and extra keys.
            vec![json!({"kind": "goal/change", "version": 2, "operation": "create"})],
            vec![{
                let mut v = snap("create", "g1", 1, "active", 0);
                v["extra"] = json!(true);
                v
            }],
        ];
        for history in bad {
            assert!(fold(&history).is_err(), "{history:?} folded");
        }
    }

    #[test]
    fn round_sources_are_read_strictly() {
        assert_eq!(RoundSource::from_source(&json!({"kind": "user"})), None);
        assert_eq!(
            RoundSource::from_source(
                &json!({"kind": "goal", "goalId": "g", "revision": 1, "round": 2})
            ),
            Some(Ok(RoundSource {
                goal_id: "g".into(),
                revision: 1,
                round: 2
            }))
        );
        assert!(matches!(
            RoundSource::from_source(
                &json!({"kind": "goal", "goalId": "g", "revision": 1, "round": 0})
            ),
            Some(Err(_))
        ));
        assert!(is_kebab("round-limit") && is_kebab("model-reported") && is_kebab("a1"));
        assert!(!is_kebab("Round") && !is_kebab("a--b") && !is_kebab("-a") && !is_kebab(""));
    }
}
