//! `dsh`: the DeepSeek Harness launcher.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod boot;
mod headless;
mod launcher;
mod plugin_cmd;
mod profile;
mod progress;
mod sdkapp;
mod sessions;
mod webapp;

use std::process::ExitCode;

use dsh_kernel::Context;
use launcher::Mode;

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

fn main() -> ExitCode {
    let raw: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    match raw.first().and_then(|a| a.to_str()) {
        Some(REAPER_ARG) => {
            dsh_tools::process::run_reaper();
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
    if let Ok(exe) = std::env::current_exe() {
        dsh_tools::process::set_reaper_command(exe.clone(), REAPER_ARG);
        dsh_sandbox::landlock::set_launcher(dsh_sandbox::landlock::launcher_for(&exe));
    }
    init_tracing();
    let mode = match launcher::parse(&argv) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {}", e.0);
            return ExitCode::from(1);
        }
    };
    let home = dsh_policies::dsh_home();
    match mode {
        Mode::Version => {
            println!("{}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Mode::Help => {
            print!("{}", launcher::HELP);
            ExitCode::SUCCESS
        }
        Mode::Dump {
            profile,
            default_only,
            patches,
        } => match profile::compose_profile(&home, &profile, &patches, default_only) {
            Ok(c) => {
                for w in &c.warnings {
                    eprintln!("dsh: {w}");
                }
                print!("{}", dsh_kernel::config::render_dump(&c));
                ExitCode::SUCCESS
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
        Mode::Acp { args } => run_acp(&home, &args),
        Mode::Sessions { args } => sessions::run(&home, &args),
        Mode::Plugin { args } => plugin_cmd::run(&home, &args),
    }
}

fn run_profile(
    home: &std::path::Path,
    profile: &str,
    patches: &[String],
    args: &[String],
) -> ExitCode {
    match profile::app_of(home, profile) {
        profile::App::Web => return webapp::run(home, profile, patches, args),
        profile::App::Sdk => return sdkapp::run(home, profile, patches, args),
        profile::App::Acp => return sdkapp::run_acp(home, profile, patches, args),
        profile::App::Headless => {}
    }
    let startup = match headless::parse_args(args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let (task, format, resume, progress) = match startup {
        headless::Startup::Help => {
            print!("{}", headless::HELP);
            return ExitCode::SUCCESS;
        }
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

fn run_acp(home: &std::path::Path, args: &[String]) -> ExitCode {
    if let Some(a) = args.first() {
        if a == "-h" || a == "--help" {
            println!(
                "Usage: dsh acp\n\nServe the Agent Client Protocol (JSON-RPC 2.0, one JSON object per line) on stdin/stdout.\nThe composition is chosen by DSH_SNAPSHOT_CONFIG (default: the built-in ACP composition);\n$DSH_HOME/cordis.patch.yml is applied on top outside snapshot mode."
            );
            return ExitCode::SUCCESS;
        }
        eprintln!("error: dsh acp takes no arguments, got {a:?}");
        return ExitCode::from(1);
    }
    let snapshot = std::env::var("DSH_SNAPSHOT").ok().filter(|v| !v.is_empty());
    let config = std::env::var("DSH_SNAPSHOT_CONFIG")
        .ok()
        .filter(|v| !v.is_empty());
    let mut layers = match dsh_acp::composition_layers(config.as_deref()) {
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
        let catalog = match snapshot {
            Some(_) => boot::snapshot_catalog(),
            None => boot::catalog(),
        };
        let tree = match boot::load(&root, &catalog, &composition, &env) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(CONFIG_ERROR);
            }
        };
        let result = dsh_acp::serve(tree.context(), tokio::io::stdin(), tokio::io::stdout()).await;
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
