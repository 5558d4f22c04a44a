//! Long sessions (`dsh-context`); see README.md.
//!
//! * [`spill`] — the spill store and the policy that bounds every tool result;
//! * [`query`] — session query: exact reads, traces and full-text search, and the model's
//!   `session_*` tools.

pub mod query;
pub mod spill;

pub use query::{SessionQuery, SessionQuerySqlitePlugin, ToolSessionQueryPlugin};
pub use spill::{LocalSpillStore, SpillLocalPlugin, SpillPolicyPlugin};

/// Adds every plugin of this crate to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(SpillLocalPlugin)
        .register(SpillPolicyPlugin)
        .register(SessionQuerySqlitePlugin)
        .register(ToolSessionQueryPlugin);
}
