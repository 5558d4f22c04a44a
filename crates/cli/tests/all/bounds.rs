//! End-to-end fault tests of the bounds on one model response and on one turn, through the
//! `dsh` binary against the mock LLM: response bytes (`maxResponseBytes`, every protocol),
//! tool calls per response, steps per turn and identical failing calls (`agent-loop`), and
//! the honesty of a turn's end (a `length` finish, a provider's error sent mid-stream).
//! Each bound must end the turn with an error naming the limit and its setting, keep the
//! session log complete (nothing recorded is lost) and leave the session resumable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dsh_session::{Event, types};
use dsh_test_support::mock_server::{
    MockServer, RecordedRequest, Reply, Step, ToolCall, sse_event, sse_head,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::{Run, loop_requests, stderr};

/// What these tests add to [`Run`].
trait RunExt {
    fn headless(&self, server: &MockServer, args: &[&str], env: &[(&str, &str)]) -> Output;
    fn loop_patch(&self, config: &str) -> String;
}

impl RunExt for Run {
    fn headless(&self, server: &MockServer, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = self.base(server);
        c.arg("--profile").arg("headless").args(args);
        c.envs(env.iter().copied());
        c.output().unwrap()
    }

    /// Writes an agent-loop patch and returns its `--patch` path.
    fn loop_patch(&self, config: &str) -> String {
        let path = self.work.path().join("loop.yml");
        std::fs::write(
            &path,
            format!("- id: agent-loop\n  config:\n    agents: []\n{config}"),
        )
        .unwrap();
        path.display().to_string()
    }
}

/// The last `turn/end` reason of `events`.
fn last_reason(events: &[Arc<Event>]) -> Value {
    events
        .iter()
        .rev()
        .find(|e| e.is(types::TURN_END))
        .expect("a closed turn")
        .data["reason"]
        .clone()
}

fn count(events: &[Arc<Event>], kind: &str) -> usize {
    events.iter().filter(|e| e.is(kind)).count()
}

/// Every `tool/call` of the log has its `tool/result` (the log closes every call).
fn assert_every_call_has_a_result(events: &[Arc<Event>]) {
    assert_eq!(
        count(events, types::TOOL_CALL),
        count(events, types::TOOL_RESULT),
        "every call has its result"
    );
}

// ----------------------------------------------------------------------------------------
// maxResponseBytes

const LIMIT: usize = 256 << 10;
/// Far past the limit: a provider that would not stop on its own within the test.
const ENDLESS: usize = 64 << 20;

fn assert_stopped_at_the_limit(run: &Run, out: &Output, server: &MockServer, setting: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("dsh: RESPONSE_TOO_LARGE: ")
            && err.contains("larger than 256 KiB (262144 bytes)")
            && err.contains(&format!("maxResponseBytes {setting}")),
        "{err}"
    );
    let events = run.session();
    let reason = last_reason(&events);
    assert_eq!(reason["kind"], "error");
    assert_eq!(reason["error"]["code"], "RESPONSE_TOO_LARGE");
    assert_eq!(
        count(&events, types::ASSISTANT_MESSAGE),
        0,
        "nothing of it is used"
    );
    assert_eq!(loop_requests(server).len(), 1, "not retried");
    // The server saw the client hang up long before its 64 MiB were out.
    server.wait_for_early_disconnects(1, std::time::Duration::from_secs(30));
}

#[test]
fn an_endless_chat_completions_answer_is_stopped_at_max_response_bytes() {
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::oversized_text(ENDLESS));
    let run = Run::new();
    run.settings(&format!("llm-deepseek:\n  maxResponseBytes: {LIMIT}\n"));
    let out = run.headless(&server, &["talk"], &[]);
    assert_stopped_at_the_limit(&run, &out, &server, "in the llm-deepseek settings");
    // The session goes on: the next run answers normally.
    server.push(Reply::text("short this time"));
    let id = run.only_session();
    let out = run.headless(&server, &["--session-id", &id, "again"], &[]);
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string()
        ),
        (Some(0), "short this time\n".to_string()),
        "{}",
        stderr(&out)
    );
}

/// A reply in SSE events named by their `type` (Messages and Responses framing).
fn typed(event: &Value) -> Vec<u8> {
    format!(
        "event: {}\ndata: {event}\n\n",
        event["type"].as_str().unwrap()
    )
    .into_bytes()
}

fn anthropic_text(text: &str) -> Vec<Value> {
    vec![
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude-test", "content": [], "usage": {"input_tokens": 4, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ]
}

fn anthropic_settings(server: &MockServer, extra: &str) -> String {
    format!(
        "agent-default-model:\n  provider: anthropic\n  model: claude-test\n\
         llm-pi-ai:\n  providers:\n    anthropic:\n      baseURL: {}\n\
         \x20     apiKeyEnv: ANTHROPIC_API_KEY\n      models:\n        - id: claude-test\n{extra}",
        server.url()
    )
}

/// Untooled (title) requests get a short answer in the protocol's own framing.
fn with_titles(server: MockServer, title: Vec<Value>) -> MockServer {
    server.answer_untooled_with(move |_| Reply::sse_bytes(title.iter().map(typed)))
}

#[test]
fn an_endless_anthropic_answer_is_stopped_at_max_response_bytes() {
    let server = with_titles(MockServer::start(), anthropic_text("Title"));
    let events = anthropic_text("x");
    let delta = typed(&json!({"type": "content_block_delta", "index": 0,
        "delta": {"type": "text_delta", "text": "y".repeat(1000)}}));
    let mut steps = vec![
        sse_head(),
        Step::Bytes(typed(&events[0])),
        Step::Bytes(typed(&events[1])),
    ];
    steps.push(Step::Repeat {
        times: ENDLESS / delta.len(),
        bytes: delta,
    });
    steps.extend(events[3..].iter().map(|e| Step::Bytes(typed(e))));
    server.push(Reply::steps(steps));
    let run = Run::new();
    run.settings(&anthropic_settings(
        &server,
        &format!("      maxResponseBytes: {LIMIT}\n"),
    ));
    let out = run.headless(&server, &["talk"], &[("ANTHROPIC_API_KEY", "sk-ant")]);
    assert_stopped_at_the_limit(
        &run,
        &out,
        &server,
        "of provider \"anthropic\" in the llm-pi-ai settings",
    );
}

fn responses_settings(server: &MockServer, extra: &str) -> String {
    format!(
        "agent-default-model:\n  provider: openai\n  model: gpt-test\n\
         llm-pi-ai:\n  providers:\n    openai:\n      api: openai-responses\n      baseURL: {}/v1\n\
         \x20     apiKeyEnv: OPENAI_API_KEY\n      models:\n        - id: gpt-test\n{extra}",
        server.url()
    )
}

fn responses_text(text: &str) -> Vec<Value> {
    vec![
        json!({"type": "response.created", "response": {"id": "resp_1", "model": "gpt-test", "status": "in_progress"}}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": text}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"type": "message", "id": "msg_1", "role": "assistant",
                        "content": [{"type": "output_text", "text": text}]}}),
        json!({"type": "response.completed", "response": {"id": "resp_1", "model": "gpt-test", "status": "completed",
               "usage": {"input_tokens": 4, "output_tokens": 5}}}),
    ]
}

#[test]
fn an_endless_responses_answer_is_stopped_at_max_response_bytes() {
    let server = with_titles(MockServer::start(), responses_text("Title"));
    let events = responses_text("x");
    let delta = typed(
        &json!({"type": "response.output_text.delta", "item_id": "msg_1",
        "output_index": 0, "content_index": 0, "delta": "y".repeat(1000)}),
    );
    let mut steps = vec![
        sse_head(),
        Step::Bytes(typed(&events[0])),
        Step::Bytes(typed(&events[1])),
    ];
    steps.push(Step::Repeat {
        times: ENDLESS / delta.len(),
        bytes: delta,
    });
    steps.extend(events[3..].iter().map(|e| Step::Bytes(typed(e))));
    server.push(Reply::steps(steps));
    let run = Run::new();
    run.settings(&responses_settings(
        &server,
        &format!("      maxResponseBytes: {LIMIT}\n"),
    ));
    let out = run.headless(&server, &["talk"], &[("OPENAI_API_KEY", "sk-oa")]);
    assert_stopped_at_the_limit(
        &run,
        &out,
        &server,
        "of provider \"openai\" in the llm-pi-ai settings",
    );
}

#[test]
fn an_openai_compatible_route_has_the_bound_too() {
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::oversized_text(ENDLESS));
    let run = Run::new();
    run.settings(&format!(
        "agent-default-model:\n  provider: local\n  model: m\n\
         openai-compatible:\n  providers:\n    local:\n      baseURL: {}\n\
         \x20     models:\n        - id: m\n      maxResponseBytes: {LIMIT}\n",
        server.url()
    ));
    // A settings section is all it takes: every profile mounts the adapter.
    let out = run.headless(&server, &["talk"], &[]);
    assert_stopped_at_the_limit(
        &run,
        &out,
        &server,
        "of provider \"local\" in the openai-compatible settings",
    );
}

#[test]
fn a_bad_max_response_bytes_is_a_config_error_naming_the_key() {
    let server = MockServer::start();
    let run = Run::new();
    run.settings("llm-deepseek:\n  maxResponseBytes: 0\n");
    let out = run.headless(&server, &["talk"], &[]);
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("llm-deepseek: maxResponseBytes must be a positive integer"),
        "{err}"
    );
    assert!(server.requests().is_empty());
}

// ----------------------------------------------------------------------------------------
// maxToolCallsPerResponse

#[test]
fn a_response_with_too_many_tool_calls_runs_none_of_them() {
    let server = MockServer::start().answer_untooled("Mock title");
    let calls: Vec<ToolCall> = (0..5)
        .map(|i| {
            ToolCall::new(
                &format!("c{i}"),
                "bash",
                &json!({"command": format!("touch ran-{i}"), "description": "Touch"}).to_string(),
            )
        })
        .collect();
    server.push(Reply::tool_calls(calls));
    let run = Run::new();
    let patch = run.loop_patch("    maxToolCallsPerResponse: 3\n");
    let out = run.headless(&server, &["--patch", &patch, "go wide"], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("dsh: TOO_MANY_TOOL_CALLS: the model asked for more than 3 tool calls")
            && err.contains("maxToolCallsPerResponse of @deepseek-ai/dsh-agent-loop"),
        "{err}"
    );
    let events = run.session();
    assert_eq!(last_reason(&events)["error"]["code"], "TOO_MANY_TOOL_CALLS");
    assert_eq!(count(&events, types::TOOL_CALL), 0, "no call ran");
    assert_eq!(count(&events, types::ASSISTANT_MESSAGE), 0);
    for i in 0..5 {
        assert!(!run.work.path().join(format!("ran-{i}")).exists());
    }
    assert_eq!(loop_requests(&server).len(), 1);
}

#[test]
fn the_default_tool_call_bound_stops_a_flood_early() {
    let server = MockServer::start().answer_untooled("Mock title");
    let calls: Vec<ToolCall> = (0..2000)
        .map(|i| ToolCall::new(&format!("c{i}"), "teleport", "{}"))
        .collect();
    server.push(Reply::tool_calls(calls));
    let run = Run::new();
    let out = run.headless(&server, &["flood"], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("more than 256 tool calls"), "{err}");
    let events = run.session();
    assert_eq!(count(&events, types::TOOL_CALL), 0);
    // The stream was abandoned at the 257th call, not read to its end.
    let chunks = count(&events, types::ASSISTANT_CHUNK);
    assert!(chunks < 2000, "{chunks} chunks logged");
}

// ----------------------------------------------------------------------------------------
// maxStepsPerTurn

/// A model that calls `echo` forever (a new call id each time); after `cap` requests it
/// gives up with a text answer so a missing bound fails the test instead of hanging it.
fn endless_echo(cap: usize) -> impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static {
    let n = AtomicUsize::new(0);
    move |_| {
        let i = n.fetch_add(1, Ordering::SeqCst);
        if i >= cap {
            return Reply::text("gave up");
        }
        Reply::tool_call(
            &format!("call-{i}"),
            "bash",
            &json!({"command": format!("echo step {i}"), "description": "Echo"}).to_string(),
        )
    }
}

#[test]
fn a_turn_stops_at_max_steps_per_turn_and_the_session_resumes() {
    let server = MockServer::start()
        .answer_untooled("Mock title")
        .respond_with(endless_echo(50));
    let run = Run::new();
    let patch = run.loop_patch("    maxStepsPerTurn: 3\n");
    let out = run.headless(&server, &["--patch", &patch, "loop"], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("dsh: STEP_LIMIT: the turn was stopped after 3 steps")
            && err.contains("maxStepsPerTurn of @deepseek-ai/dsh-agent-loop"),
        "{err}"
    );
    assert_eq!(loop_requests(&server).len(), 3);
    let id = run.only_session();
    let events = run.events(&id);
    assert_eq!(count(&events, types::STEP_START), 3);
    assert_eq!(count(&events, types::STEP_END), 3);
    assert_every_call_has_a_result(&events);
    assert_eq!(last_reason(&events)["error"]["code"], "STEP_LIMIT");
    // The bound is per turn: the resumed session runs a new turn (and sees every result).
    let out = run.headless(
        &server,
        &["--patch", &patch, "--session-id", &id, "go on"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let requests = loop_requests(&server);
    assert_eq!(requests.len(), 6);
    let tool_messages = requests[3]
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .count();
    assert_eq!(tool_messages, 3, "the first turn's results reach the model");
}

#[test]
fn a_bad_loop_bound_is_a_config_error_naming_the_key() {
    let server = MockServer::start();
    let run = Run::new();
    let patch = run.loop_patch("    maxStepsPerTurn: 0\n");
    let out = run.headless(&server, &["--patch", &patch, "x"], &[]);
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("@deepseek-ai/dsh-agent-loop: maxStepsPerTurn must be a positive integer"),
        "{err}"
    );
}

// ----------------------------------------------------------------------------------------
// maxIdenticalFailingCalls

#[test]
fn the_same_malformed_call_repeated_ends_the_turn() {
    let n = Arc::new(AtomicUsize::new(0));
    let counter = n.clone();
    let server = MockServer::start()
        .answer_untooled("Mock title")
        .respond_with(move |_| {
            let i = counter.fetch_add(1, Ordering::SeqCst);
            if i >= 40 {
                return Reply::text("gave up");
            }
            Reply::tool_call(&format!("bad-{i}"), "bash", "{\"command\": \"echo hi\"")
        });
    let run = Run::new();
    let out = run.headless(&server, &["loop on bad arguments"], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(
            "dsh: REPEATED_FAILING_CALL: the model called bash with the same arguments 5 times in a row"
        ) && err.contains("maxIdenticalFailingCalls of @deepseek-ai/dsh-agent-loop")
            && err.contains("last error: "),
        "{err}"
    );
    assert_eq!(
        loop_requests(&server).len(),
        5,
        "stopped after the fifth failure"
    );
    let events = run.session();
    assert_every_call_has_a_result(&events);
    assert_eq!(count(&events, types::TOOL_RESULT), 5);
    assert_eq!(
        last_reason(&events)["error"]["code"],
        "REPEATED_FAILING_CALL"
    );
}

#[test]
fn a_different_call_in_between_restarts_the_count() {
    // fail, fail, succeed, fail, fail, fail, then a text answer: never five in a row.
    let bad = || Reply::tool_call("x", "bash", "{not json");
    let script = [
        bad(),
        bad(),
        Reply::tool_call(
            "ok",
            "bash",
            &json!({"command": "echo fine", "description": "Echo"}).to_string(),
        ),
        bad(),
        bad(),
        bad(),
        Reply::text("done"),
    ];
    let server = MockServer::start().answer_untooled("Mock title");
    server.push_all(script);
    let run = Run::new();
    let patch = run.loop_patch("    maxIdenticalFailingCalls: 4\n");
    let out = run.headless(&server, &["--patch", &patch, "mixed"], &[]);
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string()
        ),
        (Some(0), "done\n".to_string()),
        "{}",
        stderr(&out)
    );
}

// ----------------------------------------------------------------------------------------
// Honest endings

#[test]
fn a_length_finish_says_what_happened_and_which_setting_to_change() {
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::max_tokens("The first half of the ans"));
    let run = Run::new();
    let out = run.headless(&server, &["write a lot"], &[]);
    let err = stderr(&out);
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string()
        ),
        (Some(1), "The first half of the ans\n".to_string()),
        "{err}"
    );
    let id = run.only_session();
    assert_eq!(
        err.trim_end(),
        format!(
            "dsh: the model stopped at its output limit of 256000 tokens (deepseek-official / \
             deepseek-flash) before finishing, so the answer is cut short (what it wrote is \
             kept in the session). Raise maxTokens for the model in the llm-deepseek section of \
             the settings, or let it go on with: dsh headless --session-id {id} \"continue\""
        )
    );
    assert_eq!(last_reason(&run.events(&id)), json!({"kind": "max-tokens"}));
}

fn assert_provider_text_reaches_the_user(run: &Run, out: &Output, code: &str, text: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end(), format!("dsh: {code}: {text}"));
    let reason = last_reason(&run.session());
    assert_eq!(reason["error"]["code"], code);
    assert_eq!(reason["error"]["message"], text);
}

#[test]
fn a_chat_completions_error_sent_mid_stream_reaches_the_user() {
    let text = "Upstream model crashed while generating; request id abc-123";
    let payloads = dsh_test_support::mock_server::Completion::text("Hello").payloads();
    let mut steps = vec![sse_head()];
    steps.extend(payloads[..3].iter().map(|p| sse_event(p)));
    steps.push(sse_event(
        &json!({"error": {"message": text, "type": "invalid_request_error", "code": null}})
            .to_string(),
    ));
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::steps(steps));
    let run = Run::new();
    // The DeepSeek route on chat completions (its default is the Messages API).
    run.settings("llm-deepseek:\n  api: openai-completions\n");
    let out = run.headless(&server, &["hi"], &[]);
    assert_provider_text_reaches_the_user(&run, &out, "INVALID_REQUEST", text);
}

#[test]
fn an_anthropic_error_event_reaches_the_user() {
    let text = "Output blocked by the provider's content policy (ref 77)";
    let events = anthropic_text("Hel");
    let server = with_titles(MockServer::start(), anthropic_text("Title"));
    let mut steps = vec![sse_head()];
    steps.extend(events[..3].iter().map(|e| Step::Bytes(typed(e))));
    steps.push(Step::Bytes(typed(
        &json!({"type": "error", "error": {"type": "invalid_request_error", "message": text}}),
    )));
    server.push(Reply::steps(steps));
    let run = Run::new();
    run.settings(&anthropic_settings(&server, ""));
    let out = run.headless(&server, &["hi"], &[("ANTHROPIC_API_KEY", "sk-ant")]);
    assert_provider_text_reaches_the_user(&run, &out, "INVALID_REQUEST", text);
}

#[test]
fn a_failed_responses_stream_reaches_the_user() {
    let text = "The prompt was flagged as invalid by the provider (ref 99)";
    let events = responses_text("Hel");
    let server = with_titles(MockServer::start(), responses_text("Title"));
    let mut steps = vec![sse_head()];
    steps.extend(events[..3].iter().map(|e| Step::Bytes(typed(e))));
    steps.push(Step::Bytes(typed(
        &json!({"type": "response.failed", "response": {
        "id": "resp_1", "status": "failed", "error": {"code": "invalid_prompt", "message": text}}}),
    )));
    server.push(Reply::steps(steps));
    let run = Run::new();
    run.settings(&responses_settings(&server, ""));
    let out = run.headless(&server, &["hi"], &[("OPENAI_API_KEY", "sk-oa")]);
    assert_provider_text_reaches_the_user(&run, &out, "INVALID_REQUEST", text);
}
