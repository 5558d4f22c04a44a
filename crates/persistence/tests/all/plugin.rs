//! The plugin against the real session store: fresh sessions write lazily, forks are
//! materialized at once as siblings, resumed sessions append after their stored prefix,
//! `session/flush` is the durability barrier, and the every-event mode writes inline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_kernel::{Context, Plugin, PluginConfig};
use dsh_llm::Message;
use dsh_persistence::{
    ChunkPacking, Compression, Durability, JsonlPersistencePlugin, PersistenceConfig,
    PersistenceError, SessionFiles, SessionWriters, WriteTiming,
};
use dsh_session::{
    LiveSession, SessionHeader, SessionSource, SessionStore, SurfaceIntent, system_clock, types,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

struct Harness {
    _dir: tempfile::TempDir,
    ctx: Context,
    store: Arc<SessionStore>,
    files: Arc<SessionFiles>,
}

fn harness(config: Value) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config;
    config["root"] = Value::from(dir.path().join("sessions").display().to_string());
    let root = Context::new_root();
    let ctx = root.child("persistence");
    JsonlPersistencePlugin
        .apply(&ctx, &PluginConfig::new("persistence", "test.yaml", config))
        .unwrap();
    let files = root.require::<SessionFiles>().unwrap();
    Harness {
        _dir: dir,
        ctx: root,
        store: SessionStore::new(system_clock()),
        files,
    }
}

fn run_turn(s: &Arc<LiveSession>, text: &str) {
    let turn = s.read(|x| x.last_turn()) + 1;
    s.append(types::TURN_START, json!({"turn": turn}), None)
        .unwrap();
    s.append(types::STEP_START, json!({"turn": turn, "step": 1}), None)
        .unwrap();
    s.append(
        types::USER_MESSAGE,
        Message::user_text(text).to_value(),
        Some(SurfaceIntent::append()),
    )
    .unwrap();
    let mut chunks = Vec::new();
    for word in ["Hel", "lo", " there", "!"] {
        let chunk = json!({"type": "text-delta", "index": 0, "text": word});
        let event = s
            .append(
                types::ASSISTANT_CHUNK,
                json!({"turn": turn, "step": 1, "chunk": chunk}),
                None,
            )
            .unwrap();
        chunks.push(event.seq);
    }
    let reply = Message::assistant(
        vec![dsh_llm::ContentBlock::text("Hello there!")],
        "p",
        "m",
        None,
    );
    s.append(
        types::ASSISTANT_MESSAGE,
        json!({"turn": turn, "step": 1, "message": reply.to_value()}),
        Some(SurfaceIntent::append_citing(chunks)),
    )
    .unwrap();
    s.append(types::STEP_END, json!({"turn": turn, "step": 1}), None)
        .unwrap();
    s.append(
        types::TURN_END,
        json!({"turn": turn, "reason": {"kind": "completed"}}),
        None,
    )
    .unwrap();
}

fn session_header(id: &str) -> SessionHeader {
    let mut h = SessionHeader::new(id, 1000);
    h.cwd = Some("/work/project".into());
    h
}

#[test]
fn config_defaults_and_validation() {
    let parse = |v: Value| {
        PersistenceConfig::from_plugin_config(&PluginConfig::new("row", "agent.yaml", v))
    };
    // A key the row does not take is refused by name, not ignored.
    let err = parse(json!({"root": "/tmp/s", "someFutureKey": true}))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("someFutureKey") && err.contains("unknown key"),
        "{err}"
    );
    let c = parse(json!({"root": "/tmp/s"})).unwrap();
    assert_eq!(
        c,
        PersistenceConfig {
            root: "/tmp/s".into(),
            compression: Compression::Zstd,
            packing: ChunkPacking::Packed,
            timing: WriteTiming::Batched(std::time::Duration::from_millis(200)),
            durability: Durability::Fsync,
            format_version: 4,
        }
    );
    let c = parse(
        json!({"root": "r", "compression": "none", "packChunks": false, "writeBatchMaxDelayMs": 0, "durability": "os"}),
    )
    .unwrap();
    assert_eq!(
        (c.compression, c.packing, c.timing, c.durability),
        (
            Compression::None,
            ChunkPacking::Unpacked,
            WriteTiming::EveryEvent,
            Durability::Os
        )
    );
    let err = parse(json!({"root": "r", "durability": "sometimes"}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("durability"), "{err}");
    let err = parse(json!({})).unwrap_err().to_string();
    assert!(err.contains("agent.yaml") && err.contains("root"), "{err}");
    let err = parse(json!({"root": "r", "compression": "gzip"}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("compression"), "{err}");
    let err = parse(json!({"root": "r", "writeBatchMaxDelayMs": 2_147_483_648u64}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("writeBatchMaxDelayMs"), "{err}");
    let err = parse(json!({"root": "r", "packChunks": "yes"}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("packChunks"), "{err}");
}

#[tokio::test]
async fn fresh_sessions_write_lazily_and_flush_is_durable() {
    let h = harness(json!({}));
    let live = h
        .store
        .create(&h.ctx, session_header("s1"), SessionSource::Fresh)
        .unwrap();
    let path = h.files.path_for(&live.header()).unwrap();
    assert!(
        !path.exists(),
        "a fresh session writes nothing before its first event"
    );
    live.flush().await.unwrap();
    assert!(!path.exists(), "flushing an empty session writes nothing");

    run_turn(&live, "hi");
    run_turn(&live, "again");
    live.flush().await.unwrap();
    let loaded = h.files.load("s1").unwrap();
    assert_eq!(loaded.events, live.events());
    assert_eq!(
        loaded.header.version, 4,
        "new sessions are written in format v4"
    );
    assert_eq!(
        SessionHeader {
            version: live.header().version,
            ..loaded.header
        },
        live.header()
    );
    assert!(
        h.files
            .read_raw("s1")
            .unwrap()
            .contains("\"type\":\"text-chunks\""),
        "packed by default"
    );

    // Disposal drains what is still queued.
    run_turn(&live, "last");
    let all = live.events();
    h.store.dispose("s1");
    let writers = h.ctx.require::<SessionWriters>().unwrap();
    for _ in 0..200 {
        if writers.get("s1").is_none() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        writers.get("s1").is_none(),
        "the writer retires after its final drain"
    );
    assert_eq!(h.files.load("s1").unwrap().events, all);

    // A late append and flush of the disposed session continue its log.
    run_turn(&live, "late");
    live.flush().await.unwrap();
    assert_eq!(h.files.load("s1").unwrap().events, live.events());
}

#[tokio::test]
async fn forks_are_materialized_at_once_as_siblings() {
    let h = harness(json!({"compression": "none"}));
    let parent = h
        .store
        .create(&h.ctx, session_header("parent"), SessionSource::Fresh)
        .unwrap();
    run_turn(&parent, "hi");
    parent.flush().await.unwrap();
    let child = h.store.fork(&h.ctx, &parent, None, "child".into()).unwrap();
    child.flush().await.unwrap();
    let loaded = h.files.load("child").unwrap();
    assert_eq!(loaded.events, child.events());
    assert_eq!(loaded.events.last().unwrap().event_type, types::END_SEED);
    assert_eq!(loaded.header.parent_session.as_deref(), Some("parent"));
    let parent_path = h.files.find("parent").unwrap().unwrap();
    let child_path = h.files.find("child").unwrap().unwrap();
    assert_eq!(
        parent_path.parent().unwrap().parent(),
        child_path.parent().unwrap().parent()
    );
    assert_eq!(
        h.files.load("parent").unwrap().events,
        parent.events(),
        "the parent's own file is untouched"
    );
}

#[tokio::test]
async fn seeded_sessions_do_not_wait_for_the_window() {
    let h = harness(json!({"writeBatchMaxDelayMs": 3_600_000}));
    let parent = h
        .store
        .create(&h.ctx, session_header("p"), SessionSource::Fresh)
        .unwrap();
    run_turn(&parent, "hi");
    parent.flush().await.unwrap();
    let child = h.store.fork(&h.ctx, &parent, None, "c".into()).unwrap();
    let writers = h.ctx.require::<SessionWriters>().unwrap();
    let writer = writers.get("c").unwrap();
    // Without any flush the seed becomes durable (the window is an hour).
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        writer.wait_durable(child.next_seq()),
    )
    .await
    .unwrap();
    assert_eq!(h.files.load("c").unwrap().events, child.events());
}

#[tokio::test]
async fn resumed_sessions_append_after_their_stored_prefix() {
    let h = harness(json!({}));
    let live = h
        .store
        .create(&h.ctx, session_header("r"), SessionSource::Fresh)
        .unwrap();
    run_turn(&live, "one");
    // Crash mid-turn: an open turn is on disk.
    live.append(types::TURN_START, json!({"turn": 2}), None)
        .unwrap();
    live.append(types::STEP_START, json!({"turn": 2, "step": 1}), None)
        .unwrap();
    live.flush().await.unwrap();
    // While the session is live here, another process cannot take it over.
    let other = SessionFiles::new(h.files.root(), Compression::Zstd, ChunkPacking::Packed);
    let err = other.load("r").unwrap_err();
    assert!(
        matches!(&err, PersistenceError::Locked { holder, .. } if holder.contains(&std::process::id().to_string())),
        "{err}"
    );
    h.store.dispose("r");
    drop(live);
    let h2 = {
        // A new process: a new runtime context and store over the same root.
        let root = Context::new_root();
        let config = json!({"root": h.files.root().display().to_string()});
        JsonlPersistencePlugin
            .apply(&root.child("p"), &PluginConfig::new("p", "t.yaml", config))
            .unwrap();
        (
            root.clone(),
            SessionStore::new(system_clock()),
            root.require::<SessionFiles>().unwrap(),
        )
    };
    let (ctx, store, files) = h2;
    let loaded = files.load("r").unwrap();
    assert_eq!(
        loaded.events.last().unwrap().data["reason"]["kind"],
        "interrupted"
    );
    let resumed = store
        .create(
            &ctx,
            loaded.header.clone(),
            SessionSource::Restored {
                events: loaded.events.clone(),
                stored_len: loaded.stored_len,
            },
        )
        .unwrap();
    run_turn(&resumed, "three");
    resumed.flush().await.unwrap();
    let again = files.load("r").unwrap();
    assert_eq!(again.repair, None);
    assert_eq!(again.events, resumed.events());
    let types_after: Vec<&str> = again.events[loaded.events.len()..]
        .iter()
        .map(|e| e.event_type.as_str())
        .collect();
    assert_eq!(types_after[0], types::END_SEED);
    assert_eq!(types_after[1], types::TURN_START);
    assert_eq!(again.events[loaded.events.len() + 1].turn(), Some(3));
}

#[tokio::test]
async fn a_log_cut_to_its_header_resumes_by_appending() {
    for compression in ["zstd", "none"] {
        let h = harness(json!({"compression": compression}));
        let id = format!("cut-{compression}");
        let live = h
            .store
            .create(&h.ctx, session_header(&id), SessionSource::Fresh)
            .unwrap();
        run_turn(&live, "one");
        live.flush().await.unwrap();
        let path = h.files.path_for(&live.header()).unwrap();
        h.store.dispose(&id);
        drop(live);
        h.files.release(&id);
        // Keep only the header (its line, or its frame: the first write put the header in a
        // frame of its own).
        let bytes = std::fs::read(&path).unwrap();
        let header_len = match compression {
            "none" => bytes.iter().position(|b| *b == b'\n').unwrap() + 1,
            _ => zstd::zstd_safe::find_frame_compressed_size(&bytes).unwrap(),
        };
        std::fs::write(&path, &bytes[..header_len]).unwrap();

        let loaded = h.files.load(&id).unwrap();
        assert_eq!((loaded.stored_len, loaded.events.len()), (0, 0));
        let resumed = h
            .store
            .create(
                &h.ctx,
                loaded.header.clone(),
                SessionSource::Restored {
                    events: loaded.events.clone(),
                    stored_len: loaded.stored_len,
                },
            )
            .unwrap();
        assert!(resumed.is_restored());
        run_turn(&resumed, "two");
        resumed.flush().await.unwrap();
        let again = h.files.inspect(&id).unwrap();
        assert_eq!(again.repair, None);
        assert_eq!(again.events, resumed.events());
        assert_eq!(
            again.events.last().unwrap().event_type.as_str(),
            types::TURN_END
        );
    }
}

#[tokio::test]
async fn every_event_mode_is_visible_before_append_returns() {
    let h = harness(json!({"compression": "none", "writeBatchMaxDelayMs": 0}));
    let live = h
        .store
        .create(&h.ctx, session_header("sync"), SessionSource::Fresh)
        .unwrap();
    live.append(types::TURN_START, json!({"turn": 1}), None)
        .unwrap();
    let path = h.files.path_for(&live.header()).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 2);
    live.append(types::STEP_START, json!({"turn": 1, "step": 1}), None)
        .unwrap();
    live.append(
        types::USER_MESSAGE,
        Message::user_text("x").to_value(),
        Some(SurfaceIntent::append()),
    )
    .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    // v4 records the (still empty) system prompt as a surface message right
    // after the first step opens, so the user message lands at disk seq 3.
    let types: Vec<&str> = text
        .lines()
        .skip(1)
        .map(|l| l.split('"').nth(3).unwrap())
        .collect();
    assert_eq!(
        types,
        ["turn/start", "step/start", "system/message", "user/message"]
    );
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("{\"type\":\"user/message\",\"seq\":3,")
    );
}

#[tokio::test]
async fn sessions_of_scoped_agents_are_persisted_too() {
    let h = harness(json!({}));
    let agent_ctx = h.ctx.create_scope("agent-1");
    let live = h
        .store
        .create(&agent_ctx, session_header("scoped"), SessionSource::Fresh)
        .unwrap();
    run_turn(&live, "hi");
    live.flush().await.unwrap();
    assert_eq!(h.files.load("scoped").unwrap().events, live.events());
}
