//! Harness request → Anthropic Messages JSON body.
//!
//! Key order: `model, max_tokens, system?, messages, tools?, thinking?, temperature?,
//! stop_sequences?, stream`. The system prompt travels as one text block; history messages of
//! the same role are merged (tool results must all sit in the user turn after their calls,
//! before any other content). Assistant reasoning is replayed as `thinking` with its
//! signature (or `redacted_thinking`) only when the message came from the same route with an
//! `anthropic-messages` replay state; unsigned reasoning is dropped, since the API refuses
//! thinking without a signature. Prompt caching marks the system prompt and the last block of
//! the last message with `cache_control` (Anthropic's incremental-conversation pattern).

use crate::serialize::{LeanBody, has_image, object};
use dsh_llm::{ContentBlock, GenerateOptions, LlmError, Message, MessageSource, Role, codes};
use serde_json::{Map, Value, json};

use super::config::{CacheRetention, ResolvedAnthropicModel, ResolvedAnthropicProfile};
use super::translate::REPLAY_KIND;

fn cache_control(retention: CacheRetention) -> Option<Value> {
    match retention {
        CacheRetention::None => None,
        CacheRetention::Short => Some(json!({"type": "ephemeral"})),
        CacheRetention::Long => Some(json!({"type": "ephemeral", "ttl": "1h"})),
    }
}

/// The effort of one request: the explicit one, else the deployment default the model
/// offers. Refuses an effort the model does not offer.
pub(crate) fn resolve_effort(
    options: &GenerateOptions,
    profile: &ResolvedAnthropicProfile,
    model: &ResolvedAnthropicModel,
) -> Result<Option<String>, LlmError> {
    if options.purpose.is_side_call() {
        return Ok(None);
    }
    match &options.config.reasoning_effort {
        Some(requested) => {
            let offered = model
                .efforts
                .as_ref()
                .is_some_and(|e| e.iter().any(|x| x == requested));
            if !offered {
                return Err(LlmError::new(
                    codes::UNSUPPORTED_REASONING_EFFORT,
                    format!(
                        "{} model \"{}\" does not support reasoning effort \"{requested}\"",
                        profile.vendor, model.id
                    ),
                ));
            }
            Ok(Some(requested.clone()))
        }
        None => Ok(profile
            .reasoning
            .clone()
            .filter(|d| model.efforts.as_ref().is_some_and(|e| e.contains(d)))),
    }
}

/// Builds the request body: [`body_text`] writes it out with the tool schemas.
pub(crate) fn serialize_messages_request(
    options: &GenerateOptions,
    profile: &ResolvedAnthropicProfile,
    model: &ResolvedAnthropicModel,
) -> Result<LeanBody, LlmError> {
    let effort = resolve_effort(options, profile, model)?;
    serialize_with_effort(options, profile, model, effort.as_deref())
}

/// The text of a body from [`serialize_with_effort`] (after any edits of its other fields),
/// with the tool schemas in place of their placeholder.
pub(crate) fn body_text(body: &LeanBody, options: &GenerateOptions) -> String {
    crate::serialize::body_text(body, options, crate::serialize::ToolsWire::Messages)
}

/// [`serialize_messages_request`] with the effort already decided (`None`: no thinking
/// block), whatever `options.config.reasoning_effort` says.
pub(crate) fn serialize_with_effort(
    options: &GenerateOptions,
    profile: &ResolvedAnthropicProfile,
    model: &ResolvedAnthropicModel,
    effort: Option<&str>,
) -> Result<LeanBody, LlmError> {
    let cache = cache_control(profile.cache_retention);
    let mut max_tokens = options.config.max_tokens.unwrap_or(model.max_tokens).max(1);
    let thinking = match effort {
        None | Some("off") => None,
        Some(level) => {
            let budget = profile.budget(level);
            // The budget must stay below max_tokens: room is made for at least 1024 tokens
            // of answer, within the model's output cap.
            if budget + 1_024 > max_tokens {
                max_tokens = (budget + 1_024).min(model.max_tokens.max(max_tokens));
            }
            let budget = budget.min(max_tokens.saturating_sub(1_024));
            (budget >= 1_024).then(|| json!({"type": "enabled", "budget_tokens": budget}))
        }
    };
    let messages = messages_text(options, cache.as_ref())?;
    let mut body = Map::new();
    body.insert("model".into(), Value::from(model.id.as_str()));
    body.insert("max_tokens".into(), Value::from(max_tokens));
    if let Some(system) = options.system.as_ref().filter(|s| !s.is_empty()) {
        let mut block = json!({"type": "text", "text": system});
        if let Some(cache) = &cache {
            block["cache_control"] = cache.clone();
        }
        body.insert("system".into(), json!([block]));
    }
    body.insert("messages".into(), Value::Null);
    if options.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        body.insert("tools".into(), Value::Null);
    }
    let thinking_on = thinking.is_some();
    if let Some(thinking) = thinking {
        body.insert("thinking".into(), thinking);
    }
    if let Some(temperature) = options.config.temperature
        && model.supports_temperature
        && !thinking_on
        && let Some(n) = serde_json::Number::from_f64(temperature)
    {
        body.insert("temperature".into(), Value::Number(n));
    }
    if let Some(stop) = options.config.stop.as_ref().filter(|s| !s.is_empty()) {
        body.insert("stop_sequences".into(), json!(stop));
    }
    body.insert("stream".into(), Value::Bool(true));
    Ok(LeanBody {
        fields: Value::Object(body),
        messages,
    })
}

/// One history message on the Messages wire: its role and its content blocks as text.
struct WireMessage {
    role: &'static str,
    blocks: Vec<WireBlock>,
}

struct WireBlock {
    text: String,
    tool_result: bool,
    /// A `thinking` or `redacted_thinking` block, which takes no cache mark.
    thinking: bool,
}

/// Messages blocks of each history message, by the route that decides whether reasoning is
/// replayed.
static KEPT: crate::kept::Kept<WireMessage> = crate::kept::Kept::new();

/// The `messages` array as text. Messages of the same role are merged, their tool results
/// first (a stable partition, as the API requires), messages without content are left out,
/// and `cache` marks the last block unless it is reasoning.
fn messages_text(options: &GenerateOptions, cache: Option<&Value>) -> Result<String, LlmError> {
    let route = options.config.provider.as_str();
    let wires = KEPT.wires(
        &options.messages,
        route,
        // Inlined image bytes are request-only and large: written again each time.
        |m| !has_image(&m.content),
        |message| {
            let (role, blocks) = serialize_message(message, route)?;
            let blocks = blocks
                .iter()
                .map(|block| WireBlock {
                    text: dsh_kernel::json::to_string(block),
                    tool_result: block["type"] == "tool_result",
                    thinking: matches!(
                        block["type"].as_str(),
                        Some("thinking" | "redacted_thinking")
                    ),
                })
                .collect();
            Ok(WireMessage { role, blocks })
        },
    )?;
    let mut merged: Vec<(&str, Vec<&WireBlock>)> = Vec::new();
    for wire in wires.iter().filter(|w| !w.blocks.is_empty()) {
        match merged.last_mut() {
            Some((role, blocks)) if *role == wire.role => {
                blocks.extend(&wire.blocks);
                blocks.sort_by_key(|b| !b.tool_result);
            }
            _ => merged.push((wire.role, wire.blocks.iter().collect())),
        }
    }
    let mark = cache.map(dsh_kernel::json::to_string);
    let size: usize = wires
        .iter()
        .flat_map(|w| &w.blocks)
        .map(|b| b.text.len() + 1)
        .sum();
    let mut out = String::with_capacity(size + 40 * merged.len() + 64);
    out.push('[');
    let last_message = merged.len().saturating_sub(1);
    for (i, (role, blocks)) in merged.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"role\":");
        dsh_kernel::json::write_string(&mut out, role);
        out.push_str(",\"content\":[");
        for (j, block) in blocks.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            match &mark {
                Some(mark) if i == last_message && j + 1 == blocks.len() && !block.thinking => {
                    // The block's own object, one field longer.
                    let open = block.text.strip_suffix('}').unwrap_or(&block.text);
                    out.push_str(open);
                    out.push_str(",\"cache_control\":");
                    out.push_str(mark);
                    out.push('}');
                }
                _ => out.push_str(&block.text),
            }
        }
        out.push_str("]}");
    }
    out.push(']');
    Ok(out)
}

/// The replay entries of a message this route produced, if it carries a Messages replay
/// state.
fn replay_entries<'a>(message: &'a Message, route: &str) -> Option<&'a Vec<Value>> {
    let MessageSource::Model {
        provider,
        replay_state: Some(state),
        ..
    } = &message.source
    else {
        return None;
    };
    if provider != route || state["response"]["kind"] != REPLAY_KIND {
        return None;
    }
    state["blocks"].as_array()
}

fn serialize_message(
    message: &Message,
    route: &str,
) -> Result<(&'static str, Vec<Value>), LlmError> {
    match message.role {
        Role::Assistant => Ok(("assistant", assistant_blocks(message, route)?)),
        Role::User => {
            let mut results = Vec::new();
            let mut rest = Vec::new();
            for block in &message.content {
                match block {
                    ContentBlock::ToolResult {
                        tool_call_id,
                        content,
                        is_error,
                    } => {
                        let mut inner = Vec::new();
                        user_blocks(content, &mut inner)?;
                        if inner.is_empty() {
                            inner.push(json!({"type": "text", "text": "(no output)"}));
                        }
                        let mut result = object([
                            ("type", Value::from("tool_result")),
                            ("tool_use_id", Value::from(tool_call_id.as_str())),
                            ("content", Value::Array(inner)),
                        ]);
                        if *is_error == Some(true) {
                            result["is_error"] = Value::Bool(true);
                        }
                        results.push(result);
                    }
                    other => user_blocks(std::slice::from_ref(other), &mut rest)?,
                }
            }
            results.extend(rest);
            Ok(("user", results))
        }
        // Mid-history system messages have no Messages role: they travel as user text.
        Role::System => {
            let text: String = message
                .content
                .iter()
                .filter_map(ContentBlock::as_text)
                .collect();
            Ok((
                "user",
                if text.is_empty() {
                    Vec::new()
                } else {
                    vec![json!({"type": "text", "text": text})]
                },
            ))
        }
    }
}

/// User-input blocks: non-empty text, and for each image its handle text then a base64
/// image source block.
fn user_blocks(blocks: &[ContentBlock], out: &mut Vec<Value>) -> Result<(), LlmError> {
    for block in blocks {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => {
                out.push(json!({"type": "text", "text": text}));
            }
            ContentBlock::ToolResult { content, .. } => user_blocks(content, out)?,
            other => {
                let Some(reference) = other.image_ref() else {
                    continue;
                };
                let reference = reference.map_err(|e| LlmError::new(codes::INVALID_REQUEST, e))?;
                let Some(data) = dsh_llm::image_request_data(other) else {
                    return Err(LlmError::new(
                        codes::INVALID_REQUEST,
                        format!(
                            "request image {} was not prepared.",
                            reference.attachment_id
                        ),
                    ));
                };
                out.push(json!({"type": "text", "text": reference.request_handle_text()}));
                out.push(json!({"type": "image", "source": {
                    "type": "base64", "media_type": reference.media_type, "data": data}}));
            }
        }
    }
    Ok(())
}

fn assistant_blocks(message: &Message, route: &str) -> Result<Vec<Value>, LlmError> {
    let entries = replay_entries(message, route);
    // Replay entries line up with the content when the counts agree; otherwise the
    // reasoning entries are matched to the reasoning blocks in order.
    let aligned = entries.filter(|e| e.len() == message.content.len());
    let mut reasoning_entries = entries
        .map(|e| {
            e.iter()
                .filter(|x| x["type"] == "reasoning")
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter();
    let mut out = Vec::new();
    for (i, block) in message.content.iter().enumerate() {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => {
                out.push(json!({"type": "text", "text": text}));
            }
            ContentBlock::Reasoning { text } => {
                let entry = match aligned {
                    Some(entries) => entries.get(i),
                    None => reasoning_entries.next(),
                };
                let Some(entry) = entry else { continue };
                if let Some(data) = entry["redactedData"].as_str() {
                    out.push(json!({"type": "redacted_thinking", "data": data}));
                } else if let Some(signature) = entry["signature"].as_str() {
                    out.push(json!({"type": "thinking", "thinking": text, "signature": signature}));
                }
            }
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => {
                let input = match serde_json::from_str::<Value>(arguments) {
                    Ok(Value::Object(map)) => Value::Object(map),
                    // The model produced something that is not an object: the call failed
                    // as a tool error already; the wire still needs an object.
                    _ => json!({}),
                };
                out.push(object([
                    ("type", Value::from("tool_use")),
                    ("id", Value::from(id.as_str())),
                    ("name", Value::from(name.as_str())),
                    ("input", input),
                ]));
            }
            other if other.block_type() == "image" => {
                return Err(LlmError::new(
                    "UNSUPPORTED_CONTENT",
                    "The Anthropic Messages wire cannot represent image content in an assistant message.",
                ));
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;
    use crate::anthropic::config::AnthropicConfig;
    use dsh_llm::{LlmCallConfig, ToolSchema};
    use pretty_assertions::assert_eq;

    fn profile(extra: Value) -> ResolvedAnthropicProfile {
        let mut p = json!({"apiKeyEnv": "ANTHROPIC_API_KEY", "models": [
            {"id": "claude-x", "maxTokens": 64000, "reasoningEfforts": {"off": null, "low": "low", "high": "high"}},
            {"id": "plain", "maxTokens": 4096}]});
        crate::live::layer_settings(&mut p, extra);
        AnthropicConfig::from_value(&json!({"providers": {"anthropic": p}}))
            .unwrap()
            .resolve()
            .unwrap()
            .swap_remove("anthropic")
            .unwrap()
    }

    /// The body as sent, read back.
    fn body(options: &GenerateOptions, profile: &ResolvedAnthropicProfile) -> Value {
        let model = profile.model(&options.config.model).unwrap();
        let lean = serialize_messages_request(options, profile, model).unwrap();
        serde_json::from_str(&body_text(&lean, options)).unwrap()
    }

    fn options(model: &str, messages: Vec<Message>) -> GenerateOptions {
        let mut o = GenerateOptions::new(
            LlmCallConfig::route("anthropic", model),
            messages.into_iter().map(Arc::new).collect(),
        );
        o.system = Some("You are dsh.".into());
        o
    }

    /// The `messages` array as it was built before texts were kept: every message as
    /// values, merged and marked in place.
    fn messages_as_values(options: &GenerateOptions, cache: Option<&Value>) -> Value {
        let mut messages: Vec<Value> = Vec::new();
        for message in &options.messages {
            let (role, content) = serialize_message(message, &options.config.provider).unwrap();
            if content.is_empty() {
                continue;
            }
            match messages.last_mut() {
                Some(last) if last["role"] == role => {
                    let blocks = last["content"].as_array_mut().unwrap();
                    blocks.extend(content);
                    blocks.sort_by_key(|b| b["type"] != "tool_result");
                }
                _ => messages.push(json!({"role": role, "content": content})),
            }
        }
        if let Some(cache) = cache
            && let Some(block) = messages
                .last_mut()
                .and_then(|m| m["content"].as_array_mut())
                .and_then(|b| b.last_mut())
            && !matches!(
                block["type"].as_str(),
                Some("thinking" | "redacted_thinking")
            )
        {
            block["cache_control"] = cache.clone();
        }
        Value::Array(messages)
    }

    /// Kept message texts write the same bytes as the whole history built as values: as the
    /// history grows one message at a time (the kept ones reused), under another route (its
    /// reasoning replayed or not), with and without cache marks, with merged tool results,
    /// empty and mid-history system messages and a reasoning block last.
    #[test]
    fn kept_message_texts_write_the_same_bytes_as_the_history_built_whole() {
        let signed = |text: &str, sig: &str| {
            Message::assistant(
                vec![
                    ContentBlock::Reasoning { text: text.into() },
                    ContentBlock::text("Looking \"here\"\n é"),
                    ContentBlock::ToolCall {
                        id: format!("toolu_{sig}"),
                        name: "bash".into(),
                        arguments: "{\"command\":\"ls\",\"n\":1.5e3}".into(),
                    },
                ],
                "anthropic",
                "claude-x",
                Some(
                    json!({"response": {"kind": "anthropic-messages", "version": 1},
                    "blocks": [{"type": "reasoning", "signature": sig}, {"type": "text"}, {"type": "tool-call"}]}),
                ),
            )
        };
        let thinking_last = Message::assistant(
            vec![ContentBlock::Reasoning { text: "hm".into() }],
            "anthropic",
            "claude-x",
            Some(
                json!({"response": {"kind": "anthropic-messages", "version": 1},
                "blocks": [{"type": "reasoning", "redactedData": "xyz"}]}),
            ),
        );
        let system = |text: &str| Message {
            role: Role::System,
            ..Message::user_text(text)
        };
        let history: Vec<Arc<Message>> = [
            Message::user_text("list files"),
            signed("think", "A"),
            Message::tool_result("toolu_A", vec![ContentBlock::text("a.txt")], false),
            system(""),
            Message::user_text("and then?"),
            system("reminder"),
            Message::tool_result("toolu_A", vec![], true),
            signed("more", "B"),
            // Reasoning only and unsigned on another route: no content at all.
            Message::assistant(
                vec![ContentBlock::Reasoning { text: "x".into() }],
                "other",
                "m",
                None,
            ),
            thinking_last,
            Message::user_text(""),
            Message::tool_result("toolu_B", vec![ContentBlock::text("b")], false),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        for route in ["anthropic", "deepseek-official", "anthropic"] {
            for retention in ["short", "long", "none"] {
                let p = profile(json!({"cacheRetention": retention}));
                let model = p.model("claude-x").unwrap();
                let cache = cache_control(p.cache_retention);
                for n in 0..=history.len() {
                    let mut o = options("claude-x", Vec::new());
                    o.config.provider = route.into();
                    o.messages = history[..n].to_vec();
                    let lean = serialize_with_effort(&o, &p, model, None).unwrap();
                    let whole =
                        dsh_kernel::json::to_string(&messages_as_values(&o, cache.as_ref()));
                    assert_eq!(lean.messages, whole, "{route} {retention} {n}");
                }
            }
        }
    }

    /// The text written from the lean body, with the schemas' kept text, is byte for byte
    /// the text of the full body: with and without tools, after a tool list changes in a
    /// description only, and with a nested `tools` field inside the history.
    #[test]
    fn the_kept_tools_text_writes_the_same_bytes_as_the_full_body() {
        let p = profile(json!({}));
        let model = p.model("claude-x").unwrap();
        let schema = Arc::new(
            json!({"type": "object", "properties": {"q": {"type": "string", "description": "a \"quoted\"\nline é"}}}),
        );
        let tool = |description: &str| ToolSchema {
            name: "look".into(),
            description: description.into(),
            parameters: schema.clone(),
        };
        let call = Message::assistant(
            vec![ContentBlock::ToolCall {
                id: "toolu_1".into(),
                name: "look".into(),
                arguments: "{\"tools\":null}".into(),
            }],
            "anthropic",
            "claude-x",
            None,
        );
        let mut o = options("claude-x", vec![Message::user_text("hi"), call]);
        let same = |o: &GenerateOptions| {
            let lean = serialize_with_effort(o, &p, model, Some("low")).unwrap();
            // The reference: the schemas as values in their place, the whole written at once.
            let mut full = lean.fields.clone();
            full["messages"] = serde_json::from_str(&lean.messages).unwrap();
            if let Some(tools) = o.tools.as_ref().filter(|t| !t.is_empty()) {
                full["tools"] = Value::Array(
                    tools
                        .iter()
                        .map(|t| {
                            json!({"name": t.name, "description": t.description, "input_schema": *t.parameters})
                        })
                        .collect(),
                );
            }
            assert_eq!(body_text(&lean, o), dsh_kernel::json::to_string(&full));
        };
        same(&o);
        o.tools = Some(vec![tool("first"), tool("second")]);
        same(&o);
        same(&o);
        o.tools = Some(vec![tool("first"), tool("changed")]);
        same(&o);
        o.tools = Some(Vec::new());
        same(&o);
    }

    #[test]
    fn a_tool_turn_round_trips_with_signed_thinking_and_cache_marks() {
        let assistant = Message::assistant(
            vec![
                ContentBlock::Reasoning {
                    text: "think".into(),
                },
                ContentBlock::text("Listing."),
                ContentBlock::ToolCall {
                    id: "toolu_1".into(),
                    name: "bash".into(),
                    arguments: "{\"command\":\"ls\"}".into(),
                },
            ],
            "anthropic",
            "claude-x",
            Some(
                json!({"response": {"kind": "anthropic-messages", "version": 1},
                "blocks": [{"type": "reasoning", "signature": "sig-A"}, {"type": "text"}, {"type": "tool-call"}]}),
            ),
        );
        let mut o = options(
            "claude-x",
            vec![
                Message::user_text("list files"),
                assistant,
                Message::tool_result("toolu_1", vec![ContentBlock::text("a.txt")], false),
            ],
        );
        o.tools = Some(vec![ToolSchema {
            name: "bash".into(),
            description: "Run".into(),
            parameters: Arc::new(json!({"type": "object"})),
        }]);
        o.config.reasoning_effort = Some("high".into());
        o.config.max_tokens = Some(8_000);
        o.config.temperature = Some(0.5);
        let b = body(&o, &profile(json!({})));
        assert_eq!(
            b,
            json!({
                "model": "claude-x",
                "max_tokens": 21504,
                "system": [{"type": "text", "text": "You are dsh.", "cache_control": {"type": "ephemeral"}}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "list files"}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "think", "signature": "sig-A"},
                        {"type": "text", "text": "Listing."},
                        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "a.txt"}], "cache_control": {"type": "ephemeral"}}]}],
                "tools": [{"name": "bash", "description": "Run", "input_schema": {"type": "object"}}],
                "thinking": {"type": "enabled", "budget_tokens": 20480},
                "stream": true
            })
        );
        let keys: Vec<&String> = b.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "model",
                "max_tokens",
                "system",
                "messages",
                "tools",
                "thinking",
                "stream"
            ]
        );
    }

    #[test]
    fn foreign_reasoning_is_dropped_and_results_merge_before_text() {
        let foreign = Message::assistant(
            vec![
                ContentBlock::Reasoning {
                    text: "hidden".into(),
                },
                ContentBlock::ToolCall {
                    id: "a".into(),
                    name: "x".into(),
                    arguments: "{}".into(),
                },
                ContentBlock::ToolCall {
                    id: "b".into(),
                    name: "x".into(),
                    arguments: "not json".into(),
                },
            ],
            "deepseek-official",
            "deepseek-v4-flash",
            None,
        );
        let mut o = options(
            "plain",
            vec![
                foreign,
                Message::tool_result("a", vec![], true),
                Message::user_text("also this"),
                Message::tool_result("b", vec![ContentBlock::text("ok")], false),
            ],
        );
        o.config.temperature = Some(0.25);
        o.config.stop = Some(vec!["END".into()]);
        let b = body(&o, &profile(json!({"cacheRetention": "none"})));
        assert_eq!(
            b["messages"],
            json!([
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "a", "name": "x", "input": {}},
                    {"type": "tool_use", "id": "b", "name": "x", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text", "text": "(no output)"}], "is_error": true},
                    {"type": "tool_result", "tool_use_id": "b", "content": [{"type": "text", "text": "ok"}]},
                    {"type": "text", "text": "also this"}]}
            ])
        );
        assert_eq!(
            b["system"],
            json!([{"type": "text", "text": "You are dsh."}])
        );
        assert_eq!(
            (
                b["temperature"].clone(),
                b["stop_sequences"].clone(),
                b["max_tokens"].clone()
            ),
            (json!(0.25), json!(["END"]), json!(4096))
        );
        assert!(b.get("thinking").is_none());
    }

    #[test]
    fn efforts_are_checked_against_the_model() {
        let p = profile(json!({"reasoning": "low"}));
        let mut o = options("plain", vec![Message::user_text("hi")]);
        o.config.reasoning_effort = Some("high".into());
        let model = p.model("plain").unwrap();
        let e = serialize_messages_request(&o, &p, model).unwrap_err();
        assert_eq!(e.code(), "UNSUPPORTED_REASONING_EFFORT");
        // The deployment default applies to a model that offers it.
        let o = options("claude-x", vec![Message::user_text("hi")]);
        assert_eq!(body(&o, &p)["thinking"]["budget_tokens"], 4096);
        let mut o = options("claude-x", vec![Message::user_text("hi")]);
        o.config.reasoning_effort = Some("off".into());
        assert!(body(&o, &p).get("thinking").is_none());
    }
}
