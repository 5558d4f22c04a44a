//! The MCP client against real servers: a stub stdio server written for these tests
//! (`stub_server.py`, python3) and the published `@modelcontextprotocol/server-everything`
//! (installed in `tests/servers` by `npm ci`). Each test skips with a message when its
//! server cannot run here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::Context;
use dsh_llm::ContentBlock;
use dsh_mcp::{
    ConnectError, ReconnectPolicy, ServerConfig, ServerHandle, ServerState, StartupFailure,
    Transport, connect, public_tool_name,
};
use dsh_tools::{ToolExecution, ToolRegistry, ToolResult};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn python() -> Option<&'static str> {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        dsh_test_support::prereq::skip("python3 is needed for the stub MCP server");
    }
    ok.then_some("python3")
}

fn stub_path() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/stub_server.py")
        .display()
        .to_string()
}

fn stub(name: &str, env: &[(&str, &str)]) -> ServerConfig {
    ServerConfig {
        server_name: name.into(),
        transport: Transport::Stdio {
            command: "python3".into(),
            args: vec![stub_path()],
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cwd: String::new(),
        },
        tool_call_timeout: Duration::from_secs(20),
        startup_failure: StartupFailure::Contain,
        reconnect: ReconnectPolicy {
            enabled: true,
            initial_delay: Duration::from_millis(20),
            max_delay: Duration::from_millis(200),
            max_attempts: 3,
        },
    }
}

fn root() -> (Context, Arc<ToolRegistry>) {
    let root = Context::new_root();
    let registry = ToolRegistry::new();
    root.provide(registry.clone()).unwrap();
    (root, registry)
}

const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

fn names(registry: &ToolRegistry, ctx: &Context) -> Vec<String> {
    registry.schemas(ctx).into_iter().map(|s| s.name).collect()
}

async fn call(registry: &ToolRegistry, ctx: &Context, name: &str, args: Value) -> ToolResult {
    registry
        .execute(ToolExecution::new("call-1", name, args, ctx.clone()))
        .await
}

fn text(r: &ToolResult) -> String {
    r.content
        .iter()
        .map(|b| match b {
            ContentBlock::Text { text } => text.clone(),
            other => format!("{other:?}"),
        })
        .collect::<Vec<_>>()
        .join("|")
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

fn connected_with(n: u64) -> impl Fn(&ServerState) -> bool {
    move |s| matches!(s, ServerState::Connected { connects, .. } if *connects >= n)
}

fn alive(pid: u32) -> bool {
    // Signal 0 probes; a zombie counts as gone for our purpose (it was reaped or will be).
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    !status.is_empty() && !status.contains("State:\tZ")
}

#[tokio::test]
async fn stub_tools_are_named_listed_across_pages_and_called() {
    if python().is_none() {
        return;
    }
    let (root, registry) = root();
    let owner = root.child("mcp-stub");
    let handle = connect(&owner, stub("stub", &[]), REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(handle.startup_error(), None);
    let pid_name = public_tool_name("stub", "get.pid");
    assert!(pid_name.starts_with("mcp__stub__get_pid_"), "{pid_name}");
    let mut expected = vec![
        "mcp__stub__add_tool".to_string(),
        "mcp__stub__crash".into(),
        "mcp__stub__echo".into(),
        "mcp__stub__fail".into(),
        "mcp__stub__hang".into(),
        "mcp__stub__mixed".into(),
        pid_name.clone(),
    ];
    expected.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
    assert_eq!(names(&registry, &root), expected);
    let schema = registry
        .get(&root, "mcp__stub__echo")
        .unwrap()
        .schema()
        .clone();
    assert_eq!(schema.description, "Echoes its message.");
    assert_eq!(
        *schema.parameters,
        json!({"type": "object", "properties": {"message": {"type": "string"}}})
    );

    let r = call(
        &registry,
        &root,
        "mcp__stub__echo",
        json!({"message": "hi"}),
    )
    .await;
    assert_eq!((r.is_error, text(&r)), (false, "Echo: hi".to_string()));
    // The raw name goes on the wire: the normalized public name still reaches `get.pid`.
    let r = call(&registry, &root, &pid_name, json!({})).await;
    assert_eq!(text(&r), handle.process_id().unwrap().to_string());
    let r = call(&registry, &root, "mcp__stub__fail", json!({})).await;
    assert_eq!(
        (r.is_error, text(&r)),
        (true, "Error: it went wrong".to_string())
    );
    let r = call(&registry, &root, "mcp__stub__mixed", json!("not an object")).await;
    assert_eq!(
        text(&r),
        "one\nResource link: doc (file:///doc)|[image not shown: image/png; this setup stores no images for tool results]|two"
    );
    owner.dispose();
}

#[tokio::test]
async fn a_changed_tool_list_is_followed() {
    if python().is_none() {
        return;
    }
    let (root, registry) = root();
    let owner = root.child("mcp-stub");
    let handle = connect(&owner, stub("stub", &[]), REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert!(!names(&registry, &root).contains(&"mcp__stub__extra".to_string()));
    let r = call(&registry, &root, "mcp__stub__add_tool", json!({})).await;
    assert_eq!(text(&r), "added");
    within(
        "the re-sync",
        handle.wait_for(|s| {
            matches!(s, ServerState::Connected { tools, .. } if tools.iter().any(|t| t == "mcp__stub__extra"))
        }),
    )
    .await;
    let r = call(&registry, &root, "mcp__stub__extra", json!({})).await;
    assert_eq!(text(&r), "extra works");
    owner.dispose();
}

#[tokio::test]
async fn a_hanging_call_times_out_tells_the_server_and_the_server_stays_usable() {
    if python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cancels = dir.path().join("cancels");
    let (root, registry) = root();
    let owner = root.child("mcp-stub");
    let mut config = stub("stub", &[("STUB_CANCELS", cancels.to_str().unwrap())]);
    config.tool_call_timeout = Duration::from_millis(300);
    connect(&owner, config, REQUEST_TIMEOUT).await.unwrap();
    let r = call(&registry, &root, "mcp__stub__hang", json!({})).await;
    assert_eq!(
        (r.is_error, text(&r)),
        (
            true,
            "Error: MCP error -32001: Request timed out".to_string()
        )
    );
    let r = call(
        &registry,
        &root,
        "mcp__stub__echo",
        json!({"message": "still here"}),
    )
    .await;
    assert_eq!(text(&r), "Echo: still here");
    // The server was told (its log line is written before it reads the next request).
    let logged = std::fs::read_to_string(&cancels).unwrap_or_default();
    assert_eq!(logged.lines().count(), 1, "{logged:?}");
    owner.dispose();
}

#[tokio::test]
async fn a_server_that_dies_mid_call_fails_that_call_and_reconnects() {
    if python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let starts = dir.path().join("starts");
    let (root, registry) = root();
    let owner = root.child("mcp-stub");
    let handle = connect(
        &owner,
        stub("stub", &[("STUB_STARTS", starts.to_str().unwrap())]),
        REQUEST_TIMEOUT,
    )
    .await
    .unwrap();
    let first = handle.process_id().unwrap();
    let r = call(&registry, &root, "mcp__stub__crash", json!({})).await;
    assert_eq!(
        (r.is_error, text(&r)),
        (
            true,
            "Error: MCP error -32000: Connection closed".to_string()
        )
    );
    within("the reconnect", handle.wait_for(connected_with(2))).await;
    let second = handle.process_id().unwrap();
    assert_ne!(first, second);
    let r = call(
        &registry,
        &root,
        "mcp__stub__echo",
        json!({"message": "back"}),
    )
    .await;
    assert_eq!(text(&r), "Echo: back");
    assert_eq!(std::fs::read_to_string(&starts).unwrap().lines().count(), 2);
    // A server killed from outside comes back the same way.
    std::process::Command::new("kill")
        .args(["-9", &second.to_string()])
        .status()
        .unwrap();
    within("the second reconnect", handle.wait_for(connected_with(3))).await;
    let r = call(
        &registry,
        &root,
        "mcp__stub__echo",
        json!({"message": "again"}),
    )
    .await;
    assert_eq!(text(&r), "Echo: again");
    owner.dispose();
}

#[tokio::test]
async fn a_server_that_cannot_start_is_contained_or_fails_its_owner_and_retries_are_bounded() {
    if python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let starts = dir.path().join("starts");
    let (root, registry) = root();
    let owner = root.child("mcp-stub");
    let handle = connect(
        &owner,
        stub(
            "stub",
            &[
                ("STUB_MODE", "exit"),
                ("STUB_STARTS", starts.to_str().unwrap()),
            ],
        ),
        REQUEST_TIMEOUT,
    )
    .await
    .unwrap();
    assert!(
        handle
            .startup_error()
            .is_some_and(|e| e.contains("initialize failed")),
        "{:?}",
        handle.startup_error()
    );
    assert!(names(&registry, &root).is_empty());
    let stopped = within(
        "giving up",
        handle.wait_for(|s| matches!(s, ServerState::Stopped { .. })),
    )
    .await;
    assert_eq!(
        stopped,
        ServerState::Stopped {
            reason: "giving up after 3 consecutive failed reconnect attempts — tools unregistered; reload the row or restart dsh to reconnect".into()
        }
    );
    // The first attempt and three retries.
    assert_eq!(std::fs::read_to_string(&starts).unwrap().lines().count(), 4);
    owner.dispose();

    let strict = root.child("mcp-strict");
    let mut config = stub("strict", &[("STUB_MODE", "exit")]);
    config.startup_failure = StartupFailure::Fail;
    let err = connect(&strict, config, REQUEST_TIMEOUT)
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, ConnectError::Startup { label, .. } if label == "mcp-client(strict)"),
        "{err}"
    );
    // A command that does not exist is a clear startup error too.
    let owner = root.child("mcp-missing");
    let mut config = stub("missing", &[]);
    config.transport = Transport::Stdio {
        command: "/nonexistent/mcp-server".into(),
        args: vec![],
        env: vec![],
        cwd: String::new(),
    };
    config.reconnect.enabled = false;
    let handle = connect(&owner, config, REQUEST_TIMEOUT).await.unwrap();
    assert!(
        handle
            .startup_error()
            .is_some_and(|e| e.starts_with("cannot start \"/nonexistent/mcp-server\"")),
        "{:?}",
        handle.startup_error()
    );
    owner.dispose();
}

#[tokio::test]
async fn invalid_tool_lists_register_nothing_and_garbage_lines_are_skipped() {
    if python().is_none() {
        return;
    }
    let (root, registry) = root();
    for (mode, needle) in [
        (
            "bad-list",
            "invalid tool list: tools[4] \"broken\": inputSchema is not an object schema",
        ),
        (
            "dup-list",
            "server listed tool \"echo\" more than once — invalid tool list",
        ),
    ] {
        let owner = root.child(mode);
        let mut config = stub("stub", &[("STUB_MODE", mode)]);
        config.reconnect.enabled = false;
        let handle = connect(&owner, config, REQUEST_TIMEOUT).await.unwrap();
        let err = handle.startup_error().unwrap_or_default();
        assert!(err.contains(needle), "{mode}: {err}");
        assert!(names(&registry, &root).is_empty(), "{mode}");
        owner.dispose();
    }
    let owner = root.child("garbage");
    connect(
        &owner,
        stub("stub", &[("STUB_MODE", "garbage")]),
        REQUEST_TIMEOUT,
    )
    .await
    .unwrap();
    let r = call(
        &registry,
        &root,
        "mcp__stub__echo",
        json!({"message": "ok"}),
    )
    .await;
    assert_eq!(text(&r), "Echo: ok");
    owner.dispose();
}

#[tokio::test]
async fn unloading_the_owner_kills_the_server_and_unregisters_its_tools() {
    if python().is_none() {
        return;
    }
    let (root, registry) = root();
    let owner = root.child("mcp-stub");
    let handle: ServerHandle = connect(&owner, stub("stub", &[]), REQUEST_TIMEOUT)
        .await
        .unwrap();
    let pid = handle.process_id().unwrap();
    assert!(alive(pid));
    owner.dispose();
    assert!(names(&registry, &root).is_empty());
    within("the server's exit", async {
        while alive(pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // The name is free again.
    let again = root.child("mcp-stub-2");
    connect(&again, stub("stub", &[]), REQUEST_TIMEOUT)
        .await
        .unwrap();
    again.dispose();
}

#[tokio::test]
async fn server_names_are_unique_per_scope() {
    if python().is_none() {
        return;
    }
    let (root, registry) = root();
    let row = root.child("row");
    connect(&row, stub("shared", &[]), REQUEST_TIMEOUT)
        .await
        .unwrap();
    let dup = root.child("dup");
    let err = connect(&dup, stub("shared", &[]), REQUEST_TIMEOUT)
        .await
        .err()
        .unwrap();
    assert_eq!(err, ConnectError::DuplicateName("shared".into()));
    // A session may not shadow a row's server, but two sessions may each have "own".
    let a = root.create_scope("agent-a");
    let b = root.create_scope("agent-b");
    assert!(
        connect(&a, stub("shared", &[]), REQUEST_TIMEOUT)
            .await
            .is_err()
    );
    connect(&a, stub("own", &[]), REQUEST_TIMEOUT)
        .await
        .unwrap();
    connect(&b, stub("own", &[]), REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert!(names(&registry, &a).contains(&"mcp__own__echo".to_string()));
    assert!(!names(&registry, &root).contains(&"mcp__own__echo".to_string()));
    let r = call(&registry, &b, "mcp__own__echo", json!({"message": "b"})).await;
    assert_eq!(text(&r), "Echo: b");
    a.dispose();
    b.dispose();
    row.dispose();
}

// ------------------------------------------------------------ server-everything (npm)

fn everything() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !node || !script.exists() {
        dsh_test_support::prereq::skip(
            "server-everything needs node and `npm ci` in crates/mcp/tests/servers (.ci/run does it)",
        );
        return None;
    }
    Some(script)
}

fn everything_stdio(script: &Path) -> ServerConfig {
    let mut c = stub("everything", &[]);
    c.transport = Transport::Stdio {
        command: "node".into(),
        args: vec![script.display().to_string(), "stdio".into()],
        env: vec![],
        cwd: String::new(),
    };
    c
}

#[tokio::test]
async fn server_everything_over_stdio() {
    let Some(script) = everything() else { return };
    let (root, registry) = root();
    let owner = root.child("everything");
    let handle = connect(&owner, everything_stdio(&script), REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(handle.startup_error(), None);
    let listed = names(&registry, &root);
    for t in ["mcp__everything__echo", "mcp__everything__get-sum"] {
        assert!(listed.contains(&t.to_string()), "{t} not in {listed:?}");
    }
    let r = call(
        &registry,
        &root,
        "mcp__everything__echo",
        json!({"message": "hi"}),
    )
    .await;
    assert_eq!((r.is_error, text(&r)), (false, "Echo: hi".to_string()));
    let r = call(
        &registry,
        &root,
        "mcp__everything__get-sum",
        json!({"a": 2, "b": 3}),
    )
    .await;
    assert!(text(&r).contains('5'), "{}", text(&r));
    owner.dispose();
}

#[tokio::test]
async fn server_everything_over_streamable_http() {
    let Some(script) = everything() else { return };
    let port = free_port();
    let mut server = everything_http(&script, port).await;
    let (root, registry) = root();
    let owner = root.child("everything-http");
    let mut config = stub("web", &[]);
    config.transport = Transport::StreamableHttp {
        url: format!("http://127.0.0.1:{port}/mcp"),
        headers: vec![("X-Test".into(), "1".into())],
    };
    let handle = connect(&owner, config, REQUEST_TIMEOUT).await.unwrap();
    assert_eq!(handle.startup_error(), None);
    let r = call(
        &registry,
        &root,
        "mcp__web__echo",
        json!({"message": "over http"}),
    )
    .await;
    assert_eq!(
        (r.is_error, text(&r)),
        (false, "Echo: over http".to_string())
    );
    owner.dispose();
    let _ = server.kill().await;
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// server-everything over streamable HTTP on `port`, ready to take connections.
async fn everything_http(script: &Path, port: u16) -> tokio::process::Child {
    let server = tokio::process::Command::new("node")
        .arg(script)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    within("the HTTP server", async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    server
}

#[tokio::test]
async fn a_restarted_streamable_http_server_is_reconnected() {
    let Some(script) = everything() else { return };
    let port = free_port();
    let mut server = everything_http(&script, port).await;
    let (root, registry) = root();
    let owner = root.child("everything-http-restart");
    let mut config = stub("web", &[]);
    config.transport = Transport::StreamableHttp {
        url: format!("http://127.0.0.1:{port}/mcp"),
        headers: vec![],
    };
    let handle = connect(&owner, config, REQUEST_TIMEOUT).await.unwrap();
    let echo = |message: &str| {
        call(
            &registry,
            &root,
            "mcp__web__echo",
            json!({"message": message}),
        )
    };
    assert_eq!(text(&echo("before").await), "Echo: before");
    // The server restarts: the new one knows nothing of the client's session.
    server.kill().await.unwrap();
    let _ = server.wait().await;
    let mut server = everything_http(&script, port).await;
    let failed = echo("during").await;
    assert!(failed.is_error, "{}", text(&failed));
    within("the reconnect", handle.wait_for(connected_with(2))).await;
    assert_eq!(text(&echo("after").await), "Echo: after");
    owner.dispose();
    let _ = server.kill().await;
}

// ------------------------------------------------------------ server-filesystem (npm)

#[tokio::test]
async fn server_filesystem_reads_and_writes_inside_its_allowed_directory() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    if everything().is_none() || !script.exists() {
        dsh_test_support::prereq::skip(
            "server-filesystem needs node and `npm ci` in crates/mcp/tests/servers (.ci/run does it)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root_dir = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(root_dir.join("notes.txt"), "first line\n").unwrap();
    let mut config = stub("fs", &[]);
    config.transport = Transport::Stdio {
        command: "node".into(),
        args: vec![script.display().to_string(), root_dir.display().to_string()],
        env: vec![],
        cwd: String::new(),
    };
    let (root, registry) = root();
    let owner = root.child("filesystem");
    let _handle = connect(&owner, config, REQUEST_TIMEOUT).await.unwrap();
    let listed = names(&registry, &root);
    for t in [
        "mcp__fs__read_text_file",
        "mcp__fs__write_file",
        "mcp__fs__list_directory",
    ] {
        assert!(listed.contains(&t.to_string()), "{t} not in {listed:?}");
    }
    let notes = root_dir.join("notes.txt").display().to_string();
    let r = call(
        &registry,
        &root,
        "mcp__fs__read_text_file",
        json!({"path": notes}),
    )
    .await;
    assert_eq!((r.is_error, text(&r)), (false, "first line\n".to_string()));
    let new_file = root_dir.join("new.txt");
    let r = call(
        &registry,
        &root,
        "mcp__fs__write_file",
        json!({"path": new_file.display().to_string(), "content": "written by dsh"}),
    )
    .await;
    assert!(!r.is_error, "{}", text(&r));
    assert_eq!(
        std::fs::read_to_string(&new_file).unwrap(),
        "written by dsh"
    );
    // Outside its allowed directory the server refuses; the refusal is the tool's error.
    let r = call(
        &registry,
        &root,
        "mcp__fs__read_text_file",
        json!({"path": "/etc/hostname"}),
    )
    .await;
    assert!(r.is_error, "{}", text(&r));
    owner.dispose();
}
