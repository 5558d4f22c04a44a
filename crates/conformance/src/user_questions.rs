//! `@deepseek-ai/dsh-test-child-question-tripwire` (upstream's human-interaction fixture).

use std::sync::Arc;

use dsh_kernel::{BoxError, BoxFuture, Context, Plugin, PluginConfig};
use dsh_user_questions::{Answer, AskRequest, QuestionProvider, UserQuestions};

struct Tripwire;

impl QuestionProvider for Tripwire {
    fn ask(&self, _request: AskRequest) -> BoxFuture<'static, Result<Answer, BoxError>> {
        Box::pin(async {
            Err("snapshot tripwire: delegated question reached the UI provider".into())
        })
    }
}

/// `@deepseek-ai/dsh-test-child-question-tripwire` (replay only): a UI provider that must
/// never be reached — the delegated caller is refused before it.
pub struct ChildQuestionTripwirePlugin;

impl Plugin for ChildQuestionTripwirePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-test-child-question-tripwire"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.require::<UserQuestions>()?
            .register_provider(ctx, Arc::new(Tripwire))?;
        Ok(())
    }
}
