//! Running the terminal UI (`dsh tui`, `dsh` alone on a terminal, or any profile stacking
//! the tui bundle). Without a usable terminal a given task runs headless instead, with a
//! line saying why.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

pub fn run(home: &Path, profile: &str, patches: &[String], args: &[String]) -> ExitCode {
    let startup = match dsh_tui::parse_args(args) {
        Ok(dsh_tui::Args::Help) => return crate::stdout::print(dsh_tui::HELP),
        Ok(dsh_tui::Args::Run(s)) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    if let Some(why) = dsh_tui::unusable_terminal() {
        let Some(task) = startup.prompt.clone() else {
            eprintln!(
                "dsh: the terminal UI needs a terminal ({why}); to run one task without it: dsh headless \"task\""
            );
            return ExitCode::from(1);
        };
        eprintln!("dsh: the terminal UI needs a terminal ({why}); running the task headless");
        let mut headless_args = Vec::new();
        if let Some(id) = &startup.resume {
            headless_args.extend(["--session-id".to_string(), id.clone()]);
        }
        headless_args.extend(["--".to_string(), task]);
        return crate::run_profile(home, "headless", patches, &headless_args);
    }
    let archive: Arc<dyn dsh_tui::Archive> = Arc::new(WebArchive(dsh_web::WorkspaceStore::new(
        &home.join("storages"),
    )));
    crate::sdkapp::boot_and_run(
        home,
        profile,
        patches,
        false,
        serde_json::Map::new(),
        Box::new(move |tree| Box::pin(dsh_tui::run(tree, startup, Some(archive)))),
    )
}

/// The archive `dsh web` keeps (`<storages>/workspace.json`), so a session archived in
/// one front end is archived in the other.
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
