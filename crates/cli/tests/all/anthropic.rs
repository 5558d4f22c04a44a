//! End-to-end: the `dsh` binary on an Anthropic Messages route selected by settings alone
//! (`llm-pi-ai` profile with `api: anthropic-messages`), against the mock serving
//! `POST /v1/messages`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use dsh_test_support::mock_server::{MockServer, RecordedRequest, Reply};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::Run;

fn sse(events: &[Value]) -> Reply {
    Reply::sse_bytes(
        events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()).into_bytes()),
    )
}

fn start() -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-test", "content": [],
        "usage": {"input_tokens": 40, "output_tokens": 1, "cache_creation_input_tokens": 500,
                  "cache_read_input_tokens": 0}}})
}

fn text_reply(text: &str) -> Reply {
    sse(&[
        start(),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ])
}

fn tool_reply() -> Reply {
    sse(&[
        start(),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Run echo."}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig-xyz"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_9", "name": "bash", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"command\": \"echo anthropic-ok\", \"description\": \"Echo\"}"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}),
        json!({"type": "message_stop"}),
    ])
}

/// Title calls (no tools) get a title; a request carrying a tool result gets the final
/// answer; any other request gets the tool call.
fn respond(request: &RecordedRequest) -> Reply {
    let body = request.json.clone().unwrap_or(Value::Null);
    if body.get("tools").is_none() {
        return text_reply("Echo title");
    }
    let has_result = body["messages"].as_array().into_iter().flatten().any(|m| {
        m["content"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|b| b["type"] == "tool_result")
    });
    if has_result {
        text_reply("It printed anthropic-ok.")
    } else {
        tool_reply()
    }
}

#[test]
fn settings_select_the_anthropic_route_and_a_tool_call_turn_completes() {
    let server = MockServer::start();
    server.push_all((0..6).map(|_| Reply::dynamic(respond)));
    let run = Run::new();
    run.settings(&format!(
        "agent-default-model:\n  provider: anthropic\n  model: claude-test\n\
         llm-pi-ai:\n  providers:\n    anthropic:\n      api: anthropic-messages\n      baseURL: {}\n\
         \x20     apiKeyEnv: ANTHROPIC_API_KEY\n      models:\n        - id: claude-test\n\
         \x20         contextWindow: 200000\n          maxTokens: 8192\n",
        server.url()
    ));
    let out = run
        .base(&server)
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .args(["--profile", "headless", "run echo"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string()
        ),
        (Some(0), "It printed anthropic-ok.\n".to_string()),
        "{stderr}"
    );
    let tooled: Vec<Value> = server
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/messages")
        .filter_map(|r| r.json.clone())
        .filter(|j| j.get("tools").is_some())
        .collect();
    assert_eq!(tooled.len(), 2, "one tool step and the answer");
    for r in server.requests() {
        assert_eq!(r.header("x-api-key"), Some("sk-ant-test"));
        assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    }
    let second = &tooled[1]["messages"];
    let assistant = second
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(
        assistant["content"],
        json!([
            {"type": "thinking", "thinking": "Run echo.", "signature": "sig-xyz"},
            {"type": "tool_use", "id": "toolu_9", "name": "bash", "input": {"command": "echo anthropic-ok", "description": "Echo"}}
        ]),
        "the signed thinking is replayed"
    );
    let result = second.as_array().unwrap().last().unwrap();
    assert_eq!(result["content"][0]["type"], "tool_result");
    assert_eq!(result["content"][0]["tool_use_id"], "toolu_9");
    assert!(
        result["content"][0].to_string().contains("anthropic-ok"),
        "{result}"
    );
    // The stored assistant message keeps the signature in its replay state.
    let events = run.session();
    let stored = events.iter().find(|e| e.is("assistant/message")).unwrap();
    let source = &stored.data["message"]["source"];
    assert_eq!(source["provider"], "anthropic");
    assert_eq!(
        source["replayState"]["blocks"][0],
        json!({"type": "reasoning", "signature": "sig-xyz"})
    );
}

#[test]
fn an_overloaded_answer_is_retried_on_the_anthropic_route() {
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
                    529,
                    json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
                        .to_string(),
                );
            }
            text_reply("Back again.")
        })
    }));
    let run = Run::new();
    run.settings(&format!(
        "agent-default-model:\n  provider: anthropic\n  model: claude-test\n\
         llm-pi-ai:\n  providers:\n    anthropic:\n      baseURL: {}\n\
         \x20     apiKeyEnv: ANTHROPIC_API_KEY\n      models:\n        - id: claude-test\n\
         \x20     retryPolicy:\n        mode: normal\n        backoff:\n          initialDelayMs: 10\n          maxDelayMs: 20\n",
        server.url()
    ));
    let out = run
        .base(&server)
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
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
    assert_eq!(retry.data["failure"]["code"], "SERVER");
    assert_eq!(retry.data["failure"]["status"], 529);
}
