//! Harness request → chat-completions JSON body.
//!
//! Key order is part of the contract (bodies are compared byte for byte in tests):
//! `model, messages, stream, stream_options?, thinking?, reasoning_effort?, tools?,
//! temperature?, <max tokens field>?, stop?`. Absent optional fields are omitted, never sent
//! as `null`.

use std::sync::{Arc, Mutex};

use dsh_llm::{ContentBlock, GenerateOptions, LlmError, Message, Role, ToolSchema, codes};
use serde_json::{Map, Value, json};

/// DeepSeek thinking policy of a deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Thinking {
    Enabled,
    Disabled,
}

impl Thinking {
    fn wire(self) -> &'static str {
        match self {
            Thinking::Enabled => "enabled",
            Thinking::Disabled => "disabled",
        }
    }
}

/// DeepSeek reasoning efforts; `off` disables thinking for the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeepSeekEffort {
    Off,
    Low,
    High,
    Max,
}

impl DeepSeekEffort {
    pub const ALL: [DeepSeekEffort; 4] = [
        DeepSeekEffort::Off,
        DeepSeekEffort::Low,
        DeepSeekEffort::High,
        DeepSeekEffort::Max,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeepSeekEffort::Off => "off",
            DeepSeekEffort::Low => "low",
            DeepSeekEffort::High => "high",
            DeepSeekEffort::Max => "max",
        }
    }

    /// The display name upstream gives the effort.
    pub fn display_name(self) -> &'static str {
        match self {
            DeepSeekEffort::Off => "Off",
            DeepSeekEffort::Low => "Low",
            DeepSeekEffort::High => "High",
            DeepSeekEffort::Max => "Max",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == text)
    }
}

/// How reasoning controls go on the wire.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ReasoningWire {
    /// DeepSeek: `thinking: {type}` plus `reasoning_effort`, resolved against deployment
    /// defaults.
    DeepSeek {
        thinking: Option<Thinking>,
        effort: Option<DeepSeekEffort>,
    },
    /// A bare `reasoning_effort: <effort>` for any effort but `off`.
    EffortField,
    /// Nothing reasoning-related is sent.
    None,
}

/// The wire dialect of one endpoint.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Dialect {
    /// Role of the `options.system` prompt (`system` or `developer`).
    pub system_role: &'static str,
    /// Whether the reply streams (`stream: true`); `false` asks for one JSON completion.
    pub streaming: bool,
    /// Whether to send `stream_options: {include_usage: true}` (streaming only).
    pub include_usage: bool,
    /// `tool_choice` sent beside `tools` (absent: not sent, the endpoint's default).
    pub tool_choice: Option<&'static str>,
    /// `max_tokens` or `max_completion_tokens`.
    pub max_tokens_field: &'static str,
    /// Whether assistant turns carry their reasoning back as `reasoning_content`.
    pub reasoning_passback: bool,
    pub reasoning: ReasoningWire,
}

impl Dialect {
    /// The DeepSeek dialect with the deployment's thinking defaults.
    pub(crate) fn deepseek(thinking: Option<Thinking>, effort: Option<DeepSeekEffort>) -> Self {
        Self {
            system_role: "system",
            streaming: true,
            include_usage: true,
            tool_choice: None,
            max_tokens_field: "max_tokens",
            reasoning_passback: true,
            reasoning: ReasoningWire::DeepSeek { thinking, effort },
        }
    }
}

/// The resolved `thinking` type and wire effort of one request.
fn resolve_thinking(
    options: &GenerateOptions,
    thinking: Option<Thinking>,
    default_effort: Option<DeepSeekEffort>,
) -> Result<(Option<Thinking>, Option<DeepSeekEffort>), LlmError> {
    if options.purpose.is_side_call() {
        return Ok((Some(Thinking::Disabled), None));
    }
    let effort = match &options.config.reasoning_effort {
        None => default_effort,
        Some(requested) => Some(DeepSeekEffort::parse(requested).ok_or_else(|| {
            LlmError::new(
                codes::UNSUPPORTED_REASONING_EFFORT,
                format!("DeepSeek does not support reasoning effort \"{requested}\""),
            )
        })?),
    };
    if let (Some(Thinking::Disabled), Some(e)) = (thinking, effort)
        && e != DeepSeekEffort::Off
    {
        return Err(LlmError::new(
            codes::UNSUPPORTED_REASONING_EFFORT,
            format!(
                "DeepSeek deployment does not support reasoning effort \"{}\"",
                e.as_str()
            ),
        ));
    }
    Ok(match effort {
        Some(DeepSeekEffort::Off) => (Some(Thinking::Disabled), None),
        Some(e) => (Some(Thinking::Enabled), Some(e)),
        None => (thinking, None),
    })
}

/// A JSON object of `pairs` in their order. Unlike `json!`, which copies every value
/// through serde, the values are moved in: histories and tool schemas are large.
pub(crate) fn object<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// How a request carries its tool schemas.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToolsWire {
    /// Anthropic Messages: `{"name","description","input_schema"}`.
    Messages,
    /// Chat completions: `{"type":"function","function":{"name","description","parameters"}}`.
    Chat,
}

/// A request body as its serializers build it: every field but two as values, the history
/// (`messages`) as text, and `tools` as a placeholder that [`body_text`] fills with the kept
/// text of the schemas. Both are most of a request and mostly the same at every step.
#[derive(Clone, Debug)]
pub(crate) struct LeanBody {
    /// The body's fields in wire order; `messages` (and `tools`, when sent) hold `null`.
    pub fields: Value,
    /// The JSON text of the `messages` array.
    pub messages: String,
}

/// The text of a body, its history and tool schemas written in place of their placeholders.
pub(crate) fn body_text(body: &LeanBody, options: &GenerateOptions, wire: ToolsWire) -> String {
    static SYSTEM: KeptValue = Mutex::new(None);
    let system = body.fields.get("system").map(|v| kept_text(&SYSTEM, v));
    let tools = options
        .tools
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(|t| tools_text(t, wire));
    let mut raw = vec![("messages", body.messages.as_str())];
    if let Some(system) = &system {
        raw.push(("system", system));
    }
    if let Some(tools) = &tools {
        raw.push(("tools", tools));
    }
    dsh_kernel::json::to_string_with_raw(&body.fields, &raw)
}

/// The last value written through one [`kept_text`] slot, and its text.
type KeptValue = Mutex<Option<(Value, Arc<str>)>>;

/// The text of `value`, reused while the slot's last value is equal: for a large part of a
/// request that rarely changes (the system prompt). Comparing is a fraction of writing.
fn kept_text(slot: &KeptValue, value: &Value) -> Arc<str> {
    let mut last = slot.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((seen, text)) = last.as_ref()
        && seen == value
    {
        return text.clone();
    }
    let text: Arc<str> = Arc::from(dsh_kernel::json::to_string(value));
    *last = Some((value.clone(), text.clone()));
    text
}

/// The `tools` array as text, written once per tool list and wire: the last list's text is
/// reused while the list has the same names, descriptions and (by pointer) schemas. The
/// schemas are most of a request and the same at every step.
fn tools_text(tools: &[ToolSchema], wire: ToolsWire) -> Arc<str> {
    type Kept = Mutex<Option<(Vec<ToolSchema>, Arc<str>)>>;
    static MESSAGES: Kept = Mutex::new(None);
    static CHAT: Kept = Mutex::new(None);
    let mut last = match wire {
        ToolsWire::Messages => &MESSAGES,
        ToolsWire::Chat => &CHAT,
    }
    .lock()
    .unwrap_or_else(|p| p.into_inner());
    if let Some((seen, text)) = last.as_ref()
        && seen.len() == tools.len()
        && seen.iter().zip(tools).all(|(a, b)| {
            Arc::ptr_eq(&a.parameters, &b.parameters)
                && a.name == b.name
                && a.description == b.description
        })
    {
        return text.clone();
    }
    let (open, schema_key, close) = match wire {
        ToolsWire::Messages => ("{", ",\"input_schema\":", "}"),
        ToolsWire::Chat => (
            "{\"type\":\"function\",\"function\":{",
            ",\"parameters\":",
            "}}",
        ),
    };
    let mut out = String::from("[");
    for (i, t) in tools.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(open);
        out.push_str("\"name\":");
        dsh_kernel::json::write_string(&mut out, &t.name);
        out.push_str(",\"description\":");
        dsh_kernel::json::write_string(&mut out, &t.description);
        out.push_str(schema_key);
        dsh_kernel::json::write_value(&mut out, &t.parameters);
        out.push_str(close);
    }
    out.push(']');
    let text: Arc<str> = Arc::from(out);
    *last = Some((tools.to_vec(), text.clone()));
    text
}

/// The chat-completions text of each history message (one or more wire messages, comma
/// separated), by reasoning passback.
static CHAT_KEPT: crate::kept::Kept<String> = crate::kept::Kept::new();

/// Builds the request body; [`body_text`] writes it with the tool schemas. Fails with
/// `UNSUPPORTED_REASONING_EFFORT` per the DeepSeek thinking rules.
pub(crate) fn serialize_request(
    options: &GenerateOptions,
    dialect: &Dialect,
) -> Result<LeanBody, LlmError> {
    static SYSTEM: KeptValue = Mutex::new(None);
    let mut messages = String::from("[");
    if let Some(system) = &options.system {
        messages.push_str(&kept_text(
            &SYSTEM,
            &json!({"role": dialect.system_role, "content": system}),
        ));
    }
    if options.messages.iter().any(|m| has_image(&m.content)) {
        // Images of tool results travel in a user message after the tool messages: the
        // wire of one message depends on its neighbours, so it is written whole.
        for value in &history_values(&options.messages, dialect)? {
            if messages.len() > 1 {
                messages.push(',');
            }
            dsh_kernel::json::write_value(&mut messages, value);
        }
    } else {
        let context = if dialect.reasoning_passback {
            "passback"
        } else {
            ""
        };
        let texts = CHAT_KEPT.wires(
            &options.messages,
            context,
            |_| true,
            |message| {
                let mut wire = Vec::new();
                serialize_message(message, dialect, &mut wire, &mut Vec::new())?;
                let mut text = String::new();
                for value in &wire {
                    if !text.is_empty() {
                        text.push(',');
                    }
                    dsh_kernel::json::write_value(&mut text, value);
                }
                Ok(text)
            },
        )?;
        for text in texts.iter().filter(|t| !t.is_empty()) {
            if messages.len() > 1 {
                messages.push(',');
            }
            messages.push_str(text);
        }
    }
    messages.push(']');
    let mut body = Map::new();
    body.insert("model".into(), Value::from(options.config.model.as_str()));
    body.insert("messages".into(), Value::Null);
    body.insert("stream".into(), Value::Bool(dialect.streaming));
    if dialect.streaming && dialect.include_usage {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    match &dialect.reasoning {
        ReasoningWire::DeepSeek { thinking, effort } => {
            let (thinking, effort) = resolve_thinking(options, *thinking, *effort)?;
            if let Some(thinking) = thinking {
                body.insert("thinking".into(), json!({"type": thinking.wire()}));
            }
            if let Some(effort) = effort {
                body.insert("reasoning_effort".into(), Value::from(effort.as_str()));
            }
        }
        ReasoningWire::EffortField => {
            if let Some(effort) = options
                .config
                .reasoning_effort
                .as_deref()
                .filter(|e| *e != "off")
            {
                body.insert("reasoning_effort".into(), Value::from(effort));
            }
        }
        ReasoningWire::None => {}
    }
    if options.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        body.insert("tools".into(), Value::Null);
        if let Some(choice) = dialect.tool_choice {
            body.insert("tool_choice".into(), Value::from(choice));
        }
    }
    if let Some(temperature) = options.config.temperature {
        body.insert("temperature".into(), js_number(temperature));
    }
    if let Some(max_tokens) = options.config.max_tokens {
        body.insert(dialect.max_tokens_field.into(), Value::from(max_tokens));
    }
    if let Some(stop) = &options.config.stop {
        body.insert("stop".into(), json!(stop));
    }
    Ok(LeanBody {
        fields: Value::Object(body),
        messages,
    })
}

/// The chat-completions messages of a whole history, as values.
fn history_values(messages: &[Arc<Message>], dialect: &Dialect) -> Result<Vec<Value>, LlmError> {
    let mut wire = Vec::new();
    let mut tool_images = Vec::new();
    for message in messages {
        serialize_message(message, dialect, &mut wire, &mut tool_images)?;
    }
    flush_tool_images(&mut wire, &mut tool_images);
    Ok(wire)
}

/// A float as JavaScript would put it on the wire: integral values as integers.
fn js_number(value: f64) -> Value {
    const SAFE: f64 = 9_007_199_254_740_991.0;
    if value.fract() == 0.0 && value.abs() <= SAFE {
        // The range check above makes the conversion exact.
        #[allow(clippy::cast_possible_truncation)]
        return Value::from(value as i64);
    }
    serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number)
}

/// The concatenated text of the `text` blocks (not recursing into tool results).
fn flatten_text(blocks: &[ContentBlock]) -> String {
    blocks.iter().filter_map(ContentBlock::as_text).collect()
}

/// The user message that follows tool messages whose results carried images (a `tool`
/// message holds text only).
const TOOL_RESULT_IMAGE_TEXT: &str = "Attached image(s) from tool result:";

fn flush_tool_images(wire: &mut Vec<Value>, pending: &mut Vec<Value>) {
    if pending.is_empty() {
        return;
    }
    let mut content = vec![json!({"type": "text", "text": TOOL_RESULT_IMAGE_TEXT})];
    content.append(pending);
    wire.push(object([
        ("role", Value::from("user")),
        ("content", Value::Array(content)),
    ]));
}

/// User-input blocks (nested tool results included) as chat-completions content parts:
/// non-empty text, and for each image its handle text then an `image_url` data URL.
fn content_parts(blocks: &[ContentBlock], parts: &mut Vec<Value>) -> Result<(), LlmError> {
    for block in blocks {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => {
                parts.push(json!({"type": "text", "text": text}));
            }
            ContentBlock::ToolResult { content, .. } => content_parts(content, parts)?,
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
                let lead = if parts.is_empty() { "" } else { "\n" };
                parts.push(json!({
                    "type": "text",
                    "text": format!("{lead}{}", reference.request_handle_text()),
                }));
                parts.push(json!({
                    "type": "image_url",
                    "image_url": {"url": format!("data:{};base64,{data}", reference.media_type)},
                }));
            }
        }
    }
    Ok(())
}

/// Text-only parts stay on the compact string form.
fn user_content(parts: Vec<Value>) -> Value {
    if parts.iter().all(|p| p["type"] == "text") {
        let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
        return Value::from(text);
    }
    Value::Array(parts)
}

fn serialize_message(
    message: &Message,
    dialect: &Dialect,
    wire: &mut Vec<Value>,
    tool_images: &mut Vec<Value>,
) -> Result<(), LlmError> {
    if message.role != Role::User && has_image(&message.content) {
        let role = match message.role {
            Role::System => "system",
            _ => "assistant",
        };
        return Err(LlmError::new(
            UNSUPPORTED_CONTENT,
            format!(
                "The chat-completions wire cannot represent image content in a {role} message."
            ),
        ));
    }
    match message.role {
        Role::System => {
            flush_tool_images(wire, tool_images);
            wire.push(json!({"role": "system", "content": flatten_text(&message.content)}))
        }
        Role::Assistant => {
            flush_tool_images(wire, tool_images);
            wire.push(serialize_assistant(message, dialect));
        }
        Role::User => {
            let regular: Vec<ContentBlock> = message
                .content
                .iter()
                .filter(|b| !matches!(b, ContentBlock::ToolResult { .. }))
                .cloned()
                .collect();
            let mut parts = Vec::new();
            content_parts(&regular, &mut parts)?;
            let content = user_content(parts);
            let results: Vec<(&String, &Vec<ContentBlock>)> = message
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolResult {
                        tool_call_id,
                        content,
                        ..
                    } => Some((tool_call_id, content)),
                    _ => None,
                })
                .collect();
            let non_empty = match &content {
                Value::String(s) => !s.is_empty(),
                Value::Array(a) => !a.is_empty(),
                _ => false,
            };
            if non_empty || results.is_empty() {
                flush_tool_images(wire, tool_images);
                wire.push(object([
                    ("role", Value::from("user")),
                    ("content", content),
                ]));
            }
            for (call_id, content) in results {
                let mut parts = Vec::new();
                content_parts(content, &mut parts)?;
                let (text, images): (Vec<Value>, Vec<Value>) =
                    parts.into_iter().partition(|p| p["type"] == "text");
                let output: String = text.iter().filter_map(|p| p["text"].as_str()).collect();
                // Empty tool output still needs some content on the wire.
                let output = if output.is_empty() {
                    "(no output)".to_string()
                } else {
                    output
                };
                wire.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
                tool_images.extend(images);
            }
        }
    }
    Ok(())
}

const UNSUPPORTED_CONTENT: &str = "UNSUPPORTED_CONTENT";

fn serialize_assistant(message: &Message, dialect: &Dialect) -> Value {
    let mut wire = Map::new();
    wire.insert("role".into(), Value::from("assistant"));
    // Never null: a text-less turn sends "" (the API rejects null content).
    wire.insert(
        "content".into(),
        Value::from(flatten_text(&message.content)),
    );
    if dialect.reasoning_passback {
        let reasoning = message.reasoning_text();
        if !reasoning.is_empty() {
            wire.insert("reasoning_content".into(), Value::from(reasoning));
        }
    }
    let calls: Vec<Value> = message
        .tool_calls()
        .map(|(id, name, arguments)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
        })
        .collect();
    if !calls.is_empty() {
        wire.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(wire)
}

/// Whether every image of the history carries its request bytes (the runtime inlines them
/// when an attachment store is mounted).
pub(crate) fn images_prepared(messages: &[std::sync::Arc<Message>]) -> bool {
    fn blocks_ok(blocks: &[ContentBlock]) -> bool {
        blocks.iter().all(|b| match b {
            ContentBlock::ToolResult { content, .. } => blocks_ok(content),
            other => other.block_type() != "image" || dsh_llm::image_request_data(other).is_some(),
        })
    }
    messages.iter().all(|m| blocks_ok(&m.content))
}

/// Whether any block (including inside tool results) is an image.
pub(crate) fn has_image(blocks: &[ContentBlock]) -> bool {
    blocks.iter().any(|b| match b {
        ContentBlock::ToolResult { content, .. } => has_image(content),
        other => other.block_type() == "image",
    })
}

#[cfg(test)]
mod tests;
