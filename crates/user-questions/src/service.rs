//! The `UserQuestions` service (upstream `ctx.userQuestions`).

use std::sync::{Arc, RwLock};

use dsh_agent::{AgentRef, Agents};
use dsh_kernel::{BoxError, BoxFuture, Context, EffectHandle, HarnessError};
use tokio_util::sync::CancellationToken;

use crate::types::{Answer, Question};

/// A request for a human answer.
pub struct AskRequest {
    pub questions: Vec<Question>,
    /// The exact live agent asking, when the request comes from a tool call.
    pub agent: Option<AgentRef>,
    /// Cancelled when the asking tool call or step is.
    pub cancel: CancellationToken,
}

/// The UI side: shows the questions and collects the answer.
pub trait QuestionProvider: Send + Sync + 'static {
    fn ask(&self, request: AskRequest) -> BoxFuture<'static, Result<Answer, BoxError>>;
}

/// A `UserQuestionError` with `code`.
pub fn question_error(code: &'static str, message: impl Into<String>) -> BoxError {
    Box::new(HarnessError::new("UserQuestionError", code, message))
}

/// One active UI provider and the `ask` seam in front of it.
pub struct UserQuestions {
    ctx: Context,
    provider: RwLock<Option<Arc<dyn QuestionProvider>>>,
}

impl UserQuestions {
    pub fn new(ctx: Context) -> Arc<Self> {
        Arc::new(Self {
            ctx,
            provider: RwLock::new(None),
        })
    }

    /// Registers the UI provider for as long as `ctx` (its plugin) lives. Only one
    /// provider may be active.
    pub fn register_provider(
        self: &Arc<Self>,
        ctx: &Context,
        provider: Arc<dyn QuestionProvider>,
    ) -> Result<EffectHandle, BoxError> {
        {
            let mut slot = self.provider.write().unwrap_or_else(|p| p.into_inner());
            if slot.is_some() {
                return Err(question_error(
                    "DUPLICATE_PROVIDER",
                    "a user-questions provider is already registered",
                ));
            }
            *slot = Some(provider);
        }
        let this = Arc::downgrade(self);
        Ok(ctx.effect("user-questions provider", move || {
            if let Some(this) = this.upgrade() {
                *this.provider.write().unwrap_or_else(|p| p.into_inner()) = None;
            }
        })?)
    }

    /// Asks the UI provider and waits for the human's answer.
    ///
    /// A supplied agent must be the registry's exact live instance (`CALLER_NOT_LIVE`)
    /// and a runtime root: an agent owned by another live agent (a delegated child) has
    /// no human to answer it (`DELEGATED_CALLER`), and is refused before any provider is
    /// reached. Ownership, not the session's recorded lineage, decides: a child session
    /// resumed on its own is a root and may ask.
    pub async fn ask(&self, request: AskRequest) -> Result<Answer, BoxError> {
        if request.cancel.is_cancelled() {
            return Err(question_error(
                "ASK_ABORTED",
                "ask_user_question was aborted before the user answered",
            ));
        }
        if request.questions.is_empty() {
            return Err(question_error(
                "EMPTY_QUESTIONS",
                "ask_user_question requires at least one question",
            ));
        }
        if let Some(agent) = &request.agent {
            let agents = self.ctx.get::<Agents>();
            let live = agents
                .as_ref()
                .and_then(|a| a.get(agent.id()))
                .is_some_and(|live| Arc::ptr_eq(&live, agent));
            if !live {
                return Err(question_error(
                    "CALLER_NOT_LIVE",
                    "the asking agent is not the live instance registered under its id; questions must come from the live calling agent",
                ));
            }
            if !agents.is_some_and(|a| a.is_root(agent.id())) {
                return Err(question_error(
                    "DELEGATED_CALLER",
                    "human interaction is unavailable while the calling agent is owned by another live agent; include the unresolved question or decision in the child agent's final result",
                ));
            }
        }
        let provider = self
            .provider
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| {
                question_error("NO_PROVIDER", "no user-questions provider is registered")
            })?;
        let cancel = request.cancel.clone();
        tokio::select! {
            answer = provider.ask(request) => answer,
            () = cancel.cancelled() => Err(question_error(
                "ASK_ABORTED",
                "ask_user_question was aborted before the user answered",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::types::AnswerItem;

    struct Fixed;
    impl QuestionProvider for Fixed {
        fn ask(&self, _r: AskRequest) -> BoxFuture<'static, Result<Answer, BoxError>> {
            Box::pin(async {
                Ok(Answer {
                    answers: vec![AnswerItem {
                        id: "q".into(),
                        selected: vec![],
                        custom: Some("typed".into()),
                    }],
                })
            })
        }
    }

    fn question() -> Question {
        Question {
            id: "q".into(),
            question: "?".into(),
            detail: None,
            header: None,
            options: None,
            multi_select: None,
        }
    }

    #[tokio::test]
    async fn one_provider_at_a_time_and_it_leaves_with_its_plugin() {
        let root = Context::new_root();
        let service = UserQuestions::new(root.clone());
        let handle = service.register_provider(&root, Arc::new(Fixed)).unwrap();
        let again = service
            .register_provider(&root, Arc::new(Fixed))
            .unwrap_err();
        assert_eq!(
            again.to_string(),
            "a user-questions provider is already registered"
        );
        let answer = service
            .ask(AskRequest {
                questions: vec![question()],
                agent: None,
                cancel: CancellationToken::new(),
            })
            .await
            .unwrap();
        assert_eq!(
            crate::render_answer(&answer),
            r#"{"answers":[{"id":"q","selected":[],"custom":"typed"}]}"#
        );
        handle.dispose();
        let cancelled = CancellationToken::new();
        cancelled.cancel();
        let aborted = service
            .ask(AskRequest {
                questions: vec![question()],
                agent: None,
                cancel: cancelled,
            })
            .await
            .unwrap_err();
        assert_eq!(
            HarnessError::find(aborted.as_ref()).unwrap().code,
            "ASK_ABORTED"
        );
        let none = service
            .ask(AskRequest {
                questions: vec![question()],
                agent: None,
                cancel: CancellationToken::new(),
            })
            .await
            .unwrap_err();
        assert_eq!(none.to_string(), "no user-questions provider is registered");
    }
}
