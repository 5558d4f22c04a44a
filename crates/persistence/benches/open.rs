//! Opening a 100k-event session (load + build the `Session` + `derive_messages()`), in
//! both encodings, and durable append throughput in batches of 64 events.
//!
//! `cargo bench -p dsh-persistence`
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::{Arc, OnceLock};

use divan::Bencher;
use divan::counter::ItemsCount;
use dsh_persistence::{ChunkPacking, Compression, SessionFiles};
use dsh_session::{Event, Session, SessionHeader};

const EVENTS: usize = 100_000;
const DELTAS_PER_BLOCK: usize = 60;
/// Events per durable batch when the fixture is written (about one step's worth).
const WRITE_BATCH: usize = 256;

fn main() {
    divan::main();
}

struct Fixture {
    _dir: tempfile::TempDir,
    header: SessionHeader,
    events: Vec<Arc<Event>>,
    zstd: SessionFiles,
    plain: SessionFiles,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let header = common::header("bench-session", Some("/work/bench"));
        let events = common::session_of_size(&header, EVENTS, DELTAS_PER_BLOCK);
        let zstd = SessionFiles::new(
            dir.path().join("zstd"),
            Compression::Zstd,
            ChunkPacking::Packed,
        );
        let plain = SessionFiles::new(
            dir.path().join("plain"),
            Compression::None,
            ChunkPacking::Packed,
        );
        for files in [&zstd, &plain] {
            let mut chunks = events.chunks(WRITE_BATCH);
            files.create(&header, chunks.next().unwrap()).unwrap();
            for batch in chunks {
                files.append(&header, batch).unwrap();
            }
        }
        Fixture {
            _dir: dir,
            header,
            events,
            zstd,
            plain,
        }
    })
}

/// Returns the session so that dropping it (freeing ~1M allocations) happens outside the
/// timed region, as it would in a host that keeps the session open.
fn open_and_derive(files: &SessionFiles, id: &str) -> Session {
    let loaded = files.load(id).unwrap();
    let mut session = Session::with_seed(loaded.header, loaded.events, 0).unwrap();
    assert!(!session.derive_messages().is_empty());
    session
}

#[divan::bench(args = ["zstd", "plain"], sample_count = 10, sample_size = 1)]
fn open_derive(bencher: Bencher, encoding: &str) {
    let f = fixture();
    let files = if encoding == "zstd" {
        &f.zstd
    } else {
        &f.plain
    };
    let id = f.header.id.clone();
    bencher
        .counter(ItemsCount::new(f.events.len()))
        .bench(|| open_and_derive(files, &id));
}

/// Only the load (read, decompress, parse, validate).
#[divan::bench(args = ["zstd", "plain"], sample_count = 10, sample_size = 1)]
fn load_only(bencher: Bencher, encoding: &str) {
    let f = fixture();
    let files = if encoding == "zstd" {
        &f.zstd
    } else {
        &f.plain
    };
    bencher.bench(|| files.load(&f.header.id).unwrap());
}

/// One durable batch of 64 events (encode, compress, write, fdatasync).
#[divan::bench(args = ["zstd", "plain"], sample_count = 30, sample_size = 4)]
fn append_batch_of_64(bencher: Bencher, encoding: &str) {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let compression = if encoding == "zstd" {
        Compression::Zstd
    } else {
        Compression::None
    };
    let files = SessionFiles::new(dir.path(), compression, ChunkPacking::Packed);
    let header = common::header("append-bench", Some("/work/bench"));
    files.create(&header, &f.events[..64]).unwrap();
    let batches: Vec<&[Arc<Event>]> = f.events.chunks(64).collect();
    let mut next = 0usize;
    bencher.counter(ItemsCount::new(64usize)).bench_local(|| {
        next = (next + 1) % batches.len();
        files.append(&header, batches[next]).unwrap();
    });
}

/// The CPU part of an append of 64 events: encode (packing) and compress one frame.
#[divan::bench(args = ["zstd", "plain"], sample_count = 30, sample_size = 16)]
fn encode_batch_of_64(bencher: Bencher, encoding: &str) {
    let f = fixture();
    let batches: Vec<&[Arc<Event>]> = f.events.chunks(64).collect();
    let mut next = 0usize;
    bencher.counter(ItemsCount::new(64usize)).bench_local(|| {
        next = (next + 1) % batches.len();
        let text = dsh_session::encode_batch(batches[next], true);
        if encoding == "zstd" {
            let mut c = zstd::bulk::Compressor::new(3).unwrap();
            c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
                .unwrap();
            c.compress(text.as_bytes()).unwrap().len()
        } else {
            text.len()
        }
    });
}
