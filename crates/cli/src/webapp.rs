//! Running the web app (`dsh web`, or any profile stacking the web bundle): parse its
//! flags before composing, load the tree with `ctx.webStartup`, serve, print the URL line,
//! open the browser on a local launch, and shut down cleanly on Ctrl-C (exit 130) or
//! SIGTERM (exit 143): running turns are cancelled and every log is flushed.

use std::path::Path;
use std::process::ExitCode;

use dsh_kernel::Context;
use dsh_web::startup::{self, Startup};

/// Exit status after Ctrl-C and after SIGTERM (128 + signal number).
const SIGINT_EXIT: u8 = 130;
const SIGTERM_EXIT: u8 = 143;

pub fn run(home: &Path, profile_name: &str, patches: &[String], args: &[String]) -> ExitCode {
    let startup = match startup::parse_args(args) {
        Ok(Startup::Help) => return crate::stdout::print(startup::HELP),
        Ok(Startup::Run(s)) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let mut ctx = serde_json::Map::new();
    ctx.insert("webStartup".into(), startup.to_ctx_value());
    crate::sdkapp::boot_and_run(
        home,
        profile_name,
        patches,
        false,
        ctx,
        Box::new(|root| {
            Box::pin(async move {
                let code = serve(root).await;
                if let Some(writers) = root.get::<dsh_persistence::SessionWriters>()
                    && let Err(e) = writers.flush_all().await
                {
                    eprintln!("dsh web: a session log could not be written completely: {e}");
                }
                ExitCode::from(code)
            })
        }),
    )
}

async fn serve(root: &Context) -> u8 {
    let web = match dsh_web::start(root).await {
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
        let _ = crate::stdout::write(&format!("dsh web: {}\n", web.url()));
    }
    if web.wants_browser() && dsh_web::is_local_launch(|k| std::env::var(k).ok()) {
        let _ = crate::stdout::write(
            "dsh web: opening the default browser; pass --no-open to disable\n",
        );
        if let Err(e) = dsh_web::open_browser(web.url()) {
            eprintln!("dsh web: could not open the default browser ({e}); open the URL above");
        }
    }
    let mut sigterm =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let term = async {
        match sigterm.as_mut() {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
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
