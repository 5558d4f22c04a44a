//! Crash safety of the real binary: `dsh --profile headless` is killed with SIGKILL at random
//! points of a tool loop against the mock LLM (default persistence: 200 ms write batching).
//! For every run, each tool result the model was shown must be in the log (the checkpoint
//! policy makes it durable before the request leaves), and the log must reopen and resume.
//!
//! `DSH_CRASH_POINTS` sets the number of kill points (default 50; the benchmark job runs 500)
//! and `DSH_CRASH_SEED` replays one sequence.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dsh_llm::{ContentBlock, Message};
use dsh_persistence::{ChunkPacking, Compression, SessionFiles};
use dsh_session::types;
use dsh_test_support::mock_server::{MockServer, Reply};
use serde_json::Value;

const STEPS: usize = 8;

fn script() -> Vec<Reply> {
    let mut replies: Vec<Reply> = (0..STEPS)
        .map(|i| {
            Reply::tool_call(
                &format!("call_{i}"),
                "bash",
                &format!(r#"{{"command":"echo output-{i}","description":"step {i}"}}"#),
            )
        })
        .collect();
    replies.push(Reply::text("All steps done."));
    replies
}

fn dsh(home: &std::path::Path, work: &std::path::Path, server: &MockServer) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dsh"));
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("DSH_HOME", home.join(".dsh"))
        .env("DEEPSEEK_API_KEY", "sk-test")
        .env("DEEPSEEK_BASE_URL", server.url())
        .current_dir(work)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// Tool results (call id → text) the model was shown across all recorded requests.
fn results_seen_by_model(server: &MockServer) -> BTreeMap<String, String> {
    let mut seen = BTreeMap::new();
    for r in server.requests() {
        for m in r.messages() {
            if m.get("role").and_then(Value::as_str) == Some("tool") {
                let id = m["tool_call_id"].as_str().unwrap_or_default().to_string();
                let text = m["content"]
                    .as_str()
                    .map_or_else(|| m["content"].to_string(), str::to_owned);
                seen.insert(id, text);
            }
        }
    }
    seen
}

/// Tool results (call id → text) stored in a log.
fn results_in_log(events: &[std::sync::Arc<dsh_session::Event>]) -> BTreeMap<String, String> {
    let mut stored = BTreeMap::new();
    for e in events.iter().filter(|e| e.is(types::TOOL_RESULT)) {
        let Ok(m) = Message::from_json(&e.data["message"]) else {
            continue;
        };
        for b in &m.content {
            if let ContentBlock::ToolResult {
                tool_call_id,
                content,
                ..
            } = b
            {
                let text: String = content.iter().filter_map(ContentBlock::as_text).collect();
                stored.insert(tool_call_id.clone(), text);
            }
        }
    }
    stored
}

fn full_run_time() -> Duration {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::with_replies(script()).answer_untooled("Title");
    let start = Instant::now();
    let out = dsh(home.path(), work.path(), &server)
        .args(["--profile", "headless", "loop"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    start.elapsed()
}

#[test]
fn sigkill_at_random_points_never_loses_what_the_model_saw() {
    let points: usize = std::env::var("DSH_CRASH_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let seed = crate::common::seed_from("DSH_CRASH_SEED");
    let full = full_run_time();
    let mut rng = crate::common::Rng::new(seed);
    let (mut lost, mut seen_total, mut resumed) = (0usize, 0usize, 0usize);
    for point in 0..points {
        let home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let server = MockServer::with_replies(script()).answer_untooled("Title");
        let delay = Duration::from_micros(rng.next_u64() % (full.as_micros() as u64 + 1));
        let mut child = dsh(home.path(), work.path(), &server)
            .args(["--profile", "headless", "loop"])
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = child.kill();
        let _ = child.wait();

        let seen = results_seen_by_model(&server);
        seen_total += seen.len();
        let files = SessionFiles::new(
            home.path().join(".dsh/sessions"),
            Compression::Zstd,
            ChunkPacking::Packed,
        );
        let list = files.list().unwrap();
        if list.is_empty() {
            assert!(
                seen.is_empty(),
                "seed {seed} point {point}: the model saw {seen:?} but no log exists"
            );
            continue;
        }
        let id = list[0].0.id.clone();
        let loaded = files
            .inspect(&id)
            .unwrap_or_else(|e| panic!("seed {seed} point {point}: the log does not open: {e}"));
        let stored = results_in_log(&loaded.events);
        for (call, text) in &seen {
            if stored.get(call) != Some(text) {
                lost += 1;
                eprintln!(
                    "seed {seed} point {point} ({delay:?}): the model saw {call} = {text:?}, the log has {:?}",
                    stored.get(call)
                );
            }
        }
        // Every tenth run also resumes the crashed session to a completed turn.
        if point % 10 == 0 {
            let again = MockServer::with_replies([Reply::text("Resumed.")]).answer_untooled("T");
            let out = dsh(home.path(), work.path(), &again)
                .args(["--profile", "headless", "--resume", &id, "continue"])
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "seed {seed} point {point}: resume failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let after = files.inspect(&id).unwrap();
            assert_eq!(after.repair, None, "seed {seed} point {point}");
            resumed += 1;
        }
    }
    eprintln!(
        "crash test: {points} kill points (seed {seed}), {seen_total} tool results shown to the model, {lost} lost, {resumed} resumed"
    );
    assert_eq!(lost, 0, "seed {seed}: tool results the model saw were lost");
}

fn alive(pid: i32) -> bool {
    // `kill -0` through the shell keeps this test free of unsafe code.
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn wait_gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn read_pid(path: &std::path::Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(t) = std::fs::read_to_string(path)
            && let Ok(pid) = t.trim().parse()
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid file {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn tool_processes_die_with_dsh_even_on_sigkill() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::with_replies([Reply::tool_call(
        "c1",
        "bash",
        r#"{"command":"sleep 300 & echo $! > bg.pid; sh -c 'echo $$ > fg.pid; exec sleep 300'","description":"hang","timeout":600000}"#,
    )])
    .answer_untooled("T");
    // Unconfined, so the pids the tool writes are host pids (a sandbox has its own pid
    // namespace, which dies with its runner anyway).
    let mut child = dsh(home.path(), work.path(), &server)
        .env("DSH_PERMISSION_MODE", "danger-full-access")
        .args(["--profile", "headless", "hang"])
        .spawn()
        .unwrap();
    let fg = read_pid(&work.path().join("fg.pid"));
    let bg = read_pid(&work.path().join("bg.pid"));
    assert!(alive(fg) && alive(bg));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(wait_gone(fg), "the foreground tool process survived dsh");
    assert!(
        wait_gone(bg),
        "a background process of the tool survived dsh"
    );
}

#[test]
fn background_processes_a_tool_left_behind_die_when_dsh_exits() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::with_replies([
        Reply::tool_call(
            "c1",
            "bash",
            r#"{"command":"nohup sleep 300 >/dev/null 2>&1 & echo $! > bg.pid","description":"start"}"#,
        ),
        Reply::text("Started."),
    ])
    .answer_untooled("T");
    let out = dsh(home.path(), work.path(), &server)
        .env("DSH_PERMISSION_MODE", "danger-full-access")
        .args(["--profile", "headless", "start"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bg = read_pid(&work.path().join("bg.pid"));
    assert!(
        wait_gone(bg),
        "a process the tool left running outlived dsh"
    );
}

#[test]
fn a_child_killed_mid_step_is_repaired_like_its_parent_and_resumes() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::with_replies([
        Reply::tool_call(
            "d1",
            "subagent",
            r#"{"description":"Hang","prompt":"Run the command.","run_in_background":false}"#,
        ),
        Reply::tool_call(
            "b1",
            "bash",
            r#"{"command":"sh -c 'echo $$ > child.pid; exec sleep 300'","description":"hang","timeout":600000}"#,
        ),
    ])
    .answer_untooled("T");
    let mut dsh_process = dsh(home.path(), work.path(), &server)
        .env("DSH_PERMISSION_MODE", "danger-full-access")
        .args(["--profile", "headless", "delegate"])
        .spawn()
        .unwrap();
    let tool = read_pid(&work.path().join("child.pid"));
    dsh_process.kill().unwrap();
    dsh_process.wait().unwrap();
    assert!(wait_gone(tool), "the child's tool process survived dsh");

    let files = SessionFiles::new(
        home.path().join(".dsh/sessions"),
        Compression::Zstd,
        ChunkPacking::Packed,
    );
    let headers: Vec<_> = files.list().unwrap().into_iter().map(|(h, _)| h).collect();
    assert_eq!(headers.len(), 2, "{headers:?}");
    let child = headers
        .iter()
        .find(|h| h.parent_session.is_some())
        .expect("the child's log")
        .id
        .clone();
    let crashed = files.inspect(&child).unwrap();
    assert!(crashed.repair.is_some(), "the child's log was left open");
    let last = crashed.events.last().unwrap();
    assert!(
        last.is(types::TURN_END),
        "repair closes the child's turn: {last:?}"
    );

    // The child resumes like any session: the repair is written, the next turn completes.
    let again = MockServer::with_replies([Reply::text("Resumed.")]).answer_untooled("T");
    let out = dsh(home.path(), work.path(), &again)
        .args(["--profile", "headless", "--resume", &child, "continue"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = files.inspect(&child).unwrap();
    assert_eq!(after.repair, None);
    assert_eq!(
        after.header.parent_session, crashed.header.parent_session,
        "the child keeps its parent"
    );
    let end = after
        .events
        .iter()
        .rev()
        .find(|e| e.is(types::TURN_END))
        .unwrap();
    assert_eq!(end.data["reason"]["kind"], "completed");
}
