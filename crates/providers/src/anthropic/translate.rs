//! Anthropic Messages SSE events → provider-neutral [`StreamChunk`]s.
//!
//! Each wire content block becomes one harness block (indexes allocated from 0 in order of
//! appearance): `text` → text, `thinking` / `redacted_thinking` → reasoning, `tool_use` →
//! tool-call. Deltas (`text_delta`, `thinking_delta`, `input_json_delta`) stream live;
//! `signature_delta` is collected for the replay state; `content_block_stop` emits the
//! `block-end`. `message_start` and `message_delta` carry usage (the later counts win per
//! field) and the stop reason; at `message_stop` come the `usage` and the `finish`, whose
//! `replayState` holds one entry per block (`{type, signature?, redactedData?}`) so thinking
//! signatures are replayed on the next request. `ping` is ignored; an `error` event fails the
//! attempt with its classified code.

use dsh_llm::{ContentBlock, FinishReason, LlmError, LlmFailure, StreamChunk, TokenUsage, codes};
use serde_json::{Value, json};

use crate::translate::EMPTY_COMPLETION_MESSAGE;

/// The replay-state `kind` of responses from this adapter.
pub(crate) const REPLAY_KIND: &str = "anthropic-messages";
/// The replay-state `version`.
pub(crate) const REPLAY_VERSION: u64 = 1;

use crate::translate::BlockKind as Kind;

#[derive(Debug)]
struct Open {
    wire_index: u64,
    kind: Kind,
    text: String,
    id: String,
    name: String,
    signature: Option<String>,
    redacted: Option<String>,
    closed: bool,
}

impl Open {
    fn block(&self) -> ContentBlock {
        self.kind.block(&self.text, &self.id, &self.name)
    }

    fn replay_entry(&self) -> Value {
        let mut entry = json!({"type": self.kind.name()});
        if let Some(signature) = self.signature.as_ref().filter(|s| !s.is_empty()) {
            entry["signature"] = Value::from(signature.as_str());
        }
        if let Some(data) = &self.redacted {
            entry["redactedData"] = Value::from(data.as_str());
        }
        entry
    }
}

/// Stateful translator of one Messages stream.
#[derive(Debug, Default)]
pub(crate) struct MessagesTranslator {
    blocks: Vec<Open>,
    message_id: Option<String>,
    model: Option<String>,
    stop_reason: Option<String>,
    usage: Option<TokenUsage>,
    started: bool,
}

/// Maps a wire `stop_reason`.
pub(crate) fn map_stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" | "pause_turn" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" => FinishReason::MaxTokens,
        "model_context_window_exceeded" => FinishReason::Error(LlmFailure::new(
            codes::CONTEXT_WINDOW_EXCEEDED,
            "model stopped: the context window is exhausted",
        )),
        other => FinishReason::Error(LlmFailure::new(
            other.to_uppercase(),
            format!("model stopped: {other}"),
        )),
    }
}

/// The harness code of an Anthropic error `type` (HTTP bodies and `error` events).
pub(crate) fn error_type_code(kind: &str, message: &str) -> &'static str {
    match kind {
        "authentication_error" | "permission_error" => codes::AUTH,
        "rate_limit_error" => codes::RATE_LIMIT,
        "overloaded_error" | "api_error" => codes::SERVER,
        "invalid_request_error" if super::is_context_overflow(message) => {
            codes::CONTEXT_WINDOW_EXCEEDED
        }
        "invalid_request_error" | "request_too_large" => codes::INVALID_REQUEST,
        _ => codes::UNKNOWN,
    }
}

fn malformed(data: &str, why: &str) -> LlmError {
    let head: String = data.chars().take(120).collect();
    LlmError::new(
        codes::MALFORMED_RESPONSE,
        format!("malformed Anthropic SSE event ({why}): {head}"),
    )
}

fn count(value: &Value, key: &str) -> Option<u64> {
    value.get(key).and_then(Value::as_u64)
}

impl MessagesTranslator {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn merge_usage(&mut self, usage: &Value) {
        let u = self.usage.get_or_insert_with(TokenUsage::default);
        if let Some(n) = count(usage, "input_tokens") {
            u.input_tokens = n;
        }
        if let Some(n) = count(usage, "output_tokens") {
            u.output_tokens = n;
        }
        if let Some(n) = count(usage, "cache_read_input_tokens") {
            u.cache_read_tokens = Some(n);
        }
        if let Some(n) = count(usage, "cache_creation_input_tokens") {
            u.cache_write_tokens = Some(n);
        }
    }

    fn position(&self, data: &str, event: &Value) -> Result<usize, LlmError> {
        let wire = event
            .get("index")
            .and_then(Value::as_u64)
            .ok_or_else(|| malformed(data, "no block index"))?;
        self.blocks
            .iter()
            .position(|b| b.wire_index == wire && !b.closed)
            .ok_or_else(|| malformed(data, "delta for a block that is not open"))
    }

    /// Translates one event payload. Returns the chunks and whether the stream is complete
    /// (`message_stop`). Invalid events are `MALFORMED_RESPONSE`; an `error` event is the
    /// provider's classified failure.
    pub(crate) fn event(&mut self, data: &str) -> Result<(Vec<StreamChunk>, bool), LlmError> {
        let event: Value = serde_json::from_str(data).map_err(|_| malformed(data, "not JSON"))?;
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed(data, "no type"))?;
        let mut out = Vec::new();
        match kind {
            "ping" => {}
            "error" => {
                let error = event.get("error").cloned().unwrap_or(Value::Null);
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .filter(|m| !m.is_empty())
                    .unwrap_or("Anthropic stream error")
                    .to_string();
                let error_type = error.get("type").and_then(Value::as_str).unwrap_or("");
                return Err(LlmError::new(
                    error_type_code(error_type, &message),
                    message,
                ));
            }
            "message_start" => {
                let message = event
                    .get("message")
                    .ok_or_else(|| malformed(data, "message_start without message"))?;
                self.started = true;
                self.message_id = message.get("id").and_then(Value::as_str).map(str::to_owned);
                self.model = message
                    .get("model")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if let Some(usage) = message.get("usage") {
                    self.merge_usage(usage);
                }
            }
            "content_block_start" => {
                let wire_index = event
                    .get("index")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| malformed(data, "no block index"))?;
                let block = event
                    .get("content_block")
                    .ok_or_else(|| malformed(data, "no content_block"))?;
                let str_field = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or("");
                let (kind, name) = match str_field("type") {
                    "text" => (Kind::Text, "text"),
                    "thinking" | "redacted_thinking" => (Kind::Reasoning, "reasoning"),
                    "tool_use" | "server_tool_use" => (Kind::ToolCall, "tool-call"),
                    other => {
                        return Err(malformed(data, &format!("unknown block type \"{other}\"")));
                    }
                };
                let index = u32::try_from(self.blocks.len()).unwrap_or(u32::MAX);
                let mut open = Open {
                    wire_index,
                    kind,
                    text: String::new(),
                    id: str_field("id").to_string(),
                    name: str_field("name").to_string(),
                    signature: block
                        .get("signature")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    redacted: (str_field("type") == "redacted_thinking")
                        .then(|| str_field("data").to_string()),
                    closed: false,
                };
                out.push(StreamChunk::BlockStart {
                    index,
                    block_type: name.into(),
                });
                match kind {
                    Kind::Text if !str_field("text").is_empty() => {
                        open.text.push_str(str_field("text"));
                        out.push(StreamChunk::TextDelta {
                            index,
                            text: str_field("text").into(),
                        });
                    }
                    Kind::Reasoning if !str_field("thinking").is_empty() => {
                        open.text.push_str(str_field("thinking"));
                        out.push(StreamChunk::ReasoningDelta {
                            index,
                            text: str_field("thinking").into(),
                        });
                    }
                    Kind::ToolCall => out.push(StreamChunk::ToolCallDelta {
                        index,
                        id: open.id.clone(),
                        name: Some(open.name.clone()),
                        arguments_delta: String::new(),
                    }),
                    _ => {}
                }
                self.blocks.push(open);
            }
            "content_block_delta" => {
                let position = self.position(data, &event)?;
                let index = u32::try_from(position).unwrap_or(u32::MAX);
                let delta = event
                    .get("delta")
                    .ok_or_else(|| malformed(data, "no delta"))?;
                let str_field = |k: &str| delta.get(k).and_then(Value::as_str);
                let block = &mut self.blocks[position];
                match (delta.get("type").and_then(Value::as_str), block.kind) {
                    (Some("text_delta"), Kind::Text) => {
                        let text = str_field("text").unwrap_or("");
                        block.text.push_str(text);
                        out.push(StreamChunk::TextDelta {
                            index,
                            text: text.into(),
                        });
                    }
                    (Some("thinking_delta"), Kind::Reasoning) => {
                        let text = str_field("thinking").unwrap_or("");
                        block.text.push_str(text);
                        out.push(StreamChunk::ReasoningDelta {
                            index,
                            text: text.into(),
                        });
                    }
                    (Some("signature_delta"), Kind::Reasoning) => {
                        let part = str_field("signature").unwrap_or("");
                        block
                            .signature
                            .get_or_insert_with(String::new)
                            .push_str(part);
                    }
                    (Some("input_json_delta"), Kind::ToolCall) => {
                        let part = str_field("partial_json").unwrap_or("");
                        block.text.push_str(part);
                        out.push(StreamChunk::ToolCallDelta {
                            index,
                            id: block.id.clone(),
                            name: None,
                            arguments_delta: part.into(),
                        });
                    }
                    // Citations and other additive deltas carry nothing we keep.
                    (Some("citations_delta"), _) => {}
                    (other, _) => {
                        return Err(malformed(
                            data,
                            &format!("delta {} does not fit its block", other.unwrap_or("?")),
                        ));
                    }
                }
            }
            "content_block_stop" => {
                let position = self.position(data, &event)?;
                let block = &mut self.blocks[position];
                block.closed = true;
                out.push(StreamChunk::BlockEnd {
                    index: u32::try_from(position).unwrap_or(u32::MAX),
                    block: block.block(),
                });
            }
            "message_delta" => {
                if let Some(reason) = event
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(reason.to_string());
                }
                if let Some(usage) = event.get("usage") {
                    self.merge_usage(usage);
                }
            }
            "message_stop" => {
                if !self.started {
                    return Err(malformed(data, "message_stop before message_start"));
                }
                out.extend(self.finish());
                return Ok((out, true));
            }
            // Unknown event types are skipped, as the protocol asks of clients.
            _ => {}
        }
        Ok((out, false))
    }

    /// The chunks due at `message_stop`: block-ends of blocks left open, the usage, and the
    /// finish with the replay state.
    fn finish(&mut self) -> Vec<StreamChunk> {
        let mut out = Vec::new();
        for (position, block) in self.blocks.iter_mut().enumerate() {
            if !block.closed {
                block.closed = true;
                out.push(StreamChunk::BlockEnd {
                    index: u32::try_from(position).unwrap_or(u32::MAX),
                    block: block.block(),
                });
            }
        }
        if let Some(usage) = self.usage.take() {
            out.push(StreamChunk::Usage { usage });
        }
        let reason = match self.stop_reason.as_deref().map(map_stop_reason) {
            None | Some(FinishReason::Stop) if self.blocks.is_empty() => FinishReason::Error(
                LlmFailure::new(codes::EMPTY_RESPONSE, EMPTY_COMPLETION_MESSAGE),
            ),
            None => FinishReason::Stop,
            Some(reason) => reason,
        };
        let replay_state = (!self.blocks.is_empty()).then(|| {
            json!({
                "response": {
                    "kind": REPLAY_KIND,
                    "version": REPLAY_VERSION,
                    "model": self.model,
                    "id": self.message_id,
                    "stopReason": self.stop_reason,
                },
                "blocks": self.blocks.iter().map(Open::replay_entry).collect::<Vec<_>>(),
            })
        });
        out.push(StreamChunk::Finish {
            reason,
            replay_state,
        });
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    fn run(events: &[Value]) -> Result<Vec<Value>, LlmError> {
        let mut t = MessagesTranslator::new();
        let mut out = Vec::new();
        for event in events {
            let (chunks, done) = t.event(&event.to_string())?;
            out.extend(chunks.iter().map(|c| serde_json::to_value(c).unwrap()));
            if done {
                break;
            }
        }
        Ok(out)
    }

    fn start() -> Value {
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "model": "claude-x", "content": [],
            "usage": {"input_tokens": 12, "output_tokens": 1,
                      "cache_creation_input_tokens": 100, "cache_read_input_tokens": 900}}})
    }

    #[test]
    fn thinking_text_and_tool_use_become_blocks_with_a_signed_replay_state() {
        let chunks = run(&[
            start(),
            json!({"type": "ping"}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me "}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "look."}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig-A"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Running."}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"command\":"}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "\"ls\"}"}}),
            json!({"type": "content_block_stop", "index": 2}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 42}}),
            json!({"type": "message_stop"}),
        ])
        .unwrap();
        assert_eq!(
            chunks,
            vec![
                json!({"type": "block-start", "index": 0, "blockType": "reasoning"}),
                json!({"type": "reasoning-delta", "index": 0, "text": "Let me "}),
                json!({"type": "reasoning-delta", "index": 0, "text": "look."}),
                json!({"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "Let me look."}}),
                json!({"type": "block-start", "index": 1, "blockType": "text"}),
                json!({"type": "text-delta", "index": 1, "text": "Running."}),
                json!({"type": "block-end", "index": 1, "block": {"type": "text", "text": "Running."}}),
                json!({"type": "block-start", "index": 2, "blockType": "tool-call"}),
                json!({"type": "tool-call-delta", "index": 2, "id": "toolu_1", "name": "bash", "argumentsDelta": ""}),
                json!({"type": "tool-call-delta", "index": 2, "id": "toolu_1", "argumentsDelta": "{\"command\":"}),
                json!({"type": "tool-call-delta", "index": 2, "id": "toolu_1", "argumentsDelta": "\"ls\"}"}),
                json!({"type": "block-end", "index": 2, "block": {"type": "tool-call", "id": "toolu_1", "name": "bash", "arguments": "{\"command\":\"ls\"}"}}),
                json!({"type": "usage", "usage": {"inputTokens": 12, "outputTokens": 42, "cacheReadTokens": 900, "cacheWriteTokens": 100}}),
                json!({"type": "finish", "reason": {"kind": "tool-calls"}, "replayState": {
                    "response": {"kind": "anthropic-messages", "version": 1, "model": "claude-x", "id": "msg_1", "stopReason": "tool_use"},
                    "blocks": [{"type": "reasoning", "signature": "sig-A"}, {"type": "text"}, {"type": "tool-call"}]}}),
            ]
        );
    }

    #[test]
    fn stop_reasons_map_to_finish_reasons() {
        assert_eq!(map_stop_reason("end_turn"), FinishReason::Stop);
        assert_eq!(map_stop_reason("max_tokens"), FinishReason::MaxTokens);
        assert_eq!(
            map_stop_reason("refusal").failure().unwrap().code,
            "REFUSAL"
        );
        assert_eq!(
            map_stop_reason("model_context_window_exceeded")
                .failure()
                .unwrap()
                .code,
            "CONTEXT_WINDOW_EXCEEDED"
        );
    }

    #[test]
    fn an_empty_message_is_an_empty_response_and_a_tool_call_without_input_is_an_empty_object() {
        let chunks = run(&[
            start(),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 0}}),
            json!({"type": "message_stop"}),
        ])
        .unwrap();
        assert_eq!(
            chunks.last().unwrap()["reason"]["failure"]["code"],
            "EMPTY_RESPONSE"
        );
        let chunks = run(&[
            start(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "todo", "input": {}}}),
            json!({"type": "message_stop"}),
        ])
        .unwrap();
        assert_eq!(chunks[2]["block"]["arguments"], "{}");
    }

    #[test]
    fn error_events_and_garbage_fail_with_clear_codes() {
        let error = run(&[
            start(),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ])
        .unwrap_err();
        assert_eq!(
            (error.code(), error.to_string().as_str()),
            ("SERVER", "Overloaded")
        );
        let mut t = MessagesTranslator::new();
        for (data, why) in [
            ("{not json", "not JSON"),
            (
                "{\"type\":\"content_block_delta\",\"index\":5,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}",
                "not open",
            ),
            ("{\"type\":\"message_stop\"}", "before message_start"),
            ("[1,2]", "no type"),
        ] {
            let e = t.event(data).unwrap_err();
            assert_eq!(e.code(), "MALFORMED_RESPONSE");
            assert!(e.to_string().contains(why), "{e}");
        }
    }

    #[test]
    fn redacted_thinking_keeps_its_data_for_replay() {
        let chunks = run(&[
            start(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking", "data": "opaque"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": "Hi"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
            json!({"type": "message_stop"}),
        ])
        .unwrap();
        let finish = chunks.last().unwrap();
        assert_eq!(finish["reason"]["kind"], "stop");
        assert_eq!(
            finish["replayState"]["blocks"],
            json!([{"type": "reasoning", "redactedData": "opaque"}, {"type": "text"}])
        );
    }
}
