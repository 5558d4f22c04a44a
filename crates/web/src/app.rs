//! The web app (`dsh web`, or any profile whose tree holds the web-app row): parse its
//! flags before the tree is evaluated, load it with `ctx.webStartup`, serve, print the URL line,
//! open the browser on a local launch, and shut down cleanly on Ctrl-C (exit 130) or
//! SIGTERM (exit 143): running turns are cancelled and every log is flushed.

// An app owns the process: its usage errors and help go to the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use dsh_app::stdout;
use dsh_app::{App, Launch, Run, Start, Threads};
use dsh_kernel::Context;

use crate::plugins::WEB_APP_PLUGIN;
use crate::startup::{self, Startup};

/// Exit status after Ctrl-C and after SIGTERM (128 + signal number).
const SIGINT_EXIT: u8 = 130;
const SIGTERM_EXIT: u8 = 143;

/// The web app, marked by the `@deepseek-ai/dsh-web-app` row: parses the web flags into
/// `ctx.webStartup` before the tree is evaluated, then serves until a signal.
pub struct WebApp;

impl App for WebApp {
    fn plugin(&self) -> &'static str {
        WEB_APP_PLUGIN
    }

    fn start(&self, launch: &Launch<'_>) -> Start {
        let startup = match startup::parse_args(launch.args) {
            Ok(Startup::Help) => return Start::Exit(stdout::print(startup::HELP)),
            Ok(Startup::Run(s)) => s,
            Err(e) => return dsh_app::usage_error(&e),
        };
        let mut ctx = serde_json::Map::new();
        ctx.insert("webStartup".into(), startup.to_ctx_value());
        Start::Run(Run {
            ctx,
            threads: Threads::Server,
            main: Box::new(|root| Box::pin(async move { ExitCode::from(serve(root).await) })),
        })
    }
}

async fn serve(root: &Context) -> u8 {
    let web = match crate::start(root).await {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    for w in web.warnings() {
        eprintln!("dsh web: warning: {w}");
    }
    // The server keeps serving when nobody reads stdout any more: these lines only inform.
    if web.prints_url() {
        let _ = stdout::write(&format!("dsh web: {}\n", web.url()));
    }
    if web.wants_browser() && crate::is_local_launch(|k| std::env::var(k).ok()) {
        let _ = stdout::write("dsh web: opening the default browser; pass --no-open to disable\n");
        if let Err(e) = crate::open_browser(web.url()) {
            eprintln!("dsh web: could not open the default browser ({e}); open the URL above");
        }
    }
    let term = dsh_app::sigterm();
    let code = tokio::select! {
        _ = tokio::signal::ctrl_c() => SIGINT_EXIT,
        () = term => SIGTERM_EXIT,
    };
    // A second Ctrl-C does not wait for the sessions to settle.
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(i32::from(code));
        }
    });
    web.shutdown().await;
    code
}
