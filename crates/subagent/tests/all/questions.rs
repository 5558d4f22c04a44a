//! A delegated child cannot ask the user: `ask_user_question` from a child is refused by the
//! user-questions seam (`DELEGATED_CALLER`) before any UI provider is reached, and the
//! child can carry the question back in its answer. The parent itself may ask.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::{Arc, Mutex};

use dsh_kernel::{BoxError, BoxFuture};
use dsh_llm::Message;
use dsh_session::types;
use dsh_user_questions::{Answer, AnswerItem, AskRequest, QuestionProvider, UserQuestions};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::*;

/// A UI provider that records what reached it and answers "Yes".
struct Recorder(Arc<Mutex<Vec<String>>>);

impl QuestionProvider for Recorder {
    fn ask(&self, request: AskRequest) -> BoxFuture<'static, Result<Answer, BoxError>> {
        let asked = self.0.clone();
        Box::pin(async move {
            let mut answers = Vec::new();
            for q in request.questions {
                asked.lock().unwrap().push(q.question.clone());
                answers.push(AnswerItem {
                    id: q.id,
                    selected: vec!["Yes".into()],
                    custom: None,
                });
            }
            Ok(Answer { answers })
        })
    }
}

fn harness() -> (Harness, Arc<Mutex<Vec<String>>>) {
    let h = Harness::new(vec![
        plain_row(
            "user-questions",
            "@deepseek-ai/dsh-user-questions",
            Value::Null,
        ),
        plain_row(
            "tool-ask-user",
            "@deepseek-ai/dsh-tool-ask-user",
            Value::Null,
        ),
        tool_row("tool-subagent", json!({"provider": "spawn", "maxDepth": 1})),
    ]);
    let asked = Arc::new(Mutex::new(Vec::new()));
    h.root
        .get::<UserQuestions>()
        .unwrap()
        .register_provider(&h.root, Arc::new(Recorder(asked.clone())))
        .unwrap();
    (h, asked)
}

fn ask(id: &str, question: &str) -> Reply {
    calls(&[(
        "ask",
        "ask_user_question",
        json!({"questions": [{"id": id, "header": "Deployment", "question": question}]}),
    )])
}

/// `(isError, text, error name/code)` of each tool result in `events`.
fn results(events: &[Arc<dsh_session::Event>]) -> Vec<(bool, String, Value)> {
    events
        .iter()
        .filter(|e| e.is(types::TOOL_RESULT))
        .map(|e| {
            let d = e.data.as_value();
            let block = &d["message"]["content"][0];
            (
                block["isError"] == json!(true),
                text_of(block),
                d.get("error").cloned().unwrap_or(Value::Null),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_question_is_refused_before_any_provider_and_returned_in_its_answer() {
    let (h, asked) = harness();
    let seen = record_sessions(&h.root);
    h.model.script(
        "parent",
        vec![
            calls(&[(
                "d",
                "subagent",
                json!({"description": "Question check", "prompt": "child: ask about CUDA"}),
            )]),
            text("PARENT_COMPLETED"),
        ],
    );
    h.model.script(
        "child:",
        vec![
            ask("cuda-fallback", "Should deployment use the CUDA fallback?"),
            text("UNRESOLVED: Should deployment use the CUDA fallback?"),
        ],
    );
    let parent = h.agent();
    parent.followup(Message::user_text("parent task")).unwrap();
    idle(&parent).await;

    let child = seen.lock().unwrap()[1].clone();
    assert_eq!(
        results(&child.events()),
        vec![(
            true,
            "Error: human interaction is unavailable while the calling agent is owned by another live agent; include the unresolved question or decision in the child agent's final result".to_string(),
            json!({"name": "UserQuestionError", "code": "DELEGATED_CALLER"}),
        )]
    );
    assert_eq!(
        results(&parent.session().events()),
        vec![(
            false,
            "UNRESOLVED: Should deployment use the CUDA fallback?".to_string(),
            Value::Null
        )]
    );
    assert!(asked.lock().unwrap().is_empty(), "no provider was reached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_agent_question_reaches_the_provider_and_the_answer_is_the_result() {
    let (h, asked) = harness();
    h.model.script(
        "parent",
        vec![ask("mode", "Proceed with the migration?"), text("THANKS")],
    );
    let parent = h.agent();
    parent.followup(Message::user_text("parent task")).unwrap();
    idle(&parent).await;
    assert_eq!(
        results(&parent.session().events()),
        vec![(
            false,
            r#"{"answers":[{"id":"mode","selected":["Yes"]}]}"#.to_string(),
            Value::Null
        )]
    );
    assert_eq!(
        *asked.lock().unwrap(),
        vec!["Proceed with the migration?".to_string()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_provider_or_questions_the_errors_are_clear() {
    let h = Harness::new(vec![
        plain_row(
            "user-questions",
            "@deepseek-ai/dsh-user-questions",
            Value::Null,
        ),
        plain_row(
            "tool-ask-user",
            "@deepseek-ai/dsh-tool-ask-user",
            Value::Null,
        ),
    ]);
    h.model.script(
        "parent",
        vec![
            ask("q", "Anyone there?"),
            calls(&[("e", "ask_user_question", json!({"questions": []}))]),
            text("OK"),
        ],
    );
    let parent = h.agent();
    parent.followup(Message::user_text("parent task")).unwrap();
    idle(&parent).await;
    assert_eq!(
        results(&parent.session().events()),
        vec![
            (
                true,
                "Error: no user-questions provider is registered".to_string(),
                json!({"name": "UserQuestionError", "code": "NO_PROVIDER"}),
            ),
            (
                true,
                "Error: ask_user_question requires at least one question".to_string(),
                json!({"name": "UserQuestionError", "code": "EMPTY_QUESTIONS"}),
            ),
        ]
    );
}
