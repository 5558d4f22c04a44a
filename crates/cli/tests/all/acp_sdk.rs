//! `dsh acp` driven by the official ACP TypeScript SDK (`@agentclientprotocol/sdk`, in
//! `tests/acp-client`, installed by `.ci/run` with `npm ci`), with every frame the agent
//! sends validated against the SDK's own schemas. Skips, saying why, without node or the
//! installed SDK.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dsh_test_support::mock_server::{Completion, MockServer, Reply, ToolCall};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

pub(crate) fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/acp-client")
}

pub(crate) fn sdk_ready() -> bool {
    let node = Command::new("node").arg("--version").output().is_ok();
    let sdk = client_dir()
        .join("node_modules/@agentclientprotocol/sdk/package.json")
        .is_file();
    if !(node && sdk) {
        dsh_test_support::prereq::skip(
            "the ACP SDK driver needs node and `npm ci` in crates/cli/tests/acp-client (.ci/run does it)",
        );
    }
    node && sdk
}

struct Editor {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Editor {
    fn new() -> Self {
        Self {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
        }
    }

    /// One client process running `script` against a fresh `dsh acp`.
    fn drive(&self, server: &MockServer, mode: &str, script: Value) -> Value {
        let file = self.home.path().join("script.json");
        drive_script(&file, &script, |c| {
            c.env("HOME", self.home.path())
                .env("DSH_HOME", self.home.path().join(".dsh"))
                .env("DEEPSEEK_API_KEY", "sk-test")
                .env("DEEPSEEK_BASE_URL", server.url())
                .env("DSH_PERMISSION_MODE", mode)
                .env("WORKDIR", self.work.path())
                .current_dir(self.work.path());
        })
    }
}

/// Writes `script` to `file` and runs the SDK client on it against `dsh acp`, in an
/// environment holding only `PATH` and what `configure` adds; the client's report, whose
/// every agent frame must have validated.
pub(crate) fn drive_script(
    file: &Path,
    script: &Value,
    configure: impl FnOnce(&mut Command),
) -> Value {
    std::fs::write(file, script.to_string()).unwrap();
    let mut command = Command::new("node");
    command
        .arg(client_dir().join("drive.mjs"))
        .arg(env!("CARGO_BIN_EXE_dsh"))
        .arg(file)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    configure(&mut command);
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "driver failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(
        report["schemaErrors"],
        json!([]),
        "every agent frame validates"
    );
    report
}

fn updates<'a>(report: &'a Value, kind: &str) -> Vec<&'a Value> {
    report["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["update"]["sessionUpdate"] == kind)
        .collect()
}

fn call_updates<'a>(report: &'a Value, call: &str) -> Vec<&'a Value> {
    report["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["update"]["toolCallId"] == call)
        .map(|u| &u["update"])
        .collect()
}

fn text_of(chunks: &[&Value]) -> String {
    chunks
        .iter()
        .filter_map(|u| u["update"]["content"]["text"].as_str())
        .collect()
}

#[test]
fn tool_calls_diffs_plans_and_streamed_text_reach_the_editor() {
    if !sdk_ready() {
        return;
    }
    let editor = Editor::new();
    std::fs::write(editor.work.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
    let notes = editor.work.path().join("notes.txt").display().to_string();
    let answer = "The file now starts with ALPHA, and the plan is recorded. ".repeat(4);
    let server = MockServer::with_replies([
        Reply::completion(
            Completion {
                reasoning: Some("Check the shell first.".into()),
                ..Completion::default()
            }
            .tool_call(ToolCall::new(
                "b1",
                "bash",
                r#"{"command":"echo hi","description":"say hi"}"#,
            )),
        ),
        Reply::tool_call("r1", "read", &json!({"file_path": notes}).to_string()),
        Reply::tool_call(
            "e1",
            "edit",
            &json!({"file_path": notes, "old_string": "alpha", "new_string": "ALPHA"}).to_string(),
        ),
        Reply::tool_call(
            "t1",
            "todo_write",
            r#"{"todos":[{"content":"edit notes","status":"completed"},{"content":"report","status":"in_progress"}]}"#,
        ),
        Reply::completion(Completion::text(answer.clone()).delta_chars(24))
            .pause_after_event(3, Duration::from_millis(150))
            .pause_after_event(6, Duration::from_millis(150)),
    ])
    .answer_untooled("Notes title");
    let report = editor.drive(
        &server,
        "workspace-write",
        json!({"fs": true, "steps": [
            {"do": "initialize"}, {"do": "new"}, {"do": "prompt", "text": "edit the notes"}
        ]}),
    );
    let results = report["results"].as_array().unwrap();
    assert_eq!(results[0]["ok"]["agentCapabilities"]["loadSession"], true);
    assert_eq!(
        results[1]["ok"]["modes"]["currentModeId"],
        "workspace-write"
    );
    assert_eq!(results[2]["ok"]["stopReason"], "end_turn", "{}", results[2]);

    // The shell call: announced, running, finished with its output.
    let bash = call_updates(&report, "b1");
    assert_eq!(bash[0]["sessionUpdate"], "tool_call");
    assert_eq!(
        (
            bash[0]["title"].as_str(),
            bash[0]["kind"].as_str(),
            bash[0]["status"].as_str()
        ),
        (Some("echo hi"), Some("execute"), Some("pending"))
    );
    assert!(bash.iter().any(|u| u["status"] == "in_progress"));
    let last = bash.last().unwrap();
    assert_eq!(last["status"], "completed");
    assert_eq!(last["content"][0]["content"]["text"], "hi\n");

    // The edit: a diff with the absolute path.
    let edit = call_updates(&report, "e1");
    assert_eq!(edit[0]["kind"], "edit");
    assert_eq!(edit[0]["locations"][0]["path"], notes);
    let diff = &edit.last().unwrap()["content"][0];
    assert_eq!(diff["type"], "diff");
    assert_eq!(diff["path"], notes);
    assert!(diff["oldText"].as_str().unwrap().contains("alpha"));
    assert!(diff["newText"].as_str().unwrap().contains("ALPHA"));

    // The editor owned the file: it was read and written through fs/*.
    let methods: Vec<&str> = report["agentRequests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["method"].as_str().unwrap())
        .collect();
    assert!(methods.contains(&"fs/read_text_file"), "{methods:?}");
    assert!(methods.contains(&"fs/write_text_file"), "{methods:?}");
    assert_eq!(
        std::fs::read_to_string(editor.work.path().join("notes.txt")).unwrap(),
        "ALPHA\nbeta\n"
    );

    // The todo list as a plan.
    let plans = updates(&report, "plan");
    assert_eq!(
        plans.last().unwrap()["update"]["entries"],
        json!([
            {"content": "edit notes", "priority": "medium", "status": "completed"},
            {"content": "report", "priority": "medium", "status": "in_progress"}
        ])
    );
    // Reasoning and the answer stream as chunks.
    assert_eq!(
        text_of(&updates(&report, "agent_thought_chunk")),
        "Check the shell first."
    );
    let chunks = updates(&report, "agent_message_chunk");
    assert!(
        chunks.len() >= 3,
        "streamed in several chunks: {}",
        chunks.len()
    );
    assert!(text_of(&chunks).ends_with(&answer));
    assert!(!updates(&report, "available_commands_update").is_empty());
    // Each answer reports what it occupies of the model's window.
    let usage = updates(&report, "usage_update");
    assert!(!usage.is_empty());
    let last = &usage.last().unwrap()["update"];
    assert_eq!(last["used"], 20, "12 input + 8 output tokens: {last}");
    assert!(last["size"].as_u64().unwrap() > 20, "{last}");
}

#[test]
fn a_saved_session_loads_in_a_fresh_process_and_replays_its_history() {
    if !sdk_ready() {
        return;
    }
    let editor = Editor::new();
    let server = MockServer::with_replies([
        Reply::tool_call(
            "c1",
            "bash",
            r#"{"command":"echo first","description":"d"}"#,
        ),
        Reply::text("answer one"),
        Reply::text("answer two"),
    ])
    .answer_untooled("Saved title");
    let first = editor.drive(
        &server,
        "workspace-write",
        json!({"steps": [{"do": "initialize"}, {"do": "new"}, {"do": "prompt", "text": "first question"}]}),
    );
    let id = first["results"][1]["ok"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();

    let second = editor.drive(
        &server,
        "workspace-write",
        json!({"sessionId": id, "steps": [
            {"do": "initialize"}, {"do": "list"}, {"do": "load"},
            {"do": "prompt", "text": "second question"}
        ]}),
    );
    let results = second["results"].as_array().unwrap();
    let listed = results[1]["ok"]["sessions"].as_array().unwrap();
    assert!(
        listed.iter().any(|s| s["sessionId"] == id.as_str()),
        "{listed:?}"
    );
    let load = &results[2];
    assert!(load.get("ok").is_some(), "{load}");
    let replayed: Vec<&Value> = second["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["n"].as_u64() < load["n"].as_u64())
        .collect();
    let kinds: Vec<&str> = replayed
        .iter()
        .map(|u| u["update"]["sessionUpdate"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "user_message_chunk",
            "tool_call",
            "tool_call_update",
            "agent_message_chunk",
            "session_info_update"
        ],
        "the history is replayed before load answers"
    );
    assert_eq!(replayed[0]["update"]["content"]["text"], "first question");
    assert_eq!(
        replayed[2]["update"]["content"][0]["content"]["text"],
        "first\n"
    );
    assert_eq!(replayed[3]["update"]["content"]["text"], "answer one");
    // The latest title: the model's when it landed before the first process ended, else
    // the fallback from the first prompt.
    let title = replayed[4]["update"]["title"].as_str().unwrap();
    assert!(
        ["Saved title", "first question"].contains(&title),
        "{title}"
    );
    assert_eq!(results[3]["ok"]["stopReason"], "end_turn");
    // The continued turn saw the whole history.
    let last = server.requests().last().unwrap().clone();
    let texts = last.json.unwrap()["messages"].to_string();
    assert!(texts.contains("first question") && texts.contains("answer one"));

    // An unknown session is "Resource not found".
    let missing = editor.drive(
        &server,
        "workspace-write",
        json!({"sessionId": "no-such-session", "steps": [{"do": "initialize"}, {"do": "load"}]}),
    );
    assert_eq!(missing["results"][1]["error"]["code"], -32002);
}

#[test]
fn permission_requests_render_in_the_editor_and_every_answer_works() {
    if !sdk_ready() {
        return;
    }
    let editor = Editor::new();
    let escalate = |id: &str, file: &str| {
        Reply::tool_call(
            id,
            "bash",
            &json!({"command": format!("echo hi > {file}"), "description": "write a file",
                    "sandbox_permissions": "danger-full-access", "justification": "asked for"})
            .to_string(),
        )
    };
    let server = MockServer::with_replies([
        escalate("e1", "once.txt"),
        Reply::text("one"),
        escalate("e2", "rejected.txt"),
        Reply::text("two"),
        escalate("e3", "always.txt"),
        Reply::text("three"),
        escalate("e4", "again.txt"),
        Reply::text("four"),
    ])
    .answer_untooled("T");
    let report = editor.drive(
        &server,
        "read-only",
        json!({
            "permissions": ["allow_once", "reject_once", "allow_always"],
            "steps": [
                {"do": "initialize"}, {"do": "new"},
                {"do": "prompt", "text": "1"}, {"do": "prompt", "text": "2"},
                {"do": "prompt", "text": "3"}, {"do": "prompt", "text": "4"},
                {"do": "set_mode", "modeId": "workspace-write"}
            ]
        }),
    );
    let asked: Vec<&Value> = report["agentRequests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["method"] == "session/request_permission")
        .collect();
    assert_eq!(asked.len(), 3, "the fourth call was allowed always");
    let first = &asked[0]["params"];
    assert_eq!(first["toolCall"]["title"], "echo hi > once.txt");
    assert_eq!(first["toolCall"]["kind"], "execute");
    let kinds: Vec<&str> = first["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "reject_once"]);
    // The call was announced before the editor was asked about it.
    let announced = report["updates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["update"]["sessionUpdate"] == "tool_call" && u["update"]["toolCallId"] == "e1")
        .unwrap();
    assert!(announced["n"].as_u64() < asked[0]["n"].as_u64());
    let w = editor.work.path();
    assert_eq!(
        ["once.txt", "rejected.txt", "always.txt", "again.txt"].map(|f| w.join(f).exists()),
        [true, false, true, true]
    );
    let set = report["results"].as_array().unwrap().last().unwrap();
    assert_eq!(set["ok"], json!({}));
    let modes = updates(&report, "current_mode_update");
    assert_eq!(
        modes.last().unwrap()["update"]["currentModeId"],
        "workspace-write"
    );
}

#[test]
fn the_editor_switches_the_model_and_its_reasoning_effort() {
    if !sdk_ready() {
        return;
    }
    let editor = Editor::new();
    let server =
        MockServer::with_replies([Reply::text("one"), Reply::text("two")]).answer_untooled("T");
    let report = editor.drive(
        &server,
        "workspace-write",
        json!({"steps": [
            {"do": "initialize"}, {"do": "new"},
            {"do": "prompt", "text": "first"},
            {"do": "set_config_option", "configId": "model", "value": "deepseek-v4-pro"},
            {"do": "set_config_option", "configId": "reasoning_effort", "value": "low"},
            {"do": "prompt", "text": "second"},
            {"do": "set_config_option", "configId": "model", "value": "no-such-model"}
        ]}),
    );
    let results = report["results"].as_array().unwrap();
    let offered = results[1]["ok"]["configOptions"].as_array().unwrap();
    let model = offered.iter().find(|o| o["id"] == "model").unwrap();
    // `dsh acp` serves the product tree: 0.2.1's default model and catalog.
    assert_eq!(model["currentValue"], "deepseek-flash");
    let values: Vec<&str> = model["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["value"].as_str().unwrap())
        .collect();
    assert!(values.contains(&"deepseek-v4-pro"), "{values:?}");
    let after = results[4]["ok"]["configOptions"].as_array().unwrap();
    assert_eq!(after[0]["currentValue"], "deepseek-v4-pro");
    assert_eq!(after[1]["currentValue"], "low");
    assert_eq!(results[6]["error"]["code"], -32602, "{}", results[6]);
    let models: Vec<String> = server
        .requests()
        .iter()
        .filter_map(|r| r.json.clone())
        .filter(|j| j["tools"].is_array())
        .map(|j| {
            format!(
                "{} {}",
                j["model"].as_str().unwrap_or(""),
                j["output_config"]["effort"].as_str().unwrap_or("-")
            )
        })
        .collect();
    assert_eq!(
        models.first().unwrap().split(' ').next(),
        Some("deepseek-flash")
    );
    assert_eq!(models.last().unwrap(), "deepseek-v4-pro low", "{models:?}");

    // A fresh process that loads the session keeps what the editor chose: the options say
    // so, and the next request asks for it (not the route's default).
    server.push(Reply::text("three"));
    let id = results[1]["ok"]["sessionId"].as_str().unwrap().to_string();
    let again = editor.drive(
        &server,
        "workspace-write",
        json!({"sessionId": id, "steps": [
            {"do": "initialize"}, {"do": "load"}, {"do": "prompt", "text": "third"}
        ]}),
    );
    let loaded = &again["results"][1]["ok"]["configOptions"];
    assert_eq!(loaded[0]["currentValue"], "deepseek-v4-pro", "{loaded}");
    assert_eq!(loaded[1]["currentValue"], "low", "{loaded}");
    let last = server
        .requests()
        .into_iter()
        .filter_map(|r| r.json)
        .rfind(|j| j["tools"].is_array())
        .unwrap();
    assert_eq!(
        (
            last["model"].as_str(),
            last["output_config"]["effort"].as_str()
        ),
        (Some("deepseek-v4-pro"), Some("low"))
    );
}

/// An editor that offers terminals gets the shell commands that run unconfined
/// (`danger-full-access`) in one of its terminals, shown live in the call; a confined
/// command (`workspace-write`) still runs in dsh's sandbox and never reaches the editor.
#[test]
fn unconfined_commands_run_in_the_editors_terminal() {
    if !sdk_ready() {
        return;
    }
    let editor = Editor::new();
    let bash = |id: &str, cmd: &str| {
        Reply::tool_call(
            id,
            "bash",
            &json!({"command": cmd, "description": "run"}).to_string(),
        )
    };
    let server = MockServer::with_replies([
        bash("b1", "echo in-terminal; echo err >&2; exit 3"),
        Reply::text("ran"),
    ])
    .answer_untooled("Terminal title");
    let report = editor.drive(
        &server,
        "danger-full-access",
        json!({"terminal": true, "steps": [
            {"do": "initialize"}, {"do": "new"}, {"do": "prompt", "text": "run it"}
        ]}),
    );
    let results = report["results"].as_array().unwrap();
    assert_eq!(results[2]["ok"]["stopReason"], "end_turn", "{}", results[2]);
    let asked: Vec<&str> = report["agentRequests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        asked,
        [
            "terminal/create",
            "terminal/wait_for_exit",
            "terminal/output",
            "terminal/release"
        ],
        "{report}"
    );
    let create = &report["agentRequests"][0]["params"];
    assert_eq!(create["command"], "bash");
    assert_eq!(
        create["args"],
        json!(["-c", "echo in-terminal; echo err >&2; exit 3"])
    );
    let updates = call_updates(&report, "b1");
    assert!(
        updates
            .iter()
            .any(|u| u["content"][0] == json!({"type": "terminal", "terminalId": "term-1"})),
        "the call shows the terminal: {updates:?}"
    );
    // The model gets the terminal's output and exit code.
    let output = server.requests()[1].last_tool_output().unwrap_or_default();
    assert!(
        output.contains("in-terminal") && output.contains("err") && output.contains('3'),
        "{output}"
    );

    // Confined: the command stays in the sandbox.
    let editor = Editor::new();
    let server = MockServer::with_replies([bash("b2", "echo sandboxed"), Reply::text("ran")])
        .answer_untooled("Terminal title");
    let report = editor.drive(
        &server,
        "workspace-write",
        json!({"terminal": true, "steps": [
            {"do": "initialize"}, {"do": "new"}, {"do": "prompt", "text": "run it"}
        ]}),
    );
    assert_eq!(report["agentRequests"], json!([]), "{report}");
    let output = server.requests()[1].last_tool_output().unwrap_or_default();
    assert!(output.contains("sandboxed"), "{output}");
}

/// In read-only mode a file change asks the editor's user at once (Zed's expectation),
/// instead of failing first and asking only when the model retries with an escalation:
/// allowed, the one write happens; declined, nothing is written.
#[test]
fn a_change_the_mode_forbids_asks_at_once() {
    if !sdk_ready() {
        return;
    }
    for (answer, written) in [("allow_once", true), ("reject_once", false)] {
        let editor = Editor::new();
        let target = editor.work.path().join("notes.txt");
        let server = MockServer::with_replies([
            Reply::tool_call(
                "w1",
                "write",
                &json!({"file_path": target, "content": "new\n"}).to_string(),
            ),
            Reply::text("done"),
        ])
        .answer_untooled("Ask title");
        let report = editor.drive(
            &server,
            "read-only",
            json!({"permissions": [answer], "steps": [
                {"do": "initialize"}, {"do": "new"}, {"do": "prompt", "text": "write it"}
            ]}),
        );
        let asked: Vec<&Value> = report["agentRequests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["method"] == "session/request_permission")
            .collect();
        assert_eq!(asked.len(), 1, "asked once, on the first call: {report}");
        assert_eq!(
            asked[0]["params"]["toolCall"]["toolCallId"], "w1",
            "{report}"
        );
        assert_eq!(target.is_file(), written, "{answer}: {report}");
        // One model request for the call, one after it: no refusal-and-retry round.
        assert_eq!(
            server
                .requests()
                .iter()
                .filter(|r| !r.tool_names().is_empty())
                .count(),
            2,
            "{answer}"
        );
    }
}
