//! Booting a composed tree: the catalog of compiled-in plugins and `!!js` evaluation.

use std::path::Path;

use dsh_kernel::config::{Composition, EvalEnv, to_load_rows};
use dsh_kernel::{Catalog, Context, LoadedTree, load_tree};
use serde_json::Value;

/// Every production plugin compiled into this binary.
pub fn catalog() -> Catalog {
    let mut c = Catalog::new();
    dsh_agent::register_core(&mut c);
    dsh_policies::register_catalog(&mut c);
    dsh_sandbox::register_catalog(&mut c);
    c.register(dsh_commands::CommandsPlugin);
    c.register(dsh_commands::FeedbackCommandPlugin);
    dsh_context::register_catalog(&mut c);
    c.register(dsh_replay::ReplayPlugin);
    dsh_providers::register_catalog(&mut c);
    dsh_tools_builtin::register_catalog(&mut c);
    dsh_jobs::register_catalog(&mut c);
    dsh_terminal::register_catalog(&mut c);
    dsh_subagent::register_catalog(&mut c);
    dsh_user_questions::register_catalog(&mut c);
    dsh_plan_mode::register_catalog(&mut c);
    dsh_goal::register_catalog(&mut c);
    dsh_memory::register_catalog(&mut c);
    dsh_web_tools::register_catalog(&mut c);
    dsh_lsp::register_catalog(&mut c);
    dsh_hooks::register_catalog(&mut c);
    dsh_mcp::register_catalog(&mut c);
    dsh_plugin_host::register_catalog(&mut c);
    dsh_attachments::register_catalog(&mut c);
    dsh_skills::register_catalog(&mut c);
    c.register(dsh_code_mode::CodeRuntimePlugin);
    dsh_workflow::register_catalog(&mut c);
    dsh_subagent_product::register_catalog(&mut c);
    dsh_cordis::register_catalog(&mut c);
    dsh_working_directory::register_catalog(&mut c);
    c.register(dsh_persistence::JsonlPersistencePlugin);
    c.register(dsh_persistence::SessionLogUploadPlugin);
    c.register(crate::headless::HeadlessPlugin);
    c.register(dsh_tui::TuiPlugin);
    c.register(dsh_acp::AcpAgentPlugin);
    dsh_web::register_catalog(&mut c);
    dsh_sdk_runtime::register_catalog(&mut c);
    c
}

/// The environment `!!js` expressions read, with `ctx` values exposed by the frontend.
pub fn eval_env(home: &Path, ctx_values: serde_json::Map<String, Value>) -> EvalEnv {
    let mut env = EvalEnv::from_process(home.to_path_buf());
    env.ctx = ctx_values;
    env
}

/// Evaluates and loads `composition` under `root` from `catalog`. Errors are one line,
/// ready to print.
pub fn load(
    root: &Context,
    catalog: &Catalog,
    composition: &Composition,
    env: &EvalEnv,
) -> Result<LoadedTree, String> {
    let rows = to_load_rows(&composition.rows, env).map_err(|e| format!("dsh: {e}"))?;
    load_tree(root, catalog, &rows).map_err(|e| format!("dsh: plugin tree failed to load: {e}"))
}
