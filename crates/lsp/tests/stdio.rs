//! The stdio provider against a fake language server (tests/fake_server.py, skipped without
//! python3) and, when it is installed, a real rust-analyzer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_kernel::{BoxError, HarnessError};
use dsh_lsp::{
    LspService, Operation, Position, Query, QueryResult, ServerConfig, StdioProvider,
    format_diagnostics, format_hover, format_locations,
};
use pretty_assertions::assert_eq;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

fn python() -> Option<PathBuf> {
    let p = which("python3");
    if p.is_none() {
        dsh_test_support::prereq::skip("python3 is not on PATH");
    }
    p
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_server.py")
}

fn config(program: PathBuf, args: Vec<String>, exts: &[(&str, &str)]) -> ServerConfig {
    let mut env: Vec<(String, String)> = std::env::vars().collect();
    env.retain(|(k, _)| k != "FAKE_LSP_LOG");
    ServerConfig {
        command: program.display().to_string(),
        program,
        args,
        env,
        extension_to_language: exts
            .iter()
            .map(|(e, l)| (e.to_string(), l.to_string()))
            .collect::<BTreeMap<_, _>>(),
        initialization_options: Value::Null,
        configuration: Value::Null,
        max_message_bytes: 1_000_000,
        max_stderr_bytes: 10_000,
        max_document_bytes: 100_000,
        shutdown_timeout: Duration::from_secs(2),
        kill_grace: Duration::from_millis(300),
        ready_timeout: Duration::from_secs(10),
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    service: LspService,
    provider: Arc<StdioProvider>,
    log: PathBuf,
}

fn fixture(python: PathBuf, mode: &str, tweak: impl FnOnce(&mut ServerConfig)) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("main.py"), "from lib import f\nf()\n").unwrap();
    std::fs::write(dir.path().join("lib.py"), "def f():\n    pass\n").unwrap();
    let log = dir.path().join("server.log");
    let mut c = config(
        python,
        vec![script().display().to_string(), mode.to_string()],
        &[(".py", "python")],
    );
    c.env
        .push(("FAKE_LSP_LOG".into(), log.display().to_string()));
    tweak(&mut c);
    let provider = Arc::new(StdioProvider::new("fake", c));
    let service = LspService::new();
    service.register(provider.clone()).unwrap();
    Fixture {
        dir,
        service,
        provider,
        log,
    }
}

impl Fixture {
    async fn ask(
        &self,
        op: Operation,
        file: &str,
        line: u64,
        character: u64,
    ) -> Result<String, BoxError> {
        self.ask_with(op, file, line, character, CancellationToken::new())
            .await
    }

    async fn ask_with(
        &self,
        op: Operation,
        file: &str,
        line: u64,
        character: u64,
        cancel: CancellationToken,
    ) -> Result<String, BoxError> {
        let q = Query {
            operation: op,
            file_path: file.into(),
            position: Position { line, character },
            workspace_root: self.dir.path().to_path_buf(),
            owner: Some("session-1".into()),
            policy: None,
        };
        Ok(match self.service.query(q, cancel).await? {
            QueryResult::Locations {
                locations,
                workspace_uri,
            } => format_locations(&locations, &workspace_uri, 100, 16_000),
            QueryResult::Hover(h) => format_hover(h.as_ref(), 16_000),
            QueryResult::Diagnostics(d) => format_diagnostics(file, d.as_deref(), 16_000),
        })
    }

    fn methods(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }
}

fn alive(pid: u32) -> bool {
    // Zombies do not count: the waiter thread reaps the leader.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

fn code(e: &BoxError) -> Option<String> {
    HarnessError::find(e.as_ref()).map(|h| h.code.to_string())
}

#[tokio::test]
async fn definition_references_and_hover_through_one_lazy_server() {
    let Some(py) = python() else { return };
    let f = fixture(py, "normal", |_| {});
    assert!(
        f.provider.server_pids().is_empty(),
        "started before the first query"
    );
    assert_eq!(
        f.ask(Operation::GoToDefinition, "main.py", 1, 0)
            .await
            .unwrap(),
        "lib.py:2:1\nmain.py:1:1"
    );
    let pids = f.provider.server_pids();
    assert_eq!(pids.len(), 1);
    assert_eq!(
        f.ask(Operation::FindReferences, "main.py", 0, 17)
            .await
            .unwrap(),
        "lib.py:1:5\nlib.py:3:1\nmain.py:1:5"
    );
    assert_eq!(
        f.ask(Operation::Hover, "lib.py", 0, 4).await.unwrap(),
        "first line: def f():"
    );
    assert_eq!(
        f.ask(Operation::GoToImplementation, "main.py", 1, 0)
            .await
            .unwrap(),
        "lib.py:1:5"
    );
    assert_eq!(f.provider.server_pids(), pids, "one server per workspace");

    // Routing and containment errors.
    let e = f
        .ask(Operation::Hover, "notes.txt", 0, 0)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "no LSP provider handles \"notes.txt\"");
    assert_eq!(code(&e).as_deref(), Some("LSP_UNAVAILABLE"));
    let outside = tempfile::Builder::new().suffix(".py").tempfile().unwrap();
    let e = f
        .ask(Operation::Hover, outside.path().to_str().unwrap(), 0, 0)
        .await
        .unwrap_err();
    assert!(
        e.to_string().ends_with("resolves outside the workspace"),
        "{e}"
    );

    f.provider.dispose_blocking();
    assert!(!alive(pids[0]), "the server outlived its provider");
    let methods = f.methods();
    assert_eq!(methods.first().map(String::as_str), Some("initialize"));
    assert!(methods.iter().any(|m| m == "initialized"));
    assert!(methods.iter().any(|m| m == "textDocument/didClose"));
    assert_eq!(&methods[methods.len() - 2..], ["shutdown", "exit"]);
    let e = f.ask(Operation::Hover, "lib.py", 0, 0).await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("LSP_DISPOSED"));
}

#[tokio::test]
async fn an_operation_the_server_does_not_offer_is_a_typed_error() {
    let Some(py) = python() else { return };
    let f = fixture(py, "minimal", |_| {});
    assert_eq!(
        f.ask(Operation::GoToDefinition, "main.py", 1, 0)
            .await
            .unwrap(),
        "lib.py:2:1\nmain.py:1:1"
    );
    for (op, name) in [
        (Operation::GoToImplementation, "goToImplementation"),
        (Operation::FindReferences, "findReferences"),
        (Operation::Hover, "hover"),
    ] {
        let e = f.ask(op, "main.py", 0, 0).await.unwrap_err();
        assert_eq!(e.to_string(), format!("server does not support {name}"));
        assert_eq!(code(&e).as_deref(), Some("LSP_UNSUPPORTED_OPERATION"));
    }
    f.provider.dispose_blocking();
}

#[tokio::test]
async fn a_crashing_server_is_restarted_once_then_reported_with_its_stderr() {
    let Some(py) = python() else { return };
    let f = fixture(py, "crash", |_| {});
    let e = f
        .ask(Operation::GoToDefinition, "main.py", 0, 0)
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "language server exited; stderr: fake server: crashing on purpose"
    );
    let starts = f.methods().iter().filter(|m| *m == "initialize").count();
    assert_eq!(starts, 2, "one transparent retry on a fresh server");
    // Other operations still work on a fresh server.
    assert_eq!(
        f.ask(Operation::Hover, "lib.py", 0, 0).await.unwrap(),
        "first line: def f():"
    );
    f.provider.dispose_blocking();
}

#[tokio::test]
async fn garbage_and_oversized_output_are_clear_errors() {
    let Some(py) = python() else { return };
    let f = fixture(py.clone(), "garbage", |_| {});
    let e = f
        .ask(Operation::GoToDefinition, "main.py", 0, 0)
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "LSP header block missing Content-Length: \"this is not a frame\""
    );
    f.provider.dispose_blocking();

    let f = fixture(py.clone(), "huge", |c| c.max_message_bytes = 1000);
    let e = f
        .ask(Operation::GoToDefinition, "main.py", 0, 0)
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "LSP message length 999999999 exceeds the 1000-byte limit"
    );
    f.provider.dispose_blocking();

    let f = fixture(py, "utf8", |_| {});
    let e = f
        .ask(Operation::GoToDefinition, "main.py", 0, 0)
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "server negotiated unsupported position encoding \"utf-8\"; this host requires utf-16"
    );
    f.provider.dispose_blocking();
}

#[tokio::test]
async fn a_server_that_never_answers_is_cancelled_then_killed() {
    let Some(py) = python() else { return };
    let f = fixture(py, "silent", |_| {});
    // Start the server first (it answers hover), so the cancel below meets a request.
    f.ask(Operation::Hover, "lib.py", 0, 0).await.unwrap();
    let pids = f.provider.server_pids();
    assert_eq!(pids.len(), 1);
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        c.cancel();
    });
    let started = Instant::now();
    let e = f
        .ask_with(Operation::GoToDefinition, "main.py", 0, 0, cancel)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "the LSP query was cancelled");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The cancel was sent; the server ignored it and was torn down after the grace.
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pids[0]) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(pids[0]), "an unresponsive server was left running");
    assert!(f.methods().iter().any(|m| m == "$/cancelRequest"));
    // The next query starts a fresh server (which again does not answer definitions, but
    // does answer hover).
    assert_eq!(
        f.ask(Operation::Hover, "lib.py", 0, 0).await.unwrap(),
        "first line: def f():"
    );
    f.provider.dispose_blocking();
}

/// A real rust-analyzer on a tiny cargo project. It answers empty results until it has
/// indexed the project, so the query is repeated for up to a minute.
#[tokio::test]
async fn rust_analyzer_finds_a_definition() {
    let Some(ra) = which("rust-analyzer") else {
        dsh_test_support::prereq::skip("rust-analyzer is not on PATH");
        return;
    };
    let works = std::process::Command::new(&ra)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !works {
        dsh_test_support::prereq::skip(
            "rust-analyzer is on PATH but does not run (rustup component missing?)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("src/main.rs"),
        "fn answer() -> u32 {\n    42\n}\n\nfn main() {\n    println!(\"{}\", answer());\n}\n",
    )
    .unwrap();
    let mut c = config(ra, vec![], &[(".rs", "rust")]);
    c.shutdown_timeout = Duration::from_secs(5);
    let provider = Arc::new(StdioProvider::new("rust-analyzer", c));
    let service = LspService::new();
    service.register(provider.clone()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = String::new();
    while Instant::now() < deadline {
        let q = Query {
            operation: Operation::GoToDefinition,
            file_path: "src/main.rs".into(),
            position: Position {
                line: 5,
                character: 21,
            },
            workspace_root: dir.path().to_path_buf(),
            owner: None,
            policy: None,
        };
        match service.query(q, CancellationToken::new()).await {
            Ok(QueryResult::Locations {
                locations,
                workspace_uri,
            }) if !locations.is_empty() => {
                last = format_locations(&locations, &workspace_uri, 100, 16_000);
                break;
            }
            Ok(_) => {}
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    provider.dispose_blocking();
    assert_eq!(last, "src/main.rs:1:4");
}

#[tokio::test]
async fn a_server_shuts_down_with_the_last_session_that_used_it() {
    let Some(py) = python() else { return };
    let f = fixture(py, "normal", |_| {});
    f.ask(Operation::Hover, "lib.py", 0, 0).await.unwrap();
    let pids = f.provider.server_pids();
    assert_eq!(pids.len(), 1);
    f.service.release("another-session");
    assert!(
        alive(pids[0]),
        "a session that never used the server released it"
    );
    f.service.release("session-1");
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pids[0]) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(pids[0]), "the server outlived its last session");
    let methods = f.methods();
    assert_eq!(&methods[methods.len() - 2..], ["shutdown", "exit"]);
    // A later query starts a fresh server.
    assert_eq!(
        f.ask(Operation::Hover, "lib.py", 0, 0).await.unwrap(),
        "first line: def f():"
    );
    assert_ne!(f.provider.server_pids(), pids);
    f.provider.dispose_blocking();
}

/// A server that reports indexing answers after it finished (the query waited), not with
/// the empty answer it gives meanwhile.
#[tokio::test]
async fn a_query_waits_for_a_server_that_is_still_indexing() {
    let Some(python) = python() else { return };
    let f = fixture(python, "indexing", |_| {});
    let out = f.ask(Operation::Hover, "main.py", 0, 0).await.unwrap();
    assert!(out.contains("first line: from lib import f"), "{out}");
}

/// A server that stays busy past the wait says so, naming what it is busy with, instead
/// of an empty answer that reads like "there is nothing".
#[tokio::test]
async fn a_server_still_indexing_after_the_wait_says_so() {
    let Some(python) = python() else { return };
    let f = fixture(python, "stuck", |c| {
        c.ready_timeout = Duration::from_millis(300)
    });
    let e = f
        .ask(Operation::Hover, "main.py", 0, 0)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("still busy (Indexing: 3/40 crates (7%))"), "{e}");
}

/// Diagnostics of a file: the list a server publishes once the file is opened, or pulled
/// from a server that offers `textDocument/diagnostic`.
#[tokio::test]
async fn a_files_diagnostics_are_published_or_pulled() {
    let Some(python) = python() else { return };
    for mode in ["normal", "pull"] {
        let f = fixture(python.clone(), mode, |_| {});
        std::fs::write(
            f.dir.path().join("bad.py"),
            "import os\nx = undefined_name\n",
        )
        .unwrap();
        let out = f.ask(Operation::Diagnostics, "bad.py", 0, 0).await.unwrap();
        assert_eq!(
            out,
            "1 diagnostic in bad.py:\nbad.py:2:5 error [fake E1]: undefined_name is not defined",
            "{mode}"
        );
        let clean = f
            .ask(Operation::Diagnostics, "main.py", 0, 0)
            .await
            .unwrap();
        assert_eq!(clean, "No diagnostics in main.py.", "{mode}");
    }
}

/// A server binary that cannot run is reported by what it said first, not by the
/// backtrace after it.
#[tokio::test]
async fn a_server_that_cannot_run_is_reported_briefly() {
    let Some(python) = python() else { return };
    let f = fixture(python, "broken", |_| {});
    let e = f
        .ask(Operation::Hover, "main.py", 0, 0)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("language server exited; stderr: error: the active toolchain has no language server installed"),
        "{e}"
    );
    assert!(e.ends_with("… (37 more lines)"), "{e}");
    assert!(e.len() < 600, "{} bytes: {e}", e.len());
}
