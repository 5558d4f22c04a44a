//! The recorded reference of the `rich` ACP projection (the one production `dsh acp` serves
//! by default): every shown scenario of `../shared/conformance/acp`, replayed against
//! `dsh-conformance acp --projection rich`, must send exactly `conformance/rich/golden/
//! <scenario>.jsonl` (normalized as the conformance runner normalizes: ids, times, paths),
//! and every frame must validate against the official ACP SDK's schemas. A deliberate
//! change re-records with `DSH_RECORD_RICH=1` and shows in review as a golden-file diff.
//! Needs python3, `../shared`, node and the SDK (`npm ci` in crates/cli/tests/acp-client);
//! without them it says what it skipped (strict runs fail instead).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn missing(test: &str, what: &str) {
    if std::env::var("DSH_TEST_STRICT").as_deref() == Ok("1") {
        panic!("{test}: {what} (DSH_TEST_STRICT=1: a missing prerequisite is a failure)");
    }
    eprintln!("SKIPPED: {test}: {what}");
}

fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `'…'` for the runner's shell-like split of `--agent`.
fn quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

#[test]
fn the_rich_stream_matches_its_recorded_reference() {
    const TEST: &str = "the_rich_stream_matches_its_recorded_reference";
    let shared = workspace().join("../shared/conformance");
    let sdk = workspace()
        .join("crates/cli/tests/acp-client/node_modules/@agentclientprotocol/sdk/package.json");
    let lacking = [
        (!runs("python3"), "python3 (runs the conformance harness)"),
        (
            !shared.join("run.py").is_file(),
            "../shared/conformance (the scenarios and their runner)",
        ),
        (!runs("node"), "node (runs the ACP SDK's schema checks)"),
        (
            !sdk.is_file(),
            "the ACP SDK (`npm ci` in crates/cli/tests/acp-client)",
        ),
    ];
    if let Some((_, what)) = lacking.iter().find(|(gone, _)| *gone) {
        missing(TEST, what);
        return;
    }
    let agent = format!(
        "{} acp --compositions {} --projection rich",
        quoted(Path::new(env!("CARGO_BIN_EXE_dsh-conformance"))),
        quoted(&workspace().join("conformance/compositions")),
    );
    let mut cmd = Command::new("python3");
    cmd.arg(workspace().join("conformance/rich/rich.py"))
        .args(["--agent", &agent, "--shared"])
        .arg(&shared)
        .args(["-j", "2"]);
    if std::env::var("DSH_RECORD_RICH").as_deref() == Ok("1") {
        cmd.arg("--record");
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}\nIf the change is intended, re-record with DSH_RECORD_RICH=1 and review the golden diff.",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every shown scenario but the ones whose composition is not served has a reference.
    let goldens = std::fs::read_dir(workspace().join("conformance/rich/golden"))
        .unwrap()
        .count();
    let scenarios = std::fs::read_dir(shared.join("acp")).unwrap().count();
    assert_eq!(goldens + 2, scenarios, "{stdout}");
    assert!(stdout.contains(", 0 problems"), "{stdout}");
}
