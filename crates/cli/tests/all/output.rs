//! What the `dsh` binary writes to stdout, end to end: `--json` lines only for events the
//! log already holds (a consumer that kills dsh right after a line finds that event in the
//! log), and a reader that goes away (`| head -c 10`) ends every command quietly — status 0
//! or 141, no panic, no error per line — with the session log complete.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use dsh_session::types;
use dsh_test_support::mock_server::{Gate, MockServer, Reply};
use pretty_assertions::assert_eq;
use serde_json::Value;

use common::{Run, stderr};

const WAIT: Duration = Duration::from_secs(60);

/// Runs `cmd` with its stdout already closed by the reader (a pipe whose read end is gone).
fn with_closed_stdout(mut cmd: Command) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

fn assert_quiet_end(out: &Output, what: &str) {
    let err = stderr(out);
    assert!(
        matches!(out.status.code(), Some(0 | 141)),
        "{what}: status {:?}, stderr {err}",
        out.status
    );
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert!(
        !err.contains("Broken pipe") && !err.contains("cannot write"),
        "{what}: {err}"
    );
}

/// Lines of a child's stdout, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

#[test]
fn every_json_line_is_in_the_log_when_it_is_printed() {
    let gate = Gate::new();
    let server = MockServer::start().answer_untooled("Mock title");
    // The answer streams a few deltas, then holds until the test lets it go on.
    server.push(Reply::text("Durable lines only, please.").hold_after_event(4, &gate));
    let run = Run::new();
    let mut child = run
        .base(&server)
        .args([
            "--profile",
            "headless",
            "--output-format",
            "stream-json",
            "go",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rx = lines_of(&mut child);
    let mut printed: Vec<Value> = Vec::new();
    let is_chunk = |v: &Value| v["type"] == types::ASSISTANT_CHUNK;
    // Read until the first chunk line. A printer that wrote events as they happened shows
    // one while the stream is held — its chunks are then in no log. One that waits for the
    // log shows none until the message exists, so after a while the stream is let go.
    loop {
        match rx.recv_timeout(Duration::from_secs(3)) {
            Ok(line) => {
                let v: Value = serde_json::from_str(&line).unwrap();
                let chunk = is_chunk(&v);
                printed.push(v);
                if chunk {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) if !gate.is_open() => gate.open(),
            Err(e) => panic!("no chunk line: {e:?}; printed {printed:?}"),
        }
    }
    // The consumer kills dsh right after reading that line.
    child.kill().unwrap();
    child.wait().unwrap();
    gate.open();
    printed.extend(
        rx.iter()
            .map(|l| serde_json::from_str::<Value>(&l).unwrap()),
    );
    let id = run.only_session();
    let stored = run.files().inspect(&id).unwrap().events;
    for line in &printed {
        let seq = line["seq"].as_u64().unwrap();
        let found = stored.iter().find(|e| e.seq == seq);
        assert_eq!(
            found.map(|e| e.event_type.to_string()),
            Some(line["type"].as_str().unwrap().to_string()),
            "printed event {seq} is in the log (stored: {} events)",
            stored.len()
        );
    }
    let seqs: Vec<u64> = printed.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (0..printed.len() as u64).collect::<Vec<_>>(),
        "in order, none skipped"
    );
}

#[test]
fn a_closed_stdout_ends_a_text_run_quietly_with_the_log_complete() {
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::text("an answer nobody reads"));
    let run = Run::new();
    let mut cmd = run.base(&server);
    cmd.args(["--profile", "headless", "say it"]);
    let out = with_closed_stdout(cmd);
    assert_quiet_end(&out, "headless");
    assert_eq!(out.status.code(), Some(141), "{}", stderr(&out));
    let events = run.session();
    let end = events.iter().rev().find(|e| e.is(types::TURN_END)).unwrap();
    assert_eq!(end.data["reason"]["kind"], "completed");
}

#[test]
fn a_closed_stdout_stops_a_json_run_quietly_with_the_log_complete() {
    let gate = Gate::new();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::text("a long answer nobody reads").hold_after_event(2, &gate));
    let run = Run::new();
    let mut cmd = run.base(&server);
    cmd.args([
        "--profile",
        "headless",
        "--output-format",
        "stream-json",
        "say it",
    ]);
    let out = with_closed_stdout(cmd);
    gate.open();
    assert_quiet_end(&out, "headless --output-format stream-json");
    assert_eq!(out.status.code(), Some(141), "{}", stderr(&out));
    // The log is complete (`session()` refuses a log that needed repair) and its turn
    // closed: the run stopped as on Ctrl-C once nobody read its events.
    let events = run.session();
    let end = events.iter().rev().find(|e| e.is(types::TURN_END)).unwrap();
    assert_eq!(end.data["reason"]["kind"], "aborted");
}

#[test]
fn the_other_commands_end_quietly_on_a_closed_stdout() {
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::text("stored"));
    let run = Run::new();
    let out = run
        .base(&server)
        .args(["--profile", "headless", "store one session"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = run.only_session();
    let commands: [&[&str]; 10] = [
        &["--version"],
        &["--help"],
        &["--profile", "headless", "--dump-config"],
        &["--profile", "headless", "--help"],
        &["sessions", "list"],
        &["sessions", "show", &id, "--json"],
        &["sessions", "show", &id, "--messages"],
        &["sessions", "export", &id],
        &["plugin", "--help"],
        &["acp", "--help"],
    ];
    for args in commands {
        let mut cmd = run.base(&server);
        cmd.args(args).stdin(Stdio::null());
        let out = with_closed_stdout(cmd);
        assert_quiet_end(&out, &args.join(" "));
    }
    // The session is untouched by all that.
    assert_eq!(run.only_session(), id);
}

#[test]
fn the_web_server_keeps_serving_when_nobody_reads_its_stdout() {
    let server = MockServer::start();
    let run = Run::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Without --no-open the launch also announces the browser; `true` stands in for one.
    let mut child = run
        .base(&server)
        .env("BROWSER", "true")
        .args(["web", "--port", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    // Serving (past both stdout lines) once its SIGTERM handler is in place: the server
    // installs it right after printing.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!("dsh web ended early ({status}): {}", stderr(&out));
        }
        if catches_sigterm(child.id()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "dsh web never got ready"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

/// Whether process `pid` has a handler for SIGTERM (`SigCgt` of `/proc/<pid>/status`).
fn catches_sigterm(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (15 - 1)) != 0)
}
