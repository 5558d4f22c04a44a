//! The SDK runtime as an app (`dsh --profile sdk`, or any profile whose tree holds the
//! `@deepseek-ai/dsh-sdk-app` row): it takes no arguments, needs `$DSH_HOME`, and serves
//! stdin/stdout until its client ends.

// An app owns the process: its usage errors and help go to the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use dsh_app::{App, Launch, Run, Start, Threads};

pub const HELP: &str = "\
Usage: dsh --profile sdk [--patch FILE]...

Serve the DeepSeek Harness SDK runtime protocol (JSON-RPC 2.0, one JSON object per line)
on stdin/stdout, as upstream's SDKs expect when they launch the harness: for example the
Python SDK's DeepSeekHarness(dsh_bin=\"dsh\", dsh_home=\"…\"). $DSH_HOME is required.
";

/// Exit code for bad configuration.
const CONFIG_ERROR: u8 = 2;

/// The SDK runtime app.
pub struct SdkRuntimeApp;

impl App for SdkRuntimeApp {
    fn plugin(&self) -> &'static str {
        crate::SDK_APP_PLUGIN
    }

    fn start(&self, launch: &Launch<'_>) -> Start {
        if let Some(code) = dsh_app::no_args("the SDK runtime", HELP, launch.args) {
            return Start::Exit(code);
        }
        if std::env::var_os("DSH_HOME").is_none_or(|h| h.is_empty()) {
            eprintln!("dsh: the SDK runtime needs DSH_HOME (the SDK never uses ~/.dsh implicitly)");
            return Start::Exit(ExitCode::from(CONFIG_ERROR));
        }
        Start::Run(Run {
            ctx: serde_json::Map::new(),
            threads: Threads::Server,
            main: Box::new(|ctx| {
                Box::pin(async move {
                    dsh_app::served(
                        crate::serve(ctx, tokio::io::stdin(), tokio::io::stdout()).await,
                    )
                })
            }),
        })
    }
}
