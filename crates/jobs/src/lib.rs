//! Background jobs owned by an agent's session.
//!
//! * [`JobRegistry`] (`@deepseek-ai/dsh-jobs-local`) — admission with a per-owner limit,
//!   ids `<kind>-<n>`, first-wins settlement, consuming reads, bounded waits, kills, and
//!   teardown when the owner is disposed; durable `job/registered` / `job/settled` records.
//! * [`ToolJobsPlugin`] (`@deepseek-ai/dsh-tool-jobs`) — `job_output`, `job_list`,
//!   `job_kill`, the `tool:jobs` prompt section, and completion notices (injected into a
//!   busy owner's next step, or waking an idle one).
//!
//! Producers (bash `run_in_background`, terminal sends) call [`JobRegistry::start`] with a
//! closure that starts the work and returns its [`JobHooks`]; they report the end through
//! the [`JobSettler`] they are handed.

mod notice;
mod plugins;
mod registry;
mod retain;
mod status;
mod tools;

pub use notice::{bound_summary, completion_message, completion_text, status_line};
pub use plugins::{DEFAULT_MAX_JOBS_PER_OWNER, JobsLocalPlugin, JobsSeamPlugin, register_catalog};
pub use registry::{
    Announce, CancelFn, JobDoneListener, JobHooks, JobOutcome, JobRegistry, JobSettler,
    JobSnapshot, JobStart, KillOutcome, ReadFn,
};
pub use retain::{fit_with_suffix, head_bytes, tail_bytes};
pub use status::{JobStatus, Terminal};
pub use tools::{CompletionDelivery, ToolJobsConfig, ToolJobsPlugin, render_list, render_output};
