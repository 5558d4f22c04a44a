//! Product subagents through the `dsh` binary: a headless parent against the mock LLM
//! delegates through a product tool row to another agent program — our own `dsh acp`, our
//! own SDK runtime (`dsh --profile sdk`), and a stand-in Codex app-server — and reads its
//! result; a hung child ends at its timeout, a cancelled parent leaves no child process;
//! the product tool rows of the ACP compositions match the pinned conformance schemas.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_session::{Event, types};
use dsh_test_support::mock_server::{MockServer, RecordedRequest, Reply};
use serde_json::{Value, json};

use common::{Run, call, stderr, tool_texts};

const CHILD_TASK: &str = "Reply with CHILD_OK";

/// What these tests add to [`Run`].
trait RunExt {
    fn product_cmd(&self, server: &MockServer, rows: &[Value], task: &str) -> Command;
    fn product(&self, server: &MockServer, rows: &[Value], task: &str) -> Output;
    fn child_env(&self, server: &MockServer) -> Value;
    fn child_home(&self) -> PathBuf;
}

impl RunExt for Run {
    /// `dsh --profile headless --patch product.yml <task>` with `rows` inserted.
    fn product_cmd(&self, server: &MockServer, rows: &[Value], task: &str) -> Command {
        let mut patch = String::from("- insert:\n");
        for row in rows {
            patch.push_str(&format!("    - {}\n", serde_json::to_string(row).unwrap()));
        }
        std::fs::write(self.work.path().join("product.yml"), patch).unwrap();
        let mut c = self.base(server);
        c.args(["--profile", "headless", "--patch", "product.yml", task]);
        c
    }

    fn product(&self, server: &MockServer, rows: &[Value], task: &str) -> Output {
        self.product_cmd(server, rows, task).output().unwrap()
    }

    /// The environment a child dsh needs (the scrub drops our key and every `DSH_*`).
    fn child_env(&self, server: &MockServer) -> Value {
        json!({
            "DEEPSEEK_API_KEY": "sk-test",
            "DEEPSEEK_BASE_URL": server.url(),
            "DSH_HOME": self.child_home().display().to_string(),
            "HOME": self.home.path().display().to_string(),
        })
    }

    fn child_home(&self) -> PathBuf {
        self.home.path().join("child-dsh")
    }
}

fn tool_row(provider: &str, tool: &str) -> Value {
    json!({"id": format!("tool-{provider}"), "name": "@deepseek-ai/dsh-tool-subagent",
           "config": {"provider": provider, "toolName": tool, "backgroundMode": "one-shot",
                      "maxDepth": "provider-managed"}})
}

fn user_text(request: &RecordedRequest) -> String {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect()
}

/// Parent: calls `tool` once, then answers `PARENT_DONE`; the child answers `CHILD_OK`.
fn delegating_server(tool: &'static str) -> MockServer {
    MockServer::start()
        .answer_untooled("Delegation")
        .respond_with(move |r| {
            if r.messages().iter().any(|m| m["role"] == "tool") {
                Reply::text("PARENT_DONE")
            } else if user_text(r).contains(CHILD_TASK) {
                Reply::text("CHILD_OK")
            } else {
                call(
                    "call_1",
                    tool,
                    json!({"description": "Ask the child", "prompt": CHILD_TASK}),
                )
            }
        })
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

fn dsh_path() -> String {
    env!("CARGO_BIN_EXE_dsh").to_string()
}

fn fake(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../subagent-product/tests/fakes")
        .join(name)
        .display()
        .to_string()
}

fn python() -> bool {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        dsh_test_support::prereq::skip("the stand-in Codex needs python3");
    }
    ok
}

fn count(events: &[Arc<Event>], t: &str) -> usize {
    events.iter().filter(|e| e.is(t)).count()
}

#[test]
fn an_acp_child_is_our_own_dsh_acp_end_to_end() {
    let server = delegating_server("subagent_acp");
    let run = Run::new();
    let rows = [
        json!({"id": "subagent-acp", "name": "@deepseek-ai/dsh-subagent-acp",
               "config": {"providerName": "dsh-acp", "command": dsh_path(), "args": ["acp"],
                          "env": run.child_env(&server)}}),
        tool_row("dsh-acp", "subagent_acp"),
    ];
    let out = run.product(&server, &rows, "Delegate the greeting.");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(
        text(&out.stdout).contains("PARENT_DONE"),
        "{}",
        text(&out.stdout)
    );

    // The parent read the child's answer; the child left no log beside the parent's.
    let events = run.session();
    assert_eq!(tool_texts(&events), ["CHILD_OK"]);
    // The child was a real dsh: its own session (in its own home) answered the task.
    let files = dsh_persistence::SessionFiles::new(
        run.child_home().join("sessions"),
        dsh_persistence::Compression::Zstd,
        dsh_persistence::ChunkPacking::Packed,
    );
    let list = files.list().unwrap();
    assert_eq!(list.len(), 1, "the ACP child stored its own session");
    let child_events = files.inspect(&list[0].0.id).unwrap().events;
    assert_eq!(count(&child_events, types::ASSISTANT_MESSAGE), 1);
    assert!(
        server
            .requests()
            .iter()
            .any(|r| user_text(r).contains(CHILD_TASK)),
        "the child asked the model"
    );
}

#[test]
fn an_sdk_child_is_our_own_sdk_runtime_end_to_end() {
    let server = delegating_server("subagent_sdk");
    let run = Run::new();
    let rows = [
        json!({"id": "subagent-dsh-sdk", "name": "@deepseek-ai/dsh-subagent-dsh-sdk",
               "config": {"providerName": "dsh-sdk", "command": dsh_path(),
                          "args": ["--profile", "sdk"], "env": run.child_env(&server)}}),
        tool_row("dsh-sdk", "subagent_sdk"),
    ];
    let out = run.product(&server, &rows, "Delegate the greeting.");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(
        text(&out.stdout).contains("PARENT_DONE"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(tool_texts(&run.session()), ["CHILD_OK"]);
}

#[test]
fn a_codex_child_answers_and_a_hung_one_ends_at_its_timeout() {
    if !python() {
        return;
    }
    // The parent lingers one second after the delegation (a `sleep` call), so the detached
    // SubagentStart/SubagentStop hook runs finish before it exits.
    let server = MockServer::start()
        .answer_untooled("Delegation")
        .respond_with(|r| {
            let results = r.messages().iter().filter(|m| m["role"] == "tool").count();
            match results {
                0 => call(
                    "call_1",
                    "subagent_codex",
                    json!({"description": "Ask the child", "prompt": CHILD_TASK}),
                ),
                1 => call(
                    "call_2",
                    "bash",
                    json!({"command": "sleep 1", "description": "Wait a second"}),
                ),
                _ => Reply::text("PARENT_DONE"),
            }
        });
    let run = Run::new();
    let pids = run.work.path().join("pids");
    let codex = |mode: &str, timeout: Option<u64>| {
        let mut config = json!({"providerName": "codex", "command": "python3",
            "args": [fake("codex.py"), "app-server", "--stdio"],
            "env": {"FAKE_MODE": mode, "FAKE_PIDS": pids.display().to_string()},
            "disposeGraceMs": 300});
        if let Some(t) = timeout {
            config["timeoutMs"] = json!(t);
        }
        json!({"id": "subagent-codex", "name": "@deepseek-ai/dsh-subagent-codex", "config": config})
    };
    // Claude Code hooks observe the product child's start and end (no local session).
    // One append per run (the payload and its newline in a single write).
    let hook = "printf '%s\\n' \"$(cat)\" >> hook-events.jsonl";
    let entry = json!([{"hooks": [{"type": "command", "command": hook}]}]);
    std::fs::write(
        run.work.path().join("hooks.json"),
        json!({"hooks": {"SubagentStart": entry, "SubagentStop": entry}}).to_string(),
    )
    .unwrap();
    let hooks = json!({"id": "hooks-claude-code", "name": "@deepseek-ai/dsh-hooks-claude-code",
                       "config": {"configPath": "./hooks.json"}});
    let out = run
        .product_cmd(
            &server,
            &[
                codex("success", None),
                tool_row("codex", "subagent_codex"),
                hooks,
            ],
            "Delegate.",
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(
        tool_texts(&run.session())[0],
        format!("CODEX_OK: {CHILD_TASK}")
    );
    let fired: Vec<Value> = std::fs::read_to_string(run.work.path().join("hook-events.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Detached runs: they may finish in either order.
    let mut points: Vec<&str> = fired
        .iter()
        .map(|e| e["hook_event_name"].as_str().unwrap_or(""))
        .collect();
    points.sort();
    assert_eq!(points, ["SubagentStart", "SubagentStop"], "{fired:?}");
    assert_eq!(fired[0]["agent_id"], fired[1]["agent_id"]);

    let run2 = Run::new();
    let pids = run2.work.path().join("pids");
    let hung = json!({"id": "subagent-codex", "name": "@deepseek-ai/dsh-subagent-codex",
        "config": {"providerName": "codex", "command": "python3",
                   "args": [fake("codex.py")], "timeoutMs": 800, "disposeGraceMs": 300,
                   "env": {"FAKE_MODE": "hang", "FAKE_PIDS": pids.display().to_string()}}});
    let server = delegating_server("subagent_codex");
    let out = run2.product(
        &server,
        &[hung, tool_row("codex", "subagent_codex")],
        "Delegate.",
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(
        tool_texts(&run2.session()),
        [
            "Error: subagent run failed\nDiagnostic: Product subagent failure (product: Codex; stage: turn; category: timeout)"
        ]
    );
    for pid in read_pids(&pids) {
        assert!(!alive(pid), "child process {pid} survived");
    }

    // A crashed child: the parent model reads the process failure.
    let run3 = Run::new();
    let crashed = json!({"id": "subagent-codex", "name": "@deepseek-ai/dsh-subagent-codex",
        "config": {"providerName": "codex", "command": "python3", "args": [fake("codex.py")],
                   "env": {"FAKE_MODE": "crash"}}});
    let server = delegating_server("subagent_codex");
    let out = run3.product(
        &server,
        &[crashed, tool_row("codex", "subagent_codex")],
        "Delegate.",
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(
        tool_texts(&run3.session()),
        [
            "Error: subagent run failed\nDiagnostic: Product subagent failure (product: Codex; stage: process; category: process-exit; exit code: 3)"
        ]
    );
}

/// Whether a process is alive (a zombie counts as gone).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next()),
            Some('Z') | Some('X') | None
        ),
    }
}

fn read_pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

#[test]
fn cancelling_the_parent_kills_the_whole_child_tree() {
    if !python() {
        return;
    }
    let server = delegating_server("subagent_codex");
    let run = Run::new();
    let pids = run.work.path().join("pids");
    let hung = json!({"id": "subagent-codex", "name": "@deepseek-ai/dsh-subagent-codex",
        "config": {"providerName": "codex", "command": "python3",
                   "args": [fake("codex.py")], "disposeGraceMs": 300,
                   "env": {"FAKE_MODE": "hang", "FAKE_PIDS": pids.display().to_string()}}});
    let mut child = run
        .product_cmd(
            &server,
            &[hung, tool_row("codex", "subagent_codex")],
            "Delegate.",
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while read_pids(&pids).len() < 2 {
        assert!(Instant::now() < deadline, "the stand-in never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let tree = read_pids(&pids);
    assert!(tree.iter().all(|p| alive(*p)));
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert!(!status.success());
    for pid in tree {
        assert!(
            !alive(pid),
            "child process {pid} survived the parent's cancel"
        );
    }
    // The cancelled turn records the aborted call (the agent loop's text).
    assert_eq!(tool_texts(&run.session()), ["Error: tool call aborted"]);
}

/// The parameters of a tool schema without its prose (descriptions are our own wording).
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "description")
                .map(|(k, v)| (k.clone(), shape(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
        other => other.clone(),
    }
}

fn pinned_tools(scenario: &str) -> Option<Vec<Value>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/conformance/acp")
        .join(scenario)
        .join("tool-schemas.expected.json");
    let text = std::fs::read_to_string(&path).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    value["initial"].as_array().cloned()
}

fn is_product_tool(name: &str) -> bool {
    name.starts_with("subagent_codex") || name.starts_with("subagent_claude")
}

#[test]
fn product_tool_rows_match_the_pinned_conformance_schemas() {
    for scenario in ["product-subagent-both", "product-subagent-codex"] {
        let Some(pinned) = pinned_tools(scenario) else {
            dsh_test_support::prereq::skip(&format!(
                "{scenario}: ../shared/conformance is not available"
            ));
            continue;
        };
        // The conformance composition's own patches (the product rows it inserts into the
        // included ACP composition), as a patch layer for the headless profile.
        let composition = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../conformance/compositions")
                .join(format!("{scenario}.cordis.yml")),
        )
        .unwrap();
        let rows = dsh_kernel::config::parse(&composition).unwrap().unwrap();
        let dsh_kernel::config::Node::Seq(rows) = rows else {
            panic!("{scenario}: not a list of rows")
        };
        let patches = rows[0]
            .get("config")
            .and_then(|c| c.get("patches"))
            .cloned()
            .unwrap();
        let patch = dsh_kernel::config::emit(&patches);
        let server = MockServer::start()
            .answer_untooled("Ping")
            .respond_with(|_| Reply::text("PONG"));
        let run = Run::new();
        std::fs::write(run.work.path().join("product.yml"), patch).unwrap();
        let out = run
            .base(&server)
            .args([
                "--profile",
                "headless",
                "--patch",
                "product.yml",
                "Say PONG.",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
        let events = run.session();
        let header = events
            .iter()
            .find(|e| e.is(types::REQUEST_HEADER))
            .expect("a request header");
        let ours: Vec<Value> = header.data["header"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| is_product_tool(t["name"].as_str().unwrap_or("")))
            .cloned()
            .collect();
        let theirs: Vec<&Value> = pinned
            .iter()
            .filter(|t| is_product_tool(t["name"].as_str().unwrap_or("")))
            .collect();
        let names = |ts: &[&Value]| -> Vec<String> {
            ts.iter()
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect()
        };
        let ours_refs: Vec<&Value> = ours.iter().collect();
        assert_eq!(
            names(&ours_refs),
            names(&theirs),
            "{scenario}: product tool names"
        );
        assert!(!theirs.is_empty());
        for (o, t) in ours.iter().zip(theirs) {
            assert_eq!(
                shape(&o["parameters"]),
                shape(&t["parameters"]),
                "{scenario}: parameters of {}",
                t["name"]
            );
        }
    }
}

#[test]
fn bad_product_rows_are_clear_load_errors() {
    let server = MockServer::start().respond_with(|_| Reply::text("unused"));
    for (rows, wanted) in [
        (
            vec![
                json!({"id": "subagent-acp", "name": "@deepseek-ai/dsh-subagent-acp",
                        "config": {"providerName": "a"}}),
            ],
            "subagent-acp: `command` is required",
        ),
        (
            vec![
                json!({"id": "subagent-acp", "name": "@deepseek-ai/dsh-subagent-acp",
                        "config": {"command": "x", "disposeGraceMs": 0}}),
            ],
            "subagent-acp: disposeGraceMs must be a positive finite number",
        ),
        (
            vec![
                json!({"id": "subagent-codex", "name": "@deepseek-ai/dsh-subagent-codex",
                        "config": {"permissionMode": "always"}}),
            ],
            "subagent-codex: `permissionMode` must be",
        ),
        (
            vec![
                json!({"id": "subagent-claude-code", "name": "@deepseek-ai/dsh-subagent-claude-code",
                        "config": {"cwd": "/no/such/dir"}}),
            ],
            "subagent-claude-code: config cwd is not an accessible directory: /no/such/dir",
        ),
        (
            vec![
                json!({"id": "subagent-codex", "name": "@deepseek-ai/dsh-subagent-codex"}),
                json!({"id": "tool-codex", "name": "@deepseek-ai/dsh-tool-subagent",
                       "config": {"provider": "codex", "toolName": "subagent_codex", "maxDepth": 2}}),
            ],
            "cannot apply maxDepth",
        ),
    ] {
        let run = Run::new();
        let out = run.product(&server, &rows, "task");
        assert_ne!(out.status.code(), Some(0), "{wanted}");
        assert!(stderr(&out).contains(wanted), "{wanted}: {}", stderr(&out));
    }
    assert!(server.requests().is_empty(), "nothing ran");
}

#[test]
fn a_claude_code_child_answers_through_the_binary() {
    if !python() {
        return;
    }
    let server = delegating_server("subagent_claude");
    let run = Run::new();
    let rows = [
        json!({"id": "subagent-claude-code", "name": "@deepseek-ai/dsh-subagent-claude-code",
               "config": {"providerName": "claude", "command": "python3",
                          "args": [fake("claude.py")], "env": {"FAKE_MODE": "success"}}}),
        tool_row("claude", "subagent_claude"),
    ];
    let out = run.product(&server, &rows, "Delegate.");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(
        tool_texts(&run.session()),
        [format!("CLAUDE_OK: {CHILD_TASK}")]
    );
}
