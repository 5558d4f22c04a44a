use std::io::{Read, Write};

use super::*;
use pretty_assertions::assert_eq;
use serde_json::json;

/// Sends one raw request and returns the raw response (the server closes the connection).
fn exchange(server: &MockServer, method: &str, path: &str, body: &str) -> String {
    let mut stream = std::net::TcpStream::connect(server.addr()).expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    response
}

/// The de-chunked body of a raw response.
fn body(response: &str) -> String {
    let (_, mut rest) = response.split_once("\r\n\r\n").expect("head");
    let mut out = String::new();
    loop {
        let (size, tail) = rest.split_once("\r\n").expect("chunk size");
        let size = usize::from_str_radix(size, 16).expect("hex");
        if size == 0 {
            return out;
        }
        out.push_str(&tail[..size]);
        rest = &tail[size + 2..];
    }
}

#[test]
fn serves_scripted_replies_in_order_and_records_requests() {
    let server = MockServer::with_replies([Reply::text("Hi!"), Reply::rate_limited(3)]);
    let first = exchange(
        &server,
        "POST",
        "/v1/chat/completions",
        r#"{"model":"m","messages":[]}"#,
    );
    assert!(
        first.starts_with("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"),
        "{first}"
    );
    let events: Vec<String> = body(&first)
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").expect("data line").to_string())
        .collect();
    assert_eq!(events, Completion::text("Hi!").payloads());
    let second = exchange(&server, "POST", "/chat/completions", "{}");
    assert!(
        second.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
        "{second}"
    );
    assert!(second.contains("\r\nretry-after: 3\r\n"), "{second}");
    let third = exchange(&server, "POST", "/chat/completions", "not json");
    assert!(third.starts_with("HTTP/1.1 500 "), "{third}");
    assert!(body(&third).contains("no scripted reply left"));
    let other = exchange(&server, "GET", "/models", "");
    assert!(other.starts_with("HTTP/1.1 404 "), "{other}");

    let requests = server.wait_for_requests(4, Duration::from_secs(5));
    assert_eq!(
        requests[0],
        RecordedRequest {
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            headers: vec![
                ("host".into(), "x".into()),
                ("authorization".into(), "Bearer k".into()),
                ("content-length".into(), "27".into()),
            ],
            body: r#"{"model":"m","messages":[]}"#.into(),
            json: Some(json!({"model": "m", "messages": []})),
        }
    );
    assert_eq!(requests[2].json, None);
    assert_eq!(requests[0].header("Authorization"), Some("Bearer k"));
    assert_eq!(server.pending_replies(), 0);
}

#[test]
fn completion_payloads_use_deepseek_shapes() {
    let completion = Completion::text("abcd")
        .reasoning("r")
        .tool_call(ToolCall::new("call_1", "bash", "{\"a\":12}"))
        .delta_chars(3)
        .usage(Some(Usage::new(100, 9).cache_hits(60).reasoning(2)));
    let payloads: Vec<Value> = completion
        .payloads()
        .iter()
        .map(|p| {
            if p == "[DONE]" {
                json!("[DONE]")
            } else {
                serde_json::from_str::<Value>(p).expect("json")
            }
        })
        .collect();
    let deltas: Vec<Value> = payloads
        .iter()
        .map(|p| {
            p.pointer("/choices/0/delta")
                .cloned()
                .unwrap_or(Value::Null)
        })
        .collect();
    assert_eq!(
        deltas,
        vec![
            json!({"role": "assistant", "content": null, "reasoning_content": ""}),
            json!({"content": null, "reasoning_content": "r"}),
            json!({"content": "abc", "reasoning_content": null}),
            json!({"content": "d", "reasoning_content": null}),
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "bash", "arguments": ""}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":1"}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "2}"}}]}),
            json!({"content": ""}),
            Value::Null,
        ]
    );
    assert_eq!(
        payloads[7]["choices"][0]["finish_reason"],
        json!("tool_calls")
    );
    assert_eq!(
        payloads[7]["usage"],
        json!({"prompt_tokens": 100, "completion_tokens": 9, "total_tokens": 109,
        "prompt_tokens_details": {"cached_tokens": 60}, "prompt_cache_hit_tokens": 60, "prompt_cache_miss_tokens": 40,
        "completion_tokens_details": {"reasoning_tokens": 2}})
    );
    let trailing = Completion::text("x")
        .usage_placement(UsagePlacement::TrailingChunk)
        .payloads();
    assert_eq!(trailing.len(), 5);
    assert!(trailing[3].contains("\"choices\":[]") && trailing[3].contains("\"usage\""));
}

#[test]
fn inserted_pauses_land_after_the_given_event() {
    let gate = Gate::new();
    let request = RecordedRequest {
        method: "POST".into(),
        path: "/".into(),
        headers: vec![],
        body: String::new(),
        json: None,
    };
    let steps = Reply::sse_payloads(["a", "b"])
        .pause_after_event(1, Duration::from_millis(5))
        .hold_after_event(0, &gate)
        .with_header("x-request-id", "r1")
        .resolve(&request);
    let shape: Vec<String> = steps
        .iter()
        .map(|s| match s {
            Step::Head { headers, .. } => format!("head {}", headers.len()),
            Step::Bytes(b) => String::from_utf8_lossy(b).trim().to_string(),
            Step::Repeat { times, .. } => format!("repeat {times}"),
            Step::Sleep(_) => "sleep".into(),
            Step::Wait(_) => "wait".into(),
            Step::End => "end".into(),
            Step::Drop => "drop".into(),
        })
        .collect();
    assert_eq!(shape, ["head 3", "wait", "data: a", "sleep", "data: b"]);
}

#[test]
fn echo_reads_the_last_tool_message() {
    let request = RecordedRequest {
        method: "POST".into(),
        path: "/chat/completions".into(),
        headers: vec![],
        body: String::new(),
        json: Some(
            json!({"messages": [{"role": "tool", "content": "one"}, {"role": "user", "content": "x"},
            {"role": "tool", "tool_call_id": "c", "content": "TERMINAL_OK\n"}]}),
        ),
    };
    assert_eq!(request.last_tool_output().as_deref(), Some("TERMINAL_OK\n"));
    let steps = Reply::echo_tool_output().resolve(&request);
    let text: String = steps
        .iter()
        .filter_map(|s| match s {
            Step::Bytes(b) => serde_json::from_str::<Value>(
                String::from_utf8_lossy(b)
                    .trim()
                    .trim_start_matches("data: "),
            )
            .ok(),
            _ => None,
        })
        .filter_map(|v| {
            v.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(text, "TERMINAL_OK\n");
}

#[test]
fn an_oversized_text_answer_is_generated_while_it_is_written() {
    let server = MockServer::with_replies([Reply::oversized_text(200_000)]);
    let response = exchange(&server, "POST", "/chat/completions", "{}");
    let body = body(&response);
    assert!(body.len() >= 200_000, "{}", body.len());
    let events: Vec<Value> = body
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").expect("data line"))
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).expect("json event"))
        .collect();
    let text: String = events
        .iter()
        .filter_map(|e| {
            e.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect();
    assert_eq!(text.len() % 1000, 0);
    assert!(text.len() > 100_000, "{}", text.len());
    assert_eq!(
        events
            .last()
            .and_then(|e| e.pointer("/choices/0/finish_reason")),
        Some(&json!("stop"))
    );
    assert!(body.ends_with("data: [DONE]\n\n"));
}
