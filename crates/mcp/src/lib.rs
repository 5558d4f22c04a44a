//! dsh-mcp: the MCP client.
//!
//! * [`McpClientPlugin`] — upstream's `mcp-client` row: one server per row, its tools
//!   registered as `mcp__<serverName>__<rawName>` ([`public_tool_name`]).
//! * [`connect`] / [`connect_blocking`] — the supervisor of one server for any owner
//!   context (a row, or an agent scope for ACP `mcpServers`); [`acp`] parses ACP's shape.
//! * [`parse_config`] — the row's fields, defaults and checks.
//!
//! Invariants: a server's tools are registered all or nothing, under names that depend only
//! on `(serverName, rawName)`; a failed re-sync keeps the last good list; every server
//! process belongs to one generation, is registered with the reaper, and dies when its
//! generation ends or its owner unloads; no server input (bad lists, bad results, hangs,
//! exits) panics or stops the session — it becomes a logged error or a failed tool call.

pub mod acp;
mod config;
mod content;
mod naming;
mod plugin;
mod prompts;
mod resources;
mod rpc;
mod runtime;
mod server;
mod stdio;
mod tools;
mod transport;

pub use config::{
    ConfigError, ReconnectPolicy, ServerConfig, StartupFailure, Transport, parse_config,
    valid_server_name,
};
pub use content::{
    CallOutcome, StoredImages, project_content, project_content_with, project_result,
    project_result_with, result_images,
};
pub use naming::{MAX_PUBLIC_NAME_LENGTH, public_tool_name};
pub use plugin::McpClientPlugin;
pub use resources::{MAX_REFERENCE_CHARS, McpResources, ResourceEntry};
pub use rpc::RpcError;
pub use server::{
    ConnectError, DEFAULT_REQUEST_TIMEOUT, ServerHandle, ServerState, connect, connect_blocking,
};

/// Adds the MCP client row to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(McpClientPlugin)
        .register(resources::McpResourcesPlugin);
}
