//! The in-process providers: `spawn` (a fresh child) and `fork` (a child seeded with the
//! parent's completed turns), and their plugin rows.

use std::sync::Arc;

use dsh_agent::AgentRef;
use dsh_kernel::{BoxError, BoxFuture, Context, Plugin, PluginConfig};
use dsh_session::{Event, types};
use serde::Deserialize;

use crate::inprocess::InProcess;
use crate::provider::{ContinuableSpec, SubagentProvider};
use crate::service::Subagents;
use crate::types::{Capabilities, ResolvedStart, SubagentRun};

/// The parent's history up to and including its last `turn/end` (the turn in flight is
/// left out); empty when no turn has ended yet.
pub fn completed_turn_prefix(parent: &AgentRef) -> Vec<Arc<Event>> {
    parent.session().read(|s| {
        let events = s.events();
        match events.iter().rposition(|e| e.is(types::TURN_END)) {
            Some(i) => events[..=i].to_vec(),
            None => Vec::new(),
        }
    })
}

/// Which history an in-process child starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lineage {
    Fresh,
    Fork,
}

/// An in-process provider.
pub struct InProcessProvider {
    name: String,
    lineage: Lineage,
    driver: InProcess,
}

impl InProcessProvider {
    pub fn new(name: impl Into<String>, lineage: Lineage, driver: InProcess) -> Self {
        Self {
            name: name.into(),
            lineage,
            driver,
        }
    }
}

impl SubagentProvider for InProcessProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    fn inherits_parent_context(&self) -> bool {
        self.lineage == Lineage::Fork
    }

    fn start(&self, request: ResolvedStart) -> BoxFuture<'static, Result<SubagentRun, BoxError>> {
        let prefix = match self.lineage {
            Lineage::Fresh => Vec::new(),
            Lineage::Fork => completed_turn_prefix(&request.request.parent),
        };
        let driver = self.driver.clone();
        Box::pin(async move { driver.start(request, prefix).await })
    }

    fn prepare_continuable(&self, parent: &AgentRef) -> Option<ContinuableSpec> {
        Some(ContinuableSpec {
            prefix: match self.lineage {
                Lineage::Fresh => Vec::new(),
                Lineage::Fork => completed_turn_prefix(parent),
            },
        })
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProviderRow {
    provider_name: Option<String>,
}

fn register(ctx: &Context, config: &PluginConfig, lineage: Lineage) -> Result<(), BoxError> {
    let row: ProviderRow = config.parse()?;
    let default = match lineage {
        Lineage::Fresh => "spawn",
        Lineage::Fork => "fork",
    };
    let name = row.provider_name.unwrap_or_else(|| default.to_string());
    if name.is_empty() {
        return Err("subagent provider: `providerName` must be a non-empty string".into());
    }
    let subagents = ctx.require::<Subagents>()?;
    let provider = InProcessProvider::new(name, lineage, InProcess::from_ctx(ctx)?);
    subagents.register_provider(ctx, Arc::new(provider))?;
    Ok(())
}

/// `@deepseek-ai/dsh-subagent-spawn-in-process` (`{providerName}`, default `spawn`).
pub struct SpawnInProcessPlugin;

impl Plugin for SpawnInProcessPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-subagent-spawn-in-process"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        register(ctx, config, Lineage::Fresh)
    }
}

/// `@deepseek-ai/dsh-subagent-fork-in-process` (`{providerName}`, default `fork`).
pub struct ForkInProcessPlugin;

impl Plugin for ForkInProcessPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-subagent-fork-in-process"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        register(ctx, config, Lineage::Fork)
    }
}
