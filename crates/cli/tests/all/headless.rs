//! End-to-end: the `dsh` binary against the mock OpenAI-compatible server on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::{Command, Output};
use std::time::Duration;

use dsh_persistence::{ChunkPacking, Compression, SessionFiles};
use dsh_session::{Event, types};
use dsh_test_support::mock_server::{MockServer, Reply, ToolCall};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::{Run, stderr};

trait TitleAware {
    fn with_title_replies(replies: impl IntoIterator<Item = Reply>) -> MockServer;
}

impl TitleAware for MockServer {
    /// A scripted server that answers the auxiliary title request on the side.
    fn with_title_replies(replies: impl IntoIterator<Item = Reply>) -> MockServer {
        let server = MockServer::start().answer_untooled("Mock title");
        server.push_all(replies);
        server
    }
}

/// What these tests add to [`Run`].
trait RunExt {
    fn cmd(&self, server: &MockServer, args: &[&str]) -> Command;
    fn headless(&self, server: &MockServer, task: &str) -> Output;
}

impl RunExt for Run {
    fn cmd(&self, server: &MockServer, args: &[&str]) -> Command {
        let mut c = self.base(server);
        c.args(args);
        c
    }

    fn headless(&self, server: &MockServer, task: &str) -> Output {
        self.cmd(server, &["--profile", "headless", task])
            .output()
            .unwrap()
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// Durable event types, without chunks and without the (concurrent) model-title events.
fn types_of(events: &[std::sync::Arc<Event>]) -> Vec<String> {
    events
        .iter()
        .filter(|e| !e.is(types::ASSISTANT_CHUNK) && !e.is("session/title-llm-request"))
        .filter(|e| {
            !(e.is(types::SESSION_TITLE)
                && e.data.pointer("/source/kind") != Some(&Value::from("fallback")))
        })
        .map(|e| e.event_type.to_string())
        .collect()
}

fn tool_results(events: &[std::sync::Arc<Event>]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.is(types::TOOL_RESULT))
        .map(|e| {
            let block = &e.data["message"]["content"][0];
            let text: String = block["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect();
            let code = e
                .data
                .pointer("/error/code")
                .and_then(Value::as_str)
                .map(|c| format!("{c}: "))
                .unwrap_or_default();
            format!("{code}{text}")
        })
        .collect()
}

fn last_reason(events: &[std::sync::Arc<Event>]) -> Value {
    events
        .iter()
        .rev()
        .find(|e| e.is(types::TURN_END))
        .unwrap()
        .data["reason"]
        .clone()
}

#[test]
fn a_text_answer_goes_to_stdout_and_the_session_is_saved() {
    let server =
        MockServer::with_title_replies([Reply::reasoning_and_text("think", "Hello there.")]);
    let run = Run::new();
    let out = run.headless(&server, "say hello");
    assert_eq!(
        (out.status.code(), stdout(&out), stderr(&out)),
        (Some(0), "Hello there.\n".to_string(), String::new())
    );
    let events = run.session();
    assert_eq!(
        types_of(&events),
        [
            "permission/preset",
            "sandbox/mode",
            "approval/policy",
            "agent/inbox/spliced",
            "turn/start",
            "agent/inbox/spliced",
            "step/start",
            "user/message",
            "user/message",
            "session/title",
            "request/header",
            "request/context",
            "assistant/message",
            "step/end",
            "turn/end"
        ]
    );
    assert!(
        events.iter().any(|e| e.is("session/title-llm-request")),
        "the auxiliary title request is logged"
    );
    // The default route, as upstream 0.2.1's: DeepSeek's Messages API (the endpoint's
    // `/v1/messages`), its key in `x-api-key`, model deepseek-flash, thinking on with the
    // effort in `output_config`, the system prompt as one string.
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/messages");
    assert_eq!(req.header("x-api-key"), Some("sk-test"));
    assert_eq!(req.header("authorization"), None);
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    let body = req.json.clone().unwrap();
    assert_eq!(body["model"], "deepseek-flash");
    assert_eq!(body["stream"], true);
    assert_eq!(body["thinking"], json!({"type": "enabled"}));
    assert_eq!(body["output_config"], json!({"effort": "high"}));
    assert!(
        body["system"]
            .as_str()
            .is_some_and(|s| s.contains("deepseek-flash")),
        "{body:#}"
    );
    assert_eq!(body["messages"][0]["role"], "user");
    assert_eq!(
        body["messages"][0]["content"][0],
        json!({"type": "text", "text": "say hello"})
    );
    assert!(body["tools"][0]["input_schema"].is_object(), "{body:#}");
    // The title request asks for no thinking.
    let title = &server.aux_requests()[0];
    assert_eq!(title.path, "/v1/messages");
    assert_eq!(
        title.json.as_ref().unwrap()["thinking"],
        json!({"type": "disabled"})
    );
}

#[test]
fn a_bash_tool_round_trip() {
    let server = MockServer::with_title_replies([
        Reply::tool_call(
            "c1",
            "bash",
            r#"{"command":"echo from-bash","description":"echo a marker"}"#,
        ),
        Reply::echo_tool_output(),
    ]);
    let run = Run::new();
    let out = run.headless(&server, "run echo");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("from-bash"), "{}", stdout(&out));
    let events = run.session();
    assert_eq!(tool_results(&events), ["from-bash\n"]);
    // The model saw the result in the second request.
    let second = &server.requests()[1];
    assert_eq!(second.last_tool_output().as_deref(), Some("from-bash\n"));
}

#[test]
fn read_then_edit_changes_the_file_on_disk() {
    let run = Run::new();
    std::fs::write(run.work.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
    let server = MockServer::with_title_replies([
        Reply::tool_call("r", "read", r#"{"file_path":"notes.txt"}"#),
        Reply::tool_call(
            "e",
            "edit",
            r#"{"file_path":"notes.txt","old_string":"beta","new_string":"gamma"}"#,
        ),
        Reply::text("Edited."),
    ]);
    let out = run.headless(&server, "change beta to gamma");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(run.work.path().join("notes.txt")).unwrap(),
        "alpha\ngamma\n"
    );
    let results = tool_results(&run.session());
    assert!(
        results[1].starts_with("The file notes.txt has been updated")
            || results[1].contains("notes.txt"),
        "{results:?}"
    );
}

#[test]
fn a_twenty_step_tool_loop() {
    let mut replies: Vec<Reply> = (0..20)
        .map(|i| {
            Reply::tool_call(
                &format!("c{i}"),
                "bash",
                &format!(r#"{{"command":"echo step {i}","description":"loop step"}}"#),
            )
        })
        .collect();
    replies.push(Reply::text("All twenty done."));
    let server = MockServer::with_title_replies(replies);
    let run = Run::new();
    let out = run.headless(&server, "loop");
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "All twenty done.\n".to_string()),
        "{}",
        stderr(&out)
    );
    let events = run.session();
    assert_eq!(
        events.iter().filter(|e| e.is(types::STEP_START)).count(),
        21
    );
    assert_eq!(tool_results(&events)[19], "step 19\n");
}

#[test]
fn an_auth_error_is_one_line_and_exit_1() {
    let server = MockServer::with_title_replies([Reply::error_json(
        401,
        "Authentication Fails (no such user)",
        "authentication_error",
        None,
    )]);
    let run = Run::new();
    let out = run.headless(&server, "hi");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("dsh: AUTH: ") && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(last_reason(&run.session())["kind"], "error");
}

#[test]
fn a_missing_api_key_says_what_to_set() {
    let server = MockServer::start().answer_untooled("Mock title");
    let run = Run::new();
    let out = run
        .cmd(&server, &["--profile", "headless", "hi"])
        .env_remove("DEEPSEEK_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("dsh: MISSING_CREDENTIAL: ") && err.contains("DEEPSEEK_API_KEY"),
        "{err}"
    );
    assert!(server.requests().is_empty());
}

#[test]
fn rate_limits_and_server_errors_are_retried_honouring_retry_after() {
    let server = MockServer::with_title_replies([
        Reply::rate_limited(1),
        Reply::http_error(500, "boom"),
        Reply::text("recovered"),
    ]);
    let run = Run::new();
    let out = run.headless(&server, "hi");
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "recovered\n".to_string()),
        "{}",
        stderr(&out)
    );
    let events = run.session();
    let retries: Vec<(String, u64)> = events
        .iter()
        .filter(|e| e.is(types::LLM_RETRY))
        .map(|e| {
            (
                e.data["failure"]["code"].as_str().unwrap().to_string(),
                e.data["delayMs"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        retries[0],
        ("RATE_LIMIT".to_string(), 1000),
        "Retry-After: 1 replaces the backoff"
    );
    assert_eq!(retries[1].0, "SERVER");
    assert_eq!(
        events.iter().filter(|e| e.is(types::STEP_START)).count(),
        1,
        "retries stay in the step"
    );
}

#[test]
fn keep_alive_comments_cannot_hold_a_request_past_its_deadline() {
    // Comments every 50 ms keep the idle timer happy; the request deadline still ends each
    // attempt, and a TIMEOUT is retried only once.
    let server = MockServer::with_title_replies([
        Reply::keep_alive_only(Duration::from_millis(50), Duration::from_secs(20)),
        Reply::keep_alive_only(Duration::from_millis(50), Duration::from_secs(20)),
        Reply::text("never reached"),
    ]);
    let run = Run::new();
    run.settings("llm-deepseek:\n  streamIdleTimeoutMs: 400\n  requestTimeoutMs: 700\n");
    let started = std::time::Instant::now();
    let out = run.headless(&server, "hi");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("TIMEOUT: DeepSeek request exceeded its 700ms deadline"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        server.requests().len(),
        2,
        "one retry of a TIMEOUT, no more"
    );
    assert_eq!(server.pending_replies(), 1);
}

#[test]
fn a_stream_closed_before_done_is_retried() {
    let server = MockServer::with_title_replies([Reply::cut_mid_event(), Reply::text("again")]);
    let run = Run::new();
    let out = run.headless(&server, "hi");
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "again\n".to_string()),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_stall_past_the_idle_timeout_is_retried() {
    let server = MockServer::with_title_replies([
        Reply::stall(Duration::from_secs(5)),
        Reply::text("after stall"),
    ]);
    let run = Run::new();
    run.settings("llm-deepseek:\n  streamIdleTimeoutMs: 300\n");
    let out = run.headless(&server, "hi");
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "after stall\n".to_string()),
        "{}",
        stderr(&out)
    );
    let retry = run
        .session()
        .into_iter()
        .find(|e| e.is(types::LLM_RETRY))
        .unwrap();
    assert_eq!(retry.data["failure"]["code"], "TIMEOUT");
}

#[test]
fn a_stream_cut_mid_event_and_a_malformed_chunk_end_with_logged_errors() {
    for (reply, code) in [
        (Reply::cut_mid_event(), "STREAM_CLOSED"),
        (Reply::malformed_chunk(), "MALFORMED_RESPONSE"),
    ] {
        let server = MockServer::with_title_replies([reply]);
        let run = Run::new();
        // No retries: STREAM_CLOSED is retryable by default.
        run.settings("llm-deepseek:\n  retryPolicy:\n    mode: normal\n    maxRetries: 0\n");
        let out = run.headless(&server, "hi");
        assert_eq!(out.status.code(), Some(1), "{code}");
        assert!(
            stderr(&out).starts_with(&format!("dsh: {code}: ")),
            "{}",
            stderr(&out)
        );
        assert_eq!(last_reason(&run.session())["error"]["code"], code);
    }
}

#[test]
fn bad_tool_calls_become_tool_errors_and_the_run_continues() {
    let run = Run::new();
    // Only the workspace is writable (no temp areas), so any other directory is outside.
    let outside_dir = tempfile::tempdir().unwrap();
    let outside = outside_dir.path().join("outside.txt");
    std::fs::write(
        run.work.path().join("strict.yml"),
        "- id: sandbox-policy\n  config:\n    mode: workspace-write\n    tempRoots: []\n",
    )
    .unwrap();
    let server = MockServer::with_title_replies([
        Reply::tool_calls(vec![
            ToolCall::new("a", "bash", "{not json"),
            ToolCall::new("b", "teleport", "{}"),
            ToolCall::new(
                "c",
                "write",
                &format!(
                    r#"{{"file_path":{},"content":"x"}}"#,
                    serde_json::to_string(&outside.display().to_string()).unwrap()
                ),
            ),
        ]),
        Reply::text("I see the errors."),
    ]);
    let out = run
        .cmd(
            &server,
            &[
                "--profile",
                "headless",
                "--patch",
                "strict.yml",
                "try things",
            ],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = tool_results(&run.session());
    assert!(
        results[0].starts_with("INVALID_ARGS: Error: invalid arguments"),
        "{results:?}"
    );
    assert_eq!(results[1], "UNKNOWN_TOOL: Error: unknown tool \"teleport\"");
    assert!(
        results[2].contains("sandbox") || results[2].contains("denied"),
        "{results:?}"
    );
    assert!(
        !outside.exists(),
        "nothing was written outside the workspace"
    );
}

#[test]
fn a_command_that_never_ends_is_killed_at_its_timeout() {
    let server = MockServer::with_title_replies([
        Reply::tool_call(
            "s",
            "bash",
            r#"{"command":"sleep 600","description":"never ends","timeoutMs":300}"#,
        ),
        Reply::text("It timed out."),
    ]);
    let run = Run::new();
    let out = run.headless(&server, "wait forever");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = tool_results(&run.session());
    assert!(
        results[0].contains("[timed out after 300ms]"),
        "{results:?}"
    );
}

#[test]
fn stream_json_prints_every_durable_event() {
    let server = MockServer::with_title_replies([Reply::text("ok")]);
    let run = Run::new();
    let out = run
        .cmd(
            &server,
            &[
                "--profile",
                "headless",
                "--output-format",
                "stream-json",
                "hi",
            ],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = lines.iter().map(|v| v["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (0..lines.len() as u64).collect::<Vec<_>>(),
        "every event, in order"
    );
    assert!(lines.iter().any(|l| l["type"] == "turn/end"));
    // The log may grow after the answer (the model title lands on its own time).
    assert!(lines.len() <= run.session().len());
}

#[test]
fn sigint_exits_130_and_the_log_stays_complete() {
    let server = MockServer::with_title_replies([Reply::stall(Duration::from_secs(30))]);
    let run = Run::new();
    let child = run
        .cmd(&server, &["--profile", "headless", "hang"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    server.wait_for_requests(1, Duration::from_secs(10));
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert_eq!(
        last_reason(&run.session()),
        serde_json::json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
}

#[test]
fn resume_continues_a_stored_session() {
    let server =
        MockServer::with_title_replies([Reply::text("first answer"), Reply::text("second answer")]);
    let run = Run::new();
    assert_eq!(run.headless(&server, "first").status.code(), Some(0));
    let id = {
        let root = run.home.path().join(".dsh/sessions");
        SessionFiles::new(&root, Compression::Zstd, ChunkPacking::Packed)
            .list()
            .unwrap()[0]
            .0
            .id
            .clone()
    };
    let out = run
        .cmd(
            &server,
            &["--profile", "headless", "--resume", &id, "second"],
        )
        .output()
        .unwrap();
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "second answer\n".to_string()),
        "{}",
        stderr(&out)
    );
    let events = run.session();
    let turns: Vec<u64> = events
        .iter()
        .filter(|e| e.is(types::TURN_START))
        .map(|e| e.data["turn"].as_u64().unwrap())
        .collect();
    assert_eq!(turns, [1, 2]);
    // The second request carried the whole history.
    let texts: Vec<String> = server.requests()[1]
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .filter(|t| !t.is_empty())
        .collect();
    assert_eq!(
        texts
            .iter()
            .filter(|t| *t == "first" || *t == "first answer" || *t == "second")
            .count(),
        3,
        "{texts:?}"
    );
    let missing = run
        .cmd(&server, &["--profile", "headless", "--resume", "nope", "x"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).starts_with("dsh: cannot resume: "),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn a_spilled_bash_output_lives_beside_the_session_log() {
    let server = MockServer::with_title_replies([
        Reply::tool_call(
            "big",
            "bash",
            r#"{"command":"head -c 300000 /dev/zero | tr '\\0' 'x'; echo","description":"big"}"#,
        ),
        Reply::text("done"),
    ]);
    let run = Run::new();
    let out = run.headless(&server, "big output");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let shown = server.requests()[1].last_tool_output().unwrap();
    let path = shown
        .split("full output: ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap_or_else(|| panic!("no spill path in {shown:?}"));
    let sessions = run.home.path().join(".dsh/sessions");
    assert!(
        std::path::Path::new(path).starts_with(&sessions),
        "{path} is not under {}",
        sessions.display()
    );
    assert_eq!(std::fs::read_to_string(path).unwrap().len(), 300_001);
}

/// A script written for upstream 0.2: `dsh headless --json - < task.txt`, then
/// `dsh headless --session-id <id> "continue"`.
#[test]
fn upstream_02_headless_grammar() {
    let server =
        MockServer::with_title_replies([Reply::text("from stdin"), Reply::text("continued")]);
    let run = Run::new();
    let task = run.work.path().join("task.txt");
    std::fs::write(&task, "describe the repository\n").unwrap();
    let out = run
        .cmd(&server, &["headless", "--json", "-"])
        .stdin(std::fs::File::open(&task).unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Upstream 0.2's run events: the session line first (the id to continue with), the
    // answer in `final` last.
    assert_eq!(lines[0]["type"], "session", "{lines:?}");
    assert_eq!(
        lines[0]["cwd"],
        run.work
            .path()
            .canonicalize()
            .unwrap()
            .display()
            .to_string()
    );
    let id = lines[0]["sessionId"].as_str().unwrap().to_string();
    assert_eq!(
        lines.last().unwrap(),
        &serde_json::json!({"type": "final", "text": "from stdin"})
    );
    let phases: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "status")
        .map(|l| l["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["turn_start", "step_start", "step_end", "turn_end"]);
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "text" && l["text"] == "from stdin")
    );
    let stored = {
        let root = run.home.path().join(".dsh/sessions");
        SessionFiles::new(&root, Compression::Zstd, ChunkPacking::Packed)
            .load(&id)
            .unwrap()
            .events
    };
    let user = stored
        .iter()
        .find(|e| e.is(types::USER_MESSAGE))
        .expect("the task is recorded");
    assert_eq!(
        user.data["content"][0]["text"], "describe the repository",
        "the task came from stdin"
    );
    let out = run
        .cmd(&server, &["headless", "--session-id", &id, "continue"])
        .output()
        .unwrap();
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "continued\n".to_string()),
        "{}",
        stderr(&out)
    );
    let empty = run
        .cmd(&server, &["headless", "-"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(empty.status.code(), Some(1));
    assert_eq!(
        stderr(&empty),
        "error: the task read from standard input is empty\n"
    );
    let missing = run
        .cmd(&server, &["headless", "--session-id", "nope", "x"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(stderr(&missing).lines().count(), 1, "{}", stderr(&missing));
}

/// Runs `dsh` with stderr on a pseudo-terminal (stdout stays a pipe); returns stdout and
/// everything the terminal received.
fn run_on_terminal(run: &Run, server: &MockServer, args: &[&str]) -> (Output, String) {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name.to_str().unwrap())
        .unwrap();
    let mut master = std::fs::File::from(master);
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // Reading fails with EIO once every slave handle is closed (the child exited).
        while let Ok(n) = std::io::Read::read(&mut master, &mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&seen).into_owned()
    });
    let mut cmd = run.cmd(server, args);
    cmd.stderr(slave).stdout(std::process::Stdio::piped());
    let out = cmd.output().unwrap();
    drop(cmd);
    (out, reader.join().unwrap())
}

#[test]
fn a_terminal_shows_live_progress_and_stdout_only_the_answer() {
    let server = MockServer::with_title_replies([
        Reply::tool_call(
            "c1",
            "bash",
            r#"{"command":"echo step-one","description":"first"}"#,
        ),
        Reply::tool_call(
            "c2",
            "bash",
            r#"{"command":"exit 3","description":"second"}"#,
        ),
        Reply::text("all done"),
    ]);
    let run = Run::new();
    let (out, terminal) = run_on_terminal(&run, &server, &["headless", "do it"]);
    assert_eq!(out.status.code(), Some(0), "{terminal}");
    assert_eq!(stdout(&out), "all done\n", "stdout holds only the answer");
    assert!(
        terminal.contains("✓ bash echo step-one · ok · "),
        "{terminal:?}"
    );
    assert!(
        terminal.contains("✗ bash exit 3 · exit code: 3 · "),
        "{terminal:?}"
    );
    assert!(terminal.contains("turn 1 · step 3"), "{terminal:?}");
    assert!(
        !terminal.contains("all done"),
        "the answer is not on stderr"
    );

    // --quiet: the terminal stays empty.
    let server = MockServer::with_title_replies([Reply::text("quiet answer")]);
    let (out, terminal) = run_on_terminal(&run, &server, &["headless", "--quiet", "hi"]);
    assert_eq!(stdout(&out), "quiet answer\n");
    assert_eq!(terminal, "");
}

#[test]
fn without_a_terminal_stderr_stays_empty_unless_verbose() {
    let server = MockServer::with_title_replies([
        Reply::tool_call("c1", "bash", r#"{"command":"echo v","description":"v"}"#),
        Reply::text("fine"),
    ]);
    let run = Run::new();
    let out = run.headless(&server, "go");
    assert_eq!(
        (stdout(&out).as_str(), stderr(&out).as_str()),
        ("fine\n", "")
    );
    let server = MockServer::with_title_replies([
        Reply::tool_call("c1", "bash", r#"{"command":"echo v","description":"v"}"#),
        Reply::text("fine"),
    ]);
    let out = run
        .cmd(&server, &["headless", "--verbose", "go"])
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "fine\n");
    let err = stderr(&out);
    assert!(!err.contains('\x1b'), "plain lines off a terminal: {err:?}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines.contains(&"→ bash echo v"), "{err}");
    assert!(
        lines.iter().any(|l| l.starts_with("✓ bash echo v · ok · ")),
        "{err}"
    );
    assert!(lines.last().unwrap().starts_with("done in "), "{err}");
}

/// A DeepSeek base URL with no Messages API behind it (0.1's chat endpoint, still in many
/// `DEEPSEEK_BASE_URL`s) fails with an error that says where the Messages API is and how to
/// stay on chat completions.
#[test]
fn a_base_url_without_the_messages_api_says_what_to_set() {
    let server = MockServer::with_title_replies([Reply::error_json(
        404,
        "Not Found",
        "not_found_error",
        None,
    )]);
    let run = Run::new();
    let out = run.headless(&server, "hi");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "no Messages API answers at {}/v1/messages",
            server.url()
        )) && err.contains("https://api.deepseek.com/anthropic")
            && err.contains("api: openai-completions"),
        "{err}"
    );
    assert_eq!(
        server.requests().len(),
        1,
        "a missing endpoint is not retried"
    );
}

/// `agent-default-model.reasoningEffort` in settings.yaml reaches the provider request
/// (DeepSeek's Messages dialect: `output_config.effort`, thinking switched off for `off`),
/// and is logged in the request header (without it the adapter's default applies).
#[test]
fn the_settings_reasoning_effort_reaches_the_request() {
    let effort_of = |settings: Option<&str>| {
        let server = MockServer::with_title_replies([Reply::text("ok")]);
        let run = Run::new();
        if let Some(yaml) = settings {
            run.settings(yaml);
        }
        let out = run.headless(&server, "think hard");
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let body = server.requests()[0].json.clone().unwrap();
        let header = run
            .session()
            .iter()
            .find(|e| e.is("request/header"))
            .map(|e| e.data.clone())
            .unwrap();
        (
            body["output_config"]["effort"].clone(),
            body["thinking"]["type"].clone(),
            (
                header["header"]["config"]["reasoningEffort"].clone(),
                header["header"]["adapterDefaults"]["reasoningEffort"].clone(),
            ),
        )
    };
    assert_eq!(
        effort_of(Some(
            "agent-default-model:\n  provider: deepseek-official\n  model: deepseek-flash\n  reasoningEffort: max\n"
        )),
        (
            Value::from("max"),
            Value::from("enabled"),
            (Value::from("max"), Value::Null)
        )
    );
    assert_eq!(
        effort_of(Some(
            "agent-default-model:\n  provider: deepseek-official\n  model: deepseek-flash\n  reasoningEffort: 'off'\n"
        )),
        (
            Value::Null,
            Value::from("disabled"),
            (Value::from("off"), Value::Null)
        )
    );
    // Without a selection the adapter's default is sent and marked as the adapter's.
    let (default_effort, _, (logged, marked)) = effort_of(None);
    assert_eq!(default_effort, Value::from("high"));
    assert_eq!((logged, marked), (Value::from("high"), Value::Bool(true)));
    // On chat completions (a settings choice) the effort is chat's `reasoning_effort`.
    let server = MockServer::with_title_replies([Reply::text("ok")]);
    let run = Run::new();
    run.settings("llm-deepseek:\n  api: openai-completions\nagent-default-model:\n  provider: deepseek-official\n  model: deepseek-flash\n  reasoningEffort: max\n");
    let out = run.headless(&server, "think hard");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let request = &server.requests()[0];
    assert_eq!(request.path, "/chat/completions");
    let body = request.json.clone().unwrap();
    assert_eq!(
        (
            body["reasoning_effort"].clone(),
            body["thinking"]["type"].clone()
        ),
        (Value::from("max"), Value::from("enabled"))
    );
}

/// Plan mode through the binary: `/plan` commits `plan/mode` between runs, a resumed run's
/// requests carry the `plan:policy` section and the `exit_plan_mode` tool, the review
/// fails clearly where no question channel exists, `/plan off` leaves, and the next request
/// has no section and tells the model the mode changed.
#[test]
fn plan_mode_enters_reviews_and_leaves_across_resumed_runs() {
    const SECTION: &str = "Plan mode is on.";
    const PLAN: &str = "# Cache the reader\n\n1. Wrap it.\n2. Test it.";
    let server = MockServer::with_title_replies([
        Reply::tool_call(
            "p1",
            "exit_plan_mode",
            &serde_json::json!({ "plan": PLAN }).to_string(),
        ),
        Reply::text("I will stay in plan mode."),
        Reply::text("Implementing now."),
    ]);
    let run = Run::new();
    let on = run.headless(&server, "/plan");
    assert_eq!(
        (on.status.code(), stdout(&on)),
        (
            Some(0),
            "Plan mode on. Leave it with /plan off.\n".to_string()
        ),
        "{}",
        stderr(&on)
    );
    let id = run.only_session();
    let resume = |task: &str| {
        run.cmd(&server, &["--profile", "headless", "--resume", &id, task])
            .output()
            .unwrap()
    };
    let planned = resume("design a cache");
    assert_eq!(
        (planned.status.code(), stdout(&planned)),
        (Some(0), "I will stay in plan mode.\n".to_string()),
        "{}",
        stderr(&planned)
    );
    let off = resume("/plan off");
    assert_eq!(
        (off.status.code(), stdout(&off)),
        (Some(0), "Plan mode off.\n".to_string()),
        "{}",
        stderr(&off)
    );
    let after = resume("go ahead");
    assert_eq!(stdout(&after), "Implementing now.\n", "{}", stderr(&after));

    // The agent loop's requests (the title request carries no tools).
    let requests: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .collect();
    assert_eq!(requests.len(), 3);
    let system = |i: usize| -> String {
        requests[i]
            .messages()
            .iter()
            .filter(|m| m["role"] == "system")
            .filter_map(|m| m["content"].as_str())
            .collect()
    };
    let tools = |i: usize| -> Vec<String> { requests[i].tool_names() };
    assert!(system(0).contains(SECTION), "{}", system(0));
    assert!(system(1).contains(SECTION));
    assert!(!system(2).contains(SECTION), "{}", system(2));
    assert!(tools(0).contains(&"exit_plan_mode".to_string()));
    assert_eq!(
        tools(0),
        tools(2),
        "the tool catalog does not change with the mode"
    );
    let review = requests[1].last_tool_output().unwrap();
    assert!(
        review.contains("no channel to ask the user is available"),
        "{review}"
    );
    let last_user = requests[2]
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect::<Vec<_>>();
    assert!(
        last_user.iter().any(|t| t.contains("Plan mode is now off")),
        "{last_user:?}"
    );

    let modes: Vec<Value> = run
        .session()
        .iter()
        .filter(|e| e.is("plan/mode"))
        .map(|e| e.data["active"].clone())
        .collect();
    assert_eq!(modes, [Value::Bool(true), Value::Bool(false)]);
}

/// `/plan <message>` selects plan mode and sends the message: the run waits for that turn
/// and prints its answer, and the request carries the plan section.
#[test]
fn plan_with_a_message_runs_the_turn_in_plan_mode() {
    let server = MockServer::with_title_replies([Reply::text("Here is how I would plan it.")]);
    let run = Run::new();
    let out = run.headless(&server, "/plan design a cache");
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "Here is how I would plan it.\n".to_string()),
        "{}",
        stderr(&out)
    );
    let request = server
        .requests()
        .into_iter()
        .find(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .unwrap();
    let messages = request.messages();
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .contains("Plan mode is on."),
        "{}",
        messages[0]
    );
    assert!(
        messages
            .iter()
            .any(|m| m["role"] == "user" && m["content"] == "design a cache"),
        "{messages:?}"
    );
    let types: Vec<String> = run
        .session()
        .iter()
        .map(|e| e.event_type.to_string())
        .filter(|t| t == "plan/mode" || t.starts_with("command/") || t == "turn/start")
        .collect();
    assert_eq!(
        types,
        ["command/run", "plan/mode", "turn/start", "command/done"]
    );
}

/// Upstream 0.2's launcher grammar: launcher flags after the app name
/// (`dsh headless --patch F "task"`), and any profile by its name (`dsh sdk --help`).
#[test]
fn launcher_flags_follow_the_app_name() {
    let server = MockServer::with_title_replies([Reply::text("patched run")]);
    let run = Run::new();
    let patch = run.work.path().join("extra.yml");
    std::fs::write(
        &patch,
        "- id: spill-policy\n  config:\n    maxInlineTokens: 777\n",
    )
    .unwrap();
    let patch = patch.to_string_lossy().into_owned();
    let dump = run
        .cmd(&server, &["headless", "--patch", &patch, "--dump-config"])
        .output()
        .unwrap();
    assert_eq!(dump.status.code(), Some(0), "{}", stderr(&dump));
    assert!(
        stdout(&dump).contains("maxInlineTokens: 777"),
        "{}",
        stdout(&dump)
    );
    let out = run
        .cmd(&server, &["headless", "--patch", &patch, "go"])
        .output()
        .unwrap();
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "patched run\n".to_string()),
        "{}",
        stderr(&out)
    );
    // A patch that does not exist is named: the flag reached the launcher.
    let missing = run
        .cmd(&server, &["headless", "--patch", "nope.yml", "go"])
        .output()
        .unwrap();
    assert_ne!(missing.status.code(), Some(0));
    assert!(
        stderr(&missing).contains("nope.yml"),
        "{}",
        stderr(&missing)
    );
    let help = run.cmd(&server, &["sdk", "--help"]).output().unwrap();
    assert_eq!(help.status.code(), Some(0), "{}", stderr(&help));
    assert!(!stdout(&help).is_empty());
}

/// A 0.2.1 profile patch: `system-prompt.personaPrefix` and `personaSuffix` shape the
/// prompt (first and last), the 0.1 `persona` still works, and a key the row does not know
/// is an error naming it.
#[test]
fn persona_prefix_and_suffix_from_a_02_patch() {
    let server = MockServer::with_title_replies([Reply::text("one"), Reply::text("two")]);
    let run = Run::new();
    let write = |name: &str, text: &str| {
        let p = run.work.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let patch = write(
        "p02.yml",
        "- id: system-prompt\n  config:\n    personaPrefix: PREFIX for {{model}}\n    personaSuffix: SUFFIX at the end\n",
    );
    let out = run
        .cmd(&server, &["headless", "--patch", &patch, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let system = server.requests()[0].system_text();
    assert!(system.contains("PREFIX for deepseek"), "{system}");
    assert!(system.trim_end().ends_with("SUFFIX at the end"), "{system}");
    let old = write(
        "p01.yml",
        "- id: system-prompt\n  config:\n    persona: OLD persona\n",
    );
    let out = run
        .cmd(&server, &["headless", "--patch", &old, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let system = server.requests().last().unwrap().system_text();
    assert!(system.contains("OLD persona"), "{system}");
    let bad = write(
        "bad.yml",
        "- id: system-prompt\n  config:\n    personaPrefx: typo\n",
    );
    let out = run
        .cmd(&server, &["headless", "--patch", &bad, "go"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("personaPrefx"), "{}", stderr(&out));
}

/// `/help` lists the session's slash commands; `/feedback <text>` leaves the remark in the
/// session log (`feedback/record`), as upstream 0.2.1's command does.
#[test]
fn help_lists_commands_and_feedback_is_logged() {
    let server = MockServer::start();
    let run = Run::new();
    let help = run.cmd(&server, &["headless", "/help"]).output().unwrap();
    assert_eq!(help.status.code(), Some(0), "{}", stderr(&help));
    let text = stdout(&help);
    for command in ["/feedback <text>", "/permission", "/plan", "/compact"] {
        assert!(text.contains(command), "{command}: {text}");
    }
    let out = run
        .cmd(&server, &["headless", "/feedback the diff view was great"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("Feedback recorded in session session-"),
        "{}",
        stdout(&out)
    );
    let id = stdout(&out)
        .trim()
        .trim_start_matches("Feedback recorded in session ")
        .trim_end_matches('.')
        .to_string();
    let events = run.events(&id);
    let remark = events
        .iter()
        .find(|e| e.is("feedback/record"))
        .expect("the remark is in the log");
    assert_eq!(remark.data["text"], "the diff view was great");
    let empty = run
        .cmd(&server, &["headless", "/feedback"])
        .output()
        .unwrap();
    assert_eq!(empty.status.code(), Some(1));
    assert!(server.requests().is_empty(), "no command reached the model");
}

/// `dsh rescue --from-default-profile headless`: a custom profile recreated from a shipped
/// template (its old patch moved aside), then booted by its name alone.
#[test]
fn a_custom_profile_from_a_shipped_template() {
    let server = MockServer::with_title_replies([Reply::text("rescued")]);
    let run = Run::new();
    let dir = run.dsh_home().join("profiles/rescue");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("package.json"), "{ broken").unwrap();
    let out = run
        .cmd(
            &server,
            &["rescue", "--from-default-profile", "headless", "go"],
        )
        .output()
        .unwrap();
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "rescued\n".to_string()),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("the previous one is kept at"),
        "{}",
        stderr(&out)
    );
    let manifest = std::fs::read_to_string(dir.join("package.json")).unwrap();
    assert!(manifest.contains("@deepseek-ai/dsh-headless"), "{manifest}");
    let dump = run
        .cmd(&server, &["rescue", "--dump-config"])
        .output()
        .unwrap();
    assert_eq!(dump.status.code(), Some(0), "{}", stderr(&dump));
    assert!(stdout(&dump).contains("headless-runner"));
    let shipped = run
        .cmd(&server, &["web", "--from-default-profile", "headless"])
        .output()
        .unwrap();
    assert_ne!(shipped.status.code(), Some(0));
    assert!(
        stderr(&shipped).contains("shipped profile"),
        "{}",
        stderr(&shipped)
    );
    let unknown = run
        .cmd(&server, &["other", "--from-default-profile", "nope"])
        .output()
        .unwrap();
    assert!(
        stderr(&unknown).contains("no shipped profile is called \"nope\""),
        "{}",
        stderr(&unknown)
    );
}

/// Upstream 0.2.1 adds `dsh_session_log` (the log rows the provider has not accepted yet)
/// and `dsh_plugin_packages` to every DeepSeek request. Here neither leaves the machine
/// unless its row is enabled; enabled, they have 0.2.1's shape, each request carries what
/// follows the last accepted row, the acceptance is logged, and the rows are the ones the
/// session's own log file holds.
#[test]
fn session_log_and_plugin_inventory_travel_only_when_enabled() {
    let loop_requests = |server: &MockServer| -> Vec<Value> {
        server
            .requests()
            .into_iter()
            .filter(|r| !r.tool_names().is_empty())
            .map(|r| r.json.unwrap())
            .collect()
    };
    // Off by default: not a byte of either.
    let server = MockServer::with_title_replies([Reply::text("plain")]);
    let run = Run::new();
    assert_eq!(run.headless(&server, "hello").status.code(), Some(0));
    for request in server.requests() {
        let body = request.json.unwrap();
        assert!(body.get("dsh_session_log").is_none(), "{body}");
        assert!(body.get("dsh_plugin_packages").is_none(), "{body}");
    }
    assert!(
        !run.session()
            .iter()
            .any(|e| e.is(dsh_persistence::DELIVERY_ACCEPTED))
    );

    // Enabled by a patch, over a tool round trip (two loop requests).
    let server = MockServer::with_title_replies([
        common::call("c1", "bash", json!({"command": "echo uploaded"})),
        Reply::text("done"),
    ]);
    let run = Run::new();
    let patch = run.work.path().join("upload.yml");
    std::fs::write(
        &patch,
        "- id: session-log-deepseek\n  config:\n    enabled: true\n\
         - id: plugin-package-inventory-deepseek\n  config:\n    enabled: true\n",
    )
    .unwrap();
    let patch = patch.to_string_lossy().into_owned();
    let out = run
        .cmd(&server, &["headless", "--patch", &patch, "run it"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = run.only_session();
    let requests = loop_requests(&server);
    assert_eq!(requests.len(), 2);
    // Every request carries the field (the title request included, which may run before,
    // between or beside the loop's): dense rows after `afterSeq` through `throughSeq`.
    let mut all: Vec<Value> = server
        .aux_requests()
        .into_iter()
        .chain(server.requests())
        .map(|r| r.json.unwrap()["dsh_session_log"].clone())
        .collect();
    assert_eq!(all.len(), 3, "a title request and two loop requests");
    all.sort_by_key(|f| f["afterSeq"].as_i64());
    let mut uploaded = std::collections::BTreeSet::new();
    for field in &all {
        assert_eq!(field["version"], 1, "{field}");
        assert_eq!(field["sessionFormatVersion"], 4, "{field}");
        assert_eq!(field["session"]["id"], id.as_str(), "{field}");
        assert_eq!(field["session"]["version"], 4, "{field}");
        assert!(field["session"].get("type").is_none(), "{field}");
        let seqs: Vec<i64> = field["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_i64().unwrap())
            .collect();
        let after = field["afterSeq"].as_i64().unwrap();
        let expected: Vec<i64> = (after + 1..=field["throughSeq"].as_i64().unwrap()).collect();
        assert_eq!(
            seqs, expected,
            "dense rows after afterSeq through throughSeq"
        );
        uploaded.extend(seqs);
    }
    // Together they delivered every row from the first on, with no gap; the first request
    // started from nothing.
    let through = *uploaded.last().unwrap();
    assert_eq!(uploaded, (0..=through).collect());
    assert_eq!(all[0]["afterSeq"], -1);
    let types_of = |field: &Value| -> Vec<String> {
        field["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        types_of(&all[0]).contains(&"user/message".to_string()),
        "{}",
        all[0]
    );
    // The second loop request sends only what followed an acceptance, its tool result too.
    let second = &requests[1]["dsh_session_log"];
    assert!(second["afterSeq"].as_i64().unwrap() >= 0, "{second}");
    let second_types = types_of(second);
    assert!(
        second_types.contains(&"tool/result".to_string()),
        "{second_types:?}"
    );
    assert!(
        second_types.contains(&"session-log-deepseek/delivery-accepted".to_string()),
        "{second_types:?}"
    );
    // Every uploaded row is the row of the same seq in the session's own log file.
    let raw = run.files().read_raw(&id).unwrap();
    let stored: Vec<Value> = raw
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for request in &requests {
        for event in request["dsh_session_log"]["events"].as_array().unwrap() {
            let seq = event["seq"].as_u64().unwrap() as usize;
            assert_eq!(event, &stored[seq], "row {seq}");
        }
    }
    let accepted: Vec<&Value> = stored
        .iter()
        .filter(|e| e["type"] == "session-log-deepseek/delivery-accepted")
        .collect();
    assert!(accepted.len() >= 2, "{accepted:?}");
    assert_eq!(accepted[0]["data"]["sessionId"], id.as_str());
    assert_eq!(accepted[0]["data"]["sessionFormatVersion"], 4);
    // The plugin inventory: sorted, unique, naming this tree's plugins.
    let packages = &requests[0]["dsh_plugin_packages"];
    assert_eq!(packages["version"], 1, "{packages}");
    let names: Vec<&str> = packages["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(names, sorted);
    assert!(
        names.contains(&"@deepseek-ai/dsh-llm-deepseek-api-key"),
        "{names:?}"
    );
    assert!(
        names.contains(&"@deepseek-ai/dsh-session-log-deepseek"),
        "{names:?}"
    );

    // A maxBytes no row fits in: the run works, nothing is uploaded.
    let server = MockServer::with_title_replies([Reply::text("small")]);
    let run = Run::new();
    let patch = run.work.path().join("tiny.yml");
    std::fs::write(
        &patch,
        "- id: session-log-deepseek\n  config:\n    enabled: true\n    maxBytes: 200\n",
    )
    .unwrap();
    let patch = patch.to_string_lossy().into_owned();
    let out = run
        .cmd(&server, &["headless", "--patch", &patch, "hello"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for request in server.requests() {
        assert!(request.json.unwrap().get("dsh_session_log").is_none());
    }
}
