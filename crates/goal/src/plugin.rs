//! The four rows: `goal`, `tool-goal`, `goal-round-driver`, `command-goal`.

use std::sync::Arc;

use dsh_agent::AgentCreated;
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_tools::{ToolRegistry, Typed};
use serde::Deserialize;

use crate::service::{DEFAULT_MAX_GOAL_ROUNDS, Goals};
use crate::tool::{CreateGoalTool, GetGoalTool, Shared, UpdateGoalTool, goal_value_schema};
use crate::{GOAL_SECTION, GOAL_SECTION_ORDER};

fn whole_from_one(config: &PluginConfig, field: &str, value: f64) -> Result<u64, BoxError> {
    if value.fract() != 0.0 || value < 1.0 || value > ((1u64 << 53) - 1) as f64 {
        return Err(format!(
            "{}: row \"{}\": config field `{field}`: must be a whole number from 1 (got {value})",
            config.source, config.row_id
        )
        .into());
    }
    Ok(value as u64)
}

/// A row that takes no settings: any key is an error.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoConfig {}

/// `@deepseek-ai/dsh-goal` config: `{defaultMaxGoalRounds}` (default 256).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GoalConfig {
    #[serde(default)]
    default_max_goal_rounds: Option<f64>,
}

/// `@deepseek-ai/dsh-goal`: provides the [`Goals`] service. A new live agent (a fresh or
/// resumed session) starts with its goal disarmed.
pub struct GoalPlugin;

impl Plugin for GoalPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-goal"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let parsed: GoalConfig = config.parse()?;
        let max = match parsed.default_max_goal_rounds {
            Some(n) => whole_from_one(config, "defaultMaxGoalRounds", n)?,
            None => DEFAULT_MAX_GOAL_ROUNDS,
        };
        let goals = Goals::new(max);
        let g = goals.clone();
        ctx.on_emit::<AgentCreated>(ListenOptions::GLOBAL, move |p| {
            g.reset(&p.agent.session().id());
            Ok(())
        })?;
        ctx.provide(goals)?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-tool-goal` config: `{blockedAfterConsecutiveRounds}` (default 3).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ToolGoalConfig {
    #[serde(default)]
    blocked_after_consecutive_rounds: Option<f64>,
}

/// `@deepseek-ai/dsh-tool-goal`: `create_goal`, `get_goal`, `update_goal` and `tool:goal`.
pub struct ToolGoalPlugin;

impl Plugin for ToolGoalPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-goal"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let parsed: ToolGoalConfig = config.parse()?;
        let blocked_after = match parsed.blocked_after_consecutive_rounds {
            Some(n) => whole_from_one(config, "blockedAfterConsecutiveRounds", n)?,
            None => 3,
        };
        let goals = ctx.require::<Goals>()?;
        let tools = ctx.require::<ToolRegistry>()?;
        let prompt = ctx.require::<dsh_prompt::SystemPrompt>()?;
        let text = crate::tool::section_text(blocked_after);
        prompt.section(
            ctx,
            GOAL_SECTION,
            GOAL_SECTION_ORDER,
            Arc::new(move |_| text.clone()),
        )?;
        let shared = Shared {
            goals,
            root: ctx.clone(),
            blocked_after,
            output_schema: goal_value_schema(),
        };
        tools.register(ctx, Arc::new(Typed::new(GetGoalTool(shared.clone()))?))?;
        tools.register(ctx, Arc::new(Typed::new(CreateGoalTool(shared.clone()))?))?;
        tools.register(ctx, Arc::new(Typed::new(UpdateGoalTool(shared))?))?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-goal-round-driver`: keeps an active, armed goal going across turns.
pub struct GoalRoundDriverPlugin;

impl Plugin for GoalRoundDriverPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-goal-round-driver"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let _: NoConfig = config.parse()?;
        let goals = ctx.require::<Goals>()?;
        crate::driver::install(ctx, goals)
    }
}

/// `@deepseek-ai/dsh-command-goal`: `/goal`.
pub struct CommandGoalPlugin;

impl Plugin for CommandGoalPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-command-goal"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let _: NoConfig = config.parse()?;
        let goals = ctx.require::<Goals>()?;
        let commands = ctx.require::<dsh_commands::CommandRegistry>()?;
        crate::command::register(ctx, &commands, goals)
    }
}
