//! Tests that need something the machine may lack (python3, bubblewrap, node packages,
//! chromium, the upstream executable, `../shared`): how they say so.
//!
//! In a strict run (`DSH_TEST_STRICT=1`, which `.ci/run` sets after installing every
//! prerequisite) a missing prerequisite fails the test, naming what is missing, so a green CI
//! run means every test ran. Otherwise the test prints one `SKIPPED: <test>: <what>` line and
//! returns; the line goes straight to the process's stderr, past the test harness's output
//! capture, so a plain `cargo test` shows every skip.

use std::io::Write as _;

/// Whether this run treats a missing prerequisite as a failure.
pub fn strict() -> bool {
    std::env::var("DSH_TEST_STRICT").is_ok_and(|v| v == "1")
}

/// The running test's name (the harness names each test's thread after it).
fn test_name() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("a test")
        .to_string()
}

/// The running test cannot run because `missing` (what is absent and how to provide it):
/// panics in a strict run, otherwise reports the skip. The caller returns right after.
#[allow(clippy::print_stderr)]
pub fn skip(missing: &str) {
    let test = test_name();
    assert!(
        !strict(),
        "{test}: a prerequisite is missing in a strict run (DSH_TEST_STRICT=1): {missing}"
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {missing}");
}

/// `value`, or a skip naming `missing` when there is none.
pub fn require<T>(value: Option<T>, missing: &str) -> Option<T> {
    if value.is_none() {
        skip(missing);
    }
    value
}

/// Whether `program --version` (or the given probe arguments) runs successfully.
pub fn runs(program: &str, args: &[&str]) -> bool {
    std::process::Command::new(program)
        .args(if args.is_empty() {
            &["--version"][..]
        } else {
            args
        })
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `../shared/<rel>` of the checkout (the shared fixtures), when present.
pub fn shared(rel: &str) -> Option<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
    let path = root.join(rel);
    path.exists().then_some(path)
}

/// The entry script of `@modelcontextprotocol/server-everything` (`npm ci` in
/// `crates/mcp/tests/servers`, which `.ci/run` does) when it and node are there; otherwise
/// the test is skipped (a failure under `DSH_TEST_STRICT=1`).
pub fn everything_server() -> Option<std::path::PathBuf> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../mcp/tests/servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    if !runs("node", &["--version"]) || !script.exists() {
        skip(
            "server-everything needs node and `npm ci` in crates/mcp/tests/servers (.ci/run does it)",
        );
        return None;
    }
    Some(script)
}

/// A `--patch` file's text inserting server-everything (stdio) as row `mcp-everything`,
/// server name `everything`.
pub fn everything_patch(script: &std::path::Path) -> String {
    let row = serde_json::json!({"transport": "stdio", "serverName": "everything", "command": "node",
                                 "args": [script.display().to_string(), "stdio"]});
    format!(
        "- insert:\n    - id: mcp-everything\n      name: '@deepseek-ai/dsh-mcp-client'\n      config: {row}\n"
    )
}
