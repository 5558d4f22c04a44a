//! Long sessions end to end: the `dsh` binary against the mock server on loopback with a
//! small context window. Compaction keeps an 80-step task inside the window, the compacted
//! session resumes and forks, `/compact` compacts between turns, and a provider overflow
//! is recovered by compacting and retrying the step once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::{Command, Output};
use std::sync::Arc;

use dsh_session::{Event, types};
use dsh_test_support::mock_server::{MockServer, RecordedRequest, Reply};
use serde_json::Value;

use common::Run;

const WINDOW: u64 = 16_000;
const SUMMARY: &str = "## Primary Request and Intent\n- Run the numbered print steps.\n## Key Technical Concepts\n(none)\n## Files and Code\n(none)\n## Errors and Fixes\n(none)\n## Pending Jobs\n(none)\n## Current Work\n- Printing step outputs.\n## Next Step\n- Continue with the next step.\n## Critical Context\n(none)";

/// What these tests add to [`Run`].
trait RunExt {
    fn dsh(&self, server: &MockServer, args: &[&str]) -> Output;
}

impl RunExt for Run {
    fn dsh(&self, server: &MockServer, args: &[&str]) -> Output {
        self.base(server)
            .env("DSH_CONTEXT_WINDOW", WINDOW.to_string())
            .env("DSH_PERMISSION_MODE", "danger-full-access")
            .args(args)
            .output()
            .unwrap()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

fn utf16_tokens(s: &str) -> u64 {
    (s.encode_utf16().count() as u64).div_ceil(4)
}

/// The token meter's heuristic applied to a request as sent: message texts, tool calls,
/// the system prompt and the tool schemas.
fn wire_tokens(request: &RecordedRequest) -> u64 {
    let json = request.json.as_ref().unwrap();
    let mut total = 0;
    for m in request.messages() {
        total += 4;
        for key in ["content", "reasoning_content"] {
            if let Some(s) = m.get(key).and_then(Value::as_str) {
                total += utf16_tokens(s) + 4;
            }
        }
        for call in m
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let f = &call["function"];
            total += utf16_tokens(f["name"].as_str().unwrap_or(""))
                + utf16_tokens(f["arguments"].as_str().unwrap_or(""))
                + 4;
        }
    }
    if let Some(tools) = json.get("tools") {
        total += utf16_tokens(&tools.to_string()) + 4;
    }
    total
}

fn step_call(i: usize) -> Reply {
    let args = serde_json::json!({
        "command": format!("yes step-{i:03}-0123456789abcdefghijklmnopqrstuvwxyz | head -c 6144"),
        "description": format!("print step {i}"),
    });
    Reply::tool_call(&format!("call_{i}"), "bash", &args.to_string())
}

fn count(events: &[Arc<Event>], t: &str) -> usize {
    events.iter().filter(|e| e.is(t)).count()
}

fn checkpoint_replacements(events: &[Arc<Event>]) -> usize {
    events
        .iter()
        .filter(|e| {
            e.is(types::USER_MESSAGE)
                && e.data.pointer("/source/plugin") == Some(&Value::from("compact"))
                && e.surface_op
                    .is_some_and(|op| op != dsh_session::SurfaceOp::Append)
        })
        .count()
}

#[test]
fn an_80_step_session_stays_inside_a_16k_window_and_resumes_and_forks() {
    let server = MockServer::start()
        .answer_untooled("Print steps")
        .answer_compaction(SUMMARY);
    for i in 1..=80 {
        server.push(step_call(i));
    }
    server.push(Reply::text("ALL 80 STEPS DONE"));
    let run = Run::new();
    let out = run.dsh(
        &server,
        &["--profile", "headless", "Run the 80 print steps."],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("ALL 80 STEPS DONE"),
        "{}",
        text(&out.stdout)
    );

    let id = run.only_session();
    let events = run.events(&id);
    assert_eq!(count(&events, types::TOOL_RESULT), 80);
    let summaries = count(&events, "compaction/summary");
    assert!(summaries >= 1, "at least one compaction");
    assert_eq!(checkpoint_replacements(&events), summaries);
    assert_eq!(
        count(&events, "compaction/start"),
        count(&events, "compaction/end")
    );
    assert_eq!(server.compaction_requests().len(), summaries);
    // Each summary is directly followed by its checkpoint replacement and the bracket's end.
    for (i, e) in events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.is("compaction/summary"))
    {
        assert!(
            events[i + 1].is(types::USER_MESSAGE)
                && events[i + 1].surface_op != Some(dsh_session::SurfaceOp::Append)
        );
        assert!(events[i + 2].is("compaction/end") && events[i + 2].data.get("error").is_none());
        assert_eq!(events[i + 1].source_event_seqs.as_ref().unwrap()[1], e.seq);
    }

    // No request the model received, loop or summary, was over the window.
    let requests: Vec<RecordedRequest> = server
        .requests()
        .into_iter()
        .chain(server.compaction_requests())
        .collect();
    assert_eq!(server.requests().len(), 81);
    for (i, r) in requests.iter().enumerate() {
        let tokens = wire_tokens(r);
        assert!(tokens <= WINDOW, "request {i} carries ~{tokens} tokens");
        assert!(
            r.body.len() as u64 / 4 <= WINDOW * 11 / 10,
            "request {i}: {} bytes",
            r.body.len()
        );
    }
    // The last request starts from a checkpoint, not from the first prompt.
    let last = server.requests().last().unwrap().messages().to_vec();
    let first_user = last.iter().find(|m| m["role"] == "user").unwrap();
    assert!(
        first_user["content"]
            .as_str()
            .unwrap_or("")
            .contains("<compacted-summary>"),
        "{first_user}"
    );

    // Resume: the derived history starts at the checkpoint and the turn completes.
    server.push(Reply::text("RESUMED OK"));
    let out = run.dsh(
        &server,
        &["--profile", "headless", "--resume", &id, "Anything left?"],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("RESUMED OK"));
    let resumed = server.requests().last().unwrap().clone();
    assert!(wire_tokens(&resumed) <= WINDOW);
    assert!(resumed.body.contains("<compacted-summary>"));
    assert!(
        !resumed.body.contains("step-001-"),
        "shadowed output stays out of the request"
    );

    // Fork at the end and resume the fork.
    let fork = run.dsh(&server, &["sessions", "fork", &id]);
    assert_eq!(fork.status.code(), Some(0), "{}", text(&fork.stderr));
    let child = text(&fork.stdout).trim().to_string();
    server.push(Reply::text("FORK OK"));
    let out = run.dsh(
        &server,
        &["--profile", "headless", "--resume", &child, "And the fork?"],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("FORK OK"));
    let forked = server.requests().last().unwrap().clone();
    assert!(forked.body.contains("<compacted-summary>"));
    assert!(!forked.body.contains("step-001-"));
}

#[test]
fn slash_compact_compacts_between_turns_and_records_a_failed_second_attempt() {
    let server = MockServer::start()
        .answer_untooled("Two steps")
        .answer_compaction(SUMMARY);
    server.push_all([step_call(1), step_call(2), Reply::text("FIRST DONE")]);
    let run = Run::new();
    let out = run.dsh(&server, &["--profile", "headless", "Run two steps."]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let id = run.only_session();

    let out = run.dsh(
        &server,
        &["--profile", "headless", "--resume", &id, "/compact"],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.starts_with("Compacted ") && said.contains(" history items (~"),
        "{said}"
    );
    assert_eq!(
        server.requests().len(),
        3,
        "the command never reached the model"
    );
    let events = run.events(&id);
    let start = events.iter().find(|e| e.is("compaction/start")).unwrap();
    assert_eq!(start.data["turn"], Value::Null);
    let run_event = events.iter().find(|e| e.is("command/run")).unwrap();
    assert_eq!(start.data["sourceCommandId"], run_event.data["commandId"]);
    let done = events.iter().find(|e| e.is("command/done")).unwrap();
    let summary = events.iter().find(|e| e.is("compaction/summary")).unwrap();
    assert_eq!(done.data["kind"], "success");
    assert_eq!(done.data["sourceEventSeq"], Value::from(summary.seq));

    // A second /compact would only re-summarize the checkpoint: the summary is not smaller,
    // so the attempt is recorded, the conversation is unchanged and the user is told.
    let again = run.dsh(
        &server,
        &["--profile", "headless", "--resume", &id, "/compact"],
    );
    assert_eq!(again.status.code(), Some(1));
    let both = text(&again.stdout) + &text(&again.stderr);
    assert!(
        both.contains("Compaction stopped: no usable summary came back"),
        "{both}"
    );
    let events = run.events(&id);
    let failed = events
        .iter()
        .filter(|e| e.is("compaction/end"))
        .nth(1)
        .unwrap();
    assert!(
        failed.data["error"]
            .as_str()
            .unwrap()
            .contains("not smaller"),
        "{:?}",
        failed.data
    );
    assert_eq!(checkpoint_replacements(&events), 1);

    let bad = run.dsh(
        &server,
        &["--profile", "headless", "--resume", &id, "/compact now"],
    );
    let both = text(&bad.stdout) + &text(&bad.stderr);
    assert!(both.contains("Usage: /compact (no arguments)"), "{both}");

    // A session with no history has nothing to compact and logs no compaction.
    let fresh = Run::new();
    let out = fresh.dsh(&server, &["--profile", "headless", "/compact"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "No compactable history yet.");
}

#[test]
fn a_context_overflow_compacts_and_retries_the_step_once() {
    let overflow = || {
        Reply::error_json(
            400,
            "This model's maximum context length is 16000 tokens",
            "invalid_request_error",
            None,
        )
    };
    let server = MockServer::start()
        .answer_untooled("Overflow")
        .answer_compaction(SUMMARY);
    server.push_all([
        step_call(1),
        step_call(2),
        overflow(),
        Reply::text("RECOVERED"),
    ]);
    let run = Run::new();
    let out = run.dsh(&server, &["--profile", "headless", "Run two steps."]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("RECOVERED"));
    let events = run.events(&run.only_session());
    assert_eq!(count(&events, "compaction/summary"), 1);
    let retried = server.requests().last().unwrap().clone();
    assert!(retried.body.contains("<compacted-summary>"));

    // A second overflow in the same epoch ends the turn with the provider's error.
    let server = MockServer::start()
        .answer_untooled("Overflow")
        .answer_compaction(SUMMARY);
    server.push_all([step_call(1), step_call(2), overflow(), overflow()]);
    let run = Run::new();
    let out = run.dsh(&server, &["--profile", "headless", "Run two steps."]);
    assert_eq!(out.status.code(), Some(1), "stdout: {}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("maximum context length"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_third_identical_call_gets_a_reminder_before_the_next_step() {
    let same = || {
        let args = serde_json::json!({"command": "echo same", "description": "same"});
        Reply::tool_call("call_same", "bash", &args.to_string())
    };
    let server = MockServer::start().answer_untooled("Repeat");
    server.push_all([same(), same(), same(), Reply::text("STOPPED")]);
    let run = Run::new();
    let out = run.dsh(&server, &["--profile", "headless", "Keep checking."]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    assert!(
        !requests[2].body.contains("Repeated tool call")
            && !requests[2]
                .body
                .contains("same tool call with the same arguments")
    );
    let last = requests[3].messages();
    let reminder = last.last().unwrap();
    assert_eq!(reminder["role"], "user");
    assert!(
        reminder["content"]
            .as_str()
            .unwrap()
            .contains("the same tool call with the same arguments several times"),
        "{reminder}"
    );
    let events = run.events(&run.only_session());
    let logged = events
        .iter()
        .find(|e| {
            e.is(types::USER_MESSAGE)
                && e.data.pointer("/source/plugin") == Some(&Value::from("repeat-tool-reminder"))
        })
        .expect("the reminder is logged before the step that sees it");
    assert_eq!(logged.data["source"]["summary"], "bash \u{d7} 3");
}

#[test]
fn the_model_title_request_follows_the_first_request_context() {
    let server = MockServer::start().answer_untooled("A title");
    server.push(Reply::text("HELLO"));
    let run = Run::new();
    let out = run.dsh(
        &server,
        &["--profile", "headless", "Say hello to the world please."],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let events = run.events(&run.only_session());
    let at = |t: &str| {
        events
            .iter()
            .position(|e| e.is(t))
            .unwrap_or_else(|| panic!("no {t}"))
    };
    let (fallback, header, context, request, chunk) = (
        at(types::SESSION_TITLE),
        at(types::REQUEST_HEADER),
        at(types::REQUEST_CONTEXT),
        at("session/title-llm-request"),
        at(types::ASSISTANT_CHUNK),
    );
    assert!(
        fallback < header && header < context,
        "{fallback} {header} {context}"
    );
    assert_eq!(
        request,
        context + 1,
        "the title request lands right after request/context"
    );
    assert!(request < chunk);
    let provider_title = events
        .iter()
        .rposition(|e| {
            e.is(types::SESSION_TITLE)
                && e.data.pointer("/source/kind") == Some(&Value::from("provider"))
        })
        .expect("the provider title is recorded");
    assert!(provider_title > request);
}

#[test]
fn a_failing_summary_leaves_the_session_uncompacted_and_usable() {
    // Summary calls get an empty answer: every attempt fails, is recorded, and the turn
    // goes on with the full history (retried at the next step).
    let server = MockServer::start()
        .answer_untooled("Failing summaries")
        .answer_compaction("");
    for i in 1..=14 {
        server.push(step_call(i));
    }
    server.push(Reply::text("FINISHED ANYWAY"));
    let run = Run::new();
    let out = run.dsh(&server, &["--profile", "headless", "Run the print steps."]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("FINISHED ANYWAY"));
    let events = run.events(&run.only_session());
    let ends: Vec<&Arc<Event>> = events.iter().filter(|e| e.is("compaction/end")).collect();
    assert!(
        ends.len() >= 2,
        "attempted again at a later step: {}",
        ends.len()
    );
    assert!(ends.iter().all(|e| e.data.get("error").is_some()));
    assert_eq!(count(&events, "compaction/summary"), 0);
    assert_eq!(checkpoint_replacements(&events), 0);
    assert_eq!(server.compaction_requests().len(), ends.len());
}

#[test]
fn a_bad_context_window_override_is_a_clear_usage_error() {
    let server = MockServer::start();
    let run = Run::new();
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", run.home.path())
        .env("DSH_HOME", run.home.path().join(".dsh"))
        .env("DEEPSEEK_API_KEY", "sk-test")
        .env("DEEPSEEK_BASE_URL", server.url())
        .env("DSH_CONTEXT_WINDOW", "16k")
        .current_dir(run.work.path())
        .args(["--profile", "headless", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("DSH_CONTEXT_WINDOW must be a positive integer (got \"16k\")"),
        "{}",
        text(&out.stderr)
    );
    assert!(server.requests().is_empty());
}
