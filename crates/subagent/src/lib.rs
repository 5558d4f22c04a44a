//! Delegation (upstream `subagent/*`): the [`Subagents`] service with its providers and
//! continuation manager, the in-process `spawn` and `fork` providers, and the model-facing
//! `subagent`, `send_message`, `interrupt_agent`, `list_agents` and `report` tools.
//!
//! Every in-process child is an ordinary session (a sibling of its parent's on disk) whose
//! header names its parent, origin and depth; it is created from the providers' unscoped
//! context (so nothing scoped to the parent leaks into it), owned by its parent in the
//! agent registry, starts with the delegated policy in its log, and records one
//! `subagent/descriptor`. See README.md for the invariants.

mod child;
mod continuation;
mod control;
mod descriptor;
mod inprocess;
mod listing;
mod output;
pub mod outputs;
mod plugins;
mod provider;
mod providers;
mod schema;
mod service;
mod structured;
mod tool;
mod types;

pub use child::{
    DELEGATION_CONTEXT, DelegatedPolicy, DepthError, child_meta, child_options,
    delegation_depth_of, resolve_child_depth,
};
pub use continuation::{
    ContinuableStart, ContinuationHooks, Continuations, InterruptAuthority, ReportDelivery,
    SetupContribution, coordinator_source, settlement_notice, settlement_summary,
};
pub use control::{
    ToolListAgentsPlugin, ToolSubagentControlPlugin, ToolSubagentReportPlugin, entry_value,
    render_entry,
};
pub use descriptor::{
    DESCRIPTOR_EVENT, DESCRIPTOR_VERSION, Descriptor, DescriptorError, ToolFilter, fold_first,
};
pub use inprocess::{InProcess, PublishedRunFaults};
pub use listing::{ChildEntry, Diagnostic, list_children};
pub use output::final_assistant_output;
pub use plugins::{SessionProjectionPlugin, SubagentPlugin};
pub use provider::{ContinuableSpec, SubagentProvider};
pub use providers::{
    ForkInProcessPlugin, InProcessProvider, Lineage, SpawnInProcessPlugin, completed_turn_prefix,
};
pub use schema::{check_object_schema, validate as validate_schema_value};
pub use service::{ProviderAdded, ProviderRemoved, Subagents};
pub use structured::{STRUCTURED_OUTPUT_TOOL, StructuredCapture};
pub use tool::{
    BackgroundMode, SubagentToolConfig, ToolSubagentPlugin, foreground_failure, settle_foreground,
    settle_job,
};
pub use types::{
    Capabilities, ProviderRef, ResolvedStart, ResultFuture, RunFault, StartRequest, StopReason,
    SubagentResult, SubagentRun, subagent_error, text_of,
};

/// Adds the production rows of this crate to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(SubagentPlugin)
        .register(SessionProjectionPlugin)
        .register(SpawnInProcessPlugin)
        .register(ForkInProcessPlugin)
        .register(ToolSubagentPlugin)
        .register(ToolSubagentControlPlugin)
        .register(ToolListAgentsPlugin)
        .register(ToolSubagentReportPlugin);
}
