//! Chat-completions SSE payloads → provider-neutral [`StreamChunk`]s.
//!
//! One harness block per text, reasoning and wire tool-call index; indexes are allocated
//! from 0 in order of first appearance across kinds. Deltas stream live; every
//! `block-end`, the latest `usage` and the `finish` are held until `[DONE]`, so nothing can
//! follow `finish` whichever of the two usage shapes (attached to the finish chunk, or a
//! trailing `choices: []` chunk) the endpoint uses.

use dsh_llm::{ContentBlock, FinishReason, LlmError, LlmFailure, StreamChunk, TokenUsage, codes};
use serde::Deserialize;
use serde_json::Value;

/// The message of the error finish for a completed response without any block.
pub(crate) const EMPTY_COMPLETION_MESSAGE: &str =
    "the model ended its response without any content";

#[derive(Deserialize)]
struct WireChunk {
    #[serde(default)]
    choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    /// An error the endpoint reports inside the stream (after a 200), OpenAI-style
    /// `{"error": {"message", "type", "code"}}` (or a bare string).
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    delta: Option<WireDelta>,
    #[serde(default)]
    finish_reason: Option<Value>,
}

#[derive(Deserialize)]
struct WireDelta {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    reasoning_content: Option<Value>,
    /// The field some OpenAI-compatible servers (vLLM, OpenRouter) use for reasoning.
    #[serde(default)]
    reasoning: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
    /// The single call of the legacy function-calling API, which older servers still send.
    #[serde(default)]
    function_call: Option<WireFunction>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    index: Option<Value>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

/// Wire usage. DeepSeek's `prompt_tokens` includes cache hits.
#[derive(Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

/// Maps wire usage to disjoint harness counts: cache reads are subtracted out of the input
/// count; cache and reasoning fields appear whenever the wire reported them (including 0).
pub(crate) fn map_usage(usage: &WireUsage) -> TokenUsage {
    let cache_read = usage
        .prompt_tokens_details
        .as_ref()
        .and_then(|d| d.cached_tokens)
        .or(usage.prompt_cache_hit_tokens);
    TokenUsage {
        input_tokens: usage
            .prompt_tokens
            .unwrap_or(0)
            .saturating_sub(cache_read.unwrap_or(0)),
        output_tokens: usage.completion_tokens.unwrap_or(0),
        cache_read_tokens: cache_read,
        cache_write_tokens: None,
        reasoning_tokens: usage
            .completion_tokens_details
            .as_ref()
            .and_then(|d| d.reasoning_tokens),
    }
}

/// Maps a wire `finish_reason`; unknown values (`content_filter`, …) become an error finish
/// whose code is the raw value upper-cased.
pub(crate) fn map_finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        // `function_call`: the legacy single-call API some servers still answer in.
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "length" => FinishReason::MaxTokens,
        other => FinishReason::Error(LlmFailure::new(
            other.to_uppercase(),
            format!("model stopped: {other}"),
        )),
    }
}

/// The kind of a streamed content block (chat completions, Messages, Responses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockKind {
    Text,
    Reasoning,
    ToolCall,
}

impl BlockKind {
    /// The block's harness name (`block-start` kinds, replay-state `type`s).
    pub(crate) fn name(self) -> &'static str {
        match self {
            BlockKind::Text => "text",
            BlockKind::Reasoning => "reasoning",
            BlockKind::ToolCall => "tool-call",
        }
    }

    /// The finished block of a Messages or Responses stream. A call that streamed no input
    /// has `{}` arguments.
    pub(crate) fn block(self, text: &str, id: &str, name: &str) -> ContentBlock {
        match self {
            BlockKind::Text => ContentBlock::Text { text: text.into() },
            BlockKind::Reasoning => ContentBlock::Reasoning { text: text.into() },
            BlockKind::ToolCall => ContentBlock::ToolCall {
                id: id.into(),
                name: name.into(),
                arguments: if text.is_empty() {
                    "{}".into()
                } else {
                    text.into()
                },
            },
        }
    }
}

#[derive(Debug)]
struct OpenBlock {
    index: u32,
    kind: BlockKind,
    text: String,
    call_id: Option<String>,
    name: Option<String>,
}

impl OpenBlock {
    /// The finished block; the text moves into it (the stream is over).
    fn close(&mut self) -> ContentBlock {
        let text = std::mem::take(&mut self.text);
        match self.kind {
            BlockKind::Text => ContentBlock::Text { text },
            BlockKind::Reasoning => ContentBlock::Reasoning { text },
            BlockKind::ToolCall => ContentBlock::ToolCall {
                id: self.call_id.clone().unwrap_or_default(),
                name: self.name.clone().unwrap_or_default(),
                arguments: text,
            },
        }
    }
}

/// Which wire fields carry reasoning text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReasoningField {
    /// Only `reasoning_content` (DeepSeek).
    ReasoningContent,
    /// `reasoning_content`, else `reasoning` (generic OpenAI-compatible servers).
    ReasoningContentOrReasoning,
}

/// Stateful translator of one stream; see the module docs.
#[derive(Debug)]
pub(crate) struct Translator {
    reasoning_field: ReasoningField,
    /// Opened blocks, in opening order (their `index` is their position).
    blocks: Vec<OpenBlock>,
    text: Option<usize>,
    reasoning: Option<usize>,
    /// Wire tool-call index (its JSON text) → position in `blocks`.
    tools: Vec<(String, usize)>,
    pending_finish: Option<FinishReason>,
    pending_usage: Option<TokenUsage>,
}

impl Translator {
    pub(crate) fn new(reasoning_field: ReasoningField) -> Self {
        Self {
            reasoning_field,
            blocks: Vec::new(),
            text: None,
            reasoning: None,
            tools: Vec::new(),
            pending_finish: None,
            pending_usage: None,
        }
    }

    fn open(&mut self, kind: BlockKind, out: &mut Vec<StreamChunk>) -> usize {
        let position = self.blocks.len();
        let index = u32::try_from(position).unwrap_or(u32::MAX);
        self.blocks.push(OpenBlock {
            index,
            kind,
            text: String::new(),
            call_id: None,
            name: None,
        });
        out.push(StreamChunk::BlockStart {
            index,
            block_type: kind.name().into(),
        });
        position
    }

    /// Whether this reads a generic OpenAI-compatible endpoint (not DeepSeek's own API),
    /// whose servers vary in how they shape tool calls.
    fn generic(&self) -> bool {
        self.reasoning_field == ReasoningField::ReasoningContentOrReasoning
    }

    /// Translates one JSON payload (not `[DONE]`). Invalid payloads are
    /// `MALFORMED_RESPONSE` (`malformed SSE payload: <first 120 chars>`).
    pub(crate) fn payload(&mut self, data: &str) -> Result<Vec<StreamChunk>, LlmError> {
        let chunk: WireChunk = serde_json::from_str(data).map_err(|_| malformed(data))?;
        if let Some(error) = chunk.error.as_ref().filter(|e| !e.is_null()) {
            return Err(stream_error(error));
        }
        let mut out = Vec::new();
        for choice in chunk.choices.unwrap_or_default() {
            if let Some(delta) = choice.delta {
                self.delta(delta, &mut out);
            }
            if let Some(Value::String(reason)) = &choice.finish_reason {
                self.pending_finish = Some(map_finish_reason(reason));
            }
        }
        if let Some(usage) = &chunk.usage {
            self.pending_usage = Some(map_usage(usage));
        }
        Ok(out)
    }

    fn delta(&mut self, delta: WireDelta, out: &mut Vec<StreamChunk>) {
        let reasoning = match (
            self.reasoning_field,
            &delta.reasoning_content,
            &delta.reasoning,
        ) {
            (_, Some(Value::String(r)), _) => Some(r.as_str()),
            (ReasoningField::ReasoningContentOrReasoning, _, Some(Value::String(r))) => {
                Some(r.as_str())
            }
            _ => None,
        };
        // The empty first reasoning chunk of thinking mode must not open a block.
        if let Some(text) = reasoning.filter(|r| !r.is_empty()) {
            let position = match self.reasoning {
                Some(p) => p,
                None => {
                    let p = self.open(BlockKind::Reasoning, out);
                    self.reasoning = Some(p);
                    p
                }
            };
            let block = &mut self.blocks[position];
            block.text.push_str(text);
            out.push(StreamChunk::ReasoningDelta {
                index: block.index,
                text: text.into(),
            });
        }
        if let Some(Value::String(text)) = &delta.content
            && !text.is_empty()
        {
            let position = match self.text {
                Some(p) => p,
                None => {
                    let p = self.open(BlockKind::Text, out);
                    self.text = Some(p);
                    p
                }
            };
            let block = &mut self.blocks[position];
            block.text.push_str(text);
            out.push(StreamChunk::TextDelta {
                index: block.index,
                text: text.clone(),
            });
        }
        let calls = match (delta.tool_calls, delta.function_call) {
            (Some(calls), _) => calls,
            (None, Some(function)) if self.generic() => vec![WireToolCall {
                index: Some(Value::from("function_call")),
                id: None,
                function: Some(function),
            }],
            _ => Vec::new(),
        };
        for call in calls {
            let key = call
                .index
                .as_ref()
                .map_or_else(|| "undefined".to_string(), Value::to_string);
            let position = match self.tools.iter().find(|(k, _)| *k == key) {
                Some((_, p)) => *p,
                None => {
                    let p = self.open(BlockKind::ToolCall, out);
                    self.tools.push((key, p));
                    p
                }
            };
            let block = &mut self.blocks[position];
            if let Some(id) = call.id {
                block.call_id = Some(id);
            }
            let (name, fragment) = match call.function {
                Some(f) => (f.name, f.arguments.unwrap_or_default()),
                None => (None, String::new()),
            };
            if let Some(name) = name {
                block.name = Some(name);
            }
            block.text.push_str(&fragment);
            // Emitted even for an empty fragment: the first DeepSeek delta carries the id and
            // name with `arguments: ""`.
            out.push(StreamChunk::ToolCallDelta {
                index: block.index,
                id: block.call_id.clone().unwrap_or_default(),
                name: block.name.clone(),
                arguments_delta: fragment,
            });
        }
    }

    /// Translates one whole (non-streamed) chat completion: its `message` read as the
    /// single delta of a stream, then the end of that stream. A body that is not a chat
    /// completion is `MALFORMED_RESPONSE`; an `error` object is classified like a stream's.
    pub(crate) fn completion(&mut self, body: &[u8]) -> Result<Vec<StreamChunk>, LlmError> {
        let text = String::from_utf8_lossy(body);
        let mut value: Value = serde_json::from_str(&text).map_err(|_| malformed(&text))?;
        let Some(object) = value.as_object_mut() else {
            return Err(malformed(&text));
        };
        if !object.contains_key("choices") && !object.contains_key("error") {
            return Err(malformed(&text));
        }
        if let Some(Value::Array(choices)) = object.get_mut("choices") {
            for choice in choices.iter_mut().filter_map(Value::as_object_mut) {
                let Some(mut message) = choice.remove("message") else {
                    continue;
                };
                // The legacy `function_call` some servers add beside `tool_calls` repeats
                // the first call.
                if message.get("tool_calls").is_some_and(|c| !c.is_null())
                    && let Some(m) = message.as_object_mut()
                {
                    m.remove("function_call");
                }
                // A message's tool calls carry no `index`: their position is it.
                if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
                    for (i, call) in calls.iter_mut().enumerate() {
                        if let Some(call) = call.as_object_mut() {
                            call.entry("index").or_insert_with(|| Value::from(i));
                        }
                    }
                }
                choice.insert("delta".into(), message);
            }
        }
        let mut out = self.payload(&dsh_kernel::json::to_string(&value))?;
        out.extend(self.done());
        Ok(out)
    }

    /// The chunks due at `[DONE]`: a `block-end` per opened block in opening order, the
    /// latest usage, then the finish (`stop` when none arrived; a `stop` with no block ever
    /// opened is an `EMPTY_RESPONSE` error).
    pub(crate) fn done(&mut self) -> Vec<StreamChunk> {
        let generic = self.generic();
        let mut nameless = None;
        let mut out: Vec<StreamChunk> = self
            .blocks
            .iter_mut()
            .map(|b| {
                let mut block = b.close();
                if let (true, ContentBlock::ToolCall { id, name, .. }) = (generic, &mut block) {
                    // Servers that number calls but give them no id get one (a tool result
                    // must name its call).
                    if id.is_empty() {
                        *id = format!("call_{}", b.index);
                    }
                    if name.is_empty() && nameless.is_none() {
                        nameless = Some(b.index);
                    }
                }
                StreamChunk::BlockEnd {
                    index: b.index,
                    block,
                }
            })
            .collect();
        if let Some(usage) = self.pending_usage.take() {
            out.push(StreamChunk::Usage { usage });
        }
        if let Some(index) = nameless {
            out.push(StreamChunk::finish(FinishReason::Error(LlmFailure::new(
                codes::MALFORMED_RESPONSE,
                format!(
                    "the endpoint sent a tool call with no function name (block {index}): its \
                     tool calls are not in the OpenAI shape (tool_calls[].function.name); \
                     check the server's tool-call parsing settings"
                ),
            ))));
            return out;
        }
        let reason = match self.pending_finish.take().unwrap_or(FinishReason::Stop) {
            FinishReason::Stop if self.blocks.is_empty() => FinishReason::Error(LlmFailure::new(
                codes::EMPTY_RESPONSE,
                EMPTY_COMPLETION_MESSAGE,
            )),
            other => other,
        };
        out.push(StreamChunk::finish(reason));
        out
    }
}

/// The failure of an error the endpoint sent inside a stream: the provider's own text,
/// classified by its wording (quota, context overflow, rate limit, invalid request,
/// authentication; anything else is a server failure, as an error after a 200 usually is).
pub(crate) fn stream_error(error: &Value) -> LlmError {
    let field = |name: &str| {
        error
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let message = match error {
        Value::String(text) if !text.is_empty() => text.clone(),
        _ => match field("message") {
            Some(text) => text.to_string(),
            None => format!("the provider reported an error mid-stream: {error}"),
        },
    };
    let detail = [field("code"), field("type"), Some(message.as_str())]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
    let lower = detail.to_ascii_lowercase();
    let code = if crate::http_error::is_quota_exceeded(&detail) {
        codes::QUOTA
    } else if dsh_llm::is_context_window_exceeded(&detail) {
        codes::CONTEXT_WINDOW_EXCEEDED
    } else if lower.contains("rate_limit") || lower.contains("rate limit") {
        codes::RATE_LIMIT
    } else if lower.contains("authentication") || lower.contains("permission") {
        codes::AUTH
    } else if lower.contains("invalid_request") {
        codes::INVALID_REQUEST
    } else {
        codes::SERVER
    };
    LlmError::new(code, message)
}

fn malformed(data: &str) -> LlmError {
    let head: String = data.chars().take(120).collect();
    LlmError::new(
        codes::MALFORMED_RESPONSE,
        format!("malformed SSE payload: {head}"),
    )
}

#[cfg(test)]
mod tests;
