//! Product subagents (upstream subagent-codex, -claude-code, -acp, -dsh-sdk): other agent programs run as one-shot children.

/// Adds the production rows of this crate to `catalog`.
pub fn register_catalog(_catalog: &mut dsh_kernel::Catalog) {}
