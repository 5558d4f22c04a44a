//! `glob` and `grep` over real trees: ordering, ignore rules, caps, sampling, spill texts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use dsh_kernel::{BoxError, BoxFuture};
use dsh_tools_builtin::{SpillRef, SpillRequest, SpillStore, TextSpillStore};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::{
    Harness, fixture_dir, ok, outcome, pinned_parameters, plain_error, shape, typed_error,
};

const SEARCH: &str = "@deepseek-ai/dsh-tool-fs-search";

/// The glob footer when no spill store keeps the full result. Upstream recorded it (the
/// `fs-glob-sampling` conformance scenario compares it byte for byte), so it stays as is.
const UNSAVED: &str = "The complete result could not be saved; narrow pattern or path to see more.";

/// Writes `files` (relative paths) in order, each one second newer than the last.
fn tree(root: &Path, files: &[&str]) {
    let start = SystemTime::now() - Duration::from_secs(10_000);
    for (i, name) in files.iter().enumerate() {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("content of {name}\n")).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(start + Duration::from_secs(i as u64 * 10))
            .unwrap();
    }
}

fn harness(dir: &Path, config: Value) -> Harness {
    let mut h = Harness::new(&[(SEARCH, config)]);
    h.start_session(dir);
    h
}

fn search_error(code: &str, message: &str) -> (bool, String, Option<(String, String)>) {
    typed_error("SearchError", code, message)
}

#[tokio::test]
async fn glob_reproduces_the_recorded_sampling_result() {
    let Some(dir) = fixture_dir("fs-glob-sampling") else {
        dsh_test_support::prereq::skip("../shared/conformance fixtures are absent");
        return;
    };
    let log = std::fs::read_to_string(dir.join("session.jsonl")).unwrap();
    let recorded: Value = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["type"] == "tool/result")
        .expect("recorded tool/result");
    let expected_text = recorded["data"]["message"]["content"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    let expected_meta = recorded["data"]["meta"].clone();

    let ws = tempfile::tempdir().unwrap();
    tree(
        ws.path(),
        &[
            "tree/archive/a.ts",
            "tree/archive/b.ts",
            "tree/archive/c.ts",
            "tree/docs/guide.md",
            "tree/src/index.ts",
            "tree/test/spec.ts",
            "tree/top.txt",
            "tree/notes.md",
        ],
    );
    let h = harness(
        ws.path(),
        json!({"sampleOverCapGlobResults": true, "globMaxResults": 4}),
    );
    let result = h
        .call("glob", json!({"pattern": "*", "path": "tree"}))
        .await;
    assert_eq!(outcome(&result), ok(&expected_text));
    assert_eq!(
        dsh_kernel::json::to_string(result.meta.as_ref().unwrap()),
        dsh_kernel::json::to_string(&expected_meta)
    );
    for tool in ["glob", "grep"] {
        assert_eq!(
            shape(&h.parameters(tool)),
            shape(&pinned_parameters("fs-glob-sampling", tool).unwrap()),
            "{tool}"
        );
    }
}

#[tokio::test]
async fn glob_orders_by_mtime_and_includes_hidden_and_ignored_files_but_not_vcs() {
    let ws = tempfile::tempdir().unwrap();
    tree(
        ws.path(),
        &[
            "new.rs",
            ".hidden.rs",
            "target/ignored.rs",
            ".git/hooks/x.rs",
            "src/a.rs",
            "lib/src/b.rs",
        ],
    );
    std::fs::write(ws.path().join(".gitignore"), "target/\n").unwrap();
    tree(ws.path(), &["old.rs"]);
    let old = std::fs::File::options()
        .write(true)
        .open(ws.path().join("old.rs"))
        .unwrap();
    old.set_modified(SystemTime::now() - Duration::from_secs(20_000))
        .unwrap();
    let h = harness(ws.path(), json!({"sampleOverCapGlobResults": false}));
    let got = h.call("glob", json!({"pattern": "*.rs"})).await;
    assert_eq!(
        outcome(&got),
        ok("old.rs\nnew.rs\n.hidden.rs\ntarget/ignored.rs\nsrc/a.rs\nlib/src/b.rs")
    );
    assert_eq!(
        got.meta,
        Some(
            json!({"shape": "paths", "paths": ["old.rs", "new.rs", ".hidden.rs", "target/ignored.rs", "src/a.rs", "lib/src/b.rs"], "truncated": false, "total": 6})
        )
    );
    // A separator anchors the pattern at the workspace.
    assert_eq!(
        outcome(&h.call("glob", json!({"pattern": "src/*.rs"})).await),
        ok("src/a.rs")
    );
    assert_eq!(
        outcome(&h.call("glob", json!({"pattern": "**/src/*.rs"})).await),
        ok("src/a.rs\nlib/src/b.rs")
    );
    assert_eq!(
        outcome(
            &h.call("glob", json!({"pattern": "*.rs", "path": "lib"}))
                .await
        ),
        ok("lib/src/b.rs")
    );
    let abs = ws.path().join("src").to_string_lossy().into_owned();
    assert_eq!(
        outcome(
            &h.call("glob", json!({"pattern": "*.rs", "path": abs}))
                .await
        ),
        ok("src/a.rs")
    );
    assert_eq!(
        outcome(&h.call("glob", json!({"pattern": "*.py"})).await),
        ok("No files found")
    );
    assert_eq!(
        h.mode("glob", json!({"pattern": "*"})),
        dsh_tools::ExecutionMode::Exclusive
    );
}

#[tokio::test]
async fn glob_caps_take_the_oldest_head_without_sampling() {
    let ws = tempfile::tempdir().unwrap();
    tree(ws.path(), &["a/1", "a/2", "b/1", "c/1"]);
    let h = harness(
        ws.path(),
        json!({"sampleOverCapGlobResults": false, "globMaxResults": 2}),
    );
    let got = h.call("glob", json!({"pattern": "*"})).await;
    assert_eq!(
        outcome(&got),
        ok(&format!("a/1\na/2\n\n(Showing 2 of 4 paths. {UNSAVED})"))
    );
    assert_eq!(
        got.meta,
        Some(json!({"shape": "paths", "paths": ["a/1", "a/2"], "truncated": true, "total": 4}))
    );

    let h = harness(
        ws.path(),
        json!({"sampleOverCapGlobResults": true, "globMaxResults": 2}),
    );
    let got = h.call("glob", json!({"pattern": "*"})).await;
    assert_eq!(
        outcome(&got),
        ok(&format!(
            "a/1\nb/1\n\n(Showing 2 of 4 paths, sampled across 2 of the 3 top-level entries this pattern matched instead of taken in modification-time order. Narrow path to inspect a specific subtree. {UNSAVED})"
        ))
    );
}

struct MemorySpill(Mutex<Vec<SpillRequest>>);

impl TextSpillStore for MemorySpill {
    fn save_text(&self, request: SpillRequest) -> BoxFuture<'static, Result<SpillRef, BoxError>> {
        let locator = format!("/spill/{}", request.suggested_name);
        self.0.lock().unwrap().push(request);
        Box::pin(async move {
            Ok(SpillRef {
                locator,
                retrieval_hint: "Use read with offset/limit.".into(),
            })
        })
    }
}

#[tokio::test]
async fn over_cap_results_are_spilled_when_a_store_is_loaded() {
    let ws = tempfile::tempdir().unwrap();
    tree(ws.path(), &["x1", "x2", "x3"]);
    std::fs::write(ws.path().join("m.txt"), "hit\nhit\nhit\n").unwrap();
    let root = dsh_kernel::Context::new_root();
    let store = Arc::new(MemorySpill(Mutex::default()));
    root.provide(Arc::new(SpillStore(store.clone()))).unwrap();
    let mut h = Harness::with_root(
        root,
        &[(
            SEARCH,
            json!({"sampleOverCapGlobResults": false, "globMaxResults": 2, "grepMaxMatches": 2}),
        )],
    );
    h.start_session(ws.path());
    let got = h.call("glob", json!({"pattern": "x*"})).await;
    assert_eq!(
        outcome(&got),
        ok(
            "x1\nx2\n\n(Showing 2 of 3 paths. Full sorted result stored at: /spill/glob-results.txt. Use read with offset/limit.)"
        )
    );
    let got = h.call("grep", json!({"pattern": "hit"})).await;
    assert_eq!(
        outcome(&got),
        ok(
            "Found 2 of 3 matches\n\nm.txt\nLine 1: hit\nLine 2: hit\n\n(Full grep result stored at: /spill/grep-results.txt. Use read with offset/limit.)"
        )
    );
    let saved: Vec<(String, String)> = store
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|r| (r.suggested_name.clone(), r.content.clone()))
        .collect();
    assert_eq!(
        saved,
        [
            ("glob-results.txt".to_string(), "x1\nx2\nx3".to_string()),
            (
                "grep-results.txt".to_string(),
                "Found 3 matches\n\nm.txt\nLine 1: hit\nLine 2: hit\nLine 3: hit".to_string()
            ),
        ]
    );
}

#[tokio::test]
async fn glob_errors_read_like_upstream() {
    let ws = tempfile::tempdir().unwrap();
    let h = harness(ws.path(), json!({"sampleOverCapGlobResults": true}));
    assert_eq!(
        outcome(&h.call("glob", json!({"pattern": " "})).await),
        plain_error("pattern must be a non-empty string")
    );
    assert_eq!(
        outcome(&h.call("glob", json!({"pattern": "*", "path": ""})).await),
        plain_error("path must be a non-empty string when given")
    );
    assert_eq!(
        outcome(&h.call("glob", json!({"pattern": "a[b"})).await),
        search_error(
            "SEARCH_INVALID_PATTERN",
            "glob pattern rejected by ripgrep: rg: error parsing glob 'a[b': unclosed character class; missing ']'"
        )
    );
    let missing = h
        .call("glob", json!({"pattern": "*", "path": "nope"}))
        .await;
    let (is_error, message, info) = outcome(&missing);
    assert!(
        is_error && message.starts_with("Error: glob search failed (exit 2): rg: "),
        "{message}"
    );
    assert_eq!(info, Some(("SearchError".into(), "SEARCH_FAILED".into())));
    let tool = h.registry.get(&h.root, "glob").unwrap();
    assert_eq!(tool.timeout_ms(), Some(30_000));
}

#[tokio::test]
async fn grep_groups_matches_by_file_with_ripgrep_filters() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join(".git")).unwrap();
    std::fs::write(ws.path().join(".gitignore"), "ignored.txt\n").unwrap();
    std::fs::write(ws.path().join("a.txt"), "needle one\nhay\nneedle two\r\n").unwrap();
    std::fs::write(ws.path().join("b.rs"), "let needle = 1;").unwrap();
    std::fs::write(ws.path().join("ignored.txt"), "needle\n").unwrap();
    std::fs::write(ws.path().join(".hidden"), "needle\n").unwrap();
    std::fs::write(ws.path().join("bin.dat"), b"needle\0\n").unwrap();
    std::fs::write(ws.path().join("latin1.txt"), b"needle caf\xe9\n").unwrap();
    let h = harness(ws.path(), json!({"sampleOverCapGlobResults": true}));
    let got = h.call("grep", json!({"pattern": "needle"})).await;
    assert_eq!(
        outcome(&got),
        ok(
            "Found 4 matches\n\na.txt\nLine 1: needle one\nLine 3: needle two\n\nb.rs\nLine 1: let needle = 1;\n\nlatin1.txt\nLine 1: (line is not valid UTF-8)"
        )
    );
    assert_eq!(
        got.meta,
        Some(json!({"shape": "matches", "files": [
            {"path": "a.txt", "matches": [{"lineNumber": 1, "line": "needle one"}, {"lineNumber": 3, "line": "needle two"}]},
            {"path": "b.rs", "matches": [{"lineNumber": 1, "line": "let needle = 1;"}]},
            {"path": "latin1.txt", "matches": [{"lineNumber": 1, "line": "(line is not valid UTF-8)"}]}], "truncated": false, "total": 4}))
    );
    assert_eq!(
        outcome(
            &h.call("grep", json!({"pattern": "needle", "include": "*.rs"}))
                .await
        ),
        ok("Found 1 match\n\nb.rs\nLine 1: let needle = 1;")
    );
    assert_eq!(
        outcome(
            &h.call("grep", json!({"pattern": "needle", "path": "ignored.txt"}))
                .await
        ),
        ok("Found 1 match\n\nignored.txt\nLine 1: needle")
    );
    assert_eq!(
        outcome(&h.call("grep", json!({"pattern": "nothing here"})).await),
        ok("No matches found")
    );
}

#[tokio::test]
async fn grep_caps_and_previews() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("m.txt"),
        "abcdefgh 1\nabcdefgh 2\nabcdefgh 3\n",
    )
    .unwrap();
    let h = harness(
        ws.path(),
        json!({"sampleOverCapGlobResults": true, "grepMaxMatches": 2, "grepMaxLineBytes": 5}),
    );
    let got = h.call("grep", json!({"pattern": "abc"})).await;
    assert_eq!(
        outcome(&got),
        ok(
            "Found 2 of 3 matches\n\nm.txt\nLine 1: abcde (line truncated)\nLine 2: abcde (line truncated)\n\n(No full copy of the result could be saved; search with a narrower pattern, path or include to see the rest.)"
        )
    );
    assert_eq!(
        got.meta,
        Some(
            json!({"shape": "matches", "files": [{"path": "m.txt", "matches": [
            {"lineNumber": 1, "line": "abcde (line truncated)"}, {"lineNumber": 2, "line": "abcde (line truncated)"}]}], "truncated": true, "total": 3})
        )
    );
}

#[tokio::test]
async fn grep_errors_read_like_upstream() {
    let ws = tempfile::tempdir().unwrap();
    let h = harness(ws.path(), json!({"sampleOverCapGlobResults": true}));
    assert_eq!(
        outcome(&h.call("grep", json!({"pattern": ""})).await),
        plain_error("pattern must be a non-empty string")
    );
    assert_eq!(
        outcome(&h.call("grep", json!({"pattern": "x", "path": " "})).await),
        plain_error("path must be a non-empty string when given")
    );
    assert_eq!(
        outcome(
            &h.call("grep", json!({"pattern": "x", "include": "a,b"}))
                .await
        ),
        plain_error(
            "include takes a single glob, not a comma-separated list: write alternatives in braces, e.g. *.{a,b}"
        )
    );
    let (is_error, message, info) = outcome(&h.call("grep", json!({"pattern": "(unclosed"})).await);
    assert!(
        is_error
            && message
                .starts_with("Error: grep pattern rejected by ripgrep: rg: regex parse error:"),
        "{message}"
    );
    assert_eq!(
        info,
        Some(("SearchError".into(), "SEARCH_INVALID_PATTERN".into()))
    );
}
