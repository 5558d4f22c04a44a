//! Dynamic packages (upstream `cordis-host-runner` and `tool-cordis`): the model defines,
//! runs, inspects and removes process-local plugins written in JavaScript.
//!
//! * `@deepseek-ai/dsh-cordis-host-runner` provides [`DynamicPackages`] (upstream's
//!   `dynamicCordisRunner`): the per-session registry of plugins and immutable packages,
//!   and the runs. A package's host half runs in an embedded QuickJS engine on its own
//!   thread, with a compute slice per entry and a heap limit; `apply(ctx)` gets a small
//!   façade whose `ctx.tools.register` adds model-visible tools that call back into it.
//! * `@deepseek-ai/dsh-tool-cordis` registers the seven model-facing `cordis_*` tools, the
//!   `tool:cordis` system-prompt section, and the `@pluginId` reference context.
//!
//! Nothing is written to disk: definitions vanish with the process.

mod dynamic_tool;
mod engine;
mod inspect;
mod json;
mod reference;
mod runner;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_prompt::SystemPrompt;
use dsh_tools::ToolRegistry;
use serde::Deserialize;

pub use engine::{Limits, precheck};
pub use json::pretty;
pub use reference::{referenced_plugin_ids, render_reference};
pub use runner::{
    DefineReceipt, DefineRequest, DynamicPackages, PluginChoice, RunMode, RunReceipt,
};
pub use tools::{CordisTool, Verb};

/// The `tool:cordis` system-prompt section.
pub const PROMPT_SECTION: &str = "# Dynamic packages

The cordis_* tools let you extend this running dsh process with a plugin written in plain JavaScript. Use them only when the user wants a temporary extension of this harness (for example a new tool for this session), not as a default way to do work.

- A plugin has immutable packages (versions). cordis_define records one and runs nothing; cordis_run starts an exact package; cordis_stop stops it and keeps it; cordis_undefine deletes the plugin. cordis_inspect_self shows what this session defined, including the source, registered tools and the last error of a package.
- Everything lives in this process's memory only: no file, config or install changes, and nothing survives a restart.
- code.host is the body of an async function that returns the plugin, e.g. `return { apply(ctx) { ctx.tools.register({ name: 'word_count', description: 'Count words', parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] }, execute(args) { return String(args.text.split(/\\s+/).filter(Boolean).length) } }) } }`. A registered tool becomes callable from your next step; a string result is its text, other JSON is shown as JSON, a throw is a tool error.
- The host half has no timers, modules, filesystem, network or process access, and every entry into it has a time and memory budget. Ask cordis_inspect_list and cordis_inspect_query what the runtime offers before relying on a service or builtin.
- When the user writes @<pluginId>, you get that plugin's ids and state (not its source) as context: change that plugin (read the package with cordis_inspect_self, define a new version on it) rather than creating another one.
- When a run fails, read the error, fix the code and define a new package on the same plugin (plugin.kind \"existing\"), then cordis_run it with mode \"update\" (or \"run\" when it never ran).";

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RunnerConfig {
    vm_timeout_ms: Option<u64>,
    memory_limit_mb: Option<u64>,
}

/// `@deepseek-ai/dsh-cordis-host-runner` (config `{vmTimeoutMs?, memoryLimitMb?}`): the
/// [`DynamicPackages`] service. `vmTimeoutMs` (default 5000) bounds each entry into a
/// package's JavaScript; `memoryLimitMb` (default 64) is each package's heap.
pub struct CordisHostRunnerPlugin;

impl Plugin for CordisHostRunnerPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-cordis-host-runner"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: RunnerConfig = config.parse()?;
        let mut limits = Limits::default();
        match c.vm_timeout_ms {
            Some(0) => return Err("cordis-host-runner: vmTimeoutMs must be positive".into()),
            Some(ms) => limits.slice = Duration::from_millis(ms),
            None => {}
        }
        match c.memory_limit_mb {
            Some(0) => return Err("cordis-host-runner: memoryLimitMb must be positive".into()),
            Some(mb) => limits.memory_bytes = usize::try_from(mb)?.saturating_mul(1024 * 1024),
            None => {}
        }
        let tools = ctx.require::<ToolRegistry>()?;
        let runner = DynamicPackages::new(ctx.clone(), tools, limits);
        ctx.provide(runner.clone())?;
        // Unloading the row stops every run (their fibers are children of this one, so
        // their tools go anyway; this also ends the engine threads).
        let weak = Arc::downgrade(&runner);
        ctx.effect("cordis-runs", move || {
            if let Some(runner) = weak.upgrade() {
                runner.shutdown();
            }
        })?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-tool-cordis`: the `cordis_*` tools and their prompt section. Needs
/// the host runner row.
pub struct ToolCordisPlugin;

impl Plugin for ToolCordisPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-cordis"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let runner = ctx.require::<DynamicPackages>()?;
        let tools = ctx.require::<ToolRegistry>()?;
        if let Some(prompt) = ctx.get::<SystemPrompt>() {
            prompt.section(
                ctx,
                "tool:cordis",
                115.0,
                Arc::new(|_| PROMPT_SECTION.to_string()),
            )?;
        }
        reference::install(ctx, &runner)?;
        for verb in Verb::ALL {
            tools.register(
                ctx,
                Arc::new(CordisTool::new(verb, runner.clone(), tools.clone())),
            )?;
        }
        Ok(())
    }
}

/// Adds the production rows of this crate to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(CordisHostRunnerPlugin)
        .register(ToolCordisPlugin);
}
