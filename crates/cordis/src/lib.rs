//! Dynamic packages (upstream tool-cordis and cordis-host-runner): the model defines, runs, inspects and removes process-local plugins.

/// Adds the production rows of this crate to `catalog`.
pub fn register_catalog(_catalog: &mut dsh_kernel::Catalog) {}
