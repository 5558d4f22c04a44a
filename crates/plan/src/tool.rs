//! `exit_plan_mode`: the model submits its plan for the user's review.

use std::sync::Arc;

use dsh_agent::Agents;
use dsh_kernel::{BoxError, Context, HarnessError};
use dsh_session::LiveSession;
use dsh_tools::{Reply, ToolRunContext, TypedTool};
use dsh_user_questions::{Answer, AskRequest, Question, QuestionOption, UserQuestions};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::service::PlanMode;
use crate::state::fold_plan_mode;

/// The tool's name. It stays registered while plan mode is inactive.
pub const EXIT_PLAN_MODE: &str = "exit_plan_mode";
/// The review question's id, echoed in the answer.
pub const REVIEW_ID: &str = "plan-review";
/// The option that approves the plan.
pub const APPROVE_LABEL: &str = "Approve";
/// The option that keeps planning.
pub const KEEP_PLANNING_LABEL: &str = "Keep planning";

const DESCRIPTION: &str = "Only for plan mode: submit your finished plan for the user to review, and leave plan mode if they approve it. Pass the whole plan as markdown whose first line is a # heading naming it. On approval, carry the plan out from your next step; if the user wants more planning, their feedback arrives in the tool result — revise the plan and submit it again.";
const PLAN_DESCRIPTION: &str =
    "The whole plan in markdown, beginning with a # heading that names it.";
const APPROVED_TEXT: &str =
    "Plan approved and plan mode is off. Start carrying out the plan with your next step.";
const NO_CHANNEL: &str = "the plan cannot be reviewed here: no channel to ask the user is available. Stay in plan mode and ask the user to leave it themselves (/plan off)";

// The arguments (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
pub(crate) struct ExitPlanArgs {
    #[schemars(description = PLAN_DESCRIPTION)]
    plan: String,
}

/// What a Code Mode binding resolves to after an approval (undeclared, as upstream).
#[derive(Serialize, JsonSchema)]
pub(crate) struct ExitPlanValue {
    approved: bool,
}

/// Whether `plan` (trimmed) starts with a level-one markdown heading with text after it.
fn starts_with_heading(plan: &str) -> bool {
    plan.trim()
        .strip_prefix('#')
        .is_some_and(|rest| rest.starts_with([' ', '\t']) && !rest.trim().is_empty())
}

/// The review question presented to the user.
fn review_question(plan: &str) -> Question {
    Question {
        id: REVIEW_ID.into(),
        question: "Approve this plan and leave plan mode?".into(),
        detail: Some(plan.to_string()),
        header: Some("Plan review".into()),
        options: Some(vec![
            QuestionOption {
                label: APPROVE_LABEL.into(),
                description: Some("Leave plan mode; the model starts on the plan next.".into()),
            },
            QuestionOption {
                label: KEEP_PLANNING_LABEL.into(),
                description: Some(
                    "Stay in plan mode; your feedback goes back to the model.".into(),
                ),
            },
        ]),
        multi_select: None,
    }
}

/// `Ok(())` on a clean approval, else the keep-planning failure with any feedback.
fn judge(answer: &Answer) -> Result<(), BoxError> {
    let mut items = answer.answers.iter().filter(|a| a.id == REVIEW_ID);
    let item = match (items.next(), items.next()) {
        (Some(item), None) => Some(item),
        _ => None,
    };
    if let Some(item) = item
        && item.selected.len() == 1
        && item.selected[0] == APPROVE_LABEL
        && item.custom.is_none()
    {
        return Ok(());
    }
    let feedback = item
        .and_then(|i| i.custom.as_deref())
        .map(str::trim)
        .unwrap_or("");
    Err(if feedback.is_empty() {
        "The user chose to keep planning. Revise the plan and submit it again.".into()
    } else {
        format!("The user chose to keep planning. Their feedback: {feedback}").into()
    })
}

pub(crate) struct ExitPlanModeTool {
    service: Arc<PlanMode>,
    ctx: Context,
}

impl ExitPlanModeTool {
    pub(crate) fn new(service: Arc<PlanMode>, ctx: Context) -> Self {
        Self { service, ctx }
    }
}

impl TypedTool for ExitPlanModeTool {
    type Args = ExitPlanArgs;
    type Value = ExitPlanValue;

    fn name(&self) -> String {
        EXIT_PLAN_MODE.into()
    }

    fn description(&self) -> String {
        DESCRIPTION.into()
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(None)
    }

    async fn run(
        self: Arc<Self>,
        args: ExitPlanArgs,
        ctx: ToolRunContext,
    ) -> Result<Reply<ExitPlanValue>, BoxError> {
        let service = self.service.clone();
        let root = self.ctx.clone();
        {
            let session: Arc<LiveSession> = ctx.session.clone().ok_or_else(|| -> BoxError {
                format!("{EXIT_PLAN_MODE} needs a calling agent (there is no session to switch)")
                    .into()
            })?;
            if !session.read(|s| fold_plan_mode(s.events())) {
                return Err(
                    format!("{EXIT_PLAN_MODE} can only be used while plan mode is active").into(),
                );
            }
            let plan = args.plan.as_str();
            if !starts_with_heading(plan) {
                return Err(format!(
                    "{EXIT_PLAN_MODE} needs the whole plan as markdown, beginning with a # heading"
                )
                .into());
            }
            let questions = ctx
                .ctx
                .get::<UserQuestions>()
                .or_else(|| root.get::<UserQuestions>())
                .ok_or_else(|| -> BoxError { NO_CHANNEL.into() })?;
            let agent = root.get::<Agents>().and_then(|a| a.get(&session.id()));
            let asked = questions
                .ask(AskRequest {
                    questions: vec![review_question(plan)],
                    agent,
                    cancel: ctx.cancel.clone(),
                })
                .await;
            let answer = match asked {
                Ok(answer) => answer,
                Err(e) => {
                    let code = HarnessError::find(e.as_ref()).map(|h| h.code.to_string());
                    return Err(match code.as_deref() {
                        Some("NO_PROVIDER") => NO_CHANNEL.into(),
                        Some("ASK_CANCELLED") => "The user closed the plan review because they want to reply. Remain in plan mode and end your turn here; their message comes next.".into(),
                        _ => e,
                    });
                }
            };
            // A review may outlive this plugin: without its pre-step listener an approved
            // exit could never be logged, so the call fails and planning continues.
            if service.is_disposed() {
                return Err(
                    "plan mode was reloaded while the plan was under review; submit the plan again"
                        .into(),
                );
            }
            judge(&answer)?;
            // Plan guidance stays for the rest of this tool batch; the silent exit is
            // logged at the next accepted in-turn pre-step.
            service.approve_exit(&session);
            Ok(Reply::text(APPROVED_TEXT).with_value(ExitPlanValue { approved: true }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_user_questions::AnswerItem;
    use serde_json::json;

    fn answer(selected: &[&str], custom: Option<&str>) -> Answer {
        Answer {
            answers: vec![AnswerItem {
                id: REVIEW_ID.into(),
                selected: selected.iter().map(|s| s.to_string()).collect(),
                custom: custom.map(str::to_string),
            }],
        }
    }

    #[test]
    fn only_a_clean_approval_approves() {
        assert!(judge(&answer(&[APPROVE_LABEL], None)).is_ok());
        let keep = |a: &Answer| judge(a).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            keep(&answer(&[KEEP_PLANNING_LABEL], Some("add tests"))),
            "The user chose to keep planning. Their feedback: add tests"
        );
        assert_eq!(
            keep(&answer(&[APPROVE_LABEL], Some("but also"))),
            "The user chose to keep planning. Their feedback: but also"
        );
        assert_eq!(
            keep(&Answer::default()),
            "The user chose to keep planning. Revise the plan and submit it again."
        );
    }

    #[test]
    fn a_plan_starts_with_a_level_one_heading() {
        assert!(starts_with_heading("# Plan\n- step"));
        assert!(starts_with_heading("\n  # Plan"));
        assert!(!starts_with_heading("## Plan"));
        assert!(!starts_with_heading("#"));
        assert!(!starts_with_heading("# "));
        assert!(!starts_with_heading("Plan"));
    }

    #[test]
    fn the_schema_is_upstreams_shape() {
        assert_eq!(
            dsh_tools::params_schema::<ExitPlanArgs>()
                .unwrap()
                .to_value(),
            json!({"type": "object", "properties": {"plan": {"type": "string", "description": PLAN_DESCRIPTION}}, "required": ["plan"]})
        );
    }
}
