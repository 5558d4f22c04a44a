//! `working_directory`: the model reads the session's directory, or moves it with `cd`.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_tools::{Reply, ToolRegistry, ToolRunContext, Typed, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;

/// The tool's name (upstream's).
pub const WORKING_DIRECTORY_TOOL: &str = "working_directory";

const DESCRIPTION: &str = "Shows the session's working directory, or moves the session into \
another existing directory when `cd` is given (relative to the current one). Later tool calls \
start there; shells and processes already running stay where they are.";

/// The `working_directory` tool.
#[derive(Default)]
pub struct WorkingDirectoryTool;

// The arguments (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
pub struct WorkingDirectoryArgs {
    /// An existing directory to move to; leave it out to only read the current one.
    cd: Option<String>,
}

impl TypedTool for WorkingDirectoryTool {
    type Args = WorkingDirectoryArgs;
    /// The session's directory after the call.
    type Value = String;

    fn name(&self) -> String {
        WORKING_DIRECTORY_TOOL.into()
    }

    fn description(&self) -> String {
        DESCRIPTION.into()
    }

    fn value_schema(&self) -> Result<Option<serde_json::Value>, String> {
        Ok(None)
    }

    async fn run(
        self: Arc<Self>,
        args: WorkingDirectoryArgs,
        ctx: ToolRunContext,
    ) -> Result<Reply<String>, BoxError> {
        let Some(session) = ctx.session.clone() else {
            return Err("working-directory: this call has no session".into());
        };
        let origin = session
            .header()
            .cwd
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/"));
        let current = ctx.cwd.clone().unwrap_or_else(|| origin.clone());
        let settled = crate::settle(&session, &current, &origin, args.cd.as_deref())?;
        if let Some(message) = settled.notice {
            ctx.defer_context(message);
        }
        let cwd = settled.cwd.display().to_string();
        Ok(Reply::text(cwd.clone()).with_value(cwd))
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
            .register(ctx, Arc::new(Typed::new(WorkingDirectoryTool)?))?;
        Ok(())
    }
}
