//! `dsh sessions`: stored sessions from the terminal (upstream offers these only in its web
//! UI). Works on logs written by either implementation, plain or zstd.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use dsh_llm::{ContentBlock, Message};
use dsh_persistence::{ChunkPacking, Compression, Loaded, SessionFiles};
use dsh_session::{Event, RecordFormat, Session, SessionHeader, types, write_event};
use serde_json::Value;

pub(crate) const HELP: &str = "\
Usage: dsh sessions <command> [options]

Stored sessions under $DSH_HOME/sessions (default ~/.dsh/sessions), or those of a team
store: --storage postgres://… (default $DSH_STORAGE, then team.storage in settings.yaml;
--storage local: the local logs). In a team store, list shows every session (--all also
the directory each last ran in), show and export read the stored log, and fork writes the
new session to the store, where `dsh team submit --session <id>` queues its next input.

Commands:
  list [--all]                      sessions of this directory (--all: every directory),
                                    newest first: id, updated, turns, title; a
                                    subagent child is listed under its parent
  show <id|file> [--messages|--events|--json]
                                    the transcript, then the session's subagent children
                                    (open one with `show <child-id>`); --messages prints the model-visible
                                    history (derive_messages) as JSON lines; --events one
                                    line per event; --json every event as JSONL
  fork <id> [--at SEQ]              a new session with the history up to the end of the
                                    turn containing SEQ (default: the last completed turn)
  export <id>                       the log as plain JSONL on stdout
";

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("dsh sessions: {msg}");
    ExitCode::from(1)
}

fn files(root: &Path, compression: Compression) -> SessionFiles {
    SessionFiles::new(root, compression, ChunkPacking::Packed)
}

pub(crate) fn locate(root: &Path, id_or_file: &str) -> Result<PathBuf, String> {
    let as_path = PathBuf::from(id_or_file);
    if as_path.is_file() {
        return Ok(as_path);
    }
    for c in [Compression::Zstd, Compression::None] {
        if let Ok(Some(p)) = files(root, c).find(id_or_file) {
            return Ok(p);
        }
    }
    Err(format!(
        "no stored session \"{id_or_file}\" under {}",
        root.display()
    ))
}

pub(crate) fn inspect(root: &Path, path: &Path) -> Result<Loaded, String> {
    files(root, Compression::Zstd)
        .inspect_file(path)
        .map_err(|e| e.to_string())
}

fn title_of(events: &[Arc<Event>]) -> String {
    events
        .iter()
        .rev()
        .find(|e| e.is(types::SESSION_TITLE))
        .and_then(|e| {
            e.data
                .get("title")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

pub(crate) fn format_time(ms: i64) -> String {
    let t = dsh_kernel::time::utc(ms);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}Z",
        t.year, t.month, t.day, t.hour, t.minute
    )
}

fn list(root: &Path, all: bool) -> ExitCode {
    let cwd = std::env::current_dir()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut rows = Vec::new();
    let store = files(root, Compression::Zstd);
    for path in store.log_paths() {
        match store.summarize_file(&path) {
            Ok(s) => {
                if !all && s.header.cwd.as_deref() != Some(cwd.as_str()) {
                    continue;
                }
                rows.push((s.updated_at, s.header, s.turns, s.title));
            }
            Err(e) => eprintln!("dsh sessions: skipping {}: {e}", path.display()),
        }
    }
    rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.id.cmp(&b.1.id)));
    // Subagent children are listed under their parent (oldest first), not among the
    // sessions a person started; a child whose parent is not listed stands on its own.
    let listed: std::collections::HashSet<String> = rows.iter().map(|r| r.1.id.clone()).collect();
    let parent_of = |h: &SessionHeader| {
        h.parent_session
            .clone()
            .filter(|p| is_subagent_child(h) && listed.contains(p))
    };
    let mut children: std::collections::HashMap<String, Vec<usize>> = Default::default();
    for (i, r) in rows.iter().enumerate() {
        if let Some(p) = parent_of(&r.1) {
            children.entry(p).or_default().push(i);
        }
    }
    for list in children.values_mut() {
        list.sort_by_key(|&i| (rows[i].1.created_at, rows[i].1.id.clone()));
    }
    let mut out = crate::stdout::Guarded::new();
    let mut stack: Vec<(usize, usize)> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| parent_of(&r.1).is_none())
        .map(|(i, _)| (i, 0))
        .rev()
        .collect();
    while let Some((i, depth)) = stack.pop() {
        let (updated, header, turns, title) = &rows[i];
        let cwd = if all && depth == 0 {
            format!("  {}", header.cwd.as_deref().unwrap_or("-"))
        } else {
            String::new()
        };
        let indent = if depth == 0 {
            String::new()
        } else {
            format!("{}\u{21b3} ", "  ".repeat(depth))
        };
        let _ = writeln!(
            out,
            "{indent}{}  {}  {turns:>3} turns  {title}{cwd}",
            header.id,
            format_time(*updated)
        );
        if let Some(kids) = children.get(&header.id) {
            stack.extend(kids.iter().rev().map(|&k| (k, depth + 1)));
        }
    }
    out.finish(ExitCode::SUCCESS)
}

/// Whether a session was started by a delegation (its header names its parent and origin).
fn is_subagent_child(h: &SessionHeader) -> bool {
    h.parent_session.is_some() && h.origin.as_deref() == Some("subagent")
}

/// One stored child of a session.
struct ChildRow {
    id: String,
    created_at: u64,
    label: String,
    turns: usize,
    outcome: String,
}

/// The stored subagent children of session `id` (siblings of its log), oldest first.
fn children_of(root: &Path, id: &str) -> Vec<ChildRow> {
    let store = files(root, Compression::Zstd);
    let mut rows = Vec::new();
    for path in store.log_paths() {
        let Ok(loaded) = store.inspect_file(&path) else {
            continue;
        };
        let h = &loaded.header;
        if !is_subagent_child(h) || h.parent_session.as_deref() != Some(id) {
            continue;
        }
        let seed = (h.seed_length.unwrap_or(0) as usize).min(loaded.events.len());
        let own = &loaded.events[seed..];
        let label = own
            .iter()
            .find(|e| e.event_type.as_str() == "subagent/descriptor")
            .and_then(|e| e.data.get("label").and_then(Value::as_str))
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| title_of(&loaded.events));
        let turns = own.iter().filter(|e| e.is(types::TURN_START)).count();
        let outcome = own
            .iter()
            .rev()
            .find(|e| e.is(types::TURN_END))
            .and_then(|e| e.data.pointer("/reason/kind").and_then(Value::as_str))
            .unwrap_or(if turns == 0 {
                "not started"
            } else {
                "unfinished"
            })
            .to_string();
        rows.push(ChildRow {
            id: h.id.clone(),
            created_at: h.created_at,
            label,
            turns,
            outcome,
        });
    }
    rows.sort_by(|a, b| {
        a.created_at
            .cmp(&b.created_at)
            .then_with(|| a.id.cmp(&b.id))
    });
    rows
}

fn block_line(b: &ContentBlock) -> Option<String> {
    match b {
        ContentBlock::Text { text } if !text.is_empty() => Some(text.clone()),
        ContentBlock::Text { .. } | ContentBlock::Reasoning { .. } => None,
        ContentBlock::ToolCall {
            name, arguments, ..
        } => Some(format!("→ {name} {arguments}")),
        ContentBlock::ToolResult {
            content, is_error, ..
        } => {
            let text: String = content.iter().filter_map(ContentBlock::as_text).collect();
            Some(format!(
                "{} {}",
                if *is_error == Some(true) {
                    "✗"
                } else {
                    "←"
                },
                text.trim_end()
            ))
        }
        ContentBlock::Other(m) => Some(format!(
            "[{}]",
            m.get("type").and_then(Value::as_str).unwrap_or("block")
        )),
    }
}

pub(crate) fn show(root: &Path, target: &str, mode: &str) -> ExitCode {
    let path = match locate(root, target) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let loaded = match inspect(root, &path) {
        Ok(l) => l,
        Err(e) => return fail(format!("{}: {e}", path.display())),
    };
    let mut out = crate::stdout::Guarded::new();
    match mode {
        "--json" => {
            for e in &loaded.events {
                let mut line = String::new();
                write_event(&mut line, e, RecordFormat::Full);
                let _ = writeln!(out, "{line}");
            }
        }
        "--events" => {
            for e in &loaded.events {
                let brief = match e.event_type.as_str() {
                    // Compact deltas answer without building their JSON.
                    types::ASSISTANT_CHUNK => match e.data.delta() {
                        Some(d) => d.chunk_type().to_string(),
                        None => e
                            .data
                            .pointer("/chunk/type")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    },
                    types::TURN_END => dsh_kernel::json::to_string(&e.data["reason"]),
                    types::TURN_START => format!("turn {}", e.data["turn"]),
                    types::STEP_START | types::STEP_END => {
                        format!("{}.{}", e.data["turn"], e.data["step"])
                    }
                    types::TOOL_CALL => e
                        .data
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    _ => String::new(),
                };
                let _ = writeln!(out, "{:>6}  {:<22} {brief}", e.seq, e.event_type);
            }
        }
        "--messages" => {
            let mut session = Session::new(loaded.header.clone());
            for e in &loaded.events {
                if let Err(err) = session.push_event(e.clone()) {
                    return fail(format!("{}: {err}", path.display()));
                }
            }
            for m in session.derive_messages() {
                let _ = writeln!(out, "{}", dsh_kernel::json::to_string(&m.to_value()));
            }
        }
        _ => {
            let h = &loaded.header;
            let _ = writeln!(
                out,
                "session {}  {}",
                h.id,
                format_time(h.created_at as i64)
            );
            if let Some(cwd) = &h.cwd {
                let _ = writeln!(out, "cwd {cwd}");
            }
            match &h.parent_session {
                Some(p) if is_subagent_child(h) => {
                    let inherits = match h.seed_length {
                        Some(n) if n > 0 => format!(", inherits its first {n} events"),
                        _ => String::new(),
                    };
                    let _ = writeln!(
                        out,
                        "subagent of {p} (depth {}{inherits})",
                        h.delegation_depth
                    );
                }
                Some(p) => {
                    let _ = writeln!(
                        out,
                        "forked from {p} (first {} events)",
                        h.seed_length.unwrap_or(0)
                    );
                }
                None => {}
            }
            let title = title_of(&loaded.events);
            if !title.is_empty() {
                let _ = writeln!(out, "title {title}");
            }
            // Human transcripts read append-origin events, not the (possibly compacted) surface.
            for e in &loaded.events {
                let (who, message) = match e.event_type.as_str() {
                    types::USER_MESSAGE => {
                        let m = Message::from_json(e.data.as_value()).ok();
                        let who = if m.as_ref().is_some_and(|m| m.source.kind() == "user") {
                            "user"
                        } else {
                            "context"
                        };
                        (who, m)
                    }
                    types::ASSISTANT_MESSAGE => {
                        ("assistant", Message::from_json(&e.data["message"]).ok())
                    }
                    types::TOOL_RESULT => ("tool", Message::from_json(&e.data["message"]).ok()),
                    types::TURN_END => {
                        let _ = writeln!(
                            out,
                            "-- turn {} {}",
                            e.data["turn"],
                            e.data
                                .pointer("/reason/kind")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                        );
                        continue;
                    }
                    _ => continue,
                };
                let Some(message) = message else { continue };
                let lines: Vec<String> = message.content.iter().filter_map(block_line).collect();
                if lines.is_empty() {
                    continue;
                }
                let _ = writeln!(out, "[{who}] {}", lines.join("\n"));
            }
            let children = children_of(root, &h.id);
            if !children.is_empty() {
                let _ = writeln!(out, "-- subagents ({}):", children.len());
                for c in &children {
                    let plural = if c.turns == 1 { "" } else { "s" };
                    let _ = writeln!(
                        out,
                        "{}  {}  {} turn{plural}  {}",
                        c.id, c.outcome, c.turns, c.label
                    );
                }
                let _ = writeln!(out, "(open one with: dsh sessions show <id>)");
            }
        }
    }
    out.finish(ExitCode::SUCCESS)
}

fn fork(root: &Path, id: &str, at: Option<u64>) -> ExitCode {
    match fork_in(root, id, at) {
        Ok((header, _)) => crate::stdout::print(&format!("{}\n", header.id)),
        Err(e) => fail(e),
    }
}

/// Forks session `id` under `root` (see `fork` in [`HELP`]): the new session's header and
/// events, already written next to it.
pub(crate) fn fork_in(
    root: &Path,
    id: &str,
    at: Option<u64>,
) -> Result<(SessionHeader, Vec<Arc<Event>>), String> {
    let path = locate(root, id)?;
    let loaded = inspect(root, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    let cut = dsh_persistence::fork_cut(&loaded.events, at)
        .map_err(|e| format!("session \"{}\": {e}", loaded.header.id))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let mut header = SessionHeader::new(
        format!("session-{}", uuid::Uuid::new_v4()),
        now.max(0) as u64,
    );
    header.cwd = loaded.header.cwd.clone();
    header.parent_session = Some(loaded.header.id.clone());
    header.seed_length = Some(cut as u64);
    header.agent_preset = loaded.header.agent_preset.clone();
    let child = Session::with_seed(header.clone(), loaded.events[..cut].to_vec(), now)
        .map_err(|e| e.to_string())?;
    let compression = if path.extension().is_some_and(|e| e == "zstd") {
        Compression::Zstd
    } else {
        Compression::None
    };
    files(root, compression)
        .create(&header, child.events())
        .map_err(|e| e.to_string())?;
    Ok((header, child.events().to_vec()))
}

fn export(root: &Path, id: &str) -> ExitCode {
    let path = match locate(root, id) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    match files(root, Compression::Zstd).read_raw_file(&path) {
        Ok(text) => crate::stdout::print(&text),
        Err(e) => fail(format!("{}: {e}", path.display())),
    }
}

/// Runs `dsh sessions <args>`: on the local logs, or with `--storage` (or a configured team
/// store) on the sessions of a PostgreSQL team store.
pub fn run(home: &Path, args: &[String]) -> ExitCode {
    let (flag, args) = match take_storage_flag(args) {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let args = &args[..];
    let named = flag.is_some();
    let url = match dsh_team::cli::storage_url(home, flag) {
        Ok(u) => u,
        Err(e) => return fail(e),
    };
    if let Some(url) = url
        && !matches!(
            args.first().map(String::as_str),
            None | Some("-h" | "--help")
        )
    {
        // Not asked for on this command line: say where the sessions come from.
        if !named {
            eprintln!(
                "dsh sessions: reading the team store ($DSH_STORAGE or team.storage); --storage local reads the local logs"
            );
        }
        return crate::sessions_store::run(&url, args);
    }
    run_local(&home.join("sessions"), args)
}

/// `--storage <url>` (or `--storage=<url>`) anywhere in `args`, and the rest.
fn take_storage_flag(args: &[String]) -> Result<(Option<String>, Vec<String>), String> {
    let mut flag = None;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--storage" {
            flag = Some(
                it.next()
                    .cloned()
                    .ok_or("option '--storage <url>' argument missing")?,
            );
        } else if let Some(v) = a.strip_prefix("--storage=") {
            flag = Some(v.to_string());
        } else {
            rest.push(a.clone());
        }
    }
    Ok((flag, rest))
}

/// `dsh sessions` on the logs under `root`; the store mode runs it on a session it wrote
/// there.
pub(crate) fn run_local(root: &Path, args: &[String]) -> ExitCode {
    let root = root.to_path_buf();
    let arg = |i: usize| args.get(i).map(String::as_str);
    match (arg(0), arg(1)) {
        (None | Some("-h" | "--help"), _) => crate::stdout::print(HELP),
        (Some("list"), None) => list(&root, false),
        (Some("list"), Some("--all")) if args.len() == 2 => list(&root, true),
        (Some("show"), Some(target)) => match arg(2) {
            None => show(&root, target, ""),
            Some(m @ ("--messages" | "--events" | "--json")) if args.len() == 3 => {
                show(&root, target, m)
            }
            Some(other) => fail(format!("unknown option {other:?} for show")),
        },
        (Some("fork"), Some(id)) => match (arg(2), arg(3)) {
            (None, _) => fork(&root, id, None),
            (Some("--at"), Some(seq)) if args.len() == 4 => match seq.parse::<u64>() {
                Ok(s) => fork(&root, id, Some(s)),
                Err(_) => fail(format!("--at needs an event seq, got {seq:?}")),
            },
            _ => fail("usage: dsh sessions fork <id> [--at SEQ]"),
        },
        (Some("export"), Some(id)) if args.len() == 2 => export(&root, id),
        _ => {
            eprint!("{HELP}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_as_utc() {
        assert_eq!(format_time(0), "1970-01-01 00:00Z");
        assert_eq!(format_time(1_783_600_629_539), "2026-07-09 12:37Z");
    }
}
