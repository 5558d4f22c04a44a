//! Round trip of one MCP tool call through the client: `mcp__everything__echo` of the
//! published `@modelcontextprotocol/server-everything` over stdio, called through the tool
//! registry exactly as the agent loop calls it (one connected server, calls in sequence).
//! Skips without node or without `npm ci` in `crates/mcp/tests/servers`.
//!
//! `cargo bench -p dsh-mcp --bench echo`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use divan::Bencher;
use dsh_kernel::Context;
use dsh_mcp::{ReconnectPolicy, ServerConfig, StartupFailure, Transport, connect};
use dsh_tools::{ToolExecution, ToolRegistry};
use serde_json::json;

fn main() {
    divan::main();
}

fn everything() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    (node && script.exists()).then_some(script)
}

#[divan::bench(sample_count = 200)]
fn echo_round_trip(bencher: Bencher) {
    let Some(script) = everything() else {
        eprintln!(
            "skipping: server-everything needs node and `npm ci` in crates/mcp/tests/servers"
        );
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let root = Context::new_root();
    let registry = ToolRegistry::new();
    root.provide(registry.clone()).unwrap();
    let owner = root.child("everything");
    let config = ServerConfig {
        server_name: "everything".into(),
        transport: Transport::Stdio {
            command: "node".into(),
            args: vec![script.display().to_string(), "stdio".into()],
            env: Vec::new(),
            cwd: String::new(),
        },
        tool_call_timeout: Duration::from_secs(20),
        startup_failure: StartupFailure::Fail,
        reconnect: ReconnectPolicy {
            enabled: false,
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            max_attempts: 0,
        },
    };
    let handle = runtime
        .block_on(connect(&owner, config, Duration::from_secs(20)))
        .unwrap();
    let registry: Arc<ToolRegistry> = registry;
    bencher.bench_local(|| {
        let result = runtime.block_on(registry.execute(ToolExecution::new(
            "call-1",
            "mcp__everything__echo",
            json!({"message": "hi"}),
            root.clone(),
        )));
        assert!(!result.is_error);
    });
    drop(handle);
    owner.dispose();
}
