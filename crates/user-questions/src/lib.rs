//! Human questions (upstream `interaction/user-questions` and `interaction/tool-ask-user`):
//! the [`UserQuestions`] service, which forwards a question to the one registered UI
//! [`QuestionProvider`] and refuses callers no human can answer (an agent owned by another
//! live agent), and the model-facing `ask_user_question` tool.

mod plugins;
mod service;
mod tool;
mod types;

pub use plugins::{ToolAskUserPlugin, UserQuestionsPlugin};
pub use service::{AskRequest, QuestionProvider, UserQuestions, question_error};
pub use tool::{ASK_USER_TOOL, render_answer};
pub use types::{Answer, AnswerItem, Question, QuestionOption};

/// Adds the production rows of this crate to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(UserQuestionsPlugin)
        .register(ToolAskUserPlugin);
}
