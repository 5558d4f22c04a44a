//! End-to-end tools for real repositories: the `dsh` binary (headless, the default
//! composition with its sandbox) driven by a scripted model on loopback.
//!
//! Background jobs: a dev server started by the model, polled, killed, and nothing left
//! behind; a job left running dies with the session; a finished job is announced at the
//! next step; a flood of output is bounded in memory and spilled.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_session::{Event, types};
use dsh_test_support::mock_server::{MockServer, RecordedRequest, Reply};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::{Run, call, processes_with, stderr, tool_texts};

/// What these tests add to [`Run`].
trait RunExt {
    fn cmd(&self, server: &MockServer, task: &str) -> Command;
    fn headless(&self, server: &MockServer, task: &str) -> Output;
}

impl RunExt for Run {
    fn cmd(&self, server: &MockServer, task: &str) -> Command {
        let mut c = self.base(server);
        c.args(["--profile", "headless", task]);
        c
    }

    fn headless(&self, server: &MockServer, task: &str) -> Output {
        self.cmd(server, task).output().unwrap()
    }
}

/// Waits (bounded) until no process carries `marker`; returns the survivors.
fn survivors(marker: &str) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_with(marker);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A model that polls job `bash-1` (bounded waits) until `ready` shows in what it read,
/// then kills it, reads it once more, lists jobs and answers.
fn poll_until(ready: &'static str, polls: usize) -> Vec<Reply> {
    let seen = Arc::new(AtomicUsize::new(0));
    let mut replies = Vec::new();
    for i in 0..polls {
        let seen = seen.clone();
        replies.push(Reply::dynamic(move |req: &RecordedRequest| {
            let last = req.last_tool_output().unwrap_or_default();
            let phase = seen.load(Ordering::SeqCst);
            if phase == 0 && last.contains(ready) {
                seen.store(1, Ordering::SeqCst);
                return call(
                    &format!("k{i}"),
                    "job_kill",
                    json!({"job_id": "bash-1", "reason": "done with it"}),
                );
            }
            match phase {
                0 => call(
                    &format!("p{i}"),
                    "job_output",
                    json!({"job_id": "bash-1", "wait": true, "timeout_ms": 300}),
                ),
                1 => {
                    seen.store(2, Ordering::SeqCst);
                    call(
                        &format!("w{i}"),
                        "job_output",
                        json!({"job_id": "bash-1", "wait": true, "timeout_ms": 10000}),
                    )
                }
                2 => {
                    seen.store(3, Ordering::SeqCst);
                    call(&format!("l{i}"), "job_list", json!({}))
                }
                _ => Reply::text("finished"),
            }
        }));
    }
    replies
}

#[test]
fn a_dev_server_started_by_the_model_is_polled_killed_and_leaves_no_process() {
    if !have("python3") {
        dsh_test_support::prereq::skip("python3 is not on PATH");
        return;
    }
    let run = Run::new();
    // The workspace path is unique: it marks every process of this run.
    let marker = run.work.path().to_string_lossy().to_string();
    let command = format!("exec python3 -u -m http.server 0 --bind 127.0.0.1 --directory {marker}");
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(call(
        "start",
        "bash",
        json!({"command": command, "description": "Serve the workspace", "run_in_background": true}),
    ));
    server.push_all(poll_until("Serving HTTP on", 60));
    let out = run.headless(&server, "start a dev server, read it, stop it");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        survivors(&marker),
        Vec::<u32>::new(),
        "no process of the job is left"
    );

    let events = run.session();
    let texts = tool_texts(&events);
    assert_eq!(texts[0], "started background job bash-1");
    let served = texts
        .iter()
        .find(|t| t.contains("Serving HTTP on 127.0.0.1 port"))
        .expect("a poll read the server's banner");
    assert!(served.ends_with("\n[status: running]"), "{served}");
    let kill = texts
        .iter()
        .position(|t| t == "requested cancellation of job bash-1")
        .unwrap();
    assert_eq!(
        texts[kill + 1],
        "(no new output)\n[status: killed, signal: SIGTERM]"
    );
    assert_eq!(
        texts[kill + 2],
        format!("bash-1 [bash] killed \u{2014} {command}")
    );
    // The job's life is durable (format v4's job records).
    let settled: Vec<&Value> = events
        .iter()
        .filter(|e| e.is("job/settled"))
        .map(|e| e.data.as_value())
        .collect();
    assert_eq!(settled.len(), 1);
    assert_eq!(
        (
            &settled[0]["status"],
            &settled[0]["cause"],
            &settled[0]["detail"]
        ),
        (&json!("killed"), &json!("kill"), &json!("signal: SIGTERM"))
    );
}

#[test]
fn a_job_left_running_dies_with_the_session() {
    let run = Run::new();
    let marker = format!("{}/still-running", run.work.path().display());
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(call(
        "start",
        "bash",
        json!({"command": format!("exec -a {marker} sleep 300"), "description": "Sleep", "run_in_background": true}),
    ));
    server.push(Reply::text("leaving it running"));
    let started = Instant::now();
    let out = run.headless(&server, "start something long");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the session did not wait for the job"
    );
    assert_eq!(survivors(&marker), Vec::<u32>::new());
    let events = run.session();
    let settled = events
        .iter()
        .find(|e| e.is("job/settled"))
        .expect("settled at teardown");
    assert_eq!(settled.data["cause"], json!("teardown"));
    assert_eq!(settled.data["status"], json!("killed"));
    // Teardown is no completion the model must hear about.
    assert!(!events.iter().any(|e| e.is(types::USER_MESSAGE)
        && e.data.pointer("/source/plugin") == Some(&json!("tool-jobs"))));
}

#[test]
fn a_finished_job_is_announced_at_the_next_step_and_read_once() {
    let run = Run::new();
    let server = MockServer::start().answer_untooled("Mock title");
    let requests = Arc::new(Mutex::new(Vec::<RecordedRequest>::new()));
    server.push(call(
        "start",
        "bash",
        json!({"command": "echo out; echo err >&2; exit 3", "description": "Fail", "run_in_background": true}),
    ));
    // A foreground call that outlasts the job.
    server.push(call(
        "nap",
        "bash",
        json!({"command": "sleep 1", "description": "Wait"}),
    ));
    let r = requests.clone();
    server.push(Reply::dynamic(move |req| {
        r.lock().unwrap().push(req.clone());
        call("read", "job_output", json!({"job_id": "bash-1"}))
    }));
    server.push(call("again", "job_output", json!({"job_id": "bash-1"})));
    server.push(Reply::text("done"));
    let out = run.headless(&server, "run a failing job");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events = run.session();
    assert_eq!(
        tool_texts(&events),
        [
            "started background job bash-1",
            "(no output)",
            "out\n[stderr]\nerr\n[status: completed, exit code: 3]",
            "(no new output)\n[status: completed, exit code: 3]",
        ]
    );
    let notice = "background job bash-1 (bash: echo out; echo err >&2; exit 3) finished [status: completed, exit code: 3]. Use job_output to read what it produced.";
    // The model saw the notice in the request after the step that outlasted the job.
    let seen = requests.lock().unwrap()[0].clone();
    assert!(
        seen.messages()
            .iter()
            .any(|m| m["role"] == "user" && m.to_string().contains(notice)),
        "{:?}",
        seen.messages()
    );
    let entered: Vec<&Arc<Event>> = events
        .iter()
        .filter(|e| {
            e.is(types::USER_MESSAGE)
                && e.data.pointer("/source/plugin") == Some(&json!("tool-jobs"))
        })
        .collect();
    assert_eq!(entered.len(), 1, "one notice");
    assert_eq!(
        entered[0].data["source"],
        json!({"kind": "plugin", "plugin": "tool-jobs", "form": "notice",
               "summary": "bash echo out; echo err >&2; exit 3 [status: completed, exit code: 3]"})
    );
}

/// Peak resident set of a process (kB), from `/proc/<pid>/status`.
fn peak_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[test]
fn a_job_that_floods_output_is_bounded_in_memory_and_spilled() {
    let run = Run::new();
    let server = MockServer::start().answer_untooled("Mock title");
    // 200 MB on stdout: past the 64 MiB spill cap, so only the in-memory tail survives.
    server.push(call(
        "flood",
        "bash",
        json!({"command": "yes | head -c 200000000; echo; echo tail-marker", "description": "Flood", "run_in_background": true}),
    ));
    server.push(call(
        "wait",
        "job_output",
        json!({"job_id": "bash-1", "wait": true, "timeout_ms": 120000}),
    ));
    // 1 MB: over the in-memory tail, within the spill cap.
    server.push(call(
        "mb",
        "bash",
        json!({"command": "head -c 1000000 /dev/zero | tr '\\0' a; echo", "description": "One megabyte", "run_in_background": true}),
    ));
    server.push(call(
        "wait2",
        "job_output",
        json!({"job_id": "bash-2", "wait": true, "timeout_ms": 60000}),
    ));
    server.push(Reply::text("done"));
    let mut child = run
        .cmd(&server, "flood")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        peak = peak.max(peak_rss_kb(pid).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    eprintln!("peak RSS of dsh while a job printed 200 MB: {peak} kB");
    assert!(peak > 0 && peak < 100 * 1024, "peak RSS {peak} kB");

    // The results went through the spill policy: the model saw a preview whose end is the
    // end of what the job printed, then the reads' notices.
    let texts = tool_texts(&run.session());
    let flood = &texts[1];
    assert!(
        flood.contains("y\n\ntail-marker\n[some output was dropped from memory; full output: (unavailable)]\n[status: completed, exit code: 0]"),
        "{}",
        &flood[flood.len().saturating_sub(600)..]
    );
    let mb = &texts[3];
    let prefix = "[some output was dropped from memory; full output: ";
    let at = mb.find(prefix).unwrap_or_else(|| panic!("{mb}"));
    let rest = &mb[at + prefix.len()..];
    let path = &rest[..rest.find("]\n[status: completed, exit code: 0]").unwrap()];
    let spilled = std::fs::read(path).unwrap();
    assert_eq!(spilled.len(), 1_000_001, "the whole stream was spilled");
    assert!(
        Path::new(path).starts_with(run.home.path()),
        "spills live beside the session: {path}"
    );
}

#[test]
fn a_job_dies_when_dsh_is_terminated_mid_turn() {
    let run = Run::new();
    let marker = format!("{}/terminated-parent", run.work.path().display());
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(call(
        "start",
        "bash",
        json!({"command": format!("exec -a {marker} sleep 300"), "description": "Sleep", "run_in_background": true}),
    ));
    // The next model call hangs: dsh is terminated while it waits.
    server.push(Reply::stall(Duration::from_secs(60)));
    let mut child = run
        .cmd(&server, "start something and keep going")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while processes_with(&marker).is_empty() {
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let code = child.wait().unwrap().code();
    assert_eq!(code, Some(143));
    let left = survivors(&marker);
    let described: Vec<String> = left
        .iter()
        .map(|pid| {
            let read = |f: &str| std::fs::read(format!("/proc/{pid}/{f}")).unwrap_or_default();
            format!(
                "{pid}: {} | {}",
                String::from_utf8_lossy(&read("cmdline")).replace('\0', " "),
                String::from_utf8_lossy(&read("stat"))
            )
        })
        .collect();
    assert_eq!(described, Vec::<String>::new());
}

/// A one-route HTTP server on loopback answering every request with `body` (JSON), and
/// recording request bodies.
fn json_server(body: &'static str) -> (String, Arc<Mutex<Vec<String>>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut data = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = stream.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    break;
                }
                data.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&data).to_string();
                if let Some(at) = text.find("\r\n\r\n") {
                    let len: usize = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if data.len() >= at + 4 + len {
                        s.lock().unwrap().push(text[..].to_string());
                        break;
                    }
                }
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, seen)
}

#[test]
fn web_fetch_refuses_loopback_and_web_search_reaches_the_deepseek_provider() {
    let run = Run::new();
    let (page, hits) = json_server("{}");
    let (search, requests) = json_server(
        r#"{"content":[{"type":"web_search_tool_result","content":[{"type":"web_search_result","url":"https://docs.example/guide","title":"Guide","page_age":"2025"}]},{"type":"text","text":"ok","citations":[{"url":"https://docs.example/guide","cited_text":"the guide"}]}]}"#,
    );
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(call(
        "f",
        "web_fetch",
        json!({"url": format!("{page}/admin")}),
    ));
    server.push(call("s", "web_search", json!({"queries": ["dsh guide"]})));
    server.push(Reply::text("done"));
    let out = run
        .cmd(&server, "look things up")
        .env("DEEPSEEK_SEARCH_BASE_URL", &search)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events = run.session();
    let texts = tool_texts(&events);
    let host = page
        .trim_start_matches("http://")
        .split(':')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        texts[0],
        format!(
            "Error: refusing to fetch {host}: it resolves to a non-public address ({host}); set allowPrivateNetwork or allowedHosts on web-fetch-http to permit it"
        )
    );
    assert!(
        hits.lock().unwrap().is_empty(),
        "the refused target saw no request"
    );
    let fetch_result = events.iter().find(|e| e.is(types::TOOL_RESULT)).unwrap();
    assert_eq!(
        fetch_result.data["error"],
        json!({"name": "WebError", "code": "WEB_BLOCKED_URL"})
    );
    assert_eq!(
        texts[1],
        "Sources:\n- [Guide](https://docs.example/guide) \u{2014} the guide (2025)\n\nLink the sources you rely on in your answer, as markdown links to their URLs."
    );
    let sent = requests.lock().unwrap()[0].clone();
    assert!(sent.starts_with("POST /messages "), "{sent}");
    assert!(
        sent.to_ascii_lowercase().contains("x-api-key: sk-test"),
        "{sent}"
    );
    assert!(sent.contains(r#""type":"web_search_20250305""#), "{sent}");
    let recorded = events
        .iter()
        .find(|e| e.is("web/deepseek-search-llm-request"))
        .unwrap();
    assert_eq!(
        recorded.data["body"]["messages"][0]["content"][0]["text"],
        json!("Search the web for: dsh guide")
    );
    assert!(
        !recorded.data.to_value().to_string().contains("sk-test"),
        "no secret in the log"
    );
}

#[test]
fn working_directory_moves_the_session_and_later_tools_start_there() {
    let run = Run::new();
    std::fs::create_dir(run.work.path().join("sub")).unwrap();
    let work = run.work.path().canonicalize().unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(call("get", "working_directory", json!({})));
    server.push(call("cd", "working_directory", json!({"cd": "sub"})));
    server.push(call("missing", "working_directory", json!({"cd": "nope"})));
    server.push(call("empty", "working_directory", json!({"cd": ""})));
    server.push(call(
        "pwd",
        "bash",
        json!({"command": "pwd", "description": "Where am I"}),
    ));
    server.push(call("back", "working_directory", json!({"cd": ".."})));
    server.push(Reply::text("done"));
    let out = run.headless(&server, "move around");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events = run.session();
    let sub = work.join("sub");
    let texts = tool_texts(&events);
    assert_eq!(texts[0], work.display().to_string());
    assert_eq!(texts[1], sub.display().to_string());
    assert!(
        texts[2].contains("working-directory: directory does not exist: \"nope\""),
        "{texts:?}"
    );
    assert!(
        texts[3].contains("working-directory: cd must not be empty"),
        "{texts:?}"
    );
    assert!(
        texts[4].starts_with(&sub.display().to_string()),
        "{texts:?}"
    );
    assert_eq!(texts[5], work.display().to_string());
    // Each move is logged, and the model is told before its next step.
    let moves: Vec<Value> = events
        .iter()
        .filter(|e| e.is(types::WORKING_DIRECTORY_CHANGE))
        .map(|e| e.data.to_value())
        .collect();
    assert_eq!(
        moves,
        [
            json!({"cwd": sub.display().to_string()}),
            json!({"cwd": work.display().to_string()})
        ]
    );
    let notice = format!(
        "The working directory changed from \"{}\" to \"{}\".",
        work.display(),
        sub.display()
    );
    let told = events
        .iter()
        .any(|e| e.data.to_string().contains(&notice.replace('"', "\\\"")));
    assert!(told, "the notice is in the log");
    let asked = server.requests();
    assert!(
        asked.iter().any(|r| r
            .messages()
            .iter()
            .any(|m| m.to_string().contains(&notice.replace('"', "\\\"")))),
        "the model saw the notice"
    );
    // The tool is in the headless tree with upstream's schema.
    let wd = asked[0]
        .tool("working_directory")
        .expect("working_directory is offered");
    assert_eq!(wd["parameters"]["properties"]["cd"]["type"], "string");
    assert_eq!(wd["parameters"].get("required"), None);
}
