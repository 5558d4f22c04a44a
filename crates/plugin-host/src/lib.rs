//! dsh-plugin-host: plugins in any language, without recompiling dsh.
//!
//! A `plugin-host` row starts a child process that speaks JSON-RPC 2.0, one message per
//! line on stdio (the protocol is documented in this crate's README). In the `initialize`
//! handshake the plugin declares tools, system-prompt sections, emit events it listens to
//! and the waterfall stages it takes part in; each becomes an effect of the row, so
//! unloading the row unregisters everything and kills the process group.
//!
//! Containment: a plugin that crashes, exceeds `timeoutMs` or writes garbage never panics
//! or hangs dsh — its stages pass through (`next`), its tool calls fail with a clear error,
//! the failure is logged, and the process is restarted with doubling backoff up to
//! `restart.maxRestarts` times.

mod host;
mod plugin;

pub use host::{Host, HostConfig};
pub use plugin::{
    EVENTS, PROTOCOL_VERSION, PluginHostPlugin, Registration, RestartConfig, RowConfig, STAGES,
    Verdict, ask, load, parse_verdict, pre_decision,
};

/// The row name (`plugin-host` for short).
pub const ROW_NAME: &str = "dsh-plugin-host";

/// Adds the plugin-host row to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog.register(PluginHostPlugin);
}

/// Entry points for the fuzz targets (`fuzz/`).
#[doc(hidden)]
pub mod fuzzing {
    /// Reads plugin stdout `bytes` as the host does (lines of at most `max_line` bytes)
    /// and classifies each line; returns how many lines were read.
    pub fn lines(bytes: &[u8], max_line: u64) -> usize {
        crate::host::fuzz_lines(bytes, max_line)
    }
}
