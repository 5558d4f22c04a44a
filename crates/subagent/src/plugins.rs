//! The service rows.

use std::sync::Arc;

use dsh_agent::AgentDisposing;
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};

use crate::continuation::Continuations;
use crate::service::Subagents;

/// `@deepseek-ai/dsh-subagent`: provides the [`Subagents`] service and its continuation
/// manager. Disposing an agent first disposes its resident continuable descendants
/// (`agent/disposing`); unloading the row drains every one.
pub struct SubagentPlugin;

impl Plugin for SubagentPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-subagent"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "maxDepth",
                "set maxDepth on the tool-subagent and tool-subagent-fork rows (0.1's place for it), which this build reads",
            ),
            (
                "maxActiveSubagents",
                "this build does not cap how many subagents run at once",
            ),
        ]
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let subagents = Subagents::new(ctx.with_scope(None));
        let manager = Continuations::new(ctx, Arc::downgrade(&subagents))?;
        subagents.set_continuations(manager.clone());
        ctx.provide(subagents)?;
        let weak = Arc::downgrade(&manager);
        ctx.on_serial::<AgentDisposing>(ListenOptions::GLOBAL, move |p| {
            let weak = weak.clone();
            Box::pin(async move {
                if let Some(m) = weak.upgrade()
                    && let Err(e) = m.drain_descendants(std::slice::from_ref(&p.agent)).await
                {
                    tracing::warn!("{e}");
                }
                Ok(())
            })
        })?;
        let weak = Arc::downgrade(&manager);
        ctx.effect("continuable subagents drain", move || {
            if let Some(m) = weak.upgrade()
                && let Ok(rt) = tokio::runtime::Handle::try_current()
            {
                rt.spawn(async move { m.drain().await });
            }
        })?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-session-projection`: upstream's projection registry, which its
/// `list_agents` folds descriptors through. This build folds descriptors directly, so the
/// row only has to load for upstream's compositions to load.
pub struct SessionProjectionPlugin;

impl Plugin for SessionProjectionPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-session-projection"
    }

    fn apply(&self, _ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        Ok(())
    }
}
