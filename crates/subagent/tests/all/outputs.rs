//! Canonical values: every tool of the subagent family declares an output schema, and the
//! value each call reports (what a Code Mode binding resolves to) matches it and carries
//! upstream's fields, while the model-visible result text stays as it was.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::{Arc, Mutex};

use dsh_kernel::ListenOptions;
use dsh_llm::Message;
use dsh_test_support::json_schema::conforms;
use dsh_tools::{ToolRegistry, ToolResultEvent};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::*;

/// `(tool, value, result text)` of every finished call, in any session.
type Seen = Arc<Mutex<Vec<(String, Option<Value>, String)>>>;

fn record_values(h: &Harness) -> Seen {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    h.root
        .on_emit::<ToolResultEvent>(ListenOptions::GLOBAL, move |p| {
            let text = dsh_subagent::text_of(&p.result.content);
            s.lock()
                .unwrap()
                .push((p.exec.name.clone(), p.result.value.clone(), text));
            Ok(())
        })
        .unwrap();
    seen
}

fn value_of(seen: &Seen, tool: &str) -> Option<(Value, String)> {
    seen.lock()
        .unwrap()
        .iter()
        .find(|(n, v, _)| n == tool && v.is_some())
        .map(|(_, v, t)| (v.clone().unwrap(), t.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tool_reports_a_value_matching_its_declared_schema() {
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::new(vec![
        plain_row(
            "persistence",
            "@deepseek-ai/dsh-session-persistence-jsonl",
            json!({"root": dir.path().to_str().unwrap(), "compression": "none", "writeBatchMaxDelayMs": 0}),
        ),
        plain_row(
            "sandbox-policy",
            "@deepseek-ai/dsh-sandbox-policy",
            json!({"mode": "danger-full-access"}),
        ),
        plain_row(
            "control",
            "@deepseek-ai/dsh-tool-subagent-control",
            Value::Null,
        ),
        plain_row(
            "list-agents",
            "@deepseek-ai/dsh-tool-subagent-control/list-agents",
            Value::Null,
        ),
        plain_row(
            "report",
            "@deepseek-ai/dsh-tool-subagent-report",
            Value::Null,
        ),
        tool_row(
            "tool-subagent",
            json!({"provider": "spawn", "toolName": "subagent", "backgroundMode": "continuable", "maxDepth": 1}),
        ),
        tool_row(
            "tool-subagent-once",
            json!({"provider": "spawn", "toolName": "subagent_once", "maxDepth": 1}),
        ),
    ]);
    let seen = record_values(&h);
    let started = seen.clone();
    let child_id = move || {
        value_of(&started, "subagent")
            .and_then(|(v, _)| v["subagentId"].as_str().map(str::to_owned))
    };
    let (id1, id2) = (child_id.clone(), child_id.clone());
    h.model.script(
        "parent",
        vec![
            calls(&[(
                "fg",
                "subagent_once",
                json!({"description": "Foreground", "prompt": "child: once"}),
            )]),
            calls(&[(
                "job",
                "subagent_once",
                json!({"description": "As a job", "prompt": "child: job", "run_in_background": true}),
            )]),
            calls(&[(
                "bg",
                "subagent",
                json!({"description": "Keep working", "prompt": "child: report"}),
            )]),
            calls(&[("l", "list_agents", json!({"scope": "descendants"}))]),
            lazy(move || {
                let id = id1()?;
                Some(calls(&[(
                    "m",
                    "send_message",
                    json!({"agent_id": id, "message": "more"}),
                )]))
            }),
            lazy(move || {
                let id = id2()?;
                Some(calls(&[("i", "interrupt_agent", json!({"agent_id": id}))]))
            }),
            text("DONE"),
            text("SPARE"),
            text("SPARE"),
            text("SPARE"),
            text("SPARE"),
        ],
    );
    h.model.script("child: once", vec![text("ONCE_OK")]);
    h.model.script("child: job", vec![text("JOB_OK")]);
    h.model.script(
        "child: report",
        vec![
            calls(&[("r", "report", json!({"output": "INTERIM"}))]),
            text("FINAL"),
            text("AGAIN"),
            text("SPARE"),
        ],
    );
    let parent = h.agent();
    parent.followup(Message::user_text("parent task")).unwrap();
    let names = [
        "subagent_once",
        "subagent",
        "list_agents",
        "send_message",
        "interrupt_agent",
        "report",
    ];
    let s = seen.clone();
    wait_for(|| names.iter().all(|n| value_of(&s, n).is_some())).await;
    wait_for(|| {
        s.lock()
            .unwrap()
            .iter()
            .filter(|(n, v, _)| n == "subagent_once" && v.is_some())
            .count()
            >= 2
    })
    .await;

    let tools = h.root.get::<ToolRegistry>().unwrap();
    let declared = |name: &str| -> Value {
        match name {
            // Installed in continuable children only.
            "report" => dsh_subagent::outputs::message_id().clone(),
            _ => tools
                .get(&h.root, name)
                .expect("tool registered")
                .output_schema()
                .expect("declares an output schema")
                .clone(),
        }
    };
    let all = seen.lock().unwrap().clone();
    for (name, value, text) in &all {
        if !names.contains(&name.as_str()) {
            continue;
        }
        let value = value
            .as_ref()
            .unwrap_or_else(|| panic!("{name} reported no value ({text})"));
        conforms(&declared(name), value, name).unwrap_or_else(|e| panic!("{e}"));
    }

    // Foreground: the child's run id and final content blocks; the text stays the answer.
    let (fg, fg_text) = all
        .iter()
        .filter(|(n, _, _)| n == "subagent_once")
        .map(|(_, v, t)| (v.clone().unwrap(), t.clone()))
        .find(|(v, _)| v["kind"] == "foreground")
        .unwrap();
    assert_eq!(fg["output"], json!([{"type": "text", "text": "ONCE_OK"}]));
    assert_eq!(fg_text, "ONCE_OK");
    assert!(!fg["runId"].as_str().unwrap().is_empty());
    let (job, job_text) = all
        .iter()
        .filter(|(n, _, _)| n == "subagent_once")
        .map(|(_, v, t)| (v.clone().unwrap(), t.clone()))
        .find(|(v, _)| v["kind"] == "background")
        .unwrap();
    assert_eq!(
        job_text,
        format!(
            "started background subagent job {}",
            job["jobId"].as_str().unwrap()
        )
    );
    let (bg, bg_text) = value_of(&seen, "subagent").unwrap();
    let id = bg["subagentId"].as_str().unwrap().to_string();
    assert_eq!(bg, json!({"kind": "continuable", "subagentId": id}));
    assert_eq!(bg_text, format!("started subagent {id}"));

    let (listed, _) = value_of(&seen, "list_agents").unwrap();
    assert_eq!(
        listed,
        json!([{"kind": "child", "id": id, "label": "Keep working", "status": listed[0]["status"], "parent": parent.id(), "depth": 1}])
    );
    let (sent, sent_text) = value_of(&seen, "send_message").unwrap();
    assert!(!sent["messageId"].as_str().unwrap().is_empty());
    assert_eq!(
        sent_text,
        format!("message queued as the next turn for subagent {id}")
    );
    let (interrupted, _) = value_of(&seen, "interrupt_agent").unwrap();
    assert_eq!(interrupted, json!({"accepted": true}));
    let (reported, reported_text) = value_of(&seen, "report").unwrap();
    assert_eq!(
        reported_text,
        format!(
            "report accepted by the agent that started you as message {}",
            reported["messageId"].as_str().unwrap()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_output_reports_its_recorded_flag() {
    let h = Harness::new(vec![]);
    let seen = record_values(&h);
    h.model.script(
        "child: structured",
        vec![calls(&[("s", "structured_output", json!({"answer": 42}))])],
    );
    let mut request = dsh_subagent::StartRequest::new(
        h.agent(),
        vec![dsh_llm::ContentBlock::text("child: structured")],
        tokio_util::sync::CancellationToken::new(),
    );
    request.output_schema = Some(json!({
        "type": "object",
        "properties": {"answer": {"type": "number"}},
        "required": ["answer"],
        "additionalProperties": false,
    }));
    let subagents = h.root.get::<dsh_subagent::Subagents>().unwrap();
    let run = subagents.start("spawn", request).await.unwrap();
    let result = run.result.clone().await.unwrap();
    run.dispose().await.unwrap();
    assert_eq!(result.structured, Some(json!({"answer": 42})));
    let (value, text) = value_of(&seen, "structured_output").expect("a recorded value");
    assert_eq!(value, json!({"recorded": true}));
    assert_eq!(text, "Structured output recorded.");
    let schema = dsh_subagent::outputs::structured();
    conforms(schema, &value, "structured_output").unwrap();
    assert!(conforms(schema, &json!({"recorded": false}), "structured_output").is_err());
}
