//! Test harness: a composed runtime (core plugins + one hook bridge row) with a scripted
//! model adapter, an `echo` tool, an agent whose session cwd is a temp dir, and a trace
//! of the session log with hook events shown whole.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_agent::{AgentOptions, AgentRef, Agents, CreateAgent, register_core};
use dsh_kernel::{BoxError, BoxFuture, Catalog, Context, LoadRow, LoadedTree, load_tree};
use dsh_llm::{ContentBlock, LlmRuntime, Message};
use dsh_session::{Event, LiveSession, types};
use dsh_tools::{ObjectSchema, Prop, Tool, ToolOutput, ToolRegistry, ToolRunContext};
use serde_json::{Value, json};

pub use dsh_test_support::scripted::{Scripted, call, text};

/// `echo {command}`: returns `command` followed by a newline, like the shell would.
pub struct Echo {
    schema: dsh_llm::ToolSchema,
    params: ObjectSchema,
    pub runs: Arc<Mutex<u32>>,
}

impl Echo {
    pub fn new() -> Self {
        let params = ObjectSchema::new().required("command", Prop::string("what to echo"));
        Self {
            schema: dsh_llm::ToolSchema {
                name: "echo".into(),
                description: "echo".into(),
                parameters: params.to_value().into(),
            },
            params,
            runs: Arc::default(),
        }
    }
}

impl Tool for Echo {
    fn schema(&self) -> &dsh_llm::ToolSchema {
        &self.schema
    }
    fn validate(&self, args: &Value) -> Result<(), String> {
        self.params.validate(args)
    }
    fn execute(
        &self,
        args: Value,
        _ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        *self.runs.lock().unwrap() += 1;
        Box::pin(async move {
            Ok(ToolOutput::text(format!(
                "{}\n",
                args["command"].as_str().unwrap_or("")
            )))
        })
    }
}

pub struct Harness {
    pub root: Context,
    pub tree: LoadedTree,
    pub model: Arc<Scripted>,
    pub echo_runs: Arc<Mutex<u32>>,
    pub dir: tempfile::TempDir,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Persistence {
    On,
    Off,
}

fn row(id: &str, name: &str, config: Value) -> LoadRow {
    LoadRow {
        id: id.into(),
        name: name.into(),
        source: "test".into(),
        config,
        children: vec![],
    }
}

impl Harness {
    /// Writes `files` into a fresh temp dir (the session cwd), then loads the core rows
    /// plus `bridge` (`hooks-claude-code` or `hooks-codex`) with `config`, where
    /// `{dir}` in string values is replaced by the temp dir.
    pub fn new(bridge: &str, config: Value, files: &[(&str, &str)]) -> Self {
        Self::build(bridge, config, files, Persistence::Off)
    }

    /// Like [`Harness::new`], plus the JSONL persistence row writing under `{dir}/sessions`.
    pub fn persisted(bridge: &str, config: Value, files: &[(&str, &str)]) -> Self {
        Self::build(bridge, config, files, Persistence::On)
    }

    fn build(
        bridge: &str,
        config: Value,
        files: &[(&str, &str)],
        persistence: Persistence,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (name, content) in files {
            std::fs::write(dir.path().join(name), content).unwrap();
        }
        let config: Value = serde_json::from_str(
            &config
                .to_string()
                .replace("{dir}", &dir.path().display().to_string()),
        )
        .unwrap();
        let mut catalog = Catalog::new();
        register_core(&mut catalog);
        dsh_hooks::register_catalog(&mut catalog);
        let mut rows: Vec<LoadRow> = [
            ("llm", "@deepseek-ai/dsh-llm"),
            ("session", "@deepseek-ai/dsh-session"),
            ("tools", "@deepseek-ai/dsh-tools"),
            ("system-prompt", "@deepseek-ai/dsh-system-prompt"),
            ("agent", "@deepseek-ai/dsh-agent"),
            ("agent-loop", "@deepseek-ai/dsh-agent-loop"),
        ]
        .iter()
        .map(|(id, name)| row(id, name, Value::Null))
        .collect();
        if persistence == Persistence::On {
            catalog.register(dsh_persistence::JsonlPersistencePlugin);
            let root = dir.path().join("sessions").display().to_string();
            let config = json!({"root": root, "compression": "none", "writeBatchMaxDelayMs": 0});
            rows.push(row(
                "session-persistence-jsonl",
                "@deepseek-ai/dsh-session-persistence-jsonl",
                config,
            ));
        }
        rows.push(row(bridge, &format!("@deepseek-ai/dsh-{bridge}"), config));
        let root = Context::new_root();
        let tree = load_tree(&root, &catalog, &rows).expect("tree loads");
        let model = Arc::new(Scripted::default());
        root.get::<LlmRuntime>()
            .unwrap()
            .register_adapter(&root, vec!["test".into()], model.clone())
            .unwrap();
        let echo = Echo::new();
        let echo_runs = echo.runs.clone();
        root.get::<ToolRegistry>()
            .unwrap()
            .register(&root, Arc::new(echo))
            .unwrap();
        Self {
            root,
            tree,
            model,
            echo_runs,
            dir,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn cwd(&self) -> String {
        self.dir.path().display().to_string()
    }

    pub fn agent(&self) -> AgentRef {
        let options = AgentOptions {
            provider: Some("test".into()),
            model: Some("m".into()),
            max_tokens: None,
            reasoning_effort: None,
        };
        let request = CreateAgent {
            cwd: Some(self.dir.path().to_path_buf()),
            ..CreateAgent::fresh(options)
        };
        self.root
            .get::<Agents>()
            .unwrap()
            .create(&self.root, request)
            .unwrap()
    }

    /// Sends `prompt` and waits for the agent to go idle.
    pub async fn run(&self, agent: &AgentRef, prompt: &str) {
        agent.followup(Message::user_text(prompt)).unwrap();
        tokio::time::timeout(Duration::from_secs(20), agent.when_idle())
            .await
            .expect("agent went idle");
    }
}

fn text_of(v: &Value) -> String {
    v["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}

fn source_of(v: &Value) -> String {
    match v["source"]["plugin"].as_str() {
        Some(p) => format!(" <{p}>"),
        None => String::new(),
    }
}

/// One line per durable event (chunks and request bookkeeping omitted); `hook/*` events
/// are shown whole, with `durationMs` zeroed.
pub fn trace(session: &LiveSession) -> Vec<String> {
    session
        .events()
        .iter()
        .filter(|e| {
            !e.is(types::ASSISTANT_CHUNK)
                && !e.is(types::REQUEST_HEADER)
                && !e.is(types::REQUEST_CONTEXT)
        })
        .map(|e| describe(e))
        .collect()
}

pub fn describe(e: &Event) -> String {
    let d = &e.data;
    match e.event_type.as_str() {
        "hook/invoked" | "hook/result" => {
            let mut d = d.clone();
            if d.get("durationMs").is_some() {
                d["durationMs"] = json!(0);
            }
            format!("{} {}", e.event_type, dsh_kernel::json::to_string(&d))
        }
        types::TURN_START => format!("turn/start {}", d["turn"]),
        types::TURN_END => format!(
            "turn/end {} {}",
            d["turn"],
            d["reason"]["kind"].as_str().unwrap()
        ),
        types::STEP_START => format!("step/start {}.{}", d["turn"], d["step"]),
        types::STEP_END => format!("step/end {}.{}", d["turn"], d["step"]),
        types::USER_MESSAGE => format!("user {}{}", text_of(d), source_of(d)),
        types::ASSISTANT_MESSAGE => {
            let m = Message::from_json(&d["message"]).unwrap();
            let parts: Vec<String> = m
                .content
                .iter()
                .map(|b| match b {
                    ContentBlock::Text { text } => text.clone(),
                    ContentBlock::ToolCall { name, .. } => format!("call:{name}"),
                    other => other.block_type().to_string(),
                })
                .collect();
            format!("assistant [{}]", parts.join(","))
        }
        types::TOOL_CALL => format!("tool/call {}", d["name"].as_str().unwrap()),
        types::TOOL_RESULT => {
            let block = &d["message"]["content"][0];
            let status = if block["isError"] == json!(true) {
                "error"
            } else {
                "ok"
            };
            format!("tool/result {status} {:?}", text_of(block))
        }
        types::INBOX_SPLICED => {
            let inserted: Vec<String> = d["inserted"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| format!("{}{}", text_of(m), source_of(m)))
                .collect();
            format!(
                "inbox {}{}{}",
                d["target"].as_str().unwrap(),
                d.get("removedCount")
                    .map(|c| format!(" -{c}"))
                    .unwrap_or_default(),
                if inserted.is_empty() {
                    String::new()
                } else {
                    format!(" +[{}]", inserted.join("|"))
                },
            )
        }
        other => other.to_string(),
    }
}

/// Reads a file the hook wrote (polling briefly for detached hooks).
pub async fn read_when_present(path: &Path) -> String {
    for _ in 0..400 {
        if let Ok(s) = std::fs::read_to_string(path) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} never appeared", path.display());
}
