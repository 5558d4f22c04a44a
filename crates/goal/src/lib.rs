//! Session goals (upstream 0.2.1's `@deepseek-ai/dsh-goal` family); see README.md.
//!
//! * [`state`] — the pure fold of `goal/change` events and admitted goal rounds;
//! * [`service`] — [`Goals`]: compare-and-set mutations and process-local activation;
//! * [`tool`] — `create_goal`, `get_goal`, `update_goal` and the `tool:goal` section;
//! * [`driver`] — the round driver that queues the next round when a turn completes;
//! * [`command`] — `/goal`.

mod command;
mod driver;
mod plugin;
mod service;
mod state;
mod tool;

pub use command::{GoalCommand, USAGE, parse as parse_goal_command, render as render_goal};
pub use driver::round_prompt;
pub use plugin::{CommandGoalPlugin, GoalPlugin, GoalRoundDriverPlugin, ToolGoalPlugin};
pub use service::{
    Activation, DEFAULT_MAX_GOAL_ROUNDS, GoalChanged, GoalChangedPayload, GoalEdit, GoalRef,
    GoalView, Goals, no_goal_value,
};
pub use state::{
    BlockedReason, GOAL_CHANGE_VERSION, GoalFold, GoalPhase, GoalRecord, GoalSnapshot, Operation,
    RoundSource, apply_goal_event, fold_goal,
};
pub use tool::{
    CREATE_GOAL, GET_GOAL, UPDATE_ACTIONS, UPDATE_GOAL, goal_value_schema, section_text,
    wrapup_text,
};

/// The logged event of every goal mutation.
pub const GOAL_CHANGE_EVENT: &str = "goal/change";
/// The goal tools' system-prompt section.
pub const GOAL_SECTION: &str = "tool:goal";
/// Its order: after `tool:session_query` (113), before the workflow tool (115), as
/// upstream's TOOL_GOAL sits between TOOL_SESSION_QUERY and TOOL_WORKFLOW.
pub const GOAL_SECTION_ORDER: f64 = 114.0;

/// Adds every plugin of this crate to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog.register(GoalPlugin);
    catalog.register(ToolGoalPlugin);
    catalog.register(GoalRoundDriverPlugin);
    catalog.register(CommandGoalPlugin);
}
