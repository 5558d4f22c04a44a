//! Workflows through the `dsh` binary against the mock LLM: a headless parent runs a
//! `workflow` script with two parallel `agent()` children, and a two-round `ralph` loop whose
//! workers report through `structured_output`. Child logs are stored beside the parent's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Output;

use dsh_session::types;
use dsh_test_support::mock_server::{MockServer, RecordedRequest, Reply};
use serde_json::{Value, json};

use common::{Run, call, stderr, tool_texts};

/// What these tests add to [`Run`].
trait RunExt {
    fn headless(&self, server: &MockServer, task: &str) -> Output;
    fn stored(&self) -> Vec<(String, Option<String>)>;
}

impl RunExt for Run {
    fn headless(&self, server: &MockServer, task: &str) -> Output {
        self.base(server)
            .env("DSH_PERMISSION_MODE", "danger-full-access")
            .args(["--profile", "headless", task])
            .output()
            .unwrap()
    }

    /// Every stored session: `(id, parentSession)`.
    fn stored(&self) -> Vec<(String, Option<String>)> {
        self.files()
            .list()
            .unwrap()
            .into_iter()
            .map(|(h, _)| (h.id.clone(), h.parent_session.clone()))
            .collect()
    }
}

fn user_text(request: &RecordedRequest) -> String {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect()
}

/// The project directory of a stored log: `<sessions>/<project>/<id>/session.jsonl…`.
fn project_of(path: &std::path::Path) -> std::path::PathBuf {
    let dir = if path.is_dir() {
        path
    } else {
        path.parent().unwrap()
    };
    dir.parent().unwrap().to_path_buf()
}

fn answered(request: &RecordedRequest) -> bool {
    request.messages().iter().any(|m| m["role"] == "tool")
}

const SCRIPT: &str = "phase('Fan out')\nconst [a, b] = await parallel([() => agent('Say ALPHA'), () => agent('Say BETA')])\nreturn { a, b }";

#[test]
fn a_workflow_with_two_parallel_children_runs_end_to_end() {
    let run = Run::new();
    let server = MockServer::start()
        .answer_untooled("Workflow")
        .respond_with(|r| {
            let users = user_text(r);
            if users.contains("Say ALPHA") {
                Reply::text("ALPHA")
            } else if users.contains("Say BETA") {
                Reply::text("BETA")
            } else if answered(r) {
                Reply::text("WORKFLOW_DONE")
            } else {
                call(
                    "call_w",
                    "workflow",
                    json!({"meta": {"name": "two-children", "description": "two at once"}, "script": SCRIPT}),
                )
            }
        });
    let out = run.headless(&server, "Run the two-children workflow.");
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("WORKFLOW_DONE"));

    let stored = run.stored();
    assert_eq!(stored.len(), 3, "{stored:?}");
    let parent = stored
        .iter()
        .find(|(_, p)| p.is_none())
        .map(|(id, _)| id.clone())
        .unwrap();
    let children: Vec<_> = stored
        .iter()
        .filter(|(_, p)| p.as_deref() == Some(parent.as_str()))
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(children.len(), 2);
    // Beside the parent: every log sits in the same project directory.
    let projects: Vec<_> = run
        .files()
        .list()
        .unwrap()
        .into_iter()
        .map(|(_, path)| project_of(&path))
        .collect();
    assert!(projects.windows(2).all(|w| w[0] == w[1]), "{projects:?}");

    let events = run.events(&parent);
    assert_eq!(
        tool_texts(&events),
        vec![
            "workflow \"two-children\" completed (2 agents).\nReturn value:\n{\n  \"a\": \"ALPHA\",\n  \"b\": \"BETA\"\n}"
        ]
    );
    let kinds: Vec<_> = events
        .iter()
        .map(|e| e.event_type.as_str())
        .filter(|t| {
            t.starts_with("tool-workflow/") || *t == types::TOOL_CALL || *t == types::TOOL_RESULT
        })
        .collect();
    assert_eq!(kinds.first(), Some(&types::TOOL_CALL));
    assert_eq!(kinds[1], "tool-workflow/run-start");
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "tool-workflow/agent-start")
            .count(),
        2
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "tool-workflow/agent-end")
            .count(),
        2
    );
    assert_eq!(kinds[kinds.len() - 2], "tool-workflow/run-end");
    assert_eq!(kinds.last(), Some(&types::TOOL_RESULT));
    let starts: Vec<Value> = events
        .iter()
        .filter(|e| e.is("tool-workflow/agent-start"))
        .map(|e| e.data.as_value().clone())
        .collect();
    for s in &starts {
        assert_eq!(s["phase"], "Fan out");
        assert!(children.contains(&s["childId"].as_str().unwrap().to_string()));
    }
    // Each child's own log holds its answer and ends completed.
    for child in &children {
        let events = run.events(child);
        let last = events.iter().rev().find(|e| e.is(types::TURN_END)).unwrap();
        assert_eq!(last.data.as_value()["reason"]["kind"], "completed");
        assert!(events.iter().any(|e| e.is("subagent/descriptor")));
    }
}

fn report(status: &str, next: &[&str], evidence: &[&str]) -> Value {
    json!({"status": status, "summary": format!("{status} round"), "evidence": evidence, "nextSteps": next, "blocker": ""})
}

#[test]
fn ralph_runs_two_rounds_through_structured_output() {
    let run = Run::new();
    let server = MockServer::start()
        .answer_untooled("Ralph")
        .respond_with(|r| {
            let users = user_text(r);
            if answered(r) {
                Reply::text(if users.contains("Ralph round:") {
                    "round over"
                } else {
                    "RALPH_DONE"
                })
            } else if users.contains("Ralph round: 1 of 3.") {
                call(
                    "s1",
                    "structured_output",
                    report("continue", &["write the tests"], &[]),
                )
            } else if users.contains("Ralph round: 2 of 3.") {
                call(
                    "s2",
                    "structured_output",
                    report("complete", &[], &["tests pass"]),
                )
            } else {
                call(
                    "call_r",
                    "ralph",
                    json!({"objective": "Make the tests pass.", "maxRounds": 3}),
                )
            }
        });
    let out = run.headless(&server, "Run a Ralph loop on the tests.");
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("RALPH_DONE"));
    let stored = run.stored();
    assert_eq!(stored.len(), 3, "two rounds, two children: {stored:?}");
    let parent = stored.iter().find(|(_, p)| p.is_none()).unwrap().0.clone();
    let expected = format!(
        "Ralph worker reported completion after 2 rounds.\nFinal report:\n{}",
        serde_json::to_string_pretty(&report("complete", &[], &["tests pass"])).unwrap()
    );
    assert_eq!(tool_texts(&run.events(&parent)), vec![expected]);
}
