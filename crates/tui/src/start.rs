//! The terminal UI as an app (`dsh tui`, `dsh` alone on a terminal, or any profile whose
//! tree holds the `@deepseek-ai/dsh-tui` row). Without a usable terminal a given task runs
//! in the headless profile instead, with a line saying why.

// An app owns the process: its usage errors and help go to the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use dsh_app::{App, Launch, Run, Start, Threads};

use crate::{Archive, Args, HELP, TUI_PLUGIN};

/// Opens the archive shared with the other front ends, from `$DSH_HOME`.
pub type OpenArchive = fn(&Path) -> Arc<dyn Archive>;

/// The terminal UI app.
pub struct TuiApp {
    /// Where archived sessions are recorded; none keeps archiving to this run.
    pub archive: Option<OpenArchive>,
}

impl App for TuiApp {
    fn plugin(&self) -> &'static str {
        TUI_PLUGIN
    }

    fn start(&self, launch: &Launch<'_>) -> Start {
        let startup = match crate::parse_args(launch.args) {
            Ok(Args::Help) => return Start::Exit(dsh_app::stdout::print(HELP)),
            Ok(Args::Run(s)) => s,
            Err(e) => return dsh_app::usage_error(&e),
        };
        if let Some(why) = crate::unusable_terminal() {
            let Some(task) = startup.prompt.clone() else {
                eprintln!(
                    "dsh: the terminal UI needs a terminal ({why}); to run one task without it: dsh headless \"task\""
                );
                return Start::Exit(ExitCode::from(1));
            };
            eprintln!("dsh: the terminal UI needs a terminal ({why}); running the task headless");
            let mut args = Vec::new();
            if let Some(id) = &startup.resume {
                args.extend(["--session-id".to_string(), id.clone()]);
            }
            args.extend(["--".to_string(), task]);
            return Start::Instead {
                profile: "headless".into(),
                args,
            };
        }
        let archive = self.archive.map(|open| open(launch.home));
        Start::Run(Run {
            ctx: serde_json::Map::new(),
            threads: Threads::Server,
            main: Box::new(move |tree| Box::pin(crate::run(tree, startup, archive))),
        })
    }
}
