//! MCP servers through the `dsh` binary: an `mcp-client` row in a headless run (the tool
//! round trip through the agent loop against the mock LLM, a server killed mid-session, a
//! server that cannot start) and ACP `session/new` with `mcpServers`. The servers are the
//! stub in `crates/mcp/tests/stub_server.py` (python3) and the published
//! `@modelcontextprotocol/server-everything` (`npm ci` in `crates/mcp/tests/servers`); each
//! test skips, saying why, when its server cannot run here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use dsh_session::{Event, types};
use dsh_test_support::mock_server::{MockServer, Reply, ToolCall};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::{Run, stderr};

fn mcp_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../mcp/tests")
}

fn stub_script() -> Option<String> {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        dsh_test_support::prereq::skip("python3 is needed for the stub MCP server");
        return None;
    }
    Some(mcp_dir().join("stub_server.py").display().to_string())
}

fn everything_script() -> Option<String> {
    let script = mcp_dir()
        .join("servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !node || !script.exists() {
        dsh_test_support::prereq::skip(
            "server-everything needs node and `npm ci` in crates/mcp/tests/servers (.ci/run does it)",
        );
        return None;
    }
    Some(script.display().to_string())
}

/// What these tests add to [`Run`].
trait RunExt {
    fn cmd(&self, server: &MockServer) -> Command;
    fn headless(&self, server: &MockServer, rows: &str, task: &str) -> Output;
}

impl RunExt for Run {
    fn cmd(&self, server: &MockServer) -> Command {
        self.base(server)
    }

    /// A headless run with `rows` inserted by a patch.
    fn headless(&self, server: &MockServer, rows: &str, task: &str) -> Output {
        std::fs::write(
            self.work.path().join("mcp.yml"),
            format!("- insert:\n{rows}"),
        )
        .unwrap();
        self.cmd(server)
            .args(["--profile", "headless", "--patch", "mcp.yml", task])
            .output()
            .unwrap()
    }
}

/// One `mcp-client` row as patch YAML (inside `- insert:`).
fn row(id: &str, config: Value) -> String {
    let config = serde_json::to_string(&config).unwrap();
    format!("    - id: {id}\n      name: '@deepseek-ai/dsh-mcp-client'\n      config: {config}\n")
}

/// The `mcp-client` row of server-everything over stdio, named `everything`.
fn everything_row(script: &str) -> String {
    row(
        "mcp-everything",
        json!({"transport": "stdio", "serverName": "everything", "command": "node", "args": [script, "stdio"]}),
    )
}

fn tool_results(events: &[Arc<Event>]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.is(types::TOOL_RESULT))
        .map(|e| {
            let block = &e.data["message"]["content"][0];
            block["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<String>()
        })
        .collect()
}

fn tool_names(request: &dsh_test_support::mock_server::RecordedRequest) -> Vec<String> {
    request.tool_names()
}

#[test]
fn an_mcp_row_round_trips_a_tool_call_through_the_agent_loop() {
    let Some(stub) = stub_script() else { return };
    let run = Run::new();
    let server = MockServer::with_replies([
        Reply::tool_call("c1", "mcp__stub__echo", r#"{"message":"hi"}"#),
        Reply::text("done"),
    ])
    .answer_untooled("T");
    let out = run.headless(
        &server,
        &row(
            "mcp-stub",
            json!({"transport": "stdio", "serverName": "stub", "command": "python3", "args": [stub]}),
        ),
        "use the echo tool",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
    let requests = server.requests();
    let first = tool_names(&requests[0]);
    assert!(first.contains(&"mcp__stub__echo".to_string()), "{first:?}");
    let echo = requests[0].tool("mcp__stub__echo").unwrap();
    assert_eq!(echo["description"], "Echoes its message.");
    assert_eq!(
        echo["parameters"],
        json!({"type": "object", "properties": {"message": {"type": "string"}}})
    );
    assert_eq!(requests[1].last_tool_output().as_deref(), Some("Echo: hi"));
    assert_eq!(tool_results(&run.session()), vec!["Echo: hi"]);
}

#[test]
fn server_everything_round_trips_through_the_agent_loop() {
    let Some(script) = everything_script() else {
        return;
    };
    let run = Run::new();
    let server = MockServer::with_replies([
        Reply::tool_calls(vec![
            ToolCall::new(
                "c1",
                "mcp__everything__echo",
                r#"{"message":"from the loop"}"#,
            ),
            ToolCall::new("c2", "mcp__everything__get-sum", r#"{"a":20,"b":22}"#),
        ]),
        Reply::text("done"),
    ])
    .answer_untooled("T");
    let out = run.headless(&server, &everything_row(&script), "echo");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = tool_results(&run.session());
    assert_eq!(results[0], "Echo: from the loop");
    assert!(results[1].contains("42"), "{results:?}");
}

/// An MCP tool's image reaches an image-capable model as an image (a text-only model gets
/// the placeholder every image gets there), an embedded text resource is shown with its
/// URI, and the server's instructions are in the prompt, through the real server-everything.
#[test]
fn images_and_embedded_resources_of_mcp_results_reach_the_model() {
    let Some(script) = everything_script() else {
        return;
    };
    for (model, takes_images) in [("deepseek-flash", true), ("deepseek-v4-pro", false)] {
        let run = Run::new();
        let server = MockServer::with_replies([
            Reply::tool_calls(vec![
                ToolCall::new("c1", "mcp__everything__get-tiny-image", "{}"),
                ToolCall::new(
                    "c2",
                    "mcp__everything__get-resource-reference",
                    r#"{"resourceType":"Text","resourceId":1}"#,
                ),
            ]),
            Reply::text("done"),
        ])
        .answer_untooled("T");
        let rows = everything_row(&script);
        std::fs::write(
            run.work.path().join("mcp.yml"),
            format!(
                "- insert:\n{rows}- id: agent-default-model\n  config:\n    provider: deepseek-official\n    model: {model}\n"
            ),
        )
        .unwrap();
        let out = run
            .cmd(&server)
            .args(["--profile", "headless", "--patch", "mcp.yml", "look"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{model}: {}", stderr(&out));
        // The server's own instructions are part of the system prompt.
        let system = server.requests()[0].system_text();
        assert!(
            system.contains("Instructions from the MCP server \"everything\"")
                && system.contains("Everything Server"),
            "{system}"
        );
        let second = server.requests()[1].body.clone();
        assert_eq!(
            second.contains(r#""type":"image""#),
            takes_images,
            "{model}: {second}"
        );
        assert_eq!(
            second.contains("[image omitted because this model accepts text only"),
            !takes_images,
            "{model}"
        );
        assert!(
            second.contains("Resource demo://resource/dynamic/text/1 (text/plain):")
                && second.contains("This is a plaintext resource"),
            "{model}: {second}"
        );
        assert!(!second.contains("not passed on"), "{model}");
    }
}

#[test]
fn a_server_killed_mid_session_reconnects_and_the_session_goes_on() {
    let Some(stub) = stub_script() else { return };
    let run = Run::new();
    let starts = run.work.path().join("starts");
    // The model asks for the server's pid, kills it, then echoes until the server is back
    // (a call made during the outage fails with "Connection closed", as upstream's do).
    let killed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pid_name = dsh_mcp::public_tool_name("stub", "get.pid");
    let mut replies = vec![Reply::tool_call("p", &pid_name, "{}")];
    for i in 0..20 {
        let killed = killed.clone();
        replies.push(Reply::dynamic(move |req| {
            let last = req.last_tool_output().unwrap_or_default();
            if !killed.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let pid: i32 = last.trim().parse().expect("a pid");
                Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status()
                    .unwrap();
            } else if last == "Echo: back" {
                return Reply::text("recovered");
            } else {
                std::thread::sleep(Duration::from_millis(100));
            }
            Reply::tool_call(&format!("e{i}"), "mcp__stub__echo", r#"{"message":"back"}"#)
        }));
    }
    let server = MockServer::with_replies(replies).answer_untooled("T");
    let out = run.headless(
        &server,
        &row(
            "mcp-stub",
            json!({"transport": "stdio", "serverName": "stub", "command": "python3", "args": [stub],
                   "env": {"STUB_STARTS": starts.display().to_string()},
                   "reconnect": {"initialDelayMs": 20, "maxDelayMs": 200}}),
        ),
        "kill it",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "recovered");
    let results = tool_results(&run.session());
    assert_eq!(
        results.last().map(String::as_str),
        Some("Echo: back"),
        "{results:?}"
    );
    for r in &results[1..results.len() - 1] {
        assert_eq!(r, "Error: MCP error -32000: Connection closed");
    }
    assert_eq!(std::fs::read_to_string(&starts).unwrap().lines().count(), 2);
}

#[test]
fn a_server_that_cannot_start_is_logged_and_the_run_goes_on_unless_it_must_start() {
    let Some(stub) = stub_script() else { return };
    let run = Run::new();
    let server = MockServer::with_replies([Reply::text("fine without it")]).answer_untooled("T");
    let config = json!({"transport": "stdio", "serverName": "broken", "command": "python3",
                        "args": [stub], "env": {"STUB_MODE": "exit"}, "reconnect": {"enabled": false}});
    let out = run.headless(&server, &row("mcp-broken", config.clone()), "hello");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "fine without it"
    );
    let err = stderr(&out);
    assert!(
        err.contains("mcp-client(broken): connection attempt failed: initialize failed"),
        "{err}"
    );
    assert!(
        !tool_names(&server.requests()[0])
            .iter()
            .any(|t| t.starts_with("mcp__"))
    );

    let strict = Run::new();
    let mut config = config;
    config["failOnStartupError"] = json!(true);
    let out = strict.headless(&server, &row("mcp-broken", config), "hello");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("row \"mcp-broken\" (@deepseek-ai/dsh-mcp-client): mcp-client(broken): initial connection or tool synchronization failed"),
        "{err}"
    );
}

// ------------------------------------------------------------------------- ACP

struct Acp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    frames: std::sync::mpsc::Receiver<Value>,
    next_id: u64,
}

impl Acp {
    fn start(server: &MockServer, run: &Run) -> Self {
        let mut child = run
            .cmd(server)
            .arg("acp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, frames) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            frames,
            next_id: 0,
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        self.call_collecting(method, params).0
    }

    /// [`Acp::call`], with the notifications that arrived before the answer.
    fn call_collecting(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
        let mut notes = Vec::new();
        let id = self.next_id;
        self.next_id += 1;
        writeln!(
            self.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        )
        .unwrap();
        self.stdin.flush().unwrap();
        loop {
            let f = self
                .frames
                .recv_timeout(Duration::from_secs(30))
                .expect("a frame from dsh acp");
            if f.get("id") == Some(&json!(id)) && f.get("method").is_none() {
                return (f, notes);
            }
            if f.get("method").is_some() {
                notes.push(f);
            }
        }
    }
}

impl Drop for Acp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent text of the `session/update` notifications among `notes`, joined.
fn agent_texts(notes: &[Value]) -> String {
    notes
        .iter()
        .filter(|n| n["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|n| n["params"]["update"]["content"]["text"].as_str())
        .collect()
}

fn alive(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    !status.is_empty() && !status.contains("State:\tZ")
}

/// A server's prompts are slash commands: the prompt the server returns is sent to the
/// model as the user's message; a missing required argument is a usage error.
#[test]
fn mcp_prompts_are_slash_commands() {
    let Some(script) = everything_script() else {
        return;
    };
    let run = Run::new();
    let server = MockServer::with_replies([Reply::text("It is sunny.")]).answer_untooled("T");
    let rows = everything_row(&script);
    let out = run.headless(&server, &rows, "/mcp__everything__args-prompt Paris");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "It is sunny.\n");
    let messages = server.requests()[0].messages();
    let user: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(user.contains(&"What's weather in Paris?"), "{user:?}");

    let help = run.headless(&server, &rows, "/help");
    let listed = String::from_utf8_lossy(&help.stdout).into_owned();
    assert!(listed.contains("/mcp__everything__args-prompt"), "{listed}");
    let missing = run.headless(&server, &rows, "/mcp__everything__args-prompt");
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("missing argument city"),
        "{}",
        stderr(&missing)
    );
}

/// A connected server's resources are the model's: list them, then read one by URI
/// (0.2.1's three tools and names), with the server named in the prompt.
#[test]
fn the_model_lists_and_reads_mcp_resources() {
    let Some(script) = everything_script() else {
        return;
    };
    let run = Run::new();
    let server = MockServer::with_replies([
        Reply::tool_call("r1", "list_mcp_resources", r#"{"server":"everything"}"#),
        Reply::dynamic(|r| {
            let listed = r.last_tool_output().unwrap_or_default();
            let json = listed.split_once('\n').map(|(_, j)| j).unwrap_or_default();
            let listed: Value = serde_json::from_str(json).unwrap();
            let uri = listed["resources"][0]["uri"].as_str().unwrap().to_string();
            Reply::tool_call(
                "r2",
                "read_mcp_resource",
                &json!({"server": "everything", "uri": uri}).to_string(),
            )
        }),
        Reply::tool_call("r3", "read_mcp_resource", r#"{"server":"nope","uri":"x"}"#),
        Reply::text("read"),
    ])
    .answer_untooled("T");
    let out = run.headless(&server, &everything_row(&script), "resources");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = server.requests();
    let tools = tool_names(&requests[0]);
    for tool in [
        "list_mcp_resources",
        "list_mcp_resource_templates",
        "read_mcp_resource",
    ] {
        assert!(tools.iter().any(|t| t == tool), "{tool} in {tools:?}");
    }
    assert!(
        requests[0]
            .system_text()
            .contains("MCP servers with resources: everything."),
        "{}",
        requests[0].system_text()
    );
    let listed = requests[1].last_tool_output().unwrap();
    assert!(listed.starts_with("MCP server: everything\n{"), "{listed}");
    let read = requests[2].last_tool_output().unwrap();
    assert!(
        read.starts_with("MCP server: everything\n{\"contents\":["),
        "{read}"
    );
    let missing = requests[3].last_tool_output().unwrap();
    assert!(
        missing.contains(
            "no MCP server \"nope\" with resources is connected here (connected: everything)"
        ),
        "{missing}"
    );
}

/// A server's progress notifications on a call reach the editor as updates of that tool
/// call while it runs (server-everything's long-running operation).
#[test]
fn mcp_progress_reaches_the_editor_as_tool_call_updates() {
    let Some(script) = everything_script() else {
        return;
    };
    let run = Run::new();
    let server = MockServer::with_replies([
        Reply::tool_call(
            "p1",
            "mcp__everything__trigger-long-running-operation",
            r#"{"duration":0.6,"steps":3}"#,
        ),
        Reply::text("done"),
    ])
    .answer_untooled("T");
    let mut acp = Acp::start(&server, &run);
    acp.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let cwd = run.work.path().display().to_string();
    let servers =
        json!([{"name": "everything", "command": "node", "args": [script, "stdio"], "env": []}]);
    let new = acp.call("session/new", json!({"cwd": cwd, "mcpServers": servers}));
    let session = new["result"]["sessionId"].clone();
    let (done, notes) = acp.call_collecting(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "run it"}]}),
    );
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let shown: String = notes
        .iter()
        .filter(|n| n["params"]["update"]["sessionUpdate"] == "tool_call_update")
        .filter(|n| n["params"]["update"]["toolCallId"] == "p1")
        .map(|n| n["params"]["update"].to_string())
        .collect();
    // The last step's notice races the call's answer (the server sends both at once), so
    // only the steps before it are certain to be shown while the call runs.
    for step in 1..=2 {
        assert!(shown.contains(&format!("[progress {step}/3]")), "{shown}");
    }
    assert_eq!(
        server.requests()[1].last_tool_output().as_deref(),
        Some("Long running operation completed. Duration: 0.6 seconds, Steps: 3.")
    );
}

/// An editor's MCP server that dies is reconnected, and the user is told both: the loss
/// and the recovery reach the editor with the next prompt.
#[test]
fn acp_tells_the_user_when_an_mcp_server_is_lost_and_back() {
    let Some(stub) = stub_script() else { return };
    let run = Run::new();
    let starts = run.work.path().join("starts");
    let server =
        MockServer::with_replies([Reply::text("one"), Reply::text("two")]).answer_untooled("T");
    let mut acp = Acp::start(&server, &run);
    acp.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let cwd = run.work.path().display().to_string();
    let servers = json!([{"name": "flaky", "command": "python3", "args": [stub],
                          "env": [{"name": "STUB_STARTS", "value": starts.display().to_string()}]}]);
    let new = acp.call("session/new", json!({"cwd": cwd, "mcpServers": servers}));
    let session = new["result"]["sessionId"].clone();
    let (_, notes) = acp.call_collecting(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}),
    );
    assert_eq!(agent_texts(&notes), "one");
    let started = |n: usize| {
        std::fs::read_to_string(&starts)
            .unwrap_or_default()
            .lines()
            .count()
            >= n
    };
    let pid: i32 = std::fs::read_to_string(&starts)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !started(2) {
        assert!(
            std::time::Instant::now() < deadline,
            "the server was not restarted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The notices come with the next prompts: the loss at once, the recovery as soon as
    // the restarted server has answered `initialize` and listed its tools.
    let mut said = String::new();
    for _ in 0..40 {
        server.push(Reply::text("two"));
        let (_, notes) = acp.call_collecting(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "again"}]}),
        );
        said.push_str(&agent_texts(&notes));
        if said.contains("is connected again") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        said.starts_with("MCP server \"flaky\" lost its connection; reconnecting")
            && said.contains("MCP server \"flaky\" is connected again.\n\ntwo"),
        "{said}"
    );
}

#[test]
fn acp_session_new_connects_the_clients_mcp_servers_for_that_session() {
    let Some(stub) = stub_script() else { return };
    let run = Run::new();
    let starts = run.work.path().join("starts");
    let server = MockServer::with_replies([
        Reply::tool_call("c1", "mcp__my_stub__echo", r#"{"message":"via acp"}"#),
        Reply::text("done"),
        Reply::text("plain"),
    ])
    .answer_untooled("T");
    let mut acp = Acp::start(&server, &run);
    let init = acp.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    assert_eq!(
        init["result"]["agentCapabilities"]["mcpCapabilities"],
        json!({"http": true, "sse": false})
    );
    let cwd = run.work.path().display().to_string();
    let servers = json!([{"name": "my stub", "command": "python3", "args": [stub],
                          "env": [{"name": "STUB_STARTS", "value": starts.display().to_string()}]}]);
    let new = acp.call("session/new", json!({"cwd": cwd, "mcpServers": servers}));
    let session = new["result"]["sessionId"].clone();
    assert!(session.is_string(), "{new}");
    let done = acp.call(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "echo"}]}),
    );
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let requests = server.requests();
    assert!(tool_names(&requests[0]).contains(&"mcp__my_stub__echo".to_string()));
    assert_eq!(
        requests[1].last_tool_output().as_deref(),
        Some("Echo: via acp")
    );

    // Another session does not see them.
    let other = acp.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let other_id = other["result"]["sessionId"].clone();
    acp.call(
        "session/prompt",
        json!({"sessionId": other_id, "prompt": [{"type": "text", "text": "hi"}]}),
    );
    let last = server.requests().last().cloned().unwrap();
    assert!(!tool_names(&last).iter().any(|t| t.starts_with("mcp__")));

    // Closing the session stops its server.
    let pid: u32 = std::fs::read_to_string(&starts)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid));
    let closed = acp.call("session/close", json!({"sessionId": session}));
    assert_eq!(closed["result"], json!({}), "{closed}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "the server outlived its session"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // A server that cannot start is told to the user, once, at the next prompt; the
    // session works without it.
    let broken = json!([{"name": "broken", "command": "python3", "args": [stub],
                         "env": [{"name": "STUB_MODE", "value": "exit"}]}]);
    let new = acp.call("session/new", json!({"cwd": cwd, "mcpServers": broken}));
    let broken_id = new["result"]["sessionId"].clone();
    assert!(broken_id.is_string(), "{new}");
    server.push(Reply::text("fine"));
    server.push(Reply::text("still fine"));
    let (done, notes) = acp.call_collecting(
        "session/prompt",
        json!({"sessionId": broken_id, "prompt": [{"type": "text", "text": "hi"}]}),
    );
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let said = agent_texts(&notes);
    assert!(
        said.starts_with("MCP server \"broken\" did not start (") && said.ends_with("fine"),
        "{said}"
    );
    let (_, notes) = acp.call_collecting(
        "session/prompt",
        json!({"sessionId": broken_id, "prompt": [{"type": "text", "text": "again"}]}),
    );
    assert_eq!(agent_texts(&notes), "still fine");

    // Transports this agent does not offer are refused.
    let sse = acp.call(
        "session/new",
        json!({"cwd": cwd, "mcpServers": [{"type": "sse", "name": "s", "url": "http://127.0.0.1:9/sse", "headers": []}]}),
    );
    assert_eq!(sse["error"]["code"], -32602, "{sse}");
}
