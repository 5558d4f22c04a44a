//! Hook bridges: unmodified Claude Code and Codex command hooks on dsh's interception
//! points (`agent/session-start`, `agent/pre-step`, `tools/pre-execute`,
//! `tools/post-execute`, `agent/turn-stopping`), over a shared protocol — matchers, a
//! `bash -c` runner with the JSON payload on stdin, output decoding, restrictive merging
//! and the durable `hook/invoked` / `hook/result` events.
//!
//! Native plugins do not need any of this: they listen on the same points directly.

mod bridge;
mod config;
mod payload;
mod plugin;
pub mod protocol;

pub use config::{
    ConfigError, HookConfig, HookPoint, MatcherGroup, ParsedConfig, SkipReason, Skipped,
    Substitutions, load_config, parse_config, supported_points,
};
pub use plugin::{ClaudeCodeHooksPlugin, CodexHooksPlugin};

/// Adds both bridge plugins to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(ClaudeCodeHooksPlugin)
        .register(CodexHooksPlugin);
}
