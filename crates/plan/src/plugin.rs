//! The `@deepseek-ai/dsh-plan-mode` row.

use std::sync::Arc;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_tools::ToolRegistry;
use serde::Deserialize;

use crate::service::PlanMode;
use crate::tool::ExitPlanModeTool;

/// Deployment-owned plan guidance: `{section}`, nothing else.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanModeConfig {
    /// Rendered verbatim as the `plan:policy` prompt section while plan mode is active.
    pub section: String,
}

impl PlanModeConfig {
    /// Parses and checks a row's config. The load fails when `section` is missing, blank or
    /// not a string, or when the row has a key we do not know.
    pub fn from_row(config: &PluginConfig) -> Result<Self, BoxError> {
        let parsed: Self = config.parse()?;
        if parsed.section.trim().is_empty() {
            return Err(format!(
                "{}: row \"{}\": config field `section`: plan guidance must not be blank",
                config.source, config.row_id
            )
            .into());
        }
        Ok(parsed)
    }
}

/// `@deepseek-ai/dsh-plan-mode`: provides [`PlanMode`], registers `exit_plan_mode` (always,
/// so the tool catalog never changes with the mode), the `plan:policy` section, and — when
/// a command registry is composed — `/plan`.
pub struct PlanModePlugin;

impl Plugin for PlanModePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-plan-mode"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let config = PlanModeConfig::from_row(config)?;
        let tools = ctx.require::<ToolRegistry>()?;
        ctx.require::<dsh_prompt::SystemPrompt>()?;
        let service = PlanMode::new(config.section);
        service.install(ctx)?;
        tools.register(
            ctx,
            Arc::new(dsh_tools::Typed::new(ExitPlanModeTool::new(
                service.clone(),
                ctx.clone(),
            ))?),
        )?;
        if let Some(commands) = ctx.get::<dsh_commands::CommandRegistry>() {
            crate::command::register(ctx, &commands, service.clone())?;
        }
        ctx.provide(service)?;
        Ok(())
    }
}
