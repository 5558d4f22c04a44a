use std::sync::Arc;

use super::*;
use dsh_llm::{CallPurpose, LlmCallConfig, MessageSource, ToolSchema};
use pretty_assertions::assert_eq;

fn options(messages: Vec<Message>) -> GenerateOptions {
    GenerateOptions::new(
        LlmCallConfig::route("deepseek-official", "deepseek-v4-pro"),
        messages.into_iter().map(Arc::new).collect(),
    )
}

/// The body as sent (tools written in), read back.
fn deepseek(options: &GenerateOptions) -> Value {
    let body = serialize_request(options, &Dialect::deepseek(None, None)).expect("serializes");
    serde_json::from_str(&body_text(&body, options, ToolsWire::Chat)).unwrap()
}

fn history() -> Vec<Message> {
    vec![
        Message::user_text("run ls"),
        Message::assistant(
            vec![
                ContentBlock::Reasoning {
                    text: "Use ".into(),
                },
                ContentBlock::Reasoning {
                    text: "bash.".into(),
                },
                ContentBlock::ToolCall {
                    id: "call_1".into(),
                    name: "bash".into(),
                    arguments: "{\"command\":\"ls\"}".into(),
                },
                ContentBlock::ToolCall {
                    id: "call_2".into(),
                    name: "bash".into(),
                    arguments: "{}".into(),
                },
            ],
            "deepseek-official",
            "deepseek-v4-pro",
            None,
        ),
        Message::tool_result(
            "call_1",
            vec![ContentBlock::text("a.txt\n"), ContentBlock::text("b.txt")],
            false,
        ),
        Message::tool_result("call_2", vec![], true),
        Message {
            id: "s".into(),
            role: Role::System,
            content: vec![ContentBlock::text("be "), ContentBlock::text("brief")],
            source: MessageSource::plugin("x", []),
        },
        Message::user(
            vec![
                ContentBlock::text("and "),
                ContentBlock::ToolResult {
                    tool_call_id: "call_3".into(),
                    content: vec![],
                    is_error: None,
                },
                ContentBlock::text("then?"),
            ],
            MessageSource::User,
        ),
        Message::assistant(
            vec![
                ContentBlock::Reasoning {
                    text: "Done.".into(),
                },
                ContentBlock::text("DONE"),
            ],
            "deepseek-official",
            "deepseek-v4-pro",
            None,
        ),
        Message::assistant(vec![], "deepseek-official", "deepseek-v4-pro", None),
    ]
}

#[test]
fn full_request_snapshot() {
    let mut options = options(history());
    options.system = Some("You are dsh.".into());
    options.tools = Some(vec![ToolSchema {
        name: "bash".into(),
        description: "Run a command".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}).into(),
    }]);
    options.config.reasoning_effort = Some("max".into());
    options.config.temperature = Some(0.7);
    options.config.max_tokens = Some(256_000);
    options.config.stop = Some(vec!["END".into()]);
    let body = deepseek(&options);
    let expected = json!({
        "model": "deepseek-v4-pro",
        "messages": [
            {"role": "system", "content": "You are dsh."},
            {"role": "user", "content": "run ls"},
            {"role": "assistant", "content": "", "reasoning_content": "Use bash.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"},
            {"role": "tool", "tool_call_id": "call_2", "content": "(no output)"},
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "and then?"},
            {"role": "tool", "tool_call_id": "call_3", "content": "(no output)"},
            {"role": "assistant", "content": "DONE", "reasoning_content": "Done."},
            {"role": "assistant", "content": ""},
        ],
        "stream": true,
        "stream_options": {"include_usage": true},
        "thinking": {"type": "enabled"},
        "reasoning_effort": "max",
        "tools": [{"type": "function", "function": {"name": "bash", "description": "Run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}],
        "temperature": 0.7,
        "max_tokens": 256000,
        "stop": ["END"],
    });
    assert_eq!(body, expected);
    // Key order is part of the contract.
    assert_eq!(
        dsh_kernel::json::to_string(&body),
        dsh_kernel::json::to_string(&expected)
    );
}

#[test]
fn minimal_request_omits_every_optional_field() {
    let mut options = options(vec![Message::user_text("hi")]);
    options.tools = Some(vec![]);
    assert_eq!(
        dsh_kernel::json::to_string(&deepseek(&options)),
        r#"{"model":"deepseek-v4-pro","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#
    );
    options.config.temperature = Some(1.0);
    assert_eq!(deepseek(&options)["temperature"].to_string(), "1");
}

fn thinking_fields(
    thinking: Option<Thinking>,
    default: Option<DeepSeekEffort>,
    requested: Option<&str>,
    purpose: CallPurpose,
) -> Result<(Value, Value), String> {
    let mut options = options(vec![Message::user_text("hi")]);
    options.config.reasoning_effort = requested.map(str::to_owned);
    options.purpose = purpose;
    let body = serialize_request(&options, &Dialect::deepseek(thinking, default)).map_err(|e| {
        assert_eq!(e.code(), "UNSUPPORTED_REASONING_EFFORT");
        e.failure.message
    })?;
    Ok((
        body.fields.get("thinking").cloned().unwrap_or(Value::Null),
        body.fields
            .get("reasoning_effort")
            .cloned()
            .unwrap_or(Value::Null),
    ))
}

#[test]
fn thinking_resolution_matrix() {
    use CallPurpose::{Conversation as Conv, SessionTitle as Title};
    let enabled = json!({"type": "enabled"});
    let disabled = json!({"type": "disabled"});
    type Case<'a> = (
        Option<Thinking>,
        Option<DeepSeekEffort>,
        Option<&'a str>,
        CallPurpose,
        Result<(Value, Value), String>,
    );
    let cases: Vec<Case> = vec![
        (None, None, None, Conv, Ok((Value::Null, Value::Null))),
        (
            Some(Thinking::Enabled),
            None,
            None,
            Conv,
            Ok((enabled.clone(), Value::Null)),
        ),
        (
            Some(Thinking::Disabled),
            None,
            None,
            Conv,
            Ok((disabled.clone(), Value::Null)),
        ),
        (
            None,
            Some(DeepSeekEffort::Low),
            None,
            Conv,
            Ok((enabled.clone(), json!("low"))),
        ),
        (
            None,
            Some(DeepSeekEffort::Max),
            Some("high"),
            Conv,
            Ok((enabled.clone(), json!("high"))),
        ),
        (
            None,
            None,
            Some("off"),
            Conv,
            Ok((disabled.clone(), Value::Null)),
        ),
        (
            Some(Thinking::Disabled),
            None,
            Some("off"),
            Conv,
            Ok((disabled.clone(), Value::Null)),
        ),
        (
            Some(Thinking::Enabled),
            Some(DeepSeekEffort::Max),
            Some("high"),
            Title,
            Ok((disabled.clone(), Value::Null)),
        ),
        (
            Some(Thinking::Disabled),
            None,
            Some("max"),
            Conv,
            Err("DeepSeek deployment does not support reasoning effort \"max\"".into()),
        ),
        (
            None,
            None,
            Some("medium"),
            Conv,
            Err("DeepSeek does not support reasoning effort \"medium\"".into()),
        ),
        // Titles ignore any effort, even an invalid one.
        (
            None,
            None,
            Some("medium"),
            Title,
            Ok((disabled, Value::Null)),
        ),
    ];
    for (thinking, default, requested, purpose, expected) in cases {
        assert_eq!(
            thinking_fields(thinking, default, requested, purpose),
            expected,
            "{thinking:?} {default:?} {requested:?} {purpose:?}"
        );
    }
}

#[test]
fn generic_dialect_switches() {
    let mut options = options(history()[..2].to_vec());
    options.system = Some("sys".into());
    options.config.max_tokens = Some(10);
    options.config.reasoning_effort = Some("medium".into());
    let dialect = Dialect {
        system_role: "developer",
        streaming: true,
        include_usage: false,
        tool_choice: None,
        max_tokens_field: "max_completion_tokens",
        reasoning_passback: false,
        reasoning: ReasoningWire::EffortField,
    };
    let body = serialize_request(&options, &dialect).expect("serializes");
    assert_eq!(
        serde_json::from_str::<Value>(&body_text(&body, &options, ToolsWire::Chat)).unwrap(),
        json!({
            "model": "deepseek-v4-pro",
            "messages": [
                {"role": "developer", "content": "sys"},
                {"role": "user", "content": "run ls"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
                ]},
            ],
            "stream": true,
            "reasoning_effort": "medium",
            "max_completion_tokens": 10,
        })
    );
    options.config.reasoning_effort = Some("off".into());
    let body = serialize_request(
        &options,
        &Dialect {
            reasoning: ReasoningWire::None,
            ..dialect.clone()
        },
    )
    .expect("ok");
    assert_eq!(body.fields.get("reasoning_effort"), None);
    let body = serialize_request(&options, &dialect).expect("ok");
    assert_eq!(body.fields.get("reasoning_effort"), None);
}

#[test]
fn a_non_streaming_dialect_drops_stream_options_and_tool_choice_rides_with_tools() {
    let mut options = options(vec![Message::user_text("hi")]);
    let dialect = Dialect {
        streaming: false,
        tool_choice: Some("auto"),
        ..Dialect::deepseek(None, None)
    };
    assert_eq!(
        body_text(
            &serialize_request(&options, &dialect).expect("ok"),
            &options,
            ToolsWire::Chat
        ),
        r#"{"model":"deepseek-v4-pro","messages":[{"role":"user","content":"hi"}],"stream":false}"#,
        "no tools: no tool_choice"
    );
    options.tools = Some(vec![ToolSchema {
        name: "bash".into(),
        description: "Run a command".into(),
        parameters: json!({"type": "object"}).into(),
    }]);
    let body = serialize_request(&options, &dialect).expect("ok");
    assert_eq!(body.fields["tool_choice"], "auto");
    assert_eq!(body.fields.get("stream_options"), None);
}

#[test]
fn images_are_detected_inside_tool_results() {
    let image = ContentBlock::from_value(json!({"type": "image", "attachment": {"sha256": "ab"}}))
        .expect("block");
    assert!(has_image(std::slice::from_ref(&image)));
    assert!(has_image(&[ContentBlock::ToolResult {
        tool_call_id: "c".into(),
        content: vec![image],
        is_error: None
    }]));
    assert!(!has_image(&[ContentBlock::text("x")]));
}

fn prepared_image(id: &str, data: Option<&str>) -> ContentBlock {
    let mut block = ContentBlock::image(serde_json::json!({
        "attachmentId": id, "mediaType": "image/png", "width": 2, "height": 3, "bytes": 69
    }));
    if let (ContentBlock::Other(map), Some(data)) = (&mut block, data) {
        map.insert("data".into(), Value::from(data));
    }
    block
}

#[test]
fn images_go_out_as_data_urls_with_their_handles() {
    let id = format!("sha256:{}", "a".repeat(64));
    let call = Message::assistant(
        vec![ContentBlock::ToolCall {
            id: "c1".into(),
            name: "read_image".into(),
            arguments: "{}".into(),
        }],
        "deepseek-official",
        "deepseek-v4-pro",
        None,
    );
    let body = deepseek(&options(vec![
        Message::user(
            vec![ContentBlock::text("see"), prepared_image(&id, Some("QUJD"))],
            MessageSource::User,
        ),
        call,
        Message::tool_result(
            "c1",
            vec![
                ContentBlock::text("envelope"),
                prepared_image(&id, Some("QUJD")),
            ],
            false,
        ),
    ]));
    let url = "data:image/png;base64,QUJD";
    let handle = format!("Image {id}; request image 2x3px.");
    assert_eq!(
        body["messages"],
        serde_json::json!([
            {"role": "user", "content": [
                {"type": "text", "text": "see"},
                {"type": "text", "text": format!("\n{handle}")},
                {"type": "image_url", "image_url": {"url": url}},
            ]},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_image", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": format!("envelope\n{handle}")},
            {"role": "user", "content": [
                {"type": "text", "text": "Attached image(s) from tool result:"},
                {"type": "image_url", "image_url": {"url": url}},
            ]},
        ])
    );
}

#[test]
fn unprepared_images_and_images_outside_user_messages_are_refused() {
    let id = format!("sha256:{}", "b".repeat(64));
    let err = serialize_request(
        &options(vec![Message::user(
            vec![prepared_image(&id, None)],
            MessageSource::User,
        )]),
        &Dialect::deepseek(None, None),
    )
    .expect_err("not prepared");
    assert_eq!(err.failure.code, codes::INVALID_REQUEST);
    assert!(err.failure.message.contains("was not prepared"));
    let err = serialize_request(
        &options(vec![Message::assistant(
            vec![prepared_image(&id, Some("QUJD"))],
            "deepseek-official",
            "deepseek-v4-pro",
            None,
        )]),
        &Dialect::deepseek(None, None),
    )
    .expect_err("assistant image");
    assert_eq!(err.failure.code, "UNSUPPORTED_CONTENT");
}

/// Kept message texts write the same bytes as the whole history built as values, as the
/// history grows (kept texts reused) and with reasoning passed back or not.
#[test]
fn kept_message_texts_write_the_same_bytes_as_the_history_built_whole() {
    let mut history: Vec<Arc<Message>> = history().into_iter().map(Arc::new).collect();
    history.push(Arc::new(Message {
        role: Role::System,
        ..Message::user_text("mid \"history\"\n")
    }));
    history.push(Arc::new(Message::user(
        vec![
            ContentBlock::text("both"),
            ContentBlock::ToolResult {
                tool_call_id: "call_9".into(),
                content: vec![],
                is_error: Some(true),
            },
        ],
        MessageSource::User,
    )));
    for passback in [true, false, true] {
        let dialect = Dialect {
            reasoning_passback: passback,
            ..Dialect::deepseek(None, None)
        };
        for n in 0..=history.len() {
            let mut o = options(Vec::new());
            o.system = Some("sys".into());
            o.messages = history[..n].to_vec();
            let body = serialize_request(&o, &dialect).expect("serializes");
            let mut whole = vec![json!({"role": "system", "content": "sys"})];
            whole.extend(history_values(&o.messages, &dialect).expect("serializes"));
            assert_eq!(
                body.messages,
                dsh_kernel::json::to_string(&Value::Array(whole)),
                "passback {passback}, {n} messages"
            );
        }
    }
}
