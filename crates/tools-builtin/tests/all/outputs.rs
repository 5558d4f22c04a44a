//! Canonical values: each builtin tool declares an output schema, and the value a call
//! reports (what a Code Mode binding resolves to) matches it, for representative calls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::Path;
use std::sync::Arc;

use dsh_kernel::Context;
use dsh_test_support::json_schema::conforms;
use dsh_tools::ToolResult;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::Harness;

/// The declared output schema of a registered tool.
fn declared(h: &Harness, name: &str) -> Value {
    h.registry
        .get(&h.root, name)
        .expect("tool registered")
        .output_schema()
        .unwrap_or_else(|| panic!("{name} declares no output schema"))
        .clone()
}

/// The call's value, after checking it succeeded and matches the tool's declaration.
async fn value_of(h: &Harness, name: &str, args: Value) -> Value {
    let result: ToolResult = h.call(name, args.clone()).await;
    assert!(
        !result.is_error,
        "{name} {args} failed: {:?}",
        result.content
    );
    let value = result.value.expect("the tool reports a value");
    if let Err(e) = conforms(&declared(h, name), &value, name) {
        panic!("{name} {args}: {e}");
    }
    value
}

fn fs_harness(dir: &Path) -> Harness {
    let mut h = Harness::new(&[
        ("@deepseek-ai/dsh-fs-local", json!(null)),
        ("@deepseek-ai/dsh-tool-fs", json!(null)),
    ]);
    h.start_session(dir);
    h
}

#[tokio::test]
async fn read_write_and_edit_values_match_their_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let h = fs_harness(dir.path());
    let file = dir.path().join("a.txt");
    let path = file.to_string_lossy().into_owned();

    let created = value_of(
        &h,
        "write",
        json!({"file_path": path, "content": "one\ntwo\n"}),
    )
    .await;
    assert_eq!(created["operation"], "create");
    assert_eq!(created["before"], Value::Null);
    assert_eq!(created["after"], "one\ntwo\n");

    let read = value_of(&h, "read", json!({"file_path": path})).await;
    assert_eq!(read["offset"], 1);
    assert_eq!(read["totalLines"], 2);
    assert_eq!(
        read["lines"],
        json!([{"number": 1, "text": "one"}, {"number": 2, "text": "two"}])
    );
    let window = value_of(
        &h,
        "read",
        json!({"file_path": path, "offset": 2, "limit": 1}),
    )
    .await;
    assert_eq!(window["lines"], json!([{"number": 2, "text": "two"}]));

    let updated = value_of(
        &h,
        "write",
        json!({"file_path": path, "content": "one\nthree\n"}),
    )
    .await;
    assert_eq!(updated["operation"], "update");
    assert_eq!(updated["before"], "one\ntwo\n");

    let edited = value_of(
        &h,
        "edit",
        json!({"file_path": path, "old_string": "three", "new_string": "3"}),
    )
    .await;
    assert_eq!(edited["before"], "one\nthree\n");
    assert_eq!(edited["after"], "one\n3\n");
    assert_eq!(edited["path"], updated["path"]);

    // The provider-facing schema carries parameters only.
    let schema = h.registry.get(&h.root, "read").unwrap().schema().clone();
    let sent = serde_json::to_value(&schema).unwrap();
    assert!(!sent.to_string().contains("totalLines"), "{sent}");
}

#[tokio::test]
async fn glob_and_grep_values_hold_every_item() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..5 {
        std::fs::write(
            dir.path().join(format!("f{i}.txt")),
            format!("needle {i}\nhay\n"),
        )
        .unwrap();
    }
    let mut h = Harness::new(&[(
        "@deepseek-ai/dsh-tool-fs-search",
        // Tiny pages: the text is cut, the value is not.
        json!({"sampleOverCapGlobResults": false, "globMaxResults": 2, "grepMaxMatches": 2}),
    )]);
    h.start_session(dir.path());

    let globbed = value_of(&h, "glob", json!({"pattern": "*.txt"})).await;
    assert_eq!(globbed["root"], ".");
    let mut paths: Vec<&str> = globbed["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    paths.sort();
    assert_eq!(paths, ["f0.txt", "f1.txt", "f2.txt", "f3.txt", "f4.txt"]);
    let none = value_of(&h, "glob", json!({"pattern": "*.rs"})).await;
    assert_eq!(none["paths"], json!([]));

    let found = value_of(&h, "grep", json!({"pattern": "needle"})).await;
    let matches = found["matches"].as_array().unwrap();
    assert_eq!(matches.len(), 5);
    let first = matches
        .iter()
        .find(|m| m["path"] == "f3.txt")
        .expect("f3 matched");
    assert_eq!(
        first,
        &json!({"path": "f3.txt", "lineNumber": 1, "line": "needle 3"})
    );
    let none = value_of(&h, "grep", json!({"pattern": "absent-word"})).await;
    assert_eq!(none, json!({"matches": []}));
}

#[tokio::test]
async fn bash_values_match_the_declared_union() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(&[
        ("@deepseek-ai/dsh-bash-local", json!(null)),
        ("@deepseek-ai/dsh-tool-bash", json!(null)),
    ]);
    h.start_session(dir.path());
    let ok = value_of(
        &h,
        "bash",
        json!({"command": "echo hi; echo oops >&2", "description": "d"}),
    )
    .await;
    assert_eq!(ok["kind"], "foreground");
    assert_eq!(ok["exitCode"], 0);
    assert_eq!(ok["stdout"]["text"], "hi\n");
    assert_eq!(ok["stderr"]["text"], "oops\n");
    let failed = value_of(&h, "bash", json!({"command": "exit 3", "description": "d"})).await;
    assert_eq!(failed["exitCode"], 3);
    // The background handle's shape (needs the jobs service to produce) is the other branch.
    let schema = declared(&h, "bash");
    conforms(
        &schema,
        &json!({"kind": "background", "jobId": "job-1"}),
        "bash",
    )
    .unwrap();
    assert!(conforms(&schema, &json!({"kind": "background"}), "bash").is_err());
}

#[tokio::test]
async fn editor_and_todo_values_match_their_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(&[
        ("@deepseek-ai/dsh-fs-local", json!(null)),
        ("@deepseek-ai/dsh-tool-str-replace-editor", json!(null)),
        (
            "@deepseek-ai/dsh-tool-todo",
            json!({"allowParallelInProgress": false}),
        ),
    ]);
    h.start_session(dir.path());
    let file = dir.path().join("e.py").to_string_lossy().into_owned();
    let created = value_of(
        &h,
        "str_replace_editor",
        json!({"command": "create", "path": file, "file_text": "a = 1\n"}),
    )
    .await;
    let text = h
        .call(
            "str_replace_editor",
            json!({"command": "view", "path": file}),
        )
        .await;
    let viewed = value_of(
        &h,
        "str_replace_editor",
        json!({"command": "view", "path": file}),
    )
    .await;
    assert!(created.is_string());
    assert_eq!(viewed, Value::String(support::text(&text)));

    let todos = value_of(
        &h,
        "todo_write",
        json!({"todos": [
            {"content": "plan", "status": "completed"},
            {"content": "build", "status": "in_progress"},
            {"content": "ship", "status": "pending"},
            {"content": "celebrate", "status": "pending"},
        ]}),
    )
    .await;
    assert_eq!(
        todos["counts"],
        json!({"pending": 2, "inProgress": 1, "completed": 1})
    );
    assert_eq!(
        todos["todos"][1],
        json!({"content": "build", "status": "in_progress"})
    );
}

#[test]
fn read_image_value_matches_its_schema() {
    // A real `read_image` call needs a model route that declares image input; the value is
    // `{path, image}` with the stored reference's tool form, checked here directly.
    let dir = tempfile::tempdir().unwrap();
    let root = Context::new_root();
    let store = dsh_attachments::AttachmentStore::new(
        dir.path().join("attachments/v1"),
        dsh_attachments::ImageLimits::default(),
    );
    root.provide(Arc::new(store)).unwrap();
    let h = Harness::with_root(
        root,
        &[
            ("@deepseek-ai/dsh-fs-local", json!(null)),
            ("@deepseek-ai/dsh-tool-fs", json!(null)),
        ],
    );
    let schema = declared(&h, "read_image");
    for stored in [
        json!({"attachmentId": "a1", "mediaType": "image/png", "width": 4, "height": 2, "bytes": 90}),
        json!({"attachmentId": "a2", "mediaType": "image/webp", "width": 4, "height": 2, "bytes": 90,
               "name": "x.webp", "originalDimensions": {"width": 8, "height": 4}}),
    ] {
        let image = dsh_llm::ImageAttachmentRef::from_json(&stored).unwrap();
        let value = json!({"path": "x.png", "image": image.to_tool_value()});
        conforms(&schema, &value, "read_image").unwrap();
    }
    let bad = json!({"path": "x.png", "image": {"attachmentId": "a"}});
    assert!(conforms(&schema, &bad, "read_image").is_err());
}

#[tokio::test]
async fn every_builtin_tool_declares_an_output_schema() {
    let dir = tempfile::tempdir().unwrap();
    let root = Context::new_root();
    let store = dsh_attachments::AttachmentStore::new(
        dir.path().join("attachments/v1"),
        dsh_attachments::ImageLimits::default(),
    );
    root.provide(Arc::new(store)).unwrap();
    let mut h = Harness::with_root(
        root,
        &[
            ("@deepseek-ai/dsh-fs-local", json!(null)),
            ("@deepseek-ai/dsh-tool-fs", json!(null)),
            (
                "@deepseek-ai/dsh-tool-fs-search",
                json!({"sampleOverCapGlobResults": true}),
            ),
            ("@deepseek-ai/dsh-bash-local", json!(null)),
            ("@deepseek-ai/dsh-tool-bash", json!(null)),
            ("@deepseek-ai/dsh-tool-str-replace-editor", json!(null)),
            (
                "@deepseek-ai/dsh-tool-todo",
                json!({"allowParallelInProgress": true}),
            ),
        ],
    );
    h.start_session(dir.path());
    let outputs = h.registry.output_schemas(&h.root);
    let names: Vec<&str> = outputs.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "bash",
            "edit",
            "glob",
            "grep",
            "read",
            "read_image",
            "str_replace_editor",
            "todo_write",
            "write"
        ]
    );
}
