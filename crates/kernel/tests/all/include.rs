//! File includes in composition (`@deepseek-ai/cordis-plugin-include` rows).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use dsh_kernel::config::{
    Composition, ConfigError, EvalEnv, Layer, compose, render_dump, to_load_rows,
};
use pretty_assertions::assert_eq;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn compose_file(path: &str) -> Result<Composition, ConfigError> {
    let text = std::fs::read_to_string(path).unwrap();
    compose(&[Layer::parse_rows(path, path, &text)?])
}

/// `(id, name, config)` of every row that would load, in load order.
fn loaded(c: &Composition) -> Vec<(String, String, serde_json::Value)> {
    let env = EvalEnv::from_process(std::env::temp_dir());
    to_load_rows(&c.rows, &env)
        .unwrap()
        .into_iter()
        .map(|r| (r.id, r.name, r.config))
        .collect()
}

fn ids(c: &Composition) -> Vec<String> {
    loaded(c).into_iter().map(|(id, _, _)| id).collect()
}

const BASE: &str = "\
- id: llm
  name: '@x/llm'
  config:
    model: pro
- id: tools
  name: '@x/tools'
- id: extra
  name: '@x/extra'
";

#[test]
fn an_include_loads_the_patched_rows_of_its_file_in_its_place() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "base.yml", BASE);
    let top = write(
        dir.path(),
        "top.yml",
        "\
- id: first
  name: '@x/first'
- id: base
  name: '@deepseek-ai/cordis-plugin-include'
  config:
    path: ./base.yml
    patches:
      - id: llm
        name: '@x/llm'
        config:
          model: flash
      - id: extra
        disabled: true
      - insert:
          - id: added
            name: '@x/added'
      - id: added
        config:
          n: 1
- id: last
  name: '@x/last'
",
    );
    let c = compose_file(&top).unwrap();
    assert_eq!(c.warnings, Vec::<String>::new());
    assert_eq!(
        loaded(&c),
        vec![
            ("first".into(), "@x/first".into(), serde_json::Value::Null),
            (
                "llm".into(),
                "@x/llm".into(),
                serde_json::json!({"model": "flash"})
            ),
            ("tools".into(), "@x/tools".into(), serde_json::Value::Null),
            (
                "added".into(),
                "@x/added".into(),
                serde_json::json!({"n": 1})
            ),
            ("last".into(), "@x/last".into(), serde_json::Value::Null),
        ]
    );
    // The dump shows the include row as written.
    let dump = render_dump(&c);
    assert!(dump.contains("path: ./base.yml"), "{dump}");
}

#[test]
fn nested_includes_resolve_against_the_file_that_holds_them() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "base.yml", BASE);
    write(
        dir.path(),
        "mid.yml",
        "\
- id: base
  name: '@deepseek-ai/cordis-plugin-include'
  config:
    path: base.yml
    patches:
      - id: tools
        config: {mode: code}
",
    );
    let top = write(
        dir.path(),
        "tests/deep/top.yml",
        "\
- id: mid
  name: '@deepseek-ai/cordis-plugin-include'
  config:
    path: ../../mid.yml
    patches:
      # the rows of base.yml sit behind a nested include: this patch cannot reach them
      - id: llm
        disabled: true
      - insert:
          - id: own
            name: '@x/own'
",
    );
    let c = compose_file(&top).unwrap();
    assert_eq!(ids(&c), ["llm", "tools", "extra", "own"]);
    assert_eq!(loaded(&c)[1].2, serde_json::json!({"mode": "code"}));
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(
        c.warnings[0].contains("entry \"llm\" not found"),
        "{:?}",
        c.warnings
    );
}

#[test]
fn patches_outside_an_include_do_not_reach_into_it_but_can_replace_or_disable_it() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "base.yml", BASE);
    write(dir.path(), "other.yml", "- id: other\n  name: '@x/other'\n");
    let top = write(
        dir.path(),
        "top.yml",
        "- id: base\n  name: '@deepseek-ai/cordis-plugin-include'\n  config:\n    path: ./base.yml\n",
    );
    let text = std::fs::read_to_string(&top).unwrap();
    let rows = Layer::parse_rows(&top, &top, &text).unwrap();
    let patch_file = dir.path().join("patch.yml").display().to_string();
    let reach = Layer::parse(&patch_file, &patch_file, "- id: tools\n  disabled: true\n").unwrap();
    let c = compose(&[rows.clone(), reach]).unwrap();
    assert_eq!(ids(&c), ["llm", "tools", "extra"]);
    assert!(c.warnings[0].contains("entry \"tools\" not found"));

    let swap = Layer::parse(
        &patch_file,
        &patch_file,
        "- id: base\n  config:\n    path: other.yml\n",
    )
    .unwrap();
    assert_eq!(ids(&compose(&[rows.clone(), swap]).unwrap()), ["other"]);

    let off = Layer::parse(&patch_file, &patch_file, "- id: base\n  disabled: true\n").unwrap();
    assert_eq!(ids(&compose(&[rows, off]).unwrap()), Vec::<String>::new());
}

fn error_of(dir: &Path, top: &str) -> String {
    let top = write(dir, "top.yml", top);
    compose_file(&top).unwrap_err().to_string()
}

#[test]
fn a_missing_file_names_the_row_and_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let e = error_of(
        dir.path(),
        "- id: base\n  name: '@deepseek-ai/cordis-plugin-include'\n  config:\n    path: ./nowhere.yml\n",
    );
    let missing = dir.path().join("nowhere.yml").display().to_string();
    assert!(e.contains("row \"base\""), "{e}");
    assert!(e.contains(&format!("cannot read {missing}")), "{e}");
}

#[test]
fn a_cycle_is_an_error_that_shows_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let include = |path: &str| {
        format!(
            "- id: inc\n  name: '@deepseek-ai/cordis-plugin-include'\n  config:\n    path: {path}\n"
        )
    };
    write(dir.path(), "a.yml", &include("./sub/b.yml"));
    write(dir.path(), "sub/b.yml", &include("../a.yml"));
    let e = error_of(dir.path(), &include("a.yml"));
    let a = dir.path().join("a.yml").display().to_string();
    let b = dir.path().join("sub/b.yml").display().to_string();
    assert!(
        e.contains(&format!("include cycle: {a} -> {b} -> {a}")),
        "{e}"
    );
}

#[test]
fn bad_include_rows_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let row = |config: &str| {
        format!("- id: base\n  name: '@deepseek-ai/cordis-plugin-include'\n  config:\n{config}")
    };
    for (config, needle) in [
        ("    patches: []\n", "config needs `path`"),
        (
            "    path: !!js \"'./x.yml'\"\n",
            "must be a literal file path",
        ),
        ("    path: 3\n", "`path` must be a string"),
        ("    path: ./x.txt\n", "only .yml, .yaml and .json files"),
        (
            "    path: ./base.yml\n    patches: {id: x}\n",
            "`patches` must be a list",
        ),
        (
            "    path: ./base.yml\n    patches: [plain]\n",
            "patch 1 of `patches` must be a mapping",
        ),
    ] {
        write(dir.path(), "base.yml", BASE);
        let e = error_of(dir.path(), &row(config));
        assert!(e.contains(needle), "{config:?}: {e}");
        assert!(e.contains("row \"base\""), "{e}");
    }
    // The included file must be an entry list of rows.
    write(
        dir.path(),
        "patches.yml",
        "- insert:\n    - id: a\n      name: b\n",
    );
    let e = error_of(dir.path(), &row("    path: ./patches.yml\n"));
    assert!(e.contains("patches.yml: row 1 needs a string `id`"), "{e}");
}

#[test]
fn a_built_in_layer_cannot_include_a_relative_path() {
    let layer = Layer::parse_rows(
        "built-in",
        "built-in",
        "- id: base\n  name: '@deepseek-ai/cordis-plugin-include'\n  config:\n    path: ./x.yml\n",
    )
    .unwrap();
    let e = compose(&[layer]).unwrap_err().to_string();
    assert!(
        e.contains("the layer is built in and has no directory"),
        "{e}"
    );
}

#[test]
fn runaway_nesting_stops_at_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..40 {
        write(
            dir.path(),
            &format!("f{i}.yml"),
            &format!(
                "- id: inc\n  name: '@deepseek-ai/cordis-plugin-include'\n  config:\n    path: f{}.yml\n",
                i + 1
            ),
        );
    }
    let e = error_of(
        dir.path(),
        "- id: inc\n  name: '@deepseek-ai/cordis-plugin-include'\n  config:\n    path: f0.yml\n",
    );
    assert!(e.contains("includes nest more than 16 files deep"), "{e}");
}
