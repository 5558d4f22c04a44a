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
    dsh_command(world, server, mode, runner).output().unwrap()
}

/// `dsh --profile headless` in `world` under `mode`, with `runner` as the only sandbox runner.
fn dsh_command(world: &World, server: &MockServer, mode: &str, runner: &str) -> Command {
    let patch = world.work.join(format!("runner-{runner}.yml"));
    std::fs::write(
        &patch,
        format!(
            "- id: sandbox\n  config:\n    runners: [{runner}]\n{}",
            world.policy_row()
        ),
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh"));
    command
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
        .arg("probe the sandbox");
    command
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

/// Runs `command` to a successful end and returns the tool outputs of the model's last
/// request.
fn tool_outputs(mut command: Command, server: &MockServer, label: &str) -> Vec<String> {
    let out = command.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{label}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.requests().last().unwrap().tool_outputs()
}

fn bwrap_usable() -> bool {
    Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "true"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Prints the pid of the command's grandparent (the resident, when there is one) and that
/// process's command line.
const WHO_STARTED_ME: &str =
    "gp=$(awk '{print $4}' /proc/$PPID/stat); echo \"gp=$gp\"; tr '\\0' ' ' < /proc/$gp/cmdline";

/// A session's confined commands run in one resident sandbox: the same confined process
/// starts each of them (its private `/tmp` under bubblewrap lasts the session), exit codes
/// and timeouts come back as before, nothing a command leaves behind outlives it, a write
/// outside the roots is still refused, and `DSH_SANDBOX_RESIDENT=0` gives every command its
/// own runner again.
#[test]
fn a_session_runs_its_commands_in_one_resident_sandbox() {
    let mut runners = vec!["landlock"];
    if bwrap_usable() {
        runners.insert(0, "bwrap");
    } else {
        dsh_test_support::prereq::skip(
            "bubblewrap is not usable here (install the Debian package bubblewrap); only the Landlock resident is tested",
        );
    }
    for runner in runners {
        for resident in [true, false] {
            let world = World::new();
            let outside = world.outside.join(format!("resident-{runner}-probe"));
            let tag = format!("dsh-resident-{}-{runner}-{resident}", std::process::id());
            let call = |id: &str, command: String, timeout: Option<u32>| {
                let mut args = json!({"command": command, "description": "probe"});
                if let Some(t) = timeout {
                    args["timeoutMs"] = json!(t);
                }
                Reply::tool_call(id, "bash", &args.to_string())
            };
            let server = MockServer::with_replies([
                call("c1", "echo one; exit 3".into(), None),
                call(
                    "c2",
                    format!(
                        "{WHO_STARTED_ME}; echo kept > /tmp/{tag} 2>/dev/null; echo x > {}",
                        outside.display()
                    ),
                    None,
                ),
                call(
                    "c3",
                    format!(
                        "{WHO_STARTED_ME}; cat /tmp/{tag}; (exec -a {tag}-a sleep 97 &); setsid bash -c 'exec -a {tag}-b sleep 98' & (exec -a {tag}-c sleep 99) & echo started"
                    ),
                    None,
                ),
                call("c4", format!("exec -a {tag}-slow sleep 30"), Some(700)),
                // The command starts with no signal blocked (its supervisor blocks SIGCHLD).
                call("c5", "echo after; grep SigBlk /proc/self/status".into(), None),
                // A hostile command turns on its resident: its descriptors stay closed to it,
                // and killing or stopping it costs only the session's speed.
                call(
                    "c6",
                    "gp=$(awk '{print $4}' /proc/$PPID/stat); echo gp=$gp; ls -l /proc/$gp/fd/ 2>&1 | head -2; if tr '\\0' ' ' < /proc/$gp/cmdline | grep -q -- --serve; then kill -9 $gp; fi; echo survived".into(),
                    None,
                ),
                call("c7", format!("{WHO_STARTED_ME}; echo x > {} ; echo alive", outside.display()), None),
                call(
                    "c8",
                    "gp=$(awk '{print $4}' /proc/$PPID/stat); if tr '\\0' ' ' < /proc/$gp/cmdline | grep -q -- --serve; then kill -STOP $gp; fi; echo stopped".into(),
                    None,
                ),
                call("c9", format!("echo x > {} ; echo still", outside.display()), None),
                Reply::text("done"),
            ])
            .answer_untooled("T");
            let mut command = dsh_command(&world, &server, "workspace-write", runner);
            if !resident {
                command.env("DSH_SANDBOX_RESIDENT", "0");
            }
            let label = format!("{runner}, resident {resident}");
            let outputs = tool_outputs(command, &server, &label);
            assert_eq!(outputs.len(), 9, "{label}: {outputs:#?}");
            assert!(
                outputs[0].contains("one") && outputs[0].contains('3'),
                "{label}: exit code: {}",
                outputs[0]
            );
            let starter = |o: &str| {
                o.lines()
                    .find_map(|l| l.strip_prefix("gp="))
                    .map(str::to_string)
                    .unwrap_or_default()
            };
            let (second, third) = (&outputs[1], &outputs[2]);
            if resident {
                assert!(
                    second.contains("--serve"),
                    "{label}: not a resident: {second}"
                );
                assert_eq!(starter(second), starter(third), "{label}: two residents");
                if runner == "bwrap" {
                    assert!(
                        third.contains("kept"),
                        "{label}: /tmp did not last: {third}"
                    );
                }
            } else {
                assert!(!second.contains("--serve"), "{label}: a resident: {second}");
            }
            assert!(!outside.exists(), "{label}: wrote outside the roots");
            assert!(outputs[2].contains("started"), "{label}: {}", outputs[2]);
            assert!(
                outputs[3].contains("[timed out after 700ms]"),
                "{label}: no timeout: {}",
                outputs[3]
            );
            assert!(outputs[4].contains("after"), "{label}: {}", outputs[4]);
            assert!(
                outputs[4].contains("SigBlk:\t0000000000000000"),
                "{label}: the command inherited blocked signals: {}",
                outputs[4]
            );
            if resident {
                assert!(
                    outputs[5].contains("Permission denied"),
                    "{label}: the resident's descriptors are open to its commands: {}",
                    outputs[5]
                );
            }
            assert!(outputs[6].contains("alive"), "{label}: {}", outputs[6]);
            if resident {
                // The killed resident's spare died with it: a new resident runs the next one
                // (under bubblewrap each resident is pid 2 of a namespace of its own).
                assert!(
                    outputs[6].contains("--serve")
                        && (runner == "bwrap" || starter(&outputs[6]) != starter(second)),
                    "{label}: the command after the kill ran outside a new resident: {}",
                    outputs[6]
                );
            }
            assert!(outputs[8].contains("still"), "{label}: {}", outputs[8]);
            let left = Command::new("pgrep").args(["-f", &tag]).output().unwrap();
            assert!(
                left.stdout.is_empty(),
                "{label}: processes outlived their command: {}",
                String::from_utf8_lossy(&left.stdout)
            );
            let _ = std::fs::remove_file(format!("/tmp/{tag}"));
        }
    }
}

/// A passed bubblewrap probe is remembered in the harness home: a second `dsh` on the same
/// home starts its sandbox without probing, and a replaced `bwrap` is probed again. A
/// `bwrap` wrapper first on `PATH` logs every start of bubblewrap (the probes are the starts
/// that are not a resident's `--serve`).
#[test]
fn a_second_run_on_one_home_trusts_the_recorded_bubblewrap_probe() {
    if !bwrap_usable() {
        dsh_test_support::prereq::skip(
            "bubblewrap is not usable here (install the Debian package bubblewrap)",
        );
        return;
    }
    let real = Command::new("sh")
        .args(["-c", "command -v bwrap"])
        .output()
        .unwrap();
    let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
    let world = World::new();
    let bin = world.root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let starts = world.root.path().join("bwrap-starts");
    let wrapper = bin.join("bwrap");
    let write_wrapper = |note: &str| {
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\n# {note}\nprintf '%s\\n' \"$*\" >> '{}'\nexec '{real}' \"$@\"\n",
                starts.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    write_wrapper("first");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // One run: a confined `echo`, then the answer. Returns (probes, resident starts).
    let run = |label: &str| {
        let _ = std::fs::remove_file(&starts);
        let server = MockServer::with_replies([
            Reply::tool_call(
                "c1",
                "bash",
                &json!({"command": "echo ran-confined", "description": "probe"}).to_string(),
            ),
            Reply::text("done"),
        ])
        .answer_untooled("T");
        let mut command = dsh_command(&world, &server, "workspace-write", "bwrap");
        command.env("PATH", &path);
        let outputs = tool_outputs(command, &server, label);
        assert!(
            outputs.first().is_some_and(|o| o.contains("ran-confined")),
            "{label}: {outputs:?}"
        );
        let log = std::fs::read_to_string(&starts).unwrap_or_default();
        let serve = log.lines().filter(|l| l.contains("--serve")).count();
        (log.lines().count() - serve, serve)
    };
    let (probes, serve) = run("first run");
    assert!(probes >= 1, "the first run did not probe bubblewrap");
    assert_eq!(serve, 1, "the first run started {serve} residents");
    let record = world.dsh_home.join("cache").join("sandbox-probe");
    assert!(record.is_file(), "no probe record at {}", record.display());
    let (probes, serve) = run("second run");
    assert_eq!(probes, 0, "the second run probed bubblewrap again");
    assert_eq!(serve, 1, "the second run started {serve} residents");
    write_wrapper("replaced");
    let (probes, _) = run("after bwrap was replaced");
    assert!(probes >= 1, "a replaced bwrap was trusted without a probe");
}
