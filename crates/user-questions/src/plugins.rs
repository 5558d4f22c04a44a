//! The rows.

use std::sync::Arc;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_tools::ToolRegistry;

use crate::service::UserQuestions;
use crate::tool::AskUserTool;

/// `@deepseek-ai/dsh-user-questions`: provides the [`UserQuestions`] service. A UI
/// registers the provider that actually asks the human.
pub struct UserQuestionsPlugin;

impl Plugin for UserQuestionsPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-user-questions"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.provide(UserQuestions::new(ctx.clone()))?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-tool-ask-user`: the `ask_user_question` tool.
pub struct ToolAskUserPlugin;

impl Plugin for ToolAskUserPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-ask-user"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let service = ctx.require::<UserQuestions>()?;
        let tools = ctx.require::<ToolRegistry>()?;
        tools.register(ctx, Arc::new(AskUserTool::new(service, ctx.clone())))?;
        Ok(())
    }
}
