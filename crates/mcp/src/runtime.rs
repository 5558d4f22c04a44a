//! The runtime the connection supervisors run on.
//!
//! Upstream's row activation awaits the first connection and tool listing, but a kernel
//! plugin's `apply` is synchronous and a headless run boots on a current-thread runtime: a
//! boot that waited for work spawned on its own runtime would wait forever. So every MCP
//! connection (transport, child process I/O, supervisor, reconnect timers) lives on one
//! small runtime owned by this crate, started on first use; the boot thread can block on it
//! and callers on any runtime talk to it through channels.

use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle, Runtime};

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The MCP runtime's handle, or why it could not be started.
pub fn handle() -> Result<Handle, String> {
    RUNTIME
        .get_or_init(|| {
            Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("dsh-mcp")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the MCP runtime: {e}"))
        })
        .as_ref()
        .map(|rt| rt.handle().clone())
        .map_err(Clone::clone)
}
