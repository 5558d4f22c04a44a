//! `dsh sessions`: list, show, fork and export stored sessions, including logs written by
//! upstream dsh (the conformance fixtures, when ../shared is present).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use dsh_test_support::mock_server::{MockServer, Reply};
use pretty_assertions::assert_eq;
use serde_json::Value;

fn dsh(home: &Path, cwd: &Path, url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("DSH_HOME", home.join(".dsh"))
        .env("DEEPSEEK_API_KEY", "sk-test")
        .env("DEEPSEEK_BASE_URL", url)
        .current_dir(cwd)
        .args(args)
        .output()
        .unwrap()
}

fn out(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).to_string()
}

#[test]
fn list_show_fork_and_export() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::start().answer_untooled("Greeting test");
    server.push_all([Reply::text("Hi there."), Reply::text("Second.")]);
    let url = server.url();
    out(&dsh(
        home.path(),
        work.path(),
        &url,
        &["--profile", "headless", "say hi"],
    ));
    let listing = out(&dsh(home.path(), work.path(), &url, &["sessions", "list"]));
    let id = listing.split_whitespace().next().unwrap().to_string();
    assert!(listing.contains("1 turns"), "{listing}");
    let elsewhere = tempfile::tempdir().unwrap();
    assert_eq!(
        out(&dsh(
            home.path(),
            elsewhere.path(),
            &url,
            &["sessions", "list"]
        )),
        "",
        "list shows this directory's sessions"
    );
    assert!(
        out(&dsh(
            home.path(),
            elsewhere.path(),
            &url,
            &["sessions", "list", "--all"]
        ))
        .contains(&id)
    );

    let shown = out(&dsh(
        home.path(),
        work.path(),
        &url,
        &["sessions", "show", &id],
    ));
    assert!(
        shown.contains("[user] say hi")
            && shown.contains("[assistant] Hi there.")
            && shown.contains("-- turn 1 completed"),
        "{shown}"
    );

    let messages: Vec<Value> = out(&dsh(
        home.path(),
        work.path(),
        &url,
        &["sessions", "show", &id, "--messages"],
    ))
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "user", "assistant"],
        "prompt, runtime context, answer"
    );

    let events = out(&dsh(
        home.path(),
        work.path(),
        &url,
        &["sessions", "show", &id, "--json"],
    ));
    let exported = out(&dsh(
        home.path(),
        work.path(),
        &url,
        &["sessions", "export", &id],
    ));
    assert!(
        exported.lines().count() <= events.lines().count() + 1,
        "export = header + (packed) records"
    );
    assert!(exported.starts_with("{\"type\":\"session\""));

    let child = out(&dsh(
        home.path(),
        work.path(),
        &url,
        &["sessions", "fork", &id],
    ))
    .trim()
    .to_string();
    let child_view = out(&dsh(
        home.path(),
        work.path(),
        &url,
        &["sessions", "show", &child],
    ));
    assert!(
        child_view.contains(&format!("forked from {id}"))
            && child_view.contains("[assistant] Hi there."),
        "{child_view}"
    );
    // The fork resumes where the parent's turn ended.
    out(&dsh(
        home.path(),
        work.path(),
        &url,
        &["--profile", "headless", "--resume", &child, "again"],
    ));
    let child_events = out(&dsh(
        home.path(),
        work.path(),
        &url,
        &["sessions", "show", &child, "--events"],
    ));
    assert!(child_events.contains("turn 2"), "{child_events}");

    let bad = dsh(
        home.path(),
        work.path(),
        &url,
        &["sessions", "show", "no-such-session"],
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no stored session \"no-such-session\""));
    let early = dsh(
        home.path(),
        work.path(),
        &url,
        &["sessions", "fork", &id, "--at", "1"],
    );
    assert!(
        early.status.success(),
        "forking at a completed turn's event works"
    );
}

#[test]
fn upstream_logs_open_by_path() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/acp");
    if !root.exists() {
        dsh_test_support::prereq::skip("../shared is absent");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let file = root.join("bash-tool-turn/session.jsonl");
    let shown = out(&dsh(
        home.path(),
        home.path(),
        "http://127.0.0.1:9",
        &["sessions", "show", file.to_str().unwrap()],
    ));
    assert!(
        shown.contains("[assistant] DONE") && shown.contains("← TERMINAL_OK"),
        "{shown}"
    );
    let messages = out(&dsh(
        home.path(),
        home.path(),
        "http://127.0.0.1:9",
        &["sessions", "show", file.to_str().unwrap(), "--messages"],
    ));
    assert_eq!(
        messages.lines().count(),
        5,
        "prompt, context, call, result, answer"
    );
}

#[test]
fn a_subagent_child_is_listed_under_its_parent_and_opens() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::start().answer_untooled("Delegation test");
    server.push_all([
        Reply::tool_call(
            "call-1",
            "subagent",
            r#"{"description":"Count files","prompt":"Count the files and say CHILD_DONE.","run_in_background":false}"#,
        ),
        Reply::text("CHILD_DONE"),
        Reply::text("The child said CHILD_DONE."),
    ]);
    let url = server.url();
    let run = out(&dsh(
        home.path(),
        work.path(),
        &url,
        &["--profile", "headless", "delegate the count"],
    ));
    assert!(run.contains("The child said CHILD_DONE."), "{run}");

    let listing = out(&dsh(home.path(), work.path(), &url, &["sessions", "list"]));
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 2, "{listing}");
    assert!(
        !lines[0].starts_with(' '),
        "the parent comes first: {listing}"
    );
    assert!(
        lines[1].starts_with("  \u{21b3} "),
        "the child is nested: {listing}"
    );
    let parent = lines[0].split_whitespace().next().unwrap().to_string();
    let child = lines[1].split_whitespace().nth(1).unwrap().to_string();

    let shown = out(&dsh(
        home.path(),
        work.path(),
        &url,
        &["sessions", "show", &parent],
    ));
    let tail = shown
        .split("-- subagents (1):\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no children section: {shown}"));
    assert!(
        tail.starts_with(&format!("{child}  completed  1 turn  Count files")),
        "{shown}"
    );

    let opened = out(&dsh(
        home.path(),
        work.path(),
        &url,
        &["sessions", "show", &child],
    ));
    assert!(
        opened.contains(&format!("subagent of {parent} (depth 1)")),
        "{opened}"
    );
    assert!(opened.contains("[assistant] CHILD_DONE"), "{opened}");
    assert!(!opened.contains("-- subagents"), "{opened}");
}
