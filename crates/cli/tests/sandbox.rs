//! The OS sandbox seen from the real binary: an escape suite run through the `bash` tool
//! (and the file tools) in each confined mode, under each runner, against the mock LLM.
//! Every probe's effect is checked from outside the sandbox (the host file system, a
//! loopback listener, the text the model received); the suite asserts zero escapes.
//!
//! bubblewrap must be installed (`.ci/run` installs it); without it the bwrap half is
//! skipped with a visible message, except under `CI=true` where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use dsh_test_support::mock_server::{MockServer, Reply};
use serde_json::json;

const API_KEY: &str = "sk-escape-suite-key-0123456789";
const STORED_SECRET: &str = "sk-stored-credential-9876543210";

struct Probe {
    name: &'static str,
    command: String,
}

struct World {
    _root: tempfile::TempDir,
    home: PathBuf,
    dsh_home: PathBuf,
    work: PathBuf,
    outside: PathBuf,
    listener: TcpListener,
}

impl World {
    fn new() -> Self {
        // Outside the temp roots (/tmp is writable under workspace-write by policy), so a
        // write to `outside` is an escape in every confined mode.
        let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let home = root.path().join("home");
        let dsh_home = home.join(".dsh");
        let work = root.path().join("ws");
        let outside = root.path().join("outside");
        for d in [&dsh_home, &work, &outside] {
            std::fs::create_dir_all(d).unwrap();
        }
        let creds = dsh_home.join(".credentials.yaml");
        std::fs::write(
            &creds,
            format!("version: 1\nrefs:\n  OTHER_SERVICE_TOKEN: {STORED_SECRET}\n"),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(outside.join("victim.txt"), "original\n").unwrap();
        std::fs::create_dir_all(work.join(".git")).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        Self {
            _root: root,
            home,
            dsh_home,
            work,
            outside,
            listener,
        }
    }

    fn probes(&self, tag: &str) -> Vec<Probe> {
        let o = self.outside.display();
        let port = self.listener.local_addr().unwrap().port();
        let p = |name: &'static str, command: String| Probe { name, command };
        vec![
            p("write ../", format!("echo x > ../outside/escape-{tag}-1")),
            p("write absolute", format!("echo x > {o}/escape-{tag}-2")),
            p("write /etc", format!("echo x > /etc/dsh-escape-{tag}")),
            p(
                "symlink out",
                format!("ln -sfn {o} link-{tag} && echo x > link-{tag}/escape-{tag}-3"),
            ),
            p(
                "hard link out",
                format!("ln {o}/victim.txt hl-{tag}; echo pwned >> hl-{tag}"),
            ),
            p(
                "/proc/self/root",
                format!("echo x > /proc/self/root{o}/escape-{tag}-4"),
            ),
            p(
                "remount /",
                format!(
                    "mount -o remount,rw / 2>&1; mount -o remount,rw,bind / / 2>&1; echo x > {o}/escape-{tag}-5"
                ),
            ),
            p("/tmp", format!("echo x > /tmp/dsh-escape-{tag}")),
            p(
                "credentials file",
                "cat \"$DSH_HOME/.credentials.yaml\"".into(),
            ),
            p("own environ", "tr '\\0' '\\n' < /proc/self/environ".into()),
            p(
                "parent environ",
                "tr '\\0' '\\n' < /proc/$PPID/environ".into(),
            ),
            p(
                "every environ",
                "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'".into(),
            ),
            p("env", "env".into()),
            p(
                "network",
                format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"),
            ),
        ]
    }
}

fn dsh(world: &World, server: &MockServer, mode: &str, runner: &str) -> std::process::Output {
    let patch = world.work.join(format!("runner-{runner}.yml"));
    std::fs::write(
        &patch,
        format!("- id: sandbox\n  config:\n    runners: [{runner}]\n"),
    )
    .unwrap();
    Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &world.home)
        .env("DSH_HOME", &world.dsh_home)
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

fn exists(p: &Path) -> bool {
    p.symlink_metadata().is_ok()
}

/// Runs every probe under `mode` and `runner`; returns (probes, escapes).
fn escape_suite(mode: &str, runner: &str) -> (usize, Vec<String>) {
    let world = World::new();
    let tag = format!("{runner}-{mode}");
    let mut probes = world.probes(&tag);
    if mode == "danger-full-access" {
        // The negative control must not touch the host's /etc or mounts.
        probes.retain(|p| p.name != "write /etc" && p.name != "remount /");
    }
    let mut replies: Vec<Reply> = probes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            Reply::tool_call(
                &format!("p{i}"),
                "bash",
                &json!({"command": p.command, "description": p.name}).to_string(),
            )
        })
        .collect();
    replies.push(Reply::text("probed"));
    let server = MockServer::with_replies(replies).answer_untooled("T");
    let out = dsh(&world, &server, mode, runner);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    assert_eq!(requests.len(), probes.len() + 1);
    let mut escapes = Vec::new();
    let mut escaped = |what: &str, detail: String| escapes.push(format!("{tag}: {what}: {detail}"));
    for (i, probe) in probes.iter().enumerate() {
        let shown = requests[i + 1].last_tool_output().unwrap_or_default();
        assert!(
            !shown.contains("SANDBOX_UNAVAILABLE") && !shown.contains("no sandbox backend"),
            "{tag}: the runner refused: {shown}"
        );
        for secret in [
            API_KEY,
            STORED_SECRET,
            "hunter2secret",
            "ghp_pat_value_123456",
        ] {
            if shown.contains(secret) {
                escaped(probe.name, format!("the output shows {secret}"));
            }
        }
        if probe.name == "network" && shown.contains("connected") {
            escaped(probe.name, "connected".into());
        }
    }
    for n in 1..=5 {
        let f = world.outside.join(format!("escape-{tag}-{n}"));
        if exists(&f) {
            escaped("write outside", f.display().to_string());
        }
    }
    for f in [
        PathBuf::from(format!("/etc/dsh-escape-{tag}")),
        PathBuf::from(format!("/tmp/dsh-escape-{tag}")),
    ] {
        // A private /tmp (bwrap) keeps writes from the host; Landlock's /tmp is the host's
        // and writable only in workspace-write.
        let allowed = mode == "workspace-write" && f.starts_with("/tmp");
        if exists(&f) {
            let _ = std::fs::remove_file(&f);
            if !allowed {
                escaped("write", f.display().to_string());
            }
        }
    }
    if std::fs::read_to_string(world.outside.join("victim.txt")).unwrap() != "original\n" {
        escaped("hard link out", "the outside file changed".into());
    }
    if world.listener.accept().is_ok() {
        escaped(
            "network",
            "the loopback listener accepted a connection".into(),
        );
    }
    (probes.len(), escapes)
}

fn bwrap_available() -> bool {
    Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "true"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn no_probe_escapes_a_confined_mode() {
    let mut runners = vec!["landlock"];
    if bwrap_available() {
        runners.push("bwrap");
    } else if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("bubblewrap is required under CI (install the Debian package bubblewrap)");
    } else {
        eprintln!("SKIPPED: bubblewrap is not usable here; only the Landlock runner is probed");
    }
    let mut total = 0;
    let mut escapes = Vec::new();
    for runner in &runners {
        for mode in ["read-only", "workspace-write"] {
            let (n, e) = escape_suite(mode, runner);
            total += n;
            escapes.extend(e);
        }
    }
    eprintln!(
        "sandbox escape probes: {total} run, {} escaped ({})",
        escapes.len(),
        runners.join(", ")
    );
    assert!(escapes.is_empty(), "{escapes:#?}");
}

/// The probes detect escapes: unconfined, the writes outside the workspace happen.
#[test]
fn the_probes_do_escape_an_unconfined_mode() {
    let (_, escapes) = escape_suite("danger-full-access", "landlock");
    let writes = escapes
        .iter()
        .filter(|e| e.contains("write outside"))
        .count();
    assert!(writes >= 4, "{escapes:#?}");
    // Secrets stay out of child environments, and out of dsh's own, even unconfined.
    let leaks: Vec<&String> = escapes
        .iter()
        .filter(|e| e.contains("environ") || e.contains("env:"))
        .collect();
    assert!(leaks.is_empty(), "{leaks:#?}");
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
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("unknown command /bogus; available commands:\n/compact — Compact older conversation history\n/permission <preset>"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
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
        "- insert:\n    - id: hooks-claude-code\n      name: '@deepseek-ai/dsh-hooks-claude-code'\n      config:\n        configPath: ./hooks.json\n",
    )
    .unwrap();
    let server = MockServer::with_replies([Reply::text("ok")]).answer_untooled("T");
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &world.home)
        .env("DSH_HOME", &world.dsh_home)
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
