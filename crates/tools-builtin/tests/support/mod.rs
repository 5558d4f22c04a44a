//! Shared test harness: a kernel root with a tool registry, plugins loaded from catalog
//! rows, an optional live session, and calls through the full tool pipeline.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{Catalog, Context, LoadRow, LoadedTree, load_tree};
use dsh_llm::ContentBlock;
use dsh_session::{LiveSession, SessionHeader, SessionSource, SessionStore, system_clock};
use dsh_tools::{ExecutionMode, ToolExecution, ToolRegistry, ToolResult};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub struct Harness {
    pub root: Context,
    pub tree: LoadedTree,
    pub registry: Arc<ToolRegistry>,
    pub store: Arc<SessionStore>,
    pub session: Option<Arc<LiveSession>>,
    pub cwd: Option<PathBuf>,
    next_call: std::sync::atomic::AtomicU64,
}

pub fn catalog() -> Catalog {
    let mut catalog = Catalog::new();
    dsh_tools_builtin::register_catalog(&mut catalog);
    dsh_sandbox::register_catalog(&mut catalog);
    catalog
}

impl Harness {
    /// Loads `rows` (`(plugin name, config)`) over a fresh root providing the registry.
    pub fn new(rows: &[(&str, Value)]) -> Self {
        Self::with_root(Context::new_root(), rows)
    }

    pub fn with_root(root: Context, rows: &[(&str, Value)]) -> Self {
        let registry = ToolRegistry::new();
        root.provide(registry.clone()).expect("registry");
        let rows: Vec<LoadRow> = rows
            .iter()
            .enumerate()
            .map(|(i, (name, config))| LoadRow {
                id: format!("row{i}"),
                name: name.to_string(),
                source: "test.yml".into(),
                config: config.clone(),
                children: Vec::new(),
            })
            .collect();
        let tree = load_tree(&root, &catalog(), &rows).expect("load rows");
        Self {
            root,
            tree,
            registry,
            store: SessionStore::new(system_clock()),
            session: None,
            cwd: None,
            next_call: Default::default(),
        }
    }

    /// Starts a live session whose header cwd is `cwd`, with turn 1 open.
    pub fn start_session(&mut self, cwd: &Path) -> Arc<LiveSession> {
        let id = format!("session-{}", uuid::Uuid::new_v4());
        let mut header = SessionHeader::new(id, 1);
        header.cwd = Some(cwd.to_string_lossy().into_owned());
        let session = self
            .store
            .create(&self.root, header, SessionSource::Fresh)
            .expect("session");
        session
            .append("turn/start", json!({"turn": 1}), None)
            .expect("turn");
        self.session = Some(session.clone());
        self.cwd = Some(cwd.to_path_buf());
        session
    }

    pub fn exec(&self, name: &str, args: Value) -> ToolExecution {
        let n = self
            .next_call
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut exec = ToolExecution::new(format!("call_{n}"), name, args, self.root.clone());
        exec.session = self.session.clone();
        exec.cwd = self.cwd.clone();
        exec
    }

    pub async fn call(&self, name: &str, args: Value) -> ToolResult {
        self.registry.execute(self.exec(name, args)).await
    }

    pub async fn call_with_cancel(
        &self,
        name: &str,
        args: Value,
        cancel: CancellationToken,
    ) -> ToolResult {
        let mut exec = self.exec(name, args);
        exec.cancel = cancel;
        self.registry.execute(exec).await
    }

    pub fn mode(&self, name: &str, args: Value) -> ExecutionMode {
        self.registry.execution_mode(&self.exec(name, args))
    }

    /// The model-facing parameter schema of a registered tool.
    pub fn parameters(&self, name: &str) -> Value {
        self.registry
            .get(&self.root, name)
            .expect("tool registered")
            .schema()
            .parameters
            .as_ref()
            .clone()
    }
}

/// The single text block of a result.
pub fn text(result: &ToolResult) -> String {
    match result.content.as_slice() {
        [ContentBlock::Text { text }] => text.clone(),
        other => panic!("expected one text block, got {other:?}"),
    }
}

/// `(is_error, text, durable {name, code})` of a result.
pub fn outcome(result: &ToolResult) -> (bool, String, Option<(String, String)>) {
    let info = result
        .error
        .as_ref()
        .and_then(|e| e.info.as_ref())
        .map(|i| (i.name.clone(), i.code.clone()));
    (result.is_error, text(result), info)
}

pub fn ok(text: &str) -> (bool, String, Option<(String, String)>) {
    (false, text.to_string(), None)
}

pub fn plain_error(message: &str) -> (bool, String, Option<(String, String)>) {
    (true, format!("Error: {message}"), None)
}

pub fn typed_error(
    name: &str,
    code: &str,
    message: &str,
) -> (bool, String, Option<(String, String)>) {
    (
        true,
        format!("Error: {message}"),
        Some((name.to_string(), code.to_string())),
    )
}

/// Drops every `description` text, to compare parameter shapes only.
pub fn shape(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, v)| !(*k == "description" && v.is_string()))
                .map(|(k, v)| (k.clone(), shape(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
        other => other.clone(),
    }
}

/// The fixture directory of an ACP conformance scenario, if the shared tree is present.
pub fn fixture_dir(scenario: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/conformance/acp")
        .join(scenario);
    dir.is_dir().then_some(dir)
}

/// The pinned parameter schema of `tool` in a scenario's `tool-schemas.expected.json`.
pub fn pinned_parameters(scenario: &str, tool: &str) -> Option<Value> {
    let dir = fixture_dir(scenario)?;
    let text = std::fs::read_to_string(dir.join("tool-schemas.expected.json")).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    value["initial"]
        .as_array()?
        .iter()
        .find(|t| t["name"] == tool)
        .map(|t| t["parameters"].clone())
}

/// A temp dir that is NOT below `/tmp` (for sandbox-fence tests, where `/tmp` is writable).
pub fn non_tmp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dsh-tb-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("tempdir")
}

/// Whether a process is alive (a zombie counts as gone).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next());
            !matches!(state, Some('Z') | Some('X') | None)
        }
    }
}

/// Polls `f` until it holds or `within` passes.
pub async fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads a pid written by a test command, waiting for the file to appear.
pub async fn read_pid(path: &Path) -> u32 {
    assert!(
        eventually(Duration::from_secs(10), || std::fs::read_to_string(path)
            .is_ok_and(|s| s.trim().parse::<u32>().is_ok()))
        .await
    );
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}
