//! `dsh plugin`: manage `plugin-host` rows (external plugins) in a profile's user patch
//! layer, `$DSH_HOME/profiles/<name>/cordis.patch.yml`.

use std::path::Path;
use std::process::ExitCode;

use dsh_kernel::config::{Node, emit, parse};

pub const HELP: &str = "\
Usage: dsh plugin [--profile <name>] <command>

Manage external plugins (plugin-host rows) in $DSH_HOME/profiles/<name>/cordis.patch.yml.
The profile defaults to \"headless\".

Commands:
  add <id> [--timeout-ms <n>] -- <command> [args...]
                 add a plugin row that starts <command> (protocol: crates/plugin-host/README.md)
  remove <id>    remove the plugin row <id>
  list           list the plugin rows of the profile

Example:
  dsh plugin add guard -- python3 examples/plugins/guard.py
";

/// Names the plugin-host row answers to.
fn is_plugin_host(name: &str) -> bool {
    matches!(
        name,
        "plugin-host" | "dsh-plugin-host" | "@dsh/plugin-host" | "@deepseek-ai/dsh-plugin-host"
    )
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("dsh plugin: {message}");
    ExitCode::from(1)
}

pub fn run(home: &Path, args: &[String]) -> ExitCode {
    let mut args = args.to_vec();
    let mut profile = "headless".to_string();
    if let Some(i) = args.iter().position(|a| a == "--profile") {
        let Some(name) = args.get(i + 1).cloned() else {
            return fail("--profile needs a name");
        };
        profile = name;
        args.drain(i..i + 2);
    }
    let arg = |i: usize| args.get(i).map(String::as_str);
    let dir = match crate::profile::prepare_profile(home, &profile) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let path = dir.join("cordis.patch.yml");
    match arg(0) {
        None | Some("-h" | "--help") => crate::stdout::print(HELP),
        Some("list") if args.len() == 1 => list(&path),
        Some("remove") if args.len() == 2 => remove(&path, &args[1]),
        Some("add") => add(&path, &args[1..]),
        Some(other) => fail(format!(
            "unknown command or arguments \"{other}\" (see dsh plugin --help)"
        )),
    }
}

fn read(path: &Path) -> Result<Vec<Node>, String> {
    let text = match dsh_kernel::config::read_config_file(path) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(Vec::new()),
        Err(e) => return Err(e.to_string()),
    };
    match parse(&text).map_err(|e| format!("{}: {e}", path.display()))? {
        None | Some(Node::Null) => Ok(Vec::new()),
        Some(Node::Seq(entries)) => Ok(entries),
        Some(_) => Err(format!("{}: a patch layer must be a list", path.display())),
    }
}

fn write(path: &Path, entries: Vec<Node>) -> Result<(), String> {
    let body = if entries.is_empty() {
        "[]".to_string()
    } else {
        emit(&Node::Seq(entries))
    };
    let text =
        format!("# Your patch layer for this profile (rewritten by `dsh plugin`).\n{body}\n");
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn str_of<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    match node.get(key) {
        Some(Node::Str(s)) => Some(s),
        _ => None,
    }
}

/// The rows of every top-level `- insert: [...]` entry.
fn inserted(entries: &[Node]) -> impl Iterator<Item = &Node> {
    entries
        .iter()
        .filter(|e| e.get("id").is_none())
        .filter_map(|e| match e.get("insert") {
            Some(Node::Seq(rows)) => Some(rows.iter()),
            _ => None,
        })
        .flatten()
}

fn list(path: &Path) -> ExitCode {
    let entries = match read(path) {
        Ok(e) => e,
        Err(e) => return fail(e),
    };
    let mut out = String::new();
    for row in inserted(&entries) {
        if !str_of(row, "name").is_some_and(is_plugin_host) {
            continue;
        }
        let config = row.get("config");
        let mut command: Vec<String> = config
            .and_then(|c| str_of(c, "command"))
            .map(str::to_string)
            .into_iter()
            .collect();
        if let Some(Node::Seq(args)) = config.and_then(|c| c.get("args")) {
            command.extend(args.iter().map(|a| match a {
                Node::Str(s) => s.clone(),
                other => emit(other),
            }));
        }
        out.push_str(&format!(
            "{}\t{}\n",
            str_of(row, "id").unwrap_or("?"),
            command.join(" ")
        ));
    }
    crate::stdout::print(&out)
}

fn add(path: &Path, args: &[String]) -> ExitCode {
    let Some(id) = args.first().filter(|a| !a.starts_with('-')) else {
        return fail("add needs a row id: dsh plugin add <id> -- <command> [args...]");
    };
    let mut rest = &args[1..];
    let mut timeout: Option<i64> = None;
    if rest.first().map(String::as_str) == Some("--timeout-ms") {
        match rest
            .get(1)
            .and_then(|v| v.parse::<i64>().ok())
            .filter(|v| *v > 0)
        {
            Some(v) => timeout = Some(v),
            None => return fail("--timeout-ms needs a positive number"),
        }
        rest = &rest[2..];
    }
    if rest.first().map(String::as_str) == Some("--") {
        rest = &rest[1..];
    }
    let Some((command, command_args)) = rest.split_first() else {
        return fail("add needs a command: dsh plugin add <id> -- <command> [args...]");
    };
    let mut entries = match read(path) {
        Ok(e) => e,
        Err(e) => return fail(e),
    };
    if inserted(&entries).any(|r| str_of(r, "id") == Some(id.as_str())) {
        return fail(format!(
            "a row \"{id}\" already exists in {}",
            path.display()
        ));
    }
    let mut config = vec![
        ("command".to_string(), Node::Str(command.clone())),
        (
            "args".to_string(),
            Node::Seq(command_args.iter().cloned().map(Node::Str).collect()),
        ),
    ];
    if let Some(t) = timeout {
        config.push(("timeoutMs".to_string(), Node::Int(t)));
    }
    let row = Node::Map(vec![
        ("id".to_string(), Node::Str(id.clone())),
        ("name".to_string(), Node::Str("plugin-host".to_string())),
        ("config".to_string(), Node::Map(config)),
    ]);
    entries.push(Node::Map(vec![(
        "insert".to_string(),
        Node::Seq(vec![row]),
    )]));
    match write(path, entries) {
        Ok(()) => crate::stdout::print(&format!(
            "added plugin row \"{id}\" to {}\n",
            path.display()
        )),
        Err(e) => fail(e),
    }
}

fn remove(path: &Path, id: &str) -> ExitCode {
    let mut entries = match read(path) {
        Ok(e) => e,
        Err(e) => return fail(e),
    };
    let mut removed = false;
    for entry in &mut entries {
        if entry.get("id").is_some() {
            continue;
        }
        if let Node::Map(fields) = entry {
            for (key, value) in fields.iter_mut() {
                if let (true, Node::Seq(rows)) = (key == "insert", value) {
                    let before = rows.len();
                    rows.retain(|r| {
                        !(str_of(r, "id") == Some(id)
                            && str_of(r, "name").is_some_and(is_plugin_host))
                    });
                    removed |= rows.len() != before;
                }
            }
        }
    }
    if !removed {
        return fail(format!("no plugin row \"{id}\" in {}", path.display()));
    }
    entries.retain(|e| !matches!(e.get("insert"), Some(Node::Seq(rows)) if rows.is_empty() && e.get("id").is_none()));
    match write(path, entries) {
        Ok(()) => crate::stdout::print(&format!("removed plugin row \"{id}\"\n")),
        Err(e) => fail(e),
    }
}
