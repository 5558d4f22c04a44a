//! Layout, round trips, listing and lookup of `SessionFiles`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use dsh_persistence::{
    ChunkPacking, Compression, PersistenceError, SessionFiles, encode_segment, layout, project_key,
};
use dsh_session::{Event, encode_batch, header_line};
use pretty_assertions::assert_eq;

use common::{batches, header, session_events};

#[test]
fn id_escaping_matches_upstream_vectors() {
    let cases = [
        ("abc-DEF_1.2", "abc-DEF_1.2"),
        ("a/b", "a~002Fb"),
        ("a\0b", "a~0000b"),
        ("a~b", "a~007Eb"),
        (".", "~002E"),
        ("..", "~002E~002E"),
        ("...", "..."),
        ("\u{1F600}", "~D83D~DE00"),
        ("é", "~00E9"),
        ("a b", "a~0020b"),
    ];
    for (id, want) in cases {
        assert_eq!(encode_segment(id).unwrap(), want, "{id:?}");
    }
    assert!(matches!(
        encode_segment(""),
        Err(PersistenceError::InvalidPath(_))
    ));
}

#[test]
fn project_keys_match_upstream_vectors() {
    let cases = [
        (
            "/Users/qyj/work/deepseek-harness",
            "--Users-qyj-work-deepseek-harness--",
        ),
        ("C:\\work\\agent", "--C-work-agent--"),
        ("/开发/~agent", "--~5F00~53D1-~007Eagent--"),
        ("/", "--root--"),
        ("//a//b", "--a-b--"),
        ("--x", "--x--"),
        ("/a/./b", "--a-.-b--"),
    ];
    for (cwd, want) in cases {
        assert_eq!(project_key(cwd).unwrap(), want, "{cwd:?}");
    }
    // Lossy by design.
    assert_eq!(
        project_key("/a/b-c").unwrap(),
        project_key("/a-b/c").unwrap()
    );
    // The slug is cut to 251 units, which may split an escape.
    let long = format!("/{}", "é".repeat(100));
    let key = project_key(&long).unwrap();
    assert_eq!(key.len(), 255);
    assert!(key.ends_with("~00E9~--"), "{key}");
    assert!(project_key("").is_err());
}

#[test]
fn paths_follow_the_layout() {
    let files =
        SessionFiles::new("/srv/sessions", Compression::Zstd, ChunkPacking::Packed).with_format(0);
    let h = header("a/b", Some("/home/me/proj"));
    assert_eq!(
        files.path_for(&h).unwrap(),
        Path::new("/srv/sessions/--home-me-proj--/a~002Fb/session.jsonl.zstd")
    );
    let plain =
        SessionFiles::new("/srv/sessions", Compression::None, ChunkPacking::Packed).with_format(0);
    assert_eq!(
        plain.path_for(&header("s1", None)).unwrap(),
        Path::new("/srv/sessions/_no-cwd/s1/session.jsonl")
    );
    assert_eq!(
        layout::log_path(Path::new("/r"), Some("/"), "..", 0, Compression::None).unwrap(),
        Path::new("/r/--root--/~002E~002E/session.jsonl")
    );
}

fn write_in_batches(
    files: &SessionFiles,
    h: &dsh_session::SessionHeader,
    events: &[Arc<Event>],
) -> Vec<Vec<Arc<Event>>> {
    let parts = batches(events, 40, 3);
    files.create(h, &parts[0]).unwrap();
    for batch in &parts[1..] {
        files.append(h, batch).unwrap();
    }
    parts
}

#[test]
fn round_trip_in_every_mode() {
    for compression in [Compression::Zstd, Compression::None] {
        for packing in [ChunkPacking::Packed, ChunkPacking::Unpacked] {
            let dir = tempfile::tempdir().unwrap();
            let files = SessionFiles::new(dir.path(), compression, packing).with_format(0);
            let h = header("session-1", Some("/work/proj"));
            let events = session_events(&h, 3, 12, false);
            let parts = write_in_batches(&files, &h, &events);

            let loaded = files.load("session-1").unwrap();
            assert_eq!(loaded.header, h);
            assert_eq!(loaded.events, events, "{compression:?} {packing:?}");
            assert_eq!(loaded.stored_len, events.len() as u64);
            assert_eq!(loaded.repair, None);
            assert_eq!(loaded.path, files.path_for(&h).unwrap());

            // The raw text is exactly the header line plus each batch's encoding.
            let mut want = header_line(&h);
            for batch in &parts {
                want.push_str(&encode_batch(batch, packing == ChunkPacking::Packed));
            }
            assert_eq!(files.read_raw("session-1").unwrap(), want);
            if packing == ChunkPacking::Packed {
                assert!(want.contains("\"type\":\"text-chunks\""));
                assert!(want.contains("\"type\":\"tool-call-chunks\""));
            }

            // Any store can inspect the file by path, whatever its own encoding.
            let other = SessionFiles::new(
                dir.path().join("elsewhere"),
                compression.opposite(),
                packing,
            )
            .with_format(0);
            let inspected = other.inspect_file(&loaded.path).unwrap();
            assert_eq!(inspected.events, events);
            assert_eq!(other.read_raw_file(&loaded.path).unwrap(), want);
        }
    }
}

#[test]
fn zstd_logs_are_one_frame_per_batch() {
    let dir = tempfile::tempdir().unwrap();
    let files =
        SessionFiles::new(dir.path(), Compression::Zstd, ChunkPacking::Packed).with_format(0);
    let h = header("s", None);
    let events = session_events(&h, 2, 8, false);
    let parts = write_in_batches(&files, &h, &events);
    let bytes = std::fs::read(files.path_for(&h).unwrap()).unwrap();
    // Count frames by decoding them one at a time.
    let mut frames = 0;
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let size = zstd::zstd_safe::find_frame_compressed_size(rest).unwrap();
        let mut out = Vec::new();
        zstd::stream::copy_decode(&rest[..size], &mut out).unwrap();
        if frames == 0 {
            assert_eq!(String::from_utf8(out).unwrap(), header_line(&h));
        }
        rest = &rest[size..];
        frames += 1;
    }
    assert_eq!(frames, 1 + parts.len());
}

#[test]
fn creation_is_lazy_private_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let files = SessionFiles::new(&root, Compression::None, ChunkPacking::Packed).with_format(0);
    let h = header("s1", Some("/p"));
    let events = session_events(&h, 1, 4, false);

    let path = files.create(&h, &[]).unwrap();
    assert!(!root.exists(), "nothing is written before the first event");
    assert_eq!(files.list().unwrap(), vec![]);
    assert!(matches!(
        files.load("s1"),
        Err(PersistenceError::NotFound { .. })
    ));

    files.create(&h, &events).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    assert_eq!(mode(path.parent().unwrap().parent().unwrap()), 0o700);
    assert_eq!(mode(&root), 0o700);
    let mut leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    leftovers.sort();
    assert_eq!(
        leftovers,
        vec![
            std::ffi::OsString::from("session.jsonl"),
            std::ffi::OsString::from("session.lock")
        ],
        "temp file removed; the writer lock is held beside the log"
    );

    // The same id cannot be created again, in any project directory.
    let err = files.create(&h, &events).unwrap_err();
    assert!(
        matches!(err, PersistenceError::AlreadyPersisted { .. }),
        "{err}"
    );
    let mut elsewhere = h.clone();
    elsewhere.cwd = Some("/other".into());
    let err = files.create(&elsewhere, &events[..3]).unwrap_err();
    assert!(
        err.to_string().contains("already has a persisted log"),
        "{err}"
    );
    assert_eq!(files.load("s1").unwrap().events, events);
}

#[test]
fn list_reads_headers_and_skips_what_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let files =
        SessionFiles::new(dir.path(), Compression::Zstd, ChunkPacking::Packed).with_format(0);
    let mut parent = header("parent", Some("/proj"));
    parent.created_at = 10;
    let events = session_events(&parent, 1, 4, false);
    files.create(&parent, &events).unwrap();
    let mut child = header("child", Some("/proj"));
    child.created_at = 20;
    child.parent_session = Some("parent".into());
    child.origin = Some("subagent".into());
    child.delegation_depth = 1;
    files.create(&child, &events).unwrap();
    let mut other = header("other", None);
    other.created_at = 5;
    files.create(&other, &events).unwrap();

    // Noise: an empty log, a non-session file, a header naming another id.
    let noise = dir.path().join("--proj--");
    std::fs::create_dir_all(noise.join("empty")).unwrap();
    std::fs::write(noise.join("empty/session.jsonl.zstd"), b"").unwrap();
    std::fs::create_dir_all(noise.join("junk")).unwrap();
    std::fs::write(noise.join("junk/session.jsonl.zstd"), b"not zstd").unwrap();
    std::fs::create_dir_all(noise.join("moved")).unwrap();
    std::fs::copy(
        files.path_for(&parent).unwrap(),
        noise.join("moved/session.jsonl.zstd"),
    )
    .unwrap();

    let listed = files.list().unwrap();
    let ids: Vec<_> = listed.iter().map(|(h, _)| h.id.as_str()).collect();
    assert_eq!(ids, ["other", "parent", "child"]);
    assert_eq!(listed[2].0, child);
    // Children are siblings of their parent in the project directory.
    assert_eq!(
        listed[1].1.parent().unwrap().parent(),
        listed[2].1.parent().unwrap().parent()
    );
    assert_eq!(files.find("child").unwrap(), Some(listed[2].1.clone()));
    assert_eq!(files.find("nobody").unwrap(), None);
    // A header that does not match its location is refused on load.
    std::fs::create_dir_all(noise.join("impostor")).unwrap();
    std::fs::copy(
        files.path_for(&parent).unwrap(),
        noise.join("impostor/session.jsonl.zstd"),
    )
    .unwrap();
    let err = files.load("impostor").unwrap_err();
    assert!(
        err.to_string()
            .contains("does not match header id \"parent\""),
        "{err}"
    );
}

#[test]
fn a_root_holds_one_encoding() {
    let dir = tempfile::tempdir().unwrap();
    let zstd =
        SessionFiles::new(dir.path(), Compression::Zstd, ChunkPacking::Packed).with_format(0);
    let plain =
        SessionFiles::new(dir.path(), Compression::None, ChunkPacking::Packed).with_format(0);
    let h = header("s", None);
    let events = session_events(&h, 1, 4, false);
    zstd.create(&h, &events).unwrap();
    let err = plain.load("s").unwrap_err();
    assert!(
        matches!(err, PersistenceError::EncodingMismatch { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("session.jsonl.zstd"), "{err}");
    assert!(plain.create(&h, &events).is_err());
    assert_eq!(plain.list().unwrap(), vec![]);
}

#[test]
fn duplicate_ids_across_projects_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let files =
        SessionFiles::new(dir.path(), Compression::None, ChunkPacking::Packed).with_format(0);
    let a = header("dup", Some("/a"));
    let events = session_events(&a, 1, 4, false);
    files.create(&a, &events).unwrap();
    let b = header("dup", Some("/b"));
    let b_path = files.path_for(&b).unwrap();
    std::fs::create_dir_all(b_path.parent().unwrap()).unwrap();
    let text = header_line(&b) + &encode_batch(&events, true);
    std::fs::write(&b_path, text).unwrap();
    let err = files.load("dup").unwrap_err();
    assert!(matches!(err, PersistenceError::DuplicateId { .. }), "{err}");
    assert_eq!(files.list().unwrap().len(), 1);
}

/// Upstream-written logs (the conformance fixtures in ../shared, when present) open by
/// path, and their raw text is returned verbatim.
#[test]
fn upstream_fixture_logs_open_by_path() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/acp");
    let Ok(dirs) = std::fs::read_dir(&root) else {
        dsh_test_support::prereq::skip("../shared/conformance/acp is absent");
        return;
    };
    let files = SessionFiles::new("/nonexistent-root", Compression::Zstd, ChunkPacking::Packed)
        .with_format(0);
    let mut opened = 0;
    for dir in dirs.flatten() {
        for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if !(name.starts_with("session") && name.ends_with(".jsonl")) {
                continue;
            }
            let path = f.path();
            let text = std::fs::read_to_string(&path).unwrap();
            let parsed = dsh_session::parse_log(&text).unwrap();
            let loaded = files.inspect_file(&path).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(loaded.header, parsed.header);
            let closers = dsh_session::interrupted_turn_closers(&parsed.events).len();
            assert_eq!(
                loaded.events.len(),
                parsed.events.len() + closers,
                "{}",
                path.display()
            );
            assert_eq!(files.read_raw_file(&path).unwrap(), text);
            opened += 1;
        }
    }
    assert!(opened > 60, "expected the fixture set, opened {opened}");
}
