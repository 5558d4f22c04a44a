//! End-to-end: the generic OpenAI-compatible adapter against the mock server.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;

use dsh_llm::{
    ContentBlock, GenerateOptions, LlmAdapter, LlmCallConfig, Message, MessageSource,
    adapter_stream,
};
use dsh_providers::{OpenAiCompatAdapter, OpenAiCompatConfig, ProviderDeps};
use dsh_test_support::mock_server::{Completion, MockServer, Reply, Usage, UsagePlacement};
use futures::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn adapter(server: &MockServer) -> Arc<dyn LlmAdapter> {
    let config = OpenAiCompatConfig::from_value(&json!({"providers": {
        "local": {"baseURL": format!("{}/v1/", server.url()), "displayName": "Local",
            "models": [{"id": "qwen"}, {"id": "qwen-vl", "input": ["text", "image"]}],
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

fn image_options(model: &str, data: Option<&str>) -> GenerateOptions {
    let mut block = ContentBlock::image(json!({
        "attachmentId": format!("sha256:{}", "b".repeat(64)),
        "mediaType": "image/png", "width": 1, "height": 1, "bytes": 3
    }));
    if let (ContentBlock::Other(map), Some(data)) = (&mut block, data) {
        map.insert("data".into(), Value::from(data));
    }
    let message = Message::user(
        vec![ContentBlock::text("what is it?"), block],
        MessageSource::User,
    );
    let mut config = LlmCallConfig::route("local", model);
    config.max_tokens = Some(100);
    GenerateOptions::new(config, vec![Arc::new(message)])
}

#[tokio::test]
async fn a_model_declaring_image_input_gets_images_as_data_urls() {
    let server = MockServer::with_replies([Reply::text("a red pixel")]);
    let adapter = adapter(&server);
    assert_eq!(
        adapter
            .model_info("local", "qwen-vl")
            .unwrap()
            .input_modalities,
        vec!["text", "image"]
    );
    assert_eq!(
        adapter
            .model_info("local", "qwen")
            .unwrap()
            .input_modalities,
        vec!["text"]
    );
    let chunks = run(adapter, image_options("qwen-vl", Some("QUJD"))).await;
    assert_eq!(
        chunks.last().unwrap(),
        &json!({"type": "finish", "reason": {"kind": "stop"}})
    );
    let body: Value = serde_json::from_str(&server.requests()[0].body).unwrap();
    let content = body["messages"][0]["content"].as_array().unwrap();
    assert_eq!(content[0], json!({"type": "text", "text": "what is it?"}));
    assert_eq!(
        content.last().unwrap(),
        &json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}})
    );
}

#[tokio::test]
async fn a_text_only_model_refuses_images_naming_the_model() {
    let server = MockServer::with_replies([]);
    let chunks = run(adapter(&server), image_options("qwen", Some("QUJD"))).await;
    let failure = &chunks[0]["reason"]["failure"];
    assert_eq!(failure["code"], json!("UNSUPPORTED_CONTENT"));
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.contains("model \"qwen\"") && message.contains("image input"),
        "{message}"
    );
    assert!(server.requests().is_empty());
    // Image bytes the runtime did not inline are refused before any request.
    let chunks = run(adapter(&server), image_options("qwen-vl", None)).await;
    assert_eq!(
        chunks[0]["reason"]["failure"]["code"],
        json!("UNSUPPORTED_CONTENT")
    );
    assert!(server.requests().is_empty());
}
