//! The small Landlock launcher (`dsh-landlock-run`) against the kernel: it probes, confines
//! writes to the granted roots, keeps masked files unreadable, and refuses bad command lines
//! with exit 125 and one `landlock-run:` line — the contract the `dsh __dsh-landlock` form
//! has. Skips when this kernel has no Landlock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use dsh_sandbox::landlock::{self, LAUNCHER_FAILURE};
use dsh_sandbox::{Enforcement, ExecutionPolicy, Network, SandboxMode};

fn launcher() -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_dsh-landlock-run"));
    match landlock::probe(&path, Duration::from_secs(10)) {
        Ok(_) => Some(path),
        Err(why) => {
            dsh_test_support::prereq::skip(&format!("Landlock is unusable here: {why}"));
            None
        }
    }
}

fn policy(workspace: &Path, masked: Vec<PathBuf>) -> ExecutionPolicy {
    ExecutionPolicy {
        mode: SandboxMode::WorkspaceWrite,
        workspace_root: workspace.to_path_buf(),
        temp_roots: Vec::new(),
        extra_roots: Vec::new(),
        network: Network::Deny,
        masked,
        protected: Vec::new(),
    }
}

fn sh(launcher: &Path, policy: &ExecutionPolicy, script: &str) -> Output {
    let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), script.into()];
    let confined = landlock::confine(launcher, &argv, policy, Enforcement::Full);
    Command::new(&confined.program)
        .args(&confined.args)
        .output()
        .unwrap()
}

#[test]
fn writes_land_only_in_the_granted_roots_and_masked_files_stay_unreadable() {
    let Some(launcher) = launcher() else { return };
    let workspace = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let secret = home.path().join(".credentials.yaml");
    std::fs::write(&secret, "key: value\n").unwrap();
    let secret = std::fs::canonicalize(&secret).unwrap();
    let policy = policy(workspace.path(), vec![secret.clone()]);

    let inside = workspace.path().join("inside.txt");
    let out = sh(
        &launcher,
        &policy,
        &format!("echo ok > {}", inside.display()),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "ok\n");

    let escape = outside.path().join("escape.txt");
    let out = sh(
        &launcher,
        &policy,
        &format!("echo no > {}", escape.display()),
    );
    assert!(!out.status.success());
    assert!(!escape.exists(), "a write outside the roots landed");

    let out = sh(&launcher, &policy, &format!("cat {}", secret.display()));
    assert!(!out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("value"));
}

#[test]
fn a_bad_command_line_is_a_launcher_failure_never_a_run() {
    let launcher = PathBuf::from(env!("CARGO_BIN_EXE_dsh-landlock-run"));
    let out = Command::new(&launcher)
        .args(["--ro", "/", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(i32::from(LAUNCHER_FAILURE)));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("landlock-run: usage error"), "{stderr}");
}

#[test]
fn dsh_prefers_the_small_launcher_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("dsh");
    std::fs::write(&exe, "").unwrap();
    assert_eq!(landlock::launcher_for(&exe), exe);
    let small = dir.path().join(landlock::SMALL_LAUNCHER);
    std::fs::write(&small, "").unwrap();
    assert_eq!(landlock::launcher_for(&exe), small);
}
