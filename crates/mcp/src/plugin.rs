//! `@deepseek-ai/dsh-mcp-client` (`mcp-client`): one MCP server per row.

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};

use crate::config::parse_config;
use crate::server::{DEFAULT_REQUEST_TIMEOUT, connect_blocking};

/// The row. Loading it connects the server and registers its tools before the row counts
/// as loaded (upstream's activation awaits the same); a failed first attempt fails the row
/// only with `failOnStartupError`, otherwise it is logged and retried in the background.
/// Unloading the row disconnects, kills a stdio server and unregisters its tools.
pub struct McpClientPlugin;

impl Plugin for McpClientPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-mcp-client"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let parsed = parse_config(config.raw())?;
        connect_blocking(ctx, parsed, DEFAULT_REQUEST_TIMEOUT)?;
        Ok(())
    }
}
