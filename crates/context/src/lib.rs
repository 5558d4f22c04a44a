//! Long sessions (`dsh-context`); see README.md.
//!
//! * [`meter`] — the token meter: the estimated size of a session's next request;
//! * [`compaction`] — automatic and manual compaction, overflow recovery, the pruner;
//! * [`spill`] — the spill store and the policy that bounds every tool result;
//! * [`query`] — session query: exact reads, traces and full-text search, and the model's
//!   `session_*` tools.

pub mod compaction;
pub mod meter;
pub mod query;
pub mod spill;

pub use compaction::{
    CommandCompactPlugin, CompactionEngine, CompactionPlugin, ToolResultPrunerPlugin,
};
pub use meter::{TokenMeter, TokenMeterPlugin};
pub use query::{SessionQuery, SessionQuerySqlitePlugin, ToolSessionQueryPlugin};
pub use spill::{LocalSpillStore, SpillLocalPlugin, SpillPolicyPlugin};

/// Adds every plugin of this crate to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(TokenMeterPlugin)
        .register(CompactionPlugin)
        .register(ToolResultPrunerPlugin)
        .register(CommandCompactPlugin)
        .register(SpillLocalPlugin)
        .register(SpillPolicyPlugin)
        .register(SessionQuerySqlitePlugin)
        .register(ToolSessionQueryPlugin);
}
