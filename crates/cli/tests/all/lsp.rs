//! The `lsp` tool through the `dsh` binary: a headless run whose model (the mock LLM) asks
//! a language server (the fake server of `crates/lsp/tests/fake_server.py`, python3) for a
//! definition, references and hover, and meets a server that crashes; the servers are shut
//! down when the run ends. Skips, saying why, without python3.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use dsh_session::{Event, types};
use dsh_test_support::mock_server::{MockServer, Reply};
use pretty_assertions::assert_eq;
use serde_json::json;

use common::Run;

fn fake_server() -> Option<String> {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        dsh_test_support::prereq::skip("python3 is needed for the fake language server");
        return None;
    }
    Some(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../lsp/tests/fake_server.py")
            .display()
            .to_string(),
    )
}

/// `(isError, text, error code)` of every tool result.
fn results(events: &[Arc<Event>]) -> Vec<(bool, String, Option<String>)> {
    events
        .iter()
        .filter(|e| e.is(types::TOOL_RESULT))
        .map(|e| {
            let block = &e.data["message"]["content"][0];
            let text = block["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<String>();
            let code = e.data["error"]["code"].as_str().map(String::from);
            (block["isError"].as_bool().unwrap_or(false), text, code)
        })
        .collect()
}

#[test]
fn the_model_navigates_code_through_a_language_server() {
    let Some(script) = fake_server() else { return };
    let run = Run::new();
    let work = run.work.path();
    std::fs::write(work.join("main.py"), "from lib import f\nf()\n").unwrap();
    std::fs::write(work.join("lib.py"), "def f():\n    pass\n").unwrap();
    std::fs::write(work.join("broken.pyx"), "x = 1\n").unwrap();
    let log = work.join("server.log");
    let crash_log = work.join("crash.log");
    let server_row = |mode: &str, ext: &str, log: &Path| {
        json!({"command": "python3", "args": [script, mode],
            "env": {"FAKE_LSP_LOG": log.display().to_string()},
            "extensionToLanguage": {ext: "python"}})
    };
    let patch = json!([{"id": "lsp-stdio", "config": {"servers": {
        "fake": server_row("normal", ".py", &log),
        "crashy": server_row("crash", ".pyx", &crash_log),
    }}}]);
    std::fs::write(work.join("lsp.yml"), serde_json::to_string(&patch).unwrap()).unwrap();

    let call = |id: &str, op: &str, file: &str, line: u32, character: u32| {
        Reply::tool_call(
            id,
            "lsp",
            &json!({"operation": op, "file_path": file, "line": line, "character": character})
                .to_string(),
        )
    };
    let server = MockServer::with_replies([
        call("d", "goToDefinition", "main.py", 2, 1),
        call("r", "findReferences", "main.py", 1, 18),
        call("h", "hover", "lib.py", 1, 5),
        call("x", "goToDefinition", "broken.pyx", 1, 1),
        call("n", "hover", "README", 1, 1),
        call("z", "hover", "lib.py", 0, 1),
        Reply::text("done"),
    ])
    .answer_untooled("T");
    let out = run
        .base(&server)
        .args(["--profile", "headless", "--patch", "lsp.yml", "navigate"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");

    let requests = server.requests();
    let lsp = requests[0].tool("lsp").expect("the lsp tool is offered");
    assert_eq!(
        lsp["parameters"]["required"],
        json!(["operation", "file_path", "line", "character"])
    );

    let s = |x: &str| x.to_string();
    assert_eq!(
        results(&run.session()),
        vec![
            (false, s("lib.py:2:1\nmain.py:1:1"), None),
            (false, s("lib.py:1:5\nlib.py:3:1\nmain.py:1:5"), None),
            (false, s("first line: def f():"), None),
            (
                true,
                s("Error: language server exited; stderr: fake server: crashing on purpose"),
                None
            ),
            (
                true,
                s("Error: no LSP provider handles \"README\""),
                Some(s("LSP_UNAVAILABLE"))
            ),
            (
                true,
                s("Error: line must be a positive integer (one-based)"),
                None
            ),
        ]
    );
    // One server for the workspace, started on first use and shut down with the run.
    let methods: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(methods.iter().filter(|m| *m == "initialize").count(), 1);
    assert_eq!(&methods[methods.len() - 2..], ["shutdown", "exit"]);
    // The crashing server was started twice (one retry) for its one query.
    let crashes = std::fs::read_to_string(&crash_log).unwrap();
    assert_eq!(crashes.lines().filter(|m| *m == "initialize").count(), 2);
}

#[test]
fn a_server_that_never_answers_times_out_within_the_tool_budget() {
    let Some(script) = fake_server() else { return };
    let run = Run::new();
    let work = run.work.path();
    std::fs::write(work.join("main.py"), "x = 1\n").unwrap();
    let patch = json!([
        {"id": "lsp-stdio", "config": {"servers": {"silent": {"command": "python3",
            "args": [script, "silent"], "killGraceMs": 200,
            "extensionToLanguage": {".py": "python"}}}}},
        {"id": "tool-lsp", "config": {"timeoutMs": 500}},
    ]);
    std::fs::write(work.join("lsp.yml"), serde_json::to_string(&patch).unwrap()).unwrap();
    let server = MockServer::with_replies([
        Reply::tool_call(
            "d",
            "lsp",
            r#"{"operation":"goToDefinition","file_path":"main.py","line":1,"character":1}"#,
        ),
        Reply::text("gave up"),
    ])
    .answer_untooled("T");
    let started = std::time::Instant::now();
    let out = run
        .base(&server)
        .args(["--profile", "headless", "--patch", "lsp.yml", "navigate"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(
        results(&run.session()),
        vec![(
            true,
            "Error: tool call timed out after 500ms".to_string(),
            Some("TOOL_TIMEOUT".to_string())
        )]
    );
}

/// The default headless tree discovers rust-analyzer on PATH and the model gets a
/// definition from it. rust-analyzer answers nothing until it has indexed the project, so
/// the model asks again (up to a minute) while the answer is empty.
#[test]
fn the_default_tree_discovers_rust_analyzer() {
    let works = Command::new("rust-analyzer")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !works {
        dsh_test_support::prereq::skip(
            "rust-analyzer does not run here (`rustup component add rust-analyzer`)",
        );
        return;
    }
    // Without the standard library's source rust-analyzer tries to install it itself,
    // which the sandbox refuses; it then answers nothing at all.
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if !Path::new(&sysroot)
        .join("lib/rustlib/src/rust/library")
        .is_dir()
    {
        dsh_test_support::prereq::skip(
            "the toolchain has no rust-src, which rust-analyzer needs (`rustup component add rust-src`)",
        );
        return;
    }
    // rust-analyzer also reads the cargo metadata of the standard library's own workspace,
    // whose dependencies it fetches from crates.io the first time; the sandbox gives it no
    // network, and without them in the cargo cache it answers nothing at all.
    let library = Path::new(&sysroot).join("lib/rustlib/src/rust/library/Cargo.toml");
    let cached = Command::new("cargo")
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--manifest-path",
        ])
        .arg(&library)
        .env("RUSTC_BOOTSTRAP", "1")
        .output()
        .is_ok_and(|o| o.status.success());
    if !cached {
        dsh_test_support::prereq::skip(&format!(
            "the cargo cache lacks the standard library's dependencies, which rust-analyzer \
             needs (`RUSTC_BOOTSTRAP=1 cargo metadata --format-version 1 --manifest-path {}`)",
            library.display()
        ));
        return;
    }
    let run = Run::new();
    let work = run.work.path();
    std::fs::create_dir(work.join("src")).unwrap();
    std::fs::write(
        work.join("Cargo.toml"),
        "[package]\nname = \"probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        work.join("src/main.rs"),
        "fn answer() -> u32 {\n    42\n}\n\nfn main() {\n    println!(\"{}\", answer());\n}\n",
    )
    .unwrap();
    let call = || {
        Reply::tool_call(
            "d",
            "lsp",
            r#"{"operation":"goToDefinition","file_path":"src/main.rs","line":6,"character":22}"#,
        )
    };
    std::fs::write(
        work.join("src/broken.rs"),
        "pub fn broken() -> u32 {\n    let x = ;\n    x\n}\n",
    )
    .unwrap();
    let diagnostics =
        || Reply::tool_call("g", "lsp_diagnostics", r#"{"file_path":"src/broken.rs"}"#);
    // A cold rust-analyzer is waited for (bounded): the answer is either the definition or
    // says the server is still busy — never an empty "no results" (asked again then).
    let mut replies = vec![call()];
    for _ in 0..60 {
        replies.push(Reply::dynamic(move |req| {
            let last = req.last_tool_output().unwrap_or_default();
            if last.starts_with("src/main.rs") {
                return diagnostics();
            }
            if last.contains("diagnostic") {
                return Reply::text("found");
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
            call()
        }));
    }
    let server = MockServer::with_replies(replies).answer_untooled("T");
    // The rustup proxy finds its toolchains through the real home, not the run's.
    let real_home = std::env::var("HOME").unwrap_or_default();
    let rustup_home = std::env::var("RUSTUP_HOME").unwrap_or(format!("{real_home}/.rustup"));
    let cargo_home = std::env::var("CARGO_HOME").unwrap_or(format!("{real_home}/.cargo"));
    // The probe project pins this repository's toolchain (which `.ci/run` equips with
    // rust-analyzer and rust-src). Without a pin, rust-analyzer loads the machine's default
    // toolchain, which may lack the standard library's source; it then tries `rustup
    // component add rust-src`, which the sandbox (rightly) refuses, and answers nothing.
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../rust-toolchain.toml"),
        work.join("rust-toolchain.toml"),
    )
    .unwrap();
    let mut cmd = run.base(&server);
    let out = cmd
        .env("RUSTUP_HOME", rustup_home)
        .env("CARGO_HOME", cargo_home)
        .args(["--profile", "headless", "navigate"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = results(&run.session());
    let (definition, listed) = (&results[results.len() - 2], &results[results.len() - 1]);
    assert_eq!(definition.1, "src/main.rs:1:4", "{results:?}");
    for r in &results[..results.len() - 1] {
        assert!(
            r.1 == "src/main.rs:1:4" || r.1.contains("still busy"),
            "an answer before indexing ended reads like an empty result: {results:?}"
        );
    }
    assert!(
        listed.1.contains("src/broken.rs:2:") && listed.1.contains("error"),
        "{listed:?}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "found");
}

/// A `rust-analyzer` on PATH that is a rustup proxy whose toolchain lacks the component
/// (it would answer every call with an error and a backtrace) is not offered; once the
/// toolchain has it, it is. rustup's settings answer without starting rustup when they can
/// (no toolchain, or a default recorded by its full name); otherwise `rustup which` does.
#[test]
fn a_rustup_proxy_without_its_component_is_not_offered() {
    use std::os::unix::fs::PermissionsExt;
    let run = Run::new();
    let bin = run.home.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let target = run.home.path().join("toolchain-rust-analyzer");
    let rustup = bin.join("rustup");
    let asked = run.home.path().join("rustup-was-asked");
    // The stand-in rustup names `target` for `rustup which` and notes that it ran.
    let script = format!(
        "#!/bin/sh\necho asked >> {}\necho {}\n",
        asked.display(),
        target.display()
    );
    std::fs::write(&rustup, script).unwrap();
    std::fs::set_permissions(&rustup, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("rustup", bin.join("rust-analyzer")).unwrap();
    let executable = |path: &std::path::Path| {
        std::fs::write(path, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    let rustup_home = run.home.path().join(".rustup");
    let settings = |text: &str| {
        std::fs::create_dir_all(&rustup_home).unwrap();
        std::fs::write(rustup_home.join("settings.toml"), text).unwrap();
    };
    // (stderr with DSH_LOG=info, tools of the first request, whether rustup ran)
    let run_with = || -> (String, Vec<String>, bool) {
        let _ = std::fs::remove_file(&asked);
        let server = MockServer::with_replies([Reply::text("ok")]).answer_untooled("T");
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = run
            .base(&server)
            .env("PATH", path)
            .env("DSH_LOG", "info")
            .args(["--profile", "headless", "hi"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
        (
            common::stderr(&out),
            server.requests()[0].tool_names(),
            asked.exists(),
        )
    };
    let missing = "lsp-stdio: rust-analyzer is not offered: it is a rustup proxy and the active \
                   toolchain has no rust-analyzer (install it with `rustup component add rust-analyzer`)";

    // No toolchain was ever installed through this home: known from the files alone.
    let (log, tools, ran) = run_with();
    assert!(
        log.contains(
            "rust-analyzer is not offered: it is a rustup proxy and no rustup toolchain is active"
        ),
        "{log}"
    );
    assert!(!tools.iter().any(|t| t == "lsp") && !ran, "{tools:?} {ran}");

    // The default toolchain recorded by its full name: its directory answers.
    let toolchain = rustup_home.join("toolchains/stable-x86_64-unknown-linux-gnu");
    std::fs::create_dir_all(toolchain.join("bin")).unwrap();
    settings(
        "version = \"12\"\ndefault_toolchain = \"stable-x86_64-unknown-linux-gnu\"\n\n[overrides]\n",
    );
    let (log, _, ran) = run_with();
    assert!(log.contains(missing) && !ran, "{log}");
    executable(&toolchain.join("bin/rust-analyzer"));
    let (log, tools, ran) = run_with();
    assert!(!log.contains("rust-analyzer is not offered"), "{log}");
    assert!(tools.iter().any(|t| t == "lsp") && !ran, "{tools:?} {ran}");

    // A short toolchain name is rustup's to resolve: it is asked, and its answer counts.
    settings("default_toolchain = \"stable\"\n");
    let (log, _, ran) = run_with();
    assert!(log.contains(missing) && ran, "{log}");
    executable(&target);
    let (log, tools, ran) = run_with();
    assert!(!log.contains("rust-analyzer is not offered"), "{log}");
    assert!(tools.iter().any(|t| t == "lsp") && ran, "{tools:?} {ran}");
}
