//! What the mock-server tests of the SSE protocols with typed events (Anthropic Messages,
//! OpenAI Responses) share: framing events as the APIs do, and running an adapter through
//! the runtime's final adapter boundary.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;

use dsh_llm::{GenerateOptions, LlmAdapter, adapter_stream};
use dsh_test_support::mock_server::Reply;
use futures::StreamExt;
use serde_json::Value;

/// Every chunk `adapter` streams for `options`, as JSON (failures arrive as finish chunks).
pub async fn run_chunks(adapter: Arc<dyn LlmAdapter>, options: GenerateOptions) -> Vec<Value> {
    adapter_stream(Some(adapter), Arc::new(options))
        .map(|item| serde_json::to_value(item.expect("failures become finish chunks")).unwrap())
        .collect()
        .await
}

/// One SSE event with its `event:` line (the payload's `type`), as these APIs frame them.
pub fn event(payload: &Value) -> Vec<u8> {
    format!(
        "event: {}\ndata: {payload}\n\n",
        payload["type"].as_str().unwrap()
    )
    .into_bytes()
}

/// A mock reply streaming `events`.
pub fn reply(events: &[Value]) -> Reply {
    Reply::sse_bytes(events.iter().map(event))
}
