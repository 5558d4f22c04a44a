//! Parallel delegation, whole process (`dsh --profile headless`) against the mock LLM on
//! loopback (run with `cargo bench -p dsh-cli --bench subagents`). A parent delegates N
//! foreground `subagent` calls in one step; every child runs 5 bash steps, then answers.
//! Reported per N (1 and 8): the delegation phase's wall time (the parent's `tool/call`
//! of the first child to the `tool/result` of the last, from the parent's log) against the
//! slowest child's own duration in that run (first to last event of its log) and against a
//! lone child; and the peak RSS of the dsh process, whose growth from 1 to 8 children is
//! the cost per child. Asserts only that every child ran its steps, never timings.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_persistence::{ChunkPacking, Compression, SessionFiles};
use dsh_session::Event;
use dsh_test_support::mock_server::{MockServer, RecordedRequest, Reply, ToolCall};
use serde_json::json;

const STEPS: usize = 5;
const ROUNDS: usize = 5;
const PARENT: &str = "BENCH_PARENT";

struct Sample {
    wall: Duration,
    phase: Duration,
    slowest_child: Duration,
    peak_rss_kib: u64,
}

fn user_text(r: &RecordedRequest) -> String {
    r.messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect()
}

/// The parent fans out `n` children, then finishes; a child runs its bash steps, then answers.
fn reply_for(n: usize, r: &RecordedRequest) -> Reply {
    let done = r.messages().iter().filter(|m| m["role"] == "tool").count();
    if user_text(r).contains(PARENT) {
        if done == 0 {
            let calls = (0..n)
                .map(|i| {
                    let args = json!({
                        "description": format!("child {i}"),
                        "prompt": format!("Run {STEPS} commands, then say CHILD_DONE."),
                        "run_in_background": false,
                    });
                    ToolCall::new(&format!("d{i}"), "subagent", &args.to_string())
                })
                .collect();
            return Reply::tool_calls(calls);
        }
        return Reply::text("all children done");
    }
    if done < STEPS {
        let args = json!({"command": format!("seq 1 2000 | tail -n 1; echo step {done}")});
        return Reply::tool_call(&format!("b{done}"), "bash", &args.to_string());
    }
    Reply::text("CHILD_DONE")
}

fn time_of(e: &Arc<Event>) -> i64 {
    e.time
}

fn run(n: usize) -> Sample {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::start()
        .answer_untooled("Bench title")
        .respond_with(move |r| reply_for(n, r));
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("DSH_HOME", home.path().join(".dsh"))
        .env("DEEPSEEK_API_KEY", "sk-bench")
        .env("DEEPSEEK_BASE_URL", server.url())
        .current_dir(work.path())
        .args(["--profile", "headless", PARENT])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak_rss_kib = 0;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if let Some(hwm) = std::fs::read_to_string(&status_path).ok().and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        }) {
            peak_rss_kib = peak_rss_kib.max(hwm);
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let wall = t0.elapsed();
    assert!(status.success(), "dsh failed");

    let files = SessionFiles::new(
        home.path().join(".dsh/sessions"),
        Compression::Zstd,
        ChunkPacking::Packed,
    );
    let mut parent = None;
    let mut children = Vec::new();
    for path in files.log_paths() {
        let loaded = files.inspect_file(&path).unwrap();
        if loaded.header.parent_session.is_some() {
            children.push(loaded);
        } else {
            parent = Some(loaded);
        }
    }
    assert_eq!(children.len(), n, "every child has its log");
    let mut slowest_child = Duration::ZERO;
    for c in &children {
        let seed = c.header.seed_length.unwrap_or(0) as usize;
        let own = &c.events[seed..];
        let bash = own
            .iter()
            .filter(|e| e.event_type.as_str() == "tool/call")
            .count();
        assert_eq!(bash, STEPS, "every child ran its steps");
        let span = time_of(own.last().unwrap()) - time_of(&own[0]);
        slowest_child = slowest_child.max(Duration::from_millis(span.max(0) as u64));
    }
    let parent = parent.unwrap();
    let calls: Vec<i64> = parent
        .events
        .iter()
        .filter(|e| e.event_type.as_str() == "tool/call")
        .map(time_of)
        .collect();
    let results: Vec<i64> = parent
        .events
        .iter()
        .filter(|e| e.event_type.as_str() == "tool/result")
        .map(time_of)
        .collect();
    let phase = results.iter().max().unwrap() - calls.iter().min().unwrap();
    Sample {
        wall,
        phase: Duration::from_millis(phase.max(0) as u64),
        slowest_child,
        peak_rss_kib,
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    println!(
        "a parent delegating N foreground children of {STEPS} bash steps each; median of {ROUNDS} whole-process runs"
    );
    println!(
        "{:>3} {:>9} {:>15} {:>18} {:>10} {:>14}",
        "N", "wall ms", "delegation ms", "slowest child ms", "phase/slow", "peak RSS MiB"
    );
    let mut rows: Vec<(usize, Duration, Duration, Duration, f64)> = Vec::new();
    for n in [1usize, 8] {
        let samples: Vec<Sample> = (0..ROUNDS).map(|_| run(n)).collect();
        let wall = median(samples.iter().map(|s| s.wall).collect());
        let phase = median(samples.iter().map(|s| s.phase).collect());
        let slow = median(samples.iter().map(|s| s.slowest_child).collect());
        let mut rss: Vec<u64> = samples.iter().map(|s| s.peak_rss_kib).collect();
        rss.sort_unstable();
        let rss_mib = rss[rss.len() / 2] as f64 / 1024.0;
        println!(
            "{n:>3} {:>9.1} {:>15.1} {:>18.1} {:>10.2} {:>14.1}",
            wall.as_secs_f64() * 1000.0,
            phase.as_secs_f64() * 1000.0,
            slow.as_secs_f64() * 1000.0,
            phase.as_secs_f64() / slow.as_secs_f64().max(1e-9),
            rss_mib
        );
        rows.push((n, wall, phase, slow, rss_mib));
    }
    let (one, eight) = (&rows[0], &rows[1]);
    println!(
        "8 children: delegation phase {:.2}x a lone child's ({:.1} ms); peak RSS +{:.2} MiB per extra child",
        eight.2.as_secs_f64() / one.2.as_secs_f64().max(1e-9),
        one.2.as_secs_f64() * 1000.0,
        (eight.4 - one.4) / 7.0
    );
}
