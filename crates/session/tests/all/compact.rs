//! The compact in-memory forms: stream deltas held without a `serde_json::Value`, interned
//! event types, and the fast line decoders — all must be indistinguishable from the plain
//! JSON forms they replace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_session::{
    Event, EventData, EventType, Record, RecordFormat, RowKind, Session, decode_line,
    decode_record_with_format, pack, parse_log, types, write_record,
};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde_json::{Value, json};

/// What the generic decoder (parse to `Value`, then decode) makes of a line.
fn generic(line: &str, next_seq: u64) -> Result<(Record, RecordFormat), ()> {
    let value: Value = serde_json::from_str(line).map_err(|_| ())?;
    decode_record_with_format(value, next_seq).map_err(|_| ())
}

fn fast(line: &str, next_seq: u64) -> Result<(Record, RecordFormat), ()> {
    decode_line(line, next_seq).map_err(|_| ())
}

fn reserialize(record: &Record, format: RecordFormat) -> String {
    let mut out = String::new();
    write_record(&mut out, record, format);
    out
}

#[test]
fn fast_line_decoding_agrees_with_the_generic_decoder() {
    let lines = [
        // canonical rows, both formats, every kind
        r#"{"type":"text-chunks","seq0":4,"time0":100,"data":{"turn":1,"step":2,"index":0,"dt":[0,3],"texts":["a","\n\"é\"",""]}}"#,
        r#"{"type":"reasoning-chunks","data":{"turn":1,"step":1,"index":3,"dt":[1],"texts":["x","y"]}}"#,
        r#"{"type":"tool-call-chunks","seq0":9,"time0":-5,"data":{"turn":1,"step":1,"index":1,"dt":[0,2],"id":"c\u0031","args":["{","\"a\"","}"]}}"#,
        r#"{"type":"tool-call-chunks","seq0":9,"time0":5,"data":{"turn":1,"step":1,"index":1,"dt":[0],"id":"c","name":"bash","args":["{","}"]}}"#,
        // rows the fast path must hand to the generic decoder
        r#"{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[0],"t\u0065xts":["a","b"]}}"#,
        r#"{"type":"text-chunks","data":{"step":1,"turn":1,"index":0,"dt":[0],"texts":["a","b"]}}"#,
        r#"{"type":"text-chunks","seq0":1,"data":{"turn":1,"step":1,"index":0,"dt":[0],"texts":["a","b"]}}"#,
        r#"{"type":"text-chunks","data":{"turn":1.0,"step":1,"index":0,"dt":[0],"texts":["a","b"]}}"#,
        r#"{"type":"text-chunks","data":{"turn":9007199254740992,"step":1,"index":0,"dt":[0],"texts":["a","b"]}}"#,
        r#"{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[0,1],"texts":["a","b"]}}"#,
        r#"{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[-0],"texts":["a","b"]}}"#,
        r#"{"type":"text-chunks","seq0":1,"time0":9223372036854775807,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a","b"]}}"#,
        r#"{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[0],"texts":["a",2]}}"#,
        r#"{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[0],"texts":["a","b"]}} x"#,
        // events
        r#"{"type":"turn/start","seq":3,"time":17,"data":{"turn":1}}"#,
        r#"{"type":"turn/start","data":{"turn":1}}"#,
        r#"{"type":"tool/result","seq":9,"time":1,"data":{},"surfaceOp":"append","sourceEventSeqs":[4]}"#,
        r#"{"type":"tool/result","seq":9,"time":1,"data":{},"sourceEventSeqs":[4,2],"surfaceOp":"append"}"#,
        r#"{"type":"user/message","data":{},"surfaceOp":{"op":"replace","start":5,"end":5}}"#,
        r#"{"type":"plugin/x","seq":1,"time":1,"data":{"a":[1,-2.5,null,true]},"ignorable":true}"#,
        r#"{"type":"assistant/chunk","seq":2,"time":3,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hi"}}}"#,
        r#"{"type":"assistant/chunk","seq":2,"time":3,"data":{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":0,"id":"c","name":"n","argumentsDelta":""}}}"#,
        r#"{"type":"assistant/chunk","seq":2,"time":3,"data":{"step":1,"turn":1,"chunk":{"type":"text-delta","index":0,"text":"hi"}}}"#,
        r#"{"type":"assistant/chunk","seq":2,"time":3,"data":{"turn":1,"step":1,"chunk":{"type":"block-start","index":0,"blockType":"text"}}}"#,
        r#"{"time":3,"type":"turn/end","seq":2,"data":{"turn":1,"reason":{"kind":"completed"}}}"#,
        r#"{"type":"turn/start","seq":3,"seq":4,"time":17,"data":{"turn":1}}"#,
        r#"{"type":"t\u0075rn/start","seq":3,"time":17,"data":{"turn":1}}"#,
        r#"{"typ\u0065":"turn/start","seq":3,"time":17,"data":{"turn":1}}"#,
        r#"{"type":"turn/start","seq":3,"time":17,"data":{"turn":1},"bogus":1}"#,
        r#"{"type":"turn/start","seq":-1,"time":17,"data":{}}"#,
        r#"{"type":"turn/start","seq":1,"time":1.5,"data":{}}"#,
        r#"{"type":"turn/start","seq":1,"time":1}"#,
        r#"{"type":"","seq":1,"time":1,"data":{}}"#,
        r#"{"type":"x","seq":1,"time":1,"data":{},"ignorable":false}"#,
        r#"{"type":"x","seq":1,"time":1,"data":{},"surfaceOp":"prepend"}"#,
        r#"{"type":"x","seq":1,"time":1,"data":{},"sourceEventSeqs":[1.5]}"#,
        r#"{"type":"text-chunks","seq":1,"time":1,"data":{}}"#,
        r#"[1,2]"#,
        r#"{"type":"turn/start","seq":3,"time":17,"data":{"turn":1}"#,
    ];
    for line in lines {
        let (a, b) = (fast(line, 7), generic(line, 7));
        assert_eq!(a, b, "{line}");
        if let Ok((record, format)) = a {
            // Whatever was accepted writes back as the generic decoder's record would.
            let (generic_record, _) = b.unwrap();
            assert_eq!(
                reserialize(&record, format),
                reserialize(&generic_record, format),
                "{line}"
            );
        }
    }
}

#[test]
fn stream_deltas_are_held_compactly_and_read_like_json() {
    let value = json!({"turn": 2, "step": 1, "chunk": {"type": "tool-call-delta", "index": 1, "id": "c1", "name": "bash", "argumentsDelta": "{\"a\""}});
    let data = EventData::new(value.clone());
    let delta = data.delta().expect("compact");
    assert_eq!(
        (delta.kind, delta.turn, delta.step, delta.index),
        (RowKind::ToolCall, 2, 1, 1)
    );
    assert_eq!(
        (delta.part, delta.call_id, delta.call_name),
        ("{\"a\"", Some("c1"), Some("bash"))
    );
    assert_eq!(delta.chunk_type(), "tool-call-delta");
    assert_eq!(data, value);
    assert_eq!(data.to_value(), value);
    assert_eq!(data["chunk"]["id"], "c1", "reads through Deref");
    let mut text = String::new();
    data.write_json(&mut text);
    assert_eq!(text, dsh_kernel::json::to_string(&value));
    assert_eq!(format!("{data:?}"), format!("{value:?}"));

    // Any other shape stays a plain value, even when close.
    for v in [
        json!({"step": 1, "turn": 2, "chunk": {"type": "text-delta", "index": 0, "text": "x"}}),
        json!({"turn": 2, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "x", "extra": 1}}),
        json!({"turn": 2.5, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "x"}}),
        json!({"turn": 2, "step": 1, "chunk": {"type": "block-start", "index": 0, "blockType": "text"}}),
    ] {
        let d = EventData::new(v.clone());
        assert!(d.delta().is_none(), "{v}");
        assert_eq!(d, v);
    }

    // An owned copy may be changed; the delta becomes a plain value.
    let mut copy = data.clone();
    copy["chunk"]["id"] = json!("c2");
    assert!(copy.delta().is_none());
    assert_eq!(copy["chunk"]["id"], "c2");
    assert_eq!(data["chunk"]["id"], "c1");
}

#[test]
fn event_types_are_interned_and_compare_like_strings() {
    let known = EventType::from("turn/start");
    assert!(known.is_known());
    assert_eq!(known, types::TURN_START);
    assert_eq!(known.as_str(), "turn/start");
    assert_eq!(format!("{known} {known:?}"), "turn/start \"turn/start\"");
    let other = EventType::from("plugin/thing".to_string());
    assert!(!other.is_known());
    assert_eq!(String::from(other.clone()), "plugin/thing");
    assert_eq!(serde_json::to_value(&other).unwrap(), json!("plugin/thing"));
    assert!(
        std::mem::size_of::<Event>() <= 128,
        "Event grew to {} bytes",
        std::mem::size_of::<Event>()
    );
}

fn log_text(lines: &[&str]) -> String {
    let mut text = String::from(
        "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n",
    );
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    text
}

#[test]
fn stored_negative_zero_is_still_refused_on_restore() {
    for number in ["-0", "-0.0", "-1e-400"] {
        let line = format!(
            r#"{{"type":"plugin/x","seq":0,"time":1,"data":{{"n":{number}}},"ignorable":true}}"#
        );
        let parsed = parse_log(&log_text(&[&line])).unwrap();
        let err = Session::with_seed(parsed.header, parsed.events, 0).unwrap_err();
        assert!(err.0.contains("non-JSON-serializable"), "{number}: {err}");
    }
    // A minus in text (ids, dates) is no number.
    let line =
        r#"{"type":"plugin/x","seq":0,"time":1,"data":{"id":"a-0b","n":-3},"ignorable":true}"#;
    let parsed = parse_log(&log_text(&[line])).unwrap();
    assert!(Session::with_seed(parsed.header, parsed.events, 0).is_ok());
}

#[test]
fn packed_and_unpacked_deltas_load_compact_and_repack_identically() {
    let lines = [
        r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#,
        r#"{"type":"step/start","seq":1,"time":1,"data":{"turn":1,"step":1}}"#,
        r#"{"type":"text-chunks","seq0":2,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[1,0],"texts":["a","b","c"]}}"#,
        r#"{"type":"assistant/chunk","seq":5,"time":7,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":1,"text":"d"}}}"#,
    ];
    let text = log_text(&lines);
    let parsed = parse_log(&text).unwrap();
    let deltas: Vec<_> = parsed
        .events
        .iter()
        .filter_map(|e| e.data.delta().map(|d| (e.seq, e.time, d.part.to_string())))
        .collect();
    assert_eq!(
        deltas,
        [
            (2, 5, "a".into()),
            (3, 6, "b".into()),
            (4, 6, "c".into()),
            (5, 7, "d".into())
        ]
    );
    let mut again = String::new();
    for r in pack(&parsed.events) {
        write_record(&mut again, &r, RecordFormat::Full);
        again.push('\n');
    }
    assert_eq!(again, text[text.find('\n').unwrap() + 1..]);
    let session = Session::with_seed(parsed.header, parsed.events, 9).unwrap();
    assert_eq!(session.open_step(), Some(1));
}

fn arb_line() -> impl Strategy<Value = String> {
    let text = "[a-z\"\\\\é\n\u{1}]{0,3}";
    let num = prop_oneof![
        Just("1".to_string()),
        Just("0".to_string()),
        Just("-2".to_string()),
        Just("1.5".to_string()),
        Just("9007199254740993".to_string())
    ];
    let parts =
        proptest::collection::vec(text.prop_map(|t| serde_json::to_string(&t).unwrap()), 0..4);
    let dts = proptest::collection::vec(num.clone(), 0..4);
    let kind = prop_oneof![
        Just("text-chunks"),
        Just("reasoning-chunks"),
        Just("tool-call-chunks"),
        Just("assistant/chunk"),
        Just("turn/start")
    ];
    (kind, num.clone(), num, dts, parts, any::<bool>(), any::<bool>()).prop_map(|(kind, turn, seq, dt, parts, name, projected)| {
        let parts = parts.join(",");
        let dt = dt.join(",");
        let envelope = if projected { String::new() } else { format!(",\"seq0\":{seq},\"time0\":{seq}") };
        match kind {
            "tool-call-chunks" => {
                let name = if name { ",\"name\":\"n\"" } else { "" };
                format!("{{\"type\":\"{kind}\"{envelope},\"data\":{{\"turn\":{turn},\"step\":1,\"index\":0,\"dt\":[{dt}],\"id\":\"c\"{name},\"args\":[{parts}]}}}}")
            }
            "assistant/chunk" | "turn/start" => {
                let envelope = if projected { String::new() } else { format!(",\"seq\":{seq},\"time\":{seq}") };
                format!("{{\"type\":\"{kind}\"{envelope},\"data\":{{\"turn\":{turn},\"step\":1,\"chunk\":{{\"type\":\"text-delta\",\"index\":0,\"text\":{}}}}}}}", if parts.is_empty() { "\"\"" } else { parts.split(',').next().unwrap_or("\"\"") })
            }
            _ => format!("{{\"type\":\"{kind}\"{envelope},\"data\":{{\"turn\":{turn},\"step\":1,\"index\":0,\"dt\":[{dt}],\"texts\":[{parts}]}}}}"),
        }
    })
}

proptest! {
    #[test]
    fn decode_line_matches_generic_decoding(line in arb_line(), next in 0u64..5) {
        let (a, b) = (fast(&line, next), generic(&line, next));
        prop_assert_eq!(&a, &b, "{}", line);
        if let (Ok((ra, fa)), Ok((rb, _))) = (a, b) {
            prop_assert_eq!(reserialize(&ra, fa), reserialize(&rb, fa));
        }
    }
}

#[test]
fn row_members_share_one_run() {
    let line = r#"{"type":"text-chunks","seq0":0,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[0,0],"texts":["a","b","c"]}}"#;
    let (Record::Row(row), _) = decode_line(line, 0).unwrap() else {
        panic!("a row")
    };
    let mut events = Vec::new();
    row.expand_into(&mut events);
    // Repacking members of one run reuses it: the record is equal and the text is shared.
    let repacked = pack(&events);
    assert_eq!(repacked, [Record::Row(row)]);
    let parts: Vec<&str> = events
        .iter()
        .map(|e: &Arc<Event>| e.data.delta().unwrap().part)
        .collect();
    assert_eq!(parts, ["a", "b", "c"]);
}
