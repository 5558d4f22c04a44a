//! Test harness for the agent loop: a scripted adapter that records requests, a tiny tool,
//! and a composed runtime with an agent.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_agent::{AgentOptions, AgentRef, Agents, CreateAgent, register_core};
use dsh_kernel::{BoxError, BoxFuture, Catalog, Context, LoadRow, LoadedTree, load_tree};
use dsh_llm::{ContentBlock, LlmRuntime, Message};
use dsh_session::{Event, LiveSession, types};
use dsh_tools::{ObjectSchema, Prop, Tool, ToolOutput, ToolRegistry, ToolRunContext};
use serde_json::{Value, json};

// Shared by the tests and the step benchmark, which each use part of it.
#[allow(unused_imports)]
pub use dsh_test_support::scripted::{Reply, Scripted, calls, failure, text};

/// A tool that echoes its `text` argument (optionally after a delay, optionally parallel).
pub struct Echo {
    pub schema: dsh_llm::ToolSchema,
    pub params: ObjectSchema,
    pub parallel: bool,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Echo {
    pub fn new(name: &str, parallel: bool, log: Arc<Mutex<Vec<String>>>) -> Self {
        let params = ObjectSchema::new()
            .required("text", Prop::string("what to echo"))
            .optional("delayMs", Prop::number("sleep first"));
        Self {
            schema: dsh_llm::ToolSchema {
                name: name.into(),
                description: "echo".into(),
                parameters: params.to_value().into(),
            },
            params,
            parallel,
            log,
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
    fn concurrency_safe(&self, _args: &Value) -> bool {
        self.parallel
    }
    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let log = self.log.clone();
        Box::pin(async move {
            let text = args["text"].as_str().unwrap_or("").to_string();
            log.lock().unwrap().push(format!("start {text}"));
            if let Some(ms) = args["delayMs"].as_u64() {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {},
                    _ = ctx.cancel.cancelled() => { log.lock().unwrap().push(format!("cancelled {text}")); return Err("cancelled".into()) },
                }
            }
            if text == "fail" {
                return Err("echo failed".into());
            }
            log.lock().unwrap().push(format!("end {text}"));
            Ok(ToolOutput::text(text))
        })
    }
}

pub struct Harness {
    pub root: Context,
    pub tree: LoadedTree,
    pub model: Arc<Scripted>,
    pub tool_log: Arc<Mutex<Vec<String>>>,
}

pub fn rows(extra: &[(&str, &str, Value)]) -> Vec<LoadRow> {
    let mut rows: Vec<LoadRow> = [
        ("llm", "@deepseek-ai/dsh-llm"),
        ("session", "@deepseek-ai/dsh-session"),
        ("tools", "@deepseek-ai/dsh-tools"),
        ("system-prompt", "@deepseek-ai/dsh-system-prompt"),
        ("agent", "@deepseek-ai/dsh-agent"),
    ]
    .iter()
    .map(|(id, name)| LoadRow {
        id: id.to_string(),
        name: name.to_string(),
        source: "test".into(),
        config: Value::Null,
        children: vec![],
    })
    .collect();
    for (id, name, config) in extra {
        rows.push(LoadRow {
            id: id.to_string(),
            name: name.to_string(),
            source: "test".into(),
            config: config.clone(),
            children: vec![],
        });
    }
    rows
}

impl Harness {
    pub fn new() -> Self {
        Self::with(
            Catalog::new(),
            &[(
                "agent-loop",
                "@deepseek-ai/dsh-agent-loop",
                json!({"maxParallelToolCalls": 4}),
            )],
        )
    }

    pub fn with(mut catalog: Catalog, extra: &[(&str, &str, Value)]) -> Self {
        register_core(&mut catalog);
        let root = Context::new_root();
        let tree = load_tree(&root, &catalog, &rows(extra)).expect("tree loads");
        let model = Arc::new(Scripted::default());
        let llm = root.get::<LlmRuntime>().unwrap();
        llm.register_adapter(&root, vec!["test".into()], model.clone())
            .unwrap();
        let tool_log = Arc::new(Mutex::new(Vec::new()));
        let tools = root.get::<ToolRegistry>().unwrap();
        tools
            .register(&root, Arc::new(Echo::new("echo", false, tool_log.clone())))
            .unwrap();
        tools
            .register(&root, Arc::new(Echo::new("peek", true, tool_log.clone())))
            .unwrap();
        Self {
            root,
            tree,
            model,
            tool_log,
        }
    }

    pub fn agent(&self) -> AgentRef {
        let agents = self.root.get::<Agents>().unwrap();
        agents
            .create(
                &self.root,
                CreateAgent::fresh(AgentOptions {
                    provider: Some("test".into()),
                    model: Some("m".into()),
                    max_tokens: None,
                    reasoning_effort: None,
                }),
            )
            .unwrap()
    }
}

/// A compact trace of a session: one line per durable event (chunks omitted).
pub fn trace(session: &LiveSession) -> Vec<String> {
    session
        .events()
        .iter()
        .filter(|e| !e.is(types::ASSISTANT_CHUNK))
        .map(|e| describe(e))
        .collect()
}

pub fn describe(e: &Event) -> String {
    let d = &e.data;
    match e.event_type.as_str() {
        types::TURN_START => format!("turn/start {}", d["turn"]),
        types::TURN_END => format!(
            "turn/end {} {}",
            d["turn"],
            dsh_kernel::json::to_string(&d["reason"])
        ),
        types::STEP_START => format!("step/start {}.{}", d["turn"], d["step"]),
        types::STEP_END => format!("step/end {}.{}", d["turn"], d["step"]),
        types::USER_MESSAGE => format!("user {}", text_of(d)),
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
            let interrupted = if d.get("interrupted").is_some() {
                " (interrupted)"
            } else {
                ""
            };
            format!(
                "assistant {}.{} [{}]{interrupted}",
                d["turn"],
                d["step"],
                parts.join(",")
            )
        }
        types::TOOL_CALL => format!("tool/call {}", d["name"].as_str().unwrap()),
        types::TOOL_RESULT => {
            let block = &d["message"]["content"][0];
            let code = d
                .pointer("/error/code")
                .map(|c| format!(" {}", c.as_str().unwrap()))
                .unwrap_or_default();
            format!(
                "tool/result {}{} {}",
                if block["isError"] == json!(true) {
                    "error"
                } else {
                    "ok"
                },
                code,
                text_of(block)
            )
        }
        types::INBOX_SPLICED => {
            let inserted: Vec<String> = d["inserted"]
                .as_array()
                .unwrap()
                .iter()
                .map(text_of)
                .collect();
            format!(
                "inbox {} @{}{}{}{}",
                d["target"].as_str().unwrap(),
                d["start"],
                d.get("removedCount")
                    .map(|c| format!(" -{c}"))
                    .unwrap_or_default(),
                if inserted.is_empty() {
                    String::new()
                } else {
                    format!(" +[{}]", inserted.join("|"))
                },
                d.get("outcome")
                    .map(|o| format!(" {}", o.as_str().unwrap()))
                    .unwrap_or_default()
            )
        }
        types::REQUEST_HEADER => format!("request/header {}", d["reason"].as_str().unwrap()),
        other => other.to_string(),
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

pub async fn idle(agent: &AgentRef) {
    tokio::time::timeout(Duration::from_secs(10), agent.when_idle())
        .await
        .expect("agent went idle");
}

/// Polls until `f` holds (bounded).
pub async fn wait_for(mut f: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("condition not reached");
}
