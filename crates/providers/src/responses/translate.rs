//! OpenAI Responses SSE events → provider-neutral [`StreamChunk`]s.
//!
//! Each output item becomes one harness block (indexes from 0 in order of appearance):
//! `message` → text, `reasoning` → reasoning, `function_call` → tool-call (its `call_id` is
//! the harness call id). `response.output_text.delta`, `response.reasoning_summary_text.delta`
//! (and `response.reasoning_text.delta`) and `response.function_call_arguments.delta` stream
//! live; `response.output_item.done` ends the block (filling in text or arguments that
//! arrived only there). `response.completed` / `response.incomplete` carry the usage and end
//! the stream with the `finish`, whose `replayState` has one entry per block (`{type,
//! itemId?, encryptedContent?}`) so encrypted reasoning is replayed on the next request.
//! `response.failed` and `error` events fail the attempt with a classified code.

use dsh_llm::{ContentBlock, FinishReason, LlmError, LlmFailure, StreamChunk, TokenUsage, codes};
use serde_json::{Value, json};

use crate::translate::EMPTY_COMPLETION_MESSAGE;

/// The replay-state `kind` of responses from this protocol.
pub(crate) const REPLAY_KIND: &str = "openai-responses";
/// The replay-state `version`.
pub(crate) const REPLAY_VERSION: u64 = 1;

use crate::translate::BlockKind as Kind;

#[derive(Debug)]
struct Open {
    item_id: String,
    output_index: Option<u64>,
    kind: Kind,
    text: String,
    call_id: String,
    name: String,
    encrypted: Option<String>,
    summary_index: Option<u64>,
    closed: bool,
}

impl Open {
    fn block(&self) -> ContentBlock {
        self.kind.block(&self.text, &self.call_id, &self.name)
    }

    fn replay_entry(&self) -> Value {
        let mut entry = json!({"type": self.kind.name()});
        if !self.item_id.is_empty() {
            entry["itemId"] = Value::from(self.item_id.as_str());
        }
        if let Some(data) = self.encrypted.as_ref().filter(|d| !d.is_empty()) {
            entry["encryptedContent"] = Value::from(data.as_str());
        }
        entry
    }
}

/// Stateful translator of one Responses stream.
#[derive(Debug, Default)]
pub(crate) struct ResponsesTranslator {
    blocks: Vec<Open>,
    response_id: Option<String>,
    model: Option<String>,
}

/// The harness code of a Responses error `code` (stream `error` / `response.failed`).
pub(crate) fn error_code(code: &str, message: &str) -> &'static str {
    match code {
        "context_length_exceeded" => codes::CONTEXT_WINDOW_EXCEEDED,
        "rate_limit_exceeded" => codes::RATE_LIMIT,
        "insufficient_quota" => codes::QUOTA,
        "server_error" | "server_is_overloaded" | "slow_down" => codes::SERVER,
        "invalid_api_key" => codes::AUTH,
        _ if dsh_llm::is_context_window_exceeded(message) => codes::CONTEXT_WINDOW_EXCEEDED,
        "invalid_prompt" | "invalid_request_error" | "invalid_image" | "invalid_image_url" => {
            codes::INVALID_REQUEST
        }
        _ => codes::UNKNOWN,
    }
}

fn malformed(data: &str, why: &str) -> LlmError {
    let head: String = data.chars().take(120).collect();
    LlmError::new(
        codes::MALFORMED_RESPONSE,
        format!("malformed OpenAI Responses SSE event ({why}): {head}"),
    )
}

fn failure_error(error: &Value, fallback: &str) -> LlmError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .unwrap_or(fallback)
        .to_string();
    let code = error
        .get("code")
        .and_then(Value::as_str)
        .or_else(|| error.get("type").and_then(Value::as_str))
        .unwrap_or("");
    LlmError::new(error_code(code, &message), message)
}

/// Maps Responses usage to disjoint harness counts (cached tokens are taken out of the
/// input count, as for chat completions).
pub(crate) fn map_usage(usage: &Value) -> TokenUsage {
    let n = |v: Option<&Value>| v.and_then(Value::as_u64);
    let cached = n(usage.pointer("/input_tokens_details/cached_tokens"));
    TokenUsage {
        input_tokens: n(usage.get("input_tokens"))
            .unwrap_or(0)
            .saturating_sub(cached.unwrap_or(0)),
        output_tokens: n(usage.get("output_tokens")).unwrap_or(0),
        cache_read_tokens: cached,
        cache_write_tokens: None,
        reasoning_tokens: n(usage.pointer("/output_tokens_details/reasoning_tokens")),
    }
}

fn index(position: usize) -> u32 {
    u32::try_from(position).unwrap_or(u32::MAX)
}

impl ResponsesTranslator {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The open block an event refers to, by `item_id`, else by `output_index`.
    fn position(&self, data: &str, event: &Value) -> Result<usize, LlmError> {
        let item_id = event.get("item_id").and_then(Value::as_str);
        let output_index = event.get("output_index").and_then(Value::as_u64);
        if item_id.is_none() && output_index.is_none() {
            return Err(malformed(data, "no item_id or output_index"));
        }
        self.blocks
            .iter()
            .position(|b| {
                !b.closed
                    && match item_id {
                        Some(id) if !b.item_id.is_empty() => b.item_id == id,
                        _ => output_index.is_some() && b.output_index == output_index,
                    }
            })
            .ok_or_else(|| malformed(data, "delta for an item that is not open"))
    }

    fn delta(
        &mut self,
        data: &str,
        event: &Value,
        want: Kind,
    ) -> Result<Vec<StreamChunk>, LlmError> {
        let position = self.position(data, event)?;
        let block = &mut self.blocks[position];
        if block.kind != want {
            return Err(malformed(data, "delta does not fit its item"));
        }
        let text = event
            .get("delta")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed(data, "no delta text"))?;
        let mut out = Vec::new();
        let mut piece = String::new();
        if want == Kind::Reasoning {
            let summary = event.get("summary_index").and_then(Value::as_u64);
            if summary.is_some()
                && block.summary_index.is_some()
                && summary != block.summary_index
                && !block.text.is_empty()
            {
                piece.push_str("\n\n");
            }
            if summary.is_some() {
                block.summary_index = summary;
            }
        }
        piece.push_str(text);
        if piece.is_empty() {
            return Ok(out);
        }
        block.text.push_str(&piece);
        let index = index(position);
        out.push(match want {
            Kind::Text => StreamChunk::TextDelta { index, text: piece },
            Kind::Reasoning => StreamChunk::ReasoningDelta { index, text: piece },
            Kind::ToolCall => StreamChunk::ToolCallDelta {
                index,
                id: block.call_id.clone(),
                name: None,
                arguments_delta: piece,
            },
        });
        Ok(out)
    }

    fn item_added(&mut self, data: &str, event: &Value) -> Result<Vec<StreamChunk>, LlmError> {
        let item = event
            .get("item")
            .ok_or_else(|| malformed(data, "output_item.added without item"))?;
        let field = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("");
        let kind = match field("type") {
            "message" => Kind::Text,
            "reasoning" => Kind::Reasoning,
            "function_call" => Kind::ToolCall,
            // Built-in tool items (web search, file search, …) carry nothing we keep.
            _ => return Ok(Vec::new()),
        };
        if kind == Kind::ToolCall && (field("call_id").is_empty() || field("name").is_empty()) {
            return Err(malformed(data, "function_call without call_id or name"));
        }
        let position = self.blocks.len();
        let open = Open {
            item_id: field("id").to_string(),
            output_index: event.get("output_index").and_then(Value::as_u64),
            kind,
            text: String::new(),
            call_id: field("call_id").to_string(),
            name: field("name").to_string(),
            encrypted: item
                .get("encrypted_content")
                .and_then(Value::as_str)
                .map(str::to_owned),
            summary_index: None,
            closed: false,
        };
        let block_type = match kind {
            Kind::Text => "text",
            Kind::Reasoning => "reasoning",
            Kind::ToolCall => "tool-call",
        };
        let mut out = vec![StreamChunk::BlockStart {
            index: index(position),
            block_type: block_type.into(),
        }];
        if kind == Kind::ToolCall {
            out.push(StreamChunk::ToolCallDelta {
                index: index(position),
                id: open.call_id.clone(),
                name: Some(open.name.clone()),
                arguments_delta: String::new(),
            });
        }
        self.blocks.push(open);
        Ok(out)
    }

    fn item_done(&mut self, data: &str, event: &Value) -> Result<Vec<StreamChunk>, LlmError> {
        let item = event
            .get("item")
            .ok_or_else(|| malformed(data, "output_item.done without item"))?;
        if !matches!(
            item.get("type").and_then(Value::as_str),
            Some("message" | "reasoning" | "function_call")
        ) {
            return Ok(Vec::new());
        }
        let lookup = json!({"item_id": item.get("id"), "output_index": event.get("output_index")});
        let position = self.position(data, &lookup)?;
        let block = &mut self.blocks[position];
        let mut out = Vec::new();
        // Whatever the deltas did not carry, the finished item does.
        let full = match block.kind {
            Kind::Text => item.get("content").and_then(Value::as_array).map(|parts| {
                parts
                    .iter()
                    .filter_map(|p| p.get("text").or_else(|| p.get("refusal")))
                    .filter_map(Value::as_str)
                    .collect::<String>()
            }),
            Kind::Reasoning => item.get("summary").and_then(Value::as_array).map(|parts| {
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n\n")
            }),
            Kind::ToolCall => item
                .get("arguments")
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        if block.text.is_empty()
            && let Some(full) = full.filter(|f| !f.is_empty())
        {
            block.text = full.clone();
            let index = index(position);
            out.push(match block.kind {
                Kind::Text => StreamChunk::TextDelta { index, text: full },
                Kind::Reasoning => StreamChunk::ReasoningDelta { index, text: full },
                Kind::ToolCall => StreamChunk::ToolCallDelta {
                    index,
                    id: block.call_id.clone(),
                    name: None,
                    arguments_delta: full,
                },
            });
        }
        if let Some(data) = item.get("encrypted_content").and_then(Value::as_str) {
            block.encrypted = Some(data.to_string());
        }
        if block.item_id.is_empty()
            && let Some(id) = item.get("id").and_then(Value::as_str)
        {
            block.item_id = id.to_string();
        }
        block.closed = true;
        out.push(StreamChunk::BlockEnd {
            index: index(position),
            block: block.block(),
        });
        Ok(out)
    }

    /// Translates one event payload. Returns the chunks and whether the stream is complete.
    pub(crate) fn event(&mut self, data: &str) -> Result<(Vec<StreamChunk>, bool), LlmError> {
        let event: Value = serde_json::from_str(data).map_err(|_| malformed(data, "not JSON"))?;
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed(data, "no type"))?;
        let out = match kind {
            "response.created" | "response.in_progress" => {
                if let Some(response) = event.get("response") {
                    self.note_response(response);
                }
                Vec::new()
            }
            "response.output_item.added" => self.item_added(data, &event)?,
            "response.output_item.done" => self.item_done(data, &event)?,
            "response.output_text.delta" | "response.refusal.delta" => {
                self.delta(data, &event, Kind::Text)?
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.delta(data, &event, Kind::Reasoning)?
            }
            "response.function_call_arguments.delta" => self.delta(data, &event, Kind::ToolCall)?,
            "response.completed" | "response.incomplete" => {
                let response = event
                    .get("response")
                    .ok_or_else(|| malformed(data, "no response"))?;
                return Ok((self.finish(response), true));
            }
            "response.failed" => {
                let error = event
                    .pointer("/response/error")
                    .cloned()
                    .unwrap_or(Value::Null);
                return Err(failure_error(&error, "OpenAI Responses request failed"));
            }
            "error" => {
                let error = event.get("error").cloned().unwrap_or_else(|| event.clone());
                return Err(failure_error(&error, "OpenAI Responses stream error"));
            }
            // Other events (part added/done, text done, keep-alives…) carry nothing new.
            _ => Vec::new(),
        };
        Ok((out, false))
    }

    fn note_response(&mut self, response: &Value) {
        if let Some(id) = response.get("id").and_then(Value::as_str) {
            self.response_id = Some(id.to_string());
        }
        if let Some(model) = response.get("model").and_then(Value::as_str) {
            self.model = Some(model.to_string());
        }
    }

    /// The chunks at the end: block-ends of items left open, the usage and the finish.
    fn finish(&mut self, response: &Value) -> Vec<StreamChunk> {
        self.note_response(response);
        let mut out = Vec::new();
        for (position, block) in self.blocks.iter_mut().enumerate() {
            if !block.closed {
                block.closed = true;
                out.push(StreamChunk::BlockEnd {
                    index: index(position),
                    block: block.block(),
                });
            }
        }
        if let Some(usage) = response.get("usage").filter(|u| u.is_object()) {
            out.push(StreamChunk::Usage {
                usage: map_usage(usage),
            });
        }
        let status = response
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("completed");
        let has_calls = self.blocks.iter().any(|b| b.kind == Kind::ToolCall);
        let reason = if status == "incomplete" {
            match response
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
            {
                Some("max_output_tokens") | None => FinishReason::MaxTokens,
                Some(other) => FinishReason::Error(LlmFailure::new(
                    other.to_uppercase(),
                    format!("model stopped: {other}"),
                )),
            }
        } else if has_calls {
            FinishReason::ToolCalls
        } else if self
            .blocks
            .iter()
            .all(|b| b.kind == Kind::Reasoning || b.text.is_empty())
        {
            FinishReason::Error(LlmFailure::new(
                codes::EMPTY_RESPONSE,
                EMPTY_COMPLETION_MESSAGE,
            ))
        } else {
            FinishReason::Stop
        };
        let replay_state = (!self.blocks.is_empty()).then(|| {
            json!({
                "response": {
                    "kind": REPLAY_KIND,
                    "version": REPLAY_VERSION,
                    "model": self.model,
                    "id": self.response_id,
                    "status": status,
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
        let mut t = ResponsesTranslator::new();
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

    fn created() -> Value {
        json!({"type": "response.created", "response": {"id": "resp_1", "model": "gpt-x", "status": "in_progress"}})
    }

    #[test]
    fn reasoning_then_a_call_finishes_with_tool_calls_usage_and_replay() {
        let chunks = run(&[
            created(),
            json!({"type": "response.output_item.added", "output_index": 0,
                   "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
            json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": "Plan."}),
            json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0, "summary_index": 1, "delta": "Go."}),
            json!({"type": "response.output_item.done", "output_index": 0,
                   "item": {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA"}}),
            json!({"type": "response.output_item.added", "output_index": 1,
                   "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "bash", "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 1, "delta": "{\"command\":\"ls\"}"}),
            json!({"type": "response.output_item.done", "output_index": 1,
                   "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "bash", "arguments": "{\"command\":\"ls\"}"}}),
            json!({"type": "response.completed", "response": {"id": "resp_1", "model": "gpt-x", "status": "completed",
                   "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 60},
                             "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 20}}}}),
        ])
        .unwrap();
        assert_eq!(
            chunks,
            vec![
                json!({"type": "block-start", "index": 0, "blockType": "reasoning"}),
                json!({"type": "reasoning-delta", "index": 0, "text": "Plan."}),
                json!({"type": "reasoning-delta", "index": 0, "text": "\n\nGo."}),
                json!({"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "Plan.\n\nGo."}}),
                json!({"type": "block-start", "index": 1, "blockType": "tool-call"}),
                json!({"type": "tool-call-delta", "index": 1, "id": "call_1", "name": "bash", "argumentsDelta": ""}),
                json!({"type": "tool-call-delta", "index": 1, "id": "call_1", "argumentsDelta": "{\"command\":\"ls\"}"}),
                json!({"type": "block-end", "index": 1, "block": {"type": "tool-call", "id": "call_1", "name": "bash", "arguments": "{\"command\":\"ls\"}"}}),
                json!({"type": "usage", "usage": {"inputTokens": 40, "outputTokens": 30, "cacheReadTokens": 60, "reasoningTokens": 20}}),
                json!({"type": "finish", "reason": {"kind": "tool-calls"}, "replayState": {
                    "response": {"kind": "openai-responses", "version": 1, "model": "gpt-x", "id": "resp_1", "status": "completed"},
                    "blocks": [{"type": "reasoning", "itemId": "rs_1", "encryptedContent": "gAAA"},
                               {"type": "tool-call", "itemId": "fc_1"}]}}),
            ]
        );
    }

    #[test]
    fn failures_and_broken_events_are_classified() {
        let failed = |code: &str, message: &str| {
            run(&[
                created(),
                json!({"type": "response.failed", "response": {"id": "resp_1", "status": "failed",
                       "error": {"code": code, "message": message}}}),
            ])
            .unwrap_err()
        };
        assert_eq!(
            failed(
                "context_length_exceeded",
                "Your input exceeds the context window"
            )
            .code(),
            codes::CONTEXT_WINDOW_EXCEEDED
        );
        assert_eq!(failed("server_error", "boom").code(), codes::SERVER);
        assert_eq!(
            failed("rate_limit_exceeded", "slow").code(),
            codes::RATE_LIMIT
        );
        let error = run(&[
            json!({"type": "error", "code": "invalid_prompt", "message": "bad", "param": null}),
        ])
        .unwrap_err();
        assert_eq!(
            (error.code(), error.failure.message.as_str()),
            (codes::INVALID_REQUEST, "bad")
        );
        for broken in [
            "{not json",
            "{\"no\":\"type\"}",
            "{\"type\":\"response.output_text.delta\",\"item_id\":\"msg_9\",\"delta\":\"x\"}",
        ] {
            let mut t = ResponsesTranslator::new();
            assert_eq!(
                t.event(broken).unwrap_err().code(),
                codes::MALFORMED_RESPONSE,
                "{broken}"
            );
        }
    }

    #[test]
    fn an_incomplete_response_is_max_tokens_and_text_only_in_done_is_kept() {
        let chunks = run(&[
            created(),
            json!({"type": "response.output_item.added", "output_index": 0,
                   "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
            json!({"type": "response.output_item.done", "output_index": 0,
                   "item": {"type": "message", "id": "msg_1", "content": [{"type": "output_text", "text": "Hi"}]}}),
            json!({"type": "response.incomplete", "response": {"id": "resp_1", "status": "incomplete",
                   "incomplete_details": {"reason": "max_output_tokens"}}}),
        ])
        .unwrap();
        assert_eq!(
            chunks[1],
            json!({"type": "text-delta", "index": 0, "text": "Hi"})
        );
        assert_eq!(
            chunks.last().unwrap()["reason"],
            json!({"kind": "max-tokens"})
        );
    }
}
