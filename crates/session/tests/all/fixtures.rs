//! Upstream-written logs (the conformance fixtures in ../shared) load, derive, and
//! re-serialize byte for byte. Skips when ../shared is absent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use dsh_session::{Session, encode_records, header_line, parse_log};

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

#[test]
fn upstream_logs_load_derive_and_roundtrip() {
    let Some(files) = fixture_logs() else {
        dsh_test_support::prereq::skip("../shared/conformance/acp is not present");
        return;
    };
    assert!(
        files.len() > 60,
        "expected the fixture set, found {}",
        files.len()
    );
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let parsed = parse_log(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            parsed.committed_bytes,
            text.len(),
            "{}: whole file committed",
            path.display()
        );
        let again = header_line(&parsed.header) + &encode_records(&parsed.records, parsed.format);
        assert!(
            again == text,
            "{}: re-serialization differs",
            path.display()
        );

        let mut session = Session::new(parsed.header.clone());
        for e in &parsed.events {
            session
                .push_event_checked(e.clone())
                .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        }
        let messages = session.derive_messages();
        let mut ids: Vec<_> = messages.iter().map(|m| m.id.clone()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(
            ids.len(),
            messages.len(),
            "{}: derived message ids are unique",
            path.display()
        );
    }
}

#[test]
#[ignore]
fn debug_one() {
    let path = std::env::var("FIXTURE").unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let parsed = parse_log(&text).unwrap();
    let again = header_line(&parsed.header) + &encode_records(&parsed.records, parsed.format);
    for (a, b) in text.lines().zip(again.lines()) {
        if a != b {
            println!("ORIG {a}\nOURS {b}");
        }
    }
}
