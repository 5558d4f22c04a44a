//! `dsh acp`'s options: `--projection` overrides the composition's projection, unknown or
//! malformed arguments are usage errors, and an upstream composition name needs a
//! compositions folder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn dsh_acp(args: &[&str], env: &[(&str, &str)]) -> Command {
    let home = std::env::temp_dir();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh"));
    cmd.arg("acp")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("DSH_HOME", home.join("dsh-acp-args-no-home"))
        .env("DEEPSEEK_API_KEY", "sk-test")
        .envs(env.iter().copied());
    cmd
}

/// The `initialize` result of `dsh acp` with `args`.
fn initialize(args: &[&str]) -> Value {
    let mut child = dsh_acp(args, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let request = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}});
    writeln!(stdin, "{request}").unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    drop(stdin);
    child.wait().unwrap();
    serde_json::from_str::<Value>(&line).unwrap()["result"].clone()
}

fn run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let Output { status, stderr, .. } = dsh_acp(args, env).stdin(Stdio::null()).output().unwrap();
    (status.code(), String::from_utf8_lossy(&stderr).into_owned())
}

#[test]
fn projection_overrides_what_the_composition_chose() {
    // The acp profile serves rich: sessions can be loaded.
    let rich = initialize(&[]);
    assert_eq!(rich["agentCapabilities"]["loadSession"], json!(true));
    assert_eq!(initialize(&["--projection", "rich"]), rich);
    // Upstream 0.1's committed stream advertises no session loading.
    let committed = initialize(&["--projection=committed"]);
    assert_eq!(committed["agentCapabilities"].get("loadSession"), None);
}

#[test]
fn bad_arguments_are_usage_errors() {
    for (args, needle) in [
        (&["--bogus"][..], "unknown argument \"--bogus\""),
        (
            &["--projection", "fancy"][..],
            "--projection must be rich or committed",
        ),
        (
            &["--projection"][..],
            "--projection needs rich or committed",
        ),
        (&["--compositions"][..], "--compositions needs a folder"),
    ] {
        let (code, stderr) = run(args, &[]);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    let (code, stderr) = run(&["--help"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn an_upstream_name_needs_a_compositions_folder() {
    let (code, stderr) = run(&[], &[("DSH_SNAPSHOT_CONFIG", "pty.cordis.yml")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("DSH_SNAPSHOT_CONFIG names \"pty.cordis.yml\", but this server has only its built-in composition; pass --compositions DIR"),
        "{stderr}"
    );
    let (code, stderr) = run(&["--compositions", "/nonexistent-folder"], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("\"cordis.yml\", which is not a composition in /nonexistent-folder (known: none; is the folder right?)"),
        "{stderr}"
    );
}
