//! `read`, `write`, `edit`: real files, read-before-edit, the sandbox fence, escalation.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use dsh_kernel::BoxFuture;
use dsh_tools::{Approval, ApprovalOutcome, ApprovalRequest, ApprovalService, ExecutionMode};
use pretty_assertions::assert_eq;
use serde_json::json;
use support::{Harness, ok, outcome, pinned_parameters, plain_error, shape, text, typed_error};

const FS: &str = "@deepseek-ai/dsh-tool-fs";
const OBSERVE: &str = "@deepseek-ai/dsh-fs-observation-policy";
const LOCAL: &str = "@deepseek-ai/dsh-fs-local";

fn guarded(dir: &Path) -> Harness {
    let mut h = Harness::new(&[
        (LOCAL, json!(null)),
        (OBSERVE, json!(null)),
        (FS, json!(null)),
    ]);
    h.start_session(dir);
    h
}

fn envelope(path: &str, body: &str) -> String {
    format!("<path>{path}</path>\n<type>file</type>\n<content>\n{body}\n</content>")
}

fn p(dir: &Path, name: &str) -> String {
    dir.join(name).to_string_lossy().into_owned()
}

fn fs_error(code: &str, message: &str) -> (bool, String, Option<(String, String)>) {
    typed_error("FsError", code, message)
}

#[tokio::test]
async fn read_returns_the_numbered_envelope_and_meta() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("greeting.txt"), "hello\n").unwrap();
    let h = guarded(dir.path());
    let result = h.call("read", json!({"file_path": "greeting.txt"})).await;
    let path = p(dir.path(), "greeting.txt");
    assert_eq!(
        outcome(&result),
        ok(&envelope(
            &path,
            "1: hello\n\n(End of file - total 1 lines)"
        ))
    );
    assert_eq!(
        dsh_kernel::json::to_string(result.meta.as_ref().unwrap()),
        dsh_kernel::json::to_string(
            &json!({"path": path, "offset": 1, "lines": [{"number": 1, "text": "hello"}], "totalLines": 1})
        )
    );
    std::fs::write(dir.path().join("main.rs"), "fn main() {}").unwrap();
    let result = h.call("read", json!({"file_path": "main.rs"})).await;
    assert_eq!(result.meta.unwrap()["lang"], json!("rs"));
}

#[tokio::test]
async fn read_pages_and_caps() {
    let dir = tempfile::tempdir().unwrap();
    let body: String = (1..=10).map(|i| format!("line {i}\r\n")).collect();
    std::fs::write(dir.path().join("ten.txt"), body).unwrap();
    let h = guarded(dir.path());
    let path = p(dir.path(), "ten.txt");
    let got = h
        .call(
            "read",
            json!({"file_path": "ten.txt", "offset": 3, "limit": 2}),
        )
        .await;
    assert_eq!(
        text(&got),
        envelope(
            &path,
            "3: line 3\n4: line 4\n\n(Showing lines 3-4 of 10. Use offset=5 to continue.)"
        )
    );
    let got = h
        .call("read", json!({"file_path": "ten.txt", "offset": 9}))
        .await;
    assert_eq!(
        text(&got),
        envelope(
            &path,
            "9: line 9\n10: line 10\n\n(End of file - total 10 lines)"
        )
    );
    assert_eq!(
        outcome(
            &h.call("read", json!({"file_path": "ten.txt", "offset": 11}))
                .await
        ),
        fs_error(
            "FS_NOT_FOUND",
            &format!("offset 11 is out of range for \"{path}\" (10 lines)")
        )
    );
    assert_eq!(
        outcome(
            &h.call("read", json!({"file_path": "ten.txt", "limit": 2001}))
                .await
        ),
        plain_error("limit must be less than or equal to 2000")
    );
    assert_eq!(
        outcome(
            &h.call("read", json!({"file_path": "ten.txt", "offset": 0}))
                .await
        ),
        plain_error("offset must be a positive integer")
    );
    assert_eq!(
        outcome(
            &h.call("read", json!({"file_path": "ten.txt", "limit": 1.5}))
                .await
        ),
        plain_error("limit must be a positive integer")
    );
    assert_eq!(
        outcome(&h.call("read", json!({"file_path": " "})).await),
        plain_error("file_path must be a non-empty string")
    );

    std::fs::write(dir.path().join("empty.txt"), "").unwrap();
    let got = h.call("read", json!({"file_path": "empty.txt"})).await;
    assert_eq!(
        text(&got),
        envelope(&p(dir.path(), "empty.txt"), "(End of file - total 0 lines)")
    );

    let long = format!("{}\nshort\n", "x".repeat(2500));
    std::fs::write(dir.path().join("long.txt"), long).unwrap();
    let got = h.call("read", json!({"file_path": "long.txt"})).await;
    let expected = format!(
        "1: {}... (line truncated to 2000 chars)\n2: short\n\n(End of file - total 2 lines)",
        "x".repeat(2000)
    );
    assert_eq!(text(&got), envelope(&p(dir.path(), "long.txt"), &expected));

    // 30 lines of 1999 bytes: 25 fit the 51200-byte budget (25*1999 + 24 = 49999).
    let wide: String = (0..30).map(|_| format!("{}\n", "y".repeat(1999))).collect();
    std::fs::write(dir.path().join("wide.txt"), wide).unwrap();
    let got = text(&h.call("read", json!({"file_path": "wide.txt"})).await);
    assert!(
        got.ends_with(
            "\n\n(Output capped. Showing lines 1-25. Use offset=26 to continue.)\n</content>"
        ),
        "{}",
        &got[got.len() - 120..]
    );
}

#[tokio::test]
async fn read_errors_carry_fs_codes() {
    let dir = tempfile::tempdir().unwrap();
    let h = guarded(dir.path());
    std::fs::write(dir.path().join("bin"), b"ab\0cd").unwrap();
    std::fs::write(dir.path().join("latin1"), b"caf\xe9\n").unwrap();
    std::fs::write(dir.path().join("afile"), "x").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let read = |path: &str| h.call("read", json!({"file_path": path}));
    assert_eq!(
        outcome(&read("nope.txt").await),
        fs_error(
            "FS_NOT_FOUND",
            &format!("cannot read \"{}\": not found", p(dir.path(), "nope.txt"))
        )
    );
    assert_eq!(
        outcome(&read("sub").await),
        fs_error(
            "FS_NOT_REGULAR_FILE",
            &format!(
                "cannot read \"{}\": not a regular file",
                p(dir.path(), "sub")
            )
        )
    );
    assert_eq!(
        outcome(&read("bin").await),
        fs_error(
            "FS_NOT_TEXT",
            &format!("cannot read \"{}\": binary file", p(dir.path(), "bin"))
        )
    );
    assert_eq!(
        outcome(&read("latin1").await),
        fs_error(
            "FS_NOT_TEXT",
            &format!(
                "cannot read \"{}\": invalid UTF-8 text",
                p(dir.path(), "latin1")
            )
        )
    );
    assert_eq!(
        outcome(&read("afile/child.txt").await),
        fs_error(
            "FS_NOT_FOUND",
            &format!(
                "cannot resolve \"{}\": a parent path segment is not a directory",
                p(dir.path(), "afile/child.txt")
            )
        )
    );
}

#[tokio::test]
async fn only_read_is_concurrency_safe() {
    let dir = tempfile::tempdir().unwrap();
    let h = guarded(dir.path());
    assert_eq!(
        h.mode("read", json!({"file_path": "a"})),
        ExecutionMode::Parallel
    );
    assert_eq!(
        h.mode("write", json!({"file_path": "a", "content": ""})),
        ExecutionMode::Exclusive
    );
    assert_eq!(
        h.mode(
            "edit",
            json!({"file_path": "a", "old_string": "x", "new_string": "y"})
        ),
        ExecutionMode::Exclusive
    );
}

#[tokio::test]
async fn write_creates_then_updates_after_a_read() {
    let dir = tempfile::tempdir().unwrap();
    let h = guarded(dir.path());
    let path = p(dir.path(), "notes.txt");
    let created = h
        .call(
            "write",
            json!({"file_path": "notes.txt", "content": "hello world"}),
        )
        .await;
    assert_eq!(outcome(&created), ok(&envelope(&path, "Created file")));
    assert_eq!(created.meta, Some(json!({"diffs": []})));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "hello world");

    // The write itself counts as an observation.
    let updated = h
        .call(
            "write",
            json!({"file_path": "notes.txt", "content": "replaced"}),
        )
        .await;
    assert_eq!(outcome(&updated), ok(&envelope(&path, "Updated file")));
    assert_eq!(
        updated.meta,
        Some(
            json!({"diffs": [{"path": "notes.txt", "oldText": "hello world", "newText": "replaced"}]})
        )
    );

    std::fs::write(dir.path().join("data.txt"), "original contents").unwrap();
    let data = p(dir.path(), "data.txt");
    assert_eq!(
        outcome(
            &h.call("write", json!({"file_path": "data.txt", "content": "x"}))
                .await
        ),
        fs_error(
            "FS_NOT_OBSERVED",
            &format!(
                "cannot overwrite existing \"{data}\" without reading it first — read the file, then retry"
            )
        )
    );
    h.call("read", json!({"file_path": "data.txt"})).await;
    let updated = h
        .call(
            "write",
            json!({"file_path": "data.txt", "content": "replaced"}),
        )
        .await;
    assert_eq!(outcome(&updated), ok(&envelope(&data, "Updated file")));
    assert_eq!(
        updated.meta,
        Some(
            json!({"diffs": [{"path": "data.txt", "oldText": "original contents", "newText": "replaced"}]})
        )
    );

    std::fs::write(&data, "changed behind our back").unwrap();
    assert_eq!(
        outcome(
            &h.call("write", json!({"file_path": "data.txt", "content": "y"}))
                .await
        ),
        fs_error(
            "FS_STALE_VERSION",
            &format!(
                "cannot write \"{data}\": file changed since it was read — read it again, then retry"
            )
        )
    );
    h.call("read", json!({"file_path": "data.txt"})).await;
    std::fs::remove_file(&data).unwrap();
    assert_eq!(
        outcome(
            &h.call("write", json!({"file_path": "data.txt", "content": "y"}))
                .await
        ),
        fs_error(
            "FS_STALE_VERSION",
            &format!("cannot write \"{data}\": file no longer exists — read it again, then retry")
        )
    );
    assert_eq!(
        outcome(
            &h.call("write", json!({"file_path": "", "content": "y"}))
                .await
        ),
        plain_error("file_path must be a non-empty string")
    );
    std::fs::create_dir(dir.path().join("adir")).unwrap();
    assert_eq!(
        outcome(
            &h.call("write", json!({"file_path": "adir", "content": "y"}))
                .await
        ),
        fs_error(
            "FS_NOT_REGULAR_FILE",
            &format!(
                "cannot write \"{}\": not a regular file",
                p(dir.path(), "adir")
            )
        )
    );
}

#[tokio::test]
async fn write_is_atomic_keeps_the_mode_and_follows_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::with_root(
        dsh_kernel::Context::new_root(),
        &[(LOCAL, json!(null)), (FS, json!(null))],
    );
    let mut h = h;
    h.start_session(dir.path());
    let script = dir.path().join("run.sh");
    std::fs::write(&script, "echo 1\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o754)).unwrap();
    std::os::unix::fs::symlink(&script, dir.path().join("link.sh")).unwrap();
    // No observation policy: writes are unconditional.
    let got = h
        .call(
            "write",
            json!({"file_path": "link.sh", "content": "echo 2\n"}),
        )
        .await;
    assert_eq!(
        outcome(&got),
        ok(&envelope(&p(dir.path(), "link.sh"), "Updated file"))
    );
    assert_eq!(std::fs::read_to_string(&script).unwrap(), "echo 2\n");
    assert!(
        std::fs::symlink_metadata(dir.path().join("link.sh"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::metadata(&script).unwrap().permissions().mode() & 0o777,
        0o754
    );
    let got = h
        .call(
            "write",
            json!({"file_path": "deep/er/new.txt", "content": ""}),
        )
        .await;
    assert_eq!(
        outcome(&got),
        ok(&envelope(&p(dir.path(), "deep/er/new.txt"), "Created file"))
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".tmpdir"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn edit_requires_a_prior_read_and_a_fresh_version() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("settings.txt"), "color: blue\n").unwrap();
    let h = guarded(dir.path());
    let path = p(dir.path(), "settings.txt");
    let edit = json!({"file_path": "settings.txt", "old_string": "blue", "new_string": "green"});
    assert_eq!(
        outcome(&h.call("edit", edit.clone()).await),
        fs_error(
            "FS_NOT_OBSERVED",
            &format!("edit requires reading \"{path}\" first — read the file, then retry")
        )
    );
    h.call("read", json!({"file_path": "settings.txt"})).await;
    let done = h.call("edit", edit.clone()).await;
    assert_eq!(
        outcome(&done),
        ok(&format!("The file {path} has been updated successfully."))
    );
    assert_eq!(
        done.meta,
        Some(
            json!({"diffs": [{"path": "settings.txt", "oldText": "color: blue", "newText": "color: green"}]})
        )
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "color: green\n");

    // An edit counts as an observation; an outside change makes the next one stale.
    std::fs::write(&path, "color: red\n").unwrap();
    let edit = json!({"file_path": "settings.txt", "old_string": "red", "new_string": "black"});
    assert_eq!(
        outcome(&h.call("edit", edit.clone()).await),
        fs_error(
            "FS_STALE_VERSION",
            &format!(
                "cannot edit \"{path}\": file changed since it was read — read it again, then retry"
            )
        )
    );
    assert_eq!(
        outcome(
            &h.call(
                "edit",
                json!({"file_path": "gone.txt", "old_string": "a", "new_string": "b"})
            )
            .await
        ),
        fs_error(
            "FS_NOT_OBSERVED",
            &format!(
                "edit requires reading \"{}\" first — read the file, then retry",
                p(dir.path(), "gone.txt")
            )
        )
    );
    h.call("read", json!({"file_path": "gone.txt"})).await;
    assert_eq!(
        outcome(
            &h.call(
                "edit",
                json!({"file_path": "gone.txt", "old_string": "a", "new_string": "b"})
            )
            .await
        ),
        fs_error(
            "FS_NOT_FOUND",
            &format!("cannot edit \"{}\": not found", p(dir.path(), "gone.txt"))
        )
    );
}

#[tokio::test]
async fn observations_are_per_session() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
    let mut h = guarded(dir.path());
    h.call("read", json!({"file_path": "a.txt"})).await;
    h.start_session(dir.path());
    let got = h
        .call(
            "edit",
            json!({"file_path": "a.txt", "old_string": "one", "new_string": "two"}),
        )
        .await;
    assert_eq!(
        outcome(&got).2,
        Some(("FsError".into(), "FS_NOT_OBSERVED".into()))
    );
}

#[tokio::test]
async fn edit_matching_rules() {
    let dir = tempfile::tempdir().unwrap();
    let h = guarded(dir.path());
    std::fs::write(dir.path().join("dup.txt"), "a x a x a\n").unwrap();
    let path = p(dir.path(), "dup.txt");
    h.call("read", json!({"file_path": "dup.txt"})).await;
    let call = |old: &str, new: &str, all: Option<bool>| {
        let mut args = json!({"file_path": "dup.txt", "old_string": old, "new_string": new});
        if let Some(all) = all {
            args["replace_all"] = json!(all);
        }
        h.call("edit", args)
    };
    assert_eq!(
        outcome(&call("a", "b", None).await),
        fs_error(
            "FS_AMBIGUOUS_EDIT",
            &format!(
                "old_string occurs 3 times in \"{path}\": include more of the surrounding text so it matches once, or set replace_all to true to change every occurrence"
            )
        )
    );
    assert_eq!(
        outcome(&call("zzz", "b", None).await),
        fs_error(
            "FS_EDIT_NOT_FOUND",
            &format!("old_string was not found in \"{path}\"")
        )
    );
    assert_eq!(
        outcome(&call("", "b", None).await),
        plain_error("old_string is empty: pass the exact text to replace")
    );
    assert_eq!(
        outcome(&call("a", "a", None).await),
        plain_error(
            "old_string and new_string are identical, so the edit would change nothing: put the replacement text in new_string"
        )
    );
    assert_eq!(
        outcome(&call("a", "b", Some(true)).await),
        ok(&format!(
            "The file {path} has been updated. All occurrences were successfully replaced."
        ))
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "b x b x b\n");

    std::fs::write(dir.path().join("crlf.txt"), "one\r\ntwo\r\nthree\r\n").unwrap();
    h.call("read", json!({"file_path": "crlf.txt"})).await;
    let got = h
        .call(
            "edit",
            json!({"file_path": "crlf.txt", "old_string": "one\r\ntwo", "new_string": "1\n2"}),
        )
        .await;
    assert_eq!(
        got.meta,
        Some(
            json!({"diffs": [{"path": "crlf.txt", "oldText": "one\ntwo\nthree", "newText": "1\n2\nthree"}]})
        )
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("crlf.txt")).unwrap(),
        "1\r\n2\r\nthree\r\n"
    );

    let mut bytes = vec![b'x'; 9000];
    bytes.push(0);
    std::fs::write(dir.path().join("late-nul.txt"), &bytes).unwrap();
    h.call("read", json!({"file_path": "late-nul.txt"})).await;
    assert_eq!(
        outcome(&h.call("edit", json!({"file_path": "late-nul.txt", "old_string": "x", "new_string": "y", "replace_all": true})).await),
        fs_error("FS_NOT_TEXT", &format!("cannot edit \"{}\": binary file", p(dir.path(), "late-nul.txt")))
    );
}

#[tokio::test]
async fn unguarded_edit_of_a_missing_file_reads_as_stale() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(&[(LOCAL, json!(null)), (FS, json!(null))]);
    h.start_session(dir.path());
    assert_eq!(
        outcome(
            &h.call(
                "edit",
                json!({"file_path": "x.txt", "old_string": "a", "new_string": "b"})
            )
            .await
        ),
        fs_error(
            "FS_STALE_VERSION",
            &format!(
                "cannot edit \"{}\": file changed since it was read — read it again, then retry",
                p(dir.path(), "x.txt")
            )
        )
    );
}

fn sandboxed(dir: &Path, mode: &str) -> Harness {
    let mut h = Harness::new(&[
        (
            "@deepseek-ai/dsh-fs-sandbox",
            // No temp areas: only the workspace is writable, wherever the checkout lives.
            json!({"cwd": dir, "mode": mode, "tempRoots": []}),
        ),
        (OBSERVE, json!(null)),
        (FS, json!(null)),
    ]);
    h.start_session(dir);
    h
}

const DENIED_WW: &str = "[sandbox: file access denied under workspace-write mode]\n[sandbox: wider access can be requested — repeat this same operation once, with sandbox_permissions set to the smallest mode that is enough and a one-sentence justification; the user is asked to approve]";

#[tokio::test]
async fn workspace_write_fences_mutations_but_not_reads() {
    let base = support::non_tmp_dir();
    let ws = base.path().join("ws");
    let outside = base.path().join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "s\n").unwrap();
    // A dedicated "temp area" stands in for /tmp, so the test holds wherever it runs.
    let tmp = base.path().join("tmp-area");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut h = Harness::new(&[
        (
            "@deepseek-ai/dsh-fs-sandbox",
            json!({"cwd": ws, "mode": "workspace-write", "tempRoots": [tmp]}),
        ),
        (OBSERVE, json!(null)),
        (FS, json!(null)),
    ]);
    h.start_session(&ws);
    let target = outside.join("x.txt").to_string_lossy().into_owned();
    assert_eq!(
        outcome(
            &h.call("write", json!({"file_path": target, "content": "x"}))
                .await
        ),
        fs_error("FS_SANDBOX_DENIED", DENIED_WW)
    );
    assert!(!outside.join("x.txt").exists());
    assert_eq!(
        outcome(
            &h.call(
                "write",
                json!({"file_path": "../outside/y.txt", "content": "x"})
            )
            .await
        ),
        fs_error("FS_SANDBOX_DENIED", DENIED_WW)
    );

    // A symlink inside the workspace that resolves outside counts as outside.
    std::os::unix::fs::symlink(&outside, ws.join("escape")).unwrap();
    assert_eq!(
        outcome(
            &h.call(
                "write",
                json!({"file_path": "escape/z.txt", "content": "x"})
            )
            .await
        ),
        fs_error("FS_SANDBOX_DENIED", DENIED_WW)
    );
    let secret = outside.join("secret.txt").to_string_lossy().into_owned();
    let read = h.call("read", json!({"file_path": secret})).await;
    assert!(!read.is_error, "reads are not fenced: {}", text(&read));
    assert_eq!(
        outcome(
            &h.call(
                "edit",
                json!({"file_path": "escape/secret.txt", "old_string": "s", "new_string": "t"})
            )
            .await
        ),
        fs_error("FS_SANDBOX_DENIED", DENIED_WW)
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "s\n"
    );

    let inside = h
        .call("write", json!({"file_path": "in.txt", "content": "ok"}))
        .await;
    assert_eq!(
        outcome(&inside),
        ok(&envelope(
            &std::fs::canonicalize(&ws)
                .unwrap()
                .join("in.txt")
                .to_string_lossy(),
            "Created file"
        ))
    );
    let in_tmp = tmp.join("t.txt").to_string_lossy().into_owned();
    assert!(
        !h.call("write", json!({"file_path": in_tmp, "content": "ok"}))
            .await
            .is_error,
        "temp areas are writable"
    );
}

#[tokio::test]
async fn other_modes_fence_accordingly() {
    let base = support::non_tmp_dir();
    let ws = base.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let outside = base.path().join("free.txt").to_string_lossy().into_owned();
    let h = sandboxed(&ws, "danger-full-access");
    assert!(
        !h.call("write", json!({"file_path": outside, "content": "x"}))
            .await
            .is_error
    );
    let h = sandboxed(&ws, "read-only");
    assert_eq!(
        outcome(
            &h.call("write", json!({"file_path": "a.txt", "content": "x"}))
                .await
        ),
        fs_error(
            "FS_SANDBOX_DENIED",
            "[sandbox: file access denied under read-only mode]\n[sandbox: wider access can be requested — repeat this same operation once, with sandbox_permissions set to the smallest mode that is enough and a one-sentence justification; the user is asked to approve]"
        )
    );
}

struct FixedAnswer(ApprovalOutcome, std::sync::Mutex<Vec<Option<String>>>);

impl ApprovalService for FixedAnswer {
    fn request(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalOutcome> {
        self.1.lock().unwrap().push(request.reason.clone());
        let answer = self.0;
        Box::pin(async move { answer })
    }
}

#[tokio::test]
async fn escalation_goes_through_approval() {
    let base = support::non_tmp_dir();
    let ws = base.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let outside = base
        .path()
        .join("escalated.md")
        .to_string_lossy()
        .into_owned();
    let args = json!({"file_path": outside, "content": "escalated", "sandbox_permissions": "danger-full-access", "justification": "the user asked"});

    let h = sandboxed(&ws, "workspace-write");
    assert_eq!(
        outcome(&h.call("write", args.clone()).await),
        plain_error(
            "sandbox escalation to \"danger-full-access\" requires approval, but no approval service is composed"
        )
    );

    for (answer, expected) in [
        (
            ApprovalOutcome::Rejected,
            Some("the user rejected escalating this operation to \"danger-full-access\""),
        ),
        (
            ApprovalOutcome::Cancelled,
            Some("approval for escalating to \"danger-full-access\" was cancelled"),
        ),
        (
            ApprovalOutcome::Unavailable,
            Some(
                "sandbox escalation to \"danger-full-access\" requires approval, but no approval channel is available",
            ),
        ),
        (ApprovalOutcome::AllowedOnce, None),
    ] {
        let root = dsh_kernel::Context::new_root();
        let service = Arc::new(FixedAnswer(answer, Default::default()));
        root.provide(Arc::new(Approval(service.clone()))).unwrap();
        let mut h = Harness::with_root(
            root,
            &[
                (
                    "@deepseek-ai/dsh-fs-sandbox",
                    json!({"cwd": ws, "mode": "workspace-write", "tempRoots": []}),
                ),
                (OBSERVE, json!(null)),
                (FS, json!(null)),
            ],
        );
        h.start_session(&ws);
        let got = h.call("write", args.clone()).await;
        match expected {
            Some(message) => assert_eq!(outcome(&got), plain_error(message)),
            None => assert_eq!(outcome(&got), ok(&envelope(&outside, "Created file"))),
        }
        assert_eq!(
            *service.1.lock().unwrap(),
            vec![Some(
                "escalate sandbox to danger-full-access: the user asked".to_string()
            )]
        );
    }
}

#[tokio::test]
async fn schemas_match_the_pinned_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let h = sandboxed(dir.path(), "workspace-write");
    for tool in ["read", "write", "edit"] {
        if let Some(pinned) = pinned_parameters("text-turn", tool) {
            assert_eq!(shape(&h.parameters(tool)), shape(&pinned), "{tool}");
        }
    }
    assert_eq!(
        shape(&h.parameters("write")),
        json!({"type": "object", "properties": {"file_path": {"type": "string"}, "content": {"type": "string"},
            "sandbox_permissions": {"type": "string", "enum": ["workspace-write", "danger-full-access"]}, "justification": {"type": "string"}},
            "required": ["file_path", "content"]})
    );
    let plain = guarded(dir.path());
    let props: Vec<String> = plain.parameters("edit")["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        props,
        ["file_path", "old_string", "new_string", "replace_all"]
    );
    assert_eq!(
        outcome(&plain.call("write", json!({"file_path": "a", "content": "b", "sandbox_permissions": "danger-full-access", "justification": "j"})).await),
        plain_error("sandbox_permissions does not apply here: file tools in this setup are not sandboxed, so there is nothing to widen; call again without sandbox_permissions and justification")
    );
}

#[tokio::test]
async fn guidance_sections_are_published() {
    let h = Harness::new(&[
        (LOCAL, json!(null)),
        (FS, json!(null)),
        (
            "@deepseek-ai/dsh-tool-fs-search",
            json!({"sampleOverCapGlobResults": true}),
        ),
        ("@deepseek-ai/dsh-tool-bash", json!(null)),
    ]);
    let sections: Vec<(&str, u32)> = dsh_tools_builtin::tool_guidance(&h.root)
        .iter()
        .map(|s| (s.name, s.order))
        .collect();
    assert_eq!(
        sections,
        [
            ("tool:read", 100),
            ("tool:write", 101),
            ("tool:edit", 102),
            ("tool:glob", 103),
            ("tool:grep", 104),
            ("tool:bash", 105)
        ]
    );
    h.tree.unload();
    assert!(dsh_tools_builtin::tool_guidance(&h.root).is_empty());
}
