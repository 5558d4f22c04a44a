//! `dsh --profile sdk` driven by upstream's published Python SDK (`deepseek-harness-sdk`,
//! installed by `.ci/run` into a virtualenv named by `DSH_SDK_PYTHON`), against the mock
//! LLM: turns in one session, a bash call, the working-directory calls, a resume in a
//! fresh process. Skips, saying why, without that Python.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;

use dsh_test_support::mock_server::{MockServer, Reply};
use pretty_assertions::assert_eq;
use serde_json::Value;

pub(crate) fn sdk_python() -> Option<PathBuf> {
    let python = std::env::var_os("DSH_SDK_PYTHON").map(PathBuf::from);
    let usable = python.as_ref().is_some_and(|p| {
        Command::new(p)
            .args(["-c", "import deepseek_harness"])
            .status()
            .is_ok_and(|s| s.success())
    });
    if !usable {
        dsh_test_support::prereq::skip(
            "set DSH_SDK_PYTHON to a Python with deepseek-harness-sdk installed (.ci/run does)",
        );
        return None;
    }
    python
}

fn run(python: &Path, scenario: &str, home: &Path, work: &Path, server: &MockServer) -> Value {
    run_with(python, scenario, home, work, server, &[])
}

/// [`run`] with `env` added to the SDK program's environment (which its runtime inherits).
pub(crate) fn run_with(
    python: &Path,
    scenario: &str,
    home: &Path,
    work: &Path,
    server: &MockServer,
    env: &[(&str, &str)],
) -> Value {
    let out = Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk-client/run.py"))
        .args([scenario, env!("CARGO_BIN_EXE_dsh")])
        .arg(home.join(".dsh"))
        .arg(work)
        .arg(server.url())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .envs(env.iter().copied())
        .current_dir(work)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{scenario}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[test]
fn the_python_sdk_runs_turns_moves_and_resumes_a_session() {
    let Some(python) = sdk_python() else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join("sub")).unwrap();
    let work_dir = work.path().canonicalize().unwrap();
    let server = MockServer::with_replies([
        Reply::text("answer one"),
        Reply::tool_call(
            "c1",
            "bash",
            r#"{"command":"echo from-bash","description":"echo"}"#,
        ),
        Reply::echo_tool_output(),
        Reply::tool_call("c2", "bash", r#"{"command":"pwd","description":"where"}"#),
        Reply::echo_tool_output(),
        Reply::text("after the restart, still here"),
    ])
    .answer_untooled("SDK title");

    let turns = run(&python, "turns", home.path(), &work_dir, &server);
    assert_eq!(turns["first"]["final_response"], "answer one");
    assert_eq!(turns["first"]["finish_reason"], "completed");
    assert_eq!(turns["second"]["final_response"], "from-bash\n");
    let types: Vec<&str> = turns["second"]["event_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        types.contains(&"tool/call")
            && types.contains(&"tool/result")
            && types.last() == Some(&"turn/end"),
        "{types:?}"
    );
    // 0.2's event shapes (what the published SDK reads): the log's v4 rows with dense
    // seqs, a `role: "tool"` result naming its call, the system prompt as its own row, and
    // no stream chunk of its own.
    let result = &turns["second"]["tool_results"][0];
    assert_eq!(result["role"], "tool", "{result}");
    assert_eq!(result["toolCallId"], "c1");
    assert_eq!(result["isError"], false);
    assert_eq!(result["content"][0]["text"], "from-bash\n");
    let first_types = turns["first"]["event_types"].to_string();
    assert!(first_types.contains("\"system/message\""), "{first_types}");
    let mut seqs = Vec::new();
    for run in ["first", "second", "third"] {
        let types = turns[run]["event_types"].to_string();
        assert!(!types.contains("assistant/chunk"), "{run}: {types}");
        seqs.extend(
            turns[run]["seqs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_u64().unwrap()),
        );
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(
        turns["second"]["statuses"]
            .as_array()
            .unwrap()
            .last()
            .unwrap(),
        "idle"
    );
    let sub = work_dir.join("sub").display().to_string();
    assert_eq!(turns["cwd"], work_dir.display().to_string());
    assert_eq!(turns["moved"], sub.as_str());
    assert_eq!(turns["after"], sub.as_str());
    assert_eq!(
        turns["third"]["final_response"],
        format!("{sub}\n"),
        "the bash call ran in the new directory"
    );
    assert!(
        turns["bad_cwd"]
            .as_str()
            .unwrap()
            .contains("directory does not exist"),
        "{}",
        turns["bad_cwd"]
    );

    let resumed = run(&python, "resume", home.path(), &work_dir, &server);
    assert_eq!(
        resumed["resumed"]["final_response"],
        "after the restart, still here"
    );
    // A resumed session's rows go on from the stored log's.
    let resumed_seqs: Vec<u64> = resumed["resumed"]["seqs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert!(
        resumed_seqs[0] > *seqs.last().unwrap()
            && resumed_seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "{resumed_seqs:?} after {seqs:?}"
    );
    let last = server.requests().last().unwrap().json.clone().unwrap();
    let history = last["messages"].to_string();
    assert!(
        history.contains("first question") && history.contains("answer one"),
        "the resumed turn saw the history"
    );
    assert!(
        resumed["missing"]
            .as_str()
            .unwrap()
            .contains("session \"no-such-session\" not found"),
        "{}",
        resumed["missing"]
    );
}

/// The protocol without the SDK: errors as upstream words them, the receipt before the
/// answer, `idle` at the end of the turn, `shutdown` after everything is flushed.
/// `dsh --profile sdk` on pipes: the process, a frame sender and a frame reader.
fn runtime(
    home: &Path,
    work: &Path,
    server: &MockServer,
) -> (
    std::process::Child,
    impl FnMut(Value),
    impl FnMut() -> Value,
) {
    runtime_of("sdk", home, work, server)
}

/// [`runtime`] on another profile.
fn runtime_of(
    profile: &str,
    home: &Path,
    work: &Path,
    server: &MockServer,
) -> (
    std::process::Child,
    impl FnMut(Value),
    impl FnMut() -> Value,
) {
    use std::io::{BufRead, BufReader, Write};
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["--profile", profile])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("DSH_HOME", home.join(".dsh"))
        .env("DEEPSEEK_API_KEY", "sk-test")
        .env("DEEPSEEK_BASE_URL", server.url())
        .current_dir(work)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let send = move |v: Value| {
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    };
    let next = move || -> Value { serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap() };
    (child, send, next)
}

#[test]
fn the_runtime_speaks_the_sdk_protocol() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server =
        MockServer::with_replies([Reply::text("hello from the runtime")]).answer_untooled("T");
    let (mut child, mut send, mut next) = runtime(home.path(), work.path(), &server);
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": "a", "method": "session/prompt", "params": {"sessionId": "s"}}),
    );
    assert_eq!(next()["error"]["message"], "SDK server is not initialized");
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": "b", "method": "initialize", "params": {"cwd": work.path(), "provider": "nope", "model": "m"}}),
    );
    assert_eq!(
        next()["error"]["message"],
        "no adapter registered for provider \"nope\""
    );
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": "c", "method": "initialize", "params": {"cwd": work.path(), "provider": "deepseek-official", "model": "deepseek-v4-flash"}}),
    );
    assert_eq!(
        next()["result"]["serverInfo"]["name"],
        "deepseek-harness-sdk-runtime"
    );
    send(serde_json::json!({"jsonrpc": "2.0", "id": "d", "method": "bogus"}));
    assert_eq!(
        next()["error"],
        serde_json::json!({"code": -32603, "message": "unknown DeepSeek Harness SDK runtime method: bogus"})
    );
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": "e", "method": "session/prompt", "params": {"sessionId": "s1", "contentBlocks": [{"type": "text", "text": "hi"}]}}),
    );
    let mut receipt = None;
    let message_id = loop {
        let f = next();
        if f["id"] == "e" {
            break f["result"]["messageId"].as_str().unwrap().to_string();
        }
        let inserted = &f["params"]["event"]["data"]["inserted"][0]["id"];
        if f["params"]["event"]["type"] == "agent/inbox/spliced" && inserted.is_string() {
            receipt = Some(inserted.clone());
        }
    };
    assert_eq!(
        receipt,
        Some(Value::from(message_id)),
        "receipt before the answer"
    );
    let mut answer = None;
    loop {
        let f = next();
        if f["params"]["event"]["type"] == "assistant/message" {
            answer = f["params"]["event"]["data"]["message"]["content"][0]["text"]
                .as_str()
                .map(str::to_owned);
        }
        if f["method"] == "session.status" && f["params"]["status"] == "idle" {
            break;
        }
    }
    assert_eq!(answer.as_deref(), Some("hello from the runtime"));
    send(serde_json::json!({"jsonrpc": "2.0", "id": "f", "method": "shutdown"}));
    loop {
        let f = next();
        if f["id"] == "f" {
            assert_eq!(f["result"], serde_json::json!({}));
            break;
        }
    }
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_delegated_child_is_reported_started_and_finished() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::with_replies([
        Reply::tool_call(
            "d1",
            "subagent",
            r#"{"description":"Probe","prompt":"Say child answer 42.","run_in_background":false}"#,
        ),
        Reply::text("child answer 42."),
        Reply::text("The child said child answer 42."),
    ])
    .answer_untooled("T");
    let (mut child, mut send, mut next) = runtime(home.path(), work.path(), &server);
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"cwd": work.path(), "provider": "deepseek-official", "model": "deepseek-v4-flash"}}),
    );
    assert!(next()["result"].is_object());
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "root", "contentBlocks": [{"type": "text", "text": "delegate"}]}}),
    );
    let (mut started, mut finished) = (None, None);
    loop {
        let f = next();
        match f["method"].as_str() {
            Some("subagent.started") => started = Some(f["params"].clone()),
            Some("subagent.finished") => finished = Some(f["params"].clone()),
            Some("session.status")
                if f["params"]["sessionId"] == "root" && f["params"]["status"] == "idle" =>
            {
                break;
            }
            _ => {}
        }
    }
    let started = started.expect("subagent.started");
    let finished = finished.expect("subagent.finished before the parent is idle");
    assert_eq!(started["parentSessionId"], "root");
    let child_id = started["childSessionId"].clone();
    assert_eq!(
        finished,
        serde_json::json!({
            "provider": "spawn",
            "agentId": child_id,
            "parentSessionId": "root",
            "childSessionId": child_id,
            "status": "ok",
            "stopReason": "completed",
            "lastAssistantMessage": [{"type": "text", "text": "child answer 42."}],
        })
    );
    send(serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "shutdown"}));
    while next()["id"] != 3 {}
    assert!(child.wait().unwrap().success());
}

#[test]
fn the_sdk_minimal_profile_offers_upstream_021s_minimal_tools_and_a_persistent_bash() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join("inner")).unwrap();
    let server = MockServer::with_replies([
        Reply::tool_call(
            "c1",
            "bash",
            &serde_json::json!({"command": "cd inner && export MARK=kept"}).to_string(),
        ),
        Reply::tool_call(
            "c2",
            "bash",
            &serde_json::json!({"command": "echo \"$MARK in $(basename $PWD)\""}).to_string(),
        ),
        Reply::text("done"),
    ])
    .answer_untooled("T");
    let (mut child, mut send, mut next) =
        runtime_of("sdk-minimal", home.path(), work.path(), &server);
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": "i", "method": "initialize",
        "params": {"cwd": work.path(), "provider": "deepseek-official", "model": "deepseek-v4-flash"}}),
    );
    assert!(next()["result"].is_object());
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": "p", "method": "session/prompt",
        "params": {"sessionId": "m", "contentBlocks": [{"type": "text", "text": "go"}]}}),
    );
    let mut results = Vec::new();
    loop {
        let f = next();
        let e = &f["params"]["event"];
        if e["type"] == "tool/result" {
            results.push(e["data"]["message"]["content"][0]["text"].clone());
        }
        if f["method"] == "session.status" && f["params"]["status"] == "idle" {
            break;
        }
    }
    // The shell kept its directory and variables between calls.
    assert!(
        results[1]
            .as_str()
            .unwrap_or_default()
            .contains("kept in inner"),
        "{results:?}"
    );
    let request = server
        .requests()
        .into_iter()
        .find(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .unwrap();
    let mut names = request.tool_names();
    names.sort();
    assert_eq!(
        names,
        ["bash", "read_image", "working_directory"],
        "upstream 0.2.1's minimal set"
    );
    send(serde_json::json!({"jsonrpc": "2.0", "id": "s", "method": "shutdown"}));
    while next()["id"] != "s" {}
    assert!(child.wait().unwrap().success());
}
