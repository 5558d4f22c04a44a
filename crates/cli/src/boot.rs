//! Booting a composed tree: the catalog of compiled-in plugins and apps, `!!js`
//! evaluation, and the one boot path every app runs through ([`launch`]).

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use dsh_app::{App, Launch, Start, Threads};
use dsh_kernel::config::{ComposedRow, Composition, EvalEnv, Node, to_load_rows};
use dsh_kernel::{Catalog, Context, LoadedTree, load_tree};
use serde_json::Value;

use crate::CONFIG_ERROR;

/// Every app compiled into this binary. When a tree holds the rows of several, the first
/// listed runs (a profile stacking the web app over headless serves the web app).
pub fn apps() -> Vec<Box<dyn App>> {
    vec![
        Box::new(dsh_web::WebApp),
        Box::new(dsh_sdk_runtime::SdkRuntimeApp),
        Box::new(dsh_acp::AcpApp),
        Box::new(dsh_tui::TuiApp {
            archive: Some(web_archive),
        }),
        Box::new(dsh_headless::HeadlessApp),
    ]
}

/// Whether an enabled row of `rows` (groups and includes searched too) loads `plugin`. A
/// row whose `disabled` is an expression counts as enabled: it may well be.
fn holds(rows: &[ComposedRow], plugin: &str) -> bool {
    rows.iter().any(|row| {
        !matches!(row.node.get("disabled"), Some(Node::Bool(true)))
            && (row.name() == plugin || holds(&row.children, plugin))
    })
}

/// What a composed tree runs: the first app whose row it holds.
fn app_of<'a>(apps: &'a [Box<dyn App>], composition: &Composition) -> Option<&'a dyn App> {
    apps.iter()
        .map(|a| a.as_ref())
        .find(|a| holds(&composition.rows, a.plugin()))
}

/// The one boot path: finds the app `composition` holds, hands it `args`, then evaluates
/// and loads the tree with the app's `ctx` values, runs the app's main loop on it, flushes
/// every session log and unloads. `Err` is another profile to run instead, with its
/// arguments (the app asked for it).
pub fn launch(
    home: &Path,
    name: &str,
    composition: &Composition,
    args: &[String],
    catalog: &Catalog,
) -> Result<ExitCode, (String, Vec<String>)> {
    let apps = apps();
    let Some(app) = app_of(&apps, composition) else {
        let known: Vec<&str> = apps.iter().map(|a| a.plugin()).collect();
        eprintln!(
            "dsh: {name} runs no app: its tree has no enabled row of {}",
            known.join(", ")
        );
        return Ok(ExitCode::from(CONFIG_ERROR));
    };
    let run = match app.start(&Launch {
        home,
        profile: name,
        args,
    }) {
        Start::Exit(code) => return Ok(code),
        Start::Instead { profile, args } => return Err((profile, args)),
        Start::Run(run) => run,
    };
    Ok(run_tree(home, composition, catalog, run))
}

/// Evaluates and loads `composition` with `run`'s `ctx` values on a runtime of its
/// threads, runs its main loop, flushes every session log and unloads.
pub fn run_tree(
    home: &Path,
    composition: &Composition,
    catalog: &Catalog,
    run: dsh_app::Run,
) -> ExitCode {
    let dsh_app::Run { ctx, threads, main } = run;
    let rt = match crate::runtime(threads == Threads::One) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dsh: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = rt.block_on(async move {
        let env = eval_env(home, ctx);
        let root = Context::new_root();
        let tree = match load(&root, catalog, composition, &env) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(CONFIG_ERROR);
            }
        };
        let code = main(tree.context()).await;
        if let Some(writers) = tree.context().get::<dsh_persistence::SessionWriters>()
            && let Err(e) = writers.flush_all().await
        {
            eprintln!("dsh: a session log could not be written completely: {e}");
        }
        tree.unload();
        code
    });
    // A server may end (SDK `shutdown`) while stdin is still open: the blocking stdin
    // reader must not hold the exit. A single-session run waits for its blocking work.
    if threads == Threads::Server {
        rt.shutdown_background();
    }
    code
}

/// The archive `dsh web` keeps (`<storages>/workspace.json`), so a session archived in
/// one front end is archived in the other.
fn web_archive(home: &Path) -> Arc<dyn dsh_tui::Archive> {
    Arc::new(WebArchive(dsh_web::WorkspaceStore::new(
        &home.join("storages"),
    )))
}

struct WebArchive(dsh_web::WorkspaceStore);

impl dsh_tui::Archive for WebArchive {
    fn archived(&self) -> Result<Vec<String>, String> {
        self.0.list().map(|(_, a)| a).map_err(|e| e.to_string())
    }

    fn set_archived(&self, session_id: &str, archived: bool) -> Result<(), String> {
        self.0
            .set_archived(session_id, archived)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

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
    c.register(dsh_team::TeamSessionStorePlugin);
    c.register(dsh_headless::HeadlessPlugin);
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
