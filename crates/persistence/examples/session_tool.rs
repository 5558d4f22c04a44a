//! Generate a realistic session log, or open one once (for peak-RSS measurements):
//!
//! ```text
//! session_tool gen     <root> <zstd|none> <events>
//! session_tool open    <root> <zstd|none>
//! session_tool profile <root> <zstd|none>
//! /usr/bin/time -v target/release/examples/session_tool open /tmp/s zstd
//! ```
//!
//! `gen` writes format v4 (the default); `FORMAT=0` writes v0. `open` reads either.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/common/mod.rs"]
mod common;

use dsh_persistence::{ChunkPacking, Compression, SessionFiles};
use dsh_session::Session;

const ID: &str = "bench-session";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage =
        "usage: session_tool gen <root> <zstd|none> <events> | open|profile <root> <zstd|none>";
    let (Some(cmd), Some(root), Some(enc)) = (args.get(1), args.get(2), args.get(3)) else {
        panic!("{usage}");
    };
    let compression = if enc == "zstd" {
        Compression::Zstd
    } else {
        Compression::None
    };
    let format = std::env::var("FORMAT")
        .ok()
        .and_then(|f| f.parse().ok())
        .unwrap_or(4);
    let files = SessionFiles::new(root, compression, ChunkPacking::Packed).with_format(format);
    match cmd.as_str() {
        "gen" => {
            let n: usize = args.get(4).and_then(|n| n.parse().ok()).expect(usage);
            let header = common::header(ID, Some("/work/bench"));
            let t = std::time::Instant::now();
            let events = common::session_of_size(&header, n, 60);
            let built = t.elapsed();
            let t = std::time::Instant::now();
            let encoded: usize = events
                .chunks(256)
                .map(|b| dsh_session::encode_batch(b, true).len())
                .sum();
            let encode = t.elapsed();
            println!(
                "appended {} events through Session::append_at in {built:?} ({:.0} ns/event); encoded them packed in {encode:?} ({encoded} bytes)",
                events.len(),
                built.as_nanos() as f64 / events.len() as f64
            );
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
            // Where the open time goes, phase by phase (all through public APIs). Each phase
            // runs 7 times and reports its best time, to see past a busy machine; dropping
            // the results is included.
            let best = |f: &mut dyn FnMut()| {
                (0..7)
                    .map(|_| {
                        let t = std::time::Instant::now();
                        f();
                        t.elapsed()
                    })
                    .min()
                    .unwrap()
            };
            let raw = files.read_raw(ID).unwrap();
            let (row_lines, event_lines): (Vec<&str>, Vec<&str>) = raw
                .lines()
                .skip(1)
                .partition(|l| l.contains("-chunks\",") && l.ends_with("]}}"));
            let decode = |lines: &[&str]| {
                for l in lines {
                    drop(dsh_session::decode_line(l, 0).unwrap());
                }
            };
            let rows = best(&mut || decode(&row_lines));
            let events = best(&mut || decode(&event_lines));
            let parse_log = best(&mut || drop(dsh_session::parse_log(&raw).unwrap()));
            let parsed = dsh_session::parse_log(&raw).unwrap();
            let closers = best(&mut || drop(dsh_session::interrupted_turn_closers(&parsed.events)));
            let load = best(&mut || drop(files.load(ID).unwrap()));
            let build = best(&mut || {
                let seed = parsed.events.clone();
                drop(Session::with_seed(parsed.header.clone(), seed, 0).unwrap())
            });
            let open = best(&mut || {
                let loaded = files.load(ID).unwrap();
                let mut s = Session::with_seed(loaded.header, loaded.events, 0).unwrap();
                assert!(!s.derive_messages().is_empty());
            });
            println!(
                "{} events (best of 7, drops included): decode {} row lines {rows:?}, {} event lines {events:?}; parse_log {parse_log:?}; repair scan {closers:?}; load {load:?}; with_seed {build:?}; open+derive {open:?}",
                parsed.events.len(),
                row_lines.len(),
                event_lines.len(),
            );
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
