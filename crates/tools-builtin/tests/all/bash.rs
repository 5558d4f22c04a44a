//! `bash`: real processes, process groups, markers, caps and spill files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::{
    Harness, alive, eventually, ok, outcome, pinned_parameters, plain_error, read_pid, shape, text,
    typed_error,
};
use tokio_util::sync::CancellationToken;

fn harness(executor: serde_json::Value) -> (Harness, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(&[
        ("@deepseek-ai/dsh-bash-local", executor),
        ("@deepseek-ai/dsh-tool-bash", json!(null)),
    ]);
    h.start_session(dir.path());
    (h, dir)
}

fn cmd(command: &str) -> serde_json::Value {
    json!({"command": command, "description": "Run a test command"})
}

#[tokio::test]
async fn output_markers_follow_upstream() {
    let (h, _dir) = harness(json!({}));
    assert_eq!(
        outcome(&h.call("bash", cmd("echo TERMINAL_OK")).await),
        ok("TERMINAL_OK\n")
    );
    assert_eq!(
        outcome(&h.call("bash", cmd("true")).await),
        ok("(no output)")
    );
    assert_eq!(
        outcome(&h.call("bash", cmd("exit 3")).await),
        ok("(no output)\n[exit code: 3]")
    );
    assert_eq!(
        outcome(&h.call("bash", cmd("echo out; echo err >&2; exit 1")).await),
        ok("out\n[stderr]\nerr\n[exit code: 1]")
    );
    assert_eq!(
        outcome(&h.call("bash", cmd("printf out; printf err >&2")).await),
        ok("out\n[stderr]\nerr")
    );
    assert_eq!(
        outcome(&h.call("bash", cmd("echo oops >&2; false")).await),
        ok("[stderr]\noops\n[exit code: 1]")
    );
    assert_eq!(
        outcome(&h.call("bash", cmd("kill -USR1 $$")).await),
        ok("(no output)\n[killed by signal: SIGUSR1]")
    );
}

#[tokio::test]
async fn workdir_defaults_to_the_session_cwd_and_resolves_relative_paths() {
    let (h, dir) = harness(json!({}));
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let cwd = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(
        text(&h.call("bash", cmd("pwd")).await),
        format!("{}\n", cwd.display())
    );
    let args = json!({"command": "pwd", "description": "d", "workdir": "sub"});
    assert_eq!(
        text(&h.call("bash", args).await),
        format!("{}\n", cwd.join("sub").display())
    );
    let args = json!({"command": "pwd", "description": "d", "workdir": "/"});
    assert_eq!(text(&h.call("bash", args).await), "/\n");
    let args = json!({"command": "pwd", "description": "d", "workdir": "missing"});
    assert_eq!(
        outcome(&h.call("bash", args).await),
        plain_error("spawn bash ENOENT")
    );
}

#[tokio::test]
async fn environment_is_managed() {
    let (h, _dir) = harness(json!({}));
    let session_id = h.session.as_ref().unwrap().id();
    let got = text(&h.call("bash", cmd("echo $NO_COLOR $TERM $PAGER $GIT_PAGER $DSH_SHELL $DSH_SESSION_ID; [ -n \"$DSH_HOME\" ] && echo home")).await);
    assert_eq!(got, format!("1 dumb cat cat 1 {session_id}\nhome\n"));
    // The shell is found on the child's PATH but still sees itself as plain `bash`.
    assert_eq!(text(&h.call("bash", cmd("echo $0")).await), "bash\n");
}

#[tokio::test]
async fn argument_errors_read_like_upstream() {
    let (h, _dir) = harness(json!({}));
    let call = |args| h.call("bash", args);
    assert_eq!(
        outcome(&call(json!({"command": "  ", "description": "d"})).await),
        plain_error("command is empty: pass the shell command to run")
    );
    assert_eq!(
        outcome(&call(json!({"command": "ls", "description": ""})).await),
        plain_error("description is empty: say in a few words what the command does")
    );
    assert_eq!(
        outcome(&call(json!({"command": "ls", "description": "d", "timeoutMs": 0})).await),
        plain_error("invalid timeoutMs: expected a positive number, got 0")
    );
    assert_eq!(
        outcome(&call(json!({"command": "ls", "description": "d", "timeoutMs": -2.5})).await),
        plain_error("invalid timeoutMs: expected a positive number, got -2.5")
    );
    assert_eq!(
        outcome(&call(json!({"command": "ls"})).await),
        typed_error(
            "ToolArgsError",
            "INVALID_ARGS",
            "invalid arguments: missing required property \"description\""
        )
    );
    assert_eq!(
        outcome(
            &call(json!({"command": "ls", "description": "d", "run_in_background": true})).await
        ),
        plain_error(
            "run_in_background needs the job plugins, which are not loaded: add @deepseek-ai/dsh-jobs and @deepseek-ai/dsh-tool-jobs to the composition, or run the command in the foreground"
        )
    );
    assert_eq!(
        outcome(&call(json!({"command": "ls", "description": "d", "sandbox_permissions": "danger-full-access", "justification": "x"})).await),
        plain_error("sandbox_permissions does not apply here: commands in this setup do not run in a sandbox, so there is nothing to widen; call again without sandbox_permissions and justification")
    );
    assert_eq!(
        outcome(&call(json!({"command": "ls", "description": "d", "sandbox_permissions": "danger-full-access"})).await),
        plain_error("sandbox_permissions was given without a justification: add one sentence saying why the call needs wider access")
    );
    assert_eq!(
        outcome(&call(json!({"command": "ls", "description": "d", "justification": "x"})).await),
        plain_error(
            "justification was given without sandbox_permissions: set both to ask for wider access, or leave both out"
        )
    );
}

#[tokio::test]
async fn background_can_be_disabled() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(&[(
        "@deepseek-ai/dsh-tool-bash",
        json!({"enableRunInBackground": false}),
    )]);
    h.start_session(dir.path());
    assert!(
        h.parameters("bash")["properties"]
            .get("run_in_background")
            .is_none()
    );
    assert!(
        h.registry
            .get(&h.root, "bash")
            .unwrap()
            .schema()
            .description
            .contains("cannot run in the background")
    );
    let args = json!({"command": "ls", "description": "d", "run_in_background": true});
    assert_eq!(
        outcome(&h.call("bash", args).await),
        plain_error(
            "run_in_background is switched off in this setup (enableRunInBackground: false); run the command in the foreground instead"
        )
    );
}

#[tokio::test]
async fn schemas_match_the_pinned_shapes() {
    let (h, _dir) = harness(json!({}));
    let five = shape(&h.parameters("bash"));
    assert_eq!(
        five,
        json!({"type": "object", "properties": {
            "command": {"type": "string"}, "description": {"type": "string"}, "timeoutMs": {"type": "number"},
            "workdir": {"type": "string"}, "run_in_background": {"type": "boolean"}}, "required": ["description", "command"]})
    );
    // 0.2.1 lists `description` first; 0.1.1's recordings pin the same schema in the other
    // order.
    let keys = |v: &Value| -> Vec<String> {
        v["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    };
    assert_eq!(keys(&five)[..2], ["description", "command"]);
    if let Some(pinned) = pinned_parameters("fs-glob-sampling", "bash") {
        assert_eq!(unordered(&five), unordered(&shape(&pinned)));
    }
    let sandboxed = Harness::new(&[
        ("@deepseek-ai/dsh-sandbox-local", json!(null)),
        (
            "@deepseek-ai/dsh-bash-sandbox",
            json!({"timeoutMs": 60000, "sandboxed": true}),
        ),
        ("@deepseek-ai/dsh-tool-bash", json!(null)),
    ]);
    let seven = shape(&sandboxed.parameters("bash"));
    assert_eq!(
        seven["properties"]["sandbox_permissions"],
        json!({"type": "string", "enum": ["workspace-write", "danger-full-access"]})
    );
    if let Some(pinned) = pinned_parameters("text-turn", "bash") {
        assert_eq!(unordered(&seven), unordered(&shape(&pinned)));
    }
}

/// `schema` with its `required` lists sorted (object maps already compare without order).
fn unordered(schema: &Value) -> Value {
    match schema {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let mut v = unordered(v);
                    if k == "required"
                        && let Value::Array(items) = &mut v
                    {
                        items.sort_by_key(|i| i.to_string());
                    }
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(unordered).collect()),
        other => other.clone(),
    }
}

#[tokio::test]
async fn escalation_asks_for_approval_when_sandboxed() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(&[
        // The fenced fs backend provides the shared sandbox policy bash escalates against.
        (
            "@deepseek-ai/dsh-fs-sandbox",
            json!({"mode": "workspace-write", "tempRoots": []}),
        ),
        ("@deepseek-ai/dsh-tool-bash", json!({"sandboxed": true})),
    ]);
    h.start_session(dir.path());
    let args = json!({"command": "echo hi", "description": "d", "sandbox_permissions": "danger-full-access", "justification": "needed"});
    assert_eq!(
        outcome(&h.call("bash", args).await),
        plain_error(
            "sandbox escalation to \"danger-full-access\" requires approval, but no approval service is composed"
        )
    );
    let args = json!({"command": "echo hi", "description": "d", "sandbox_permissions": "workspace-write", "justification": "needed"});
    assert_eq!(
        outcome(&h.call("bash", args).await),
        plain_error(
            "sandbox escalation to \"workspace-write\" is not strictly wider than this call's current \"workspace-write\" mode"
        )
    );
}

#[tokio::test]
async fn timeout_terminates_the_whole_process_group() {
    let (h, dir) = harness(json!({}));
    let pid_file = dir.path().join("grandchild.pid");
    let command = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
    let args = json!({"command": command, "description": "d", "timeoutMs": 300});
    let result = h.call("bash", args).await;
    assert_eq!(
        outcome(&result),
        ok("(no output)\n[timed out after 300ms]\n[killed by signal: SIGTERM]")
    );
    let grandchild = read_pid(&pid_file).await;
    assert!(
        eventually(Duration::from_secs(5), || !alive(grandchild)).await,
        "grandchild {grandchild} survived the timeout"
    );
}

#[tokio::test]
async fn a_term_trapping_group_is_killed_after_the_grace_period() {
    let (h, _dir) = harness(json!({"graceMs": 200}));
    let args = json!({"command": "trap '' TERM; sleep 30", "description": "d", "timeoutMs": 200});
    let started = std::time::Instant::now();
    let result = h.call("bash", args).await;
    assert_eq!(
        outcome(&result),
        ok("(no output)\n[timed out after 200ms]\n[killed by signal: SIGKILL]")
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn timeout_is_capped_by_the_configured_maximum() {
    let (h, _dir) = harness(json!({"timeoutMs": 50000, "maxTimeoutMs": 150}));
    let args = json!({"command": "sleep 10", "description": "d", "timeoutMs": 100000});
    assert_eq!(
        outcome(&h.call("bash", args).await),
        ok("(no output)\n[timed out after 150ms]\n[killed by signal: SIGTERM]")
    );
    assert_eq!(
        outcome(&h.call("bash", cmd("sleep 10")).await),
        ok("(no output)\n[timed out after 150ms]\n[killed by signal: SIGTERM]")
    );
}

#[tokio::test]
async fn cancellation_mid_run_kills_the_group() {
    let (h, dir) = harness(json!({}));
    let pid_file = dir.path().join("grandchild.pid");
    let command = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
    let cancel = CancellationToken::new();
    let call = h.call_with_cancel(
        "bash",
        json!({"command": command, "description": "d"}),
        cancel.clone(),
    );
    let canceller = async {
        let pid = read_pid(&pid_file).await;
        cancel.cancel();
        pid
    };
    let (result, grandchild) = tokio::join!(call, canceller);
    assert_eq!(
        outcome(&result),
        typed_error("AbortError", "ABORTED", "tool call aborted")
    );
    assert!(
        eventually(Duration::from_secs(5), || !alive(grandchild)).await,
        "grandchild {grandchild} survived cancellation"
    );
}

#[tokio::test]
async fn dropping_a_running_call_kills_the_group() {
    let (h, dir) = harness(json!({}));
    let pid_file = dir.path().join("grandchild.pid");
    let command = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
    let grandchild = {
        let call = h.call("bash", json!({"command": command, "description": "d"}));
        tokio::pin!(call);
        tokio::select! {
            result = &mut call => panic!("the call settled early: {result:?}"),
            pid = read_pid(&pid_file) => pid,
        }
        // `call` is dropped here, mid-run.
    };
    assert!(
        eventually(Duration::from_secs(5), || !alive(grandchild)).await,
        "grandchild {grandchild} survived the dropped call"
    );
}

#[tokio::test]
async fn output_over_the_cap_keeps_the_tail_and_spills_the_whole_stream() {
    let (h, _dir) = harness(json!({"maxOutputBytes": 10}));
    let got = text(&h.call("bash", cmd("seq 1 20")).await);
    let (tail, notice) = got
        .split_once("\n[output truncated; full output: ")
        .expect("truncation notice");
    assert_eq!(tail, "\n18\n19\n20\n");
    let path = notice.strip_suffix(']').unwrap();
    assert!(
        path.contains("dsh-subprocess-") && path.ends_with("-stdout.log"),
        "{path}"
    );
    let spilled = std::fs::read_to_string(path).unwrap();
    assert_eq!(
        spilled,
        (1..=20).map(|i| format!("{i}\n")).collect::<String>()
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let got = text(&h.call("bash", cmd("echo ok; seq 1 20 >&2")).await);
    assert!(
        got.starts_with("ok\n[stderr]\n\n18\n19\n20\n\n[output truncated; full output: "),
        "{got}"
    );
    assert!(got.ends_with("-stderr.log]"), "{got}");
}

#[tokio::test]
async fn default_cap_is_64000_bytes_per_stream() {
    let (h, _dir) = harness(json!({}));
    let got = text(
        &h.call("bash", cmd("head -c 64000 /dev/zero | tr '\\0' a"))
            .await,
    );
    assert_eq!(got.len(), 64000);
    let got = text(
        &h.call("bash", cmd("head -c 64001 /dev/zero | tr '\\0' a"))
            .await,
    );
    assert!(
        got.starts_with(&"a".repeat(64000))
            && got[64000..].starts_with("\n[output truncated; full output: /"),
        "{}",
        &got[63990..]
    );
}

#[tokio::test]
async fn a_background_descendant_holding_the_pipes_does_not_hold_the_result() {
    let (h, _dir) = harness(json!({"graceMs": 300}));
    let started = std::time::Instant::now();
    assert_eq!(
        outcome(&h.call("bash", cmd("sleep 5 & echo started")).await),
        ok("started\n")
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn calls_are_exclusive() {
    let (h, _dir) = harness(json!({}));
    assert_eq!(
        h.mode("bash", cmd("ls")),
        dsh_tools::ExecutionMode::Exclusive
    );
}

#[tokio::test]
async fn shell_env_supplies_dsh_home_and_the_session_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(&[
        (
            "@deepseek-ai/dsh-shell-env",
            json!({"dshHome": "/opt/dsh-home"}),
        ),
        ("@deepseek-ai/dsh-tool-bash", json!(null)),
    ]);
    let session = h.start_session(dir.path());
    let env = h.root.get::<dsh_tools_builtin::ShellEnv>().unwrap();
    env.set_session_jsonl_locator(std::sync::Arc::new(|s: &dsh_session::LiveSession| {
        Some(std::path::PathBuf::from(format!(
            "/sessions/{}.jsonl",
            s.id()
        )))
    }));
    let got = text(
        &h.call("bash", cmd("echo $DSH_HOME $DSH_SESSION_JSONL"))
            .await,
    );
    assert_eq!(
        got,
        format!("/opt/dsh-home /sessions/{}.jsonl\n", session.id())
    );
}

#[tokio::test]
async fn output_is_announced_live_per_stream_while_the_command_runs() {
    use dsh_tools::{OutputStream, ToolOutputEvent};
    let (h, _dir) = harness(json!({}));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, String, String)>::new()));
    let sink = seen.clone();
    h.root
        .on_emit::<ToolOutputEvent>(dsh_kernel::ListenOptions::GLOBAL, move |p| {
            let stream = match p.stream {
                OutputStream::Stdout => "stdout",
                OutputStream::Stderr => "stderr",
            };
            sink.lock()
                .unwrap()
                .push((p.call_id.clone(), stream.into(), p.text.clone()));
            Ok(())
        })
        .unwrap();
    let result = h
        .call(
            "bash",
            cmd("printf 'caf\\303'; sleep 0.05; printf '\\251\\n'; echo oops >&2"),
        )
        .await;
    assert_eq!(text(&result), "café\n[stderr]\noops\n");
    let seen = seen.lock().unwrap().clone();
    let joined = |s: &str| -> String {
        seen.iter()
            .filter(|(_, stream, _)| stream == s)
            .map(|(_, _, t)| t.as_str())
            .collect()
    };
    assert_eq!(
        joined("stdout"),
        "café\n",
        "a split character arrives whole"
    );
    assert_eq!(joined("stderr"), "oops\n");
    assert!(seen.iter().all(|(id, _, _)| id == "call_0"), "{seen:?}");
}
