//! Test harness: a composed runtime with the subagent rows, a scripted model that gives
//! each session its own script (bound by the text of the session's first prompt), and a
//! tool that runs a real process until cancelled. dsh-workflow's tests share it by path.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_agent::{AgentOptions, AgentRef, Agents, CreateAgent};
use dsh_kernel::{BoxError, BoxFuture, Catalog, Context, LoadRow, LoadedTree, load_tree};
use dsh_llm::{
    AdapterStream, ContentBlock, FinishReason, GenerateOptions, LlmAdapter, LlmError, LlmRuntime,
    ModelInfo, StreamChunk, TokenUsage, ToolSchema,
};
use dsh_session::{Event, LiveSession, SessionStore, types};
use dsh_tools::{ObjectSchema, Prop, Tool, ToolOutput, ToolRegistry, ToolRunContext};
use serde_json::{Value, json};

pub use dsh_test_support::scripted::{Reply, hang, lazy, text};

/// A step cut at the token limit with nothing complete in it (a usage-only message).
pub fn cut_at_limit() -> Reply {
    Reply::Chunks(vec![
        StreamChunk::Usage {
            usage: TokenUsage {
                input_tokens: 10,
                output_tokens: 100,
                ..Default::default()
            },
        },
        StreamChunk::finish(FinishReason::MaxTokens),
    ])
}

/// A message with optional leading text and tool calls.
pub fn say_and_call(say: Option<&str>, list: &[(&str, &str, Value)]) -> Reply {
    let mut chunks = Vec::new();
    let mut index = 0u32;
    if let Some(t) = say {
        chunks.push(StreamChunk::BlockStart {
            index,
            block_type: "text".into(),
        });
        chunks.push(StreamChunk::TextDelta {
            index,
            text: t.into(),
        });
        chunks.push(StreamChunk::BlockEnd {
            index,
            block: ContentBlock::text(t),
        });
        index += 1;
    }
    for (id, name, args) in list {
        let args = args.to_string();
        chunks.push(StreamChunk::BlockStart {
            index,
            block_type: "tool-call".into(),
        });
        chunks.push(StreamChunk::ToolCallDelta {
            index,
            id: id.to_string(),
            name: Some(name.to_string()),
            arguments_delta: args.clone(),
        });
        chunks.push(StreamChunk::BlockEnd {
            index,
            block: ContentBlock::ToolCall {
                id: id.to_string(),
                name: name.to_string(),
                arguments: args,
            },
        });
        index += 1;
    }
    chunks.push(StreamChunk::finish(FinishReason::ToolCalls));
    Reply::Chunks(chunks)
}

pub fn calls(list: &[(&str, &str, Value)]) -> Reply {
    say_and_call(None, list)
}

/// Scripts by key: a session binds, on its first call, to the next unclaimed script whose
/// key starts its first user message; then it follows its own script.
#[derive(Default)]
pub struct Scripted {
    scripts: Mutex<Vec<(String, Vec<Reply>)>>,
    bound: Mutex<HashMap<String, std::collections::VecDeque<Reply>>>,
    pub requests: Mutex<Vec<Arc<GenerateOptions>>>,
}

impl Scripted {
    /// Adds a script for the next session whose first prompt starts with `key`.
    pub fn script(&self, key: &str, replies: Vec<Reply>) {
        self.scripts
            .lock()
            .unwrap()
            .push((key.to_string(), replies));
    }

    pub fn requests_of(&self, session: &str) -> Vec<Arc<GenerateOptions>> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.session_id.as_deref() == Some(session))
            .cloned()
            .collect()
    }

    fn next(&self, options: &GenerateOptions) -> Option<Reply> {
        let session = options.session_id.clone().unwrap_or_default();
        let mut bound = self.bound.lock().unwrap();
        if !bound.contains_key(&session) {
            let first = options
                .messages
                .iter()
                .filter(|m| m.role == dsh_llm::Role::User)
                .map(|m| m.text())
                .find(|t| !t.starts_with("Current runtime context"))
                .unwrap_or_default();
            let mut scripts = self.scripts.lock().unwrap();
            let i = scripts
                .iter()
                .position(|(k, _)| first.starts_with(k.as_str()))?;
            let (_, replies) = scripts.remove(i);
            bound.insert(session.clone(), replies.into());
        }
        bound.get_mut(&session)?.pop_front()
    }
}

impl LlmAdapter for Scripted {
    fn model_info(&self, _p: &str, model: &str) -> Result<ModelInfo, LlmError> {
        Ok(ModelInfo {
            id: model.into(),
            context_window: Some(100_000),
            ..Default::default()
        })
    }
    fn stream(&self, options: Arc<GenerateOptions>) -> AdapterStream {
        self.requests.lock().unwrap().push(options.clone());
        let reply = self.next(&options);
        dsh_test_support::scripted::serve(reply, options.cancel.clone())
    }
}

/// `sleep_proc {tag}`: starts `sleep 1000` and waits for it; cancellation kills it. The
/// pids it started are recorded.
pub struct SleepProc {
    schema: ToolSchema,
    pub pids: Arc<Mutex<Vec<u32>>>,
}

impl Tool for SleepProc {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }
    fn execute(
        &self,
        _args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let pids = self.pids.clone();
        Box::pin(async move {
            let mut child = tokio::process::Command::new("sleep")
                .arg("1000")
                .kill_on_drop(true)
                .spawn()?;
            if let Some(pid) = child.id() {
                pids.lock().unwrap().push(pid);
            }
            tokio::select! {
                status = child.wait() => Ok(ToolOutput::text(format!("exited {status:?}"))),
                _ = ctx.cancel.cancelled() => {
                    child.kill().await?;
                    Err("cancelled".into())
                }
            }
        })
    }
}

/// `rendezvous {}`: waits until `n` calls are inside it at once (proves siblings overlap).
pub struct Rendezvous {
    schema: ToolSchema,
    arrived: Arc<tokio::sync::Barrier>,
}

impl Tool for Rendezvous {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }
    fn execute(
        &self,
        _args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let barrier = self.arrived.clone();
        Box::pin(async move {
            tokio::select! {
                _ = barrier.wait() => Ok(ToolOutput::text("met")),
                _ = tokio::time::sleep(Duration::from_secs(10)) => Err("alone".into()),
                _ = ctx.cancel.cancelled() => Err("cancelled".into()),
            }
        })
    }
}

fn schema(name: &str) -> ToolSchema {
    ToolSchema {
        name: name.into(),
        description: name.into(),
        parameters: ObjectSchema::new()
            .optional("tag", Prop::string("tag"))
            .to_value()
            .into(),
    }
}

pub struct Harness {
    pub root: Context,
    pub tree: LoadedTree,
    pub model: Arc<Scripted>,
    pub pids: Arc<Mutex<Vec<u32>>>,
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

pub fn base_rows() -> Vec<LoadRow> {
    vec![
        row("llm", "@deepseek-ai/dsh-llm", Value::Null),
        row("session", "@deepseek-ai/dsh-session", Value::Null),
        row("tools", "@deepseek-ai/dsh-tools", Value::Null),
        row(
            "system-prompt",
            "@deepseek-ai/dsh-system-prompt",
            Value::Null,
        ),
        row("agent", "@deepseek-ai/dsh-agent", Value::Null),
        row(
            "approval",
            "@deepseek-ai/dsh-user-approval",
            json!({"policy": "ask"}),
        ),
        row("jobs", "@deepseek-ai/dsh-jobs-local", Value::Null),
        row("tool-jobs", "@deepseek-ai/dsh-tool-jobs", Value::Null),
        row("subagent", "@deepseek-ai/dsh-subagent", Value::Null),
        row(
            "spawn",
            "@deepseek-ai/dsh-subagent-spawn-in-process",
            json!({"providerName": "spawn"}),
        ),
        row(
            "fork",
            "@deepseek-ai/dsh-subagent-fork-in-process",
            json!({"providerName": "fork"}),
        ),
        row(
            "agent-loop",
            "@deepseek-ai/dsh-agent-loop",
            json!({"maxParallelToolCalls": 10}),
        ),
    ]
}

pub fn plain_row(id: &str, name: &str, config: Value) -> LoadRow {
    row(id, name, config)
}

pub fn tool_row(id: &str, config: Value) -> LoadRow {
    row(id, "@deepseek-ai/dsh-tool-subagent", config)
}

impl Harness {
    /// The base rows plus `extra` (tool rows).
    pub fn new(extra: Vec<LoadRow>) -> Self {
        let mut rows = base_rows();
        rows.extend(extra);
        Self::with_rows(rows, |_| {})
    }

    /// Exactly `rows`, from this harness's catalog plus what `more` registers (other crates
    /// that share this harness add their own plugins).
    pub fn with_rows(rows: Vec<LoadRow>, more: impl FnOnce(&mut Catalog)) -> Self {
        let mut catalog = Catalog::new();
        dsh_agent::register_core(&mut catalog);
        dsh_policies::register_catalog(&mut catalog);
        dsh_jobs::register_catalog(&mut catalog);
        dsh_subagent::register_catalog(&mut catalog);
        dsh_sandbox::register_catalog(&mut catalog);
        dsh_user_questions::register_catalog(&mut catalog);
        dsh_conformance::register_fixtures(&mut catalog);
        catalog.register(dsh_persistence::JsonlPersistencePlugin);
        more(&mut catalog);
        let root = Context::new_root();
        let tree = load_tree(&root, &catalog, &rows).expect("tree loads");
        let model = Arc::new(Scripted::default());
        root.get::<LlmRuntime>()
            .unwrap()
            .register_adapter(&root, vec!["test".into()], model.clone())
            .unwrap();
        let tools = root.get::<ToolRegistry>().unwrap();
        let pids = Arc::new(Mutex::new(Vec::new()));
        tools
            .register(
                &root,
                Arc::new(SleepProc {
                    schema: schema("sleep_proc"),
                    pids: pids.clone(),
                }),
            )
            .unwrap();
        tools
            .register(
                &root,
                Arc::new(Rendezvous {
                    schema: schema("rendezvous"),
                    arrived: Arc::new(tokio::sync::Barrier::new(2)),
                }),
            )
            .unwrap();
        Self {
            root,
            tree,
            model,
            pids,
        }
    }

    /// A spawn tool (`subagent`, foreground by default) and a fork tool (`subagent_fork`).
    pub fn standard() -> Self {
        Self::new(vec![
            tool_row("tool-subagent", json!({"provider": "spawn", "maxDepth": 1})),
            tool_row(
                "tool-subagent-fork",
                json!({"provider": "fork", "toolName": "subagent_fork", "enableRunInBackground": false, "maxDepth": 1}),
            ),
        ])
    }

    pub fn agent(&self) -> AgentRef {
        let agents = self.root.get::<Agents>().unwrap();
        let mut request = CreateAgent::fresh(AgentOptions {
            provider: Some("test".into()),
            model: Some("m".into()),
            max_tokens: None,
            reasoning_effort: None,
        });
        request.cwd = Some(std::env::temp_dir());
        agents.create(&self.root, request).unwrap()
    }

    pub fn sessions(&self) -> Arc<SessionStore> {
        self.root.get::<SessionStore>().unwrap()
    }

    /// Live sessions whose header names `parent`.
    pub fn children_of(&self, parent: &str) -> Vec<Arc<LiveSession>> {
        let mut c: Vec<_> = self
            .sessions()
            .list()
            .into_iter()
            .filter(|s| s.header().parent_session.as_deref() == Some(parent))
            .collect();
        c.sort_by_key(|s| s.header().created_at);
        c
    }
}

/// Keeps every child session that is created (they leave the store when disposed).
pub fn record_sessions(root: &Context) -> Arc<Mutex<Vec<Arc<LiveSession>>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    root.on_emit::<dsh_session::SessionCreated>(dsh_kernel::ListenOptions::GLOBAL, move |p| {
        s.lock().unwrap().push(p.clone());
        Ok(())
    })
    .unwrap();
    seen
}

pub async fn idle(agent: &AgentRef) {
    tokio::time::timeout(Duration::from_secs(20), agent.when_idle())
        .await
        .expect("agent went idle");
}

pub async fn wait_for(mut f: impl FnMut() -> bool) {
    for _ in 0..4000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("condition not reached");
}

/// One line per durable event (chunks omitted).
pub fn trace(events: &[Arc<Event>]) -> Vec<String> {
    events
        .iter()
        .filter(|e| !e.is(types::ASSISTANT_CHUNK))
        .map(|e| describe(e))
        .collect()
}

pub fn describe(e: &Event) -> String {
    let d = e.data.as_value();
    match e.event_type.as_str() {
        types::TURN_START => format!("turn/start {}", d["turn"]),
        types::TURN_END => format!("turn/end {}", d["reason"]["kind"].as_str().unwrap()),
        types::USER_MESSAGE => format!("user {}", first_line(&text_of(d))),
        types::ASSISTANT_MESSAGE => format!("assistant {}", text_of(&d["message"])),
        types::TOOL_CALL => format!("tool/call {}", d["name"].as_str().unwrap()),
        types::TOOL_RESULT => {
            let block = &d["message"]["content"][0];
            format!(
                "tool/result{} {}",
                if block["isError"] == json!(true) {
                    " error"
                } else {
                    ""
                },
                text_of(block)
            )
        }
        types::INBOX_SPLICED => {
            if d.get("removedCount").is_some() {
                format!("inbox {} -", d["target"].as_str().unwrap())
            } else {
                format!("inbox {} +", d["target"].as_str().unwrap())
            }
        }
        types::REQUEST_HEADER => format!("request/header {}", d["reason"].as_str().unwrap()),
        other => other.to_string(),
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}

pub fn text_of(v: &Value) -> String {
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
