//! Format v4: every upstream v0 log (the conformance fixtures in ../shared, skipped when
//! absent) encodes to v4 and decodes back to the same model-visible history; decoding a v4
//! log and re-encoding it reproduces its rows; bad v4 input gets a one-line error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use dsh_session::v4::{V4Encoder, header_line_v4, parse_log_v4};
use dsh_session::{Event, Session, SessionHeader, StorageError, parse_log};
use pretty_assertions::assert_eq;
use serde_json::Value;

fn fixture_logs() -> Option<Vec<PathBuf>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/acp");
    let dirs = std::fs::read_dir(&root).ok()?;
    let mut out = Vec::new();
    for dir in dirs.flatten() {
        for f in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = f.file_name().to_string_lossy().to_string();
            if name.starts_with("session") && name.ends_with(".jsonl") {
                out.push(f.path());
            }
        }
    }
    out.sort();
    Some(out)
}

fn derived(header: &SessionHeader, events: &[Arc<Event>]) -> Vec<Value> {
    let mut session = Session::new(header.clone());
    for e in events {
        session.push_event_checked(e.clone()).unwrap();
    }
    session
        .derive_messages()
        .iter()
        .map(|m| m.to_value())
        .collect()
}

/// v0 events → v4 text (header + rows).
fn encode(header: &SessionHeader, events: &[Arc<Event>]) -> String {
    let mut text = header_line_v4(header);
    let mut encoder = V4Encoder::new(&header.id, header.seed_length);
    // Several batches, as a live writer would produce them.
    for batch in events.chunks(7) {
        encoder.encode(batch, &mut text).unwrap();
    }
    text
}

#[test]
fn upstream_v0_logs_survive_v4_with_the_same_history() {
    let Some(files) = fixture_logs() else {
        dsh_test_support::prereq::skip("../shared/conformance/acp is not present");
        return;
    };
    let mut checked = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut parsed = parse_log(&text).unwrap();
        // Fixtures are projected (no times, placeholder cwd): give them a real cwd.
        if parsed
            .header
            .cwd
            .as_deref()
            .is_some_and(|c| !c.starts_with('/'))
        {
            parsed.header.cwd = Some("/work/x".into());
        }
        let want = derived(&parsed.header, &parsed.events);
        let v4 = encode(&parsed.header, &parsed.events);
        let (back, _) = parse_log_v4(&v4).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(back.committed_bytes, v4.len(), "{}", path.display());
        assert_eq!(back.tail_issue, None, "{}", path.display());
        assert_eq!(
            back.header.seed_length,
            parsed.header.seed_length,
            "{}",
            path.display()
        );
        let got = derived(&back.header, &back.events);
        assert_eq!(
            got,
            want,
            "{}: model-visible history differs",
            path.display()
        );
        // Every in-memory event comes back (chunks included), in order.
        let types = |es: &[Arc<Event>]| {
            es.iter()
                .filter(|e| !e.is("system/message"))
                .map(|e| e.event_type.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            types(&back.events),
            types(&parsed.events),
            "{}",
            path.display()
        );
        // Re-encoding what was decoded reproduces the same rows (one batch each time: the
        // rows of the first step's system prompt depend on where a flush falls).
        let whole = |header: &SessionHeader, events: &[Arc<Event>]| {
            let mut text = header_line_v4(header);
            let mut encoder = V4Encoder::new(&header.id, header.seed_length);
            encoder.encode(events, &mut text).unwrap();
            text
        };
        let once = whole(&parsed.header, &parsed.events);
        let (decoded, _) = parse_log_v4(&once).unwrap();
        let again = whole(&decoded.header, &decoded.events);
        assert_eq!(again, once, "{}: v4 → memory → v4 differs", path.display());
        checked += 1;
    }
    assert!(checked > 60, "{checked}");
}

#[test]
fn bad_v4_input_is_a_one_line_error() {
    let header = r#"{"type":"session","version":4,"id":"s","createdAt":1,"cwd":"/w","isSeeded":false,"delegationDepth":0}"#;
    let row0 = r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#;
    let end =
        r#"{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}}"#;
    let corrupt = |text: &str| match parse_log_v4(text) {
        Err(StorageError::Corrupt(m)) => m,
        other => panic!("expected corruption, got {other:?}"),
    };
    let extra_key = header.replace("\"isSeeded\"", "\"foo\":1,\"isSeeded\"");
    assert_eq!(
        corrupt(&format!("{extra_key}\n{row0}\n")),
        "format v4 header has unexpected field \"foo\""
    );
    assert!(corrupt(&format!("{}\n", header.replace("\"/w\"", "\"w\""))).contains("absolute"));
    let gap = end.replace("\"seq\":1", "\"seq\":2");
    assert_eq!(
        corrupt(&format!("{header}\n{row0}\n{gap}\n")),
        "line 3: seq gap (expected 1, got 2)"
    );
    let bogus_stream = r#"{"type":"assistant/message","seq":1,"time":1,"data":{"turn":1,"step":1,"message":{"role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"},"id":"a"},"stream":[{"type":"bogus-chunks"}]},"surfaceOp":"append"}"#;
    let end2 = end.replace("\"seq\":1", "\"seq\":2");
    assert_eq!(
        corrupt(&format!("{header}\n{row0}\n{bogus_stream}\n{end2}\n")),
        "line 3: stream entry 0 has the unknown type \"bogus-chunks\""
    );
    // A damaged tail after the last turn/end is cut, not fatal.
    let (parsed, _) =
        parse_log_v4(&format!("{header}\n{row0}\n{end}\n{{\"type\":\"x\"\n")).unwrap();
    assert_eq!(parsed.events.len(), 2);
}

/// Real logs of upstream 0.2.1 decode. `.ci/run` writes them with the 0.2.1 executable
/// (`conformance/v4-samples.sh`) and names the folder in DSH_V4_SAMPLES.
#[test]
fn real_v4_logs_decode() {
    let Ok(dir) = std::env::var("DSH_V4_SAMPLES") else {
        dsh_test_support::prereq::skip(
            "DSH_V4_SAMPLES is not set (conformance/v4-samples.sh writes real 0.2.1 logs; .ci/run does)",
        );
        return;
    };
    let mut decoded = 0;
    for f in std::fs::read_dir(dir).unwrap().flatten() {
        let name = f.file_name().to_string_lossy().to_string();
        if !name.ends_with(".session.v4.jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(f.path()).unwrap();
        let (parsed, _) = parse_log_v4(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(parsed.tail_issue, None, "{name}");
        let messages = derived(&parsed.header, &parsed.events);
        assert!(
            !messages.is_empty(),
            "{name}: no model-visible message derived"
        );
        decoded += 1;
    }
    assert!(
        decoded > 0,
        "DSH_V4_SAMPLES names a folder without any *.session.v4.jsonl"
    );
}
