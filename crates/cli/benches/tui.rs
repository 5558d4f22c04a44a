//! The terminal UI, whole process (`dsh tui` in a pseudo-terminal) against the mock LLM on
//! loopback (run with `cargo bench -p dsh-cli --bench tui`). Reported:
//! - start to first frame: spawn until the composer is on screen (10 runs);
//! - keystroke to screen: a key written to the pty until the composer shows it, when idle
//!   and while 2,000+ events stream in (a bash call printing 500 lines, then an answer of
//!   2,000 deltas);
//! - frame time while streaming (the app's own `DSH_TUI_STATS` figures: every frame drawn);
//! - that no typed key was dropped, and the peak RSS of the dsh process.
//!
//! Asserts only that the runs completed and no key was lost, never timings.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::time::{Duration, Instant};

use dsh_test_support::mock_server::{Completion, MockServer, Reply};
use dsh_test_support::pty::{self, PtyApp};
use serde_json::{Value, json};

const COLS: u16 = 120;
const ROWS: u16 = 40;

struct Home {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
}

fn start(h: &Home, server: &MockServer, stats: Option<&std::path::Path>) -> PtyApp {
    let mut cmd = pty::Command::new(env!("CARGO_BIN_EXE_dsh"));
    cmd.env_clear();
    cmd.env("PATH", std::env::var("PATH").unwrap_or_default());
    cmd.env("HOME", h.home.path());
    cmd.env("DSH_HOME", h.home.path().join(".dsh"));
    cmd.env("DEEPSEEK_API_KEY", "sk-bench");
    cmd.env("DEEPSEEK_BASE_URL", server.url());
    cmd.env("TERM", "xterm-256color");
    if let Some(p) = stats {
        cmd.env("DSH_TUI_STATS", p);
    }
    cmd.arg("tui");
    cmd.cwd(h.work.path());
    PtyApp::spawn(cmd, COLS, ROWS)
}

fn quit(app: &mut PtyApp) {
    app.send("\x03");
    std::thread::sleep(Duration::from_millis(30));
    app.send("\x03");
    app.wait_exit();
}

fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The composer's text row (the line after its top border).
fn composer_row(screen: &str) -> String {
    let lines: Vec<&str> = screen.lines().collect();
    lines
        .iter()
        .rposition(|l| l.starts_with("┌ "))
        .and_then(|i| lines.get(i + 1))
        .map(|l| {
            l.trim_start_matches('│')
                .trim_end()
                .trim_end_matches('│')
                .to_string()
        })
        .unwrap_or_default()
}

/// Types `keys` one at a time; each one's time until the composer shows it.
fn keystrokes(app: &mut PtyApp, keys: &str, pause: Duration) -> Vec<Duration> {
    let mut typed = composer_row(&app.screen());
    if typed.starts_with("Ask dsh") {
        typed.clear();
    }
    let mut out = Vec::new();
    for c in keys.chars() {
        typed.push(c);
        let want = typed.clone();
        let t = Instant::now();
        app.send(&c.to_string());
        app.wait_within(Duration::from_secs(10), |s| {
            composer_row(s).starts_with(&want)
        })
        .unwrap_or_else(|s| panic!("key {c:?} never showed; screen:\n{s}"));
        out.push(t.elapsed());
        std::thread::sleep(pause);
    }
    out
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pct(v: &mut [Duration], q: f64) -> f64 {
    v.sort();
    ms(v[((v.len() as f64 - 1.0) * q).round() as usize])
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // 1. Start to first frame.
    let mut firsts = Vec::new();
    for _ in 0..10 {
        let h = Home {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
        };
        let server = MockServer::start();
        let t = Instant::now();
        let mut app = start(&h, &server, None);
        app.wait_within(Duration::from_secs(30), |s| s.contains("Ask dsh"))
            .unwrap_or_else(|s| panic!("no first frame; screen:\n{s}"));
        firsts.push(t.elapsed());
        quit(&mut app);
    }
    let first_p50 = pct(&mut firsts, 0.5);
    let first_min = ms(firsts[0]);

    // 2. Keystrokes idle, then during a stream of 2,000+ events.
    let h = Home {
        home: tempfile::tempdir().unwrap(),
        work: tempfile::tempdir().unwrap(),
    };
    let server = MockServer::start().answer_untooled("Bench");
    let answer: String = (0..200)
        .map(|i| format!("Line {i} of the answer, with `code` and **bold**.\n\n"))
        .collect();
    let deltas = answer.chars().count().div_ceil(3);
    server.push_all([
        Reply::tool_call(
            "c1",
            "bash",
            &json!({"command": "for i in $(seq 1 500); do echo output line $i; sleep 0.004; done", "description": "print"}).to_string(),
        ),
        Reply::completion(Completion::text(answer.clone())),
    ]);
    let stats = h.home.path().join("stats.json");
    let mut app = start(&h, &server, Some(&stats));
    app.wait("the first frame", |s| s.contains("Ask dsh"));
    let mut idle = keystrokes(&mut app, "measuring idle keys", Duration::from_millis(20));
    // Clear and send the task.
    app.send("\x15");
    app.type_text("stream please");
    app.send("\r");
    app.wait_within(Duration::from_secs(30), |s| s.contains("output line"))
        .unwrap_or_else(|s| panic!("the stream did not start; screen:\n{s}"));
    let mut busy = keystrokes(
        &mut app,
        "typing while it streams",
        Duration::from_millis(15),
    );
    app.wait_within(Duration::from_secs(60), |s| {
        s.contains("Line 199 of the answer") && s.contains("ready")
    })
    .unwrap_or_else(|s| panic!("the stream did not end; screen:\n{s}"));
    let typed = composer_row(&app.screen());
    assert!(
        typed.starts_with("typing while it streams"),
        "a key was dropped: {typed:?}"
    );
    let rss = peak_rss_kib(app.pid());
    quit(&mut app);
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let events = {
        let files = dsh_persistence::SessionFiles::new(
            h.home.path().join(".dsh/sessions"),
            dsh_persistence::Compression::Zstd,
            dsh_persistence::ChunkPacking::Packed,
        );
        let list = files.list().unwrap();
        files.inspect(&list[0].0.id).unwrap().events.len()
    };
    println!("dsh tui, {COLS}x{ROWS}, release build, mock LLM on loopback");
    println!("  start to first frame: p50 {first_p50:.1} ms, min {first_min:.1} ms (10 runs)");
    println!(
        "  keystroke to screen, idle: p50 {:.2} ms, p99 {:.2} ms ({} keys)",
        pct(&mut idle, 0.5),
        pct(&mut idle, 0.99),
        idle.len()
    );
    println!(
        "  keystroke to screen, while streaming: p50 {:.2} ms, p99 {:.2} ms ({} keys, none dropped)",
        pct(&mut busy, 0.5),
        pct(&mut busy, 0.99),
        busy.len()
    );
    println!(
        "  stream: {events} session events ({deltas} answer deltas, 500 output lines); frames drawn {}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        s["frames"],
        s["frameP50Ms"].as_f64().unwrap_or(0.0),
        s["frameP99Ms"].as_f64().unwrap_or(0.0),
        s["frameMaxMs"].as_f64().unwrap_or(0.0)
    );
    println!(
        "  first frame inside the app: {:.1} ms after the tree loaded",
        s["firstFrameMs"].as_f64().unwrap_or(0.0)
    );
    println!("  peak RSS: {:.1} MiB", rss as f64 / 1024.0);
}
