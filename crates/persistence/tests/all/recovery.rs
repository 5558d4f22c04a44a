//! Crash recovery: a log cut at any byte (after its first durable batch) reopens with
//! every fully written event, and an open turn is closed `interrupted` with synthetic tool
//! results — durably. Damage inside committed history is refused with the file and line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_persistence::{ChunkPacking, Compression, InflateLimits, PersistenceError, SessionFiles};
use dsh_session::{
    Event, NOT_STARTED_TEXT, OUTCOME_UNKNOWN_TEXT, SessionHeader, decode_record, encode_batch,
    header_line, interrupted_turn_closers, types,
};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde_json::{Value, json};

use common::{batches, header, session_events};

/// A written log plus, for each physical unit (a line or a frame), its end offset and the
/// number of events it completes.
struct Written {
    _dir: tempfile::TempDir,
    files: SessionFiles,
    header: SessionHeader,
    events: Vec<Arc<Event>>,
    bytes: Vec<u8>,
    /// (end offset, events fully present once the file reaches it)
    units: Vec<(usize, usize)>,
    /// End of the first durable write (header + first batch): our own crashes cannot cut
    /// before it, but a power loss or a copy can.
    first_write_end: usize,
    /// End of the header line or header frame.
    header_end: usize,
}

fn write_log(compression: Compression, packing: ChunkPacking) -> Written {
    let dir = tempfile::tempdir().unwrap();
    let files = SessionFiles::new(dir.path().join("root"), compression, packing).with_format(0);
    let h = header("crash-me", Some("/work/proj"));
    let events = session_events(&h, 3, 10, true);
    let parts = batches(&events, 25, 5);
    files.create(&h, &parts[0]).unwrap();
    for batch in &parts[1..] {
        files.append(&h, batch).unwrap();
    }
    let bytes = std::fs::read(files.path_for(&h).unwrap()).unwrap();
    let mut units = Vec::new();
    let mut done = 0;
    match compression {
        Compression::None => {
            let text = std::str::from_utf8(&bytes).unwrap();
            let mut pos = text.find('\n').unwrap() + 1;
            for line in text[pos..].split_inclusive('\n') {
                pos += line.len();
                let record =
                    decode_record(serde_json::from_str(line).unwrap(), done as u64).unwrap();
                done += record.event_count();
                units.push((pos, done));
            }
        }
        Compression::Zstd => {
            let mut pos = zstd::zstd_safe::find_frame_compressed_size(&bytes).unwrap();
            for batch in &parts {
                pos += zstd::zstd_safe::find_frame_compressed_size(&bytes[pos..]).unwrap();
                done += batch.len();
                units.push((pos, done));
            }
        }
    }
    assert_eq!(done, events.len());
    let first_write_end = match compression {
        Compression::None => {
            header_line(&h).len() + encode_batch(&parts[0], packing == ChunkPacking::Packed).len()
        }
        Compression::Zstd => units[0].0,
    };
    let header_end = match compression {
        Compression::None => header_line(&h).len(),
        Compression::Zstd => zstd::zstd_safe::find_frame_compressed_size(&bytes).unwrap(),
    };
    Written {
        _dir: dir,
        files,
        header: h,
        events,
        bytes,
        units,
        first_write_end,
        header_end,
    }
}

impl Written {
    /// Events certainly complete in a file cut at `cut`.
    fn complete_at(&self, cut: usize) -> usize {
        self.units
            .iter()
            .take_while(|(end, _)| *end <= cut)
            .last()
            .map_or(0, |u| u.1)
    }

    /// Events possibly present (their unit started before the cut).
    fn started_at(&self, cut: usize) -> usize {
        self.units
            .iter()
            .find(|(end, _)| *end >= cut)
            .map_or(self.events.len(), |u| u.1)
    }

    /// A fresh root holding this log cut at `cut`, followed by `junk`.
    fn damaged_copy(&self, cut: usize, junk: &[u8]) -> (tempfile::TempDir, SessionFiles, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let files = SessionFiles::new(dir.path(), self.files.compression(), self.files.packing())
            .with_format(0);
        let path = files.path_for(&self.header).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut bytes = self.bytes[..cut].to_vec();
        bytes.extend_from_slice(junk);
        std::fs::write(&path, bytes).unwrap();
        (dir, files, path)
    }
}

fn closers_of(prefix: &[Arc<Event>]) -> Vec<Arc<Event>> {
    interrupted_turn_closers(prefix)
        .into_iter()
        .map(Arc::new)
        .collect()
}

/// The stored form of events, one line each. Compared instead of `Event` values because
/// a repair closer without sources remembers its in-memory key order, which is not
/// observable once written.
fn stored_form(events: &[Arc<Event>]) -> Vec<String> {
    encode_batch(events, false)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The largest `k` such that `loaded` is `original[..k]` followed by its repair closers.
fn kept_prefix(loaded: &[Arc<Event>], original: &[Arc<Event>]) -> Option<usize> {
    let got = stored_form(loaded);
    (0..=original.len().min(loaded.len())).rev().find(|&k| {
        let mut want = original[..k].to_vec();
        want.extend(closers_of(&original[..k]));
        stored_form(&want) == got
    })
}

/// Reopens a cut copy and checks the recovery contract.
fn check_cut(w: &Written, cut: usize, junk: &[u8]) {
    let (_dir, files, _path) = w.damaged_copy(cut, junk);
    let inspected = files
        .inspect("crash-me")
        .unwrap_or_else(|e| panic!("cut {cut}: {e}"));
    let loaded = files
        .load("crash-me")
        .unwrap_or_else(|e| panic!("cut {cut}: {e}"));
    assert_eq!(
        stored_form(&inspected.events),
        stored_form(&loaded.events),
        "inspect repairs the same way in memory"
    );

    let kept = kept_prefix(&loaded.events, &w.events).unwrap_or_else(|| {
        panic!("cut {cut}: the loaded log is not a prefix of the written one plus closers")
    });
    let complete = w.complete_at(cut);
    assert!(
        kept >= complete,
        "cut {cut}: kept {kept} < complete {complete}"
    );
    assert!(
        kept <= w.started_at(cut),
        "cut {cut}: kept {kept} events that were not written"
    );
    if w.files.compression() == Compression::None {
        assert_eq!(
            kept, complete,
            "cut {cut}: plain logs keep exactly the complete lines"
        );
    }
    assert_eq!(loaded.events[..kept], w.events[..kept], "cut {cut}");
    assert!(
        interrupted_turn_closers(&loaded.events).is_empty(),
        "every turn is closed"
    );
    assert_eq!(loaded.stored_len, loaded.events.len() as u64);

    // The repair is durable: the file now reads back clean, with the same events.
    let again = files.load("crash-me").unwrap();
    assert_eq!(again.repair, None, "cut {cut}");
    assert_eq!(again.events, loaded.events);
    assert!(files.read_raw("crash-me").unwrap().ends_with('\n'));
}

#[test]
fn the_open_turn_is_closed_with_synthetic_tool_results() {
    for compression in [Compression::None, Compression::Zstd] {
        let w = write_log(compression, ChunkPacking::Packed);
        let (_dir, files, path) = w.damaged_copy(w.bytes.len(), b"");
        let loaded = files.load("crash-me").unwrap();
        let repair = loaded.repair.clone().expect("a repair");
        assert_eq!(
            (repair.truncated_to, repair.recovered, repair.closers),
            (None, 0, 4)
        );
        let n = w.events.len();
        assert_eq!(loaded.events[..n], w.events[..]);
        let tail: Vec<Value> = loaded.events[n..]
            .iter()
            .map(|e| {
                json!({"type": e.event_type, "seq": e.seq, "step": e.data.get("step"),
                    "error": e.data.get("error"), "sources": e.source_event_seqs,
                    "text": e.data.pointer("/message/content/0/content/0/text"),
                    "reason": e.data.get("reason")})
            })
            .collect();
        let call_seq = w
            .events
            .iter()
            .rev()
            .find(|e| e.is(types::TOOL_CALL))
            .unwrap()
            .seq;
        let n = n as u64;
        assert_eq!(
            tail,
            vec![
                json!({"type": "tool/result", "seq": n, "step": 1, "sources": [call_seq], "reason": null,
                    "error": {"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"}, "text": OUTCOME_UNKNOWN_TEXT}),
                json!({"type": "tool/result", "seq": n + 1, "step": 1, "sources": null, "reason": null,
                    "error": {"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"}, "text": NOT_STARTED_TEXT}),
                json!({"type": "step/end", "seq": n + 2, "step": 1, "sources": null, "error": null, "text": null, "reason": null}),
                json!({"type": "turn/end", "seq": n + 3, "step": null, "sources": null, "error": null, "text": null,
                    "reason": {"kind": "interrupted"}}),
            ]
        );
        // Durable: the closers are in the file as one more batch.
        let raw = files.read_raw_file(&path).unwrap();
        assert!(
            raw.trim_end()
                .ends_with("\"reason\":{\"kind\":\"interrupted\"}}}"),
            "{raw}"
        );
        assert_eq!(files.load("crash-me").unwrap().repair, None);
    }
}

#[test]
fn every_batch_boundary_reopens() {
    for compression in [Compression::None, Compression::Zstd] {
        let w = write_log(compression, ChunkPacking::Packed);
        check_cut(&w, w.header_end, b"");
        for cut in (w.header_end..w.first_write_end).step_by(29) {
            check_cut(&w, cut, b"");
        }
        for &(end, _) in &w.units {
            if end >= w.first_write_end {
                check_cut(&w, end, b"");
                if end + 1 < w.bytes.len() {
                    check_cut(&w, end + 1, b"");
                }
            }
        }
    }
}

fn cut_strategy() -> impl Strategy<Value = (bool, f64, bool)> {
    (any::<bool>(), 0.0f64..=1.0, any::<bool>())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_cut_reopens_with_every_complete_event((zstd, at, junk) in cut_strategy()) {
        let compression = if zstd { Compression::Zstd } else { Compression::None };
        let w = cached(compression);
        let cut = w.header_end + ((w.bytes.len() - w.header_end) as f64 * at) as usize;
        // A torn write may leave garbage without a newline after the cut (plain) — it is cut.
        let junk: &[u8] = if junk && compression == Compression::None { b"{\"type\":\"turn/e\xC3" } else { b"" };
        check_cut(w, cut, junk);
    }

    /// A power loss keeps the file's new length but not its last data: the tail reads as
    /// zeros. Every complete event before the zeroed region survives.
    #[test]
    fn a_zero_filled_tail_is_cut((zstd, at, _j) in cut_strategy(), zeros in 1usize..5000) {
        let compression = if zstd { Compression::Zstd } else { Compression::None };
        let w = cached(compression);
        let cut = w.header_end + ((w.bytes.len() - w.header_end) as f64 * at) as usize;
        check_cut(w, cut, &vec![0u8; zeros]);
    }
}

fn cached(compression: Compression) -> &'static Written {
    static PLAIN: std::sync::OnceLock<Written> = std::sync::OnceLock::new();
    static ZSTD: std::sync::OnceLock<Written> = std::sync::OnceLock::new();
    match compression {
        Compression::None => {
            PLAIN.get_or_init(|| write_log(Compression::None, ChunkPacking::Packed))
        }
        Compression::Zstd => {
            ZSTD.get_or_init(|| write_log(Compression::Zstd, ChunkPacking::Packed))
        }
    }
}

#[test]
fn a_torn_zstd_frame_salvages_its_whole_records() {
    // One big last batch so the torn frame holds several complete blocks.
    let dir = tempfile::tempdir().unwrap();
    let files =
        SessionFiles::new(dir.path(), Compression::Zstd, ChunkPacking::Unpacked).with_format(0);
    let h = header("big", None);
    let events = common::session_of_size(&h, 6000, 200);
    let split = events.iter().position(|e| e.is(types::TURN_END)).unwrap() + 1;
    files.create(&h, &events[..split]).unwrap();
    files.append(&h, &events[split..]).unwrap();
    let path = files.path_for(&h).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 20]).unwrap();

    let loaded = files.load("big").unwrap();
    let repair = loaded.repair.clone().unwrap();
    assert!(repair.recovered > 0, "{repair:?}");
    assert!(repair.truncated_to.is_some());
    let kept = split + repair.recovered;
    assert_eq!(loaded.events[..kept], events[..kept]);
    let mut want = events[..kept].to_vec();
    want.extend(closers_of(&events[..kept]));
    assert_eq!(stored_form(&loaded.events), stored_form(&want));
    assert_eq!(files.load("big").unwrap().events, loaded.events);
}

// ---------------------------------------------------------------- refusals

fn plain_log(dir: &Path, h: &SessionHeader, lines: &[String]) -> (SessionFiles, PathBuf) {
    let files = SessionFiles::new(dir, Compression::None, ChunkPacking::Packed).with_format(0);
    let path = files.path_for(h).unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut text = String::new();
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    (files, path)
}

fn lines_of(h: &SessionHeader, events: &[Arc<Event>]) -> Vec<String> {
    let mut out = vec![header_line(h).trim_end().to_string()];
    out.extend(encode_batch(events, false).lines().map(str::to_owned));
    out
}

fn expect_err(files: &SessionFiles, id: &str) -> PersistenceError {
    let before = std::fs::read(files.find(id).unwrap().unwrap()).unwrap();
    let err = files.load(id).expect_err("load must refuse");
    let after = std::fs::read(files.find(id).unwrap().unwrap()).unwrap();
    assert_eq!(before, after, "a refused log is left untouched");
    err
}

#[test]
fn damage_before_the_last_turn_end_is_refused_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let h = header("s", Some("/p"));
    let events = session_events(&h, 2, 4, false);
    let mut lines = lines_of(&h, &events);
    lines.insert(5, "this is not json".into());
    let (files, path) = plain_log(dir.path(), &h, &lines);
    let err = expect_err(&files, "s");
    assert!(err.is_corrupt(), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "corrupt session log \"{}\": unparsable committed event at line 5",
            path.display()
        )
    );

    // Invalid UTF-8 is damage of its line too.
    let dir = tempfile::tempdir().unwrap();
    let mut lines = lines_of(&h, &events);
    lines[3] = lines[3].replace("user", "us\u{FFFD}er");
    let (files, path) = plain_log(dir.path(), &h, &lines);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .windows(3)
        .position(|w| w == "\u{FFFD}".as_bytes())
        .unwrap();
    bytes[at] = 0xFF;
    std::fs::write(&path, &bytes).unwrap();
    let err = expect_err(&files, "s");
    assert!(
        err.to_string()
            .ends_with("unparsable committed event at line 3"),
        "{err}"
    );

    // A seq gap before a turn/end.
    let dir = tempfile::tempdir().unwrap();
    let mut lines = lines_of(&h, &events);
    lines.remove(4);
    let (files, _) = plain_log(dir.path(), &h, &lines);
    let err = expect_err(&files, "s");
    assert!(
        err.to_string()
            .contains("seq gap in committed region at line 4 (expected 3, got 4)"),
        "{err}"
    );
}

#[test]
fn damage_after_the_last_turn_end_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let h = header("s", Some("/p"));
    let events = session_events(&h, 2, 4, true);
    let last_end = events.iter().rposition(|e| e.is(types::TURN_END)).unwrap();
    let mut lines = lines_of(&h, &events);
    lines.insert(last_end + 4, "garbage".into());
    let (files, _) = plain_log(dir.path(), &h, &lines);
    let loaded = files.load("s").unwrap();
    let kept = last_end + 3;
    let repair = loaded.repair.unwrap();
    assert_eq!(
        repair.tail_issue.as_deref(),
        Some(format!("unparsable committed event at line {}", kept + 1).as_str())
    );
    let mut want = events[..kept].to_vec();
    want.extend(closers_of(&events[..kept]));
    assert_eq!(stored_form(&loaded.events), stored_form(&want));
}

#[test]
fn foreign_versions_and_unknown_types_are_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let h = header("s", Some("/p"));
    let events = session_events(&h, 1, 4, false);
    let mut lines = lines_of(&h, &events);
    lines[0] = lines[0].replace("\"version\":0", "\"version\":3");
    let (files, _) = plain_log(dir.path(), &h, &lines);
    let err = expect_err(&files, "s");
    assert!(err.is_unsupported(), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("uses log format v3") && msg.contains("intermediate format"),
        "{msg}"
    );
    lines[0] = lines[0].replace("\"version\":3", "\"version\":5");
    let (files, path) = plain_log(dir.path(), &h, &lines);
    let err = expect_err(&files, "s");
    assert!(err.is_unsupported(), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("uses log format v5") && msg.contains("a newer harness wrote it"),
        "{msg}"
    );
    assert!(
        msg.ends_with(&format!("(raw log: {})", path.display())),
        "{msg}"
    );

    let dir = tempfile::tempdir().unwrap();
    let mut lines = lines_of(&h, &events);
    let n = events.len();
    lines.push(format!(
        "{{\"type\":\"future/thing\",\"seq\":{n},\"time\":1,\"data\":{{}}}}"
    ));
    let (files, path) = plain_log(dir.path(), &h, &lines);
    let err = expect_err(&files, "s");
    assert!(err.is_unsupported(), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("\"future/thing\"") && msg.contains(&path.display().to_string()),
        "{msg}"
    );

    // The same event marked ignorable loads.
    let dir = tempfile::tempdir().unwrap();
    let mut lines = lines_of(&h, &events);
    lines.push(format!(
        "{{\"type\":\"future/thing\",\"seq\":{n},\"time\":1,\"data\":{{}},\"ignorable\":true}}"
    ));
    let (files, _) = plain_log(dir.path(), &h, &lines);
    assert_eq!(files.load("s").unwrap().events.len(), n + 1);
}

#[test]
fn non_session_files_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let files =
        SessionFiles::new(dir.path(), Compression::None, ChunkPacking::Packed).with_format(0);
    let cases: [(&str, &[u8], &str); 5] = [
        (
            "a.jsonl",
            b"{\"hello\":1}\n",
            "first line is not a session header",
        ),
        ("b.jsonl", b"", "empty or header-less session log"),
        (
            "c.jsonl",
            b"\x00\x01binary\xFF\n",
            "header line is not valid JSON",
        ),
        (
            "d.jsonl.zstd",
            b"PK\x03\x04zip",
            "invalid Zstandard frame magic at byte 0",
        ),
        ("e.txt", b"plain words\n", "header line is not valid JSON"),
    ];
    for (name, bytes, want) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let err = files.inspect_file(&path).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("corrupt session log \"{}\": {want}", path.display())
        );
    }
}

#[test]
fn a_damaged_complete_zstd_frame_is_refused() {
    let w = write_log(Compression::Zstd, ChunkPacking::Packed);
    let mut bytes = w.bytes.clone();
    // Flip a byte in the middle of the second batch's frame (a complete frame).
    let (start, end) = (w.units[0].0, w.units[1].0);
    bytes[(start + end) / 2] ^= 0x55;
    let (_dir, files, path) = w.damaged_copy(0, &bytes);
    let err = expect_err(&files, "crash-me");
    assert!(err.is_corrupt(), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("corrupt session log \"{}\": ", path.display())),
        "{err}"
    );
}

#[test]
fn a_damaged_block_header_in_a_middle_frame_is_not_taken_for_a_torn_tail() {
    let w = write_log(Compression::Zstd, ChunkPacking::Packed);
    let mut bytes = w.bytes.clone();
    // The second batch frame: magic (4) + descriptor (1) + [window] + [content size].
    let start = w.units[0].0;
    let descriptor = bytes[start + 4];
    let single_segment = descriptor & 0x20 != 0;
    let fcs = match descriptor >> 6 {
        0 => usize::from(single_segment),
        n => 1 << n,
    };
    let block = start + 5 + usize::from(!single_segment) + fcs;
    // Make the first block claim the largest size: the frame now "runs past" the end.
    bytes[block + 2] |= 0xF0;
    let (_dir, files, _) = w.damaged_copy(0, &bytes);
    let err = expect_err(&files, "crash-me");
    assert!(
        err.to_string().contains(&format!(
            "damaged Zstandard frame at byte {start} is followed by a valid frame"
        )),
        "{err}"
    );
}

#[test]
fn a_log_cut_inside_its_header_is_refused_as_headerless() {
    for compression in [Compression::None, Compression::Zstd] {
        let w = write_log(compression, ChunkPacking::Packed);
        for cut in [1, w.header_end / 2, w.header_end - 1] {
            let (_dir, files, path) = w.damaged_copy(cut, b"");
            let err = expect_err(&files, "crash-me").to_string();
            assert!(
                err.starts_with(&format!("corrupt session log \"{}\"", path.display())),
                "{err}"
            );
            assert!(err.contains("header"), "{err}");
        }
    }
}

#[test]
fn a_zero_filled_last_frame_is_cut_keeping_every_earlier_frame() {
    let w = write_log(Compression::Zstd, ChunkPacking::Packed);
    let last_start = w.units[w.units.len() - 2].0;
    let mut bytes = w.bytes.clone();
    for b in &mut bytes[last_start..] {
        *b = 0;
    }
    let (_dir, files, _path) = w.damaged_copy(0, &bytes);
    let loaded = files.load("crash-me").unwrap();
    let kept = kept_prefix(&loaded.events, &w.events).unwrap();
    assert_eq!(kept, w.units[w.units.len() - 2].1);
    assert_eq!(files.load("crash-me").unwrap().repair, None);
}

#[test]
fn a_last_frame_failing_its_checksum_is_torn_not_fatal() {
    let w = write_log(Compression::Zstd, ChunkPacking::Packed);
    let mut bytes = w.bytes.clone();
    let n = bytes.len();
    bytes[n - 1] ^= 0xFF; // the content checksum of the last frame
    let (_dir, files, _path) = w.damaged_copy(0, &bytes);
    let loaded = files.load("crash-me").unwrap();
    let kept = kept_prefix(&loaded.events, &w.events).unwrap();
    assert!(kept >= w.units[w.units.len() - 2].1, "kept {kept}");
    assert!(loaded.repair.unwrap().tail_issue.is_some());
}

#[test]
fn a_decompression_bomb_is_refused_quickly_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let files =
        SessionFiles::new(dir.path(), Compression::Zstd, ChunkPacking::Packed).with_format(0);
    let h = header("bomb", None);
    let path = files.path_for(&h).unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut bytes = zstd::bulk::compress(header_line(&h).as_bytes(), 3).unwrap();
    // 200 MiB of one repeated line compresses to a few kilobytes.
    let line = b"{\"type\":\"session/title\",\"seq\":0,\"time\":0,\"data\":{}}\n";
    let mut encoder = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    for _ in 0..(200 << 20) / line.len() {
        std::io::Write::write_all(&mut encoder, line).unwrap();
    }
    bytes.extend(encoder.finish().unwrap());
    assert!(bytes.len() < 1 << 20, "{}", bytes.len());
    std::fs::write(&path, &bytes).unwrap();
    let err = files.inspect("bomb").unwrap_err().to_string();
    assert!(err.contains("decompression bomb"), "{err}");
    assert!(
        files
            .read_raw("bomb")
            .unwrap_err()
            .to_string()
            .contains("decompression bomb")
    );
    // The header alone still lists.
    assert_eq!(files.list().unwrap().len(), 1);
}

/// A frame of `blocks` RLE blocks of 128 KiB each (4 bytes per block on disk), with no
/// checksum: a few kilobytes that inflate to `blocks` × 128 KiB. Without its last block
/// (`last: false`) it is torn.
fn rle_bomb(blocks: usize, last: bool) -> Vec<u8> {
    // Magic, descriptor (no content size, not single-segment, no checksum), a 128 KiB window.
    let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x38];
    for i in 0..blocks {
        let is_last = last && i + 1 == blocks;
        let header = (128u32 * 1024) << 3 | 1 << 1 | u32::from(is_last);
        frame.extend_from_slice(&header.to_le_bytes()[..3]);
        frame.push(b'a');
    }
    frame
}

/// A compressed log: its header frame, one batch, then `tail`.
fn log_with_tail(dir: &Path, id: &str, tail: &[u8], limits: Option<InflateLimits>) -> SessionFiles {
    let mut files = SessionFiles::new(dir, Compression::Zstd, ChunkPacking::Packed).with_format(0);
    if let Some(limits) = limits {
        files = files.with_inflate_limits(limits);
    }
    let h = header(id, None);
    let events = session_events(&h, 1, 2, false);
    files.create(&h, &events).unwrap();
    files.release(id);
    let path = files.path_for(&h).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(tail);
    std::fs::write(&path, &bytes).unwrap();
    files
}

#[test]
fn a_bomb_frame_behind_damaged_bytes_is_refused_within_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    // 512 MiB from 16 KiB, behind bytes a crash could have left.
    let mut tail = b"garbage after a crash".to_vec();
    tail.extend(rle_bomb(4096, true));
    // Default limits: the log's allowance (64 MiB for a small file) runs out first.
    let files = log_with_tail(dir.path(), "bomb-a", &tail, None);
    for err in [
        files.inspect("bomb-a").unwrap_err(),
        files.load("bomb-a").unwrap_err(),
    ] {
        let text = err.to_string();
        assert!(err.is_corrupt(), "{text}");
        assert!(
            text.contains("looking for a valid frame after it")
                && text.contains("more than 67108864 bytes")
                && text.contains("set DSH_MAX_LOG_BYTES to raise it")
                && text.contains("decompression bomb"),
            "{text}"
        );
    }
    let raw = files.read_raw("bomb-a").unwrap_err().to_string();
    assert!(raw.contains("DSH_MAX_LOG_BYTES"), "{raw}");
    // The file is untouched (nothing recorded is cut) and the header still lists.
    assert_eq!(files.list().unwrap().len(), 1);
    // A smaller per-frame limit is the one named.
    let limits = InflateLimits {
        frame: 1 << 20,
        log: None,
    };
    let files = log_with_tail(dir.path(), "bomb-b", &tail, Some(limits));
    let text = files.inspect("bomb-b").unwrap_err().to_string();
    assert!(
        text.contains("frame at byte")
            && text.contains("more than 1048576 bytes, the limit for one frame")
            && text.contains("set DSH_MAX_LOG_FRAME_BYTES to raise it"),
        "{text}"
    );
}

#[test]
fn a_torn_bomb_frame_is_not_salvaged_past_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    let limits = InflateLimits {
        frame: 1 << 20,
        log: Some(8 << 20),
    };
    let files = log_with_tail(dir.path(), "torn-bomb", &rle_bomb(64, false), Some(limits));
    let path = files.find("torn-bomb").unwrap().unwrap();
    let before = std::fs::read(&path).unwrap();
    let text = files.load("torn-bomb").unwrap_err().to_string();
    assert!(
        text.contains("salvaging the torn Zstandard frame")
            && text.contains("DSH_MAX_LOG_FRAME_BYTES"),
        "{text}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "a refused log is not repaired"
    );
    // Within the limits the same torn frame is salvaged (it holds no whole line) and cut.
    let files = files.with_inflate_limits(InflateLimits {
        frame: 16 << 20,
        log: None,
    });
    let loaded = files.load("torn-bomb").unwrap();
    assert!(loaded.repair.unwrap().truncated_to.is_some());
}

#[test]
fn an_overlong_record_line_is_damage_not_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let h = header("long", None);
    let events = session_events(&h, 1, 2, false);
    let mut lines = lines_of(&h, &events);
    lines.push(format!(
        "{{\"type\":\"x\",\"pad\":\"{}\"}}",
        "a".repeat(dsh_session::MAX_LINE_BYTES)
    ));
    let (files, _path) = plain_log(dir.path(), &h, &lines);
    let loaded = files.inspect("long").unwrap();
    assert!(
        loaded
            .repair
            .unwrap()
            .tail_issue
            .unwrap()
            .contains("longer than"),
    );
    assert_eq!(loaded.events[..events.len()], events[..]);
}
