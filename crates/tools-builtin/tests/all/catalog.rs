//! Every catalog row loads with its upstream config shape, and required config is enforced.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use dsh_kernel::{Context, LoadRow, load_tree};
use pretty_assertions::assert_eq;
use serde_json::json;
use support::Harness;

#[test]
fn all_rows_load_together() {
    let h = Harness::new(&[
        ("@deepseek-ai/dsh-subprocess-local", json!(null)),
        ("@deepseek-ai/dsh-sandbox-local", json!(null)),
        ("@deepseek-ai/dsh-bash-sandbox", json!({"timeoutMs": 60000})),
        (
            "@deepseek-ai/dsh-shell-env",
            json!({"dshHome": "/tmp/dsh-home"}),
        ),
        ("@deepseek-ai/dsh-tool-bash", json!(null)),
        ("@deepseek-ai/dsh-fs-sandbox", json!({"cwd": "/"})),
        ("@deepseek-ai/dsh-fs-observation-policy", json!(null)),
        ("@deepseek-ai/dsh-tool-fs", json!(null)),
        (
            "@deepseek-ai/dsh-tool-fs-search",
            json!({"sampleOverCapGlobResults": true, "globMaxResults": 4}),
        ),
        (
            "@deepseek-ai/dsh-tool-str-replace-editor",
            json!({"maxOutputChars": 16000}),
        ),
        (
            "@deepseek-ai/dsh-tool-todo",
            json!({"allowParallelInProgress": true}),
        ),
    ]);
    let names: Vec<String> = h
        .registry
        .schemas(&h.root)
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(
        names,
        [
            "bash",
            "edit",
            "glob",
            "grep",
            "read",
            "str_replace_editor",
            "todo_write",
            "write"
        ]
    );
    h.tree.unload();
    assert!(h.registry.schemas(&h.root).is_empty());
}

#[tokio::test]
async fn tool_rows_wait_for_the_backend_row() {
    let base = support::non_tmp_dir();
    let outside = base.path().join("x.txt").to_string_lossy().into_owned();
    let ws = base.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    // tool-fs comes first but still loads over the fenced backend.
    let mut h = Harness::new(&[
        ("@deepseek-ai/dsh-tool-fs", json!(null)),
        (
            "@deepseek-ai/dsh-fs-sandbox",
            json!({"mode": "workspace-write", "tempRoots": []}),
        ),
    ]);
    h.start_session(&ws);
    let got = h
        .call("write", json!({"file_path": outside, "content": "x"}))
        .await;
    assert_eq!(
        support::outcome(&got).2,
        Some(("FsError".to_string(), "FS_SANDBOX_DENIED".to_string()))
    );
    let root = Context::new_root();
    root.provide(dsh_tools::ToolRegistry::new()).unwrap();
    let row = LoadRow {
        id: "r".into(),
        name: "@deepseek-ai/dsh-tool-str-replace-editor".into(),
        source: "c.yml".into(),
        config: json!(null),
        children: Vec::new(),
    };
    let err = load_tree(&root, &support::catalog(), &[row])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("FsBackend"), "{err}");
}

#[test]
fn short_names_resolve_and_required_config_is_enforced() {
    let catalog = support::catalog();
    assert!(catalog.lookup("tool-fs").is_some());
    assert!(catalog.lookup("dsh-bash-local").is_some());
    let root = Context::new_root();
    root.provide(dsh_tools::ToolRegistry::new()).unwrap();
    let row = |name: &str, config| LoadRow {
        id: "r".into(),
        name: name.into(),
        source: "c.yml".into(),
        config,
        children: Vec::new(),
    };
    let err = load_tree(
        &root,
        &catalog,
        &[row("@deepseek-ai/dsh-tool-todo", json!({}))],
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("allowParallelInProgress"), "{err}");
    let err = load_tree(
        &root,
        &catalog,
        &[row("@deepseek-ai/dsh-tool-fs-search", json!({}))],
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("sampleOverCapGlobResults"), "{err}");
    let err = load_tree(
        &root,
        &catalog,
        &[row("@deepseek-ai/dsh-bash-local", json!({"timeoutMs": 0}))],
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.ends_with("bash-local: timeoutMs must be a positive finite number"),
        "{err}"
    );
}
