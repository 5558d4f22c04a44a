//! The browser as the user-questions provider: a question (`ask_user_question`, or
//! `exit_plan_mode`'s plan review) becomes a pending entry of the asking session that every
//! open page shows; the first valid answer wins and reaches the tool as its result. A
//! cancelled turn resolves it `ASK_ABORTED`, a page that closes it to reply instead
//! `ASK_CANCELLED`; nothing waits past shutdown.

use std::collections::HashSet;

use dsh_kernel::{BoxError, BoxFuture};
use dsh_plan_mode::{APPROVE_LABEL, KEEP_PLANNING_LABEL, REVIEW_ID};
use dsh_user_questions::{
    Answer, AnswerItem, AskRequest, Question, QuestionProvider, question_error,
};
use serde_json::{Value, json};

use crate::hub::{Hub, Signal};
use crate::pending::{Answered, PendingWaits};

/// What a page sent back.
pub enum Reply {
    Answer(Answer),
    /// Closed without answering (the user replies in the composer instead).
    Dismissed,
}

/// Pending questions of every session.
#[derive(Clone)]
pub struct WebQuestions {
    waits: PendingWaits<Reply>,
}

impl WebQuestions {
    pub fn new(hub: Hub) -> Self {
        Self {
            waits: PendingWaits::new(hub, Signal::Questions),
        }
    }

    /// The pending questions of `session_id`, oldest first.
    pub fn of_session(&self, session_id: &str) -> Vec<Value> {
        self.waits.of_session(session_id)
    }

    /// Sessions with at least one pending question.
    pub fn sessions_waiting(&self) -> Vec<String> {
        self.waits.sessions_waiting()
    }

    /// Answers `question_id` of `session_id`; `answers` is checked against the questions.
    pub fn answer(&self, session_id: &str, question_id: &str, answers: &Value) -> Answered {
        self.waits.answer_with(session_id, question_id, |view| {
            let questions: Vec<Question> =
                serde_json::from_value(view["questions"].clone()).unwrap_or_default();
            validate(&questions, answers).map(Reply::Answer)
        })
    }

    /// Closes `question_id` of `session_id` unanswered.
    pub fn dismiss(&self, session_id: &str, question_id: &str) -> Answered {
        self.waits
            .answer_with(session_id, question_id, |_| Ok(Reply::Dismissed))
    }

    /// Resolves every pending question unanswered (shutdown).
    pub fn close_all(&self) {
        self.waits.close_all();
    }
}

/// The plan under review, when `questions` is `exit_plan_mode`'s review.
fn plan_review(questions: &[Question]) -> Option<&str> {
    let [q] = questions else { return None };
    let labels: Vec<&str> = q
        .options
        .iter()
        .flatten()
        .map(|o| o.label.as_str())
        .collect();
    (q.id == REVIEW_ID && labels == [APPROVE_LABEL, KEEP_PLANNING_LABEL])
        .then_some(q.detail.as_deref().unwrap_or(""))
}

/// What the page shows.
fn view(question_id: &str, session_id: &str, questions: &[Question]) -> Value {
    json!({
        "questionId": question_id,
        "sessionId": session_id,
        "questions": questions,
        "planReview": plan_review(questions).map(|plan| json!({
            "plan": plan,
            "approve": APPROVE_LABEL,
            "keepPlanning": KEEP_PLANNING_LABEL,
        })),
    })
}

/// `answers` (`[{id, selected: [label…], custom?}]`) checked against `questions`: each
/// question answered once, by its own option labels (one unless `multi_select`) and/or
/// free text. Returned in the questions' order.
pub fn validate(questions: &[Question], answers: &Value) -> Result<Answer, String> {
    let list = answers
        .as_array()
        .ok_or("answers must be a list of {id, selected, custom}")?;
    let mut items: Vec<AnswerItem> = Vec::new();
    let mut seen = HashSet::new();
    for a in list {
        let id = a
            .get("id")
            .and_then(Value::as_str)
            .ok_or("every answer needs the id of its question")?;
        let q = questions
            .iter()
            .find(|q| q.id == id)
            .ok_or_else(|| format!("no question has the id {id:?}"))?;
        if !seen.insert(id.to_string()) {
            return Err(format!("question {id:?} is answered twice"));
        }
        let selected: Vec<String> = match a.get("selected") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(v)) => v
                .iter()
                .map(|s| s.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or_else(|| format!("selected of {id:?} must list option labels"))?,
            Some(_) => return Err(format!("selected of {id:?} must list option labels")),
        };
        let custom = match a.get("custom") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) => Some(s.trim().to_string()),
            Some(_) => return Err(format!("custom of {id:?} must be text")),
        };
        let labels: Vec<&str> = q
            .options
            .iter()
            .flatten()
            .map(|o| o.label.as_str())
            .collect();
        for s in &selected {
            if !labels.contains(&s.as_str()) {
                return Err(format!("{s:?} is not an option of question {id:?}"));
            }
        }
        let distinct: HashSet<&String> = selected.iter().collect();
        if distinct.len() != selected.len() {
            return Err(format!("an option of {id:?} is chosen twice"));
        }
        if selected.len() > 1 && q.multi_select != Some(true) {
            return Err(format!("question {id:?} takes one option"));
        }
        if selected.is_empty() && custom.is_none() {
            return Err(format!(
                "question {id:?} needs a choice or a written answer"
            ));
        }
        items.push(AnswerItem {
            id: id.to_string(),
            selected,
            custom,
        });
    }
    if plan_review(questions).is_some()
        && items
            .iter()
            .any(|i| i.custom.is_some() && i.selected.iter().any(|s| s == APPROVE_LABEL))
    {
        return Err(format!(
            "feedback goes with {KEEP_PLANNING_LABEL:?}; {APPROVE_LABEL:?} takes none"
        ));
    }
    if let Some(q) = questions.iter().find(|q| !seen.contains(&q.id)) {
        return Err(format!("question {:?} is not answered", q.id));
    }
    items.sort_by_key(|i| questions.iter().position(|q| q.id == i.id));
    Ok(Answer { answers: items })
}

impl QuestionProvider for WebQuestions {
    fn ask(&self, request: AskRequest) -> BoxFuture<'static, Result<Answer, BoxError>> {
        let this = self.clone();
        Box::pin(async move {
            let Some(session_id) = request.agent.as_ref().map(|a| a.id().to_string()) else {
                return Err(question_error(
                    "NO_PROVIDER",
                    "dsh web answers questions of a session's agent only",
                ));
            };
            let id = uuid::Uuid::new_v4().to_string();
            let view = view(&id, &session_id, &request.questions);
            match this.waits.wait(id, session_id, view, &request.cancel).await {
                Some(Reply::Answer(answer)) => Ok(answer),
                Some(Reply::Dismissed) => Err(question_error(
                    "ASK_CANCELLED",
                    "the user closed the question to reply in the conversation instead",
                )),
                None => Err(question_error(
                    "ASK_ABORTED",
                    "ask_user_question was aborted before the user answered",
                )),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use dsh_user_questions::QuestionOption;

    fn q(id: &str, options: &[&str], multi: bool) -> Question {
        Question {
            id: id.into(),
            question: "?".into(),
            detail: None,
            header: None,
            options: (!options.is_empty()).then(|| {
                options
                    .iter()
                    .map(|l| QuestionOption {
                        label: (*l).into(),
                        description: None,
                    })
                    .collect()
            }),
            multi_select: multi.then_some(true),
        }
    }

    #[test]
    fn answers_are_checked_against_the_questions() {
        let qs = [
            q("a", &["X", "Y"], false),
            q("b", &["P", "Q"], true),
            q("c", &[], false),
        ];
        let ok = validate(
            &qs,
            &json!([{"id": "c", "custom": " free "}, {"id": "a", "selected": ["Y"]},
                    {"id": "b", "selected": ["P", "Q"]}]),
        )
        .unwrap();
        let ids: Vec<&str> = ok.answers.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(ok.answers[2].custom.as_deref(), Some("free"));
        let err = |v: Value| validate(&qs, &v).unwrap_err();
        let full =
            |a: Value| json!([a, {"id": "b", "selected": ["P"]}, {"id": "c", "custom": "t"}]);
        assert_eq!(
            err(full(json!({"id": "a", "selected": ["Z"]}))),
            "\"Z\" is not an option of question \"a\""
        );
        assert_eq!(
            err(full(json!({"id": "a", "selected": ["X", "Y"]}))),
            "question \"a\" takes one option"
        );
        assert_eq!(
            err(full(json!({"id": "a", "selected": [], "custom": "  "}))),
            "question \"a\" needs a choice or a written answer"
        );
        assert_eq!(
            err(json!([{"id": "a", "selected": ["X"]}])),
            "question \"b\" is not answered"
        );
        assert_eq!(
            err(json!([{"id": "zz", "selected": []}])),
            "no question has the id \"zz\""
        );
        assert_eq!(
            err(json!({})),
            "answers must be a list of {id, selected, custom}"
        );
    }

    #[test]
    fn the_plan_review_is_recognised_and_approval_takes_no_feedback() {
        let mut review = q(REVIEW_ID, &[APPROVE_LABEL, KEEP_PLANNING_LABEL], false);
        review.detail = Some("# Plan".into());
        let v = view("id", "s", std::slice::from_ref(&review));
        assert_eq!(v["planReview"]["plan"], "# Plan");
        assert!(view("id", "s", &[q("x", &["A"], false)])["planReview"].is_null());
        let qs = [review];
        assert!(
            validate(
                &qs,
                &json!([{"id": REVIEW_ID, "selected": [APPROVE_LABEL], "custom": "hm"}])
            )
            .is_err()
        );
        assert!(
            validate(
                &qs,
                &json!([{"id": REVIEW_ID, "selected": [KEEP_PLANNING_LABEL], "custom": "more"}])
            )
            .is_ok()
        );
    }
}
