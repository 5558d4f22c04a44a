//! Opening a 100k-event session (load + build the `Session` + `derive_messages()`), in
//! both compressions and both formats (v4, the default, and v0), and durable append
//! throughput in batches of 64 events.
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

/// The four stores: `"v4-zstd"`, `"v4-plain"`, `"v0-zstd"`, `"v0-plain"`.
const STORES: [&str; 4] = ["v4-zstd", "v4-plain", "v0-zstd", "v0-plain"];

fn store(root: &std::path::Path, name: &str) -> SessionFiles {
    let compression = if name.ends_with("zstd") {
        Compression::Zstd
    } else {
        Compression::None
    };
    let format = if name.starts_with("v0") { 0 } else { 4 };
    SessionFiles::new(root.join(name), compression, ChunkPacking::Packed).with_format(format)
}

struct Fixture {
    _dir: tempfile::TempDir,
    header: SessionHeader,
    events: Vec<Arc<Event>>,
    stores: Vec<(&'static str, SessionFiles)>,
}

impl Fixture {
    fn store(&self, name: &str) -> &SessionFiles {
        &self.stores.iter().find(|(n, _)| *n == name).unwrap().1
    }
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let header = common::header("bench-session", Some("/work/bench"));
        let events = common::session_of_size(&header, EVENTS, DELTAS_PER_BLOCK);
        let stores: Vec<_> = STORES.iter().map(|n| (*n, store(dir.path(), n))).collect();
        for (_, files) in &stores {
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
            stores,
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

#[divan::bench(args = STORES, sample_count = 10, sample_size = 1)]
fn open_derive(bencher: Bencher, encoding: &str) {
    let f = fixture();
    let files = f.store(encoding);
    let id = f.header.id.clone();
    bencher
        .counter(ItemsCount::new(f.events.len()))
        .bench(|| open_and_derive(files, &id));
}

/// Only the load (read, decompress, parse, validate).
#[divan::bench(args = STORES, sample_count = 10, sample_size = 1)]
fn load_only(bencher: Bencher, encoding: &str) {
    let f = fixture();
    let files = f.store(encoding);
    bencher.bench(|| files.load(&f.header.id).unwrap());
}

/// One durable batch of 64 events (encode, compress, write, fdatasync). Batches follow
/// each other in order (a v4 log is a dense sequence), never wrapping.
#[divan::bench(args = STORES, sample_count = 30, sample_size = 4)]
fn append_batch_of_64(bencher: Bencher, encoding: &str) {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let files = store(dir.path(), encoding);
    let header = common::header("append-bench", Some("/work/bench"));
    files.create(&header, &f.events[..64]).unwrap();
    let batches: Vec<&[Arc<Event>]> = f.events.chunks(64).collect();
    let mut next = 0usize;
    bencher.counter(ItemsCount::new(64usize)).bench_local(|| {
        next += 1;
        files.append(&header, batches[next]).unwrap();
    });
}

/// The CPU part of an append of 64 events: encode (v4 rows, or v0 with packing) and
/// compress one frame.
#[divan::bench(args = STORES, sample_count = 30, sample_size = 16)]
fn encode_batch_of_64(bencher: Bencher, encoding: &str) {
    let f = fixture();
    let batches: Vec<&[Arc<Event>]> = f.events.chunks(64).collect();
    let mut encoder = dsh_session::v4::V4Encoder::new(&f.header.id, None);
    let mut next = 0usize;
    let mut compressor = zstd::bulk::Compressor::new(3).unwrap();
    compressor
        .set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
        .unwrap();
    bencher.counter(ItemsCount::new(64usize)).bench_local(|| {
        let batch = batches[next];
        next += 1;
        let text = if encoding.starts_with("v4") {
            let mut text = String::new();
            encoder.encode(batch, &mut text).unwrap();
            text
        } else {
            dsh_session::encode_batch(batch, true)
        };
        if encoding.ends_with("zstd") {
            compressor.compress(text.as_bytes()).unwrap().len()
        } else {
            text.len()
        }
    });
}
