//! Session goals through the `dsh` binary against the mock LLM: the goal tools, the round
//! driver that continues an active goal across turns, the logged `goal/change` state,
//! resume (a resumed goal is disarmed) and `/goal`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::{Command, Output};
use std::sync::Arc;

use dsh_session::{Event, types};
use dsh_test_support::mock_server::{MockServer, RecordedRequest, Reply};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::{Run, call, loop_requests, stderr, tool_texts};

/// What these tests add to [`Run`].
trait RunExt {
    fn cmd(&self, server: &MockServer, args: &[&str]) -> Command;
    fn headless(&self, server: &MockServer, args: &[&str]) -> Output;
}

impl RunExt for Run {
    fn cmd(&self, server: &MockServer, args: &[&str]) -> Command {
        let mut c = self.base(server);
        c.args(args);
        c
    }

    fn headless(&self, server: &MockServer, args: &[&str]) -> Output {
        let mut all = vec!["--profile", "headless"];
        all.extend_from_slice(args);
        self.cmd(server, &all).output().unwrap()
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn body(r: &RecordedRequest) -> String {
    r.json.as_ref().map(Value::to_string).unwrap_or_default()
}

/// A reply that reads the goal from the last tool output (a get_goal result) and calls
/// update_goal on exactly that revision.
fn update_from_last_get(id: &'static str, action: &'static str) -> Reply {
    Reply::dynamic(move |r| {
        let got: Value =
            serde_json::from_str(&r.last_tool_output().unwrap_or_default()).unwrap_or(Value::Null);
        call(
            id,
            "update_goal",
            json!({
                "goal_id": got["goal"]["id"],
                "revision": got["goal"]["revision"],
                "action": action,
            }),
        )
    })
}

/// Operations of the logged `goal/change` events.
fn goal_operations(events: &[Arc<Event>]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.is("goal/change"))
        .map(|e| e.data["operation"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Sources of the logged goal-round prompts.
fn round_sources(events: &[Arc<Event>]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.is(types::USER_MESSAGE))
        .map(|e| e.data["source"].clone())
        .filter(|s| s["kind"] == "goal")
        .collect()
}

/// The tool value with the random goal id replaced.
fn redact(text: &str) -> Value {
    let mut v: Value = serde_json::from_str(text).unwrap_or(Value::String(text.into()));
    if let Some(id) = v.pointer_mut("/goal/id") {
        assert!(id.as_str().unwrap().starts_with("goal-"), "{id}");
        *id = json!("<id>");
    }
    v
}

/// Turn 1: the model sets a goal. The driver starts the goal's first round on its own;
/// in it the model reads the goal and marks it complete, gets the closing instruction and
/// writes the final answer, which headless prints once the rounds are over. The log holds
/// the goal's changes and the round prompt; a resumed run sees the goal complete and
/// disarmed, and no round starts.
#[test]
fn the_round_driver_continues_an_active_goal_across_turns() {
    let server = MockServer::with_replies([
        call(
            "c1",
            "create_goal",
            json!({"objective": "Make the parser tests pass", "max_goal_rounds": 5}),
        ),
        Reply::text("Goal set; starting on it."),
        call("c2", "get_goal", json!({})),
        update_from_last_get("c3", "complete"),
        Reply::text("The parser tests pass now."),
        // The resumed run.
        call("c4", "get_goal", json!({})),
        Reply::text("That goal is already complete."),
    ])
    .answer_untooled("Mock title");
    let run = Run::new();
    let out = run.headless(&server, &["Keep working until the parser tests pass"]);
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "The parser tests pass now.\n".to_string()),
        "{}",
        stderr(&out)
    );

    let requests = loop_requests(&server);
    assert_eq!(requests.len(), 5, "two turns: the task and one goal round");
    // Every request offers the three tools and carries the goal section.
    for r in &requests {
        let b = body(r);
        for tool in ["create_goal", "get_goal", "update_goal"] {
            assert!(b.contains(&format!("\"{tool}\"")), "{tool} missing");
        }
        assert!(
            b.contains("create_goal can take it from there"),
            "no tool:goal section"
        );
    }
    // The second turn opens with the driver's round prompt, not a person's message.
    assert!(!body(&requests[1]).contains("<goal_round>"));
    let round = body(&requests[2]);
    assert!(round.contains("<goal_round>"), "{round}");
    assert!(round.contains("Round: 1/5"), "{round}");
    assert!(
        round.contains(r#"Objective: \"Make the parser tests pass\""#),
        "{round}"
    );
    // After complete in a goal round, the model is told to write its closing message.
    assert!(!body(&requests[3]).contains("<goal_complete>"));
    assert!(body(&requests[4]).contains("<goal_complete>"));

    let id = run.only_session();
    let events = run.events(&id);
    assert_eq!(goal_operations(&events), ["create", "complete"]);
    let sources: Vec<Value> = round_sources(&events)
        .into_iter()
        .map(|mut s| {
            s["goalId"] = json!("<id>");
            s
        })
        .collect();
    assert_eq!(
        sources,
        [json!({"kind": "goal", "goalId": "<id>", "revision": 1, "round": 1})]
    );
    let turns = events.iter().filter(|e| e.is(types::TURN_START)).count();
    assert_eq!(turns, 2);
    let results: Vec<Value> = tool_texts(&events).iter().map(|t| redact(t)).collect();
    let goal = |revision: u64, phase: &str, rounds: u64, activation: &str| {
        json!({"goal": {"id": "<id>", "revision": revision, "objective": "Make the parser tests pass",
            "phase": phase, "roundsStarted": rounds, "maxGoalRounds": 5}, "activation": activation})
    };
    assert_eq!(
        results,
        [
            goal(1, "active", 0, "armed"),
            goal(1, "active", 1, "armed"),
            goal(2, "complete", 1, "disarmed"),
        ]
    );
    let created = events.iter().find(|e| e.is("goal/change")).unwrap();
    let mut data = created.data.as_value().clone();
    data["goal"]["id"] = json!("<id>");
    assert!(data["createdAt"].as_u64().unwrap() > 0);
    data["createdAt"] = json!(0);
    data["updatedAt"] = json!(0);
    assert_eq!(
        data,
        json!({"kind": "goal/change", "version": 1, "operation": "create",
            "goal": {"id": "<id>", "revision": 1, "objective": "Make the parser tests pass",
                "phase": "active", "maxGoalRounds": 5},
            "roundsStarted": 0, "createdAt": 0, "updatedAt": 0})
    );

    // Resumed: the goal is there, complete and disarmed, and no round starts.
    let again = run.headless(&server, &["--resume", &id, "Is the goal done?"]);
    assert_eq!(
        (again.status.code(), stdout(&again)),
        (Some(0), "That goal is already complete.\n".to_string()),
        "{}",
        stderr(&again)
    );
    assert_eq!(loop_requests(&server).len(), 7);
    let events = run.events(&id);
    assert_eq!(
        redact(tool_texts(&events).last().unwrap()),
        goal(2, "complete", 1, "disarmed")
    );
    assert_eq!(goal_operations(&events), ["create", "complete"]);
}

/// Bad input gets upstream's error codes: a stale revision, a wrong action argument, a
/// model trying to pause without a person asking in a goal round, and blocked before the
/// threshold. The round limit then blocks the goal (`round-limit`) and the run ends.
#[test]
fn goal_tools_refuse_bad_updates_and_the_round_limit_blocks() {
    let server = MockServer::with_replies([
        call(
            "c1",
            "create_goal",
            json!({"objective": "Ship it", "max_goal_rounds": 1}),
        ),
        call(
            "c2",
            "update_goal",
            json!({"goal_id": "goal-nope", "revision": 1, "action": "complete"}),
        ),
        call(
            "c3",
            "update_goal",
            json!({"goal_id": "goal-nope", "revision": 0, "action": "complete"}),
        ),
        Reply::text("Working on it."),
        // Round 1 (automatic): no direct human, so pause is refused; blocked is too early.
        call("c4", "get_goal", json!({})),
        update_from_last_get("c5", "pause"),
        call("c6", "get_goal", json!({})),
        Reply::dynamic(|r| {
            let got: Value = serde_json::from_str(&r.last_tool_output().unwrap_or_default())
                .unwrap_or(Value::Null);
            call(
                "c7",
                "update_goal",
                json!({"goal_id": got["goal"]["id"], "revision": got["goal"]["revision"],
                    "action": "blocked", "blocked_reason": "The CI runner is down."}),
            )
        }),
        Reply::text("Still going."),
    ])
    .answer_untooled("Mock title");
    let run = Run::new();
    let out = run.headless(&server, &["Ship it"]);
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "Still going.\n".to_string()),
        "{}",
        stderr(&out)
    );
    let events = run.session();
    let codes: Vec<String> = events
        .iter()
        .filter(|e| e.is(types::TOOL_RESULT))
        .map(|e| {
            e.data
                .pointer("/error/code")
                .and_then(Value::as_str)
                .unwrap_or("ok")
                .to_string()
        })
        .collect();
    assert_eq!(
        codes,
        [
            "ok",
            "GOAL_STALE_REVISION",
            "GOAL_TOOL_INVALID_UPDATE",
            "ok",
            "GOAL_TOOL_AUTHORITY_REQUIRED",
            "ok",
            "GOAL_TOOL_BLOCK_THRESHOLD",
        ]
    );
    // One round was allowed; at the next idle the driver blocks the goal instead.
    assert_eq!(goal_operations(&events), ["create", "block"]);
    let blocked = events.iter().rfind(|e| e.is("goal/change")).unwrap();
    assert_eq!(blocked.data["goal"]["blockedReason"]["code"], "round-limit");
    assert_eq!(round_sources(&events).len(), 1);
}

/// `/goal` through headless: set a goal (its first round starts at once and the run waits
/// for it), a turn cut short disarms it, `/goal` after resume shows it active and disarmed,
/// `/goal pause` pauses it, `/goal resume` re-arms it and the next round completes it, and
/// `/goal clear` removes it.
#[test]
fn the_goal_command_sets_shows_resumes_and_clears() {
    let server = MockServer::with_replies([
        // Round 1 of the goal /goal set: cut off by the output cap.
        Reply::max_tokens("Drafting the rep"),
        // Round 2 after /goal resume.
        call("c1", "get_goal", json!({})),
        update_from_last_get("c2", "complete"),
        Reply::text("The report is written."),
    ])
    .answer_untooled("Mock title");
    let run = Run::new();
    let set = run.headless(&server, &["/goal Write the quarterly report"]);
    assert_eq!(
        set.status.code(),
        Some(1),
        "the round hit max tokens: {}",
        stderr(&set)
    );
    assert_eq!(stdout(&set), "Drafting the rep\n");
    let id = run.only_session();
    let resume = |task: &str| run.headless(&server, &["--resume", &id, task]);

    let show = resume("/goal");
    assert_eq!(
        (show.status.code(), stdout(&show)),
        (
            Some(0),
            "Goal\nStatus: active\nObjective: Write the quarterly report\nRounds: 1/256\nActivation: disarmed\n\nCommands: /goal edit <objective>, /goal resume, /goal clear\n"
                .to_string()
        ),
        "{}",
        stderr(&show)
    );
    let again = resume("/goal Something else");
    assert_eq!(again.status.code(), Some(1));
    assert!(stderr(&again).contains("/goal clear"), "{}", stderr(&again));

    let paused = resume("/goal pause");
    assert_eq!(
        (paused.status.code(), stdout(&paused)),
        (
            Some(0),
            "Goal paused\nStatus: paused\nObjective: Write the quarterly report\nRounds: 1/256\nActivation: disarmed\n\nCommands: /goal edit <objective>, /goal resume, /goal clear\n"
                .to_string()
        ),
        "{}",
        stderr(&paused)
    );
    let resumed = resume("/goal resume");
    assert_eq!(
        (resumed.status.code(), stdout(&resumed)),
        (Some(0), "The report is written.\n".to_string()),
        "{}",
        stderr(&resumed)
    );
    let requests = loop_requests(&server);
    assert_eq!(requests.len(), 4);
    assert!(body(&requests[1]).contains("Round: 2/256"));

    let cleared = resume("/goal clear");
    assert_eq!(stdout(&cleared), "Goal removed.\n", "{}", stderr(&cleared));
    let none = resume("/goal");
    assert_eq!(
        stdout(&none),
        "This session has no goal yet.\nUsage: /goal [<objective>|clear|edit <objective>|pause|resume]\n"
    );
    let events = run.events(&id);
    assert_eq!(
        goal_operations(&events),
        ["create", "pause", "resume", "complete", "clear"]
    );
    assert_eq!(round_sources(&events).len(), 2);
    assert_eq!(
        loop_requests(&server).len(),
        4,
        "no round after complete or clear"
    );
}

/// A person's own message allows edit but the model may never resume a goal the person
/// paused (`GOAL_TOOL_RESUME_PAUSED`); an edit keeps the phase, and a paused goal starts no
/// round.
#[test]
fn the_model_cannot_resume_a_paused_goal_but_may_edit_it_for_a_person() {
    let with_goal = |id: &'static str, extra: Value| {
        Reply::dynamic(move |r| {
            let got: Value = serde_json::from_str(&r.last_tool_output().unwrap_or_default())
                .unwrap_or(Value::Null);
            let mut args =
                json!({"goal_id": got["goal"]["id"], "revision": got["goal"]["revision"]});
            for (k, v) in extra.as_object().unwrap() {
                args[k] = v.clone();
            }
            call(id, "update_goal", args)
        })
    };
    let server = MockServer::with_replies([
        Reply::max_tokens("Outl"),
        call("c1", "get_goal", json!({})),
        with_goal("c2", json!({"action": "resume"})),
        call("c3", "get_goal", json!({})),
        with_goal(
            "c4",
            json!({"action": "edit", "objective": "Draft the release plan"}),
        ),
        Reply::text("Renamed; it stays paused until you resume it."),
    ])
    .answer_untooled("Mock title");
    let run = Run::new();
    let set = run.headless(&server, &["/goal Draft the plan"]);
    assert_eq!(set.status.code(), Some(1), "{}", stderr(&set));
    let id = run.only_session();
    let paused = run.headless(&server, &["--resume", &id, "/goal pause"]);
    assert_eq!(paused.status.code(), Some(0), "{}", stderr(&paused));
    let out = run.headless(
        &server,
        &["--resume", &id, "Carry on, and call it the release plan"],
    );
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (
            Some(0),
            "Renamed; it stays paused until you resume it.\n".to_string()
        ),
        "{}",
        stderr(&out)
    );
    let events = run.events(&id);
    let codes: Vec<String> = events
        .iter()
        .filter(|e| e.is(types::TOOL_RESULT))
        .map(|e| {
            e.data
                .pointer("/error/code")
                .and_then(Value::as_str)
                .unwrap_or("ok")
                .to_string()
        })
        .collect();
    assert_eq!(codes, ["ok", "GOAL_TOOL_RESUME_PAUSED", "ok", "ok"]);
    assert_eq!(goal_operations(&events), ["create", "pause", "edit"]);
    let edited = redact(tool_texts(&events).last().unwrap());
    assert_eq!(
        edited,
        json!({"goal": {"id": "<id>", "revision": 3, "objective": "Draft the release plan",
            "phase": "paused", "roundsStarted": 1, "maxGoalRounds": 256}, "activation": "disarmed"})
    );
    assert_eq!(
        loop_requests(&server).len(),
        6,
        "a paused goal starts no round"
    );
}
