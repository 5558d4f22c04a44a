//! End-to-end: the generic OpenAI-compatible adapter against the mock server.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;

use dsh_llm::{GenerateOptions, LlmAdapter, LlmCallConfig, Message, adapter_stream};
use dsh_providers::{OpenAiCompatAdapter, OpenAiCompatConfig, ProviderDeps};
use dsh_test_support::mock_server::{Completion, MockServer, Reply, Usage, UsagePlacement};
use futures::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn adapter(server: &MockServer) -> Arc<dyn LlmAdapter> {
    let config = OpenAiCompatConfig::from_value(&json!({"providers": {
        "local": {"baseURL": format!("{}/v1/", server.url()), "displayName": "Local", "models": [{"id": "qwen"}],
            "compat": {"maxTokensField": "max_completion_tokens"}},
    }}))
    .expect("parses");
    Arc::new(
        OpenAiCompatAdapter::new(config, ProviderDeps::new(Arc::new(|_: &str| None)))
            .expect("valid"),
    )
}

async fn run(adapter: Arc<dyn LlmAdapter>, options: GenerateOptions) -> Vec<Value> {
    adapter_stream(Some(adapter), Arc::new(options))
        .map(|item| serde_json::to_value(item.expect("chunk")).expect("json"))
        .collect()
        .await
}

fn options() -> GenerateOptions {
    let mut config = LlmCallConfig::route("local", "qwen");
    config.max_tokens = Some(100);
    GenerateOptions::new(config, vec![Arc::new(Message::user_text("hi"))])
}

#[tokio::test]
async fn text_with_trailing_usage_and_reasoning_alias() {
    let server = MockServer::with_replies([Reply::sse_payloads(
        [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","reasoning":"think"}}]}"#
                .to_string(),
        ]
        .into_iter()
        .chain(
            Completion::text("ok")
                .usage(Some(Usage::new(50, 2).cache_hits(10)))
                .usage_placement(UsagePlacement::TrailingChunk)
                .payloads(),
        ),
    )]);
    let chunks = run(adapter(&server), options()).await;
    assert_eq!(
        chunks,
        vec![
            json!({"type": "block-start", "index": 0, "blockType": "reasoning"}),
            json!({"type": "reasoning-delta", "index": 0, "text": "think"}),
            json!({"type": "block-start", "index": 1, "blockType": "text"}),
            json!({"type": "text-delta", "index": 1, "text": "ok"}),
            json!({"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "think"}}),
            json!({"type": "block-end", "index": 1, "block": {"type": "text", "text": "ok"}}),
            json!({"type": "usage", "usage": {"inputTokens": 40, "outputTokens": 2, "cacheReadTokens": 10}}),
            json!({"type": "finish", "reason": {"kind": "stop"}}),
        ]
    );
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.header("authorization"), None);
    assert_eq!(
        request.body,
        r#"{"model":"qwen","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":100}"#
    );
}

#[tokio::test]
async fn errors_use_the_display_name() {
    let server = MockServer::with_replies([Reply::http_error(503, "")]);
    let chunks = run(adapter(&server), options()).await;
    assert_eq!(
        chunks,
        vec![
            json!({"type": "finish", "reason": {"kind": "error", "failure": {
        "message": "Local API error (HTTP 503)", "code": "SERVER", "status": 503}}})
        ]
    );
}
