//! Harness request → OpenAI Responses JSON body.
//!
//! Key order: `model, input, tools?, reasoning?, include?, max_output_tokens, temperature?,
//! store, stream`. The system prompt is the first input item (role `developer` for reasoning
//! models, `system` otherwise). User text and images become `input_text` / `input_image`
//! (a base64 data URL) parts; assistant text becomes an output `message` item, tool calls
//! `function_call` items, tool results `function_call_output` items (images of a tool result
//! follow as a user message). Reasoning is replayed as a `reasoning` item with its
//! `encrypted_content` only for messages of the same route whose replay state is
//! `openai-responses`; other reasoning is dropped. `store` is always false, so a reasoning
//! request asks for `include: ["reasoning.encrypted_content"]`.

use dsh_llm::{ContentBlock, GenerateOptions, LlmError, Message, MessageSource, Role, codes};
use serde_json::{Map, Value, json};

use super::translate::REPLAY_KIND;
use crate::anthropic::config::{ResolvedAnthropicModel, ResolvedAnthropicProfile};
use crate::anthropic::serialize::resolve_effort;

/// Builds the request body.
pub(crate) fn serialize_responses_request(
    options: &GenerateOptions,
    profile: &ResolvedAnthropicProfile,
    model: &ResolvedAnthropicModel,
) -> Result<Value, LlmError> {
    let effort = resolve_effort(options, profile, model)?;
    let wire_effort = effort.as_deref().and_then(|level| model.wire_effort(level));
    let reasoning_model = model.efforts.is_some();
    let mut input: Vec<Value> = Vec::new();
    if let Some(system) = options.system.as_ref().filter(|s| !s.is_empty()) {
        let role = if reasoning_model {
            "developer"
        } else {
            "system"
        };
        input.push(json!({"role": role, "content": system}));
    }
    for message in &options.messages {
        serialize_message(
            message,
            &options.config.provider,
            reasoning_model,
            &mut input,
        )?;
    }
    let mut body = Map::new();
    body.insert("model".into(), Value::from(model.id.as_str()));
    body.insert("input".into(), Value::Array(input));
    if let Some(tools) = options.tools.as_ref().filter(|t| !t.is_empty()) {
        let tools = tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.parameters, "strict": false})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    let reasoning_on = wire_effort.is_some();
    if let Some(effort) = wire_effort {
        body.insert(
            "reasoning".into(),
            json!({"effort": effort, "summary": "auto"}),
        );
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    let max_tokens = options.config.max_tokens.unwrap_or(model.max_tokens).max(1);
    body.insert("max_output_tokens".into(), Value::from(max_tokens));
    if let Some(temperature) = options.config.temperature
        && model.supports_temperature
        && !reasoning_on
        && let Some(n) = serde_json::Number::from_f64(temperature)
    {
        body.insert("temperature".into(), Value::Number(n));
    }
    body.insert("store".into(), Value::Bool(false));
    body.insert("stream".into(), Value::Bool(true));
    Ok(Value::Object(body))
}

/// The replay entries of a message this route produced with a Responses replay state.
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

fn text_of(blocks: &[ContentBlock]) -> String {
    blocks.iter().filter_map(ContentBlock::as_text).collect()
}

fn serialize_message(
    message: &Message,
    route: &str,
    reasoning_model: bool,
    out: &mut Vec<Value>,
) -> Result<(), LlmError> {
    match message.role {
        Role::Assistant => assistant_items(message, route, out),
        Role::User => {
            let mut parts = Vec::new();
            for block in &message.content {
                if let ContentBlock::ToolResult {
                    tool_call_id,
                    content,
                    ..
                } = block
                {
                    let mut text = text_of(content);
                    let mut images = Vec::new();
                    user_parts(content, &mut images, false)?;
                    if text.is_empty() {
                        text = if images.is_empty() {
                            "(no output)".into()
                        } else {
                            "(see attached image)".into()
                        };
                    }
                    out.push(json!({"type": "function_call_output", "call_id": tool_call_id, "output": text}));
                    if !images.is_empty() {
                        out.push(json!({"role": "user", "content": images}));
                    }
                } else {
                    user_parts(std::slice::from_ref(block), &mut parts, true)?;
                }
            }
            if !parts.is_empty() {
                out.push(json!({"role": "user", "content": parts}));
            }
            Ok(())
        }
        Role::System => {
            let text = text_of(&message.content);
            if !text.is_empty() {
                let role = if reasoning_model {
                    "developer"
                } else {
                    "system"
                };
                out.push(json!({"role": role, "content": text}));
            }
            Ok(())
        }
    }
}

/// User-input parts: `input_text` for non-empty text (when `with_text`), and for each image
/// its handle text then an `input_image` data URL.
fn user_parts(
    blocks: &[ContentBlock],
    out: &mut Vec<Value>,
    with_text: bool,
) -> Result<(), LlmError> {
    for block in blocks {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => {
                if with_text {
                    out.push(json!({"type": "input_text", "text": text}));
                }
            }
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
                out.push(json!({"type": "input_text", "text": reference.request_handle_text()}));
                out.push(json!({"type": "input_image", "detail": "auto",
                    "image_url": format!("data:{};base64,{data}", reference.media_type)}));
            }
        }
    }
    Ok(())
}

fn assistant_items(message: &Message, route: &str, out: &mut Vec<Value>) -> Result<(), LlmError> {
    let entries = replay_entries(message, route);
    let aligned = entries.filter(|e| e.len() == message.content.len());
    // Output item ids are sent only when every reasoning item of the message is replayed:
    // the API refuses an item whose reasoning item is missing.
    let replayable = |entry: Option<&Value>| {
        entry.is_some_and(|e| e["itemId"].is_string() && e["encryptedContent"].is_string())
    };
    let all_reasoning_replayed = message.content.iter().enumerate().all(|(i, block)| {
        !matches!(block, ContentBlock::Reasoning { .. })
            || replayable(aligned.and_then(|e| e.get(i)))
    });
    let item_id = |i: usize| -> Option<String> {
        aligned
            .filter(|_| all_reasoning_replayed)
            .and_then(|e| e.get(i))
            .and_then(|x| x["itemId"].as_str())
            .map(str::to_owned)
    };
    for (i, block) in message.content.iter().enumerate() {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => {
                let mut item = json!({"type": "message", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]});
                if let Some(id) = item_id(i) {
                    item["id"] = Value::from(id);
                }
                out.push(item);
            }
            ContentBlock::Reasoning { text } => {
                let Some(entry) = aligned.and_then(|e| e.get(i)) else {
                    continue;
                };
                let (Some(id), Some(encrypted)) =
                    (entry["itemId"].as_str(), entry["encryptedContent"].as_str())
                else {
                    continue;
                };
                let summary: Vec<Value> = if text.is_empty() {
                    Vec::new()
                } else {
                    vec![json!({"type": "summary_text", "text": text})]
                };
                out.push(json!({"type": "reasoning", "id": id, "summary": summary,
                    "encrypted_content": encrypted}));
            }
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => {
                let mut item = json!({"type": "function_call", "call_id": id, "name": name,
                    "arguments": arguments});
                if let Some(item_id) = item_id(i) {
                    item["id"] = Value::from(item_id);
                }
                out.push(item);
            }
            other if other.block_type() == "image" => {
                return Err(LlmError::new(
                    "UNSUPPORTED_CONTENT",
                    "The OpenAI Responses wire cannot represent image content in an assistant message.",
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;
    use crate::anthropic::config::AnthropicConfig;
    use dsh_llm::{LlmCallConfig, ToolSchema};
    use pretty_assertions::assert_eq;

    fn profile() -> ResolvedAnthropicProfile {
        AnthropicConfig::from_value(&json!({"providers": {"openai": {
            "api": "openai-responses", "apiKeyEnv": "OPENAI_API_KEY", "models": [
                {"id": "gpt-r", "maxTokens": 8000, "reasoningEfforts": {"off": null, "low": "low", "high": "high"}},
                {"id": "gpt-plain", "maxTokens": 4096}]}}}))
        .unwrap()
        .resolve()
        .unwrap()
        .swap_remove("openai")
        .unwrap()
    }

    fn body(options: &GenerateOptions) -> Value {
        let profile = profile();
        let model = profile.model(&options.config.model).unwrap();
        serialize_responses_request(options, &profile, model).unwrap()
    }

    #[test]
    fn a_plain_request_has_system_input_tools_and_no_reasoning() {
        let mut options = GenerateOptions::new(
            LlmCallConfig::route("openai", "gpt-plain"),
            vec![Arc::new(Message::user_text("hi"))],
        );
        options.system = Some("Be brief.".into());
        options.config.temperature = Some(0.5);
        options.tools = Some(vec![ToolSchema {
            name: "bash".into(),
            description: "Run".into(),
            parameters: Arc::new(json!({"type": "object"})),
        }]);
        assert_eq!(
            body(&options),
            json!({"model": "gpt-plain",
                "input": [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
                "tools": [{"type": "function", "name": "bash", "description": "Run",
                           "parameters": {"type": "object"}, "strict": false}],
                "max_output_tokens": 4096, "temperature": 0.5, "store": false, "stream": true})
        );
    }

    #[test]
    fn a_tool_round_trip_replays_encrypted_reasoning_of_the_same_route() {
        let state = json!({"response": {"kind": "openai-responses", "version": 1},
            "blocks": [{"type": "reasoning", "itemId": "rs_1", "encryptedContent": "gAAA"},
                       {"type": "tool-call", "itemId": "fc_1"}]});
        let assistant = |provider: &str| {
            Message::assistant(
                vec![
                    ContentBlock::Reasoning {
                        text: "Plan.".into(),
                    },
                    ContentBlock::ToolCall {
                        id: "call_1".into(),
                        name: "bash".into(),
                        arguments: "{\"command\":\"ls\"}".into(),
                    },
                ],
                provider,
                "gpt-r",
                Some(state.clone()),
            )
        };
        let result = Message::tool_result("call_1", vec![ContentBlock::text("a.txt")], false);
        let mut options = GenerateOptions::new(
            LlmCallConfig::route("openai", "gpt-r"),
            vec![
                Arc::new(Message::user_text("list")),
                Arc::new(assistant("openai")),
                Arc::new(result),
            ],
        );
        options.config.reasoning_effort = Some("high".into());
        options.system = Some("S".into());
        let b = body(&options);
        assert_eq!(
            b["input"],
            json!([{"role": "developer", "content": "S"},
                {"role": "user", "content": [{"type": "input_text", "text": "list"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Plan."}], "encrypted_content": "gAAA"},
                {"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": "{\"command\":\"ls\"}", "id": "fc_1"},
                {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"}])
        );
        assert_eq!(b["reasoning"], json!({"effort": "high", "summary": "auto"}));
        assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
        // Another route's reasoning is dropped (and with it the item ids), and effort off
        // sends no reasoning.
        options.messages[1] = Arc::new(assistant("elsewhere"));
        options.config.reasoning_effort = Some("off".into());
        let b = body(&options);
        assert_eq!(
            b["input"][2],
            json!({"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": "{\"command\":\"ls\"}"})
        );
        assert_eq!(b.get("reasoning"), None);
        options.config.reasoning_effort = Some("max".into());
        let profile = profile();
        let error =
            serialize_responses_request(&options, &profile, profile.model("gpt-r").unwrap())
                .unwrap_err();
        assert_eq!(error.code(), codes::UNSUPPORTED_REASONING_EFFORT);
    }

    fn prepared_image(id: &str, data: &str) -> ContentBlock {
        let mut block = ContentBlock::image(json!({
            "attachmentId": id, "mediaType": "image/png", "width": 2, "height": 3, "bytes": 69
        }));
        if let ContentBlock::Other(map) = &mut block {
            map.insert("data".into(), Value::from(data));
        }
        block
    }

    #[test]
    fn images_go_out_as_input_image_data_urls_with_their_handles() {
        let id = format!("sha256:{}", "a".repeat(64));
        let user = Message::user(
            vec![ContentBlock::text("see"), prepared_image(&id, "QUJD")],
            MessageSource::User,
        );
        let result = Message::tool_result("c1", vec![prepared_image(&id, "REVG")], false);
        let options = GenerateOptions::new(
            LlmCallConfig::route("openai", "gpt-plain"),
            vec![Arc::new(user), Arc::new(result)],
        );
        let input = body(&options)["input"].clone();
        assert_eq!(
            input[0]["content"][0],
            json!({"type": "input_text", "text": "see"})
        );
        assert_eq!(input[0]["content"][1]["type"], "input_text");
        assert_eq!(
            input[0]["content"][2],
            json!({"type": "input_image", "detail": "auto", "image_url": "data:image/png;base64,QUJD"})
        );
        assert_eq!(
            input[1],
            json!({"type": "function_call_output", "call_id": "c1", "output": "(see attached image)"})
        );
        assert_eq!(input[2]["role"], "user");
        assert_eq!(
            input[2]["content"][1]["image_url"],
            "data:image/png;base64,REVG"
        );
    }
}
