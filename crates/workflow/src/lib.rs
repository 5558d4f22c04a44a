//! Workflows (upstream `workflow/*`): the script engine on embedded QuickJS
//! (`@deepseek-ai/dsh-workflow-worker-thread`) and the model-facing `workflow`
//! (`@deepseek-ai/dsh-tool-workflow`) and `ralph` (`@deepseek-ai/dsh-tool-ralph`) tools.
//!
//! A workflow script coordinates one-shot children of the calling agent through the
//! delegation service (`dsh-subagent`): `agent()` starts one, `parallel()` and `pipeline()`
//! fan out, `phase()` and `log()` narrate. The script runs on its own thread with a bounded
//! synchronous slice and heap, and its only way out is its plain-JSON return value. See
//! README.md for the invariants.

mod engine;
mod events;
mod js;
mod meta;
mod ralph;
mod tool;

use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_prompt::SystemPrompt;
use dsh_subagent::Subagents;
use dsh_tools::ToolRegistry;
use serde::Deserialize;

pub use engine::{
    AgentOutcome, AgentStartInfo, EngineConfig, RunStop, StartSpec, WorkflowEngine,
    WorkflowObserver, WorkflowResult, WorkflowRun, default_concurrency, workflow_error,
};
pub use events::{
    WorkflowAgentEnd, WorkflowAgentEnded, WorkflowAgentStart, WorkflowAgentStarted, WorkflowEnd,
    WorkflowEnded, WorkflowLog, WorkflowNote, WorkflowPhase, WorkflowRunInfo, WorkflowStart,
};
pub use js::default_label;
pub use meta::{Meta, Phase, validate_meta};
pub use ralph::{RalphConfig, RalphTool, check_report, report_schema};
pub use tool::{WorkflowTool, WorkflowToolConfig, render_result, stop_reason_error};

const MAX_SAFE: u64 = 9_007_199_254_740_991;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EngineRow {
    provider: Option<String>,
    max_concurrent_agents: Option<u64>,
    max_total_agents: Option<u64>,
    max_items_per_call: Option<u64>,
    sync_timeout_ms: Option<u64>,
    dispose_grace_ms: Option<u64>,
}

fn at_least_one(row: &str, key: &str, v: Option<u64>) -> Result<Option<u64>, BoxError> {
    match v {
        Some(0) => Err(format!("{row}: `{key}` must be at least 1").into()),
        Some(n) if n > MAX_SAFE => Err(format!("{row}: `{key}` is too large").into()),
        other => Ok(other),
    }
}

/// `@deepseek-ai/dsh-workflow-worker-thread`: provides the [`WorkflowEngine`].
pub struct WorkflowEnginePlugin;

impl Plugin for WorkflowEnginePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-workflow-worker-thread"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: EngineRow = config.parse()?;
        const R: &str = "workflow-worker-thread";
        let mut c = EngineConfig::default();
        if let Some(p) = row.provider {
            if p.is_empty() || p != p.trim() {
                return Err(
                    format!("{R}: `provider` must be a non-empty normalized string").into(),
                );
            }
            c.provider = p;
        }
        match row.max_concurrent_agents {
            None | Some(0) => {}
            Some(n) => c.max_concurrent_agents = n.min(4096) as usize,
        }
        if let Some(n) = at_least_one(R, "maxTotalAgents", row.max_total_agents)? {
            c.max_total_agents = n;
        }
        if let Some(n) = at_least_one(R, "maxItemsPerCall", row.max_items_per_call)? {
            c.max_items_per_call = n as usize;
        }
        if let Some(n) = at_least_one(R, "syncTimeoutMs", row.sync_timeout_ms)? {
            c.sync_timeout = Duration::from_millis(n);
        }
        if let Some(n) = row.dispose_grace_ms {
            c.dispose_grace = Duration::from_millis(n);
        }
        let subagents = ctx.require::<Subagents>()?;
        ctx.provide(WorkflowEngine::new(subagents, c))?;
        Ok(())
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ToolRow {
    tool_name: Option<String>,
    max_result_chars: Option<u64>,
    enable_run_in_background: Option<bool>,
}

/// `@deepseek-ai/dsh-tool-workflow`: the `workflow` tool and its prompt section.
pub struct ToolWorkflowPlugin;

impl Plugin for ToolWorkflowPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-workflow"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: ToolRow = config.parse()?;
        let mut c = WorkflowToolConfig::default();
        if let Some(n) = row.tool_name {
            if n.is_empty() {
                return Err("tool-workflow: `toolName` must be a non-empty string".into());
            }
            c.tool_name = n;
        }
        if let Some(n) = at_least_one("tool-workflow", "maxResultChars", row.max_result_chars)? {
            c.max_result_chars = n as usize;
        }
        if let Some(b) = row.enable_run_in_background {
            c.enable_run_in_background = b;
        }
        let engine = ctx.require::<WorkflowEngine>()?;
        let tools = ctx.require::<ToolRegistry>()?;
        let prompt = ctx.require::<SystemPrompt>()?;
        let name = c.tool_name.clone();
        prompt.section(
            ctx,
            &format!("tool:{name}"),
            115.0,
            Arc::new(move |_| {
                format!("Reach for {name} only when the user asks for a workflow or for many agents working together. You write a JavaScript program (the tool description gives its format) that hands the work to many subagents, organised in phases, with structured results. For one or two delegations, call a subagent directly instead.")
            }),
        )?;
        tools.register(ctx, Arc::new(WorkflowTool::new(c, engine, ctx.clone())))?;
        Ok(())
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RalphRow {
    subagent_provider: Option<String>,
    max_rounds: Option<u64>,
    max_handoff_chars: Option<u64>,
    max_result_chars: Option<u64>,
}

/// `@deepseek-ai/dsh-tool-ralph`: the `ralph` tool and its prompt section.
pub struct ToolRalphPlugin;

impl Plugin for ToolRalphPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-ralph"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: RalphRow = config.parse()?;
        const R: &str = "tool-ralph";
        let mut c = RalphConfig::default();
        if let Some(p) = row.subagent_provider {
            if p.is_empty() || p != p.trim() {
                return Err(
                    format!("{R}: subagentProvider must be a non-empty normalized string").into(),
                );
            }
            c.subagent_provider = p;
        }
        if let Some(n) = at_least_one(R, "maxRounds", row.max_rounds)? {
            c.max_rounds = n;
        }
        if let Some(n) = at_least_one(R, "maxHandoffChars", row.max_handoff_chars)? {
            c.max_handoff_chars = n as usize;
        }
        if let Some(n) = at_least_one(R, "maxResultChars", row.max_result_chars)? {
            c.max_result_chars = n as usize;
        }
        // Ralph runs over the engine's child path; the row needs the engine like upstream's.
        ctx.require::<WorkflowEngine>()?;
        let subagents = ctx.require::<Subagents>()?;
        let tools = ctx.require::<ToolRegistry>()?;
        let prompt = ctx.require::<SystemPrompt>()?;
        prompt.section(
            ctx,
            "tool:ralph",
            116.0,
            Arc::new(|_| {
                "Use the ralph tool only when the user explicitly asks for a Ralph loop or for iterating with fresh agents. Every round starts a new child with no conversation behind it; the shared workspace is what carries over. A round's completion or blocker is the worker's own report, not an independent check. For ordinary long work in this session use the goal tools; for bounded delegation or fan-out use subagents or workflows.".to_string()
            }),
        )?;
        let ralph = dsh_tools::Typed::new(RalphTool::new(c, subagents, ctx.clone()))?;
        tools.register(ctx, Arc::new(ralph))?;
        Ok(())
    }
}

/// Adds the production rows of this crate to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(WorkflowEnginePlugin)
        .register(ToolWorkflowPlugin)
        .register(ToolRalphPlugin);
}
