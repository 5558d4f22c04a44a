//! End-to-end: `llm-pi-ai` routes with `api: openai-responses` against a local SSE server
//! (the mock LLM serving `POST /responses`), through the runtime's final adapter boundary
//! (`adapter_stream`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;

use dsh_llm::{
    BlockAssembler, GenerateOptions, LlmAdapter, LlmCallConfig, Message, ToolSchema, codes,
};
use dsh_providers::{AnthropicAdapter, AnthropicConfig, ProviderDeps};
use dsh_test_support::mock_server::{MockServer, Reply};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::{reply, run_chunks};

fn adapter(server: &MockServer) -> Arc<AnthropicAdapter> {
    let config = AnthropicConfig::from_value(&json!({"providers": {"openai": {
        "api": "openai-responses",
        "baseURL": format!("{}/v1", server.url()),
        "apiKeyEnv": "OPENAI_API_KEY",
        "models": [{"id": "gpt-test", "contextWindow": 400000, "maxTokens": 16000,
                    "reasoningEfforts": {"off": null, "low": "low", "high": "high"}}],
    }}}))
    .expect("valid");
    let deps = ProviderDeps::new(Arc::new(|reference: &str| {
        (reference == "OPENAI_API_KEY").then(|| "sk-openai-test".to_string())
    }));
    Arc::new(AnthropicAdapter::new(config, deps).expect("valid config"))
}

fn options(messages: Vec<Message>) -> GenerateOptions {
    let mut options = GenerateOptions::new(
        LlmCallConfig::route("openai", "gpt-test"),
        messages.into_iter().map(Arc::new).collect(),
    );
    options.system = Some("You are dsh.".into());
    options
}

fn created() -> Value {
    json!({"type": "response.created", "sequence_number": 0,
        "response": {"id": "resp_1", "object": "response", "model": "gpt-test", "status": "in_progress", "output": []}})
}

fn completed(usage: Value) -> Value {
    json!({"type": "response.completed", "response": {"id": "resp_1", "model": "gpt-test",
        "status": "completed", "usage": usage}})
}

fn text_events(text: &str) -> Vec<Value> {
    vec![
        created(),
        json!({"type": "response.in_progress", "response": {"id": "resp_1", "status": "in_progress"}}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.content_part.added", "item_id": "msg_1", "output_index": 0, "content_index": 0,
               "part": {"type": "output_text", "text": ""}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": text}),
        json!({"type": "response.output_text.done", "item_id": "msg_1", "output_index": 0, "content_index": 0, "text": text}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}}),
        completed(
            json!({"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1000},
                         "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 1209}),
        ),
    ]
}

fn reasoning_tool_events() -> Vec<Value> {
    vec![
        created(),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
        json!({"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "output_index": 0, "summary_index": 0,
               "part": {"type": "summary_text", "text": ""}}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0, "summary_index": 0,
               "delta": "I should list."}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAAenc",
                        "summary": [{"type": "summary_text", "text": "I should list."}]}}),
        json!({"type": "response.output_item.added", "output_index": 1,
               "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "bash", "arguments": "", "status": "in_progress"}}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 1, "delta": "{\"command\""}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 1, "delta": ": \"ls\"}"}),
        json!({"type": "response.function_call_arguments.done", "item_id": "fc_1", "output_index": 1, "arguments": "{\"command\": \"ls\"}"}),
        json!({"type": "response.output_item.done", "output_index": 1,
               "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "bash",
                        "arguments": "{\"command\": \"ls\"}", "status": "completed"}}),
        completed(
            json!({"input_tokens": 300, "input_tokens_details": {"cached_tokens": 0},
                         "output_tokens": 80, "output_tokens_details": {"reasoning_tokens": 64}}),
        ),
    ]
}

#[tokio::test]
async fn streams_text_with_usage_and_cached_tokens() {
    let server = MockServer::with_replies([reply(&text_events("Hello!"))]);
    let chunks = run_chunks(adapter(&server), options(vec![Message::user_text("hi")])).await;
    assert_eq!(
        chunks,
        vec![
            json!({"type": "block-start", "index": 0, "blockType": "text"}),
            json!({"type": "text-delta", "index": 0, "text": "Hello!"}),
            json!({"type": "block-end", "index": 0, "block": {"type": "text", "text": "Hello!"}}),
            json!({"type": "usage", "usage": {"inputTokens": 200, "outputTokens": 9,
                "cacheReadTokens": 1000, "reasoningTokens": 0}}),
            json!({"type": "finish", "reason": {"kind": "stop"}, "replayState": {
                "response": {"kind": "openai-responses", "version": 1, "model": "gpt-test",
                             "id": "resp_1", "status": "completed"},
                "blocks": [{"type": "text", "itemId": "msg_1"}]}}),
        ]
    );
    let request = &server.requests()[0];
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/v1/responses")
    );
    assert_eq!(
        request.header("authorization"),
        Some("Bearer sk-openai-test")
    );
    assert_eq!(request.header("x-api-key"), None);
    assert_eq!(
        request.json.clone().unwrap(),
        json!({"model": "gpt-test",
            "input": [{"role": "developer", "content": "You are dsh."},
                      {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
            "max_output_tokens": 16000, "store": false, "stream": true})
    );
}

#[tokio::test]
async fn a_tool_call_with_encrypted_reasoning_round_trips_into_the_next_request() {
    let server = MockServer::with_replies([
        reply(&reasoning_tool_events()),
        reply(&text_events("Two files.")),
    ]);
    let adapter = adapter(&server);
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
    assert_eq!(
        chunks[chunks.len() - 2],
        json!({"type": "usage", "usage": {"inputTokens": 300, "outputTokens": 80,
            "cacheReadTokens": 0, "reasoningTokens": 64}})
    );
    let mut assembler = BlockAssembler::new();
    for chunk in &chunks {
        assembler.push(&serde_json::from_value(chunk.clone()).unwrap());
    }
    assert_eq!(assembler.finish().kind(), "tool-calls");
    let blocks = assembler.blocks().unwrap();
    assert_eq!(
        serde_json::to_value(&blocks).unwrap(),
        json!([{"type": "reasoning", "text": "I should list."},
               {"type": "tool-call", "id": "call_1", "name": "bash", "arguments": "{\"command\": \"ls\"}"}])
    );
    let body = server.requests()[0].json.clone().unwrap();
    assert_eq!(
        body["reasoning"],
        json!({"effort": "high", "summary": "auto"})
    );
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "name": "bash", "description": "Run a command", "strict": false,
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}])
    );

    let assistant = Message::assistant(blocks, "openai", "gpt-test", assembler.replay_state());
    let result = Message::tool_result("call_1", vec![dsh_llm::ContentBlock::text("a\nb")], false);
    let mut second = first;
    second.messages.push(Arc::new(assistant));
    second.messages.push(Arc::new(result));
    let chunks = run_chunks(adapter, second).await;
    assert_eq!(chunks.last().unwrap()["reason"]["kind"], "stop");
    let body = server.requests()[1].json.clone().unwrap();
    assert_eq!(
        body["input"],
        json!([
            {"role": "developer", "content": "You are dsh."},
            {"role": "user", "content": [{"type": "input_text", "text": "list files"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "I should list."}],
             "encrypted_content": "gAAAAenc"},
            {"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": "{\"command\": \"ls\"}", "id": "fc_1"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a\nb"}
        ])
    );
}

fn openai_error(status: u16, kind: &str, code: Option<&str>, message: &str) -> Reply {
    Reply::http_error(
        status,
        json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
            .to_string(),
    )
}

#[tokio::test]
async fn http_errors_are_classified_for_the_retry_policy() {
    let server = MockServer::with_replies([
        openai_error(500, "server_error", None, "The server had an error"),
        openai_error(
            429,
            "requests",
            Some("rate_limit_exceeded"),
            "Rate limit reached",
        )
        .with_header("retry-after", "2"),
        openai_error(
            400,
            "invalid_request_error",
            Some("context_length_exceeded"),
            "Your input exceeds the context window of this model.",
        ),
        openai_error(400, "invalid_request_error", None, "Invalid 'input[1]'."),
    ]);
    let adapter = adapter(&server);
    let mut seen = Vec::new();
    for _ in 0..4 {
        let chunks = run_chunks(adapter.clone(), options(vec![Message::user_text("hi")])).await;
        assert_eq!(chunks.len(), 1, "{chunks:?}");
        let failure = &chunks[0]["reason"]["failure"];
        seen.push((
            failure["code"].as_str().unwrap().to_string(),
            failure["status"].clone(),
        ));
    }
    assert_eq!(
        seen,
        vec![
            ("SERVER".to_string(), json!(500)),
            ("RATE_LIMIT".to_string(), json!(429)),
            ("CONTEXT_WINDOW_EXCEEDED".to_string(), json!(400)),
            ("INVALID_REQUEST".to_string(), json!(400)),
        ]
    );
    let policy = adapter.retry_policy("openai");
    let retryable = |code: &str| policy.retryable_codes.iter().any(|c| c == code);
    assert!(retryable(codes::SERVER) && retryable(codes::RATE_LIMIT));
    assert!(!retryable(codes::INVALID_REQUEST) && !retryable(codes::CONTEXT_WINDOW_EXCEEDED));
}

#[tokio::test]
async fn broken_and_failed_streams_end_with_clear_errors() {
    let mut cut = text_events("partial");
    cut.truncate(5);
    let server = MockServer::with_replies([
        Reply::sse_bytes([
            b"event: response.created\ndata: {\"type\":\"response.created\",\n\n".to_vec(),
        ]),
        reply(&cut),
        reply(&[
            created(),
            json!({"type": "response.failed", "response": {"id": "resp_1", "status": "failed",
                   "error": {"code": "server_error", "message": "Something went wrong"}}}),
        ]),
        reply(&[
            created(),
            json!({"type": "error", "code": "context_length_exceeded",
                   "message": "Your input exceeds the context window of this model.", "param": null}),
        ]),
        reply(&[
            created(),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_9", "output_index": 4, "delta": "{}"}),
        ]),
    ]);
    let adapter = adapter(&server);
    let mut summary = Vec::new();
    for _ in 0..5 {
        let chunks = run_chunks(adapter.clone(), options(vec![Message::user_text("hi")])).await;
        let failure = chunks.last().unwrap()["reason"]["failure"].clone();
        summary.push((
            failure["code"].as_str().unwrap().to_string(),
            failure["message"].as_str().unwrap().to_string(),
        ));
    }
    assert_eq!(summary[0].0, "MALFORMED_RESPONSE");
    assert!(
        summary[0]
            .1
            .starts_with("malformed OpenAI Responses SSE event (not JSON)"),
        "{summary:?}"
    );
    assert_eq!(
        summary[1],
        (
            "STREAM_CLOSED".into(),
            "SSE stream ended without response.completed".into()
        )
    );
    assert_eq!(summary[2], ("SERVER".into(), "Something went wrong".into()));
    assert_eq!(summary[3].0, "CONTEXT_WINDOW_EXCEEDED");
    assert_eq!(summary[4].0, "MALFORMED_RESPONSE");
    assert!(summary[4].1.contains("not open"), "{summary:?}");
}

#[tokio::test]
async fn the_public_base_url_is_the_default_and_unknown_apis_are_refused() {
    let config = AnthropicConfig::from_value(&json!({"providers": {"openai": {
        "api": "openai-responses", "models": [{"id": "gpt-test"}]}}}))
    .unwrap();
    let adapter =
        AnthropicAdapter::new(config, ProviderDeps::new(Arc::new(|_: &str| None))).unwrap();
    assert_eq!(adapter.routes(), vec!["openai".to_string()]);
    let bad = AnthropicConfig::from_value(&json!({"providers": {"p": {
        "api": "openai-completions", "models": [{"id": "m"}]}}}))
    .unwrap();
    let error = AnthropicAdapter::new(bad, ProviderDeps::new(Arc::new(|_: &str| None)))
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("openai-responses"), "{error}");
}
