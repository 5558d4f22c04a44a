//! `structured_output`: the child-scoped tool through which a child asked for a schema
//! reports its result. Its arguments are checked against the schema; the first accepted
//! call concludes the turn and is captured once its result is final; later calls of any
//! tool are refused.

use std::sync::{Arc, Mutex};

use dsh_kernel::{BoxError, BoxFuture, Context, ListenOptions};
use dsh_llm::ToolSchema;
use dsh_prompt::SystemPrompt;
use dsh_tools::{Tool, ToolOutput, ToolRegistry, ToolResultEvent, ToolRunContext, args_error};
use serde_json::Value;

use crate::schema::validate;

pub const STRUCTURED_OUTPUT_TOOL: &str = "structured_output";

const INSTRUCTION: &str = "Your result must be delivered by calling the `structured_output` tool once, with arguments that match its parameter schema exactly. A plain-text final answer does not count as your result.";

/// The value a child reported (shared between its tool and the driver).
#[derive(Clone, Default)]
pub struct StructuredCapture {
    inner: Arc<Mutex<CaptureState>>,
}

#[derive(Default)]
struct CaptureState {
    /// Accepted by the tool body, waiting for the call's final result.
    staged: Vec<(String, Value)>,
    captured: Option<Value>,
}

impl StructuredCapture {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CaptureState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The captured value, if the child reported one.
    pub fn value(&self) -> Option<Value> {
        self.lock().captured.clone()
    }

    fn closed(&self) -> bool {
        let s = self.lock();
        s.captured.is_some() || !s.staged.is_empty()
    }
}

struct StructuredTool {
    schema: ToolSchema,
    params: Value,
    capture: StructuredCapture,
}

impl Tool for StructuredTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn output_schema(&self) -> Option<&Value> {
        Some(crate::outputs::structured())
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let violations = validate(&self.params, &args, "arguments");
        let capture = self.capture.clone();
        Box::pin(async move {
            if !violations.is_empty() {
                return Err(args_error(violations.join("; ")));
            }
            capture.lock().staged.push((ctx.call_id.clone(), args));
            ctx.conclude_turn();
            ctx.set_value(serde_json::json!({"recorded": true}));
            Ok(ToolOutput::text("Structured output recorded."))
        })
    }
}

/// Registers the tool, its prompt section and the guard in the child's scope.
pub fn attach_structured_output(
    child_ctx: &Context,
    prompt: &Arc<SystemPrompt>,
    tools: &Arc<ToolRegistry>,
    schema: Value,
    capture: StructuredCapture,
) -> Result<(), BoxError> {
    tools.register(
        child_ctx,
        Arc::new(StructuredTool {
            schema: ToolSchema {
                name: STRUCTURED_OUTPUT_TOOL.into(),
                description: "Deliver your final result as structured data. Call it once, when the work is done; the arguments must satisfy this tool's parameter schema.".into(),
                parameters: schema.clone().into(),
            },
            params: schema,
            capture: capture.clone(),
        }),
    )?;
    prompt.section(
        child_ctx,
        &format!("tool:{STRUCTURED_OUTPUT_TOOL}"),
        190.0,
        Arc::new(|_| INSTRUCTION.to_string()),
    )?;
    let guard_capture = capture.clone();
    tools.guard(
        child_ctx,
        Arc::new(move |exec| {
            guard_capture.closed().then(|| {
                format!(
                    "structured output already recorded: the run is complete, so `{}` is not executed",
                    exec.name
                )
            })
        }),
    )?;
    child_ctx.on_emit::<ToolResultEvent>(ListenOptions::default(), move |p| {
        if p.exec.name != STRUCTURED_OUTPUT_TOOL {
            return Ok(());
        }
        let mut s = capture.lock();
        let Some(i) = s.staged.iter().position(|(id, _)| *id == p.exec.call_id) else {
            return Ok(());
        };
        let (_, value) = s.staged.remove(i);
        if !p.result.is_error && s.captured.is_none() {
            s.captured = Some(value);
        }
        Ok(())
    })?;
    Ok(())
}
