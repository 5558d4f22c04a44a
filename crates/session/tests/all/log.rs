//! Log semantics: append validation, surface replacement, derive caching, fork, repair,
//! chunk-row packing — including property tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_llm::{ContentBlock, Message, StreamChunk};
use dsh_session::{
    Event, ForkError, RecordFormat, Session, SessionHeader, SurfaceIntent, SurfaceKeyOrder,
    SurfaceOp, interrupted_turn_closers, pack, parse_log, types, write_record,
};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde_json::{Value, json};

fn session() -> Session {
    Session::new(SessionHeader::new("s1", 1000))
}

fn user(s: &mut Session, text: &str) -> u64 {
    let m = Message::user_text(text);
    s.append_at(
        types::USER_MESSAGE,
        m.to_value(),
        Some(SurfaceIntent::append()),
        1,
    )
    .unwrap()
    .seq
}

fn open_step(s: &mut Session, turn: u64, step: u64) {
    if step == 1 {
        s.append_at(types::TURN_START, json!({"turn": turn}), None, 1)
            .unwrap();
    }
    s.append_at(
        types::STEP_START,
        json!({"turn": turn, "step": step}),
        None,
        1,
    )
    .unwrap();
}

fn close_step(s: &mut Session, turn: u64, step: u64) {
    s.append_at(
        types::STEP_END,
        json!({"turn": turn, "step": step}),
        None,
        1,
    )
    .unwrap();
}

fn end_turn(s: &mut Session, turn: u64) {
    s.append_at(
        types::TURN_END,
        json!({"turn": turn, "reason": {"kind": "completed"}}),
        None,
        1,
    )
    .unwrap();
}

fn assistant(s: &mut Session, turn: u64, step: u64, content: Vec<ContentBlock>) -> u64 {
    let m = Message::assistant(content, "p", "m", None);
    let data = json!({"turn": turn, "step": step, "message": m.to_value()});
    s.append_at(
        types::ASSISTANT_MESSAGE,
        data,
        Some(SurfaceIntent::append_citing(vec![])),
        1,
    )
    .unwrap()
    .seq
}

fn texts(s: &mut Session) -> Vec<String> {
    s.derive_messages().iter().map(|m| m.text()).collect()
}

#[test]
fn seq_equals_index_and_invalid_appends_leave_the_log_unchanged() {
    let mut s = session();
    open_step(&mut s, 1, 1);
    user(&mut s, "hi");
    let before = s.events().len();
    // surface fields on a non-surface event
    let err = s
        .append_at(
            types::TODO_WRITE,
            json!({"todos": []}),
            Some(SurfaceIntent::append()),
            1,
        )
        .unwrap_err();
    assert!(err.0.contains("not surface-eligible"), "{err}");
    // surface event without surfaceOp
    assert!(
        s.append_at(
            types::USER_MESSAGE,
            Message::user_text("x").to_value(),
            None,
            1
        )
        .is_err()
    );
    // a step/start while one is open
    assert!(
        s.append_at(types::STEP_START, json!({"turn": 1, "step": 2}), None, 1)
            .is_err()
    );
    // a tool result for a call that was never made
    let r = Message::tool_result("nope", vec![ContentBlock::text("x")], false);
    assert!(
        s.append_at(
            types::TOOL_RESULT,
            json!({"turn":1,"step":1,"message": r.to_value()}),
            Some(SurfaceIntent::append()),
            1
        )
        .is_err()
    );
    // -0 is not lossless JSON
    let neg_zero: Value = serde_json::from_str("{\"x\":-0.0}").unwrap();
    assert!(s.append_at("plugin/thing", neg_zero, None, 1).is_err());
    assert_eq!(s.events().len(), before);
    for (i, e) in s.events().iter().enumerate() {
        assert_eq!(e.seq, i as u64);
    }
}

#[test]
fn derive_skips_empty_assistant_messages_and_follows_replacements() {
    let mut s = session();
    open_step(&mut s, 1, 1);
    let a = user(&mut s, "one");
    assistant(&mut s, 1, 1, vec![]);
    let b = assistant(&mut s, 1, 1, vec![ContentBlock::text("two")]);
    let c = user(&mut s, "three");
    assert_eq!(texts(&mut s), ["one", "two", "three"]);
    // replace [a..b] with a summary; positional range, must cite shadowed nodes
    let summary = Message::user_text("summary");
    let bad = s.append_at(
        types::USER_MESSAGE,
        summary.to_value(),
        Some(SurfaceIntent {
            op: SurfaceOp::Replace { start: a, end: b },
            sources: Some(vec![a]),
        }),
        1,
    );
    assert!(bad.is_err(), "every shadowed node must be cited");
    let shadow = s.surface().nodes()[0..3].to_vec();
    let r = s
        .append_at(
            types::USER_MESSAGE,
            summary.to_value(),
            Some(SurfaceIntent {
                op: SurfaceOp::Replace { start: a, end: b },
                sources: Some(shadow),
            }),
            1,
        )
        .unwrap();
    assert_eq!(s.surface().replace_generation(), 1);
    assert_eq!(texts(&mut s), ["summary", "three"]);
    // a later replacement may have start numerically greater than end (positional)
    let r2 = s
        .append_at(
            types::USER_MESSAGE,
            Message::user_text("all").to_value(),
            Some(SurfaceIntent {
                op: SurfaceOp::Replace {
                    start: r.seq,
                    end: c,
                },
                sources: Some(vec![r.seq, c]),
            }),
            1,
        )
        .unwrap();
    assert!(r2.seq > c);
    assert_eq!(texts(&mut s), ["all"]);
}

#[test]
fn fork_refuses_open_turns_and_seeds_end_with_end_seed() {
    let mut s = session();
    open_step(&mut s, 1, 1);
    user(&mut s, "q");
    assert_eq!(s.fork_prefix(None), Err(ForkError::OpenTurn(2)));
    assert_eq!(s.fork_prefix(Some(99)), Err(ForkError::InvalidBoundary(99)));
    close_step(&mut s, 1, 1);
    end_turn(&mut s, 1);
    let prefix = s.fork_prefix(None).unwrap();
    let mut header = SessionHeader::new("child", 2000);
    header.seed_length = Some(prefix.len() as u64);
    let mut child = Session::with_seed(header, prefix.clone(), 5).unwrap();
    assert_eq!(child.events().len(), prefix.len() + 1);
    assert_eq!(child.events().last().unwrap().event_type, types::END_SEED);
    assert_eq!(child.first_live_seq(), prefix.len() as u64);
    assert_eq!(texts(&mut child), ["q"]);
    assert_eq!(
        child.last_turn(),
        1,
        "turn numbering continues from the seed"
    );
    let reopened = Session::with_seed(
        SessionHeader::new("child", 2000),
        child.events().to_vec(),
        9,
    )
    .unwrap();
    assert_eq!(
        reopened.events().len(),
        child.events().len(),
        "reopening untouched does not grow the log"
    );
}

#[test]
fn repair_closes_the_open_turn_and_answers_every_call() {
    let mut s = session();
    open_step(&mut s, 1, 1);
    user(&mut s, "go");
    assistant(
        &mut s,
        1,
        1,
        vec![
            ContentBlock::ToolCall {
                id: "a".into(),
                name: "bash".into(),
                arguments: "{}".into(),
            },
            ContentBlock::ToolCall {
                id: "b".into(),
                name: "bash".into(),
                arguments: "{}".into(),
            },
        ],
    );
    let call = s
        .append_at(
            types::TOOL_CALL,
            json!({"turn":1,"step":1,"callId":"a","name":"bash","arguments":"{}"}),
            None,
            7,
        )
        .unwrap();
    let closers = interrupted_turn_closers(s.events());
    let summary: Vec<_> = closers
        .iter()
        .map(|e| {
            (
                e.event_type.to_string(),
                e.data.pointer("/error/code").cloned(),
                e.source_event_seqs.clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                types::TOOL_RESULT.to_string(),
                Some(json!("TOOL_OUTCOME_UNKNOWN")),
                Some(vec![call.seq])
            ),
            (
                types::TOOL_RESULT.to_string(),
                Some(json!("TOOL_NOT_STARTED")),
                None
            ),
            (types::STEP_END.to_string(), None, None),
            (types::TURN_END.to_string(), None, None),
        ]
    );
    assert_eq!(closers[0].key_order, SurfaceKeyOrder::OpFirst);
    let mut line = String::new();
    write_record(
        &mut line,
        &dsh_session::Record::Event(Arc::new(closers[0].clone())),
        RecordFormat::Full,
    );
    assert!(line.starts_with(&format!("{{\"type\":\"tool/result\",\"seq\":{},\"time\":7,\"data\":{{\"turn\":1,\"step\":1,\"message\":{{\"id\":\"interrupted-tool-result-a-", call.seq + 1)), "{line}");
    for c in closers {
        s.push_event_checked(Arc::new(c)).unwrap();
    }
    assert_eq!(s.open_turn(), None);
    assert!(interrupted_turn_closers(s.events()).is_empty());
}

// ---------------------------------------------------------------- properties

fn chunk_event(seq: u64, time: i64, turn: u64, chunk: StreamChunk) -> Arc<Event> {
    Arc::new(Event {
        event_type: types::ASSISTANT_CHUNK.into(),
        seq,
        time,
        data: json!({"turn": turn, "step": 1, "chunk": serde_json::to_value(chunk).unwrap()})
            .into(),
        source_event_seqs: None,
        surface_op: None,
        ignorable: false,
        key_order: SurfaceKeyOrder::SourcesFirst,
    })
}

fn arb_chunk() -> impl Strategy<Value = StreamChunk> {
    let text = "[a-z\"\\\\é\n]{0,4}";
    prop_oneof![
        (0u32..3, text).prop_map(|(index, text)| StreamChunk::TextDelta { index, text }),
        (0u32..3, text).prop_map(|(index, text)| StreamChunk::ReasoningDelta { index, text }),
        (0u32..2, text, proptest::option::of("[a-z]{1,3}")).prop_map(|(index, d, name)| {
            StreamChunk::ToolCallDelta {
                index,
                id: format!("c{index}"),
                name,
                arguments_delta: d,
            }
        }),
        (0u32..3).prop_map(|index| StreamChunk::BlockStart {
            index,
            block_type: "text".into()
        }),
    ]
}

proptest! {
    #[test]
    fn pack_then_decode_roundtrips(chunks in proptest::collection::vec((arb_chunk(), 0i64..5, 1u64..3), 0..40)) {
        let mut time = 100;
        let events: Vec<Arc<Event>> = chunks
            .into_iter()
            .enumerate()
            .map(|(i, (c, dt, turn))| {
                time += dt;
                chunk_event(i as u64, time, turn, c)
            })
            .collect();
        let mut text = String::from("{\"type\":\"session\",\"version\":0,\"id\":\"x\",\"createdAt\":1,\"delegationDepth\":0}\n");
        for r in pack(&events) {
            write_record(&mut text, &r, RecordFormat::Full);
            text.push('\n');
        }
        let parsed = parse_log(&text).unwrap();
        prop_assert_eq!(parsed.events, events);
    }

    #[test]
    fn fork_at_n_derives_the_prefix(turns in 1usize..6, cut in 0usize..6) {
        let mut s = session();
        let mut ends = Vec::new();
        for t in 1..=turns as u64 {
            open_step(&mut s, t, 1);
            user(&mut s, &format!("u{t}"));
            assistant(&mut s, t, 1, vec![ContentBlock::text(format!("a{t}"))]);
            close_step(&mut s, t, 1);
            end_turn(&mut s, t);
            ends.push(s.next_seq() - 1);
        }
        let k = cut.min(turns - 1);
        let boundary = ends[k];
        let mut child = Session::with_seed(SessionHeader::new("c", 1), s.fork_prefix(Some(boundary)).unwrap(), 0).unwrap();
        let expected: Vec<String> = (1..=k as u64 + 1).flat_map(|t| [format!("u{t}"), format!("a{t}")]).collect();
        prop_assert_eq!(texts(&mut child), expected);
    }

    #[test]
    fn every_repaired_log_is_balanced(ops in proptest::collection::vec(0u8..6, 0..30)) {
        // Drive a random but valid sequence of appends, stop anywhere, repair.
        let mut s = session();
        let mut turn = 0;
        let mut step = 0;
        let mut calls = 0;
        let mut unanswered: Vec<String> = Vec::new();
        for op in ops {
            match (op, s.open_turn(), s.open_step()) {
                (0, None, _) => { turn += 1; step = 0; s.append_at(types::TURN_START, json!({"turn": turn}), None, 1).unwrap(); }
                (1, Some(_), None) => { step += 1; s.append_at(types::STEP_START, json!({"turn": turn, "step": step}), None, 1).unwrap(); }
                (2, Some(_), Some(_)) => {
                    calls += 1;
                    let id = format!("c{calls}");
                    assistant(&mut s, turn, step, vec![ContentBlock::ToolCall { id: id.clone(), name: "t".into(), arguments: "{}".into() }]);
                    if calls % 2 == 0 {
                        s.append_at(types::TOOL_CALL, json!({"turn":turn,"step":step,"callId":id,"name":"t","arguments":"{}"}), None, 1).unwrap();
                    }
                    unanswered.push(id);
                }
                (3, Some(_), Some(_)) => {
                    // the loop answers every call of a step before closing it
                    for id in unanswered.drain(..) {
                        let recorded = s.events().iter().any(|e| e.is(types::TOOL_CALL) && e.data["callId"] == json!(id));
                        if !recorded {
                            s.append_at(types::TOOL_CALL, json!({"turn":turn,"step":step,"callId":id,"name":"t","arguments":"{}"}), None, 1).unwrap();
                        }
                        let r = Message::tool_result(&id, vec![ContentBlock::text("ok")], false);
                        s.append_at(types::TOOL_RESULT, json!({"turn":turn,"step":step,"message": r.to_value()}), Some(SurfaceIntent::append()), 1).unwrap();
                    }
                    close_step(&mut s, turn, step)
                }
                (4, Some(_), None) => end_turn(&mut s, turn),
                _ => { user(&mut s, "x"); }
            }
        }
        for c in interrupted_turn_closers(s.events()) {
            s.push_event_checked(Arc::new(c)).unwrap();
        }
        prop_assert_eq!(s.open_turn(), None);
        // every tool-call block has a tool/result
        let called: Vec<String> = s.events().iter().filter(|e| e.is(types::ASSISTANT_MESSAGE))
            .flat_map(|e| e.data.pointer("/message/content").and_then(Value::as_array).cloned().unwrap_or_default())
            .filter_map(|b| b.get("id").and_then(Value::as_str).map(str::to_owned)).collect();
        for id in called {
            let answered = s.events().iter().any(|e| e.is(types::TOOL_RESULT) && e.data.pointer("/message/source/callId").and_then(Value::as_str) == Some(id.as_str()));
            prop_assert!(answered, "call {} has a result", id);
        }
    }
}

/// The request header baseline compares by content, and once equal keeps the caller's copy,
/// so the next step's comparison with the same shared schemas needs no walk of them.
#[test]
fn an_equal_request_header_is_adopted_with_the_callers_schemas() {
    use dsh_llm::{LlmCallConfig, ToolSchema};
    use dsh_session::{EpochHeader, HeaderReason, RequestHeaderData};
    let header = |schema: Arc<Value>| EpochHeader {
        config: LlmCallConfig {
            provider: "p".into(),
            model: "m".into(),
            ..Default::default()
        },
        adapter_defaults: None,
        system: Some("be brief".into()),
        tools: Some(vec![ToolSchema {
            name: "bash".into(),
            description: "runs".into(),
            parameters: schema,
        }]),
    };
    let mut s = session();
    let ours = header(Arc::new(json!({"type": "object"})));
    assert!(!s.request_header_matches(&ours), "no baseline yet");
    let data = dsh_session::to_data(&RequestHeaderData {
        header: ours.clone(),
        reason: HeaderReason::Initial,
    });
    user(&mut s, "hi");
    open_step(&mut s, 1, 1);
    s.append_at(types::REQUEST_HEADER, data, None, 1).unwrap();
    let logged = |s: &Session| s.request_header().unwrap().tools.clone().unwrap();
    // The logged baseline holds its own copy of the schema, equal to ours.
    assert!(!Arc::ptr_eq(
        &logged(&s)[0].parameters,
        &ours.tools.as_ref().unwrap()[0].parameters
    ));
    assert!(s.request_header_matches(&ours));
    assert!(Arc::ptr_eq(
        &logged(&s)[0].parameters,
        &ours.tools.as_ref().unwrap()[0].parameters
    ));
    assert!(s.request_header_matches(&ours));
    // A different schema, or a different prompt, is a change.
    assert!(!s.request_header_matches(&header(Arc::new(json!({"type": "string"})))));
    let mut other = ours.clone();
    other.system = Some("be thorough".into());
    assert!(!s.request_header_matches(&other));
}
