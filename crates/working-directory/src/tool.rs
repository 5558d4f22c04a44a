//! `working_directory`: the model reads the session's directory, or moves it with `cd`.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{BoxError, BoxFuture, Context, Plugin, PluginConfig};
use dsh_llm::ToolSchema;
use dsh_tools::{ObjectSchema, Prop, Tool, ToolOutput, ToolRegistry, ToolRunContext};
use serde_json::Value;

/// The tool's name (upstream's).
pub const WORKING_DIRECTORY_TOOL: &str = "working_directory";

const DESCRIPTION: &str = "Shows the session's working directory, or moves the session into \
another existing directory when `cd` is given (relative to the current one). Later tool calls \
start there; shells and processes already running stay where they are.";

/// The `working_directory` tool.
pub struct WorkingDirectoryTool {
    schema: ToolSchema,
    params: ObjectSchema,
}

impl Default for WorkingDirectoryTool {
    fn default() -> Self {
        let params = ObjectSchema::new().optional(
            "cd",
            Prop::string(
                "An existing directory to move to; leave it out to only read the current one.",
            ),
        );
        Self {
            schema: ToolSchema {
                name: WORKING_DIRECTORY_TOOL.into(),
                description: DESCRIPTION.into(),
                parameters: params.to_value().into(),
            },
            params,
        }
    }
}

impl Tool for WorkingDirectoryTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        self.params.validate(args)
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        Box::pin(async move {
            let Some(session) = ctx.session.clone() else {
                return Err("working-directory: this call has no session".into());
            };
            let origin = session
                .header()
                .cwd
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/"));
            let current = ctx.cwd.clone().unwrap_or_else(|| origin.clone());
            let cd = args.get("cd").and_then(Value::as_str).map(str::to_owned);
            let settled = crate::settle(&session, &current, &origin, cd.as_deref())?;
            if let Some(message) = settled.notice {
                ctx.defer_context(message);
            }
            let cwd = settled.cwd.display().to_string();
            ctx.set_value(Value::from(cwd.clone()));
            Ok(ToolOutput::text(cwd))
        })
    }
}

/// `@deepseek-ai/dsh-tool-working-directory` (no config).
pub struct WorkingDirectoryToolPlugin;

impl Plugin for WorkingDirectoryToolPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-working-directory"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.require::<ToolRegistry>()?
            .register(ctx, Arc::new(WorkingDirectoryTool::default()))?;
        Ok(())
    }
}
