//! Replay-only fixtures of upstream's snapshot suite (never in a production tree: only
//! `dsh acp` under `DSH_SNAPSHOT=replay` registers them).

use std::sync::Arc;

use dsh_agent::SubagentEnd;
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};

use crate::inprocess::PublishedRunFaults;

/// `@deepseek-ai/dsh-test-subagent-settlement-marker`: writes an empty
/// `.dsh-snapshot-subagent-settled` in the process cwd on every `subagent/end`, so a
/// scenario can wait for a child's settlement.
pub struct SettlementMarkerPlugin;

impl Plugin for SettlementMarkerPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-test-subagent-settlement-marker"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.on_emit::<SubagentEnd>(ListenOptions::GLOBAL, |_| {
            let path = std::env::current_dir()?.join(".dsh-snapshot-subagent-settled");
            std::fs::write(path, "")?;
            Ok(())
        })?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-test-subagent-durability-failure`: with
/// `DSH_SUBAGENT_PUBLISHED_FAILURE=1`, every published child's prompt delivery fails and
/// its disposal fails after really disposing (the parent must report both).
pub struct DurabilityFailurePlugin;

impl Plugin for DurabilityFailurePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-test-subagent-durability-failure"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        if std::env::var("DSH_SUBAGENT_PUBLISHED_FAILURE").as_deref() == Ok("1") {
            ctx.provide(Arc::new(PublishedRunFaults {
                followup: "snapshot published run failed".into(),
                dispose: "snapshot published handle disposal failed".into(),
            }))?;
        }
        Ok(())
    }
}

/// `@deepseek-ai/dsh-test-subagent-continuable-fence`: a new continuable child's first step
/// waits until its parent has gone idle (ended the turn that started it). Replay runs are
/// faster than the recordings; without the fence a child could settle while its parent is
/// still in that turn, and its notice would land in a different turn than recorded.
pub struct ContinuableFencePlugin;

impl Plugin for ContinuableFencePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-test-subagent-continuable-fence"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let subagents = ctx.require::<crate::service::Subagents>()?;
        let agents = ctx.require::<dsh_agent::Agents>()?;
        ctx.on_waterfall::<dsh_agent::PreStep>(ListenOptions::GLOBAL, move |p, next| {
            let parent = (p.turn == 1 && p.step == 1)
                .then(|| {
                    subagents
                        .continuations()
                        .ok()
                        .filter(|c| c.is_resident(p.agent.id()))
                        .and_then(|_| p.agent.session().header().parent_session)
                        .and_then(|id| agents.get(&id))
                })
                .flatten();
            Box::pin(async move {
                if let Some(parent) = parent {
                    tokio::select! {
                        _ = parent.when_idle() => {}
                        _ = p.cancel.cancelled() => {}
                    }
                }
                next.run().await
            })
        })?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-test-parent-sandbox-override`: every root session starts read-only
/// (`sandbox/mode` appended when its agent is created), the way a user switching a session's
/// access would.
pub struct ParentSandboxOverridePlugin;

impl Plugin for ParentSandboxOverridePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-test-parent-sandbox-override"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.on_emit::<dsh_agent::AgentCreated>(ListenOptions::GLOBAL, |p| {
            if p.agent.session().header().parent_session.is_none() {
                p.agent.session().append(
                    "sandbox/mode",
                    serde_json::json!({"mode": "read-only"}),
                    None,
                )?;
            }
            Ok(())
        })?;
        Ok(())
    }
}
