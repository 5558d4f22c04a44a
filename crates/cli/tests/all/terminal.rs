//! Terminals through the `dsh` binary (headless, the default composition with its sandbox,
//! the terminal rows added by a user patch) driven by a scripted model on loopback:
//!
//! * the `terminal_*` tools: open a shell, send commands (state carries over between
//!   sends), read the scrollback, list, close — closing ends every process started in it;
//! * the persistent `bash` (`tool-bash-persistent` in place of `tool-bash`): `cd`, exported
//!   and shell variables survive between calls, exit codes are reported;
//! * a terminal left open dies with the session, and with dsh terminated or killed;
//! * `dsh acp` over the live `pty.cordis.yml`: a sandbox mode change (`/permission`) closes
//!   the session's terminals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_test_support::mock_server::{MockServer, RecordedRequest, Reply};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::{Run, call, processes_with, stderr, tool_texts};

/// The terminal service, the local bash backend and the six tools.
const TERMINAL_ROWS: &str = "\
- insert:
    - id: pty
      name: '@deepseek-ai/dsh-terminal'
    - id: terminal-bash
      name: '@deepseek-ai/dsh-terminal-bash'
    - id: tool-terminal
      name: '@deepseek-ai/dsh-tool-terminal'
";

/// The persistent shell in place of the one-shot `bash`.
const PERSISTENT_ROWS: &str = "\
- id: tool-bash
  disabled: true
- insert:
    - id: pty
      name: '@deepseek-ai/dsh-terminal'
    - id: terminal-bash
      name: '@deepseek-ai/dsh-terminal-bash'
    - id: tool-bash-persistent
      name: '@deepseek-ai/dsh-tool-bash-persistent'
";

/// What these tests add to [`Run`].
trait RunExt {
    fn headless(&self, server: &MockServer, patch: &str, task: &str) -> Output;
    fn spawn(&self, server: &MockServer, mode: &str, task: &str) -> std::process::Child;
    fn marker(&self, what: &str) -> String;
}

impl RunExt for Run {
    /// A headless run of `task` with `patch` layered over the default tree.
    fn headless(&self, server: &MockServer, patch: &str, task: &str) -> Output {
        let file = self.home.path().join("terminal.patch.yml");
        std::fs::write(&file, patch).unwrap();
        self.base(server)
            .args(["--profile", "headless", "--patch"])
            .arg(&file)
            .arg(task)
            .output()
            .unwrap()
    }

    /// `dsh` started (not waited for) with the terminal rows, in sandbox `mode`.
    fn spawn(&self, server: &MockServer, mode: &str, task: &str) -> std::process::Child {
        let file = self.home.path().join("terminal.patch.yml");
        std::fs::write(&file, TERMINAL_ROWS).unwrap();
        self.base(server)
            .env("DSH_PERMISSION_MODE", mode)
            .args(["--profile", "headless", "--patch"])
            .arg(&file)
            .arg(task)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }

    /// A command-line marker unique to this run (the workspace path is unique).
    fn marker(&self, what: &str) -> String {
        format!("{}/{what}", self.work.path().display())
    }
}

/// Waits (bounded) until `want(processes_with(marker))`; returns the last sample.
fn wait_processes(marker: &str, want: impl Fn(&[u32]) -> bool) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = processes_with(marker);
        if want(&found) || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What the checks saw: a label and the marked processes found.
type Seen = Arc<Mutex<Vec<(String, Vec<u32>)>>>;

/// A reply computed when the request arrives, after `check` looked at the host (the
/// previous tool call has finished by then); what `check` saw is kept in `seen`.
fn after_checking(
    seen: &Seen,
    label: &'static str,
    marker: String,
    alive: bool,
    reply: Reply,
) -> Reply {
    let seen = seen.clone();
    let reply = Mutex::new(Some(reply));
    Reply::dynamic(move |_: &RecordedRequest| {
        let found = wait_processes(&marker, |p| p.is_empty() != alive);
        seen.lock().unwrap().push((label.to_string(), found));
        reply
            .lock()
            .unwrap()
            .take()
            .unwrap_or_else(|| Reply::text("(reply used twice)"))
    })
}

#[test]
fn the_model_opens_a_terminal_sends_reads_and_closes_it_and_its_processes_end() {
    let run = Run::new();
    let sleeper = run.marker("pty-sleeper");
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(call(
        "open",
        "terminal_open",
        json!({"type": "shell", "name": "main"}),
    ));
    server.push(call(
        "set",
        "terminal_send",
        json!({"sessionId": "pty-1", "text": "X=$((6*7)); cd /tmp; echo \"value-$X\""}),
    ));
    server.push(call(
        "again",
        "terminal_send",
        json!({"sessionId": "pty-1", "text": "echo \"again-$X in $PWD\""}),
    ));
    // The default mode (workspace-write) confines the terminal like bash commands.
    let outside = tempfile::tempdir().unwrap();
    let escape = outside.path().join("escape");
    server.push(call(
        "escape",
        "terminal_send",
        json!({"sessionId": "pty-1", "text": format!("echo x 2>/dev/null > {} && echo ESCAPED || echo REFUSED", escape.display())}),
    ));
    server.push(call(
        "sleep",
        "terminal_send",
        json!({"sessionId": "pty-1", "text": format!("(exec -a {sleeper} sleep 300) &")}),
    ));
    server.push(after_checking(
        &seen,
        "before close",
        sleeper.clone(),
        true,
        call(
            "read",
            "terminal_read",
            json!({"sessionId": "pty-1", "count": 50}),
        ),
    ));
    server.push(call("list", "terminal_list", json!({})));
    server.push(call(
        "missing",
        "terminal_signal",
        json!({"sessionId": "pty-9", "signal": "SIGINT"}),
    ));
    server.push(call(
        "close",
        "terminal_close",
        json!({"sessionId": "pty-1"}),
    ));
    server.push(after_checking(
        &seen,
        "after close",
        sleeper.clone(),
        false,
        call("list-again", "terminal_list", json!({})),
    ));
    server.push(Reply::text("done"));

    let out = run.headless(&server, TERMINAL_ROWS, "use a terminal");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // The six tools are offered (sorted by name, as every request lists tools).
    let first = &server.requests()[0];
    let names: Vec<String> = first
        .tool_names()
        .into_iter()
        .filter(|n| n.starts_with("terminal_"))
        .collect();
    assert_eq!(
        names,
        [
            "terminal_close",
            "terminal_list",
            "terminal_open",
            "terminal_read",
            "terminal_send",
            "terminal_signal"
        ]
    );

    let texts = tool_texts(&run.session());
    assert_eq!(texts.len(), 10, "{texts:#?}");
    assert!(
        texts[0].starts_with("started terminal session pty-1 (main) [type: shell]\n"),
        "{}",
        texts[0]
    );
    // The echo of the command shows `$((6*7))`; only the output has 42.
    assert!(texts[1].contains("\nvalue-42\n"), "{}", texts[1]);
    assert!(
        texts[1].ends_with("\n[wait: stdin_read]\n[session: running]"),
        "{}",
        texts[1]
    );
    // The shell kept its variable and its working directory.
    assert!(texts[2].contains("\nagain-42 in /tmp\n"), "{}", texts[2]);
    assert!(texts[3].contains("\nREFUSED\n"), "{}", texts[3]);
    assert!(!escape.exists(), "the terminal wrote outside the workspace");
    assert!(texts[4].ends_with("[session: running]"), "{}", texts[4]);
    assert!(texts[5].contains("value-42"), "{}", texts[5]);
    assert!(texts[5].contains("again-42 in /tmp"), "{}", texts[5]);
    assert!(texts[5].contains("\n[lines: 0-"), "{}", texts[5]);
    assert!(
        texts[6].starts_with("pty-1 (main) [shell] running pid="),
        "{}",
        texts[6]
    );
    assert_eq!(texts[7], "Error: unknown PTY session pty-9");
    assert_eq!(texts[8], "closed terminal session pty-1");
    assert_eq!(texts[9], "(no terminal sessions)");

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].0, "before close");
    assert!(
        !seen[0].1.is_empty(),
        "the terminal's background process ran"
    );
    assert_eq!(
        seen[1],
        ("after close".to_string(), Vec::new()),
        "closing the terminal ended its processes"
    );
}

#[test]
fn a_terminal_left_open_dies_with_the_session() {
    let run = Run::new();
    let sleeper = run.marker("left-open");
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(call("open", "terminal_open", json!({"type": "shell"})));
    server.push(call(
        "sleep",
        "terminal_send",
        json!({"sessionId": "pty-1", "text": format!("exec -a {sleeper} sleep 300")}),
    ));
    server.push(Reply::text("leaving it open"));
    let started = Instant::now();
    let out = run.headless(&server, TERMINAL_ROWS, "start something in a terminal");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the session did not wait for the terminal"
    );
    let texts = tool_texts(&run.session());
    // `exec` replaced the shell by a program that does not read: the send settles on
    // silence, the program still running.
    assert!(
        texts[1].ends_with("\n[wait: inferred_idle]\n[session: running]"),
        "{}",
        texts[1]
    );
    assert_eq!(
        wait_processes(&sleeper, <[u32]>::is_empty),
        Vec::<u32>::new()
    );
}

#[test]
fn persistent_bash_keeps_the_directory_and_variables_between_calls() {
    let run = Run::new();
    let sleeper = run.marker("persistent-sleeper");
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(call(
        "a",
        "bash",
        json!({"command": "mkdir -p sub && cd sub && export GREETING=hello && COUNT=3"}),
    ));
    server.push(call(
        "b",
        "bash",
        json!({"command": "pwd; echo \"$GREETING $COUNT\"; bash -c 'echo child sees $GREETING'"}),
    ));
    server.push(call("c", "bash", json!({"command": "false"})));
    server.push(call(
        "d",
        "bash",
        json!({"command": format!("(exec -a {sleeper} sleep 300) & echo started")}),
    ));
    server.push(Reply::text("done"));
    let out = run.headless(&server, PERSISTENT_ROWS, "keep state in bash");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // One `bash`, the persistent one: a single `command` parameter.
    let first = &server.requests()[0];
    let bash: Vec<String> = first
        .tool_names()
        .into_iter()
        .filter(|n| n == "bash")
        .collect();
    assert_eq!(bash.len(), 1);
    let bash = first.tool("bash").unwrap();
    assert_eq!(bash["parameters"]["required"], json!(["command"]));
    assert_eq!(
        bash["parameters"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["command"]
    );

    let texts = tool_texts(&run.session());
    assert_eq!(texts.len(), 4, "{texts:#?}");
    assert_eq!(texts[0], "");
    let work = run.work.path().canonicalize().unwrap();
    assert_eq!(
        texts[1],
        format!("{}/sub\nhello 3\nchild sees hello", work.display())
    );
    assert_eq!(texts[2], "\n[exit code: 1]");
    assert!(texts[3].ends_with("started"), "{}", texts[3]);
    // The shell and what it started end with the session.
    assert_eq!(
        wait_processes(&sleeper, <[u32]>::is_empty),
        Vec::<u32>::new()
    );
}

/// `dsh acp` over the live `pty.cordis.yml` composition, driven over stdio.
struct Acp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    frames: std::sync::mpsc::Receiver<Value>,
    next_id: u64,
}

impl Acp {
    fn start(server: &MockServer, run: &Run) -> Self {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .arg("acp")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", run.home.path())
            .env("DSH_HOME", run.home.path().join(".dsh"))
            .env("DEEPSEEK_API_KEY", "sk-test")
            .env("DEEPSEEK_BASE_URL", server.url())
            .env("DSH_PERMISSION_MODE", "workspace-write")
            .env("DSH_SNAPSHOT_CONFIG", "pty.cordis.yml")
            // The repository's conformance compositions, which DSH_SNAPSHOT_CONFIG names.
            .arg("--compositions")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../conformance/compositions"
            ))
            .current_dir(run.work.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, frames) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
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

    /// Sends a request and returns its response plus the agent's text said meanwhile.
    fn call(&mut self, method: &str, params: Value) -> (Value, String) {
        use std::io::Write;
        let id = self.next_id;
        self.next_id += 1;
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{frame}").unwrap();
        self.stdin.flush().unwrap();
        let mut said = String::new();
        loop {
            let f = self
                .frames
                .recv_timeout(Duration::from_secs(30))
                .expect("a frame from dsh acp");
            if f.get("id") == Some(&json!(id)) && f.get("method").is_none() {
                return (f, said);
            }
            if f.pointer("/params/update/sessionUpdate") == Some(&json!("agent_message_chunk"))
                && let Some(t) = f
                    .pointer("/params/update/content/text")
                    .and_then(Value::as_str)
            {
                said.push_str(t);
            }
        }
    }

    fn prompt(&mut self, session: &Value, text: &str) -> String {
        let (done, said) = self.call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
        );
        assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
        said
    }
}

impl Drop for Acp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn switching_the_permission_preset_closes_the_sessions_terminals() {
    let run = Run::new();
    let sleeper = run.marker("preset-switch");
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(call("open", "terminal_open", json!({"type": "shell"})));
    server.push(call(
        "sleep",
        "terminal_send",
        json!({"sessionId": "pty-1", "text": format!("(exec -a {sleeper} sleep 300) &")}),
    ));
    server.push(Reply::text("opened"));
    server.push(call("list", "terminal_list", json!({})));
    server.push(Reply::dynamic(|req: &RecordedRequest| {
        Reply::text(format!(
            "listed: {}",
            req.last_tool_output().unwrap_or_default()
        ))
    }));

    let mut acp = Acp::start(&server, &run);
    acp.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let (new, _) = acp.call(
        "session/new",
        json!({"cwd": run.work.path(), "mcpServers": []}),
    );
    let session = new["result"]["sessionId"].clone();
    assert_eq!(acp.prompt(&session, "open a terminal"), "opened");
    let before = wait_processes(&sleeper, |p| !p.is_empty());
    assert!(!before.is_empty(), "the terminal's process runs");

    let said = acp.prompt(&session, "/permission read-only");
    assert!(said.contains("read-only"), "{said}");
    assert_eq!(
        wait_processes(&sleeper, <[u32]>::is_empty),
        Vec::<u32>::new(),
        "the mode change closed the terminal"
    );
    assert_eq!(
        acp.prompt(&session, "list terminals"),
        "listed: (no terminal sessions)"
    );
}

/// dsh ends (`signal`) while the model waits and a terminal runs a job of the shell in its
/// own process group: nothing of the terminal survives.
fn killed_mid_turn(mode: &str, signal: &str) -> Vec<u32> {
    let run = Run::new();
    let sleeper = run.marker(&format!("killed-{mode}-{signal}"));
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(call("open", "terminal_open", json!({"type": "shell"})));
    server.push(call(
        "sleep",
        "terminal_send",
        json!({"sessionId": "pty-1", "text": format!("(exec -a {sleeper} sleep 300) &")}),
    ));
    // The next model call hangs: dsh is ended while it waits.
    server.push(Reply::stall(Duration::from_secs(60)));
    let mut child = run.spawn(&server, mode, "start something in a terminal");
    let running = wait_processes(&sleeper, |p| !p.is_empty());
    assert!(!running.is_empty(), "the terminal's job never started");
    let status = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    child.wait().unwrap();
    wait_processes(&sleeper, <[u32]>::is_empty)
}

#[test]
fn a_terminal_dies_when_dsh_is_terminated_or_killed() {
    for mode in ["workspace-write", "danger-full-access"] {
        for signal in ["TERM", "KILL"] {
            assert_eq!(
                killed_mid_turn(mode, signal),
                Vec::<u32>::new(),
                "survivors under {mode} after SIG{signal}"
            );
        }
    }
}
