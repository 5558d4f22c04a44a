//! One-shot delegation through the `subagent` and `subagent_fork` tools: child logs, fork
//! inheritance, parallel siblings, the depth limit, partial results, cancellation and
//! failures of published children.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_agent::{SubagentEnd, SubagentStart};
use dsh_kernel::ListenOptions;
use dsh_llm::Message;
use dsh_session::CancelCause;
use dsh_subagent::PublishedRunFaults;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::*;

fn delegate(id: &str, tool: &str, description: &str, prompt: &str) -> (String, String, Value) {
    (
        id.to_string(),
        tool.to_string(),
        json!({"description": description, "prompt": prompt}),
    )
}

fn call_list(list: &[(String, String, Value)]) -> Reply {
    let refs: Vec<(&str, &str, Value)> = list
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone()))
        .collect();
    calls(&refs)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The last `n` lines of a trace.
fn tail(t: &[String], n: usize) -> Vec<String> {
    t[t.len().saturating_sub(n)..].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_child_has_its_own_log_and_its_answer_is_the_result() {
    let h = Harness::standard();
    let seen = record_sessions(&h.root);
    let lifecycle = Arc::new(Mutex::new(Vec::new()));
    {
        let l = lifecycle.clone();
        h.root
            .on_emit::<SubagentStart>(ListenOptions::GLOBAL, move |p| {
                l.lock()
                    .unwrap()
                    .push(format!("start {} local={}", p.provider, p.local()));
                Ok(())
            })
            .unwrap();
        let l = lifecycle.clone();
        h.root
            .on_emit::<SubagentEnd>(ListenOptions::GLOBAL, move |p| {
                let last = p
                    .last_assistant_message
                    .as_deref()
                    .map(dsh_subagent::text_of)
                    .unwrap_or_default();
                l.lock()
                    .unwrap()
                    .push(format!("end {} {last}", p.stop_reason));
                Ok(())
            })
            .unwrap();
    }
    h.model.script(
        "parent",
        vec![
            call_list(&[delegate(
                "c1",
                "subagent",
                "Reply with OK",
                "child: reply OK",
            )]),
            text("PARENT_DONE"),
        ],
    );
    h.model.script("child:", vec![text("CHILD_OK")]);
    let parent = h.agent();
    parent.followup(Message::user_text("parent task")).unwrap();
    idle(&parent).await;
    assert_eq!(
        tail(&trace(&parent.session().events()), 7),
        strings(&[
            "tool/call subagent",
            "tool/result CHILD_OK",
            "step/end",
            "step/start",
            "assistant PARENT_DONE",
            "step/end",
            "turn/end completed",
        ])
    );
    let sessions = seen.lock().unwrap().clone();
    assert_eq!(sessions.len(), 2, "parent and one child");
    let child = &sessions[1];
    let header = child.header();
    assert_eq!(header.parent_session.as_deref(), Some(parent.id()));
    assert_eq!(header.origin.as_deref(), Some("subagent"));
    assert_eq!(header.delegation_depth, 1);
    assert_eq!(header.seed_length, None);
    assert_eq!(header.cwd, parent.session().header().cwd);
    assert_eq!(
        trace(&child.events()),
        strings(&[
            "approval/policy",
            "inbox next-turn +",
            "turn/start 1",
            "inbox next-turn -",
            "subagent/descriptor",
            "step/start",
            "user child: reply OK",
            "user Current runtime context. This snapshot supersedes earlier runtime-context snapshots.",
            "request/header initial",
            "request/context",
            "assistant CHILD_OK",
            "step/end",
            "turn/end completed",
        ])
    );
    let descriptor = child
        .events()
        .into_iter()
        .find(|e| e.is("subagent/descriptor"))
        .unwrap();
    assert_eq!(
        descriptor.data.as_value(),
        &json!({"version": 2, "mode": "one-shot", "provider": "spawn", "label": "Reply with OK"})
    );
    let policy = child.events()[0].data.as_value().clone();
    assert_eq!(policy, json!({"policy": "never", "source": "delegation"}));
    // The child read the delegation context; the parent did not.
    let child_request = &h.model.requests_of(&header.id)[0];
    let context = child_request.messages[1].text();
    assert!(
        context.contains(dsh_subagent::DELEGATION_CONTEXT),
        "{context}"
    );
    assert!(
        !h.model.requests_of(parent.id())[0].messages[1]
            .text()
            .contains("delegated subagent")
    );
    // Disposed once its result was in: no longer live, no longer owned.
    let agents = h.root.get::<dsh_agent::Agents>().unwrap();
    assert!(agents.get(&header.id).is_none());
    wait_for(|| lifecycle.lock().unwrap().len() == 2).await;
    assert_eq!(
        *lifecycle.lock().unwrap(),
        strings(&["start spawn local=true", "end completed CHILD_OK"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_inherits_the_completed_turns_and_continues_their_numbering() {
    let h = Harness::standard();
    let seen = record_sessions(&h.root);
    h.model.script(
        "parent",
        vec![
            text("NOTED"),
            call_list(&[delegate(
                "f1",
                "subagent_fork",
                "Recall the codeword",
                "What was the codeword?",
            )]),
            text("PARENT_DONE"),
        ],
    );
    // The fork's requests start with the parent's first prompt, so it binds by that text.
    h.model.script("parent", vec![text("MARMALADE")]);
    let parent = h.agent();
    parent
        .followup(Message::user_text("parent: the codeword is MARMALADE"))
        .unwrap();
    idle(&parent).await;
    let prefix_len = parent.session().next_seq();
    parent.followup(Message::user_text("ask the fork")).unwrap();
    idle(&parent).await;
    assert!(
        trace(&parent.session().events()).contains(&"tool/result MARMALADE".to_string()),
        "{:?}",
        trace(&parent.session().events())
    );
    let fork = seen.lock().unwrap()[1].clone();
    assert_eq!(fork.header().seed_length, Some(prefix_len));
    let events = fork.events();
    // The inherited prefix is the parent's first turn, verbatim.
    let parent_events = parent.session().events();
    for (a, b) in events[..prefix_len as usize].iter().zip(&parent_events) {
        assert_eq!(a.as_ref(), b.as_ref());
    }
    assert_eq!(
        trace(&events[prefix_len as usize..]),
        strings(&[
            "session/end-seed",
            "approval/policy",
            "inbox next-turn +",
            "turn/start 2",
            "inbox next-turn -",
            "subagent/descriptor",
            "step/start",
            "user What was the codeword?",
            "user Current runtime context. This snapshot supersedes earlier runtime-context snapshots.",
            "request/header resume",
            "assistant MARMALADE",
            "step/end",
            "turn/end completed",
        ])
    );
    // The inherited facts reached the model.
    let request = &h.model.requests_of(&fork.id())[0];
    assert!(
        request.messages[0]
            .text()
            .contains("the codeword is MARMALADE")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sibling_delegations_run_at_the_same_time() {
    let h = Harness::standard();
    let seen = record_sessions(&h.root);
    h.model.script(
        "parent",
        vec![
            call_list(&[
                delegate("a", "subagent", "First", "child: meet"),
                delegate("b", "subagent", "Second", "child: meet"),
            ]),
            text("BOTH"),
        ],
    );
    // Each child waits in `rendezvous` until the other arrives: only overlapping
    // children get past it.
    for _ in 0..2 {
        h.model.script(
            "child:",
            vec![calls(&[("r", "rendezvous", json!({}))]), text("ALPHA")],
        );
    }
    let parent = h.agent();
    parent.followup(Message::user_text("parent")).unwrap();
    idle(&parent).await;
    assert_eq!(
        trace(&parent.session().events())
            .into_iter()
            .filter(|l| l.starts_with("tool/"))
            .collect::<Vec<_>>(),
        strings(&[
            "tool/call subagent",
            "tool/call subagent",
            "tool/result ALPHA",
            "tool/result ALPHA",
        ])
    );
    let sessions = seen.lock().unwrap().clone();
    assert_eq!(sessions.len(), 3);
    for child in &sessions[1..] {
        assert!(
            trace(&child.events()).contains(&"tool/result met".to_string()),
            "{:?}",
            trace(&child.events())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_depth_limit_refuses_before_any_child_exists() {
    let h = Harness::standard();
    let seen = record_sessions(&h.root);
    h.model.script(
        "parent",
        vec![
            call_list(&[delegate("c1", "subagent", "Go deeper", "child: try")]),
            text("ROOT_DONE"),
        ],
    );
    h.model.script(
        "child:",
        vec![
            call_list(&[delegate("g1", "subagent", "Deeper", "grandchild: hi")]),
            text("DEPTH_REJECTED"),
        ],
    );
    let parent = h.agent();
    parent.followup(Message::user_text("parent")).unwrap();
    idle(&parent).await;
    let sessions = seen.lock().unwrap().clone();
    assert_eq!(sessions.len(), 2, "no grandchild session was created");
    let child = trace(&sessions[1].events());
    assert!(
        child.contains(&"tool/result error Error: subagent depth 2 exceeds maxDepth 1".to_string()),
        "{child:?}"
    );
    let result = sessions[1]
        .events()
        .into_iter()
        .find(|e| e.is("tool/result"))
        .unwrap();
    assert_eq!(
        result.data.as_value().get("error"),
        None,
        "a plain error, no code"
    );
    assert!(trace(&parent.session().events()).contains(&"tool/result DEPTH_REJECTED".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_cut_at_its_token_limit_reports_its_last_answer_as_partial_output() {
    let h = Harness::standard();
    h.model.script(
        "parent",
        vec![
            call_list(&[delegate("c1", "subagent", "Partial", "child: go")]),
            text("SEEN"),
        ],
    );
    h.model.script(
        "child:",
        vec![
            say_and_call(
                Some("partial one"),
                &[("r", "rendezvous_missing", json!({}))],
            ),
            cut_at_limit(),
        ],
    );
    let parent = h.agent();
    parent.followup(Message::user_text("parent")).unwrap();
    idle(&parent).await;
    assert!(
        trace(&parent.session().events()).contains(
            &"tool/result error Error: subagent run hit its token limit before finishing\nPartial output before the run ended:\npartial one"
                .to_string()
        ),
        "{:?}",
        trace(&parent.session().events())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_parent_cancels_the_child_and_kills_its_processes() {
    let h = Harness::standard();
    let seen = record_sessions(&h.root);
    h.model.script(
        "parent",
        vec![call_list(&[delegate(
            "c1",
            "subagent",
            "Sleep",
            "child: sleep",
        )])],
    );
    h.model.script(
        "child:",
        vec![calls(&[("s", "sleep_proc", json!({}))]), text("never")],
    );
    let parent = h.agent();
    parent.followup(Message::user_text("parent")).unwrap();
    wait_for(|| !h.pids.lock().unwrap().is_empty()).await;
    let pid = h.pids.lock().unwrap()[0];
    assert!(process_alive(pid));
    parent.cancel(CancelCause::User, false);
    idle(&parent).await;
    let child = seen.lock().unwrap()[1].clone();
    let t = trace(&child.events());
    assert_eq!(t.last().unwrap(), "turn/end aborted", "{t:?}");
    let end = child.events().last().unwrap().data.as_value().clone();
    assert_eq!(
        end["reason"],
        json!({"kind": "aborted", "reason": {"kind": "parent"}})
    );
    wait_for(|| !process_alive(pid)).await;
    let agents = h.root.get::<dsh_agent::Agents>().unwrap();
    wait_for(|| agents.get(&child.id()).is_none()).await;
}

fn process_alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped) counts as gone.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_child_whose_run_and_disposal_fail_reports_both_and_keeps_its_log() {
    let h = Harness::standard();
    h.root
        .provide(Arc::new(PublishedRunFaults {
            followup: "snapshot published run failed".into(),
            dispose: "snapshot published handle disposal failed".into(),
        }))
        .unwrap();
    let seen = record_sessions(&h.root);
    h.model.script(
        "parent",
        vec![
            call_list(&[delegate("c1", "subagent", "Fail", "child: never runs")]),
            text("PARENT_OBSERVED_ERROR"),
        ],
    );
    let parent = h.agent();
    parent.followup(Message::user_text("parent")).unwrap();
    idle(&parent).await;
    assert!(trace(&parent.session().events()).contains(
        &"tool/result error Error: subagent run failed: Error: snapshot published run failed; dispose failed: Error: snapshot published handle disposal failed".to_string()
    ));
    assert_eq!(
        trace(&parent.session().events()).last().unwrap(),
        "turn/end completed"
    );
    let child = seen.lock().unwrap()[1].clone();
    assert_eq!(trace(&child.events()), strings(&["approval/policy"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_one_shot_child_is_a_job_with_a_completion_notice() {
    let h = Harness::standard();
    h.model.script(
        "parent",
        vec![
            calls(&[(
                "b1",
                "subagent",
                json!({"description": "Background", "prompt": "child: bg", "run_in_background": true}),
            )]),
            text("WAITING"),
            calls(&[("o", "job_output", json!({"job_id": "subagent-1", "wait": true}))]),
            text("DONE"),
        ],
    );
    // The child answers only once the parent ended the turn that started it, so its
    // notice always finds the parent idle.
    let parent_cell: Arc<std::sync::OnceLock<dsh_agent::AgentRef>> = Arc::default();
    let gate = parent_cell.clone();
    h.model.script(
        "child:",
        vec![lazy(move || {
            let p = gate.get()?;
            let ended = p.session().read(|l| l.last_turn()) >= 1
                && p.status() == dsh_agent::AgentStatus::Idle;
            ended.then(|| text("BG_OK"))
        })],
    );
    let parent = h.agent();
    let _ = parent_cell.set(parent.clone());
    parent.followup(Message::user_text("parent")).unwrap();
    let sessions = h.sessions();
    let id = parent.id().to_string();
    // The notice wakes the idle parent into a second turn.
    wait_for(|| {
        sessions
            .get(&id)
            .is_some_and(|s| s.read(|l| l.last_turn()) >= 2)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    idle(&parent).await;
    let t = trace(&parent.session().events());
    assert!(
        t.contains(&"tool/result started background subagent job subagent-1".to_string()),
        "{t:?}"
    );
    assert!(
        t.iter().any(|l| l.starts_with(
            "user background job subagent-1 (subagent: Background) finished [status: completed]"
        )),
        "{t:?}"
    );
    assert!(
        t.contains(&"tool/result BG_OK\n[status: completed]".to_string()),
        "{t:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_background_and_a_missing_provider_are_clear_errors() {
    let h = Harness::new(vec![
        tool_row(
            "fg",
            json!({"provider": "fork", "toolName": "subagent_fork", "enableRunInBackground": false}),
        ),
        tool_row(
            "late",
            json!({"provider": "nobody", "toolName": "subagent_late"}),
        ),
    ]);
    h.model.script(
        "parent",
        vec![
            calls(&[
                (
                    "x",
                    "subagent_fork",
                    json!({"description": "d", "prompt": "p", "run_in_background": true}),
                ),
                (
                    "y",
                    "subagent_late",
                    json!({"description": "d", "prompt": "p"}),
                ),
            ]),
            text("OK"),
        ],
    );
    let parent = h.agent();
    parent.followup(Message::user_text("parent")).unwrap();
    idle(&parent).await;
    let t = trace(&parent.session().events());
    assert!(t.contains(&"tool/result error Error: run_in_background is switched off for this tool (enableRunInBackground: false); run the subagent in the foreground instead".to_string()), "{t:?}");
    // A row whose provider never appeared mounts no tool.
    assert!(
        t.iter()
            .any(|l| l.starts_with("tool/result error Error: unknown tool \"subagent_late\"")),
        "{t:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_failure_shows_its_diagnostic_in_the_foreground_and_in_the_job() {
    let h = Harness::new(vec![
        plain_row(
            "diagnostic",
            "@deepseek-ai/dsh-test-subagent-result-diagnostic",
            Value::Null,
        ),
        tool_row(
            "tool-subagent-codex",
            json!({"provider": "snapshot-diagnostic", "toolName": "subagent_codex", "backgroundMode": "one-shot", "maxDepth": "provider-managed"}),
        ),
    ]);
    h.model.script(
        "parent",
        vec![
            calls(&[(
                "f",
                "subagent_codex",
                json!({"description": "Foreground", "prompt": "p"}),
            )]),
            calls(&[(
                "b",
                "subagent_codex",
                json!({"description": "Background", "prompt": "p", "run_in_background": true}),
            )]),
            calls(&[(
                "o",
                "job_output",
                json!({"job_id": "subagent-1", "wait": true}),
            )]),
            text("OBSERVED"),
            text("SPARE"),
        ],
    );
    let parent = h.agent();
    parent.followup(Message::user_text("parent")).unwrap();
    idle(&parent).await;
    let t = trace(&parent.session().events());
    let claude = "Product subagent failure (product: Claude Code; stage: query-run; category: error_max_budget_usd)";
    assert!(
        t.contains(&format!(
            "tool/result error Error: subagent run failed\nDiagnostic: {claude}\nPartial output before the run ended:\npartial assistant text"
        )),
        "{t:?}"
    );
    assert!(
        t.contains(&"tool/result started background subagent job subagent-1".to_string()),
        "{t:?}"
    );
    assert!(
        t.contains(&format!(
            "tool/result (no new output)\n[status: failed, error; diagnostic: {claude}]"
        )),
        "{t:?}"
    );
    // No local child: nothing but the parent's session exists.
    assert!(h.children_of(parent.id()).is_empty());
}
