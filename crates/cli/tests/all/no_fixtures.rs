//! The production `dsh` binary has none of the fixture plugins of upstream's snapshot suite:
//! they live in the dsh-conformance crate and binary. A composition that names one fails to
//! load with "unknown plugin", and no fixture's name is anywhere in the binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

#[test]
fn a_composition_naming_a_fixture_row_fails_with_unknown_plugin() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("acp")
        .arg("--compositions")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../conformance/compositions"
        ))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("DSH_HOME", home.path().join(".dsh"))
        .env("DEEPSEEK_API_KEY", "sk-test")
        // Upstream's partial-landlock composition mounts its fixture sandbox live too.
        .env("DSH_SNAPSHOT_CONFIG", "partial-landlock.cordis.yml")
        .current_dir(home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "row \"partial-landlock-sandbox\": unknown plugin \"@deepseek-ai/dsh-test-partial-landlock-sandbox\""
        ),
        "{stderr}"
    );
}

/// The plugin names among `names` that occur in `binary` (every name starts with `@`).
fn occurring<'a>(binary: &[u8], names: &[&'a str]) -> Vec<&'a str> {
    let mut found: Vec<&str> = binary
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'@')
        .filter_map(|(i, _)| {
            names
                .iter()
                .copied()
                .find(|n| binary[i..].starts_with(n.as_bytes()))
        })
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}

#[test]
fn no_fixture_plugin_is_in_the_binary() {
    let binary = std::fs::read(env!("CARGO_BIN_EXE_dsh")).unwrap();
    let names = dsh_conformance::fixture_names();
    assert!(names.len() >= 10, "{names:?}");
    assert!(names.iter().all(|n| n.starts_with('@')), "{names:?}");
    assert_eq!(
        occurring(&binary, &names),
        Vec::<&str>::new(),
        "fixture plugins in the production dsh"
    );
    // The search does see plugin names: production rows are there.
    let production = ["@deepseek-ai/dsh-llm-replay", "@deepseek-ai/dsh-tool-bash"];
    assert_eq!(occurring(&binary, &production), production);
}
