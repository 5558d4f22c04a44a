//! What a tool is: a model-facing schema plus a typed handler behind an erased trait.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dsh_kernel::{BoxError, BoxFuture, Context, HarnessError};
use dsh_llm::{ContentBlock, Message, ToolSchema};
use dsh_session::LiveSession;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The successful output of a tool body.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOutput {
    /// What the model sees.
    pub content: Vec<ContentBlock>,
    /// Durable presentation metadata (`tool/result.data.meta`), top-level calls only.
    pub meta: Option<Value>,
}

impl ToolOutput {
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![ContentBlock::text(text)],
            meta: None,
        }
    }
}

/// What a running tool body can reach.
#[derive(Clone)]
pub struct ToolRunContext {
    pub call_id: String,
    pub name: String,
    /// The context of the calling agent (scoped), for services.
    pub ctx: Context,
    pub session: Option<Arc<LiveSession>>,
    /// The session working directory.
    pub cwd: Option<PathBuf>,
    pub cancel: CancellationToken,
    pub(crate) deferred: Arc<Mutex<Vec<Message>>>,
    pub(crate) concluded: Arc<Mutex<bool>>,
    /// The call's canonical JSON value (what a Code Mode program receives), if the tool
    /// reports one.
    pub(crate) value: Arc<Mutex<Option<Value>>>,
    /// The call's arguments as the model sent them, kept by a typed tool's adapter for
    /// bodies that hand them on (an approval request shows what was asked).
    pub(crate) arguments: Option<Arc<Value>>,
}

impl ToolRunContext {
    /// The call's arguments as sent (undeclared keys included); `null` outside a typed
    /// tool's body.
    pub fn arguments(&self) -> &Value {
        static NULL: Value = Value::Null;
        self.arguments.as_deref().unwrap_or(&NULL)
    }

    /// Queues a context message for the model's next step (after this step's results).
    pub fn defer_context(&self, message: Message) {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(message);
    }

    /// Reports the call's canonical JSON value: what a Code Mode program's binding resolves
    /// to. Tools that report none resolve to their result text.
    pub fn set_value(&self, value: Value) {
        *self.value.lock().unwrap_or_else(|p| p.into_inner()) = Some(value);
    }

    /// Marks that this call's result concludes the turn.
    pub fn conclude_turn(&self) {
        *self.concluded.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }
}

/// A tool. Implementations must be cancellation-aware (watch `ctx.cancel` and stop promptly,
/// killing any child processes), must not panic on any argument value (arguments reaching
/// `execute` were validated against `schema()` but may carry extra keys), and report
/// failures as errors: a [`HarnessError`] carries a durable `{name, code}`; any other
/// error is reported by its message alone.
pub trait Tool: Send + Sync + 'static {
    /// Name, description and parameter schema, as the model sees them.
    fn schema(&self) -> &ToolSchema;
    /// The JSON Schema of the canonical value the tool reports through
    /// [`ToolRunContext::set_value`], if it declares one. Kept beside, never inside,
    /// [`ToolSchema`]: providers never receive it; Code Mode types `ToolOutputMap` from it.
    fn output_schema(&self) -> Option<&Value> {
        None
    }
    /// Validates arguments (default: none); the message is the full error text body.
    fn validate(&self, _args: &Value) -> Result<(), String> {
        Ok(())
    }
    /// Only an exact `true` lets calls run in parallel with their neighbours.
    fn concurrency_safe(&self, _args: &Value) -> bool {
        false
    }
    /// A cooperative deadline enforced by a timeout policy, if any.
    fn timeout_ms(&self) -> Option<u64> {
        None
    }
    /// Runs the tool.
    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>>;
}

/// Errors with upstream's codes.
pub fn args_error(message: impl Into<String>) -> BoxError {
    Box::new(HarnessError::new("ToolArgsError", "INVALID_ARGS", message))
}
