//! Format v4 on disk: the default for new logs, one zstd frame per flush with the header
//! alone in the first, migration of v0 logs beside themselves, torn tails, and a file
//! whose name and header disagree.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use dsh_persistence::{ChunkPacking, Compression, SessionFiles};
use dsh_session::v4::header_line_v4;
use dsh_session::{Event, Session, SessionHeader};
use pretty_assertions::assert_eq;

use common::{batches, header, session_events};

fn store(root: &std::path::Path, compression: Compression) -> SessionFiles {
    SessionFiles::new(root, compression, ChunkPacking::Packed)
}

fn write_in_batches(files: &SessionFiles, h: &SessionHeader, events: &[Arc<Event>]) -> usize {
    let parts = batches(events, 40, 7);
    files.create(h, &parts[0]).unwrap();
    for batch in &parts[1..] {
        files.append(h, batch).unwrap();
    }
    parts.len()
}

fn messages(h: &SessionHeader, events: &[Arc<Event>]) -> Vec<serde_json::Value> {
    let mut session = Session::new(h.clone());
    for e in events {
        session.push_event_checked(e.clone()).unwrap();
    }
    session
        .derive_messages()
        .iter()
        .map(|m| m.to_value())
        .collect()
}

#[test]
fn new_logs_are_v4_and_round_trip() {
    for compression in [Compression::Zstd, Compression::None] {
        let dir = tempfile::tempdir().unwrap();
        let files = store(dir.path(), compression);
        assert_eq!(files.format(), 4);
        let h = header("s", Some("/work/p"));
        let events = session_events(&h, 4, 10, false);
        write_in_batches(&files, &h, &events);
        let path = files.path_for(&h).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("session.v4.jsonl"), "{name}");

        let loaded = files.inspect("s").unwrap();
        assert_eq!(loaded.header.version, 4);
        assert_eq!(loaded.repair, None);
        assert_eq!(loaded.events, events, "{compression:?}");
        assert_eq!(messages(&h, &loaded.events), messages(&h, &events));
        let raw = files.read_raw("s").unwrap();
        assert!(
            raw.starts_with("{\"type\":\"session\",\"version\":4"),
            "{raw}"
        );
        assert!(
            !raw.contains("\"type\":\"assistant/chunk\""),
            "stream deltas live inside their message"
        );
    }
}

#[test]
fn each_flush_is_one_frame_after_the_header_frame() {
    let dir = tempfile::tempdir().unwrap();
    let files = store(dir.path(), Compression::Zstd);
    let h = header("s", None);
    let events = session_events(&h, 3, 6, false);
    // Whole turns per flush, so no flush ends inside a stream (which would defer it).
    let cut = events
        .iter()
        .position(|e| e.is(dsh_session::types::TURN_END))
        .unwrap()
        + 1;
    files.create(&h, &events[..cut]).unwrap();
    files.append(&h, &events[cut..]).unwrap();
    let bytes = std::fs::read(files.path_for(&h).unwrap()).unwrap();
    let mut frames = Vec::new();
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let size = zstd::zstd_safe::find_frame_compressed_size(rest).unwrap();
        let mut out = Vec::new();
        zstd::stream::copy_decode(&rest[..size], &mut out).unwrap();
        frames.push(String::from_utf8(out).unwrap());
        rest = &rest[size..];
    }
    assert_eq!(frames.len(), 3, "header, first batch, one append");
    let mut stored = h.clone();
    stored.version = 4;
    assert_eq!(frames[0], header_line_v4(&stored));
}

#[test]
fn appending_to_a_v0_log_migrates_it_beside_itself() {
    for compression in [Compression::Zstd, Compression::None] {
        let dir = tempfile::tempdir().unwrap();
        let h = header("old", Some("/w"));
        let events = session_events(&h, 3, 8, false);
        let v0 = store(dir.path(), compression).with_format(0);
        write_in_batches(&v0, &h, &events);
        let v0_path = v0.path_for(&h).unwrap();
        let v0_bytes = std::fs::read(&v0_path).unwrap();
        drop(v0);

        let files = store(dir.path(), compression);
        let loaded = files.load("old").unwrap();
        assert_eq!(loaded.header.version, 4);
        assert!(
            loaded
                .path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("session.v4."),
            "{}",
            loaded.path.display()
        );
        assert_eq!(loaded.events, events);
        let more = session_events(&h, 5, 8, false)[events.len()..].to_vec();
        files.append(&loaded.header, &more).unwrap();
        files.release("old");

        assert_eq!(std::fs::read(&v0_path).unwrap(), v0_bytes, "v0 untouched");
        let listed = files.list().unwrap();
        assert_eq!(listed.len(), 1, "one session, not two: {listed:?}");
        assert_eq!(listed[0].1, loaded.path);
        let reopened = store(dir.path(), compression).inspect("old").unwrap();
        let mut all = events.clone();
        all.extend(more);
        assert_eq!(reopened.events, all);
    }
}

#[test]
fn a_torn_v4_tail_is_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let files = store(dir.path(), Compression::None);
    let h = header("t", None);
    let events = session_events(&h, 3, 6, false);
    write_in_batches(&files, &h, &events);
    let path = files.path_for(&h).unwrap();
    drop(files);
    let clean = std::fs::read(&path).unwrap();
    let mut torn = clean.clone();
    torn.extend_from_slice(b"{\"type\":\"turn/start\",\"seq\":");
    std::fs::write(&path, &torn).unwrap();

    let files = store(dir.path(), Compression::None);
    let loaded = files.load("t").unwrap();
    assert!(loaded.repair.is_some());
    assert_eq!(loaded.events, events);
    assert_eq!(std::fs::read(&path).unwrap(), clean, "the torn line is cut");
}

#[test]
fn name_and_header_must_agree_on_the_version() {
    let dir = tempfile::tempdir().unwrap();
    let files = store(dir.path(), Compression::None);
    let h = header("m", None);
    let events = session_events(&h, 1, 4, false);
    write_in_batches(&files, &h, &events);
    let path = files.path_for(&h).unwrap();
    let renamed = path.with_file_name("session.v7.jsonl");
    std::fs::rename(&path, &renamed).unwrap();
    let err = files.inspect("m").unwrap_err().to_string();
    assert!(
        err.contains("the file name says format v7 but the header says v4")
            && err.contains("session.v7.jsonl"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
