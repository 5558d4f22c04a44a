//! `create_goal`, `get_goal`, `update_goal` (`@deepseek-ai/dsh-tool-goal`) and the
//! authority each call needs, decided from the calling agent's open turn.

use std::sync::Arc;

use dsh_agent::{AgentRef, AgentStatus, Agents};
use dsh_kernel::{BoxError, Context, HarnessError};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_session::{Event, types};
use dsh_tools::{Reply, ToolRunContext, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::service::{GoalEdit, GoalRef, GoalView, Goals, no_goal_value};
use crate::state::{RoundSource, open_turn_start};

pub const CREATE_GOAL: &str = "create_goal";
pub const GET_GOAL: &str = "get_goal";
pub const UPDATE_GOAL: &str = "update_goal";
/// `update_goal`'s actions, in upstream's order.
pub const UPDATE_ACTIONS: [&str; 5] = ["edit", "pause", "resume", "complete", "blocked"];

const CREATE_DESCRIPTION: &str = "Sets a goal for this session that is saved in the log and keeps the agent working on it over automatic follow-up rounds. Call it when the person asks for an objective that will take several turns, whether or not they use the word goal; a task one turn can finish needs none.";
const OBJECTIVE_DESCRIPTION: &str =
    "What finished looks like, taken from what the person asked for.";
const MAX_ROUNDS_DESCRIPTION: &str =
    "How many automatic rounds the goal may use at most (a whole number from 1).";
const GET_DESCRIPTION: &str =
    "Returns this session's goal, with the id and revision update_goal asks for.";
const UPDATE_DESCRIPTION: &str = "Changes the session's goal.";
const GOAL_ID_DESCRIPTION: &str = "The goal id exactly as get_goal reported it.";
const REVISION_DESCRIPTION: &str = "The revision exactly as get_goal reported it (from 1).";
const ACTION_DESCRIPTION: &str = "Only a person asking directly, to a top-level agent, allows edit, pause or resume. An automatic round of this goal may also report complete or blocked; blocked is refused until the configured number of rounds has run.";
const NEW_OBJECTIVE_DESCRIPTION: &str = "The new objective; only for edit.";
const NEW_MAX_ROUNDS_DESCRIPTION: &str = "The new round limit; only for edit.";
const BLOCKED_REASON_DESCRIPTION: &str = "Only for blocked, and required there: the specific obstacle that stayed the same over several rounds and stops any progress.";

/// The `tool:goal` section text for a blocked threshold of `blocked_after` rounds.
pub fn section_text(blocked_after: u64) -> String {
    format!(
        "A direct request from a person, in whatever language, may show they want a goal; create_goal can take it from there. Resuming or forking a session leaves an active goal disarmed, so when a person asks to carry on (however they put it), re-arm it with update_goal action resume. Report complete only once the objective is really reached. Report blocked only when one and the same obstacle has held for at least {blocked_after} goal rounds in a row, and name that obstacle in blocked_reason; hard work, doubt or more to do does not count as blocked."
    )
}

/// `{goal: null} | {goal: {...}, activation}`: the value every goal tool reports (JSON
/// Schema; Code Mode types `ToolOutputMap` from it).
pub fn goal_value_schema() -> Value {
    let t = |t: &str| json!({ "type": t });
    json!({"oneOf": [
        {"type": "object", "additionalProperties": false,
         "properties": {"goal": {"type": "null"}}, "required": ["goal"]},
        {"type": "object", "additionalProperties": false, "properties": {
            "goal": {"type": "object", "additionalProperties": false, "properties": {
                "id": t("string"),
                "revision": t("integer"),
                "objective": t("string"),
                "phase": {"type": "string", "enum": ["active", "paused", "blocked", "complete"]},
                "roundsStarted": t("integer"),
                "maxGoalRounds": t("integer"),
                "blockedReason": {"type": "object", "additionalProperties": false, "properties": {
                    "code": t("string"), "message": t("string")
                }, "required": ["code", "message"]}
            }, "required": ["id", "revision", "objective", "phase", "roundsStarted", "maxGoalRounds"]},
            "activation": {"type": "string", "enum": ["armed", "disarmed"]}
        }, "required": ["goal", "activation"]}
    ]})
}

fn reject(code: &'static str, message: impl Into<String>) -> BoxError {
    Box::new(HarnessError::new("HarnessError", code, message))
}

/// The closing-message instruction entered after a goal round reports complete or blocked.
pub fn wrapup_text(objective: &str, blocked_reason: Option<&str>) -> String {
    let quoted = serde_json::to_string(objective).unwrap_or_default();
    match blocked_reason {
        None => format!(
            "<goal_complete>\nObjective: {quoted}\nThis goal is now recorded as complete, and the automatic rounds stop here. Write your final message to the person now: say what the outcome is, sum up the work and how you checked it, and point them at the concrete results such as files or commits. Claim only what the tool results and earlier rounds of this session show; if something was not verified, say so. Do not call any more tools.\n</goal_complete>"
        ),
        Some(reason) => format!(
            "<goal_blocked>\nObjective: {quoted}\nBlocker: {reason}\nThis goal is now recorded as blocked, and the automatic rounds stop here. Write your final message to the person now: describe the obstacle, what you tried, what was done before it, and what they would need to do or decide so the goal can go on. Claim only what this session's tool results show. Do not call any more tools.\n</goal_blocked>"
        ),
    }
}

/// Who may do what in the current call.
enum Authority {
    DirectHuman,
    GoalRound(Box<GoalView>),
}

struct Execution {
    agent: AgentRef,
    turn: Vec<Arc<Event>>,
}

impl Execution {
    /// The calling agent, live and running, inside its open turn.
    fn resolve(root: &Context, ctx: &ToolRunContext) -> Result<Self, BoxError> {
        let session = ctx.session.clone().ok_or_else(|| {
            reject(
                "GOAL_TOOL_AGENT_REQUIRED",
                "the goal tools need a calling agent",
            )
        })?;
        let driver_required = || {
            reject(
                "GOAL_TOOL_DRIVER_REQUIRED",
                "the goal tools work only for a live agent inside one of its turns",
            )
        };
        let agent = root
            .get::<Agents>()
            .and_then(|a| a.get(&session.id()))
            .filter(|a| Arc::ptr_eq(a.session(), &session) && a.status() == AgentStatus::Running)
            .ok_or_else(driver_required)?;
        let events = session.events();
        let start = open_turn_start(&events).ok_or_else(driver_required)?;
        Ok(Self {
            agent,
            turn: events[start + 1..].to_vec(),
        })
    }

    fn user_messages(&self) -> impl Iterator<Item = &Value> {
        self.turn
            .iter()
            .filter(|e| e.is(types::USER_MESSAGE))
            .map(|e| &e.data["source"])
    }

    /// A person's own message in this turn of a top-level agent.
    fn has_direct_human(&self, root: &Context) -> bool {
        let is_root = root
            .get::<Agents>()
            .is_some_and(|a| a.is_root(self.agent.id()));
        is_root
            && self
                .user_messages()
                .any(|s| s.get("kind").and_then(Value::as_str) == Some("user"))
    }

    /// Whether this turn is the current goal's latest admitted round.
    fn is_round_of(&self, goal: &GoalView) -> bool {
        let g = goal.goal();
        self.user_messages()
            .filter_map(RoundSource::from_source)
            .filter_map(Result::ok)
            .any(|s| {
                s.goal_id == g.id
                    && s.revision == g.revision
                    && s.round == goal.record.rounds_started
            })
    }

    fn require_direct_human(&self, root: &Context) -> Result<(), BoxError> {
        if self.has_direct_human(root) {
            return Ok(());
        }
        Err(reject(
            "GOAL_TOOL_AUTHORITY_REQUIRED",
            "only a person's own request in this turn, to a top-level agent, allows this goal change",
        ))
    }

    fn completion_authority(&self, root: &Context, goals: &Goals) -> Result<Authority, BoxError> {
        if self.has_direct_human(root) {
            return Ok(Authority::DirectHuman);
        }
        if let Some(goal) = goals.get(&self.agent)?
            && self.is_round_of(&goal)
        {
            return Ok(Authority::GoalRound(Box::new(goal)));
        }
        Err(reject(
            "GOAL_TOOL_AUTHORITY_REQUIRED",
            "complete and blocked need a person's own request in this turn or the goal's current round",
        ))
    }
}

fn view_value(view: Option<GoalView>) -> Value {
    view.map_or_else(no_goal_value, |v| v.to_value())
}

/// The three tools share these.
#[derive(Clone)]
pub(crate) struct Shared {
    pub goals: Arc<Goals>,
    pub root: Context,
    pub blocked_after: u64,
    pub output_schema: Value,
}

/// The three tools, each holding what they share.
pub(crate) struct GetGoalTool(pub Shared);
pub(crate) struct CreateGoalTool(pub Shared);
pub(crate) struct UpdateGoalTool(pub Shared);

// The arguments of each (no doc: upstream's parameter objects carry no description).
#[derive(Deserialize, JsonSchema)]
pub(crate) struct GetGoalArgs {}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct CreateGoalArgs {
    #[schemars(description = OBJECTIVE_DESCRIPTION)]
    objective: String,
    #[schemars(description = MAX_ROUNDS_DESCRIPTION)]
    max_goal_rounds: Option<f64>,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct UpdateGoalArgs {
    #[schemars(description = GOAL_ID_DESCRIPTION)]
    goal_id: String,
    #[schemars(description = REVISION_DESCRIPTION)]
    revision: f64,
    #[schemars(description = ACTION_DESCRIPTION)]
    action: UpdateAction,
    #[schemars(description = NEW_OBJECTIVE_DESCRIPTION)]
    objective: Option<String>,
    #[schemars(description = NEW_MAX_ROUNDS_DESCRIPTION)]
    max_goal_rounds: Option<f64>,
    #[schemars(description = BLOCKED_REASON_DESCRIPTION)]
    blocked_reason: Option<String>,
}

/// `update_goal`'s actions, in upstream's order ([`UPDATE_ACTIONS`]).
#[derive(Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum UpdateAction {
    Edit,
    Pause,
    Resume,
    Complete,
    Blocked,
}

impl UpdateAction {
    fn as_str(self) -> &'static str {
        UPDATE_ACTIONS[self as usize]
    }
}

/// What the three tools have in common: the declared value and how it is reported.
macro_rules! goal_tool {
    ($ty:ident, $args:ident, $name:expr, $description:expr) => {
        impl TypedTool for $ty {
            type Args = $args;
            type Value = Value;

            fn name(&self) -> String {
                $name.into()
            }
            fn description(&self) -> String {
                $description.into()
            }
            fn value_schema(&self) -> Result<Option<Value>, String> {
                Ok(Some(self.0.output_schema.clone()))
            }
            async fn run(
                self: Arc<Self>,
                args: $args,
                ctx: ToolRunContext,
            ) -> Result<Reply<Value>, BoxError> {
                let value = self.0.call(args, &ctx)?;
                let text = serde_json::to_string(&value).unwrap_or_default();
                Ok(Reply::text(text).with_value(value))
            }
        }
    };
}

goal_tool!(GetGoalTool, GetGoalArgs, GET_GOAL, GET_DESCRIPTION);
goal_tool!(
    CreateGoalTool,
    CreateGoalArgs,
    CREATE_GOAL,
    CREATE_DESCRIPTION
);
goal_tool!(
    UpdateGoalTool,
    UpdateGoalArgs,
    UPDATE_GOAL,
    UPDATE_DESCRIPTION
);

/// One call of each tool.
trait Call<A> {
    fn call(&self, args: A, ctx: &ToolRunContext) -> Result<Value, BoxError>;
}

impl Call<GetGoalArgs> for Shared {
    fn call(&self, _args: GetGoalArgs, ctx: &ToolRunContext) -> Result<Value, BoxError> {
        let exec = Execution::resolve(&self.root, ctx)?;
        Ok(view_value(self.goals.get(&exec.agent)?))
    }
}

impl Call<CreateGoalArgs> for Shared {
    fn call(&self, args: CreateGoalArgs, ctx: &ToolRunContext) -> Result<Value, BoxError> {
        let exec = Execution::resolve(&self.root, ctx)?;
        exec.require_direct_human(&self.root)?;
        let view = self
            .goals
            .create(&exec.agent, &args.objective, args.max_goal_rounds)?;
        Ok(view.to_value())
    }
}

/// Non-empty optional text (an empty string is a strict-schema filler, as upstream).
fn text_arg(text: &Option<String>) -> Option<&str> {
    text.as_deref().filter(|s| !s.is_empty())
}

/// A round cap other than the filler `0`.
fn cap_arg(cap: Option<f64>) -> Option<f64> {
    cap.filter(|n| *n != 0.0)
}

fn invalid(message: &str) -> BoxError {
    reject("GOAL_TOOL_INVALID_UPDATE", message)
}

fn goal_ref(id: &str, revision: f64) -> Result<GoalRef, BoxError> {
    if id.is_empty()
        || id != id.trim()
        || revision.fract() != 0.0
        || revision < 1.0
        || revision > ((1u64 << 53) - 1) as f64
    {
        return Err(invalid(
            "goal_id must be a non-empty id and revision a whole number from 1",
        ));
    }
    Ok(GoalRef {
        id: id.into(),
        revision: revision as u64,
    })
}

impl Call<UpdateGoalArgs> for Shared {
    fn call(&self, args: UpdateGoalArgs, ctx: &ToolRunContext) -> Result<Value, BoxError> {
        let shared = self;
        {
            let exec = Execution::resolve(&shared.root, ctx)?;
            let expected = goal_ref(&args.goal_id, args.revision)?;
            let objective = text_arg(&args.objective);
            let cap = cap_arg(args.max_goal_rounds);
            let blocked_reason = text_arg(&args.blocked_reason);
            let goals = &shared.goals;
            let agent = &exec.agent;
            let action = args.action.as_str();
            match action {
                "edit" => {
                    exec.require_direct_human(&shared.root)?;
                    if blocked_reason.is_some() {
                        return Err(invalid("blocked_reason belongs only to action blocked"));
                    }
                    let edit = GoalEdit {
                        objective: objective.map(str::to_string),
                        max_goal_rounds: cap,
                    };
                    Ok(goals.edit(agent, &expected, edit)?.to_value())
                }
                "pause" | "resume" => {
                    exec.require_direct_human(&shared.root)?;
                    if objective.is_some() || cap.is_some() || blocked_reason.is_some() {
                        return Err(invalid(
                            "objective and max_goal_rounds belong only to action edit, blocked_reason only to action blocked",
                        ));
                    }
                    if action == "resume"
                        && let Some(current) = goals.get(agent)?
                        && GoalRef::from(&current) == expected
                        && current.goal().phase == crate::GoalPhase::Paused
                    {
                        return Err(reject(
                            "GOAL_TOOL_RESUME_PAUSED",
                            "a paused goal is resumed by the person, not by the model",
                        ));
                    }
                    let view = if action == "pause" {
                        goals.pause(agent, &expected)?
                    } else {
                        goals.resume(agent, &expected)?
                    };
                    Ok(view.to_value())
                }
                "complete" | "blocked" => {
                    let authority = exec.completion_authority(&shared.root, goals)?;
                    if objective.is_some() || cap.is_some() {
                        return Err(invalid(
                            "objective and max_goal_rounds belong only to action edit",
                        ));
                    }
                    if action == "complete" && blocked_reason.is_some() {
                        return Err(invalid("blocked_reason belongs only to action blocked"));
                    }
                    let reason = args.blocked_reason.as_deref().map(str::trim).unwrap_or("");
                    if action == "blocked" && reason.is_empty() {
                        return Err(invalid("action blocked needs a blocked_reason"));
                    }
                    if action == "blocked"
                        && let Authority::GoalRound(goal) = &authority
                        && goal.record.rounds_started < shared.blocked_after
                    {
                        return Err(reject(
                            "GOAL_TOOL_BLOCK_THRESHOLD",
                            format!(
                                "blocked is allowed only after {} goal rounds in a row; this is round {}",
                                shared.blocked_after, goal.record.rounds_started
                            ),
                        ));
                    }
                    let raw_reason = args.blocked_reason.as_deref().unwrap_or("");
                    let view = if action == "complete" {
                        goals.complete(agent, &expected)?
                    } else {
                        goals.block(agent, &expected, "model-reported", raw_reason)?
                    };
                    if let Authority::GoalRound(_) = authority {
                        let objective = &view.goal().objective;
                        let text = if action == "complete" {
                            wrapup_text(objective, None)
                        } else {
                            wrapup_text(objective, Some(raw_reason))
                        };
                        let summary: String =
                            format!("{action}: {objective}").chars().take(200).collect();
                        let mut extra = Map::new();
                        extra.insert("kind".into(), json!("tool-goal"));
                        extra.insert("form".into(), json!("notice"));
                        extra.insert("summary".into(), json!(summary));
                        let source = MessageSource::from_value(Value::Object(extra))
                            .map_err(|e| -> BoxError { e.into() })?;
                        ctx.defer_context(Message::user(vec![ContentBlock::text(text)], source));
                    }
                    Ok(view.to_value())
                }
                other => Err(invalid(&format!(
                    "action must be one of edit, pause, resume, complete, blocked (got {other:?})"
                ))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn schemas_have_upstreams_shape() {
        let strip = |mut v: Value| {
            fn walk(v: &mut Value) {
                if let Some(m) = v.as_object_mut() {
                    m.remove("description");
                    for (_, x) in m.iter_mut() {
                        walk(x);
                    }
                }
            }
            walk(&mut v);
            v
        };
        let params = |s: dsh_tools::ObjectSchema| s.to_value();
        assert_eq!(
            strip(params(
                dsh_tools::params_schema::<CreateGoalArgs>().unwrap()
            )),
            json!({"type": "object", "properties": {"objective": {"type": "string"}, "max_goal_rounds": {"type": "number"}}, "required": ["objective"]})
        );
        assert_eq!(
            strip(params(
                dsh_tools::params_schema::<UpdateGoalArgs>().unwrap()
            )),
            json!({"type": "object", "properties": {
                "goal_id": {"type": "string"}, "revision": {"type": "number"},
                "action": {"type": "string", "enum": ["edit", "pause", "resume", "complete", "blocked"]},
                "objective": {"type": "string"}, "max_goal_rounds": {"type": "number"},
                "blocked_reason": {"type": "string"}},
                "required": ["goal_id", "revision", "action"]})
        );
        assert_eq!(
            params(dsh_tools::params_schema::<GetGoalArgs>().unwrap()),
            json!({"type": "object", "properties": {}})
        );
    }

    #[test]
    fn goal_refs_are_checked() {
        assert!(goal_ref("g", 1.0).is_ok());
        for bad in [("", 1.0), (" g", 1.0), ("g", 0.0), ("g", 1.5)] {
            let e = goal_ref(bad.0, bad.1)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("goal_id"), "{bad:?}: {e}");
        }
    }
}
