use super::*;
use pretty_assertions::assert_eq;
use serde_json::json;

fn run(field: ReasoningField, payloads: &[Value]) -> Vec<Value> {
    let mut translator = Translator::new(field);
    let mut out = Vec::new();
    for payload in payloads {
        out.extend(
            translator
                .payload(&payload.to_string())
                .expect("valid payload"),
        );
    }
    out.extend(translator.done());
    out.iter()
        .map(|c| serde_json::to_value(c).expect("chunk serializes"))
        .collect()
}

fn deepseek(payloads: &[Value]) -> Vec<Value> {
    run(ReasoningField::ReasoningContent, payloads)
}

fn delta(delta: Value) -> Value {
    json!({"choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
}

#[test]
fn reasoning_then_tool_call_matches_the_fixture_order() {
    let chunks = deepseek(&[
        delta(json!({"role": "assistant", "content": null, "reasoning_content": ""})),
        delta(json!({"reasoning_content": "Run "})),
        delta(json!({"reasoning_content": "it."})),
        delta(
            json!({"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
            "function": {"name": "bash", "arguments": ""}}]}),
        ),
        delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"command\""}}]})),
        delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": ": \"ls\"}"}}]})),
        json!({"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 2877, "completion_tokens": 90, "prompt_cache_hit_tokens": 0,
                "prompt_cache_miss_tokens": 2877, "completion_tokens_details": {"reasoning_tokens": 18}}}),
    ]);
    assert_eq!(
        chunks,
        vec![
            json!({"type": "block-start", "index": 0, "blockType": "reasoning"}),
            json!({"type": "reasoning-delta", "index": 0, "text": "Run "}),
            json!({"type": "reasoning-delta", "index": 0, "text": "it."}),
            json!({"type": "block-start", "index": 1, "blockType": "tool-call"}),
            json!({"type": "tool-call-delta", "index": 1, "id": "call_0", "name": "bash", "argumentsDelta": ""}),
            json!({"type": "tool-call-delta", "index": 1, "id": "call_0", "name": "bash", "argumentsDelta": "{\"command\""}),
            json!({"type": "tool-call-delta", "index": 1, "id": "call_0", "name": "bash", "argumentsDelta": ": \"ls\"}"}),
            json!({"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "Run it."}}),
            json!({"type": "block-end", "index": 1, "block": {"type": "tool-call", "id": "call_0", "name": "bash",
            "arguments": "{\"command\": \"ls\"}"}}),
            json!({"type": "usage", "usage": {"inputTokens": 2877, "outputTokens": 90, "cacheReadTokens": 0,
            "reasoningTokens": 18}}),
            json!({"type": "finish", "reason": {"kind": "tool-calls"}}),
        ]
    );
}

#[test]
fn reasoning_resuming_after_text_reuses_its_index_and_trailing_usage_wins() {
    let chunks = deepseek(&[
        delta(json!({"reasoning_content": "a"})),
        delta(json!({"content": "D"})),
        delta(json!({"reasoning_content": "b", "content": "ONE"})),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1}}),
        json!({"choices": [], "usage": {"prompt_tokens": 2984, "completion_tokens": 25,
            "prompt_tokens_details": {"cached_tokens": 2816}, "prompt_cache_hit_tokens": 1,
            "completion_tokens_details": {"reasoning_tokens": 22}}}),
    ]);
    assert_eq!(
        chunks,
        vec![
            json!({"type": "block-start", "index": 0, "blockType": "reasoning"}),
            json!({"type": "reasoning-delta", "index": 0, "text": "a"}),
            json!({"type": "block-start", "index": 1, "blockType": "text"}),
            json!({"type": "text-delta", "index": 1, "text": "D"}),
            json!({"type": "reasoning-delta", "index": 0, "text": "b"}),
            json!({"type": "text-delta", "index": 1, "text": "ONE"}),
            json!({"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "ab"}}),
            json!({"type": "block-end", "index": 1, "block": {"type": "text", "text": "DONE"}}),
            json!({"type": "usage", "usage": {"inputTokens": 168, "outputTokens": 25, "cacheReadTokens": 2816,
            "reasoningTokens": 22}}),
            json!({"type": "finish", "reason": {"kind": "stop"}}),
        ]
    );
}

#[test]
fn parallel_tool_calls_get_one_block_per_wire_index() {
    let chunks = deepseek(&[
        delta(json!({"tool_calls": [
            {"index": 0, "id": "a", "function": {"name": "read", "arguments": "{}"}},
            {"index": 1, "id": "b", "function": {"name": "ls"}},
        ]})),
        delta(json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"p\":1}"}}]})),
        json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
    ]);
    assert_eq!(
        chunks,
        vec![
            json!({"type": "block-start", "index": 0, "blockType": "tool-call"}),
            json!({"type": "tool-call-delta", "index": 0, "id": "a", "name": "read", "argumentsDelta": "{}"}),
            json!({"type": "block-start", "index": 1, "blockType": "tool-call"}),
            json!({"type": "tool-call-delta", "index": 1, "id": "b", "name": "ls", "argumentsDelta": ""}),
            json!({"type": "tool-call-delta", "index": 1, "id": "b", "name": "ls", "argumentsDelta": "{\"p\":1}"}),
            json!({"type": "block-end", "index": 0, "block": {"type": "tool-call", "id": "a", "name": "read", "arguments": "{}"}}),
            json!({"type": "block-end", "index": 1, "block": {"type": "tool-call", "id": "b", "name": "ls", "arguments": "{\"p\":1}"}}),
            json!({"type": "finish", "reason": {"kind": "tool-calls"}}),
        ]
    );
}

#[test]
fn a_tool_call_without_id_or_name_yet_streams_empty_id_and_no_name() {
    let chunks = deepseek(&[
        delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]})),
        delta(
            json!({"tool_calls": [{"index": 0, "id": "late", "function": {"name": "n", "arguments": "}"}}]}),
        ),
    ]);
    assert_eq!(
        chunks[1],
        json!({"type": "tool-call-delta", "index": 0, "id": "", "argumentsDelta": "{"})
    );
    assert_eq!(
        chunks[2],
        json!({"type": "tool-call-delta", "index": 0, "id": "late", "name": "n", "argumentsDelta": "}"})
    );
}

#[test]
fn empty_stop_is_an_empty_response_error_after_usage() {
    let chunks = deepseek(&[
        delta(json!({"role": "assistant", "content": "", "reasoning_content": ""})),
        json!({"choices": [{"delta": {"content": ""}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0}}),
    ]);
    assert_eq!(
        chunks,
        vec![
            json!({"type": "usage", "usage": {"inputTokens": 0, "outputTokens": 0}}),
            json!({"type": "finish", "reason": {"kind": "error", "failure": {
            "message": "the model ended its response without any content", "code": "EMPTY_RESPONSE"}}}),
        ]
    );
    // No finish_reason at all counts as stop.
    assert_eq!(
        deepseek(&[]),
        vec![
            json!({"type": "finish", "reason": {"kind": "error", "failure": {
        "message": "the model ended its response without any content", "code": "EMPTY_RESPONSE"}}})
        ]
    );
}

#[test]
fn non_stop_reasons_without_blocks_pass_through_and_reasoning_only_counts_as_content() {
    let length = deepseek(&[json!({"choices": [{"delta": {}, "finish_reason": "length"}]})]);
    assert_eq!(
        length,
        vec![json!({"type": "finish", "reason": {"kind": "max-tokens"}})]
    );
    let reasoning_only = deepseek(&[
        delta(json!({"reasoning_content": "hmm"})),
        json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}),
    ]);
    assert_eq!(
        reasoning_only.last(),
        Some(&json!({"type": "finish", "reason": {"kind": "stop"}}))
    );
}

#[test]
fn unknown_finish_reasons_become_upper_cased_error_codes() {
    let chunks = deepseek(&[
        delta(json!({"content": "partial"})),
        json!({"choices": [{"delta": {}, "finish_reason": "content_filter"}]}),
    ]);
    assert_eq!(
        chunks.last(),
        Some(
            &json!({"type": "finish", "reason": {"kind": "error", "failure": {
        "message": "model stopped: content_filter", "code": "CONTENT_FILTER"}}})
        )
    );
    let chunks = deepseek(&[
        json!({"choices": [{"delta": {}, "finish_reason": "insufficient_system_resource"}]}),
    ]);
    assert_eq!(
        chunks,
        vec![
            json!({"type": "finish", "reason": {"kind": "error", "failure": {
        "message": "model stopped: insufficient_system_resource", "code": "INSUFFICIENT_SYSTEM_RESOURCE"}}})
        ]
    );
}

#[test]
fn usage_mapping_subtracts_cache_hits_and_keeps_reported_zeroes() {
    let map = |v: Value| {
        serde_json::to_value(map_usage(&serde_json::from_value(v).expect("usage"))).expect("json")
    };
    assert_eq!(
        map(json!({"prompt_tokens": 100, "completion_tokens": 7})),
        json!({"inputTokens": 100, "outputTokens": 7})
    );
    assert_eq!(
        map(
            json!({"prompt_tokens": 100, "completion_tokens": 7, "prompt_cache_hit_tokens": 60,
        "completion_tokens_details": {"reasoning_tokens": 0}})
        ),
        json!({"inputTokens": 40, "outputTokens": 7, "cacheReadTokens": 60, "reasoningTokens": 0})
    );
    // OpenAI's cached_tokens wins over DeepSeek's field, even when 0.
    assert_eq!(
        map(
            json!({"prompt_tokens": 100, "completion_tokens": 7, "prompt_cache_hit_tokens": 60,
        "prompt_tokens_details": {"cached_tokens": 0}})
        ),
        json!({"inputTokens": 100, "outputTokens": 7, "cacheReadTokens": 0})
    );
    // A null details object falls back to the DeepSeek field.
    assert_eq!(
        map(
            json!({"prompt_tokens": 10, "completion_tokens": 1, "prompt_cache_hit_tokens": 4,
        "prompt_tokens_details": null})
        ),
        json!({"inputTokens": 6, "outputTokens": 1, "cacheReadTokens": 4})
    );
}

#[test]
fn malformed_payloads_are_malformed_response_with_the_first_120_chars() {
    let mut translator = Translator::new(ReasoningField::ReasoningContent);
    let long = format!("{{\"choices\": [{}", "x".repeat(200));
    let error = translator.payload(&long).expect_err("malformed");
    assert_eq!(
        error.failure,
        LlmFailure::new(
            "MALFORMED_RESPONSE",
            format!("malformed SSE payload: {}", &long[..120])
        )
    );
    for bad in [
        "null",
        "[1]",
        "{\"choices\": {}}",
        "{\"choices\": [{\"delta\": {\"tool_calls\": 3}}]}",
    ] {
        let error = translator.payload(bad).expect_err(bad);
        assert_eq!(error.code(), "MALFORMED_RESPONSE", "{bad}");
    }
}

#[test]
fn an_error_inside_the_stream_carries_the_providers_text() {
    let mut translator = Translator::new(ReasoningField::ReasoningContent);
    translator
        .payload(&delta(json!({"content": "partial"})).to_string())
        .expect("a normal delta first");
    let cases = [
        (
            json!({"error": {"message": "The server is overloaded, try later", "type": "server_error", "code": null}}),
            ("SERVER", "The server is overloaded, try later"),
        ),
        (
            json!({"error": {"message": "Rate limit reached for requests", "type": "rate_limit_error"}}),
            ("RATE_LIMIT", "Rate limit reached for requests"),
        ),
        (
            json!({"error": {"message": "Insufficient Balance", "type": "unknown_error"}}),
            ("QUOTA", "Insufficient Balance"),
        ),
        (
            json!({"error": {"message": "This model's maximum context length is 8192 tokens", "type": "invalid_request_error"}}),
            (
                "CONTEXT_WINDOW_EXCEEDED",
                "This model's maximum context length is 8192 tokens",
            ),
        ),
        (
            json!({"error": "upstream gone"}),
            ("SERVER", "upstream gone"),
        ),
        (
            json!({"error": {"type": "server_error"}}),
            (
                "SERVER",
                "the provider reported an error mid-stream: {\"type\":\"server_error\"}",
            ),
        ),
    ];
    for (payload, (code, message)) in cases {
        let error = translator
            .payload(&payload.to_string())
            .expect_err("an error payload fails the attempt");
        assert_eq!(
            (error.code(), error.failure.message.as_str()),
            (code, message),
            "{payload}"
        );
    }
    // `error: null` next to ordinary fields is no error.
    let chunks = translator
        .payload(r#"{"error": null, "choices": [{"delta": {"content": "!"}}]}"#)
        .expect("no error");
    assert_eq!(chunks.len(), 1);
}

#[test]
fn the_reasoning_alias_is_read_only_for_generic_servers() {
    let payloads = [delta(json!({"reasoning": "r", "content": "t"}))];
    let generic = run(ReasoningField::ReasoningContentOrReasoning, &payloads);
    assert_eq!(
        generic[0],
        json!({"type": "block-start", "index": 0, "blockType": "reasoning"})
    );
    let deepseek = deepseek(&payloads);
    assert_eq!(
        deepseek[0],
        json!({"type": "block-start", "index": 0, "blockType": "text"})
    );
}

mod any_split {
    use super::*;
    use crate::sse::{DONE, SseDecoder};
    use proptest::prelude::*;

    /// A realistic thinking-mode tool-call stream with CRLF framing, a comment and
    /// multi-byte text, as raw bytes.
    fn stream() -> Vec<u8> {
        let payloads = [
            delta(json!({"role": "assistant", "content": null, "reasoning_content": ""})),
            delta(json!({"reasoning_content": "先想"})),
            delta(json!({"reasoning_content": "一下 🙂"})),
            delta(json!({"content": "Réponse"})),
            delta(
                json!({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "bash", "arguments": ""}}]}),
            ),
            delta(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"command\":\"ls\"}"}}]}),
            ),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 9, "completion_tokens": 4, "prompt_cache_hit_tokens": 2}}),
        ];
        let mut out = String::from(": keep-alive\r\n\r\n");
        for p in payloads {
            out.push_str(&format!("data: {p}\r\n\r\n"));
        }
        out.push_str("data: [DONE]\n\n");
        out.into_bytes()
    }

    fn decode(bytes: &[u8], cuts: &[usize]) -> Vec<StreamChunk> {
        let mut decoder = SseDecoder::new();
        let mut translator = Translator::new(ReasoningField::ReasoningContent);
        let mut chunks = Vec::new();
        let mut start = 0;
        for &cut in cuts.iter().chain([bytes.len()].iter()) {
            for payload in decoder.feed(&bytes[start..cut]).unwrap() {
                if payload == DONE {
                    chunks.extend(translator.done());
                } else {
                    chunks.extend(translator.payload(&payload).expect("valid"));
                }
            }
            start = cut;
        }
        chunks
    }

    proptest! {
        /// Any split of the SSE byte stream yields the same chunks.
        #[test]
        fn any_split_of_the_byte_stream_yields_the_same_chunks(cuts in proptest::collection::vec(any::<usize>(), 0..24)) {
            let bytes = stream();
            let whole = decode(&bytes, &[]);
            prop_assert_eq!(whole.len(), 13);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            prop_assert_eq!(decode(&bytes, &cuts), whole);
        }
    }
}

#[test]
fn a_whole_completion_reads_like_the_stream_of_its_message() {
    // The shape llama-cpp-python answers a non-streamed request with tools in.
    let body = json!({"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": "{\"path\": \"n.txt\"}"}},
            {"id": "call_b", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
        ], "function_call": {"name": "read:", "arguments": "{}"}},
        "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 207, "completion_tokens": 8, "total_tokens": 215}});
    let mut translator = Translator::new(ReasoningField::ReasoningContentOrReasoning);
    let chunks: Vec<Value> = translator
        .completion(body.to_string().as_bytes())
        .expect("a completion")
        .iter()
        .map(|c| serde_json::to_value(c).expect("serializes"))
        .collect();
    let ends: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["type"] == "block-end")
        .map(|c| &c["block"])
        .collect();
    assert_eq!(
        ends,
        [
            &json!({"type": "tool-call", "id": "call_a", "name": "read", "arguments": "{\"path\": \"n.txt\"}"}),
            &json!({"type": "tool-call", "id": "call_b", "name": "ls", "arguments": "{}"}),
        ]
    );
    let usage = chunks.iter().find(|c| c["type"] == "usage").expect("usage");
    assert_eq!(usage["usage"]["inputTokens"], 207, "{usage}");
    assert_eq!(
        chunks.last().expect("finish")["reason"]["kind"],
        "tool-calls",
        "{chunks:?}"
    );

    let text = json!({"choices": [{"message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}]});
    let chunks = Translator::new(ReasoningField::ReasoningContentOrReasoning)
        .completion(text.to_string().as_bytes())
        .expect("a completion");
    assert!(
        chunks
            .iter()
            .any(|c| matches!(c, StreamChunk::TextDelta { text, .. } if text == "Hello.")),
        "{chunks:?}"
    );

    for bad in ["<html>busy</html>", "[1,2]", "{\"object\":\"list\"}"] {
        let error = Translator::new(ReasoningField::ReasoningContentOrReasoning)
            .completion(bad.as_bytes())
            .expect_err("not a completion");
        assert_eq!(error.code(), codes::MALFORMED_RESPONSE, "{bad}");
    }
    let error = Translator::new(ReasoningField::ReasoningContentOrReasoning)
        .completion(br#"{"error": {"message": "This model's maximum context length is 512 tokens.", "code": "context_length_exceeded"}}"#)
        .expect_err("an error body");
    assert_eq!(error.code(), codes::CONTEXT_WINDOW_EXCEEDED);
}

#[test]
fn generic_endpoints_get_legacy_function_calls_and_missing_ids_filled_in() {
    let generic = |payloads: &[Value]| run(ReasoningField::ReasoningContentOrReasoning, payloads);
    // The legacy function-calling shape, streamed.
    let out = generic(&[
        delta(json!({"function_call": {"name": "read", "arguments": ""}})),
        delta(json!({"function_call": {"arguments": "{\"path\":\"a\"}"}})),
        json!({"choices": [{"delta": {}, "finish_reason": "function_call"}]}),
    ]);
    let ends: Vec<&Value> = out.iter().filter(|c| c["type"] == "block-end").collect();
    assert_eq!(
        ends[0]["block"],
        json!({"type": "tool-call", "id": "call_0", "name": "read", "arguments": "{\"path\":\"a\"}"})
    );
    // Numbered calls without ids.
    let out = generic(&[
        delta(json!({"tool_calls": [{"index": 0, "function": {"name": "ls", "arguments": "{}"}}]})),
        json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
    ]);
    assert_eq!(out[out.len() - 2]["block"]["id"], "call_0", "{out:?}");
    assert_eq!(out.last().expect("finish")["reason"]["kind"], "tool-calls");
    // A call that never names its function ends the reply with an error saying so.
    let out = generic(&[
        delta(json!({"tool_calls": [{"index": 0, "id": "x", "function": {"arguments": "{}"}}]})),
        json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
    ]);
    let reason = &out.last().expect("finish")["reason"];
    assert_eq!(reason["kind"], "error", "{out:?}");
    assert_eq!(reason["failure"]["code"], "MALFORMED_RESPONSE");
    assert!(
        reason["failure"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no function name")),
        "{reason}"
    );
    // DeepSeek's own stream keeps its recorded shape (no ids made up, no legacy field).
    let out = deepseek(&[
        delta(json!({"function_call": {"name": "read", "arguments": "{}"}})),
        delta(json!({"content": "ok"})),
    ]);
    assert!(out.iter().all(|c| c["blockType"] != "tool-call"), "{out:?}");
}
