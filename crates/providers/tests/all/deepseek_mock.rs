//! End-to-end: the DeepSeek adapter against the mock chat-completions server, through the
//! runtime's final adapter boundary (`adapter_stream`), asserting exact chunk sequences.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_llm::{GenerateOptions, LlmAdapter, LlmCallConfig, Message, ToolSchema, adapter_stream};
use dsh_providers::{DEEPSEEK_ROUTE, DeepSeekAdapter, DeepSeekConfig, ProviderDeps};
use dsh_test_support::mock_server::{Completion, Gate, MockServer, Reply, ToolCall, Usage};
use futures::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn adapter(server: &MockServer, idle_timeout_ms: Option<u64>) -> Arc<DeepSeekAdapter> {
    let config = DeepSeekConfig {
        base_url: Some(server.url()),
        stream_idle_timeout_ms: idle_timeout_ms,
        ..DeepSeekConfig::default()
    };
    let deps = ProviderDeps::new(Arc::new(|reference: &str| {
        (reference == "DEEPSEEK_API_KEY").then(|| "sk-test".to_string())
    }));
    Arc::new(DeepSeekAdapter::new(config, deps).expect("valid config"))
}

fn options() -> GenerateOptions {
    let mut config = LlmCallConfig::route(DEEPSEEK_ROUTE, "deepseek-v4-flash");
    config.max_tokens = Some(256_000);
    config.reasoning_effort = Some("high".into());
    let mut options = GenerateOptions::new(config, vec![Arc::new(Message::user_text("Say hello"))]);
    options.system = Some("You are dsh.".into());
    options.session_id = Some("sess-1".into());
    options
}

/// Runs one call to completion and returns every chunk as JSON.
async fn run(adapter: Arc<DeepSeekAdapter>, options: GenerateOptions) -> Vec<Value> {
    let adapter: Arc<dyn LlmAdapter> = adapter;
    adapter_stream(Some(adapter), Arc::new(options))
        .map(|item| {
            serde_json::to_value(item.expect("adapter failures become finish chunks"))
                .expect("json")
        })
        .collect()
        .await
}

fn error_finish(failure: Value) -> Value {
    json!({"type": "finish", "reason": {"kind": "error", "failure": failure}})
}

#[tokio::test]
async fn text_answer_streams_deltas_then_block_end_usage_finish() {
    let server = MockServer::with_replies([Reply::completion(
        Completion::text("Hello, world!").usage(Some(Usage::new(30, 4).cache_hits(20))),
    )]);
    let chunks = run(adapter(&server, None), options()).await;
    assert_eq!(
        chunks,
        vec![
            json!({"type": "block-start", "index": 0, "blockType": "text"}),
            json!({"type": "text-delta", "index": 0, "text": "Hel"}),
            json!({"type": "text-delta", "index": 0, "text": "lo,"}),
            json!({"type": "text-delta", "index": 0, "text": " wo"}),
            json!({"type": "text-delta", "index": 0, "text": "rld"}),
            json!({"type": "text-delta", "index": 0, "text": "!"}),
            json!({"type": "block-end", "index": 0, "block": {"type": "text", "text": "Hello, world!"}}),
            json!({"type": "usage", "usage": {"inputTokens": 10, "outputTokens": 4, "cacheReadTokens": 20}}),
            json!({"type": "finish", "reason": {"kind": "stop"}}),
        ]
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/chat/completions")
    );
    let headers: Vec<(&str, &str)> = request
        .headers
        .iter()
        .filter(|(n, _)| !matches!(n.as_str(), "host" | "content-length"))
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let user_agent = dsh_providers::user_agent();
    assert_eq!(
        headers,
        vec![
            ("authorization", "Bearer sk-test"),
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
            ("user-agent", user_agent.as_str()),
            ("x-deepseek-harness-session-id", "sess-1"),
        ]
    );
    assert_eq!(
        request.body,
        r#"{"model":"deepseek-v4-flash","messages":[{"role":"system","content":"You are dsh."},{"role":"user","content":"Say hello"}],"stream":true,"stream_options":{"include_usage":true},"thinking":{"type":"enabled"},"reasoning_effort":"high","max_tokens":256000}"#
    );
}

#[tokio::test]
async fn reasoning_and_tool_call_then_echoed_tool_output() {
    let server = MockServer::with_replies([
        Reply::completion(
            Completion::default()
                .reasoning("Run it.")
                .tool_call(ToolCall::new(
                    "call_00_x",
                    "bash",
                    r#"{"command": "echo OK"}"#,
                ))
                .usage(Some(Usage::new(2877, 90).cache_hits(0).reasoning(18))),
        ),
        Reply::echo_tool_output(),
    ]);
    let adapter = adapter(&server, None);
    let mut first = options();
    first.tools = Some(vec![ToolSchema {
        name: "bash".into(),
        description: "Run a shell command".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}).into(),
    }]);
    let chunks = run(adapter.clone(), first.clone()).await;
    assert_eq!(
        chunks,
        vec![
            json!({"type": "block-start", "index": 0, "blockType": "reasoning"}),
            json!({"type": "reasoning-delta", "index": 0, "text": "Run"}),
            json!({"type": "reasoning-delta", "index": 0, "text": " it"}),
            json!({"type": "reasoning-delta", "index": 0, "text": "."}),
            json!({"type": "block-start", "index": 1, "blockType": "tool-call"}),
            json!({"type": "tool-call-delta", "index": 1, "id": "call_00_x", "name": "bash", "argumentsDelta": ""}),
            json!({"type": "tool-call-delta", "index": 1, "id": "call_00_x", "name": "bash", "argumentsDelta": "{\"comm"}),
            json!({"type": "tool-call-delta", "index": 1, "id": "call_00_x", "name": "bash", "argumentsDelta": "and\": "}),
            json!({"type": "tool-call-delta", "index": 1, "id": "call_00_x", "name": "bash", "argumentsDelta": "\"echo "}),
            json!({"type": "tool-call-delta", "index": 1, "id": "call_00_x", "name": "bash", "argumentsDelta": "OK\"}"}),
            json!({"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "Run it."}}),
            json!({"type": "block-end", "index": 1, "block": {"type": "tool-call", "id": "call_00_x", "name": "bash",
            "arguments": "{\"command\": \"echo OK\"}"}}),
            json!({"type": "usage", "usage": {"inputTokens": 2877, "outputTokens": 90, "cacheReadTokens": 0, "reasoningTokens": 18}}),
            json!({"type": "finish", "reason": {"kind": "tool-calls"}}),
        ]
    );

    // Second step: history with the assistant turn (reasoning passback) and the tool result.
    let mut second = first;
    second.messages.push(Arc::new(Message::assistant(
        vec![
            dsh_llm::ContentBlock::Reasoning {
                text: "Run it.".into(),
            },
            dsh_llm::ContentBlock::ToolCall {
                id: "call_00_x".into(),
                name: "bash".into(),
                arguments: "{\"command\": \"echo OK\"}".into(),
            },
        ],
        DEEPSEEK_ROUTE,
        "deepseek-v4-flash",
        None,
    )));
    second.messages.push(Arc::new(Message::tool_result(
        "call_00_x",
        vec![dsh_llm::ContentBlock::text("OK\n")],
        false,
    )));
    let chunks = run(adapter, second).await;
    assert_eq!(
        chunks,
        vec![
            json!({"type": "block-start", "index": 0, "blockType": "text"}),
            json!({"type": "text-delta", "index": 0, "text": "OK\n"}),
            json!({"type": "block-end", "index": 0, "block": {"type": "text", "text": "OK\n"}}),
            json!({"type": "usage", "usage": {"inputTokens": 12, "outputTokens": 8}}),
            json!({"type": "finish", "reason": {"kind": "stop"}}),
        ]
    );
    let requests = server.requests();
    assert_eq!(
        requests[1].messages()[2..],
        [
            json!({"role": "assistant", "content": "", "reasoning_content": "Run it.", "tool_calls": [
            {"id": "call_00_x", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"echo OK\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "call_00_x", "content": "OK\n"}),
        ]
    );
    assert_eq!(
        requests[0].json.as_ref().map(|j| j["tools"].clone()),
        Some(json!([{"type": "function", "function": {
        "name": "bash", "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]))
    );
}

#[tokio::test]
async fn http_401_is_auth() {
    let server = MockServer::with_replies([Reply::error_json(
        401,
        "Authentication Fails, Your api key: ****test is invalid",
        "authentication_error",
        Some("invalid_request_error"),
    )]);
    let chunks = run(adapter(&server, None), options()).await;
    assert_eq!(
        chunks,
        vec![error_finish(json!({
        "message": "Authentication Fails, Your api key: ****test is invalid", "code": "AUTH", "status": 401}))]
    );
}

#[tokio::test]
async fn http_429_carries_retry_after_and_request_id() {
    let server =
        MockServer::with_replies([Reply::rate_limited(3).with_header("x-request-id", "req-42")]);
    let chunks = run(adapter(&server, None), options()).await;
    assert_eq!(
        chunks,
        vec![error_finish(
            json!({"message": "Rate limit reached for requests", "code": "RATE_LIMIT",
        "status": 429, "providerRetryAfterMs": 3000, "requestId": "req-42"})
        )]
    );
}

#[tokio::test]
async fn http_402_insufficient_balance_is_quota_and_400_overflow_is_context_window() {
    let server = MockServer::with_replies([
        Reply::error_json(402, "Insufficient Balance", "unknown_error", None),
        Reply::error_json(
            400,
            "This model's maximum context length is 131072 tokens.",
            "invalid_request_error",
            None,
        ),
    ]);
    let adapter = adapter(&server, None);
    let quota = run(adapter.clone(), options()).await;
    assert_eq!(
        quota,
        vec![error_finish(
            json!({"message": "Insufficient Balance", "code": "QUOTA", "status": 402})
        )]
    );
    let overflow = run(adapter, options()).await;
    assert_eq!(
        overflow,
        vec![error_finish(
            json!({"message": "This model's maximum context length is 131072 tokens.",
        "code": "CONTEXT_WINDOW_EXCEEDED", "status": 400})
        )]
    );
}

#[tokio::test]
async fn http_500_with_a_non_json_body_is_server() {
    let server = MockServer::with_replies([Reply::http_error(500, "upstream exploded")]);
    let chunks = run(adapter(&server, None), options()).await;
    assert_eq!(
        chunks,
        vec![error_finish(
            json!({"message": "DeepSeek API error (HTTP 500)", "code": "SERVER", "status": 500})
        )]
    );
}

#[tokio::test]
async fn a_stall_past_the_idle_timeout_is_timeout_and_drops_the_connection() {
    let server = MockServer::with_replies([
        Reply::stall(Duration::from_secs(30)),
        Reply::stall_before_headers(Duration::from_secs(30)),
    ]);
    let adapter = adapter(&server, Some(200));
    let timeout = error_finish(
        json!({"message": "DeepSeek stream idle timeout after 200ms", "code": "TIMEOUT"}),
    );
    let started = Instant::now();
    assert_eq!(run(adapter.clone(), options()).await, vec![timeout.clone()]);
    assert_eq!(run(adapter, options()).await, vec![timeout]);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    server
        .early_disconnects_eventually(2, Duration::from_secs(10))
        .await;
}

#[tokio::test]
async fn the_idle_timer_does_not_count_consumer_time_and_rearms_per_read() {
    // Pauses shorter than the timeout between reads never trip it, however long the whole
    // stream takes, and a slow consumer is not the provider's silence.
    let server = MockServer::with_replies([Reply::text("abcdef")
        .pause_after_event(1, Duration::from_millis(150))
        .pause_after_event(2, Duration::from_millis(150))
        .pause_after_event(3, Duration::from_millis(150))]);
    let adapter: Arc<dyn LlmAdapter> = adapter(&server, Some(400));
    let mut stream = adapter_stream(Some(adapter), Arc::new(options()));
    let mut kinds = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = serde_json::to_value(chunk.expect("chunk")).expect("json");
        kinds.push(chunk["type"].as_str().unwrap_or("").to_string());
        if kinds.len() == 1 {
            tokio::time::sleep(Duration::from_millis(600)).await;
        }
    }
    assert_eq!(
        kinds,
        [
            "block-start",
            "text-delta",
            "text-delta",
            "block-end",
            "usage",
            "finish"
        ]
    );
}

#[tokio::test]
async fn a_stream_cut_mid_event_is_stream_closed_and_a_reset_is_transport() {
    let server = MockServer::with_replies([Reply::cut_mid_event(), Reply::reset_mid_event()]);
    let adapter = adapter(&server, None);
    let prefix = [
        json!({"type": "block-start", "index": 0, "blockType": "text"}),
        json!({"type": "text-delta", "index": 0, "text": "Hel"}),
    ];
    let mut expected = prefix.to_vec();
    expected.push(error_finish(
        json!({"message": "SSE stream ended without [DONE]", "code": "STREAM_CLOSED"}),
    ));
    assert_eq!(run(adapter.clone(), options()).await, expected);
    let mut expected = prefix.to_vec();
    expected.push(error_finish(
        json!({"message": format!("DeepSeek API stream from {} failed", server.url()),
        "code": "TRANSPORT"}),
    ));
    assert_eq!(run(adapter, options()).await, expected);
}

#[tokio::test]
async fn a_malformed_json_chunk_is_malformed_response() {
    let server = MockServer::with_replies([Reply::malformed_chunk()]);
    let chunks = run(adapter(&server, None), options()).await;
    assert_eq!(
        chunks,
        vec![
            json!({"type": "block-start", "index": 0, "blockType": "text"}),
            json!({"type": "text-delta", "index": 0, "text": "Hi"}),
            error_finish(
                json!({"message": "malformed SSE payload: {\"choices\": [{\"delta\": oops}]}", "code": "MALFORMED_RESPONSE"})
            ),
        ]
    );
}

#[tokio::test]
async fn an_empty_completion_is_empty_response_after_usage() {
    let server = MockServer::with_replies([Reply::empty_completion()]);
    let chunks = run(adapter(&server, None), options()).await;
    assert_eq!(
        chunks,
        vec![
            json!({"type": "usage", "usage": {"inputTokens": 0, "outputTokens": 0}}),
            error_finish(
                json!({"message": "the model ended its response without any content", "code": "EMPTY_RESPONSE"})
            ),
        ]
    );
}

#[tokio::test]
async fn max_tokens_finish() {
    let server = MockServer::with_replies([Reply::max_tokens("cut")]);
    let chunks = run(adapter(&server, None), options()).await;
    assert_eq!(
        chunks[chunks.len() - 3..],
        [
            json!({"type": "block-end", "index": 0, "block": {"type": "text", "text": "cut"}}),
            json!({"type": "usage", "usage": {"inputTokens": 12, "outputTokens": 8}}),
            json!({"type": "finish", "reason": {"kind": "max-tokens"}}),
        ]
    );
}

#[tokio::test]
async fn cancellation_mid_stream_is_aborted_promptly_and_hangs_up() {
    let gate = Gate::new();
    let server = MockServer::with_replies([Reply::text("Hello there").hold_after_event(2, &gate)]);
    let adapter: Arc<dyn LlmAdapter> = adapter(&server, None);
    let options = Arc::new(options());
    let mut stream = adapter_stream(Some(adapter), options.clone());
    let mut chunks = Vec::new();
    while chunks.len() < 2 {
        chunks.push(
            serde_json::to_value(stream.next().await.expect("chunk").expect("ok")).expect("json"),
        );
    }
    let cancelled_at = Instant::now();
    options.cancel.cancel();
    while let Some(chunk) = stream.next().await {
        chunks.push(serde_json::to_value(chunk.expect("ok")).expect("json"));
    }
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(2),
        "{:?}",
        cancelled_at.elapsed()
    );
    assert_eq!(
        chunks,
        vec![
            json!({"type": "block-start", "index": 0, "blockType": "text"}),
            json!({"type": "text-delta", "index": 0, "text": "Hel"}),
            json!({"type": "finish", "reason": {"kind": "aborted", "failure": {
            "message": "DeepSeek request aborted by caller", "code": "ABORTED"}}}),
        ]
    );
    drop(stream);
    server
        .early_disconnects_eventually(1, Duration::from_secs(5))
        .await;
    assert!(!gate.is_open());
}

#[tokio::test]
async fn an_already_cancelled_call_sends_nothing() {
    let server = MockServer::start();
    let options = options();
    options.cancel.cancel();
    let chunks = run(adapter(&server, None), options).await;
    assert_eq!(
        chunks,
        vec![
            json!({"type": "finish", "reason": {"kind": "aborted", "failure": {
        "message": "DeepSeek request aborted by caller", "code": "ABORTED"}}})
        ]
    );
    assert_eq!(server.requests(), vec![]);
}

#[tokio::test]
async fn an_unreachable_endpoint_is_transport() {
    let server = MockServer::start();
    let url = server.url();
    let adapter = adapter(&server, None);
    drop(server);
    let chunks = run(adapter, options()).await;
    assert_eq!(
        chunks,
        vec![error_finish(
            json!({"message": format!("DeepSeek API request to {url} failed: connection refused (is the server running?)"),
        "code": "TRANSPORT"})
        )]
    );
}

#[tokio::test]
async fn http_chunk_boundaries_anywhere_yield_the_same_chunks() {
    let completion = Completion::text("Grüße, 世界")
        .reasoning("先想一下")
        .tool_call(ToolCall::new("c1", "bash", r#"{"command":"ls"}"#));
    let bytes: Vec<u8> = completion
        .payloads()
        .iter()
        .flat_map(|p| format!("data: {p}\r\n\r\n").into_bytes())
        .collect();
    let server = MockServer::with_replies([
        Reply::completion(completion),
        Reply::sse_bytes(bytes.chunks(5).map(<[u8]>::to_vec)),
        Reply::sse_bytes(bytes.chunks(1).map(<[u8]>::to_vec)),
    ]);
    let adapter = adapter(&server, None);
    let whole = run(adapter.clone(), options()).await;
    assert_eq!(whole.len(), 17);
    assert_eq!(run(adapter.clone(), options()).await, whole);
    assert_eq!(run(adapter, options()).await, whole);
}
