//! Upstream 0.2's `cwd` argument of `subagent` / `subagent_fork`: the child starts in the
//! named directory inside the workspace; a directory outside it is refused (the child's
//! sandbox is rooted at its directory).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Run, stderr};
use dsh_session::types;
use dsh_test_support::mock_server::{MockServer, Reply};

fn delegate(run: &Run, args: &str, child_answer: &str) -> (std::process::Output, MockServer) {
    let server = MockServer::start().answer_untooled("T");
    server.push_all([
        Reply::tool_call("c1", "subagent", args),
        Reply::text(child_answer),
        Reply::echo_tool_output(),
    ]);
    let out = run
        .base(&server)
        .args(["--profile", "headless", "delegate"])
        .output()
        .unwrap();
    (out, server)
}

#[test]
fn a_child_starts_in_the_directory_it_is_given() {
    let run = Run::new();
    std::fs::create_dir_all(run.work.path().join("pkg/inner")).unwrap();
    let (out, _server) = delegate(
        &run,
        r#"{"description":"Look inside","prompt":"Say where you are.","cwd":"pkg/inner","run_in_background":false}"#,
        "CHILD_HERE",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sessions = run.files().list().unwrap();
    assert_eq!(sessions.len(), 2, "parent and child");
    let expected = run
        .work
        .path()
        .join("pkg/inner")
        .canonicalize()
        .unwrap()
        .display()
        .to_string();
    let cwds: Vec<Option<String>> = sessions.iter().map(|(s, _)| s.cwd.clone()).collect();
    assert!(
        cwds.iter().any(|c| c.as_deref() == Some(expected.as_str())),
        "{cwds:?}"
    );
}

#[test]
fn a_directory_outside_the_workspace_is_refused() {
    let run = Run::new();
    let (out, _server) = delegate(
        &run,
        r#"{"description":"Escape","prompt":"x","cwd":"/","run_in_background":false}"#,
        "never",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events = run.session();
    let result = events
        .iter()
        .find(|e| e.is(types::TOOL_RESULT))
        .expect("the call has a result");
    let text = result.data["message"]["content"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(text.contains("outside your workspace"), "{text}");
    assert_eq!(run.files().list().unwrap().len(), 1, "no child was started");
}
