//! The durable events of long sessions (pruning, a compaction bracket with its checkpoint
//! replacement, a command pair) survive the v4 log format: encode → decode gives back the
//! same events and the same model-visible history.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_kernel::Context;
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_session::v4::{V4Encoder, header_line_v4, parse_log_v4};
use dsh_session::{
    Event, Session, SessionHeader, SessionSource, SessionStore, SurfaceIntent, SurfaceOp,
    system_clock,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn replace(start: u64, end: u64, sources: Vec<u64>) -> Option<SurfaceIntent> {
    Some(SurfaceIntent {
        op: SurfaceOp::Replace { start, end },
        sources: Some(sources),
    })
}

fn derived(header: &SessionHeader, events: &[Arc<Event>]) -> Vec<Value> {
    let mut s = Session::new(header.clone());
    for e in events {
        s.push_event_checked(e.clone()).unwrap();
    }
    s.derive_messages().iter().map(|m| m.to_value()).collect()
}

#[test]
fn compaction_and_pruning_round_trip_through_v4() {
    let root = Context::new_root();
    let store = SessionStore::new(system_clock());
    let mut header = SessionHeader::new("v4-long", 1);
    header.cwd = Some("/work".into());
    let s = store
        .create(&root, header.clone(), SessionSource::Fresh)
        .unwrap();
    s.append("turn/start", json!({"turn": 1}), None).unwrap();
    s.append("step/start", json!({"turn": 1, "step": 1}), None)
        .unwrap();
    let prompt = s
        .append(
            "user/message",
            Message::user_text("print things").to_value(),
            Some(SurfaceIntent::append()),
        )
        .unwrap();
    s.append(
        "request/header",
        json!({"header": {"config": {"provider": "p", "model": "m"}, "system": "sys"}, "reason": "initial"}),
        None,
    )
    .unwrap();
    let call = Message::assistant(
        vec![ContentBlock::ToolCall {
            id: "c1".into(),
            name: "bash".into(),
            arguments: "{}".into(),
        }],
        "p",
        "m",
        None,
    );
    s.append(
        "assistant/message",
        json!({"turn": 1, "step": 1, "message": call.to_value()}),
        Some(SurfaceIntent::append_citing(vec![])),
    )
    .unwrap();
    let tc = s
        .append(
            "tool/call",
            json!({"turn": 1, "step": 1, "callId": "c1", "name": "bash", "arguments": "{}"}),
            None,
        )
        .unwrap();
    let result = Message::tool_result("c1", vec![ContentBlock::text("x".repeat(9000))], false);
    let r = s
        .append(
            "tool/result",
            json!({"turn": 1, "step": 1, "message": result.to_value()}),
            Some(SurfaceIntent::append_citing(vec![tc.seq])),
        )
        .unwrap();
    s.append("step/end", json!({"turn": 1, "step": 1}), None)
        .unwrap();
    // The pruner's pair.
    s.append(
        "compaction/prune",
        json!({"shadowedRange": {"start": r.seq, "end": r.seq}, "shadowedSeqs": [r.seq], "shadowedTokenCount": 2258}),
        None,
    )
    .unwrap();
    let mut pruned = r.data.to_value();
    pruned["message"]["content"][0]["content"] = json!([{"type": "text", "text": "xx[pruned]xx"}]);
    s.append("tool/result", pruned, replace(r.seq, r.seq, vec![r.seq]))
        .unwrap();
    s.append(
        "turn/end",
        json!({"turn": 1, "reason": {"kind": "completed"}}),
        None,
    )
    .unwrap();
    // A manual compaction of the prompt and the call, recorded around a command.
    s.append(
        "command/run",
        json!({"commandId": "cmd-1", "name": "compact", "args": "", "source": {"kind": "user"}}),
        None,
    )
    .unwrap();
    let start = s
        .append(
            "compaction/start",
            json!({"compactionId": "k1", "sourceCommandId": "cmd-1", "turn": null}),
            None,
        )
        .unwrap();
    let nodes = s.read(|x| x.surface().nodes().to_vec());
    let (first, last) = (nodes[0], nodes[1]);
    assert_eq!(first, prompt.seq);
    let summary = s
        .append(
            "compaction/summary",
            json!({"compactionId": "k1", "sourceCommandId": "cmd-1",
                   "summary": [{"type": "text", "text": "did things"}],
                   "rawOutput": [{"type": "text", "text": "did things"}], "llmStreamCall": true,
                   "shadowedRange": {"start": first, "end": last}, "shadowedSeqs": [first, last],
                   "shadowedTokenCount": 20, "provider": "p", "model": "m", "maxTokens": 8192}),
            None,
        )
        .unwrap();
    let checkpoint = Message::user(
        vec![ContentBlock::text(
            "<compacted-summary>did things</compacted-summary>",
        )],
        MessageSource::plugin(
            "compact",
            [
                ("compactionId".to_string(), json!("k1")),
                ("sourceCommandId".to_string(), json!("cmd-1")),
            ],
        ),
    );
    s.append(
        "user/message",
        checkpoint.to_value(),
        replace(first, last, vec![start.seq, summary.seq, first, last]),
    )
    .unwrap();
    s.append(
        "compaction/end",
        json!({"compactionId": "k1", "sourceCommandId": "cmd-1", "turn": null}),
        None,
    )
    .unwrap();
    s.append(
        "command/done",
        json!({"commandId": "cmd-1", "kind": "success", "text": "Compacted 2 history items (~20 tokens).", "sourceEventSeq": summary.seq}),
        None,
    )
    .unwrap();

    let events = s.events();
    let want = derived(&header, &events);
    assert_eq!(want.len(), 2, "checkpoint + pruned result");
    let mut text = header_line_v4(&header);
    let mut encoder = V4Encoder::new(&header.id, None);
    for batch in events.chunks(5) {
        encoder.encode(batch, &mut text).unwrap();
    }
    let (back, _) = parse_log_v4(&text).unwrap();
    assert_eq!(derived(&back.header, &back.events), want);
    let pick = |es: &[Arc<Event>], t: &str| -> Vec<(u64, Value)> {
        es.iter()
            .filter(|e| e.is(t))
            .map(|e| (e.seq, e.data.to_value()))
            .collect()
    };
    for t in [
        "compaction/prune",
        "compaction/start",
        "compaction/summary",
        "compaction/end",
        "command/run",
        "command/done",
    ] {
        assert_eq!(pick(&back.events, t), pick(&events, t), "{t}");
    }
    let surface_ops = |es: &[Arc<Event>]| -> Vec<(u64, Option<SurfaceOp>, Option<Vec<u64>>)> {
        es.iter()
            // (An assistant message's chunk citations live inside its v4 row.)
            .filter(|e| e.surface_op.is_some() && !e.is("assistant/message"))
            .map(|e| (e.seq, e.surface_op, e.source_event_seqs.clone()))
            .collect()
    };
    assert_eq!(surface_ops(&back.events), surface_ops(&events));
}
