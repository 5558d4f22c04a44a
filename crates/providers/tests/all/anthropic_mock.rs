//! End-to-end: the Anthropic Messages adapter against a local SSE server (the mock LLM
//! serving `POST /v1/messages`), through the runtime's final adapter boundary
//! (`adapter_stream`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;

use dsh_llm::{
    BlockAssembler, GenerateOptions, LlmAdapter, LlmCallConfig, Message, ToolSchema,
    adapter_stream, codes,
};
use dsh_providers::{AnthropicAdapter, AnthropicConfig, ProviderDeps};
use dsh_test_support::mock_server::{MockServer, Reply};
use futures::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::{event, reply, run_chunks};

fn adapter(server: &MockServer, extra: Value) -> Arc<AnthropicAdapter> {
    let mut profile = json!({
        "api": "anthropic-messages",
        "baseURL": server.url(),
        "apiKeyEnv": "ANTHROPIC_API_KEY",
        "models": [{"id": "claude-test", "contextWindow": 200000, "maxTokens": 32000,
                    "reasoningEfforts": {"off": null, "high": "high"}}],
    });
    dsh_providers::layer_settings(&mut profile, extra);
    let config =
        AnthropicConfig::from_value(&json!({"providers": {"anthropic": profile}})).expect("valid");
    let deps = ProviderDeps::new(Arc::new(|reference: &str| {
        (reference == "ANTHROPIC_API_KEY").then(|| "sk-ant-test".to_string())
    }));
    Arc::new(AnthropicAdapter::new(config, deps).expect("valid config"))
}

fn options(messages: Vec<Message>) -> GenerateOptions {
    let mut options = GenerateOptions::new(
        LlmCallConfig::route("anthropic", "claude-test"),
        messages.into_iter().map(Arc::new).collect(),
    );
    options.system = Some("You are dsh.".into());
    options
}

fn message_start() -> Value {
    json!({"type": "message_start", "message": {"id": "msg_01", "type": "message", "role": "assistant",
        "model": "claude-test", "content": [], "stop_reason": null,
        "usage": {"input_tokens": 25, "output_tokens": 1,
                  "cache_creation_input_tokens": 1200, "cache_read_input_tokens": 3000}}})
}

fn text_events(text: &str) -> Vec<Value> {
    vec![
        message_start(),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
               "usage": {"output_tokens": 7}}),
        json!({"type": "message_stop"}),
    ]
}

fn thinking_tool_events() -> Vec<Value> {
    vec![
        message_start(),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "I should list."}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_01", "name": "bash", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"command\""}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ": \"ls\"}"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 55}}),
        json!({"type": "message_stop"}),
    ]
}

#[tokio::test]
async fn streams_text_with_usage_and_cache_accounting() {
    let server = MockServer::with_replies([reply(&text_events("Hello!"))]);
    let chunks = run_chunks(
        adapter(&server, json!({})),
        options(vec![Message::user_text("hi")]),
    )
    .await;
    assert_eq!(
        chunks,
        vec![
            json!({"type": "block-start", "index": 0, "blockType": "text"}),
            json!({"type": "text-delta", "index": 0, "text": "Hello!"}),
            json!({"type": "block-end", "index": 0, "block": {"type": "text", "text": "Hello!"}}),
            json!({"type": "usage", "usage": {"inputTokens": 25, "outputTokens": 7,
                "cacheReadTokens": 3000, "cacheWriteTokens": 1200}}),
            json!({"type": "finish", "reason": {"kind": "stop"}, "replayState": {
                "response": {"kind": "anthropic-messages", "version": 1, "model": "claude-test",
                             "id": "msg_01", "stopReason": "end_turn"},
                "blocks": [{"type": "text"}]}}),
        ]
    );
    let request = &server.requests()[0];
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(request.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.header("authorization"), None);
    let body = request.json.clone().unwrap();
    assert_eq!(
        body,
        json!({"model": "claude-test", "max_tokens": 32000,
            "system": [{"type": "text", "text": "You are dsh.", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}],
            "stream": true})
    );
}

#[tokio::test]
async fn a_tool_call_with_signed_thinking_round_trips_into_the_next_request() {
    let server = MockServer::with_replies([
        reply(&thinking_tool_events()),
        reply(&text_events("Two files.")),
    ]);
    let adapter = adapter(&server, json!({}));
    let mut first = options(vec![Message::user_text("list files")]);
    first.config.reasoning_effort = Some("high".into());
    first.tools = Some(vec![ToolSchema {
        name: "bash".into(),
        description: "Run a command".into(),
        parameters: Arc::new(
            json!({"type": "object", "properties": {"command": {"type": "string"}}}),
        ),
    }]);
    let chunks = run_chunks(adapter.clone(), first.clone()).await;
    let mut assembler = BlockAssembler::new();
    for chunk in &chunks {
        assembler.push(&serde_json::from_value(chunk.clone()).unwrap());
    }
    assert_eq!(assembler.finish().kind(), "tool-calls");
    let blocks = assembler.blocks().unwrap();
    assert_eq!(
        serde_json::to_value(&blocks).unwrap(),
        json!([{"type": "reasoning", "text": "I should list."},
               {"type": "tool-call", "id": "toolu_01", "name": "bash", "arguments": "{\"command\": \"ls\"}"}])
    );
    let body = server.requests()[0].json.clone().unwrap();
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 20480})
    );
    assert_eq!(
        body["tools"][0]["input_schema"]["properties"]["command"]["type"],
        "string"
    );

    // The assistant message as the agent stores it, then the tool result.
    let assistant =
        Message::assistant(blocks, "anthropic", "claude-test", assembler.replay_state());
    let result = Message::tool_result("toolu_01", vec![dsh_llm::ContentBlock::text("a\nb")], false);
    let mut second = first;
    second.messages.push(Arc::new(assistant));
    second.messages.push(Arc::new(result));
    let chunks = run_chunks(adapter, second).await;
    assert_eq!(chunks.last().unwrap()["reason"]["kind"], "stop");
    let body = server.requests()[1].json.clone().unwrap();
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "list files"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should list.", "signature": "EqQBCgIYAhIM"},
                {"type": "tool_use", "id": "toolu_01", "name": "bash", "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01",
                "content": [{"type": "text", "text": "a\nb"}], "cache_control": {"type": "ephemeral"}}]}
        ])
    );
}

fn anthropic_error(status: u16, kind: &str, message: &str) -> Reply {
    Reply::http_error(
        status,
        json!({"type": "error", "error": {"type": kind, "message": message}}).to_string(),
    )
}

#[tokio::test]
async fn http_errors_are_classified_for_the_retry_policy() {
    let server = MockServer::with_replies([
        anthropic_error(529, "overloaded_error", "Overloaded"),
        anthropic_error(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
        )
        .with_header("retry-after", "3"),
        anthropic_error(
            400,
            "invalid_request_error",
            "prompt is too long: 210000 tokens > 200000 maximum",
        ),
        anthropic_error(
            400,
            "invalid_request_error",
            "messages.0.content: Field required",
        ),
        anthropic_error(401, "authentication_error", "invalid x-api-key"),
    ]);
    let adapter = adapter(&server, json!({}));
    let mut codes_seen = Vec::new();
    for _ in 0..5 {
        let chunks = run_chunks(adapter.clone(), options(vec![Message::user_text("hi")])).await;
        assert_eq!(chunks.len(), 1, "{chunks:?}");
        codes_seen.push(chunks[0]["reason"]["failure"].clone());
    }
    assert_eq!(
        codes_seen,
        vec![
            json!({"message": "Overloaded", "code": "SERVER", "status": 529}),
            json!({"message": "Number of request tokens has exceeded your per-minute rate limit",
                   "code": "RATE_LIMIT", "status": 429, "providerRetryAfterMs": 3000}),
            json!({"message": "prompt is too long: 210000 tokens > 200000 maximum",
                   "code": "CONTEXT_WINDOW_EXCEEDED", "status": 400}),
            json!({"message": "messages.0.content: Field required", "code": "INVALID_REQUEST", "status": 400}),
            json!({"message": "invalid x-api-key", "code": "AUTH", "status": 401}),
        ]
    );
    let policy = adapter.retry_policy("anthropic");
    let retryable = |code: &str| policy.retryable_codes.iter().any(|c| c == code);
    assert!(retryable(codes::SERVER) && retryable(codes::RATE_LIMIT));
    assert!(!retryable(codes::INVALID_REQUEST) && !retryable(codes::CONTEXT_WINDOW_EXCEEDED));
}

#[tokio::test]
async fn broken_streams_end_with_clear_errors() {
    let mut cut = text_events("partial");
    cut.truncate(4);
    let mut overloaded = text_events("partial");
    overloaded.truncate(2);
    overloaded.push(
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    );
    let server = MockServer::with_replies([
        Reply::sse_bytes([
            b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":\n\n".to_vec(),
        ]),
        reply(&cut),
        reply(&overloaded),
        Reply::sse_bytes([
            event(&message_start()),
            b"data: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{}}\n\n".to_vec(),
        ]),
    ]);
    let adapter = adapter(&server, json!({}));
    let mut last = Vec::new();
    for _ in 0..4 {
        let chunks = run_chunks(adapter.clone(), options(vec![Message::user_text("hi")])).await;
        last.push(chunks.last().unwrap()["reason"]["failure"].clone());
    }
    let summary: Vec<(String, String)> = last
        .iter()
        .map(|f| {
            (
                f["code"].as_str().unwrap().into(),
                f["message"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(summary[0].0, "MALFORMED_RESPONSE");
    assert!(
        summary[0]
            .1
            .starts_with("malformed Anthropic SSE event (not JSON)"),
        "{summary:?}"
    );
    assert_eq!(
        summary[1],
        (
            "STREAM_CLOSED".into(),
            "SSE stream ended without message_stop".into()
        )
    );
    assert_eq!(summary[2], ("SERVER".into(), "Overloaded".into()));
    assert_eq!(summary[3].0, "MALFORMED_RESPONSE");
    assert!(summary[3].1.contains("not open"), "{summary:?}");
}

#[tokio::test]
async fn a_missing_credential_fails_before_any_request() {
    let server = MockServer::start();
    let mut profile = json!({"baseURL": server.url(), "apiKeyEnv": "NOT_SET_KEY", "models": [{"id": "claude-test"}]});
    dsh_providers::layer_settings(&mut profile, json!({}));
    let config =
        AnthropicConfig::from_value(&json!({"providers": {"anthropic": profile}})).unwrap();
    let adapter = Arc::new(
        AnthropicAdapter::new(config, ProviderDeps::new(Arc::new(|_: &str| None))).unwrap(),
    );
    let chunks = run_chunks(adapter, options(vec![Message::user_text("hi")])).await;
    assert_eq!(chunks[0]["reason"]["failure"]["code"], "MISSING_CREDENTIAL");
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn the_deepseek_route_can_opt_into_the_messages_protocol() {
    use dsh_providers::{DEEPSEEK_ROUTE, DeepSeekAdapter, DeepSeekConfig};
    let server = MockServer::with_replies([reply(&text_events("Hi from messages"))]);
    let config = DeepSeekConfig {
        api: Some("anthropic-messages".into()),
        base_url: Some(server.url()),
        ..DeepSeekConfig::default()
    };
    let deps = ProviderDeps::new(Arc::new(|reference: &str| {
        (reference == "DEEPSEEK_API_KEY").then(|| "sk-test".to_string())
    }));
    let adapter: Arc<dyn LlmAdapter> = Arc::new(DeepSeekAdapter::new(config, deps).unwrap());
    let mut config = LlmCallConfig::route(DEEPSEEK_ROUTE, "deepseek-v4-flash");
    config.reasoning_effort = Some("high".into());
    let mut options = GenerateOptions::new(config, vec![Arc::new(Message::user_text("hi"))]);
    options.system = Some("You are dsh.".into());
    let chunks: Vec<Value> = adapter_stream(Some(adapter.clone()), Arc::new(options))
        .map(|c| serde_json::to_value(c.unwrap()).unwrap())
        .collect()
        .await;
    assert_eq!(chunks[1]["text"], "Hi from messages");
    assert_eq!(chunks.last().unwrap()["reason"]["kind"], "stop");
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some("sk-test"));
    assert_eq!(request.header("authorization"), None);
    let body = request.json.clone().unwrap();
    assert_eq!(body["model"], "deepseek-v4-flash");
    // DeepSeek's dialect (as upstream 0.2.1 sends it): the switch alone, the effort in
    // `output_config`, the system prompt as a string, no cache marks.
    assert_eq!(body["thinking"], json!({"type": "enabled"}));
    assert_eq!(body["output_config"], json!({"effort": "high"}));
    assert_eq!(body["system"], "You are dsh.");
    assert!(!request.body.contains("cache_control"), "{}", request.body);
    assert!(!request.body.contains("budget_tokens"), "{}", request.body);
    // Effort `off` switches thinking off and sends no output_config; an effort DeepSeek
    // does not offer is refused before any request.
    server.push(reply(&text_events("plain")));
    for (effort, expected) in [
        ("off", None),
        ("medium", Some("UNSUPPORTED_REASONING_EFFORT")),
    ] {
        let mut config = LlmCallConfig::route(DEEPSEEK_ROUTE, "deepseek-v4-flash");
        config.reasoning_effort = Some(effort.into());
        let options = GenerateOptions::new(config, vec![Arc::new(Message::user_text("hi"))]);
        let chunks: Vec<Value> = adapter_stream(Some(adapter.clone()), Arc::new(options))
            .map(|c| serde_json::to_value(c.unwrap()).unwrap())
            .collect()
            .await;
        let failure = chunks.last().unwrap()["reason"]["failure"]["code"].as_str();
        assert_eq!(failure, expected, "{chunks:?}");
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "the refused effort sent nothing");
    let body = requests[1].json.clone().unwrap();
    assert_eq!(body["thinking"], json!({"type": "disabled"}));
    assert!(body.get("output_config").is_none(), "{body}");
    // An unknown protocol name is refused at configuration time.
    let bad = DeepSeekAdapter::new(
        DeepSeekConfig {
            api: Some("grpc".into()),
            ..DeepSeekConfig::default()
        },
        ProviderDeps::new(Arc::new(|_: &str| None)),
    );
    assert!(bad.err().unwrap().to_string().contains("api must be"));
}
