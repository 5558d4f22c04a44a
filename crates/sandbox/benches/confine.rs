//! Per-command cost of confinement: `bash -c true` spawned plain, under bubblewrap with the
//! workspace-write profile, under the Landlock launcher built into `dsh` (taken from
//! `target/release/dsh` or `DSH_BIN`) and under the small launcher `dsh-landlock-run`.
//! Runners missing on this machine are skipped.
//!
//! `cargo bench -p dsh-sandbox --bench confine`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use divan::Bencher;
use dsh_sandbox::{Enforcement, ExecutionPolicy, Network, SandboxMode};

fn main() {
    divan::main();
}

fn policy(workspace: &std::path::Path) -> ExecutionPolicy {
    ExecutionPolicy {
        mode: SandboxMode::WorkspaceWrite,
        workspace_root: workspace.to_path_buf(),
        temp_roots: vec![std::env::temp_dir()],
        extra_roots: Vec::new(),
        network: Network::Deny,
        masked: Vec::new(),
        protected: Vec::new(),
    }
}

fn argv() -> Vec<OsString> {
    vec!["bash".into(), "-c".into(), "true".into()]
}

fn run(program: &std::path::Path, args: &[OsString]) {
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{} failed", program.display());
}

#[divan::bench(sample_count = 40)]
fn plain(bencher: Bencher) {
    let args = argv();
    bencher.bench(|| run(std::path::Path::new(&args[0]), &args[1..]));
}

#[divan::bench(sample_count = 40)]
fn bubblewrap(bencher: Bencher) {
    let dir = tempfile::tempdir().unwrap();
    let confined = dsh_sandbox::bwrap::confine(&argv(), &policy(dir.path()), Enforcement::Full);
    if Command::new(&confined.program)
        .args(&confined.args)
        .status()
        .is_err()
    {
        eprintln!("skipping bubblewrap: bwrap is not installed");
        return;
    }
    bencher.bench(|| run(&confined.program, &confined.args));
}

/// Under the Landlock launcher built into `dsh` (`dsh __dsh-landlock …`).
#[divan::bench(sample_count = 40)]
fn landlock(bencher: Bencher) {
    if let Some(launcher) = dsh_binary("landlock") {
        landlock_with(bencher, &launcher);
    }
}

/// The `dsh` binary (`DSH_BIN`, else the workspace's release build); `None`, with a note
/// naming bench `what`, when it is not built.
fn dsh_binary(what: &str) -> Option<PathBuf> {
    let launcher = std::env::var_os("DSH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/dsh")
        });
    if !launcher.is_file() {
        eprintln!("skipping {what}: build the launcher first (cargo build --release --bin dsh)");
        return None;
    }
    Some(launcher)
}

/// Under the small launcher (`dsh-landlock-run`, this package's binary), which `dsh` uses
/// when it sits beside it.
#[divan::bench(sample_count = 40)]
fn landlock_small(bencher: Bencher) {
    landlock_with(
        bencher,
        std::path::Path::new(env!("CARGO_BIN_EXE_dsh-landlock-run")),
    );
}

fn landlock_with(bencher: Bencher, launcher: &std::path::Path) {
    let dir = tempfile::tempdir().unwrap();
    let confined =
        dsh_sandbox::landlock::confine(launcher, &argv(), &policy(dir.path()), Enforcement::Full);
    bencher.bench(|| run(&confined.program, &confined.args));
}

/// Through a session's resident sandbox (bubblewrap around the launcher built into `dsh`,
/// started once): what each bash step of a session pays for confinement.
#[divan::bench(sample_count = 40)]
fn resident(bencher: Bencher) {
    let Some(launcher) = dsh_binary("resident") else {
        return;
    };
    dsh_sandbox::landlock::set_launcher(launcher);
    let dir = tempfile::tempdir().unwrap();
    let confined = dsh_sandbox::bwrap::confine(&argv(), &policy(dir.path()), Enforcement::Full);
    let Some(args) = confined.serve_args.clone() else {
        eprintln!("skipping resident: this runner cannot host one");
        return;
    };
    let spec = dsh_sandbox::resident::ResidentSpec {
        session: "bench".into(),
        program: confined.program.clone(),
        args,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
    let once = || {
        rt.block_on(async {
            let mut run = dsh_sandbox::resident::run(&spec, &argv(), &env, dir.path())
                .await
                .expect("the resident runs the command");
            let status = run.wait().await.unwrap();
            assert_eq!(status.code, Some(0));
        })
    };
    once();
    bencher.bench_local(once);
}
