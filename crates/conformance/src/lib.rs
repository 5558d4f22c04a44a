//! The conformance side of dsh, kept out of the production crates: the fixture plugins of
//! upstream's snapshot suite (`@deepseek-ai/dsh-test-*` rows, which the compositions in
//! `conformance/compositions/` name) and the `dsh-conformance` binary, which is `dsh` with
//! these fixtures in the catalog `dsh acp` boots from. The production `dsh` binary has none
//! of them (`crates/cli/tests/all/no_fixtures.rs` checks it).

mod instructions;
mod sandbox;
mod subagent;
mod terminal;
mod user_questions;
mod web_fetch;

pub use instructions::CompactionFixturePlugin;
pub use sandbox::PartialLandlockFixturePlugin;
pub use subagent::{
    ContinuableFencePlugin, DurabilityFailurePlugin, NOTICE_TURN_HOLD, PLACEHOLDER_CHILD_ID,
    ParentSandboxOverridePlugin, ResultDiagnosticPlugin, SettlementMarkerPlugin, UNKNOWN_CHILD_ID,
};
pub use terminal::{SnapshotBackend, SnapshotBackendPlugin};
pub use user_questions::ChildQuestionTripwirePlugin;
pub use web_fetch::{FIXTURE_PAGE, FIXTURE_PORT, WebFetchFixturePlugin};

/// Adds every fixture plugin to `catalog`.
pub fn register_fixtures(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(CompactionFixturePlugin)
        .register(PartialLandlockFixturePlugin)
        .register(SettlementMarkerPlugin)
        .register(DurabilityFailurePlugin)
        .register(ContinuableFencePlugin)
        .register(ParentSandboxOverridePlugin)
        .register(ResultDiagnosticPlugin)
        .register(SnapshotBackendPlugin)
        .register(ChildQuestionTripwirePlugin)
        .register(WebFetchFixturePlugin);
}

/// The names of the plugins [`register_fixtures`] adds.
pub fn fixture_names() -> Vec<&'static str> {
    let mut catalog = dsh_kernel::Catalog::new();
    register_fixtures(&mut catalog);
    catalog.names().collect()
}
