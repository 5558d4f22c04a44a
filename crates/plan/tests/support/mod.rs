//! A composed agent runtime with plan mode over a scripted model, and a scripted
//! user-questions provider.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_agent::{AgentOptions, AgentRef, Agents, CreateAgent, register_core};
use dsh_kernel::{BoxError, BoxFuture, Catalog, Context, LoadRow, LoadedTree, load_tree};
use dsh_llm::{LlmRuntime, Message};
use dsh_session::{LiveSession, types};
use dsh_user_questions::{
    Answer, AnswerItem, AskRequest, Question, QuestionProvider, UserQuestions,
};
use serde_json::{Value, json};

pub const SECTION: &str = "PLAN-GUIDANCE: plan only, do not edit.";

pub use dsh_test_support::scripted::{Scripted, call, text};

/// What these tests read from the recorded requests.
pub trait PlanRequests {
    /// Whether request `i` carried the plan section.
    fn planned(&self, i: usize) -> bool;
    /// The user-role texts of request `i`.
    fn user_texts(&self, i: usize) -> Vec<String>;
}

impl PlanRequests for Scripted {
    fn planned(&self, i: usize) -> bool {
        self.requests()[i]
            .system
            .as_deref()
            .unwrap_or("")
            .contains(SECTION)
    }
    fn user_texts(&self, i: usize) -> Vec<String> {
        self.requests()[i]
            .messages
            .iter()
            .filter(|m| m.role == dsh_llm::Role::User)
            .map(|m| m.text())
            .collect()
    }
}

/// A UI provider that answers from a queue and records the questions it saw.
#[derive(Default)]
pub struct ScriptedAnswers {
    pub answers: Mutex<VecDeque<Answer>>,
    pub asked: Mutex<Vec<Question>>,
}

impl ScriptedAnswers {
    pub fn push(&self, selected: &str, custom: Option<&str>) {
        self.answers.lock().unwrap().push_back(Answer {
            answers: vec![AnswerItem {
                id: dsh_plan_mode::REVIEW_ID.into(),
                selected: vec![selected.into()],
                custom: custom.map(str::to_string),
            }],
        });
    }
}

impl QuestionProvider for ScriptedAnswers {
    fn ask(&self, request: AskRequest) -> BoxFuture<'static, Result<Answer, BoxError>> {
        self.asked.lock().unwrap().extend(request.questions);
        let next = self.answers.lock().unwrap().pop_front();
        Box::pin(async move { next.ok_or_else(|| "no scripted answer".into()) })
    }
}

/// Whether the tree mounts the user-questions service and a scripted UI provider.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Scripted,
    Absent,
}

pub struct Harness {
    pub root: Context,
    pub tree: LoadedTree,
    pub model: Arc<Scripted>,
    pub answers: Arc<ScriptedAnswers>,
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

pub fn catalog() -> Catalog {
    let mut catalog = Catalog::new();
    register_core(&mut catalog);
    catalog.register(dsh_commands::CommandsPlugin);
    dsh_user_questions::register_catalog(&mut catalog);
    dsh_plan_mode::register_catalog(&mut catalog);
    catalog
}

pub fn rows(channel: Channel, plan_config: Value) -> Vec<LoadRow> {
    let mut rows = vec![
        row("llm", "@deepseek-ai/dsh-llm", Value::Null),
        row("session", "@deepseek-ai/dsh-session", Value::Null),
        row("tools", "@deepseek-ai/dsh-tools", Value::Null),
        row(
            "system-prompt",
            "@deepseek-ai/dsh-system-prompt",
            Value::Null,
        ),
        row("agent", "@deepseek-ai/dsh-agent", Value::Null),
        row("agent-loop", "@deepseek-ai/dsh-agent-loop", Value::Null),
        row("commands", "@deepseek-ai/dsh-commands", Value::Null),
    ];
    if channel == Channel::Scripted {
        rows.push(row(
            "user-questions",
            "@deepseek-ai/dsh-user-questions",
            Value::Null,
        ));
    }
    rows.push(row("plan-mode", "@deepseek-ai/dsh-plan-mode", plan_config));
    rows
}

impl Harness {
    pub fn new(channel: Channel) -> Self {
        let root = Context::new_root();
        let tree = load_tree(
            &root,
            &catalog(),
            &rows(channel, json!({"section": SECTION})),
        )
        .expect("tree loads");
        let model = Arc::new(Scripted::default());
        root.get::<LlmRuntime>()
            .unwrap()
            .register_adapter(&root, vec!["test".into()], model.clone())
            .unwrap();
        let answers = Arc::new(ScriptedAnswers::default());
        if let Some(q) = root.get::<UserQuestions>() {
            q.register_provider(&root, answers.clone()).unwrap();
        }
        Self {
            root,
            tree,
            model,
            answers,
        }
    }

    pub fn agent(&self) -> AgentRef {
        self.root
            .get::<Agents>()
            .unwrap()
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

    pub fn plan(&self) -> Arc<dsh_plan_mode::PlanMode> {
        self.root.get::<dsh_plan_mode::PlanMode>().unwrap()
    }

    pub async fn prompt(&self, agent: &AgentRef, text: &str) {
        agent.followup(Message::user_text(text)).unwrap();
        idle(agent).await;
    }

    pub async fn command(&self, agent: &AgentRef, line: &str) -> String {
        let commands = self.root.get::<dsh_commands::CommandRegistry>().unwrap();
        let (_, result) = commands
            .execute(agent, line, tokio_util::sync::CancellationToken::new())
            .await
            .expect("a known command");
        result.text().to_string()
    }
}

pub async fn idle(agent: &AgentRef) {
    tokio::time::timeout(Duration::from_secs(10), agent.when_idle())
        .await
        .expect("agent goes idle");
}

/// The session's plan-relevant trace: `plan/mode`, user messages, tool results, headers.
pub fn trace(session: &LiveSession) -> Vec<String> {
    session
        .events()
        .iter()
        .filter_map(|e| {
            let d = &e.data;
            match e.event_type.as_str() {
                "plan/mode" => Some(format!("plan/mode {}", d["active"])),
                types::TURN_START => Some(format!("turn/start {}", d["turn"])),
                types::STEP_START => Some(format!("step/start {}.{}", d["turn"], d["step"])),
                types::USER_MESSAGE => Some(format!(
                    "user[{}] {}",
                    d["source"]["kind"].as_str().unwrap_or(""),
                    text_of(d)
                )),
                types::TOOL_RESULT => {
                    let block = &d["message"]["content"][0];
                    let status = if block["isError"] == json!(true) {
                        "error"
                    } else {
                        "ok"
                    };
                    Some(format!("tool/result {status} {}", text_of(block)))
                }
                _ => None,
            }
        })
        .collect()
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
