//! OS confinement for every process a tool starts (`dsh-sandbox`).
//!
//! * [`SandboxMode`] and the shared markers; [`SandboxPolicy`] (the `sandbox-policy` row):
//!   the mode and roots of one call, resolved against its session.
//! * [`Sandbox`] (the `sandbox-local` row): turns an argv into its [`Confined`] form under
//!   bubblewrap or Landlock, or refuses with [`SandboxUnavailable`] — never runs a confined
//!   command unconfined.
//! * [`resident`]: one confined process per session that starts its commands.
//! * [`runner`] classification: runner failure (the command never ran) > denial > exit.
//! * [`secrets`]: the child-environment scrub, masked credential files, `/proc` secrets.
//!
//! Invariants: a confined mode with no working runner refuses every command; a failing
//! runner is reported as a refusal, not as the command's failure; no confined process can
//! read the credential files, the network (unless allowed), or dsh's own environment.

pub mod bwrap;
pub mod landlock;
mod local;
mod mode;
mod policy;
pub mod resident;
pub mod runner;
pub mod seccomp;
mod supervise;

/// The secret registry, environment scrubbing and redaction live in `dsh-host`; these paths
/// stay for the crates that reach them through the sandbox.
pub use dsh_host::{environ, redact, secrets};

pub use local::{
    LocalSandbox, LocalSandboxPlugin, RunnerKind, Sandbox, SandboxProvider, forget_bwrap_verdict,
};
pub use mode::{
    ESCALATION_TARGETS, SandboxMode, denial_marker, escalation_hint, runner_failure_marker,
};
pub use policy::{
    ExecutionPolicy, Network, SandboxPolicy, SandboxPolicyPlugin, canonical_path,
    default_temp_roots, resolve_lexical, session_mode,
};
pub use runner::{
    Confined, Enforcement, RunnerFailureRule, SANDBOX_UNAVAILABLE, SandboxUnavailable,
};

/// Adds the sandbox plugins to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(SandboxPolicyPlugin)
        .register(LocalSandboxPlugin);
}
