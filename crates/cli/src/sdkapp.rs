//! The stdio apps of profiles: the SDK runtime (`dsh --profile sdk`, crate
//! `dsh-sdk-runtime`) and the ACP server over a profile's tree (`dsh --profile acp`, crate
//! `dsh-acp`). Each boots the profile, serves stdin/stdout until its client ends, then
//! flushes every session log.

use std::path::Path;
use std::process::ExitCode;

use dsh_kernel::Context;

use crate::{CONFIG_ERROR, boot, profile, runtime};

pub const HELP: &str = "\
Usage: dsh --profile sdk [--patch FILE]...

Serve the DeepSeek Harness SDK runtime protocol (JSON-RPC 2.0, one JSON object per line)
on stdin/stdout, as upstream's SDKs expect when they launch the harness: for example the
Python SDK's DeepSeekHarness(dsh_bin=\"dsh\", dsh_home=\"…\"). $DSH_HOME is required.
";

/// Runs the SDK runtime of `profile`.
pub fn run(home: &Path, profile: &str, patches: &[String], args: &[String]) -> ExitCode {
    if let Some(code) = no_args("the SDK runtime", HELP, args) {
        return code;
    }
    if std::env::var_os("DSH_HOME").is_none_or(|h| h.is_empty()) {
        eprintln!("dsh: the SDK runtime needs DSH_HOME (the SDK never uses ~/.dsh implicitly)");
        return ExitCode::from(CONFIG_ERROR);
    }
    serve_profile(
        home,
        profile,
        patches,
        Box::new(|ctx| {
            Box::pin(dsh_sdk_runtime::serve(
                ctx,
                tokio::io::stdin(),
                tokio::io::stdout(),
            ))
        }),
    )
}

pub const ACP_HELP: &str = "\
Usage: dsh --profile acp [--patch FILE]... [--projection rich|committed]

Serve the Agent Client Protocol (JSON-RPC 2.0, one JSON object per line) on stdin/stdout
over the profile's tree; `dsh acp` is the same server over the `acp` profile.
";

/// Runs the ACP server over `profile`'s tree; `--projection` overrides the acp-agent row's.
pub fn run_acp(home: &Path, profile: &str, patches: &[String], args: &[String]) -> ExitCode {
    let mut projection = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = match a.split_once('=') {
            Some(("--projection", v)) => Some(v.to_string()),
            _ if a == "--projection" => it.next().cloned(),
            _ if a == "-h" || a == "--help" => return crate::stdout::print(ACP_HELP),
            _ => {
                eprintln!("error: the ACP server takes no argument {a:?} (see dsh acp --help)");
                return ExitCode::from(1);
            }
        };
        projection = Some(match value.as_deref() {
            Some("rich") => dsh_acp::Projection::Rich,
            Some("committed") => dsh_acp::Projection::Committed,
            other => {
                eprintln!("error: --projection must be rich or committed, not {other:?}");
                return ExitCode::from(1);
            }
        });
    }
    serve_profile(
        home,
        profile,
        patches,
        Box::new(move |ctx| {
            Box::pin(dsh_acp::serve_with(
                ctx,
                tokio::io::stdin(),
                tokio::io::stdout(),
                projection,
            ))
        }),
    )
}

/// `-h` prints `help`; any other argument is an error (exit 1).
fn no_args(what: &str, help: &str, args: &[String]) -> Option<ExitCode> {
    let a = args.first()?;
    if a == "-h" || a == "--help" {
        return Some(crate::stdout::print(help));
    }
    eprintln!("error: {what} takes no arguments, got {a:?}");
    Some(ExitCode::from(1))
}

/// What an app does with its booted tree.
pub(crate) type AppMain = Box<
    dyn for<'a> FnOnce(
        &'a Context,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ExitCode> + 'a>>,
>;

/// Composes `profile`, boots its tree on a runtime (one thread for a single session,
/// two workers for a server), runs `app` on it, unloads the tree, and returns the app's exit
/// code. `ctx` holds the values the tree's `!!js` expressions read from `ctx`.
pub(crate) fn boot_and_run(
    home: &Path,
    profile: &str,
    patches: &[String],
    single_session: bool,
    ctx: serde_json::Map<String, serde_json::Value>,
    app: AppMain,
) -> ExitCode {
    let composition = match profile::compose_profile(home, profile, patches, false) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(CONFIG_ERROR);
        }
    };
    let rt = match runtime(single_session) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dsh: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = rt.block_on(async move {
        let env = boot::eval_env(home, ctx);
        let root = Context::new_root();
        let tree = match boot::load(&root, &boot::catalog(), &composition, &env) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(CONFIG_ERROR);
            }
        };
        let code = app(tree.context()).await;
        tree.unload();
        code
    });
    // A server may end (SDK `shutdown`) while stdin is still open: the blocking stdin
    // reader must not hold the exit. A single-session run waits for its blocking work.
    if !single_session {
        rt.shutdown_background();
    }
    code
}

type Serve = Box<
    dyn for<'a> FnOnce(
        &'a Context,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), String>> + 'a>,
    >,
>;

fn serve_profile(home: &Path, profile: &str, patches: &[String], serve: Serve) -> ExitCode {
    let app: AppMain = Box::new(move |ctx| {
        Box::pin(async move {
            let served = serve(ctx).await;
            if let Some(writers) = ctx.get::<dsh_persistence::SessionWriters>()
                && let Err(e) = writers.flush_all().await
            {
                eprintln!("dsh: a session could not be saved completely: {e}");
            }
            match served {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("dsh: {e}");
                    ExitCode::from(1)
                }
            }
        })
    });
    boot_and_run(home, profile, patches, false, serde_json::Map::new(), app)
}
