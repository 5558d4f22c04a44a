//! Inputs a hostile probe tried against the binary: oversized config, patch and task
//! inputs, a wrong-typed credentials file, logs cut to their header or first batch, and
//! kills in the first milliseconds of a run. Each is refused with an error naming the
//! limit or the key, or recovered from, without losing what was recorded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Run, stderr};
use dsh_session::types;
use dsh_test_support::mock_server::{MockServer, Reply};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What these tests add to [`Run`].
trait RunExt {
    fn cmd(&self, server: &MockServer, args: &[&str]) -> Command;
    fn sessions_dir(&self) -> PathBuf;
    fn temp_files(&self) -> Vec<PathBuf>;
}

impl RunExt for Run {
    fn cmd(&self, server: &MockServer, args: &[&str]) -> Command {
        let mut c = self.base(server);
        c.args(args);
        c
    }

    fn sessions_dir(&self) -> PathBuf {
        self.dsh_home().join("sessions")
    }

    /// Every file under the sessions folder whose name ends with `.tmp`.
    fn temp_files(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = e.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.to_string_lossy().ends_with(".tmp") {
                    out.push(path);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.sessions_dir(), &mut out);
        out
    }
}

#[test]
fn config_patch_and_task_inputs_stop_at_their_limits() {
    let server = MockServer::start();
    let run = Run::new();
    // A patch that never ends: refused after the default limit, naming the setting.
    let out = run
        .cmd(
            &server,
            &["--profile", "headless", "--patch", "/dev/zero", "go"],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim(),
        "dsh: failed to read patch layer: /dev/zero is larger than 16777216 bytes, the limit for a config file (set DSH_MAX_CONFIG_BYTES to raise it)"
    );
    // settings.yaml, the home patch and .credentials.yaml over a lowered limit.
    let home = run.dsh_home();
    std::fs::create_dir_all(&home).unwrap();
    let big = format!("# {}\n", "x".repeat(2000));
    for name in ["settings.yaml", "cordis.patch.yml", ".credentials.yaml"] {
        let path = home.join(name);
        std::fs::write(&path, &big).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let out = run
            .cmd(&server, &["--profile", "headless", "go"])
            .env("DSH_MAX_CONFIG_BYTES", "1000")
            .output()
            .unwrap();
        assert_ne!(out.status.code(), Some(0));
        let want = format!(
            "{} is larger than 1000 bytes, the limit for a config file (set DSH_MAX_CONFIG_BYTES to raise it)",
            path.display()
        );
        assert!(stderr(&out).contains(&want), "{name}: {}", stderr(&out));
        std::fs::remove_file(&path).unwrap();
    }
    let out = run
        .cmd(&server, &["--profile", "headless", "go"])
        .env("DSH_MAX_CONFIG_BYTES", "lots")
        .output()
        .unwrap();
    assert!(
        stderr(&out)
            .contains("DSH_MAX_CONFIG_BYTES must be a positive number of bytes (got \"lots\")"),
        "{}",
        stderr(&out)
    );
    // A task from an endless stdin.
    let out = run
        .cmd(&server, &["headless", "-"])
        .env("DSH_MAX_TASK_BYTES", "4096")
        .stdin(std::fs::File::open("/dev/zero").unwrap())
        .output()
        .unwrap();
    assert_eq!(
        (out.status.code(), stderr(&out).trim()),
        (
            Some(1),
            "error: the task on standard input is larger than 4096 bytes (set DSH_MAX_TASK_BYTES to raise the limit)"
        )
    );
    assert!(server.requests().is_empty(), "nothing reached the model");
    assert!(run.temp_files().is_empty());
}

#[test]
fn a_wrong_typed_credentials_file_is_refused_naming_the_key() {
    let server = MockServer::start();
    let run = Run::new();
    let home = run.dsh_home();
    std::fs::create_dir_all(&home).unwrap();
    let file = home.join(".credentials.yaml");
    let cases = [
        (
            "version: 1\nrefs: [sk-secret-1]\n",
            "`refs` must be a mapping of reference names to strings, not a list",
        ),
        (
            "version: 1\nrefs:\n  DEEPSEEK_API_KEY: 12345\n",
            "refs.DEEPSEEK_API_KEY must be a string, not a number",
        ),
        (
            "version: '1'\nrefs: {}\n",
            "`version` must be the number 1, not a string",
        ),
        (
            "version: 1\nrecords: sk-secret-2\n",
            "`records` must be a mapping, not a string",
        ),
    ];
    for (text, want) in cases {
        std::fs::write(&file, text).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let out = run
            .cmd(&server, &["--profile", "headless", "go"])
            .output()
            .unwrap();
        assert_ne!(out.status.code(), Some(0), "{text}");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("credentials-local: {}: {want}", file.display())),
            "{text}: {err}"
        );
        assert!(
            !err.contains("sk-secret"),
            "a value reached the error: {err}"
        );
    }
    assert!(server.requests().is_empty());
}

/// End offsets of the Zstandard frames of a compressed log.
fn frame_ends(bytes: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        at += zstd::zstd_safe::find_frame_compressed_size(&bytes[at..]).unwrap();
        ends.push(at);
    }
    ends
}

#[test]
fn logs_cut_to_their_header_or_first_batch_resume() {
    // Cut after the header frame, inside the first batch's frame (a torn frame with no
    // whole record), and after the first batch.
    for (frames, extra) in [(1, 0), (1, 10), (2, 0)] {
        let server =
            MockServer::with_replies([Reply::text("first answer"), Reply::text("continued")])
                .answer_untooled("Title");
        let run = Run::new();
        let out = run
            .cmd(&server, &["--profile", "headless", "first task"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let id = run.only_session();
        let path = run.files().find(&id).unwrap().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let ends = frame_ends(&bytes);
        assert!(ends.len() > frames, "the run wrote {} frames", ends.len());
        std::fs::write(&path, &bytes[..ends[frames - 1] + extra]).unwrap();

        let out = run
            .cmd(&server, &["headless", "--session-id", &id, "continue"])
            .output()
            .unwrap();
        assert_eq!(
            (out.status.code(), stdout(&out)),
            (Some(0), "continued\n".to_string()),
            "frames {frames} + {extra} bytes: {}",
            stderr(&out)
        );
        let events = run.events(&id);
        let asked = events.iter().any(|e| {
            e.is(types::USER_MESSAGE)
                && e.data["content"]
                    .as_array()
                    .is_some_and(|blocks| blocks.iter().any(|b| b["text"] == "continue"))
        });
        assert!(asked, "the resumed task is recorded");
        assert!(events.last().unwrap().is(types::TURN_END));
        // It resumes again, as any log does.
        server.push_all([Reply::text("again")]);
        let out = run
            .cmd(&server, &["headless", "--session-id", &id, "once more"])
            .output()
            .unwrap();
        assert_eq!(stdout(&out), "again\n", "{}", stderr(&out));
    }
}

#[test]
fn kills_in_the_first_milliseconds_leave_nothing_that_blocks_the_next_run() {
    let server = MockServer::start().answer_untooled("Title");
    let run = Run::new();
    // No replies are queued: a killed run that reaches the model gets an error, and no
    // reply meant for a later run is used up.
    for delay_ms in [0u64, 5, 10, 20, 40, 80, 160, 320] {
        let mut child = run
            .cmd(&server, &["--profile", "headless", "early kill"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    // A temp file and a lock note a killed writer left beside a published log.
    server.push_all([Reply::text("done")]);
    let out = run
        .cmd(&server, &["--profile", "headless", "complete run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let complete = run
        .files()
        .list()
        .unwrap()
        .into_iter()
        .map(|(h, p)| (h.id, p))
        .collect::<Vec<_>>();
    let (_, log) = complete.last().unwrap();
    let dir = log.parent().unwrap();
    let stale = dir.join(format!(
        "{}.0123456789ab.tmp",
        log.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&stale, b"half a log").unwrap();
    std::fs::write(
        dir.join("session.lock"),
        "{\"pid\":4194304,\"host\":\"gone\",\"since\":0}\n",
    )
    .unwrap();

    // The next run lists every stored session, and the listing sweeps the temp files.
    let out = run
        .cmd(&server, &["sessions", "list", "--all"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("skipping"), "{}", stderr(&out));
    assert_eq!(run.temp_files(), Vec::<PathBuf>::new());
    // Every stored session resumes (the dead holder's lock is taken over).
    let stored = run.files().list().unwrap();
    assert!(!stored.is_empty());
    for (header, _) in stored {
        server.push_all([Reply::text("resumed")]);
        let out = run
            .cmd(&server, &["headless", "--session-id", &header.id, "go on"])
            .output()
            .unwrap();
        assert_eq!(
            (out.status.code(), stdout(&out)),
            (Some(0), "resumed\n".to_string()),
            "{}: {}",
            header.id,
            stderr(&out)
        );
    }
    assert_eq!(run.temp_files(), Vec::<PathBuf>::new());
}
