//! Plan mode end to end over a composed agent: the fold, selections, the section, the
//! exit tool's review, and `/plan`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use dsh_agent::AgentRef;
use dsh_kernel::{BoxError, BoxFuture, Context, load_tree};
use dsh_plan_mode::{
    APPROVE_LABEL, EXIT_PLAN_MODE, KEEP_PLANNING_LABEL, PlanMode, PlanModeState, SetOutcome,
    fold_plan_mode,
};
use dsh_tools::{ObjectSchema, Tool, ToolOutput, ToolRegistry, ToolRunContext};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::*;

const PLAN: &str = "# Add a cache\n\n1. Wrap the reader.\n2. Test it.";

fn state(active: bool, pending: Option<bool>) -> PlanModeState {
    PlanModeState { active, pending }
}

#[tokio::test]
async fn the_fold_is_the_last_logged_value() {
    let h = Harness::new(Channel::Absent);
    let agent = h.agent();
    let session = agent.session();
    let fold = || session.read(|s| fold_plan_mode(s.events()));
    assert!(!fold());
    session
        .append("plan/mode", json!({"active": true}), None)
        .unwrap();
    assert!(fold());
    session
        .append("plan/mode", json!({"active": false}), None)
        .unwrap();
    assert!(!fold());
    session
        .append("plan/mode", json!({"active": true}), None)
        .unwrap();
    assert!(fold());
    assert_eq!(h.plan().get(&agent), state(true, None));
}

#[tokio::test]
async fn between_turns_a_selection_commits_at_once_and_repeats_are_noops() {
    let h = Harness::new(Channel::Absent);
    let agent = h.agent();
    let plan = h.plan();
    assert_eq!(plan.set(&agent, true).unwrap(), SetOutcome::Committed);
    assert_eq!(plan.set(&agent, true).unwrap(), SetOutcome::Noop);
    assert_eq!(plan.get(&agent), state(true, None));
    assert_eq!(plan.set(&agent, false).unwrap(), SetOutcome::Committed);
    assert_eq!(plan.set(&agent, false).unwrap(), SetOutcome::Noop);
    // No request was ever made, so no notice is queued.
    assert_eq!(
        trace(agent.session()),
        ["plan/mode true", "plan/mode false"]
    );
    assert!(agent.inbox().next_step.is_empty());
}

#[tokio::test]
async fn the_section_is_rendered_only_while_active_and_notices_only_a_change() {
    let h = Harness::new(Channel::Absent);
    let agent = h.agent();
    h.model.push(text("one"));
    h.model.push(text("two"));
    h.model.push(text("three"));
    h.prompt(&agent, "first").await;
    h.plan().set(&agent, true).unwrap();
    h.prompt(&agent, "second").await;
    h.plan().set(&agent, false).unwrap();
    h.prompt(&agent, "third").await;
    assert_eq!(
        (0..3).map(|i| h.model.planned(i)).collect::<Vec<_>>(),
        [false, true, false]
    );
    assert_eq!(
        trace(agent.session()),
        [
            "turn/start 1",
            "step/start 1.1",
            "user[user] first",
            "plan/mode true",
            "turn/start 2",
            "step/start 2.1",
            "user[plugin] Plan mode is now on: the user switched this session to planning.",
            "user[user] second",
            "plan/mode false",
            "turn/start 3",
            "step/start 3.1",
            "user[plugin] Plan mode is now off: the user switched this session back to its normal mode.",
            "user[user] third",
        ]
    );
    // The tool catalog is the same in both modes.
    let names = |i: usize| -> Vec<String> {
        h.model.requests()[i]
            .tools
            .iter()
            .flatten()
            .map(|t| t.name.clone())
            .collect()
    };
    assert_eq!(names(0), names(1));
    assert!(names(0).contains(&EXIT_PLAN_MODE.to_string()));
}

/// A tool standing in for a user who selects a mode while a tool runs (mid-turn).
struct Select {
    schema: dsh_llm::ToolSchema,
    plan: Arc<PlanMode>,
    root: Context,
}

impl Tool for Select {
    fn schema(&self) -> &dsh_llm::ToolSchema {
        &self.schema
    }
    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let plan = self.plan.clone();
        let agents = self.root.get::<dsh_agent::Agents>().unwrap();
        Box::pin(async move {
            let agent: AgentRef = agents.get(&ctx.session.unwrap().id()).unwrap();
            let mut outcomes = Vec::new();
            for active in args["select"].as_array().unwrap() {
                let outcome = plan.set(&agent, active.as_bool().unwrap())?;
                outcomes.push(format!("{outcome:?}"));
            }
            Ok(ToolOutput::text(outcomes.join(",")))
        })
    }
}

fn with_select(h: &Harness) {
    let tool = Select {
        schema: dsh_llm::ToolSchema {
            name: "select".into(),
            description: "select".into(),
            parameters: ObjectSchema::new().to_value().into(),
        },
        plan: h.plan(),
        root: h.root.clone(),
    };
    h.root
        .get::<ToolRegistry>()
        .unwrap()
        .register(&h.root, Arc::new(tool))
        .unwrap();
}

#[tokio::test]
async fn a_mid_turn_selection_waits_for_the_next_accepted_pre_step() {
    let h = Harness::new(Channel::Absent);
    with_select(&h);
    let agent = h.agent();
    h.model
        .push(call("c1", "select", json!({"select": [true]})));
    h.model.push(text("planning now"));
    h.prompt(&agent, "go").await;
    assert_eq!(h.model.planned(0), false);
    assert_eq!(h.model.planned(1), true);
    assert_eq!(
        trace(agent.session()),
        [
            "turn/start 1",
            "step/start 1.1",
            "user[user] go",
            "tool/result ok Queued",
            "plan/mode true",
            "step/start 1.2",
            "user[plugin] Plan mode is now on: the user switched this session to planning.",
        ]
    );
}

#[tokio::test]
async fn an_opposite_selection_cancels_a_pending_one_and_nothing_is_logged() {
    let h = Harness::new(Channel::Absent);
    with_select(&h);
    let agent = h.agent();
    h.model.push(call(
        "c1",
        "select",
        json!({"select": [true, false, false]}),
    ));
    h.model.push(text("still normal"));
    h.prompt(&agent, "go").await;
    assert_eq!(h.model.planned(1), false);
    assert_eq!(
        trace(agent.session())[3..],
        ["tool/result ok Queued,Cancelled,Noop", "step/start 1.2"]
    );
    assert_eq!(h.plan().get(&agent), state(false, None));
}

#[tokio::test]
async fn the_exit_tool_fails_outside_plan_mode_and_without_a_heading() {
    let h = Harness::new(Channel::Scripted);
    let agent = h.agent();
    h.model
        .push(call("c1", EXIT_PLAN_MODE, json!({"plan": PLAN})));
    h.model.push(text("ok"));
    h.prompt(&agent, "go").await;
    h.plan().set(&agent, true).unwrap();
    h.model
        .push(call("c2", EXIT_PLAN_MODE, json!({"plan": "no heading"})));
    h.model.push(text("ok"));
    h.prompt(&agent, "plan it").await;
    let results: Vec<String> = trace(agent.session())
        .into_iter()
        .filter(|l| l.starts_with("tool/result"))
        .collect();
    assert_eq!(
        results,
        [
            "tool/result error Error: exit_plan_mode can only be used while plan mode is active",
            "tool/result error Error: exit_plan_mode needs the whole plan as markdown, beginning with a # heading",
        ]
    );
    assert!(h.answers.asked.lock().unwrap().is_empty());
}

#[tokio::test]
async fn approval_exits_silently_at_the_next_step() {
    let h = Harness::new(Channel::Scripted);
    let agent = h.agent();
    h.plan().set(&agent, true).unwrap();
    h.answers.push(APPROVE_LABEL, None);
    h.model
        .push(call("c1", EXIT_PLAN_MODE, json!({"plan": PLAN})));
    h.model.push(text("implementing"));
    h.prompt(&agent, "plan a cache").await;
    assert_eq!(h.model.planned(0), true);
    assert_eq!(h.model.planned(1), false);
    assert_eq!(
        trace(agent.session()),
        [
            "plan/mode true",
            "turn/start 1",
            "step/start 1.1",
            "user[user] plan a cache",
            "tool/result ok Plan approved and plan mode is off. Start carrying out the plan with your next step.",
            "plan/mode false",
            "step/start 1.2",
        ]
    );
    let asked = h.answers.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].id, "plan-review");
    assert_eq!(asked[0].detail.as_deref(), Some(PLAN));
    let labels: Vec<String> = asked[0]
        .options
        .iter()
        .flatten()
        .map(|o| o.label.clone())
        .collect();
    assert_eq!(labels, [APPROVE_LABEL, KEEP_PLANNING_LABEL]);
}

#[tokio::test]
async fn keep_planning_fails_the_call_with_the_feedback() {
    let h = Harness::new(Channel::Scripted);
    let agent = h.agent();
    h.plan().set(&agent, true).unwrap();
    h.answers.push(KEEP_PLANNING_LABEL, Some("cover eviction"));
    h.model
        .push(call("c1", EXIT_PLAN_MODE, json!({"plan": PLAN})));
    h.model.push(text("revising"));
    h.prompt(&agent, "plan a cache").await;
    assert_eq!(h.model.planned(1), true);
    assert_eq!(
        trace(agent.session())[4..],
        [
            "tool/result error Error: The user chose to keep planning. Their feedback: cover eviction",
            "step/start 1.2",
        ]
    );
    assert_eq!(h.plan().get(&agent), state(true, None));
}

#[tokio::test]
async fn without_a_question_channel_the_review_fails_clearly() {
    let h = Harness::new(Channel::Absent);
    let agent = h.agent();
    h.plan().set(&agent, true).unwrap();
    h.model
        .push(call("c1", EXIT_PLAN_MODE, json!({"plan": PLAN})));
    h.model.push(text("staying"));
    h.prompt(&agent, "plan").await;
    assert_eq!(
        trace(agent.session())[4],
        "tool/result error Error: the plan cannot be reviewed here: no channel to ask the user is available. Stay in plan mode and ask the user to leave it themselves (/plan off)"
    );
    assert_eq!(h.plan().get(&agent), state(true, None));
}

#[tokio::test]
async fn the_plan_command_selects_leaves_and_steers() {
    let h = Harness::new(Channel::Absent);
    let agent = h.agent();
    assert_eq!(
        h.command(&agent, "/plan off").await,
        "Plan mode is already off."
    );
    assert_eq!(
        h.command(&agent, "/plan").await,
        "Plan mode on. Leave it with /plan off."
    );
    assert_eq!(
        h.command(&agent, "/plan").await,
        "Plan mode is already on. Leave it with /plan off."
    );
    assert_eq!(h.command(&agent, "/plan off").await, "Plan mode off.");
    h.model.push(text("a plan"));
    assert_eq!(
        h.command(&agent, "/plan design the cache").await,
        "Plan mode on. Leave it with /plan off."
    );
    idle(&agent).await;
    assert_eq!(h.model.requests().len(), 1);
    assert!(h.model.planned(0));
    assert_eq!(h.model.user_texts(0), ["design the cache"]);
    assert_eq!(
        trace(agent.session()),
        [
            "plan/mode true",
            "plan/mode false",
            "plan/mode true",
            "turn/start 1",
            "step/start 1.1",
            "user[user] design the cache",
        ]
    );
}

#[tokio::test]
async fn config_is_strict() {
    for (config, expected) in [
        (json!({}), "section"),
        (json!({"section": "  "}), "must not be blank"),
        (json!({"section": 3}), "section"),
        (json!({"section": "x", "extra": 1}), "unknown field"),
    ] {
        let root = Context::new_root();
        let error = load_tree(&root, &catalog(), &rows(Channel::Absent, config.clone()))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains(expected), "{config}: {error}");
    }
}

#[tokio::test]
async fn the_notice_is_entered_once_even_across_a_multi_step_turn() {
    let h = Harness::new(Channel::Absent);
    with_select(&h);
    let agent = h.agent();
    h.model.push(text("hello"));
    h.prompt(&agent, "first").await;
    h.plan().set(&agent, true).unwrap();
    h.model.push(call("c1", "select", json!({"select": []})));
    h.model.push(text("planned"));
    h.prompt(&agent, "second").await;
    let notices = trace(agent.session())
        .into_iter()
        .filter(|l| l.starts_with("user[plugin]"))
        .count();
    assert_eq!(notices, 1);
    assert!(h.model.planned(1) && h.model.planned(2));
}

#[tokio::test]
async fn a_rejected_step_appends_nothing_and_the_selection_stays_pending() {
    let h = Harness::new(Channel::Absent);
    with_select(&h);
    let agent = h.agent();
    // Every step after the first of turn 1 is rejected.
    h.root
        .on_waterfall::<dsh_agent::PreStep>(dsh_kernel::ListenOptions::default(), |p, next| {
            let reject = p.turn == 1 && p.step > 1;
            Box::pin(async move {
                if reject {
                    Ok(dsh_agent::PreStepDecision::Reject)
                } else {
                    next.run().await
                }
            })
        })
        .unwrap();
    h.model
        .push(call("c1", "select", json!({"select": [true]})));
    h.prompt(&agent, "go").await;
    assert_eq!(h.plan().get(&agent), state(false, Some(true)));
    assert!(
        !trace(agent.session())
            .iter()
            .any(|l| l.starts_with("plan/mode"))
    );
    // The next accepted step appends it.
    h.model.push(text("planning"));
    h.prompt(&agent, "again").await;
    assert_eq!(h.plan().get(&agent), state(true, None));
    assert!(h.model.planned(1));
}
