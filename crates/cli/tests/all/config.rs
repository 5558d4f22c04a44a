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
    let golden = include_str!("../golden/headless-default.yml");
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
    // No key is ignored without a word: a misspelt one, one given to a row that takes no
    // config, and one upstream 0.2 takes that this build does not (with the reason).
    expect_config_error(
        "- id: tool-bash\n  config:\n    timoutMs: 5\n",
        &["task"],
        &["{file}", "row \"tool-bash\"", "`timoutMs`", "unknown key"],
    );
    expect_config_error(
        "- id: llm\n  config:\n    verbose: true\n",
        &["task"],
        &["{file}", "row \"llm\"", "`verbose`", "takes no config"],
    );
    expect_config_error(
        "- id: tool-bash\n  config:\n    promoteOnTimeout: true\n",
        &["task"],
        &[
            "{file}",
            "row \"tool-bash\"",
            "`promoteOnTimeout`",
            "upstream 0.2",
            "run_in_background",
        ],
    );
}

#[test]
fn the_config_schema_lists_what_each_row_takes() {
    let home = tempfile::tempdir().unwrap();
    let out = dsh(
        home.path(),
        home.path(),
        &["--profile", "headless", "--dump-config-schema"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    let entries = schema["x-cordis"]["entries"].as_array().unwrap();
    let def = |id: &str| {
        let e = entries.iter().find(|e| e["id"] == id).unwrap();
        let r = e["configRef"].as_str().unwrap().rsplit('/').next().unwrap();
        (e["status"].clone(), schema["$defs"][r].clone())
    };
    let (status, bash) = def("tool-bash");
    assert_eq!(status, "schema");
    assert!(
        bash["properties"].get("enableRunInBackground").is_some(),
        "{bash}"
    );
    assert_eq!(bash["additionalProperties"], false);
    assert!(
        bash["x-upstream-keys-not-implemented"]
            .get("promoteOnTimeout")
            .is_some(),
        "{bash}"
    );
    // A plugin that parses its config by hand still says which keys it takes.
    let (status, compaction) = def("compaction-basic");
    assert_eq!(status, "schema");
    assert!(
        compaction["properties"].get("thresholdRatio").is_some(),
        "{compaction}"
    );
    assert_eq!(def("llm").0, "none");
    // No row is left unprobed in a shipped profile.
    for e in entries {
        assert_ne!(e["status"], "unknown", "{e}");
    }
    assert!(schema["$defs"]["patchList"].is_object());
}

#[test]
fn a_minimal_profile_written_by_upstream_02_boots_the_whole_minimal_tree() {
    // 0.2.1 writes its sdk-minimal profile with its standalone bundle alone.
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join(".dsh/profiles/mine");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("package.json"),
        r#"{"name": "dsh-profile-mine", "private": true, "dsh": {"profile": {"bundles": ["@deepseek-ai/dsh-sdk-minimal"]}}}"#,
    )
    .unwrap();
    std::fs::write(dir.join("cordis.yml"), "[]\n").unwrap();
    std::fs::write(dir.join("cordis.patch.yml"), "[]\n").unwrap();
    let out = dsh(
        home.path(),
        home.path(),
        &["--profile", "mine", "--dump-config"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "no patch misses its row");
    let dump = text(&out.stdout);
    for row in [
        "id: agent-loop",
        "id: sdk-jsonrpc-server",
        "id: terminal-bash",
    ] {
        assert!(dump.contains(row), "{row} in {dump}");
    }
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

/// Apps are plugins: the row a tree holds picks the app, not the profile's name or bundles.
#[test]
fn the_app_is_the_one_whose_row_the_tree_holds() {
    let home = tempfile::tempdir().unwrap();
    let patch = |name: &str, body: &str| {
        let p = home.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.display().to_string()
    };
    // The headless profile with the web app's row added: the web app (listed first) runs.
    let web = patch(
        "web-row.yml",
        "- insert:\n    - id: web-app-row\n      name: '@deepseek-ai/dsh-web-app'\n",
    );
    let out = dsh(
        home.path(),
        home.path(),
        &["--profile", "headless", "--patch", &web, "--help"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("dsh web"),
        "{}",
        text(&out.stdout)
    );
    // Its runner row switched off, the headless profile runs no app: a configuration error
    // that names the rows an app needs.
    let off = patch("no-runner.yml", "- id: headless-runner\n  disabled: true\n");
    let out = dsh(
        home.path(),
        home.path(),
        &["--profile", "headless", "--patch", &off, "say hi"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("runs no app") && err.contains("@deepseek-ai/dsh-headless"),
        "{err}"
    );
    // The app owns its flags: the headless app's help, through the launcher unchanged.
    let out = dsh(home.path(), home.path(), &["headless", "--help"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("Usage: dsh headless"));
}
