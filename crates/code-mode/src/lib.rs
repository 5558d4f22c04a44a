//! Code Mode: the `run_code` tool. The model writes one TypeScript program (the body of an
//! async function) that calls tools as `await tools.name(args)`; its types are erased and
//! the program runs in an embedded QuickJS engine with time and memory limits and no
//! filesystem or network of its own, and every tool call goes through the registry's
//! pipeline exactly as a native call.
//!
//! The plugin `@deepseek-ai/dsh-code-runtime-worker-thread` (upstream's row name) installs
//! the tool and the SDK prompt section; the `tools` row's `mode` decides whether the model
//! sees it (`code`, `both`) or not (`native`).

mod engine;
mod heap;
mod render;
mod sdk;
mod strip;
mod tool;
mod ts_types;

use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_prompt::SystemPrompt;
use dsh_tools::{ToolRegistry, ToolsMode};
use serde::Deserialize;

pub use engine::{
    FailureKind, HostCall, HostReply, Limits, RunFailure, RunOutcome, adopt_failed_job,
    render_thrown, run_pending_jobs, run_program,
};
pub use heap::{Heap, metered_runtime};
pub use render::render_value;
pub use sdk::render_sdk;
pub use strip::{StripError, strip_types};
pub use tool::RunCodeTool;
pub use ts_types::json_schema_to_ts;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RuntimeConfig {
    compute_ms: Option<u64>,
    max_wall_ms: Option<u64>,
    max_output_bytes: Option<usize>,
    max_old_generation_size_mb: Option<usize>,
}

/// `@deepseek-ai/dsh-code-runtime-worker-thread` (config `{computeMs?, maxWallMs?,
/// maxOutputBytes?, maxOldGenerationSizeMb?}`): the code runtime and `run_code`.
pub struct CodeRuntimePlugin;

impl Plugin for CodeRuntimePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-code-runtime-worker-thread"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: RuntimeConfig = config.parse()?;
        let mut limits = Limits::default();
        let positive = |name: &str, v: u64| -> Result<u64, BoxError> {
            if v == 0 {
                return Err(format!("code-runtime: {name} must be positive").into());
            }
            Ok(v)
        };
        if let Some(ms) = c.compute_ms {
            limits.compute = Duration::from_millis(positive("computeMs", ms)?);
        }
        if let Some(ms) = c.max_wall_ms {
            limits.wall = Duration::from_millis(positive("maxWallMs", ms)?);
        }
        if let Some(b) = c.max_output_bytes {
            limits.max_output_bytes = positive("maxOutputBytes", b as u64)? as usize;
        }
        if let Some(mb) = c.max_old_generation_size_mb {
            limits.memory_bytes =
                positive("maxOldGenerationSizeMb", mb as u64)? as usize * 1024 * 1024;
        }
        let registry = ctx.require::<ToolRegistry>()?;
        registry.register_code_tool(
            ctx,
            Arc::new(dsh_tools::Typed::new(RunCodeTool::new(limits))?),
        )?;
        if registry.mode() != ToolsMode::Native {
            let prompt = ctx.require::<SystemPrompt>()?;
            let tools = registry.clone();
            prompt.section(
                ctx,
                "tools:code-mode",
                50.0,
                Arc::new(move |a| {
                    let session = a.session.as_ref().map(|s| s.id());
                    sdk::render_sdk(
                        tools.mode_for(session.as_deref()),
                        &tools.native_schemas_in(&a.ctx, session.as_deref()),
                        &tools.output_schemas(&a.ctx),
                    )
                }),
            )?;
        }
        Ok(())
    }
}
