//! Composition from the command line: layering, `--dump-config`, and bad configuration.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use pretty_assertions::assert_eq;

fn dsh(home: &Path, cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("DSH_HOME", home.join(".dsh"))
        .current_dir(cwd)
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

#[test]
fn the_default_headless_tree_matches_the_golden_dump() {
    let home = tempfile::tempdir().unwrap();
    let out = dsh(
        home.path(),
        home.path(),
        &["--dump-default-config", "--profile", "headless"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let golden = include_str!("golden/headless-default.yml");
    assert_eq!(text(&out.stdout), golden);
    // Templates were created on first use, like upstream.
    let profile = home.path().join(".dsh/profiles/headless");
    assert!(profile.join("package.json").is_file() && profile.join("cordis.patch.yml").is_file());
    assert!(
        home.path()
            .join(".dsh/profiles")
            .read_dir()
            .unwrap()
            .count()
            >= 1
    );
}

#[test]
fn layers_apply_in_order_and_the_dump_names_them() {
    let home = tempfile::tempdir().unwrap();
    let dsh_home = home.path().join(".dsh");
    // First run creates the profile template.
    dsh(
        home.path(),
        home.path(),
        &["--dump-config", "--profile", "headless"],
    );
    let profile_patch = dsh_home.join("profiles/headless/cordis.patch.yml");
    std::fs::write(&profile_patch, "- id: session-title\n  config:\n    fallbackMaxWords: 3\n- id: no-such-row\n  disabled: true\n").unwrap();
    let home_patch = dsh_home.join("cordis.patch.yml");
    std::fs::write(
        &home_patch,
        "- id: session-title\n  config:\n    fallbackMaxWords: 7\n",
    )
    .unwrap();
    let extra = home.path().join("extra.yml");
    std::fs::write(&extra, "- id: tool-todo\n  disabled: true\n").unwrap();
    let out = dsh(
        home.path(),
        home.path(),
        &[
            "--dump-config",
            "--profile",
            "headless",
            "--patch",
            "extra.yml",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let dump = text(&out.stdout);
    let (pp, hp, ep) = (
        profile_patch.display().to_string(),
        home_patch.display().to_string(),
        extra.display().to_string(),
    );
    assert!(
        dump.contains(&format!("# == @deepseek-ai/dsh-base, patched by {pp}, {hp}\n- id: session-title\n  name: '@deepseek-ai/dsh-session-title'\n  config:\n    fallbackMaxWords: 7\n")),
        "home patch outranks the profile patch, and config is replaced whole:\n{dump}"
    );
    assert!(
        dump.contains(&format!(
            "# == @deepseek-ai/dsh-base, patched by {ep}\n- id: tool-todo\n"
        )),
        "{dump}"
    );
    assert_eq!(
        text(&out.stderr),
        format!("dsh: [{pp}] patch: entry \"no-such-row\" not found\n")
    );
    // The dump is one loadable document: it parses as a single YAML list.
    let again = dsh_kernel::config::parse(&dump).unwrap().unwrap();
    assert!(matches!(again, dsh_kernel::config::Node::Seq(ref rows) if rows.len() > 20));
}

fn expect_config_error(patch: &str, args: &[&str], needle: &[&str]) {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("bad.yml");
    std::fs::write(&file, patch).unwrap();
    let mut full = vec!["--profile", "headless", "--patch", "bad.yml"];
    full.extend_from_slice(args);
    let out = dsh(home.path(), home.path(), &full);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    for n in needle {
        let n = n.replace("{file}", &file.display().to_string());
        assert!(err.contains(&n), "missing {n:?} in {err}");
    }
}

#[test]
fn bad_configuration_is_a_clear_error_with_exit_2() {
    expect_config_error("", &["task"], &["{file}", "must be a top-level YAML list"]);
    expect_config_error(
        "# just a comment\n",
        &["task"],
        &["{file}", "must be a top-level YAML list"],
    );
    expect_config_error(
        "id: x\n",
        &["task"],
        &["{file}", "must be a top-level YAML list"],
    );
    expect_config_error(
        "- [1, 2]\n",
        &["task"],
        &["{file}", "entry 1", "must be a mapping"],
    );
    expect_config_error(
        "- id: a\n  config: [unclosed\n",
        &["task"],
        &["failed to parse {file}", "line"],
    );
    expect_config_error(
        "- insert:\n    - id: mystery\n      name: '@deepseek-ai/dsh-not-a-plugin'\n",
        &["task"],
        &[
            "{file}",
            "row \"mystery\"",
            "unknown plugin \"@deepseek-ai/dsh-not-a-plugin\"",
        ],
    );
    expect_config_error(
        "- insert:\n    - id: tool-todo\n      name: '@deepseek-ai/dsh-tool-todo'\n",
        &["task"],
        &["{file}", "duplicate row id \"tool-todo\""],
    );
    expect_config_error(
        "- id: session-title\n  config:\n    fallbackMaxWords: five\n",
        &["task"],
        &[
            "{file}",
            "row \"session-title\"",
            "config field `fallbackMaxWords`",
        ],
    );
    expect_config_error(
        "- id: sandbox-policy\n  config:\n    mode: !!js require('fs')\n",
        &["task"],
        &["{file}", "row \"sandbox-policy\"", "!!js"],
    );
}

#[test]
fn usage_errors_exit_1() {
    let home = tempfile::tempdir().unwrap();
    for (args, msg) in [
        (vec!["task"], "error: --profile <name> is required\n"),
        (
            vec!["--profile", "headless"],
            "error: a task is required, for example: dsh headless \"run the tests\"\n",
        ),
        (
            vec!["--profile", "headless", "--dump-config", "x"],
            "error: config dumps take no app arguments, got \"x\"\n",
        ),
    ] {
        let out = dsh(home.path(), home.path(), &args);
        assert_eq!(
            (out.status.code(), text(&out.stderr)),
            (Some(1), msg.to_string()),
            "{args:?}"
        );
    }
    let out = dsh(home.path(), home.path(), &["--version"]);
    assert_eq!(
        text(&out.stdout),
        format!("{}\n", env!("CARGO_PKG_VERSION"))
    );
}
