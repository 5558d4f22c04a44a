//! `dsh acp` driven over stdio by a scripted client, against the mock LLM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use dsh_test_support::mock_server::{MockServer, Reply};
use serde_json::{Value, json};

pub(crate) struct Client {
    child: Child,
    stdin: ChildStdin,
    frames: mpsc::Receiver<Value>,
    next_id: u64,
}

impl Client {
    fn start(
        server: &MockServer,
        home: &std::path::Path,
        work: &std::path::Path,
        mode: &str,
    ) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_dsh"));
        command
            .arg("acp")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("DSH_HOME", home.join(".dsh"))
            .env("DEEPSEEK_API_KEY", "sk-test")
            .env("DEEPSEEK_BASE_URL", server.url())
            .env("DSH_PERMISSION_MODE", mode)
            .current_dir(work);
        Self::spawn(command)
    }

    /// A client of the ACP server `command` starts (its stdio is taken over).
    pub(crate) fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, frames) = mpsc::channel();
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

    pub(crate) fn send(&mut self, frame: Value) {
        writeln!(self.stdin, "{frame}").unwrap();
        self.stdin.flush().unwrap();
    }

    pub(crate) fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    pub(crate) fn next(&self) -> Value {
        self.frames
            .recv_timeout(Duration::from_secs(20))
            .expect("a frame from dsh acp")
    }

    /// Reads frames until the response to `id`, handing every other frame to `other`.
    pub(crate) fn until_response(
        &mut self,
        id: u64,
        mut other: impl FnMut(&mut Self, Value),
    ) -> Value {
        loop {
            let f = self.next();
            if f.get("id") == Some(&json!(id)) && f.get("method").is_none() {
                return f;
            }
            other(self, f);
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_permission_request_carries_the_whole_tool_call_and_both_answers_work() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let escalate = |id: &str, file: &str| {
        Reply::tool_call(
            id,
            "bash",
            &json!({"command": format!("echo hi > {file}"), "description": "write a file",
                    "sandbox_permissions": "danger-full-access", "justification": "the user asked for it"})
            .to_string(),
        )
    };
    let server = MockServer::with_replies([
        escalate("e1", "approved.txt"),
        Reply::text("first done"),
        escalate("e2", "rejected.txt"),
        Reply::text("second done"),
    ])
    .answer_untooled("T");
    let mut c = Client::start(&server, home.path(), work.path(), "read-only");
    let init = c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    c.until_response(init, |_, _| {});
    let new = c.request("session/new", json!({"cwd": work.path(), "mcpServers": []}));
    let session = c.until_response(new, |_, _| {})["result"]["sessionId"].clone();
    for (answer, file, exists) in [
        ("allow-once", "approved.txt", true),
        ("reject-once", "rejected.txt", false),
    ] {
        let prompt = c.request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "write it"}]}),
        );
        let mut asked = None;
        let done = c.until_response(prompt, |c, f| {
            if f["method"] == "session/request_permission" {
                asked = Some(f["params"]["toolCall"].clone());
                c.send(json!({"jsonrpc": "2.0", "id": f["id"], "result": {"outcome": {"outcome": "selected", "optionId": answer}}}));
            }
        });
        assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
        let call = asked.expect("a permission request");
        assert_eq!(call["title"], format!("echo hi > {file}"));
        assert_eq!(call["kind"], "execute");
        assert_eq!(call["rawInput"]["justification"], "the user asked for it");
        assert_eq!(
            call["content"][0]["content"]["text"],
            "escalate sandbox to danger-full-access: the user asked for it"
        );
        assert_eq!(work.path().join(file).exists(), exists, "{answer}");
    }
}

#[test]
fn a_slash_command_runs_instead_of_reaching_the_model() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::with_replies([]).answer_untooled("T");
    let mut c = Client::start(&server, home.path(), work.path(), "workspace-write");
    let init = c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    c.until_response(init, |_, _| {});
    let new = c.request("session/new", json!({"cwd": work.path(), "mcpServers": []}));
    let session = c.until_response(new, |_, _| {})["result"]["sessionId"].clone();
    let prompt = c.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "/nope"}]}),
    );
    let mut said = String::new();
    let done = c.until_response(prompt, |_, f| {
        if let Some(t) = f
            .pointer("/params/update/content/text")
            .and_then(Value::as_str)
        {
            said.push_str(t);
        }
    });
    assert_eq!(done["result"]["stopReason"], "end_turn");
    assert!(said.starts_with("unknown command /nope"), "{said}");
    assert!(server.requests().is_empty());
}

#[test]
fn malformed_frames_are_answered_as_the_reference_sdk_does() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::with_replies([]);
    let mut c = Client::start(&server, home.path(), work.path(), "workspace-write");
    for (line, code, message) in [
        ("not json", -32700, "Parse error"),
        (
            "[1,2]",
            -32600,
            "Invalid request: JSON-RPC batches are not supported",
        ),
        ("42", -32600, "Invalid request"),
        ("{\"foo\":1}", -32600, "Invalid request"),
    ] {
        writeln!(c.stdin, "{line}").unwrap();
        c.stdin.flush().unwrap();
        let f = c.next();
        assert_eq!(
            (
                &f["id"],
                f["error"]["code"].as_i64(),
                f["error"]["message"].as_str()
            ),
            (&Value::Null, Some(code), Some(message)),
            "{line}: {f}"
        );
    }
    // The connection still serves requests.
    let init = c.request("initialize", json!({"protocolVersion": 1}));
    assert_eq!(
        c.until_response(init, |_, _| {})["result"]["protocolVersion"],
        1
    );
    let load = c.request(
        "session/load",
        json!({"sessionId": "nope", "cwd": work.path(), "mcpServers": []}),
    );
    let answer = c.until_response(load, |_, _| {});
    assert_eq!(answer["error"]["code"], -32002, "{answer}");
    assert_eq!(answer["error"]["data"]["sessionId"], "nope");
}

/// `dsh --profile acp` (upstream's grammar) serves ACP over the profile's tree.
#[test]
fn the_acp_profile_serves_the_protocol_over_the_profile_tree() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server =
        MockServer::with_replies([Reply::text("from the acp profile")]).answer_untooled("T");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["--profile", "acp"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("DSH_HOME", home.path().join(".dsh"))
        .env("DEEPSEEK_API_KEY", "sk-test")
        .env("DEEPSEEK_BASE_URL", server.url())
        .current_dir(work.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut frames = Vec::new();
    for (id, method, params) in [
        (0, "initialize", json!({"protocolVersion": 1})),
        (
            1,
            "session/new",
            json!({"cwd": work.path(), "mcpServers": []}),
        ),
    ] {
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        )
        .unwrap();
        stdin.flush().unwrap();
        loop {
            let f: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
            if f["id"] == id {
                frames.push(f);
                break;
            }
        }
    }
    assert_eq!(
        frames[0]["result"]["agentCapabilities"]["loadSession"],
        true
    );
    let session = frames[1]["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}})).unwrap();
    stdin.flush().unwrap();
    let mut text = String::new();
    loop {
        let f: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        if let Some(t) = f
            .pointer("/params/update/content/text")
            .and_then(Value::as_str)
        {
            text.push_str(t);
        }
        if f["id"] == 2 {
            assert_eq!(f["result"]["stopReason"], "end_turn");
            break;
        }
    }
    assert_eq!(text, "from the acp profile");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

/// Waits up to 20 s for `path` to hold at least one line and returns its lines as JSON.
fn json_lines_eventually(path: &std::path::Path) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.ends_with('\n') || std::time::Instant::now() > deadline {
            return text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn claude_code_subagent_hooks_fire_for_a_delegated_child() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let starts = work.path().join("starts.jsonl");
    let stops = work.path().join("stops.jsonl");
    let hooks = json!({"hooks": {
        "SubagentStart": [{"hooks": [{"type": "command", "command": format!("cat >> {}", starts.display())}]}],
        // A matcher naming another agent kind must not fire.
        "SubagentStop": [
            {"matcher": "code-reviewer", "hooks": [{"type": "command", "command": "echo wrong >> wrong.txt"}]},
            {"matcher": "*", "hooks": [{"type": "command", "command": format!("cat >> {}", stops.display())}]}
        ]
    }});
    std::fs::write(work.path().join("hooks.json"), hooks.to_string()).unwrap();
    // Hook bridges are opt-in rows of the product tree (upstream ships none in its profiles):
    // the user's patch adds the Claude Code one.
    std::fs::create_dir_all(home.path().join(".dsh")).unwrap();
    std::fs::write(
        home.path().join(".dsh/cordis.patch.yml"),
        "- insert:\n    - id: hooks-claude-code\n      name: '@deepseek-ai/dsh-hooks-claude-code'\n      config:\n        configPath: ./hooks.json\n",
    )
    .unwrap();
    let server = MockServer::with_replies([
        Reply::tool_call(
            "d1",
            "subagent",
            r#"{"description":"Check","prompt":"Say CHILD_OK.","run_in_background":false}"#,
        ),
        Reply::text("CHILD_OK"),
        Reply::text("The child said CHILD_OK."),
    ])
    .answer_untooled("T");
    let mut c = Client::start(&server, home.path(), work.path(), "danger-full-access");
    let init = c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    c.until_response(init, |_, _| {});
    let new = c.request("session/new", json!({"cwd": work.path(), "mcpServers": []}));
    let session = c.until_response(new, |_, _| {})["result"]["sessionId"].clone();
    let prompt = c.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "delegate"}]}),
    );
    let done = c.until_response(prompt, |_, _| {});
    assert_eq!(done["result"]["stopReason"], "end_turn");

    let start = json_lines_eventually(&starts);
    let stop = json_lines_eventually(&stops);
    assert_eq!(start.len(), 1, "{start:?}");
    assert_eq!(stop.len(), 1, "{stop:?}");
    let child = start[0]["agent_id"].as_str().unwrap().to_string();
    assert_ne!(json!(child), session, "the child is its own session");
    let cwd = work.path().display().to_string();
    for (payload, event) in [(&start[0], "SubagentStart"), (&stop[0], "SubagentStop")] {
        assert_eq!(payload["hook_event_name"], event);
        assert_eq!(payload["agent_type"], "general-purpose");
        assert_eq!(payload["agent_id"], json!(child));
        assert_eq!(payload["session_id"], json!(child), "the child's session");
        assert_eq!(payload["cwd"], json!(cwd));
        assert!(
            payload["transcript_path"]
                .as_str()
                .is_some_and(|p| p.contains(&child)),
            "{payload}"
        );
    }
    assert!(start[0].get("stop_hook_active").is_none());
    assert_eq!(stop[0]["stop_hook_active"], false);
    assert!(!work.path().join("wrong.txt").exists());
}

/// `/plan` over ACP (`dsh --profile acp`, whose tree stacks on the base bundle): the command
/// answers in the prompt's own updates, the next prompt's request carries the plan section,
/// `/plan off` leaves, and the request after it has no section.
#[test]
fn plan_mode_switches_through_acp_text_prompts() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::with_replies([
        Reply::text("planned"),
        Reply::text("doing it"),
        Reply::text("planning the tests"),
    ])
    .answer_untooled("T");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["--profile", "acp"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("DSH_HOME", home.path().join(".dsh"))
        .env("DEEPSEEK_API_KEY", "sk-test")
        .env("DEEPSEEK_BASE_URL", server.url())
        .current_dir(work.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut call = |id: u64, method: &str, params: Value| -> (Value, String) {
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        )
        .unwrap();
        stdin.flush().unwrap();
        let mut text = String::new();
        loop {
            let f: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
            if let Some(t) = f
                .pointer("/params/update/content/text")
                .and_then(Value::as_str)
            {
                text.push_str(t);
            }
            if f["id"] == id && f.get("method").is_none() {
                return (f, text);
            }
        }
    };
    call(0, "initialize", json!({"protocolVersion": 1}));
    let (new, _) = call(
        1,
        "session/new",
        json!({"cwd": work.path(), "mcpServers": []}),
    );
    let session = new["result"]["sessionId"].clone();
    // Each permission mode says what it does (Zed shows it under the mode picker).
    let modes = new["result"]["modes"]["availableModes"].as_array().unwrap();
    assert_eq!(modes.len(), 3, "{modes:?}");
    for mode in modes {
        assert!(
            mode["description"].as_str().is_some_and(|d| d.len() > 10),
            "{mode}"
        );
    }
    let mut prompt = |id: u64, text: &str| -> String {
        let (done, said) = call(
            id,
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
        );
        assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
        said
    };
    assert_eq!(prompt(2, "/plan"), "Plan mode on. Leave it with /plan off.");
    assert_eq!(prompt(3, "design a cache"), "planned");
    assert_eq!(prompt(4, "/plan off"), "Plan mode off.");
    assert_eq!(prompt(5, "go ahead"), "doing it");
    // `/plan <message>` selects plan mode and sends the message; the prompt ends with
    // that turn.
    assert_eq!(
        prompt(6, "/plan now plan the tests"),
        "Plan mode on. Leave it with /plan off.planning the tests"
    );
    let systems: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .map(|r| r.system_text())
        .collect();
    assert_eq!(systems.len(), 3);
    assert!(systems[0].contains("Plan mode is on."), "{}", systems[0]);
    assert!(!systems[1].contains("Plan mode is on."), "{}", systems[1]);
    assert!(systems[2].contains("Plan mode is on."), "{}", systems[2]);
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

/// `/goal` over ACP (`dsh --profile acp`): setting a goal answers in the prompt's updates and
/// starts the goal's first round at once; the prompt ends only when the round has completed
/// the goal and the model has written its closing message. `/goal` then shows it complete.
/// `dsh acp`, what editors start, serves the product tree: the base bundle's tools reach
/// the model (search, web, images, goals), not only the 16 of upstream's example.
#[test]
fn a_goal_set_over_acp_runs_its_round_within_the_prompt() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::with_replies([
        Reply::tool_call("g1", "get_goal", "{}"),
        Reply::dynamic(|r| {
            let got: Value =
                serde_json::from_str(&r.last_tool_output().unwrap_or_default()).unwrap();
            let args = json!({"goal_id": got["goal"]["id"], "revision": got["goal"]["revision"],
                "action": "complete"});
            Reply::tool_call("g2", "update_goal", &args.to_string())
        }),
        Reply::text("Changelog tidied."),
    ])
    .answer_untooled("T");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("acp")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("DSH_HOME", home.path().join(".dsh"))
        .env("DEEPSEEK_API_KEY", "sk-test")
        .env("DEEPSEEK_BASE_URL", server.url())
        .current_dir(work.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut call = |id: u64, method: &str, params: Value| -> (Value, String) {
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        )
        .unwrap();
        stdin.flush().unwrap();
        let mut text = String::new();
        loop {
            let f: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
            if let Some(t) = f
                .pointer("/params/update/content/text")
                .and_then(Value::as_str)
            {
                text.push_str(t);
            }
            if f["id"] == id && f.get("method").is_none() {
                return (f, text);
            }
        }
    };
    call(0, "initialize", json!({"protocolVersion": 1}));
    let (new, _) = call(
        1,
        "session/new",
        json!({"cwd": work.path(), "mcpServers": []}),
    );
    let session = new["result"]["sessionId"].clone();
    let mut prompt = |id: u64, text: &str| -> String {
        let (done, said) = call(
            id,
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
        );
        assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
        said
    };
    assert_eq!(
        prompt(2, "/goal"),
        "This session has no goal yet.\nUsage: /goal [<objective>|clear|edit <objective>|pause|resume]"
    );
    assert_eq!(
        prompt(3, "/goal Tidy the changelog"),
        "Goal set\nStatus: active\nObjective: Tidy the changelog\nRounds: 0/256\nActivation: armed\n\nCommands: /goal edit <objective>, /goal pause, /goal clear\
         Changelog tidied."
    );
    assert_eq!(
        prompt(4, "/goal"),
        "Goal\nStatus: complete\nObjective: Tidy the changelog\nRounds: 1/256\nActivation: disarmed\n\nCommands: /goal <objective>, /goal clear"
    );
    let bodies: Vec<String> = server
        .requests()
        .into_iter()
        .filter_map(|r| r.json)
        .filter(|j| j.get("tools").is_some())
        .map(|j| j.to_string())
        .collect();
    assert_eq!(bodies.len(), 3);
    let tools = server.requests()[0].tool_names();
    for tool in [
        "grep",
        "glob",
        "web_fetch",
        "read_image",
        "create_goal",
        "subagent",
        "skill",
    ] {
        assert!(tools.iter().any(|t| t == tool), "{tool} in {tools:?}");
    }
    assert!(bodies[0].contains("<goal_round>") && bodies[0].contains("Round: 1/256"));
    assert!(bodies[2].contains("<goal_complete>"));
    drop(stdin);
    assert!(child.wait().unwrap().success());
}
