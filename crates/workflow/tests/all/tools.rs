//! The `workflow` and `ralph` tools called by a model: durable records, result texts,
//! pinned schemas, cancellation of the call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::Path;

use dsh_llm::Message;
use dsh_tools::ToolRegistry;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::{Harness, Reply, calls, hang, idle, record_sessions, text, trace};

fn shape(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, v)| !(*k == "description" && v.is_string()))
                .map(|(k, v)| (k.clone(), shape(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
        other => other.clone(),
    }
}

fn pinned(tool: &str) -> Option<Value> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/conformance/acp/product-subagent-both/tool-schemas.expected.json");
    let value: Value = serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()?;
    value["initial"]
        .as_array()?
        .iter()
        .find(|t| t["name"] == tool)
        .map(|t| t["parameters"].clone())
}

#[tokio::test]
async fn schemas_match_the_pinned_ones() {
    let h = Harness::workflows(json!({}));
    let tools = h.root.get::<ToolRegistry>().unwrap();
    let schemas = tools.native_schemas(&h.root);
    let get = |name: &str| {
        let s = schemas.iter().find(|s| s.name == name).expect(name);
        serde_json::to_value(&s.parameters).unwrap()
    };
    for name in ["workflow", "ralph"] {
        let mut ours = get(name);
        if name == "workflow" {
            // 0.2.1 adds `run_in_background` (a boolean, last); the pins are 0.1.1's.
            let added = ours["properties"]
                .as_object_mut()
                .unwrap()
                .shift_remove("run_in_background");
            assert_eq!(added.map(|p| p["type"].clone()), Some(json!("boolean")));
        }
        // Key order is part of the request bytes.
        let keys: Vec<_> = ours.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, vec!["type", "properties", "required"]);
        match pinned(name) {
            Some(p) => {
                assert_eq!(shape(&ours), shape(&p), "{name}");
                assert_eq!(
                    dsh_kernel::json::to_string(&shape(&ours)),
                    dsh_kernel::json::to_string(&shape(&p)),
                    "{name}: key order"
                );
            }
            None => dsh_test_support::prereq::skip(&format!(
                "../shared/conformance is absent: the pinned schema of {name} is not compared"
            )),
        }
    }
    // Both declare their canonical value for Code Mode's ToolOutputMap.
    let outputs = tools.output_schemas(&h.root);
    assert_eq!(
        outputs["workflow"]["required"],
        json!(["runId", "agentsStarted", "result"])
    );
    assert_eq!(
        outputs["ralph"]["required"],
        json!(["agentsStarted", "result"])
    );
}

fn workflow_call(id: &str, name: &str, script: &str) -> Reply {
    calls(&[(
        id,
        "workflow",
        json!({"meta": {"name": name, "description": "d"}, "script": script}),
    )])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_call_records_the_run_between_call_and_result() {
    let h = Harness::workflows(json!({}));
    let sessions = record_sessions(&h.root);
    h.model.script(
        "Run the flow",
        vec![
            workflow_call(
                "w1",
                "snapshot-flow",
                "\nphase('Run')\nconst reply = await agent('Respond using only the word WF_CHILD_OK, with no further text.')\nreturn { reply }\n",
            ),
            text("WORKFLOW_DONE"),
        ],
    );
    h.model
        .script("Respond using only", vec![text("WF_CHILD_OK")]);
    let parent = h.agent();
    parent.followup(Message::user_text("Run the flow")).unwrap();
    idle(&parent).await;
    let events = parent.session().events();
    let t = trace(&events);
    let call = t.iter().position(|l| l == "tool/call workflow").unwrap();
    assert_eq!(
        t[call..call + 6].to_vec(),
        vec![
            "tool/call workflow",
            "tool-workflow/run-start",
            "tool-workflow/agent-start",
            "tool-workflow/agent-end",
            "tool-workflow/run-end",
            "tool/result workflow \"snapshot-flow\" completed (1 agent).\nReturn value:\n{\n  \"reply\": \"WF_CHILD_OK\"\n}",
        ]
    );
    let data = |kind: &str| {
        events
            .iter()
            .find(|e| e.event_type == kind)
            .unwrap()
            .data
            .as_value()
            .clone()
    };
    let start = data("tool-workflow/run-start");
    let run_id = start["runId"].clone();
    assert_eq!(start["name"], "snapshot-flow");
    let child = sessions
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.header().parent_session.as_deref() == Some(parent.id()))
        .cloned()
        .unwrap();
    assert_eq!(
        data("tool-workflow/agent-start"),
        json!({"runId": run_id, "seq": 1, "label": "Respond using only the word WF_CHILD_OK, with n\u{2026}", "phase": "Run", "childId": child.id()})
    );
    assert_eq!(
        data("tool-workflow/agent-end"),
        json!({"runId": run_id, "seq": 1, "outcome": "completed"})
    );
    assert_eq!(
        data("tool-workflow/run-end"),
        json!({"runId": run_id, "stopReason": "completed"})
    );
    // The child's descriptor has no label.
    let descriptor = child
        .events()
        .iter()
        .find(|e| e.event_type == "subagent/descriptor")
        .unwrap()
        .data
        .as_value()
        .clone();
    assert_eq!(
        descriptor,
        json!({"version": 2, "mode": "one-shot", "provider": "spawn"})
    );
    assert_eq!(t.last().unwrap(), "turn/end completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_become_tool_errors() {
    let h = Harness::workflows(json!({}));
    h.model.script(
        "Break it",
        vec![
            calls(&[
                ("w0", "workflow", json!({"meta": {"name": "m"}, "script": "return 1"})),
                (
                    "w1",
                    "workflow",
                    json!({"meta": {"name": "m", "description": "d", "colour": 1}, "script": "return 1"}),
                ),
                (
                    "w2",
                    "workflow",
                    json!({"meta": {"name": "m", "description": "d"}, "script": "throw new Error('boom')"}),
                ),
            ]),
            text("OK"),
        ],
    );
    let parent = h.agent();
    parent.followup(Message::user_text("Break it")).unwrap();
    idle(&parent).await;
    let events = parent.session().events();
    let t = trace(&events);
    for want in [
        "tool/result error Error: invalid arguments: missing required property \"meta.description\"",
        "tool/result error Error: invalid meta: meta.colour is unknown (allowed: name, description, whenToUse, phases)",
        "tool/result error Error: workflow run failed: Error: boom",
    ] {
        assert!(t.contains(&want.to_string()), "{want}\n{t:?}");
    }
    // A refused start records nothing; a failed run records its end.
    let ends: Vec<_> = events
        .iter()
        .filter(|e| e.event_type == "tool-workflow/run-end")
        .map(|e| e.data.as_value()["stopReason"].clone())
        .collect();
    assert_eq!(ends, vec![json!("error")]);
    let codes: Vec<_> = events
        .iter()
        .filter(|e| e.event_type == "tool/result")
        .map(|e| e.data.as_value()["error"]["code"].clone())
        .collect();
    assert_eq!(
        codes,
        vec![json!("INVALID_ARGS"), json!("META_INVALID"), Value::Null]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_call_cancels_every_child() {
    let h = Harness::workflows(json!({"maxConcurrentAgents": 4}));
    let sessions = record_sessions(&h.root);
    h.model.script(
        "Fan out",
        vec![workflow_call(
            "w1",
            "hang",
            "return await parallel([() => agent('Hang one'), () => agent('Hang two')])",
        )],
    );
    h.model.script("Hang one", vec![hang()]);
    h.model.script("Hang two", vec![hang()]);
    let parent = h.agent();
    parent.followup(Message::user_text("Fan out")).unwrap();
    let pid = parent.id().to_string();
    support::wait_for(|| {
        parent
            .session()
            .events()
            .iter()
            .filter(|e| e.event_type == "tool-workflow/agent-start")
            .count()
            == 2
    })
    .await;
    // Cancel once both children are waiting on the model: a cancel that lands before a
    // child's first step is a different path (its turn never asks the model).
    support::wait_for(|| {
        let children: Vec<String> = sessions
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.header().parent_session.as_deref() == Some(pid.as_str()))
            .map(|s| s.id().to_string())
            .collect();
        children.len() == 2 && children.iter().all(|c| !h.model.requests_of(c).is_empty())
    })
    .await;
    parent.cancel(dsh_session::CancelCause::User, false);
    idle(&parent).await;
    let events = parent.session().events();
    let outcomes: Vec<_> = events
        .iter()
        .filter(|e| e.event_type == "tool-workflow/agent-end")
        .map(|e| e.data.as_value()["outcome"].clone())
        .collect();
    assert_eq!(outcomes, vec![json!("cancelled"), json!("cancelled")]);
    let end = events
        .iter()
        .find(|e| e.event_type == "tool-workflow/run-end")
        .unwrap();
    assert_eq!(end.data.as_value()["stopReason"], "cancelled");
    let children: Vec<_> = sessions
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.header().parent_session.as_deref() == Some(pid.as_str()))
        .cloned()
        .collect();
    assert_eq!(children.len(), 2);
    for c in children {
        let t = trace(&c.events());
        assert!(t.last().unwrap().starts_with("turn/end aborted"), "{t:?}");
    }
}

fn report(status: &str, next: &[&str], evidence: &[&str]) -> Value {
    json!({"status": status, "summary": format!("{status} summary"), "evidence": evidence, "nextSteps": next, "blocker": ""})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ralph_runs_rounds_until_a_worker_completes() {
    let h = Harness::workflows(json!({}));
    let sessions = record_sessions(&h.root);
    h.model.script(
        "Loop",
        vec![
            calls(&[(
                "r1",
                "ralph",
                json!({"objective": "  make it work ", "maxRounds": 3}),
            )]),
            text("RALPH_DONE"),
        ],
    );
    h.model.script(
        "You are a fresh worker",
        vec![
            calls(&[(
                "s1",
                "structured_output",
                report("continue", &["finish"], &[]),
            )]),
            text("round one"),
        ],
    );
    h.model.script(
        "You are a fresh worker",
        vec![
            calls(&[(
                "s2",
                "structured_output",
                report("complete", &[], &["tests pass"]),
            )]),
            text("round two"),
        ],
    );
    let parent = h.agent();
    parent.followup(Message::user_text("Loop")).unwrap();
    idle(&parent).await;
    let t = trace(&parent.session().events());
    let expected = format!(
        "tool/result Ralph worker reported completion after 2 rounds.\nFinal report:\n{}",
        serde_json::to_string_pretty(&report("complete", &[], &["tests pass"])).unwrap()
    );
    assert!(t.contains(&expected), "{t:?}");
    assert!(!t.iter().any(|l| l.starts_with("tool-workflow/")));
    let children: Vec<_> = sessions
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.header().parent_session.as_deref() == Some(parent.id()))
        .cloned()
        .collect();
    assert_eq!(children.len(), 2);
    // Round two sees the objective, its number and round one's report.
    let second = h.model.requests_of(&children[1].id());
    let prompt = second[0]
        .messages
        .iter()
        .map(|m| m.text())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(prompt.contains("make it work"));
    assert!(prompt.contains("Ralph round: 2 of 3."));
    assert!(prompt.contains("\"nextSteps\":[\"finish\"]"), "{prompt}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ralph_refusals_and_round_failures() {
    let h = Harness::workflows(json!({}));
    h.model.script(
        "Loop",
        vec![
            calls(&[
                ("r1", "ralph", json!({"objective": "   "})),
                ("r2", "ralph", json!({"objective": "x", "maxRounds": 99})),
                ("r3", "ralph", json!({"objective": "x", "maxRounds": 2})),
            ]),
            text("OK"),
        ],
    );
    h.model
        .script("You are a fresh worker", vec![text("no report")]);
    let parent = h.agent();
    parent.followup(Message::user_text("Loop")).unwrap();
    idle(&parent).await;
    let t = trace(&parent.session().events());
    for want in [
        "tool/result error Error: Ralph objective must be a non-empty string",
        "tool/result error Error: Ralph maxRounds 99 exceeds the deployment ceiling 8",
        "tool/result error Error: Ralph round 1 child failed before producing a structured report.\nNo previous handoff was available.",
    ] {
        assert!(t.contains(&want.to_string()), "{want}\n{t:?}");
    }
}

#[tokio::test]
async fn prompt_sections_are_contributed() {
    let h = Harness::workflows(json!({}));
    let prompt = h.root.get::<dsh_prompt::SystemPrompt>().unwrap();
    let assembly = prompt
        .assemble(dsh_prompt::AssembleContext {
            ctx: h.root.clone(),
            session: None,
            provider: "test".into(),
            model: "m".into(),
            cwd: None,
        })
        .await
        .unwrap();
    let names: Vec<_> = assembly.sections.iter().map(|s| s.name.as_str()).collect();
    let w = names
        .iter()
        .position(|n| *n == "tool:workflow")
        .expect("workflow section");
    let r = names
        .iter()
        .position(|n| *n == "tool:ralph")
        .expect("ralph section");
    assert!(w < r, "{names:?}");
    assert!(
        assembly.sections[w]
            .text
            .contains("Reach for workflow only when")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_from_a_code_mode_program_records_nothing() {
    let h = Harness::code_mode();
    let program = "const r = await tools.workflow({ meta: { name: 'nested', description: 'd' }, script: \"return await agent('Nested child')\" });\nreturn r.result;";
    h.model.script(
        "Nest it",
        vec![
            calls(&[(
                "c1",
                "run_code",
                json!({"code": program, "description": "Run a nested workflow"}),
            )]),
            text("NESTED_DONE"),
        ],
    );
    h.model.script("Nested child", vec![text("INNER")]);
    let parent = h.agent();
    parent.followup(Message::user_text("Nest it")).unwrap();
    idle(&parent).await;
    let t = trace(&parent.session().events());
    assert!(t.contains(&"tool/result INNER".to_string()), "{t:?}");
    assert!(!t.iter().any(|l| l.starts_with("tool-workflow/")), "{t:?}");
}

/// 0.2.1's `run_in_background: true`: the call returns a job id at once; the run's
/// rendered return value is the job's output when it settles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_workflow_is_a_job_with_its_return_value_as_output() {
    let h = Harness::workflows(json!({}));
    h.model.script(
        "Start it",
        vec![
            calls(&[(
                "w1",
                "workflow",
                json!({"meta": {"name": "bg-flow", "description": "d"}, "run_in_background": true,
                    "script": "const reply = await agent('Answer BG_WF_OK'); return { reply }"}),
            )]),
            calls(&[(
                "o",
                "job_output",
                json!({"job_id": "workflow-1", "wait": true}),
            )]),
            text("DONE"),
        ],
    );
    h.model.script("Answer BG_WF_OK", vec![text("BG_WF_OK")]);
    let parent = h.agent();
    parent.followup(Message::user_text("Start it")).unwrap();
    idle(&parent).await;
    let t = trace(&parent.session().events());
    assert!(
        t.contains(
            &"tool/result started workflow \"bg-flow\" as background job workflow-1".to_string()
        ),
        "{t:?}"
    );
    assert!(
        t.iter().any(
            |l| l.starts_with("tool/result workflow \"bg-flow\" completed (1 agent).")
                && l.contains("BG_WF_OK")
        ),
        "{t:?}"
    );
}
