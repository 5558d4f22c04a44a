//! `dsh memory`: the person's view of what sessions remember — list, show (with the session
//! and event that wrote an entry), add, edit, forget, accept proposals.

use std::path::Path;
use std::process::ExitCode;

use dsh_memory::{Found, Memory, MemoryConfig, Origin, Scope};
use serde_json::{Value, json};

pub const HELP: &str = "\
Usage: dsh memory <command> [options]

Memories of this project (<project root>/.dsh/memory.md, the root being the nearest
directory with .git) and your own ($DSH_HOME/memory.md, default ~/.dsh/memory.md): plain
markdown, one memory per list item. New sessions read them in their first prompt.

Commands:
  list [--json] [--user|--workspace]
                             every memory with its id; proposals are marked
  show <id> [--json]         one memory: text, tags, file, and the session, turn and
                             event that wrote it
  add [--user] [#tag]... <text>
                             keep a fact (secrets are removed before writing)
  edit [--user]              open the file in $VISUAL or $EDITOR (default vi)
  edit <id> <text>           replace one memory's text
  forget <id>                remove a memory
  accept <id>                turn a proposal into a memory sessions see
  path [--user]              print the file's path
";

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("dsh memory: {msg}");
    ExitCode::from(1)
}

fn memory(home: &Path) -> Result<Memory, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("no working directory: {e}"))?;
    let config = MemoryConfig {
        dsh_home: Some(home.display().to_string()),
        ..MemoryConfig::default()
    };
    Ok(Memory::new(config, &cwd))
}

/// The `memory/change` event of `session` that wrote entry `id`, if its log is stored.
fn origin_event(home: &Path, session: &str, id: &str) -> Option<u64> {
    let root = home.join("sessions");
    let path = crate::sessions::locate(&root, session).ok()?;
    let loaded = crate::sessions::inspect(&root, &path).ok()?;
    dsh_memory::change_event_seq(&loaded.events, id)
}

fn entry_json(m: &Memory, f: &Found, event: Option<u64>) -> Value {
    let mut v = json!({
        "id": f.entry.id,
        "scope": f.scope.as_str(),
        "text": f.entry.text,
        "tags": f.entry.tags,
        "file": m.path(f.scope).display().to_string(),
        "proposed": f.entry.proposed,
    });
    if let Some(at) = &f.entry.at {
        v["at"] = json!(at);
    }
    let o = &f.entry.origin;
    if !o.by.is_empty() || o.session.is_some() {
        v["origin"] = json!({"by": o.by, "sessionId": o.session, "turn": o.turn, "seq": event});
    }
    v
}

fn scope_flag(args: &[String]) -> Option<Scope> {
    if args.iter().any(|a| a == "--user") {
        Some(Scope::User)
    } else if args.iter().any(|a| a == "--workspace") {
        Some(Scope::Workspace)
    } else {
        None
    }
}

fn list(m: &Memory, args: &[String]) -> ExitCode {
    if let Some(bad) = args
        .iter()
        .find(|a| !matches!(a.as_str(), "--json" | "--user" | "--workspace"))
    {
        return fail(format!("unknown option {bad:?} for list"));
    }
    let json_out = args.iter().any(|a| a == "--json");
    let only = scope_flag(args);
    let (found, warnings) = m.all();
    let found: Vec<&Found> = found
        .iter()
        .filter(|f| only.is_none_or(|s| s == f.scope))
        .collect();
    for w in &warnings {
        eprintln!("dsh memory: warning: {}", w.message);
    }
    if json_out {
        let mut out = String::new();
        for f in &found {
            out.push_str(&dsh_kernel::json::to_string(&entry_json(m, f, None)));
            out.push('\n');
        }
        return crate::stdout::print(&out);
    }
    let mut out = String::new();
    for scope in [Scope::Workspace, Scope::User] {
        if only.is_some_and(|s| s != scope) {
            continue;
        }
        let items: Vec<&&Found> = found.iter().filter(|f| f.scope == scope).collect();
        out.push_str(&format!(
            "{} memory — {} ({})\n",
            if scope == Scope::Workspace {
                "Workspace"
            } else {
                "User"
            },
            m.path(scope).display(),
            match items.len() {
                0 => "none".to_string(),
                1 => "1 entry".to_string(),
                n => format!("{n} entries"),
            }
        ));
        for f in items {
            let mark = if f.entry.proposed { "  (proposed)" } else { "" };
            let text = f.entry.display().replace('\n', "\n           ");
            out.push_str(&format!("  {}  {text}{mark}\n", f.entry.id));
        }
    }
    crate::stdout::print(&out)
}

fn show(home: &Path, m: &Memory, id: &str, json_out: bool) -> ExitCode {
    let found = match m.find(id) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let event = found
        .entry
        .origin
        .session
        .as_deref()
        .and_then(|s| origin_event(home, s, &found.entry.id));
    if json_out {
        return crate::stdout::print(&format!(
            "{}\n",
            dsh_kernel::json::to_string(&entry_json(m, &found, event))
        ));
    }
    let e = &found.entry;
    let mut out = format!("{}\n\n", e.text);
    out.push_str(&format!("id:      {}\n", e.id));
    out.push_str(&format!(
        "scope:   {} ({})\n",
        found.scope,
        m.path(found.scope).display()
    ));
    if !e.tags.is_empty() {
        out.push_str(&format!("tags:    {}\n", e.tags.join(", ")));
    }
    if e.proposed {
        out.push_str("status:  proposed (dsh memory accept to use it)\n");
    }
    if let Some(at) = &e.at {
        out.push_str(&format!("written: {at}\n"));
    }
    let o = &e.origin;
    if !o.by.is_empty() {
        out.push_str(&format!("by:      {}\n", o.by));
    }
    if let Some(s) = &o.session {
        let turn = o.turn.map(|t| format!(", turn {t}")).unwrap_or_default();
        let ev = event.map(|q| format!(", event {q}")).unwrap_or_default();
        out.push_str(&format!(
            "from:    session {s}{turn}{ev} (dsh sessions show {s})\n"
        ));
    }
    crate::stdout::print(&out)
}

fn add(m: &Memory, args: &[String]) -> ExitCode {
    let (scope, tags, text) = dsh_memory::commands::parse_remember(&args.join(" "));
    if text.trim().is_empty() {
        return fail("nothing to add: dsh memory add [--user] [#tag] <text>");
    }
    let origin = Origin {
        by: "user".into(),
        session: None,
        turn: None,
    };
    match m.remember(scope, &text, &tags, origin, false) {
        Ok((added, redacted)) if added.duplicate => crate::stdout::print(&format!(
            "already kept as {} ({redacted} secrets removed)\n",
            added.entry.id
        )),
        Ok((added, redacted)) => {
            let note = if redacted > 0 {
                format!(" ({redacted} secrets removed before writing)")
            } else {
                String::new()
            };
            crate::stdout::print(&format!(
                "{}  {}{note}\n",
                added.entry.id,
                m.path(scope).display()
            ))
        }
        Err(e) => fail(e),
    }
}

fn edit_file(m: &Memory, scope: Scope) -> ExitCode {
    let path = m.path(scope);
    if !path.exists() {
        // Created with its title and intro, through the locked writer.
        let created = dsh_memory::store::modify(&path, scope, &m.limits(), |_| Ok(()));
        if let Err(e) = created {
            return fail(e);
        }
    }
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "vi".into());
    // The editor setting may carry arguments (`code --wait`): run it through the shell.
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(&path)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => return fail(format!("the editor ({editor}) exited with {s}")),
        Err(e) => return fail(format!("cannot run the editor ({editor}): {e}")),
    }
    match m.read(scope) {
        Ok(doc) => crate::stdout::print(&format!(
            "{}: {} entries\n",
            path.display(),
            doc.entries.len()
        )),
        Err(e) => fail(e),
    }
}

/// `<what><id>  <text>` of a changed entry, or the error.
fn report(what: &str, result: Result<Found, dsh_memory::MemoryError>) -> ExitCode {
    match result {
        Ok(f) => crate::stdout::print(&format!("{what}{}  {}\n", f.entry.id, f.entry.text)),
        Err(e) => fail(e),
    }
}

pub fn run(home: &Path, args: &[String]) -> ExitCode {
    let m = match memory(home) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let arg = |i: usize| args.get(i).map(String::as_str);
    match arg(0) {
        None | Some("-h" | "--help") => crate::stdout::print(HELP),
        Some("list") => list(&m, &args[1..]),
        Some("show") => match (arg(1), arg(2)) {
            (Some(id), None) => show(home, &m, id, false),
            (Some(id), Some("--json")) if args.len() == 3 => show(home, &m, id, true),
            _ => fail("usage: dsh memory show <id> [--json]"),
        },
        Some("add") => add(&m, &args[1..]),
        Some("edit") => match arg(1) {
            None | Some("--user" | "--workspace") if args.len() <= 2 => {
                edit_file(&m, scope_flag(args).unwrap_or(Scope::Workspace))
            }
            Some(id) if args.len() >= 3 => report("", m.edit(id, &args[2..].join(" "))),
            _ => fail("usage: dsh memory edit [--user] | dsh memory edit <id> <text>"),
        },
        Some("forget") => match arg(1) {
            Some(id) if args.len() == 2 => report("forgot ", m.forget(id)),
            _ => fail("usage: dsh memory forget <id>"),
        },
        Some("accept") => match arg(1) {
            Some(id) if args.len() == 2 => report("accepted ", m.accept(id)),
            _ => fail("usage: dsh memory accept <id>"),
        },
        Some("path") => crate::stdout::print(&format!(
            "{}\n",
            m.path(scope_flag(args).unwrap_or(Scope::Workspace))
                .display()
        )),
        Some(other) => {
            eprint!("{HELP}");
            fail(format!("unknown command {other:?}"))
        }
    }
}
