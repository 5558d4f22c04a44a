//! `str_replace_editor`: view, create, str_replace and insert on real files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use pretty_assertions::assert_eq;
use serde_json::json;
use support::{Harness, ok, outcome, plain_error, text, typed_error};

const EDITOR: &str = "@deepseek-ai/dsh-tool-str-replace-editor";

fn harness(dir: &std::path::Path, config: serde_json::Value) -> Harness {
    let mut h = Harness::new(&[
        ("@deepseek-ai/dsh-fs-observation-policy", json!(null)),
        ("@deepseek-ai/dsh-fs-local", json!(null)),
        (EDITOR, config),
    ]);
    h.start_session(dir);
    h
}

fn fs_error(code: &str, message: &str) -> (bool, String, Option<(String, String)>) {
    typed_error("FsError", code, message)
}

#[tokio::test]
async fn view_create_replace_insert() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), json!(null));
    let file = dir.path().join("f.py").to_string_lossy().into_owned();
    let call = |args| h.call("str_replace_editor", args);

    assert_eq!(
        outcome(&call(json!({"command": "view", "path": file})).await),
        fs_error(
            "FS_NOT_FOUND",
            &format!("The path {file} does not exist. Please provide a valid path.")
        )
    );
    assert_eq!(
        outcome(&call(json!({"command": "create", "path": file})).await),
        plain_error("Parameter `file_text` is required for command: create")
    );
    assert_eq!(
        outcome(
            &call(json!({"command": "create", "path": file, "file_text": "a = 1\nb = 2\n"})).await
        ),
        ok(&format!("New file created successfully at: {file}"))
    );
    assert_eq!(
        outcome(&call(json!({"command": "create", "path": file, "file_text": "x"})).await),
        plain_error(&format!(
            "File already exists at: {file}. Cannot overwrite files using command `create`."
        ))
    );
    assert_eq!(
        outcome(&call(json!({"command": "view", "path": file})).await),
        ok(&format!(
            "Here's the content of {file} with line numbers (which has a total of 3 lines):\n     1  a = 1\n     2  b = 2\n     3  \n"
        ))
    );
    assert_eq!(
        outcome(&call(json!({"command": "view", "path": file, "view_range": [2, 2]})).await),
        ok(&format!(
            "Here's the content of {file} with line numbers (which has a total of 3 lines) with view_range=[2, 2]:\n     2  b = 2\n"
        ))
    );
    assert_eq!(
        outcome(&call(json!({"command": "str_replace", "path": file, "old_str": "b = 2", "new_str": "b = 3"})).await),
        ok(&format!("The file {file} has been edited successfully."))
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "a = 1\nb = 3\n");
    assert_eq!(
        outcome(&call(json!({"command": "str_replace", "path": file, "old_str": "= "})).await),
        fs_error(
            "FS_AMBIGUOUS_EDIT",
            "No replacement was performed. Multiple occurrences of old_str `= ` in lines [1, 2]. Please ensure it is unique"
        )
    );
    assert_eq!(
        outcome(&call(json!({"command": "str_replace", "path": file, "old_str": "zzz"})).await),
        fs_error(
            "FS_EDIT_NOT_FOUND",
            &format!(
                "No replacement was performed, old_str `zzz` did not appear verbatim in {file}."
            )
        )
    );
    assert_eq!(
        outcome(&call(json!({"command": "str_replace", "path": file, "old_str": ""})).await),
        plain_error("Parameter `old_str` is empty for command: str_replace")
    );
    assert_eq!(
        outcome(
            &call(
                json!({"command": "insert", "path": file, "insert_line": 1, "new_str": "inserted"})
            )
            .await
        ),
        ok(&format!("The file {file} has been edited successfully."))
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "a = 1\ninserted\nb = 3\n"
    );
    assert_eq!(
        outcome(
            &call(json!({"command": "insert", "path": file, "insert_line": 9, "new_str": "x"}))
                .await
        ),
        plain_error(
            "Invalid `insert_line` parameter: 9. Use a line number from 0 to 4 (0 inserts before the first line)"
        )
    );
    assert_eq!(
        outcome(&call(json!({"command": "insert", "path": file, "new_str": "x"})).await),
        plain_error("Parameter `insert_line` is required for command: insert")
    );
    assert_eq!(
        outcome(&call(json!({"command": "view", "path": "rel.txt"})).await),
        plain_error(
            "The path rel.txt is relative, but str_replace_editor needs an absolute path starting with `/` (did you mean /rel.txt?)"
        )
    );
}

#[tokio::test]
async fn editing_needs_a_view_first_under_the_observation_policy() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.txt");
    std::fs::write(&file, "one\n").unwrap();
    let file = file.to_string_lossy().into_owned();
    let h = harness(dir.path(), json!(null));
    let args = json!({"command": "str_replace", "path": file, "old_str": "one", "new_str": "two"});
    assert_eq!(
        outcome(&h.call("str_replace_editor", args.clone()).await),
        fs_error(
            "FS_NOT_OBSERVED",
            &format!("edit requires reading \"{file}\" first")
        )
    );
    h.call(
        "str_replace_editor",
        json!({"command": "view", "path": file}),
    )
    .await;
    std::fs::write(&file, "one!\n").unwrap();
    assert_eq!(
        outcome(&h.call("str_replace_editor", args.clone()).await),
        fs_error(
            "FS_STALE_VERSION",
            &format!("cannot write \"{file}\": file changed since it was read")
        )
    );
    h.call(
        "str_replace_editor",
        json!({"command": "view", "path": file}),
    )
    .await;
    assert_eq!(
        outcome(&h.call("str_replace_editor", args).await),
        ok(&format!("The file {file} has been edited successfully."))
    );
}

#[tokio::test]
async fn directory_view_lists_two_levels_and_output_clips() {
    let dir = tempfile::tempdir().unwrap();
    for path in [
        "a/b/c/deep.txt",
        "a/x.txt",
        ".hidden/h.txt",
        "node_modules/m.js",
        "z.txt",
    ] {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "x").unwrap();
    }
    let h = harness(dir.path(), json!({"maxOutputChars": 40}));
    let root = dir.path().to_string_lossy().into_owned();
    let got = text(
        &h.call(
            "str_replace_editor",
            json!({"command": "view", "path": root}),
        )
        .await,
    );
    let rows =
        format!("d\t{root}\nd\t{root}/a\nd\t{root}/a/b\nf\t{root}/a/x.txt\nf\t{root}/z.txt\n");
    let clipped: String = rows.chars().take(40).collect();
    assert_eq!(
        got,
        format!(
            "Contents of {root}, two levels deep, without hidden entries, node_modules or __pycache__ (d = directory, f = file, ? = other):\n{clipped}<response clipped><NOTE>The output was cut here to save context. Find what you need first (`grep -n` gives line numbers), then view a smaller part: a `view_range` of the file, or a subdirectory.</NOTE>\n"
        )
    );
    assert_eq!(
        outcome(
            &h.call(
                "str_replace_editor",
                json!({"command": "view", "path": root, "view_range": [1, 2]})
            )
            .await
        ),
        plain_error(
            "`view_range` works on files only, and `path` is a directory; view the directory without `view_range`."
        )
    );
    assert_eq!(
        outcome(
            &h.call(
                "str_replace_editor",
                json!({"command": "str_replace", "path": root, "old_str": "x"})
            )
            .await
        )
        .2,
        Some(("FsError".into(), "FS_NOT_OBSERVED".into()))
    );
    let h = Harness::new(&[
        ("@deepseek-ai/dsh-fs-local", json!(null)),
        (EDITOR, json!(null)),
    ]);
    assert_eq!(
        outcome(
            &h.call(
                "str_replace_editor",
                json!({"command": "insert", "path": root, "insert_line": 0, "new_str": "x"})
            )
            .await
        ),
        fs_error(
            "FS_NOT_REGULAR_FILE",
            &format!(
                "The path {root} is a directory; directories can only be shown with `view`, so pass a file path for this command"
            )
        )
    );
}

#[tokio::test]
async fn view_streams_large_files_keeping_only_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), json!({"maxOutputChars": 1000}));
    let path = dir.path().join("big.txt");
    // ~60 MiB, 1,000,000 lines; a BOM and CRLF endings kept as upstream shows them.
    let mut text = String::from("\u{feff}");
    for i in 1..=1_000_000 {
        text.push_str(&format!("line {i} {}\n", "é".repeat(25)));
    }
    std::fs::write(&path, &text).unwrap();
    drop(text);
    let file = path.to_string_lossy().into_owned();
    let out = h
        .call(
            "str_replace_editor",
            json!({"command": "view", "path": file, "view_range": [999_999, 1_000_000]}),
        )
        .await;
    let e = "é".repeat(25);
    assert_eq!(
        outcome(&out),
        ok(&format!(
            "Here's the content of {file} with line numbers (which has a total of 1000001 lines) with view_range=[999999, 1000000]:\n999999  line 999999 {e}\n1000000  line 1000000 {e}\n"
        ))
    );
    let whole = h
        .call(
            "str_replace_editor",
            json!({"command": "view", "path": file}),
        )
        .await;
    let (is_error, shown, _) = outcome(&whole);
    assert!(!is_error);
    assert!(shown.starts_with(&format!(
        "Here's the content of {file} with line numbers (which has a total of 1000001 lines):\n     1  line 1 {e}\n"
    )), "{shown}");
    assert!(shown.contains("<response clipped>") && shown.chars().count() < 1400);
}
