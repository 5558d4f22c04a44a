//! Write-behind semantics: one batch per timer window, the window is not pushed back by
//! later events, flush drains to quiescence, and a failed write keeps its events queued.
//! Time is virtual (paused tokio clock); batch counts are read from zstd frame counts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_persistence::{
    ChunkPacking, Compression, SessionFiles, SessionWriter, WriteTiming, WriterStart,
};
use dsh_session::{Event, SessionHeader};
use pretty_assertions::assert_eq;
use tokio::time::Instant;

use common::{header, session_events};

const WINDOW: Duration = Duration::from_millis(200);

fn frame_count(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let mut rest = &bytes[..];
    let mut n = 0;
    while !rest.is_empty() {
        rest = &rest[zstd::zstd_safe::find_frame_compressed_size(rest).unwrap()..];
        n += 1;
    }
    n
}

struct Fixture {
    _dir: tempfile::TempDir,
    files: Arc<SessionFiles>,
    header: SessionHeader,
    events: Vec<Arc<Event>>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let files = Arc::new(
        SessionFiles::new(dir.path(), Compression::Zstd, ChunkPacking::Packed).with_format(0),
    );
    let h = header("w", Some("/p"));
    let events = session_events(&h, 2, 6, false);
    Fixture {
        _dir: dir,
        files,
        header: h,
        events,
    }
}

impl Fixture {
    fn writer(&self, timing: WriteTiming) -> SessionWriter {
        SessionWriter::new(
            self.files.clone(),
            self.header.clone(),
            WriterStart::Fresh,
            timing,
            tokio::runtime::Handle::current(),
        )
    }

    fn path(&self) -> std::path::PathBuf {
        self.files.path_for(&self.header).unwrap()
    }
}

#[tokio::test(start_paused = true)]
async fn one_batch_per_window_and_later_events_do_not_push_it_back() {
    let f = fixture();
    let w = f.writer(WriteTiming::Batched(WINDOW));
    let start = Instant::now();
    w.enqueue([f.events[0].clone()]);
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        !f.path().exists(),
        "nothing is written before the window closes"
    );
    w.enqueue(f.events[1..5].iter().cloned());
    w.wait_durable(5).await;
    let elapsed = start.elapsed();
    assert!(
        elapsed >= WINDOW && elapsed < Duration::from_millis(300),
        "written when the first window closed: {elapsed:?}"
    );
    assert_eq!(frame_count(&f.path()), 2, "header frame + one batch");
    assert_eq!(w.pending_len(), 0);

    // The next event opens a new window: one more frame.
    let second = Instant::now();
    w.enqueue(f.events[5..9].iter().cloned());
    w.wait_durable(9).await;
    assert!(second.elapsed() >= WINDOW);
    assert_eq!(frame_count(&f.path()), 3);
    assert_eq!(f.files.inspect("w").unwrap().events[..9], f.events[..9]);
}

#[tokio::test(start_paused = true)]
async fn flush_is_a_barrier_that_drains_everything() {
    let f = fixture();
    let w = f.writer(WriteTiming::Batched(Duration::from_secs(3600)));
    let n = f.events.len();
    w.enqueue(f.events[..n / 2].iter().cloned());
    let start = Instant::now();
    w.flush().await.unwrap();
    assert!(
        start.elapsed() < WINDOW,
        "flush does not wait for the window"
    );
    assert_eq!(w.durable_len(), (n / 2) as u64);

    // Events queued while a flush runs are drained by that flush.
    w.enqueue(f.events[n / 2..n - 3].iter().cloned());
    let flushing = {
        let w = w.clone();
        tokio::spawn(async move { w.flush().await })
    };
    w.enqueue(f.events[n - 3..].iter().cloned());
    flushing.await.unwrap().unwrap();
    w.flush().await.unwrap();
    assert_eq!(w.pending_len(), 0);
    assert_eq!(w.durable_len(), n as u64);
    assert_eq!(f.files.load("w").unwrap().events, f.events);
    // Duplicates below the cursor are ignored.
    w.enqueue(f.events[..3].iter().cloned());
    assert_eq!(w.pending_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_failed_write_keeps_its_events_queued() {
    let f = fixture();
    // A regular file where the project directory must go makes every write fail.
    let blocker = f.files.root().join("--p--");
    std::fs::create_dir_all(f.files.root()).unwrap();
    std::fs::write(&blocker, b"in the way").unwrap();
    let w = f.writer(WriteTiming::Batched(WINDOW));
    w.enqueue(f.events[..4].iter().cloned());
    let err = w.flush().await.unwrap_err();
    assert!(
        err.to_string().contains("--p--"),
        "the error names the path: {err}"
    );
    assert_eq!(w.pending_len(), 4);
    assert_eq!(w.durable_len(), 0);

    // A background write fails too; events stay queued in order.
    w.enqueue(f.events[4..6].iter().cloned());
    tokio::time::sleep(WINDOW * 3).await;
    assert_eq!(w.pending_len(), 6);

    std::fs::remove_file(&blocker).unwrap();
    w.enqueue(f.events[6..8].iter().cloned());
    w.flush().await.unwrap();
    assert_eq!(w.pending_len(), 0);
    let loaded = f.files.inspect("w").unwrap();
    assert_eq!(loaded.events[..8], f.events[..8]);
    assert_eq!(loaded.stored_len, 8);
}

#[tokio::test(start_paused = true)]
async fn every_event_mode_writes_before_enqueue_returns() {
    let dir = tempfile::tempdir().unwrap();
    let files = Arc::new(
        SessionFiles::new(dir.path(), Compression::None, ChunkPacking::Packed).with_format(0),
    );
    let h = header("sync", None);
    let events = session_events(&h, 1, 5, false);
    let w = SessionWriter::new(
        files.clone(),
        h.clone(),
        WriterStart::Fresh,
        WriteTiming::EveryEvent,
        tokio::runtime::Handle::current(),
    );
    for (i, e) in events.iter().enumerate() {
        w.enqueue([e.clone()]);
        let raw = files.read_raw("sync").unwrap();
        assert_eq!(raw.lines().count(), i + 2, "header + {} events", i + 1);
    }
    assert_eq!(files.load("sync").unwrap().events, events);
}

#[tokio::test(start_paused = true)]
async fn a_writer_for_a_stored_log_appends_after_its_prefix() {
    let f = fixture();
    let n = f.events.len();
    f.files.create(&f.header, &f.events[..n - 5]).unwrap();
    let w = SessionWriter::new(
        f.files.clone(),
        f.header.clone(),
        WriterStart::Stored {
            stored_len: (n - 5) as u64,
        },
        WriteTiming::Batched(WINDOW),
        tokio::runtime::Handle::current(),
    );
    w.enqueue(f.events.iter().cloned()); // the stored prefix is skipped
    assert_eq!(w.pending_len(), 5);
    w.flush().await.unwrap();
    assert_eq!(f.files.load("w").unwrap().events, f.events);

    // A fresh writer refuses to materialize over an existing log.
    let fresh = f.writer(WriteTiming::Batched(WINDOW));
    fresh.enqueue(f.events[..2].iter().cloned());
    let err = fresh.flush().await.unwrap_err();
    assert!(
        err.to_string().contains("already has a persisted log"),
        "{err}"
    );
    assert_eq!(fresh.pending_len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_write_ahead_starts_at_once_and_a_bounded_barrier_leaves_later_events_queued() {
    let f = fixture();
    let w = f.writer(WriteTiming::Batched(Duration::from_secs(3600)));
    // Nothing queued: a write-ahead has nothing to start.
    w.write_ahead();
    let r = f
        .events
        .iter()
        .position(|e| e.is(dsh_session::types::TOOL_RESULT))
        .unwrap();
    assert!(f.events[r + 1].is(dsh_session::types::STEP_END));
    assert!(f.events[r + 2].is(dsh_session::types::STEP_START));
    w.enqueue(f.events[..r].iter().cloned());
    w.flush().await.unwrap();

    // The tool result goes ahead at once; the next step's start waits for its header.
    w.enqueue(f.events[r..r + 3].iter().cloned());
    let start = Instant::now();
    w.write_ahead();
    w.wait_durable(r as u64 + 1).await;
    assert!(
        start.elapsed() < WINDOW,
        "written without waiting for the batching window"
    );
    assert_eq!(w.pending_len(), 2);
    // A write-ahead of bookkeeping alone writes nothing.
    w.write_ahead();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(w.durable_len(), r as u64 + 1);

    // The barrier through the result finds it durable and writes nothing.
    w.flush_through(r as u64).await.unwrap();
    assert_eq!(w.durable_len(), r as u64 + 1);
    assert_eq!(w.pending_len(), 2, "the bounded barrier wrote nothing");

    // A bound inside the queue writes the queue.
    w.flush_through(r as u64 + 2).await.unwrap();
    assert_eq!(w.durable_len(), r as u64 + 3);
    assert_eq!(w.pending_len(), 0);
    // Idle: the full barrier returns without a write.
    let frames = frame_count(&f.path());
    w.flush().await.unwrap();
    assert_eq!(frame_count(&f.path()), frames);
    assert_eq!(
        f.files.inspect("w").unwrap().events[..r + 3],
        f.events[..r + 3]
    );
}
