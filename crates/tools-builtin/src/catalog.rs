//! The plugin catalog rows this crate answers to.

use dsh_kernel::{BoxError, Catalog, Context, Plugin, PluginConfig};

use crate::bash::{BashLocalPlugin, BashSandboxPlugin, ShellEnvPlugin, ToolBashPlugin};
use crate::editor::ToolStrReplaceEditorPlugin;
use crate::fs::{FsLocalPlugin, FsSandboxPlugin, ObservationPolicyPlugin, ToolFsPlugin};
use crate::search::ToolFsSearchPlugin;
use crate::todo::ToolTodoPlugin;

/// `@deepseek-ai/dsh-subprocess-local`: upstream's managed-subprocess service. Bash owns
/// its process groups directly here, so the row is accepted and contributes nothing.
pub struct SubprocessLocalPlugin;

impl Plugin for SubprocessLocalPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-subprocess-local"
    }

    fn apply(&self, _ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        Ok(())
    }
}

/// Adds every builtin tool plugin and its supporting rows to `catalog`.
pub fn register_catalog(catalog: &mut Catalog) {
    catalog
        .register(ToolBashPlugin)
        .register(BashLocalPlugin)
        .register(BashSandboxPlugin)
        .register(ShellEnvPlugin)
        .register(SubprocessLocalPlugin)
        .register(ToolFsPlugin)
        .register(FsLocalPlugin)
        .register(FsSandboxPlugin)
        .register(ObservationPolicyPlugin)
        .register(ToolFsSearchPlugin)
        .register(ToolStrReplaceEditorPlugin)
        .register(ToolTodoPlugin);
}
