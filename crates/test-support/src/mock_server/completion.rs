//! Streamed completions in DeepSeek's wire shapes.

use serde_json::{Value, json};

/// One scripted tool call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

impl ToolCall {
    pub fn new(id: &str, name: &str, arguments: &str) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }
}

/// Wire usage of a scripted completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// Includes cache hits, as DeepSeek reports it.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Sent as `prompt_cache_hit_tokens` (plus the matching `prompt_cache_miss_tokens`).
    pub prompt_cache_hit_tokens: Option<u64>,
    /// Sent as `completion_tokens_details.reasoning_tokens`.
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            prompt_cache_hit_tokens: None,
            reasoning_tokens: None,
        }
    }

    pub fn cache_hits(mut self, tokens: u64) -> Self {
        self.prompt_cache_hit_tokens = Some(tokens);
        self
    }

    pub fn reasoning(mut self, tokens: u64) -> Self {
        self.reasoning_tokens = Some(tokens);
        self
    }

    /// The wire object.
    pub fn to_json(&self) -> Value {
        let mut usage = json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        });
        if let Some(hits) = self.prompt_cache_hit_tokens {
            usage["prompt_tokens_details"] = json!({"cached_tokens": hits});
            usage["prompt_cache_hit_tokens"] = json!(hits);
            usage["prompt_cache_miss_tokens"] = json!(self.prompt_tokens.saturating_sub(hits));
        }
        if let Some(reasoning) = self.reasoning_tokens {
            usage["completion_tokens_details"] = json!({"reasoning_tokens": reasoning});
        }
        usage
    }
}

/// Where usage travels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UsagePlacement {
    /// On the chunk carrying `finish_reason` (DeepSeek).
    #[default]
    OnFinishChunk,
    /// In a trailing `choices: []` chunk (OpenAI).
    TrailingChunk,
}

/// A streamed chat completion in DeepSeek's shapes: a role chunk (with the empty
/// `reasoning_content: ""` of thinking mode when there is reasoning), reasoning deltas,
/// text deltas, tool calls (first delta with id, name and `arguments: ""`, then argument
/// fragments), the finish chunk with usage, and `[DONE]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub reasoning: Option<String>,
    pub text: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    /// Default: `tool_calls` when there are tool calls, else `stop`.
    pub finish_reason: Option<String>,
    /// Default: `Usage::new(12, 8)`; `None` sends no usage at all.
    pub usage: Option<Usage>,
    pub usage_placement: UsagePlacement,
    /// Characters per text/reasoning delta (argument fragments are twice as long).
    pub delta_chars: usize,
    pub model: String,
}

impl Default for Completion {
    fn default() -> Self {
        Self {
            reasoning: None,
            text: None,
            tool_calls: Vec::new(),
            finish_reason: None,
            usage: Some(Usage::new(12, 8)),
            usage_placement: UsagePlacement::OnFinishChunk,
            delta_chars: 3,
            model: "deepseek-v4-flash".into(),
        }
    }
}

fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(size.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

impl Completion {
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    pub fn reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning = Some(reasoning.into());
        self
    }

    pub fn tool_call(mut self, call: ToolCall) -> Self {
        self.tool_calls.push(call);
        self
    }

    pub fn finish_reason(mut self, reason: &str) -> Self {
        self.finish_reason = Some(reason.into());
        self
    }

    pub fn usage(mut self, usage: Option<Usage>) -> Self {
        self.usage = usage;
        self
    }

    pub fn usage_placement(mut self, placement: UsagePlacement) -> Self {
        self.usage_placement = placement;
        self
    }

    pub fn delta_chars(mut self, chars: usize) -> Self {
        self.delta_chars = chars;
        self
    }

    fn envelope(&self, choices: Value) -> Value {
        json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": self.model,
            "system_fingerprint": "fp_mock",
            "choices": choices,
        })
    }

    fn delta_chunk(&self, delta: Value) -> String {
        self.envelope(
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]),
        )
        .to_string()
    }

    /// The SSE `data` payloads, `[DONE]` last.
    pub fn payloads(&self) -> Vec<String> {
        let thinking = self.reasoning.is_some();
        let mut out = Vec::new();
        out.push(self.delta_chunk(if thinking {
            json!({"role": "assistant", "content": null, "reasoning_content": ""})
        } else {
            json!({"role": "assistant", "content": ""})
        }));
        for piece in pieces(self.reasoning.as_deref().unwrap_or(""), self.delta_chars) {
            out.push(self.delta_chunk(json!({"content": null, "reasoning_content": piece})));
        }
        for piece in pieces(self.text.as_deref().unwrap_or(""), self.delta_chars) {
            out.push(self.delta_chunk(if thinking {
                json!({"content": piece, "reasoning_content": null})
            } else {
                json!({"content": piece})
            }));
        }
        for (index, call) in self.tool_calls.iter().enumerate() {
            out.push(self.delta_chunk(
                json!({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": ""}}]}),
            ));
            for piece in pieces(&call.arguments, self.delta_chars * 2) {
                out.push(self.delta_chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                ));
            }
        }
        let reason = self.finish_reason.clone().unwrap_or_else(|| {
            if self.tool_calls.is_empty() {
                "stop".into()
            } else {
                "tool_calls".into()
            }
        });
        let mut finish =
            self.envelope(json!([{"index": 0, "delta": {"content": ""}, "logprobs": null, "finish_reason": reason}]));
        match (self.usage, self.usage_placement) {
            (Some(usage), UsagePlacement::OnFinishChunk) => {
                finish["usage"] = usage.to_json();
                out.push(finish.to_string());
            }
            (Some(usage), UsagePlacement::TrailingChunk) => {
                out.push(finish.to_string());
                let mut trailing = self.envelope(json!([]));
                trailing["usage"] = usage.to_json();
                out.push(trailing.to_string());
            }
            (None, _) => out.push(finish.to_string()),
        }
        out.push("[DONE]".into());
        out
    }
}

/// The wire protocol a model request speaks, from its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `…/chat/completions` (and anything else scripted in its frames).
    ChatCompletions,
    /// `…/messages`: Anthropic's Messages API, as DeepSeek's `/anthropic` endpoint serves it.
    Messages,
}

impl Protocol {
    /// The protocol of a request to `path`.
    pub fn of_path(path: &str) -> Self {
        if path.trim_end_matches('/').ends_with("/messages") {
            Self::Messages
        } else {
            Self::ChatCompletions
        }
    }
}

impl Completion {
    /// The SSE events of this completion in `protocol`, each a complete event
    /// (`[event: <type>\n]data: <json>\n\n`). `model` names the model a Messages stream
    /// reports (the requested one).
    pub fn events(&self, protocol: Protocol, model: &str) -> Vec<String> {
        match protocol {
            Protocol::ChatCompletions => self
                .payloads()
                .iter()
                .map(|p| format!("data: {p}\n\n"))
                .collect(),
            Protocol::Messages => self
                .message_payloads(model)
                .iter()
                .map(|p| format!("event: {}\ndata: {p}\n\n", p["type"].as_str().unwrap_or("")))
                .collect(),
        }
    }

    /// The Messages stream: `message_start`, one content block per reasoning (a `thinking`
    /// block closed by a signature), text and tool call, `message_delta` with the stop reason
    /// and usage, `message_stop`.
    pub fn message_payloads(&self, model: &str) -> Vec<Value> {
        let usage = self.usage.unwrap_or(Usage::new(0, 0));
        let hits = usage.prompt_cache_hit_tokens.unwrap_or(0);
        let input = usage.prompt_tokens.saturating_sub(hits);
        let mut out = vec![json!({
            "type": "message_start",
            "message": {
                "id": "msg_mock", "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": input, "output_tokens": 0,
                          "cache_read_input_tokens": hits, "cache_creation_input_tokens": 0},
            },
        })];
        let mut index = 0;
        let mut block = |out: &mut Vec<Value>, start: Value, deltas: Vec<Value>| {
            out.push(
                json!({"type": "content_block_start", "index": index, "content_block": start}),
            );
            for delta in deltas {
                out.push(json!({"type": "content_block_delta", "index": index, "delta": delta}));
            }
            out.push(json!({"type": "content_block_stop", "index": index}));
            index += 1;
        };
        if let Some(reasoning) = &self.reasoning {
            let mut deltas: Vec<Value> = pieces(reasoning, self.delta_chars)
                .into_iter()
                .map(|p| json!({"type": "thinking_delta", "thinking": p}))
                .collect();
            deltas.push(json!({"type": "signature_delta", "signature": "mocksig"}));
            block(
                &mut out,
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                deltas,
            );
        }
        if let Some(text) = self.text.as_deref().filter(|t| !t.is_empty()) {
            let deltas = pieces(text, self.delta_chars)
                .into_iter()
                .map(|p| json!({"type": "text_delta", "text": p}))
                .collect();
            block(&mut out, json!({"type": "text", "text": ""}), deltas);
        }
        for call in &self.tool_calls {
            let deltas = pieces(&call.arguments, self.delta_chars * 2)
                .into_iter()
                .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
                .collect();
            block(
                &mut out,
                json!({"type": "tool_use", "id": call.id, "name": call.name, "input": {}}),
                deltas,
            );
        }
        let reason = match self.finish_reason.as_deref() {
            None if self.tool_calls.is_empty() => "end_turn",
            None => "tool_use",
            Some("stop") => "end_turn",
            Some("tool_calls") => "tool_use",
            Some("length") => "max_tokens",
            Some("content_filter") => "refusal",
            Some(other) => other,
        };
        // The Messages API always reports usage (`message_delta.usage` is required).
        out.push(json!({
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": null},
            "usage": {"output_tokens": usage.completion_tokens},
        }));
        out.push(json!({"type": "message_stop"}));
        out
    }
}
