//! `dsh`: the DeepSeek Harness launcher. This library is the application itself: the
//! `dsh` binary calls [`main`]; a test-support binary (`dsh-conformance`) calls it with
//! [`Extensions`] that add plugins. It prints to the terminal as an application does.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod boot;
mod config_schema;
mod headless;
mod launcher;
mod memory_cmd;
mod models_cmd;
mod plugin_cmd;
mod profile;
mod progress;
mod run_events;
mod sdkapp;
mod sessions;
mod stdout;
mod stream_json;
mod tuiapp;
mod webapp;

use std::process::ExitCode;

use dsh_kernel::{Catalog, Context};
use launcher::Mode;

/// What a binary built on this library adds to `dsh`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extensions {
    /// Adds plugins to the catalog `dsh acp` boots from (the fixtures of upstream's
    /// snapshot suite, in `dsh-conformance`; the production binary adds none).
    pub acp_plugins: Option<fn(&mut Catalog)>,
}

/// Exit code for bad configuration (composition, profile, plugin config).
pub(crate) const CONFIG_ERROR: u8 = 2;

fn init_tracing() {
    let filter = std::env::var("DSH_LOG").unwrap_or_else(|_| "error".into());
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .try_init();
}

/// The async runtime. A headless run drives one agent: a current-thread runtime keeps the
/// loop, its tool tasks and the provider stream on one thread (no cross-thread wake-ups per
/// step; blocking filesystem work still goes to the blocking pool). The ACP server and the
/// web app host several sessions at once and get two workers.
pub(crate) fn runtime(single_session: bool) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if single_session {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    };
    builder.enable_all().build()
}

/// The hidden argument that runs this binary as the process reaper.
const REAPER_ARG: &str = "__dsh-reaper";

/// Runs `dsh` with the process's arguments and environment.
pub fn main(extensions: &Extensions) -> ExitCode {
    let raw: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    match raw.first().and_then(|a| a.to_str()) {
        Some(REAPER_ARG) => {
            dsh_process::run_reaper();
            return ExitCode::SUCCESS;
        }
        Some(dsh_sandbox::landlock::LAUNCHER_ARG) => {
            return dsh_sandbox::landlock::launcher_main(&raw[1..]);
        }
        _ => {}
    }
    let argv: Vec<String> = match raw.into_iter().map(|a| a.into_string()).collect() {
        Ok(v) => v,
        Err(bad) => {
            eprintln!("error: argument {bad:?} is not valid UTF-8");
            return ExitCode::from(1);
        }
    };
    // Still one thread: move credentials out of the environment block before anything else.
    dsh_sandbox::environ::capture_secrets_from_environment();
    dsh_sandbox::environ::keep_memory_private();
    if let Ok(exe) = std::env::current_exe() {
        dsh_process::set_reaper_command(exe.clone(), REAPER_ARG);
        dsh_sandbox::landlock::set_launcher(dsh_sandbox::landlock::launcher_for(&exe));
    }
    init_tracing();
    let home = dsh_policies::dsh_home();
    // `dsh` alone on a terminal opens the terminal UI (elsewhere it prints the usage).
    let argv = if argv.is_empty() && dsh_tui::unusable_terminal().is_none() {
        vec!["tui".to_string()]
    } else {
        argv
    };
    let mut mode = match launcher::parse_with(&argv, &|name| profile::exists(&home, name)) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {}", e.0);
            return ExitCode::from(1);
        }
    };
    if let Mode::Recreate {
        profile,
        template,
        then,
    } = mode
    {
        match profile::recreate_from_template(&home, &profile, &template) {
            Ok(previous) => {
                if let Some(p) = previous {
                    eprintln!(
                        "dsh: profile \"{profile}\" recreated from \"{template}\"; the previous one is kept at {}",
                        p.display()
                    );
                }
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(CONFIG_ERROR);
            }
        }
        mode = *then;
    }
    match mode {
        Mode::Version => stdout::print(&format!("{}\n", env!("CARGO_PKG_VERSION"))),
        Mode::Help => stdout::print(launcher::HELP),
        Mode::Dump {
            profile,
            what,
            patches,
        } => match profile::compose_profile(
            &home,
            &profile,
            &patches,
            what == launcher::Dump::Default,
        ) {
            Ok(c) => {
                for w in &c.warnings {
                    eprintln!("dsh: {w}");
                }
                if what != launcher::Dump::Schema {
                    return stdout::print(&dsh_kernel::config::render_dump(&c));
                }
                let catalog = boot::catalog();
                match config_schema::probe(&home, &catalog, &c) {
                    Ok(shapes) => {
                        let mut disabled = std::collections::HashSet::new();
                        config_schema::disabled_rows(&c.rows, &mut disabled);
                        let schema = config_schema::render(&profile, &catalog, &shapes, &disabled);
                        let text = serde_json::to_string_pretty(&schema).unwrap_or_default();
                        stdout::print(&format!("{text}\n"))
                    }
                    Err(e) => {
                        eprintln!("{e}");
                        ExitCode::from(1)
                    }
                }
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(CONFIG_ERROR)
            }
        },
        Mode::Profile {
            profile,
            patches,
            args,
        } => run_profile(&home, &profile, &patches, &args),
        Mode::Acp { args } => run_acp(&home, &args, extensions),
        Mode::Sessions { args } => sessions::run(&home, &args),
        Mode::Memory { args } => memory_cmd::run(&home, &args),
        Mode::Plugin { args } => plugin_cmd::run(&home, &args),
        Mode::Models { args } => models_cmd::run(&home, &args),
        Mode::Recreate { .. } => ExitCode::from(1),
    }
}

pub(crate) fn run_profile(
    home: &std::path::Path,
    profile: &str,
    patches: &[String],
    args: &[String],
) -> ExitCode {
    match profile::app_of(home, profile) {
        profile::App::Web => return webapp::run(home, profile, patches, args),
        profile::App::Sdk => return sdkapp::run(home, profile, patches, args),
        profile::App::Acp => return sdkapp::run_acp(home, profile, patches, args),
        profile::App::Tui => return tuiapp::run(home, profile, patches, args),
        profile::App::Headless => {}
    }
    let startup = match headless::parse_args(args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            // A script reading `--json` run events finds the failure on stdout too.
            if args.iter().any(|a| a == "--json") {
                let message = e.strip_prefix("error: ").unwrap_or(&e);
                let line = run_events::RunEvents::error_line(message);
                let _ = stdout::write(&format!("{line}\n"));
            }
            return ExitCode::from(1);
        }
    };
    let (task, format, resume, progress) = match startup {
        headless::Startup::Help => return stdout::print(headless::HELP),
        headless::Startup::Run {
            task,
            format,
            resume,
            progress,
        } => (task, format, resume, progress),
    };
    let mut ctx = serde_json::Map::new();
    ctx.insert("headlessStartup".into(), serde_json::json!({"task": task}));
    sdkapp::boot_and_run(
        home,
        profile,
        patches,
        true,
        ctx,
        Box::new(move |tree| Box::pin(headless::run(tree, format, resume, progress))),
    )
}

const ACP_HELP: &str = "\
Usage: dsh acp [--patch FILE]... [--projection rich|committed]
       dsh acp --compositions DIR [--projection rich|committed]

Serve the Agent Client Protocol (JSON-RPC 2.0, one JSON object per line) on stdin/stdout:
the server editors such as Zed start. It serves the `acp` profile, as upstream 0.2 does:
the base bundle (every tool, MCP servers, LSP, skills, subagents, goals, slash commands)
plus the ACP app, with $DSH_HOME/cordis.patch.yml, profiles/acp/cordis.patch.yml and
--patch files on top (same as `dsh --profile acp`).

Options:
  --patch FILE         one more patch layer (repeatable)
  --projection P       rich (what editors expect, the default) or committed (upstream
                       0.1's stream)
  --compositions DIR   serve one of upstream's example compositions instead, chosen by
                       DSH_SNAPSHOT_CONFIG (a file in DIR, default cordis.yml): for the
                       conformance suite. With DSH_SNAPSHOT_CONFIG or DSH_SNAPSHOT set and
                       no DIR, the built-in copy of upstream's example composition serves.
";

/// `dsh acp`'s options.
struct AcpArgs {
    compositions: Option<std::path::PathBuf>,
    projection: Option<dsh_acp::Projection>,
    patches: Vec<String>,
}

fn parse_acp_args(args: &[String]) -> Result<Option<AcpArgs>, String> {
    let mut out = AcpArgs {
        compositions: None,
        projection: None,
        patches: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = |what: &str| {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("dsh acp: {flag} needs {what}"))
        };
        match flag {
            "-h" | "--help" => return Ok(None),
            "--compositions" => out.compositions = Some(value("a folder")?.into()),
            "--patch" => out.patches.push(value("a file")?),
            "--projection" => {
                out.projection = Some(match value("rich or committed")?.as_str() {
                    "rich" => dsh_acp::Projection::Rich,
                    "committed" => dsh_acp::Projection::Committed,
                    other => {
                        return Err(format!(
                            "dsh acp: --projection must be rich or committed, not {other:?}"
                        ));
                    }
                })
            }
            _ => {
                return Err(format!(
                    "dsh acp: unknown argument {a:?} (see dsh acp --help)"
                ));
            }
        }
    }
    Ok(Some(out))
}

fn run_acp(home: &std::path::Path, args: &[String], extensions: &Extensions) -> ExitCode {
    let opts = match parse_acp_args(args) {
        Ok(Some(o)) => o,
        Ok(None) => return stdout::print(ACP_HELP),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let snapshot = std::env::var("DSH_SNAPSHOT").ok().filter(|v| !v.is_empty());
    let config = std::env::var("DSH_SNAPSHOT_CONFIG")
        .ok()
        .filter(|v| !v.is_empty());
    if opts.compositions.is_none() && snapshot.is_none() && config.is_none() {
        let mut rest = Vec::new();
        if let Some(p) = opts.projection {
            rest.push(format!(
                "--projection={}",
                match p {
                    dsh_acp::Projection::Rich => "rich",
                    dsh_acp::Projection::Committed => "committed",
                }
            ));
        }
        return sdkapp::run_acp(home, "acp", &opts.patches, &rest);
    }
    if !opts.patches.is_empty() {
        eprintln!(
            "error: dsh acp: --patch applies to the acp profile, not to an example composition"
        );
        return ExitCode::from(1);
    }
    let mut layers =
        match dsh_acp::composition_layers(opts.compositions.as_deref(), config.as_deref()) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("dsh: {e}");
                return ExitCode::from(CONFIG_ERROR);
            }
        };
    if snapshot.is_none() {
        let patch = home.join("cordis.patch.yml");
        let text = match dsh_kernel::config::read_config_file(&patch) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("dsh: {e}");
                return ExitCode::from(CONFIG_ERROR);
            }
        };
        if let Some(text) = text {
            match dsh_kernel::config::Layer::parse(
                patch.display().to_string(),
                patch.display().to_string(),
                &text,
            ) {
                Ok(l) => layers.push(l),
                Err(e) => {
                    eprintln!("dsh: {e}");
                    return ExitCode::from(CONFIG_ERROR);
                }
            }
        }
    }
    let composition = match dsh_kernel::config::compose(&layers) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dsh: {e}");
            return ExitCode::from(CONFIG_ERROR);
        }
    };
    // A patch that matched nothing is not fatal, but the composition is not what its file
    // says: say so (stderr; stdout carries protocol frames only).
    for w in &composition.warnings {
        eprintln!("dsh: warning: {w}");
    }
    let rt = match runtime(false) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dsh: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    rt.block_on(async move {
        let env = boot::eval_env(home, serde_json::Map::new());
        let root = Context::new_root();
        let mut catalog = boot::catalog();
        if let Some(add) = extensions.acp_plugins {
            add(&mut catalog);
        }
        let tree = match boot::load(&root, &catalog, &composition, &env) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(CONFIG_ERROR);
            }
        };
        let result = dsh_acp::serve_with(
            tree.context(),
            tokio::io::stdin(),
            tokio::io::stdout(),
            opts.projection,
        )
        .await;
        if let Some(writers) = tree.context().get::<dsh_persistence::SessionWriters>()
            && let Err(e) = writers.flush_all().await
        {
            eprintln!("dsh acp: a session log could not be written completely: {e}");
        }
        tree.unload();
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("dsh acp: {e}");
                ExitCode::from(1)
            }
        }
    })
}
