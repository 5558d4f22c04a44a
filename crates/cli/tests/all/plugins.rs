//! External plugins through the `dsh` binary: `dsh plugin add|list|remove` manage a
//! `plugin-host` row in the profile's patch layer, and a headless run against the mock LLM
//! loads `examples/plugins/guard.py` (python3; skips without it): the model calls the
//! plugin's tool, the plugin's `agent/request` stage rewrites the request, its section is
//! in the system prompt, and its `tools/pre-execute` stage vetoes a destructive bash command.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use dsh_session::{Event, types};
use dsh_test_support::mock_server::{MockServer, Reply};
use pretty_assertions::assert_eq;

use common::{Run, stderr};

fn guard_script() -> Option<String> {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        dsh_test_support::prereq::skip("python3 is needed for examples/plugins/guard.py");
        return None;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/plugins/guard.py");
    Some(path.canonicalize().unwrap().display().to_string())
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

#[test]
fn the_guard_plugin_adds_a_tool_rewrites_the_request_and_vetoes_a_command() {
    let Some(guard) = guard_script() else { return };
    let run = Run::new();
    let server = MockServer::with_replies([
        Reply::tool_call("c1", "guard_note", r#"{"note":"hi"}"#),
        Reply::tool_call("c2", "bash", r#"{"command":"rm -rf / --no-preserve-root"}"#),
        Reply::text("done"),
    ])
    .answer_untooled("T");
    let plugin = |args: &[&str]| {
        let out = run.base(&server).arg("plugin").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    plugin(&[
        "--profile",
        "headless",
        "add",
        "guard",
        "--",
        "python3",
        &guard,
    ]);
    plugin(&["add", "other", "--timeout-ms", "100", "--", "false"]);
    assert_eq!(
        plugin(&["--profile", "headless", "list"]),
        format!("guard\tpython3 {guard}\nother\tfalse\n")
    );
    plugin(&["remove", "other"]);
    assert_eq!(plugin(&["list"]), format!("guard\tpython3 {guard}\n"));

    let out = run
        .base(&server)
        .args(["--profile", "headless", "clean up"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
    assert_eq!(
        tool_results(&run.session()),
        vec![
            "guard noted: hi".to_string(),
            "Error: guard: refusing `rm -rf /`".to_string()
        ]
    );
    let requests = server.requests();
    let first = requests[0].json.as_ref().unwrap();
    assert_eq!(first["temperature"], 0.25, "agent/request was rewritten");
    let system = requests[0].system_text();
    assert!(
        system.contains("A guard plugin is active"),
        "the plugin's section is in the system prompt: {system}"
    );
    assert!(requests[0].tool_names().contains(&"guard_note".to_string()));
}

#[test]
fn plugin_command_errors_are_clear() {
    let run = Run::new();
    let server = MockServer::with_replies([]);
    let out = run
        .base(&server)
        .args(["plugin", "remove", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("dsh plugin: no plugin row \"nope\""),
        "{}",
        stderr(&out)
    );
    let out = run
        .base(&server)
        .args(["plugin", "add", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("add needs a command"),
        "{}",
        stderr(&out)
    );
}
