//! End-to-end: the `dsh` binary on an OpenAI Responses route selected by settings alone
//! (`llm-pi-ai` profile with `api: openai-responses`), against the mock serving
//! `POST /v1/responses`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use dsh_test_support::mock_server::{MockServer, RecordedRequest, Reply};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::Run;

/// The events as SSE, numbered by `sequence_number` as the API does.
fn sse(events: &[Value]) -> Reply {
    Reply::sse_bytes(events.iter().enumerate().map(|(n, e)| {
        let mut e = e.clone();
        e["sequence_number"] = json!(n);
        format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()).into_bytes()
    }))
}

/// A Response object with the fields the API always sends.
fn response(status: &str, usage: Option<Value>) -> Value {
    let mut r = json!({"id": "resp_1", "object": "response", "created_at": 1_760_000_000,
        "model": "gpt-test", "status": status, "output": [], "parallel_tool_calls": true,
        "tool_choice": "auto", "tools": []});
    if let Some(u) = usage {
        r["usage"] = u;
    }
    r
}

fn created() -> Value {
    json!({"type": "response.created", "response": response("in_progress", None)})
}

fn completed() -> Value {
    json!({"type": "response.completed", "response": response("completed", Some(
        json!({"input_tokens": 40, "input_tokens_details": {"cached_tokens": 8, "cache_write_tokens": 0},
               "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 2},
               "total_tokens": 45})))})
}

fn text_reply(text: &str) -> Reply {
    sse(&[
        created(),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0,
               "delta": text, "logprobs": []}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}}),
        completed(),
    ])
}

fn tool_reply() -> Reply {
    let arguments = "{\"command\": \"echo responses-ok\", \"description\": \"Echo\"}";
    sse(&[
        created(),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "reasoning", "id": "rs_7", "summary": []}}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_7", "output_index": 0,
               "summary_index": 0, "delta": "Run echo."}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"type": "reasoning", "id": "rs_7", "summary": [{"type": "summary_text", "text": "Run echo."}],
                        "encrypted_content": "enc-xyz"}}),
        json!({"type": "response.output_item.added", "output_index": 1,
               "item": {"type": "function_call", "id": "fc_7", "call_id": "call_7", "name": "bash", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_7", "output_index": 1, "delta": arguments}),
        json!({"type": "response.output_item.done", "output_index": 1,
               "item": {"type": "function_call", "id": "fc_7", "call_id": "call_7", "name": "bash", "arguments": arguments}}),
        completed(),
    ])
}

/// Title calls (no tools) get a title; a request carrying a tool output gets the final
/// answer; any other request gets the tool call.
fn respond(request: &RecordedRequest) -> Reply {
    let body = request.json.clone().unwrap_or(Value::Null);
    if body.get("tools").is_none() {
        return text_reply("Echo title");
    }
    let has_output = body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|item| item["type"] == "function_call_output");
    if has_output {
        text_reply("It printed responses-ok.")
    } else {
        tool_reply()
    }
}

#[test]
fn settings_select_the_responses_route_and_a_bash_tool_call_turn_completes() {
    let server = MockServer::start();
    server.push_all((0..6).map(|_| Reply::dynamic(respond)));
    let run = Run::new();
    run.settings(&format!(
        "agent-default-model:\n  provider: openai\n  model: gpt-test\n  reasoningEffort: high\n\
         llm-pi-ai:\n  providers:\n    openai:\n      api: openai-responses\n      baseURL: {}/v1\n\
         \x20     apiKeyEnv: OPENAI_API_KEY\n      models:\n        - id: gpt-test\n\
         \x20         contextWindow: 400000\n          maxTokens: 8192\n\
         \x20         reasoningEfforts: {{off: null, high: high}}\n",
        server.url()
    ));
    let out = run
        .base(&server)
        .env("OPENAI_API_KEY", "sk-openai-test")
        .args(["--profile", "headless", "run echo"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string()
        ),
        (Some(0), "It printed responses-ok.\n".to_string()),
        "{stderr}"
    );
    let tooled: Vec<Value> = server
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/responses")
        .filter_map(|r| r.json.clone())
        .filter(|j| j.get("tools").is_some())
        .collect();
    assert_eq!(tooled.len(), 2, "one tool step and the answer");
    for r in server.requests() {
        assert_eq!(r.header("authorization"), Some("Bearer sk-openai-test"));
    }
    assert_eq!(tooled[0]["reasoning"]["effort"], "high");
    assert_eq!(tooled[0]["store"], false);
    assert!(
        tooled[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["type"] == "function" && t["name"] == "bash")
    );
    let input = tooled[1]["input"].as_array().unwrap();
    let reasoning = input.iter().find(|i| i["type"] == "reasoning").unwrap();
    assert_eq!(
        (&reasoning["id"], &reasoning["encrypted_content"]),
        (&json!("rs_7"), &json!("enc-xyz")),
        "the encrypted reasoning is replayed"
    );
    let call = input.iter().find(|i| i["type"] == "function_call").unwrap();
    assert_eq!(
        (&call["call_id"], &call["name"]),
        (&json!("call_7"), &json!("bash"))
    );
    let output = input
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .unwrap();
    assert_eq!(output["call_id"], "call_7");
    assert!(
        output["output"].as_str().unwrap().contains("responses-ok"),
        "{output}"
    );
    // The stored assistant message keeps the encrypted reasoning in its replay state.
    let events = run.session();
    let stored = events.iter().find(|e| e.is("assistant/message")).unwrap();
    let source = &stored.data["message"]["source"];
    assert_eq!(source["provider"], "openai");
    assert_eq!(
        source["replayState"]["blocks"][0],
        json!({"type": "reasoning", "itemId": "rs_7", "encryptedContent": "enc-xyz"})
    );
}

#[test]
fn a_rate_limited_answer_is_retried_on_the_responses_route() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let server = MockServer::start();
    let tooled = Arc::new(AtomicUsize::new(0));
    server.push_all((0..5).map(|_| {
        let tooled = tooled.clone();
        Reply::dynamic(move |request| {
            let body = request.json.clone().unwrap_or(Value::Null);
            if body.get("tools").is_none() {
                return text_reply("Title");
            }
            if tooled.fetch_add(1, Ordering::SeqCst) == 0 {
                return Reply::http_error(
                    429,
                    json!({"error": {"message": "Rate limit reached", "type": "requests",
                                     "param": null, "code": "rate_limit_exceeded"}})
                    .to_string(),
                );
            }
            text_reply("Back again.")
        })
    }));
    let run = Run::new();
    run.settings(&format!(
        "agent-default-model:\n  provider: openai\n  model: gpt-test\n\
         llm-pi-ai:\n  providers:\n    openai:\n      api: openai-responses\n      baseURL: {}/v1\n\
         \x20     apiKeyEnv: OPENAI_API_KEY\n      models:\n        - id: gpt-test\n\
         \x20     retryPolicy:\n        mode: normal\n        backoff:\n          initialDelayMs: 10\n          maxDelayMs: 20\n",
        server.url()
    ));
    let out = run
        .base(&server)
        .env("OPENAI_API_KEY", "sk-openai-test")
        .args(["--profile", "headless", "hello"])
        .output()
        .unwrap();
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string()
        ),
        (Some(0), "Back again.\n".to_string()),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let retry = run
        .session()
        .into_iter()
        .find(|e| e.is("llm/retry"))
        .expect("a logged retry");
    assert_eq!(retry.data["failure"]["code"], "RATE_LIMIT");
    assert_eq!(retry.data["failure"]["status"], 429);
}
