//! Workflows (upstream workflow/*): the script engine on QuickJS and the model-facing workflow and ralph tools.

/// Adds the production rows of this crate to `catalog`.
pub fn register_catalog(_catalog: &mut dsh_kernel::Catalog) {}
