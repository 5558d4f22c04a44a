//! Durability at the process level: a full disk under the sessions folder ends the turn
//! with an error and keeps every event the model saw; two processes never write one
//! session at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use dsh_persistence::{ChunkPacking, Compression, SessionFiles};
use dsh_test_support::mock_server::{MockServer, Reply};
use serde_json::Value;

fn base(cmd: &mut Command, home: &Path, work: &Path, server: &MockServer) {
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("DSH_HOME", home.join(".dsh"))
        .env("DEEPSEEK_API_KEY", "sk-test")
        .env("DEEPSEEK_BASE_URL", server.url())
        .env("DSH_PERMISSION_MODE", "danger-full-access")
        .current_dir(work);
}

/// Tool outputs the model was shown, over every recorded request.
fn seen_by_model(server: &MockServer) -> BTreeSet<String> {
    server
        .requests()
        .iter()
        .flat_map(|r| {
            r.messages()
                .into_iter()
                .filter(|m| m["role"] == "tool")
                .filter_map(|m| m["tool_call_id"].as_str().map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn a_full_disk_ends_the_turn_with_an_error_and_keeps_what_the_model_saw() {
    if !Command::new("unshare")
        .args(["-rm", "true"])
        .status()
        .is_ok_and(|s| s.success())
    {
        dsh_test_support::prereq::skip(
            "unprivileged user and mount namespaces are unavailable (unshare -rm)",
        );
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let sessions = home.path().join(".dsh/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    // Each step prints 48 KB of incompressible text; a 256 KiB filesystem fills within
    // a few steps.
    let mut replies: Vec<Reply> = (0..40)
        .map(|i| {
            Reply::tool_call(
                &format!("call_{i}"),
                "bash",
                r#"{"command":"head -c 36000 /dev/urandom | base64 -w 0","description":"noise"}"#,
            )
        })
        .collect();
    replies.push(Reply::text("finished"));
    let server = MockServer::with_replies(replies).answer_untooled("T");
    let script = r#"mount -t tmpfs -o size=256k tmpfs "$SESSIONS" || exit 90
"$DSH" headless "fill the disk" 2>"$OUT/stderr"
echo $? > "$OUT/exit"
cp -a "$SESSIONS" "$OUT/sessions""#;
    let mut cmd = Command::new("unshare");
    cmd.args(["-rm", "sh", "-c", script]);
    base(&mut cmd, home.path(), work.path(), &server);
    let status = cmd
        .env("SESSIONS", &sessions)
        .env("DSH", env!("CARGO_BIN_EXE_dsh"))
        .env("OUT", out.path())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the namespace script failed: {status}");
    let exit = std::fs::read_to_string(out.path().join("exit")).unwrap();
    let stderr = std::fs::read_to_string(out.path().join("stderr")).unwrap();
    assert_eq!(exit.trim(), "1", "a full disk is never exit 0: {stderr}");
    assert!(
        stderr.contains("No space left on device"),
        "the error names the problem: {stderr}"
    );
    // The stored log opens, and every result the model was shown is in it.
    let files = SessionFiles::new(
        out.path().join("sessions"),
        Compression::Zstd,
        ChunkPacking::Packed,
    );
    let listed = files.list().unwrap();
    assert_eq!(listed.len(), 1);
    let loaded = files.inspect(&listed[0].0.id).unwrap();
    let stored: BTreeSet<String> = loaded
        .events
        .iter()
        .filter(|e| e.is(dsh_session::types::TOOL_RESULT))
        .filter_map(|e| {
            e.data
                .pointer("/message/source/callId")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    let seen = seen_by_model(&server);
    assert!(!seen.is_empty(), "some steps ran before the disk filled");
    let lost: Vec<&String> = seen.difference(&stored).collect();
    assert!(
        lost.is_empty(),
        "results the model saw but the log lost: {lost:?}"
    );
    assert!(seen.len() < 40, "the turn stopped when the disk filled");
}

#[test]
fn a_second_process_cannot_resume_a_session_that_is_being_written() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::with_replies([
        Reply::text("first"),
        Reply::stall(Duration::from_secs(30)),
        Reply::text("third"),
    ])
    .answer_untooled("T");
    let run = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dsh"));
        base(&mut c, home.path(), work.path(), &server);
        c.args(args);
        c
    };
    assert!(run(&["headless", "start"]).status().unwrap().success());
    let root = home.path().join(".dsh/sessions");
    let id = SessionFiles::new(&root, Compression::Zstd, ChunkPacking::Packed)
        .list()
        .unwrap()[0]
        .0
        .id
        .clone();
    let mut first = run(&["headless", "--session-id", &id, "continue"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    server.wait_for_requests(2, Duration::from_secs(20));
    let second = run(&["headless", "--session-id", &id, "also continue"])
        .output()
        .unwrap();
    let _ = first.kill();
    let _ = first.wait();
    assert_eq!(second.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains("is in use by") && stderr.contains(&first.id().to_string()),
        "the error names the holder: {stderr}"
    );
    // The first writer's death frees the session: it resumes now.
    let again = run(&["headless", "--session-id", &id, "once more"])
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}
