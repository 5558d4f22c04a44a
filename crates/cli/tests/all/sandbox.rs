//! The OS sandbox seen from the real binary: secrets refused by the file tools, refusal
//! without a runner, permission presets and confined hook commands. The escape suite
//! itself is `escape.rs`.
//!
//! bubblewrap must be installed (`.ci/run` installs it); without it the bwrap half is
//! skipped with a visible message, except under `CI=true` where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::process::Command;

use dsh_test_support::mock_server::{MockServer, Reply};
use serde_json::json;

use crate::common;

use common::confined::{API_KEY, Confined as World, STORED_SECRET};

fn dsh(world: &World, server: &MockServer, mode: &str, runner: &str) -> std::process::Output {
    let patch = world.work.join(format!("runner-{runner}.yml"));
    std::fs::write(
        &patch,
        format!(
            "- id: sandbox\n  config:\n    runners: [{runner}]\n{}",
            world.policy_row()
        ),
    )
    .unwrap();
    Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &world.home)
        .env("DSH_HOME", &world.dsh_home)
        .env("TMPDIR", &world.tmp)
        .env("DEEPSEEK_API_KEY", API_KEY)
        .env("DATABASE_URL", "postgres://user:hunter2secret@db/x")
        .env("GITHUB_PAT", "ghp_pat_value_123456")
        .env("DEEPSEEK_BASE_URL", server.url())
        .env("DSH_PERMISSION_MODE", mode)
        .current_dir(&world.work)
        .args(["--profile", "headless", "--patch"])
        .arg(&patch)
        .arg("probe the sandbox")
        .output()
        .unwrap()
}

#[test]
fn the_file_tools_refuse_secrets_in_every_mode() {
    for mode in ["read-only", "workspace-write", "danger-full-access"] {
        let world = World::new();
        let creds = world.dsh_home.join(".credentials.yaml");
        let calls = [
            ("read", json!({"file_path": creds})),
            ("read", json!({"file_path": "/proc/self/environ"})),
            (
                "grep",
                json!({"pattern": "sk-", "path": "/proc/self/environ"}),
            ),
            ("grep", json!({"pattern": "sk-", "path": creds})),
            (
                "str_replace_editor",
                json!({"command": "view", "path": creds}),
            ),
        ];
        let mut replies: Vec<Reply> = calls
            .iter()
            .enumerate()
            .map(|(i, (tool, args))| Reply::tool_call(&format!("f{i}"), tool, &args.to_string()))
            .collect();
        replies.push(Reply::text("done"));
        let server = MockServer::with_replies(replies).answer_untooled("T");
        let out = dsh(&world, &server, mode, "landlock");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let requests = server.requests();
        for (i, (tool, _)) in calls.iter().enumerate() {
            let shown = requests[i + 1].last_tool_output().unwrap_or_default();
            assert!(
                shown.contains("may not read")
                    && !shown.contains(STORED_SECRET)
                    && !shown.contains(API_KEY),
                "{mode}: {tool} #{i}: {shown}"
            );
        }
    }
}

#[test]
fn a_confined_mode_without_a_usable_runner_refuses_commands() {
    let world = World::new();
    let patch = world.work.join("none.yml");
    // A runner command that does not exist: the only rung, trusted unprobed, fails to spawn.
    std::fs::write(
        &patch,
        "- id: sandbox\n  config:\n    runnerCommand: ['/nonexistent/runner']\n    runnerFailureSignatures: ['runner: ']\n",
    )
    .unwrap();
    let server = MockServer::with_replies([
        Reply::tool_call(
            "c1",
            "bash",
            r#"{"command":"touch ran.txt","description":"touch"}"#,
        ),
        Reply::text("done"),
    ])
    .answer_untooled("T");
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &world.home)
        .env("DSH_HOME", &world.dsh_home)
        .env("TMPDIR", &world.tmp)
        .env("DEEPSEEK_API_KEY", API_KEY)
        .env("DEEPSEEK_BASE_URL", server.url())
        .env("DSH_PERMISSION_MODE", "workspace-write")
        .current_dir(&world.work)
        .args(["--profile", "headless", "--patch"])
        .arg(&patch)
        .arg("touch")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = server.requests()[1].last_tool_output().unwrap();
    assert_eq!(
        shown,
        "Error: sandbox mode \"workspace-write\" is requested but no sandbox backend is usable on this host; refusing to run the command unconfined. Install bubblewrap or run a Landlock-enforcing kernel (Linux), ensure sandbox-exec is usable (macOS), or ensure the ACL restricted-token runner can start (Windows) — otherwise switch the consumer to danger-full-access. Runner failure: Error: spawn /nonexistent/runner ENOENT"
    );
    assert!(
        !world.work.join("ran.txt").exists(),
        "the command ran unconfined"
    );
}

fn headless(world: &World, server: &MockServer, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &world.home)
        .env("DSH_HOME", &world.dsh_home)
        .env("TMPDIR", &world.tmp)
        .env("DEEPSEEK_API_KEY", API_KEY)
        .env("DEEPSEEK_BASE_URL", server.url())
        .current_dir(&world.work)
        .args(["--profile", "headless"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn permission_presets_switch_a_session_and_the_model_is_told() {
    let world = World::new();
    let idle = MockServer::with_replies([]).answer_untooled("T");
    let out = headless(&world, &idle, &["/permission"]);
    assert_eq!(
        (out.status.code(), String::from_utf8_lossy(&out.stdout).to_string()),
        (
            Some(0),
            "current preset workspace-write (available: read-only, workspace-write, danger-full-access)\n".to_string()
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = headless(&world, &idle, &["/bogus"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown command /bogus; available commands:\n/compact — Compact older conversation history\n")
            && err.contains("\n/permission <preset> — "),
        "{err}"
    );
    assert!(idle.requests().is_empty(), "no command reached the model");

    // Switch a stored session to read-only, then continue it: the bash write is refused and
    // the runtime context says read-only.
    let out = headless(
        &world,
        &idle,
        &["--output-format", "stream-json", "/permission read-only"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .and_then(|_| {
            let root = world.dsh_home.join("sessions");
            let files = dsh_persistence::SessionFiles::new(
                root,
                dsh_persistence::Compression::Zstd,
                dsh_persistence::ChunkPacking::Packed,
            );
            files.list().ok()?.last().map(|(h, _)| h.id.clone())
        })
        .unwrap();
    let server = MockServer::with_replies([
        Reply::tool_call(
            "w",
            "bash",
            r#"{"command":"touch made.txt","description":"touch"}"#,
        ),
        Reply::text("done"),
    ])
    .answer_untooled("T");
    let out = headless(&world, &server, &["--resume", &id, "make a file"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!world.work.join("made.txt").exists());
    let first = &server.requests()[0];
    let context = first
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .any(|t| t.contains("File policy: read-only"));
    assert!(context, "{:?}", first.messages());
    assert!(
        server.requests()[1]
            .last_tool_output()
            .unwrap()
            .contains("[sandbox: file access denied under read-only mode]")
    );
}

#[test]
fn hook_commands_run_confined_under_the_default_mode() {
    let world = World::new();
    let outside = world.outside.join("hook-escape");
    std::fs::write(
        world.work.join("hooks.json"),
        json!({"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command",
            "command": format!("echo x > {} 2>/dev/null; echo y > hook-inside; exit 0", outside.display())}]}]}})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        world.work.join("hooks.yml"),
        format!(
            "- insert:\n    - id: hooks-claude-code\n      name: '@deepseek-ai/dsh-hooks-claude-code'\n      config:\n        configPath: ./hooks.json\n{}",
            world.policy_row()
        ),
    )
    .unwrap();
    let server = MockServer::with_replies([Reply::text("ok")]).answer_untooled("T");
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &world.home)
        .env("DSH_HOME", &world.dsh_home)
        .env("TMPDIR", &world.tmp)
        .env("DEEPSEEK_API_KEY", API_KEY)
        .env("DEEPSEEK_BASE_URL", server.url())
        .env("DSH_PERMISSION_MODE", "workspace-write")
        .current_dir(&world.work)
        .args(["--profile", "headless", "--patch", "hooks.yml", "hi"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(world.work.join("hook-inside").exists(), "the hook ran");
    assert!(!outside.exists(), "the hook wrote outside the workspace");
}
