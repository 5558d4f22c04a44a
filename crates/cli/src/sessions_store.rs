//! `dsh sessions` on a PostgreSQL team store: the same commands as on local logs. `list` asks
//! the database; `show` writes the stored log to a private scratch directory and reads it
//! there exactly as a local one; `export` prints the stored records; `fork` forks that copy
//! and writes the new session to the store in one transaction.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use dsh_store_pg::Store;

use crate::sessions::{HELP, fork_in, format_time, run_local};

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("dsh sessions: {msg}");
    ExitCode::from(1)
}

/// A private directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!(
            "dsh-sessions-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        let mut builder = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `dsh sessions <args>` against the team store at `url`.
pub(crate) fn run(url: &str, args: &[String]) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the async runtime: {e}")),
    };
    runtime.block_on(async {
        let mut store = match Store::connect(url).await {
            Ok(s) => s,
            Err(e) => return fail(format!("team store: {e}")),
        };
        let arg = |i: usize| args.get(i).map(String::as_str);
        match (arg(0), arg(1)) {
            (Some("list"), None) => list(&store, false).await,
            (Some("list"), Some("--all")) if args.len() == 2 => list(&store, true).await,
            (Some("show" | "fork"), Some(id)) => {
                let scratch = match Scratch::new() {
                    Ok(s) => s,
                    Err(e) => return fail(e),
                };
                match copy(&store, id, &scratch.0).await {
                    Ok(()) if args[0] == "show" => run_local(&scratch.0, args),
                    Ok(()) => fork(&mut store, &scratch.0, args).await,
                    Err(e) => fail(e),
                }
            }
            (Some("export"), Some(id)) if args.len() == 2 => export(&store, id).await,
            _ => {
                eprint!("{HELP}");
                ExitCode::from(1)
            }
        }
    })
}

/// Writes session `id` of the store as a local log under `root`.
async fn copy(store: &Store, id: &str, root: &Path) -> Result<(), String> {
    let written = dsh_team::worker::materialize(store, id, root)
        .await
        .map_err(|e| e.to_string())?;
    if written {
        return Ok(());
    }
    let pending = store.pending(id).await.map_err(|e| e.to_string())?;
    Err(format!(
        "session \"{id}\" has not run a turn yet ({} input(s) queued)",
        pending.len()
    ))
}

async fn list(store: &Store, all: bool) -> ExitCode {
    let rows = match store.overviews(None, 100_000).await {
        Ok(r) => r,
        Err(e) => {
            return fail(format!(
                "team store: {e} (`dsh team migrate` creates its tables)"
            ));
        }
    };
    let mut out = crate::stdout::Guarded::new();
    for o in rows {
        let header = o
            .row
            .header
            .as_deref()
            .and_then(|h| dsh_session::parse_header_line(h).ok());
        let created = header
            .as_ref()
            .map_or(o.created_ms, |h| h.created_at as i64);
        let updated = o.last_prompt_ms.unwrap_or(created).max(created);
        let title = match (&o.title, &header) {
            (Some(t), _) => t.clone(),
            (None, None) => "(queued, no turn yet)".to_string(),
            (None, Some(_)) => String::new(),
        };
        let cwd = match (all, header.as_ref().and_then(|h| h.cwd.as_deref())) {
            (true, Some(cwd)) => format!("  {cwd}"),
            (true, None) => "  -".to_string(),
            (false, _) => String::new(),
        };
        let _ = writeln!(
            out,
            "{}  {}  {:>3} turns  {title}{cwd}",
            o.row.id,
            format_time(updated),
            o.turns
        );
    }
    out.finish(ExitCode::SUCCESS)
}

async fn export(store: &Store, id: &str) -> ExitCode {
    let row = match store.session(id).await {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let Some(header) = row.header else {
        return fail(format!("session \"{id}\" has not run a turn yet"));
    };
    let mut out = crate::stdout::Guarded::new();
    let _ = writeln!(out, "{header}");
    let mut after = 0;
    loop {
        let page = match store.read(id, after, 1000).await {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        let Some(last) = page.last() else { break };
        after = last.seq;
        for e in &page {
            let _ = writeln!(out, "{}", e.data);
        }
    }
    out.finish(ExitCode::SUCCESS)
}

/// `fork <id> [--at SEQ]` of the copy under `root`, then the fork written to the store.
async fn fork(store: &mut Store, root: &Path, args: &[String]) -> ExitCode {
    let at = match (args.get(2).map(String::as_str), args.get(3)) {
        (None, _) => None,
        (Some("--at"), Some(seq)) if args.len() == 4 => match seq.parse::<u64>() {
            Ok(s) => Some(s),
            Err(_) => return fail(format!("--at needs an event seq, got {seq:?}")),
        },
        _ => return fail("usage: dsh sessions fork <id> [--at SEQ]"),
    };
    let parent = &args[1];
    let (header, events) = match fork_in(root, parent, at) {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let owner = match store.session(parent).await {
        Ok(r) => r.owner_user,
        Err(e) => return fail(e),
    };
    let seed = header.seed_length.unwrap_or(0) as i64;
    let records: Vec<_> = events
        .iter()
        .map(|e| dsh_team::store_row::record(e))
        .collect();
    let header_text = header.to_value().to_string();
    match store
        .import_session(
            &header.id,
            Some((parent, seed)),
            owner.as_deref(),
            &header_text,
            &records,
        )
        .await
    {
        Ok(true) => crate::stdout::print(&format!("{}\n", header.id)),
        Ok(false) => fail(format!("session {} exists already", header.id)),
        Err(e) => fail(format!("team store: {e}")),
    }
}
