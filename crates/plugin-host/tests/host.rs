//! The plugin host against a real plugin process (`tests/test_plugin.py`, python3; every
//! test skips without it): a tool call round trip, a stage veto and rewrite, and
//! containment of a crash, a hang and garbage (the stage acts as `next`, the process is
//! restarted), and unloading the row killing the process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_kernel::{BoxError, BoxFuture, Context, Plugin, PluginConfig};
use dsh_llm::{ContentBlock, ToolSchema};
use dsh_plugin_host::PluginHostPlugin;
use dsh_tools::{Tool, ToolExecution, ToolOutput, ToolRegistry, ToolResult, ToolRunContext};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn python() -> bool {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        dsh_test_support::prereq::skip("python3 is needed for the test plugin");
    }
    ok
}

/// A native tool the stages see; it answers `native: <text>`.
struct Native(ToolSchema);

impl Tool for Native {
    fn schema(&self) -> &ToolSchema {
        &self.0
    }
    fn execute(
        &self,
        args: Value,
        _: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        Box::pin(async move {
            Ok(ToolOutput::text(format!(
                "native: {}",
                args["text"].as_str().unwrap_or("")
            )))
        })
    }
}

struct Fixture {
    root: Context,
    row: Context,
    registry: Arc<ToolRegistry>,
    pid_file: tempfile::NamedTempFile,
    events_file: tempfile::NamedTempFile,
}

fn load(timeout_ms: u64) -> Fixture {
    load_with(timeout_ms, 5)
}

fn load_with(timeout_ms: u64, max_restarts: u32) -> Fixture {
    let root = Context::new_root();
    let registry = ToolRegistry::new();
    root.provide(registry.clone()).unwrap();
    registry
        .register(
            &root,
            Arc::new(Native(ToolSchema {
                name: "native".into(),
                description: "native".into(),
                parameters: Arc::new(json!({"type": "object"})),
            })),
        )
        .unwrap();
    let pid_file = tempfile::NamedTempFile::new().unwrap();
    let events_file = tempfile::NamedTempFile::new().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/test_plugin.py");
    let config = json!({
        "command": "python3",
        "args": [script.display().to_string()],
        "env": {
            "PID_FILE": pid_file.path().display().to_string(),
            "EVENTS_FILE": events_file.path().display().to_string(),
        },
        "timeoutMs": timeout_ms,
        "restart": {"maxRestarts": max_restarts, "backoffMs": 10},
    });
    let row = root.child("plug");
    PluginHostPlugin
        .apply(&row, &PluginConfig::new("plug", "test.yml", config))
        .unwrap();
    Fixture {
        root,
        row,
        registry,
        pid_file,
        events_file,
    }
}

impl Fixture {
    async fn call(&self, name: &str, args: Value) -> ToolResult {
        let exec = ToolExecution::new("c1", name, args, self.root.clone());
        tokio::time::timeout(Duration::from_secs(30), self.registry.execute(exec))
            .await
            .expect("the call settles")
    }

    fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.pid_file.path())
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    }

    /// Waits until the plugin has been started `n` times and answers again.
    async fn started(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.pids().len() >= n
                && !self
                    .call("plug_echo", json!({"text": "ping"}))
                    .await
                    .is_error
            {
                return;
            }
            assert!(Instant::now() < deadline, "plugin restarted {n} times");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn text(r: &ToolResult) -> String {
    r.content
        .iter()
        .map(|b| match b {
            ContentBlock::Text { text } => text.clone(),
            other => format!("{other:?}"),
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    !status.is_empty() && !status.contains("State:\tZ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_tool_round_trips_and_a_stage_vetoes_and_rewrites() {
    if !python() {
        return;
    }
    let f = load(5000);
    let r = f.call("plug_echo", json!({"text": "hi"})).await;
    assert_eq!((r.is_error, text(&r)), (false, "echo: hi".to_string()));
    let r = f
        .call("plug_echo", json!({"text": "no", "fail": true}))
        .await;
    assert_eq!(
        (r.is_error, text(&r)),
        (true, "Error: echo: no".to_string())
    );
    // tools/pre-execute short-circuit: the body never runs.
    let r = f
        .call("native", json!({"text": "x", "plugin": "veto"}))
        .await;
    assert_eq!(
        (r.is_error, text(&r)),
        (true, "Error: vetoed by plugin".to_string())
    );
    // tools/post-execute replace: the result is rewritten.
    let r = f
        .call("native", json!({"text": "x", "plugin": "replace"}))
        .await;
    assert_eq!(
        (r.is_error, text(&r)),
        (false, "rewritten: native: x".to_string())
    );
    // An unknown action is contained: the stage passes through.
    let r = f
        .call("native", json!({"text": "x", "plugin": "bogus"}))
        .await;
    assert_eq!((r.is_error, text(&r)), (false, "native: x".to_string()));
    assert_eq!(f.pids().len(), 1, "no restart needed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_is_contained_and_the_process_restarted() {
    if !python() {
        return;
    }
    let f = load(5000);
    let r = f
        .call("native", json!({"text": "x", "plugin": "crash"}))
        .await;
    assert_eq!(
        (r.is_error, text(&r)),
        (false, "native: x".to_string()),
        "stage acts as next"
    );
    f.started(2).await;
    let pids = f.pids();
    assert_ne!(pids[0], pids[1]);
    assert!(!alive(pids[0]));
    // A tool call whose plugin crashes fails with a clear error.
    let r = f.call("plug_echo", json!({"plugin": "crash"})).await;
    assert!(r.is_error);
    assert!(
        text(&r).contains("plugin tool \"plug_echo\" failed: plugin process exited"),
        "{}",
        text(&r)
    );
    f.started(3).await;
    let r = f.call("plug_echo", json!({"text": "back"})).await;
    assert_eq!(text(&r), "echo: back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hang_times_out_and_garbage_is_contained() {
    if !python() {
        return;
    }
    let f = load(300);
    let started = Instant::now();
    let r = f
        .call("native", json!({"text": "x", "plugin": "hang"}))
        .await;
    assert_eq!(
        text(&r),
        "native: x",
        "stage acts as next after the timeout"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    f.started(2).await;
    assert!(!alive(f.pids()[0]), "the hung process was killed");
    let r = f.call("plug_echo", json!({"plugin": "hang"})).await;
    assert!(text(&r).contains("timed out after 300 ms"), "{}", text(&r));
    f.started(3).await;
    let r = f
        .call("native", json!({"text": "y", "plugin": "garbage"}))
        .await;
    assert_eq!(text(&r), "native: y");
    f.started(4).await;
    let r = f.call("plug_echo", json!({"text": "ok"})).await;
    assert_eq!(text(&r), "echo: ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unloading_the_row_kills_the_process_and_unregisters_everything() {
    if !python() {
        return;
    }
    let f = load(5000);
    let pid = f.pids()[0];
    assert!(alive(pid));
    f.row.dispose();
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "the plugin process dies on unload"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(f.row.fiber().live_effects(), 0);
    let r = f.call("plug_echo", json!({"text": "hi"})).await;
    assert!(text(&r).contains("unknown tool"), "{}", text(&r));
    let r = f
        .call("native", json!({"text": "x", "plugin": "veto"}))
        .await;
    assert_eq!(text(&r), "native: x", "the stage is gone");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(f.pids().len(), 1, "no restart after unload");
}

#[test]
fn bad_config_and_a_failing_start_are_clear_errors() {
    let root = Context::new_root();
    root.provide(ToolRegistry::new()).unwrap();
    let err = PluginHostPlugin
        .apply(
            &root.child("p"),
            &PluginConfig::new("p", "t.yml", json!({"args": []})),
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("command"), "{err}");
    let err = PluginHostPlugin
        .apply(
            &root.child("p"),
            &PluginConfig::new("p", "t.yml", json!({"command": "/nonexistent/plugin"})),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("plugin-host(p): cannot start `/nonexistent/plugin`"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_notified_and_restarts_stop_at_the_budget() {
    if !python() {
        return;
    }
    let f = load_with(5000, 1);
    let r = f.call("native", json!({"text": "x"})).await;
    assert_eq!(text(&r), "native: x");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = std::fs::read_to_string(f.events_file.path()).unwrap();
        if events == "tools/result native\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "tools/result notified: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // First crash: restarted once (the budget).
    f.call("native", json!({"plugin": "crash"})).await;
    f.started(2).await;
    // Second crash: no restart; stages pass through and tools fail clearly.
    let r = f
        .call("native", json!({"text": "y", "plugin": "crash"}))
        .await;
    assert_eq!(text(&r), "native: y");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(f.pids().len(), 2);
    let r = f.call("plug_echo", json!({"text": "z"})).await;
    assert!(r.is_error);
    assert!(text(&r).contains("not running"), "{}", text(&r));
}
