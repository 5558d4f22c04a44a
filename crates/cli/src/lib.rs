//! `dsh`: the DeepSeek Harness launcher. This library is the application itself: the
//! `dsh` binary calls [`main`]; a test-support binary (`dsh-conformance`) calls it with
//! [`Extensions`] that add plugins. It prints to the terminal as an application does.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod boot;
mod config_schema;
mod launcher;
mod memory_cmd;
mod models_cmd;
mod plugin_cmd;
mod profile;
mod sessions;
mod sessions_store;

pub(crate) use dsh_app::stdout;

use std::process::ExitCode;

use dsh_kernel::Catalog;
use launcher::Mode;

/// What a binary built on this library adds to `dsh`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extensions {
    /// Adds plugins to the catalog every app boots from (the fixtures of upstream's
    /// snapshot suite, in `dsh-conformance`; the production binary adds none).
    pub plugins: Option<fn(&mut Catalog)>,
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
        Some(dsh_team::docker::EXEC_ARG) => return dsh_team::docker::exec_main(&raw[1..]),
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
        } => run_profile(&home, &profile, &patches, &args, extensions),
        Mode::Acp { args } => run_acp(&home, &args, extensions),
        Mode::Sessions { args } => sessions::run(&home, &args),
        Mode::Memory { args } => memory_cmd::run(&home, &args),
        Mode::Plugin { args } => plugin_cmd::run(&home, &args),
        Mode::Models { args } => models_cmd::run(&home, &args),
        Mode::Team { command, args } => dsh_team::cli::run(&home, &command, &args),
        Mode::Recreate { .. } => ExitCode::from(1),
    }
}

/// Composes `profile` and boots it through the one boot path; an app that hands its run
/// to another profile (the terminal UI without a terminal) gets that profile booted once.
pub(crate) fn run_profile(
    home: &std::path::Path,
    profile: &str,
    patches: &[String],
    args: &[String],
    extensions: &Extensions,
) -> ExitCode {
    let catalog = catalog_with(extensions);
    let mut profile = profile.to_string();
    let mut args = args.to_vec();
    for _ in 0..2 {
        let composition = match profile::compose_profile(home, &profile, patches, false) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(CONFIG_ERROR);
            }
        };
        match boot::launch(home, &profile, &composition, &args, &catalog) {
            Ok(code) => return code,
            Err((next, next_args)) => (profile, args) = (next, next_args),
        }
    }
    eprintln!("dsh: the app of profile \"{profile}\" handed its run on again; not following");
    ExitCode::from(1)
}

/// The catalog, with the plugins `extensions` adds.
fn catalog_with(extensions: &Extensions) -> Catalog {
    let mut catalog = boot::catalog();
    if let Some(add) = extensions.plugins {
        add(&mut catalog);
    }
    catalog
}

/// `dsh acp`: the `acp` profile, or one of upstream's example compositions, through the
/// same boot path.
fn run_acp(home: &std::path::Path, args: &[String], extensions: &Extensions) -> ExitCode {
    let (name, layers, args) = match dsh_acp::command(home, args) {
        dsh_acp::Command::Exit(code) => return code,
        dsh_acp::Command::Profile { patches, args } => {
            return run_profile(home, "acp", &patches, &args, extensions);
        }
        dsh_acp::Command::Composition { name, layers, args } => (name, layers, args),
    };
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
    let catalog = catalog_with(extensions);
    match boot::launch(home, &name, &composition, &args, &catalog) {
        Ok(code) => code,
        Err((profile, args)) => run_profile(home, &profile, &[], &args, extensions),
    }
}
