//! Plan mode (`dsh-plan-mode`, upstream `@deepseek-ai/dsh-plan-mode`); see README.md.
//!
//! * [`state`] — pure folds over the session log: the mode in force, open turns, and the
//!   mode the last request header described;
//! * [`service`] — [`PlanMode`]: pending selections, the step-start append, the notice,
//!   and the `plan:policy` section;
//! * [`tool`] — `exit_plan_mode`, reviewed through the user-questions seam;
//! * [`command`] — `/plan [off|message]`.

mod command;
mod plugin;
mod service;
mod state;
mod tool;

pub use plugin::{PlanModeConfig, PlanModePlugin};
pub use service::{PlanMode, PlanModeState, SetOutcome};
pub use state::{fold_plan_mode, has_open_turn, mode_at_last_header};
pub use tool::{APPROVE_LABEL, EXIT_PLAN_MODE, KEEP_PLANNING_LABEL, REVIEW_ID};

/// The log-only event that records the mode in force from that point on.
pub const PLAN_MODE_EVENT: &str = "plan/mode";
/// The prompt section rendered while plan mode is active.
pub const PLAN_SECTION: &str = "plan:policy";
/// Its order among system-prompt sections.
pub const PLAN_SECTION_ORDER: f64 = 50.0;

/// Adds every plugin of this crate to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog.register(PlanModePlugin);
}
