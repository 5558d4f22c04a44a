//! `@deepseek-ai/dsh-tool-call-timeout-policy`: enforces the budget a tool declares
//! (`Tool::timeout_ms`). `tools/execute` (waterfall, global): a call that has not settled
//! within its tool's budget is stopped (its body future is dropped, which cancels its work
//! and kills its processes) and its result becomes upstream's `Error: tool call timed out
//! after <ms>ms` with `{name: "ToolTimeoutError", code: "TOOL_TIMEOUT"}`. Tools without a
//! budget are passed through unchanged.

use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_session::ErrorInfo;
use dsh_tools::{Execute, ToolRegistry, ToolResult};

/// The row.
pub struct ToolCallTimeoutPolicyPlugin;

impl Plugin for ToolCallTimeoutPolicyPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-call-timeout-policy"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let tools = Arc::downgrade(&ctx.require::<ToolRegistry>()?);
        ctx.on_waterfall::<Execute>(ListenOptions::GLOBAL, move |exec, next| {
            let budget = tools
                .upgrade()
                .and_then(|t| t.get(&exec.ctx, &exec.name))
                .and_then(|tool| tool.timeout_ms());
            Box::pin(async move {
                let Some(ms) = budget else {
                    return next.run().await;
                };
                match tokio::time::timeout(Duration::from_millis(ms), next.run()).await {
                    Ok(result) => result,
                    Err(_) => Ok(ToolResult::failure(
                        format!("tool call timed out after {ms}ms"),
                        Some(ErrorInfo {
                            name: "ToolTimeoutError".into(),
                            code: "TOOL_TIMEOUT".into(),
                        }),
                    )),
                }
            })
        })?;
        Ok(())
    }
}
