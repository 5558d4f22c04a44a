//! Generate a realistic session log, or open one once (for peak-RSS measurements):
//!
//! ```text
//! session_tool gen  <root> <zstd|none> <events>
//! session_tool open <root> <zstd|none>
//! /usr/bin/time -v target/release/examples/session_tool open /tmp/s zstd
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/common/mod.rs"]
mod common;

use dsh_persistence::{ChunkPacking, Compression, SessionFiles};
use dsh_session::Session;

const ID: &str = "bench-session";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: session_tool gen <root> <zstd|none> <events> | open <root> <zstd|none>";
    let (Some(cmd), Some(root), Some(enc)) = (args.get(1), args.get(2), args.get(3)) else {
        panic!("{usage}");
    };
    let compression = if enc == "zstd" {
        Compression::Zstd
    } else {
        Compression::None
    };
    let files = SessionFiles::new(root, compression, ChunkPacking::Packed);
    match cmd.as_str() {
        "gen" => {
            let n: usize = args.get(4).and_then(|n| n.parse().ok()).expect(usage);
            let header = common::header(ID, Some("/work/bench"));
            let events = common::session_of_size(&header, n, 60);
            let mut chunks = events.chunks(256);
            files.create(&header, chunks.next().unwrap()).unwrap();
            for batch in chunks {
                files.append(&header, batch).unwrap();
            }
            let path = files.path_for(&header).unwrap();
            println!(
                "{} events, {} bytes at {}",
                events.len(),
                std::fs::metadata(&path).unwrap().len(),
                path.display()
            );
        }
        "open" => {
            let start = std::time::Instant::now();
            let loaded = files.load(ID).unwrap();
            let load = start.elapsed();
            let (rss_loaded, peak_loaded) = (proc_status_kb("VmRSS"), proc_status_kb("VmHWM"));
            let n = loaded.events.len();
            let mut session = Session::with_seed(loaded.header, loaded.events, 0).unwrap();
            let build = start.elapsed() - load;
            let messages = session.derive_messages().len();
            let total = start.elapsed();
            println!(
                "{n} events, {messages} messages, open+derive {total:?} (load {load:?}, build {build:?})"
            );
            println!(
                "memory: after load {} MiB (peak {} MiB); after derive {} MiB (peak {} MiB)",
                rss_loaded / 1024,
                peak_loaded / 1024,
                proc_status_kb("VmRSS") / 1024,
                proc_status_kb("VmHWM") / 1024
            );
        }
        "profile" => {
            // Where the load time goes, phase by phase (all through public APIs).
            let raw = files.read_raw(ID).unwrap();
            let lines: Vec<&str> = raw.lines().skip(1).collect();
            let t = std::time::Instant::now();
            let values: Vec<serde_json::Value> = lines
                .iter()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let parse = t.elapsed();
            let t = std::time::Instant::now();
            let mut next = 0u64;
            let records: Vec<dsh_session::Record> = values
                .into_iter()
                .map(|v| {
                    let r = dsh_session::decode_record(v, next).unwrap();
                    next += r.event_count() as u64;
                    r
                })
                .collect();
            let decode = t.elapsed();
            let t = std::time::Instant::now();
            let mut events = Vec::with_capacity(next as usize);
            for r in &records {
                match r {
                    dsh_session::Record::Event(e) => events.push(e.clone()),
                    dsh_session::Record::Row(row) => {
                        events.extend(row.expand().into_iter().map(std::sync::Arc::new))
                    }
                }
            }
            let expand = t.elapsed();
            let t = std::time::Instant::now();
            let whole = dsh_session::parse_log(&raw).unwrap();
            let parse_log = t.elapsed();
            println!(
                "{} lines, {} events: json {parse:?}, decode {decode:?}, expand {expand:?}; parse_log {parse_log:?}",
                lines.len(),
                events.len(),
            );
            drop(whole);
        }
        _ => panic!("{usage}"),
    }
}

/// A `kB` field of `/proc/self/status` (0 when unavailable).
fn proc_status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}
