//! The ACP server as an app: over a profile's tree (`dsh --profile acp`, `dsh acp`), or
//! over one of upstream's example compositions (`dsh acp --compositions DIR`, the snapshot
//! suite). Either way the launcher boots the tree and hands it to [`AcpApp`].

// An app owns the process: its usage errors and help go to the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::Path;
use std::process::ExitCode;

use dsh_app::{App, Launch, Run, Start, Threads};
use dsh_kernel::config::Layer;

use crate::Projection;

/// Exit code for bad configuration.
const CONFIG_ERROR: u8 = 2;

pub const PROFILE_HELP: &str = "\
Usage: dsh --profile acp [--patch FILE]... [--projection rich|committed]

Serve the Agent Client Protocol (JSON-RPC 2.0, one JSON object per line) on stdin/stdout
over the profile's tree; `dsh acp` is the same server over the `acp` profile.
";

pub const COMMAND_HELP: &str = "\
Usage: dsh acp [--patch FILE]... [--projection rich|committed]
       dsh acp --compositions DIR [--projection rich|committed]

Serve the Agent Client Protocol (JSON-RPC 2.0, one JSON object per line) on stdin/stdout:
the server editors such as Zed start. It serves the `acp` profile, as upstream 0.2 does:
the base bundle (every tool, MCP servers, LSP, skills, subagents, goals, slash commands)
plus the ACP app, with $DSH_HOME/cordis.patch.yml, profiles/acp/cordis.patch.yml and
--patch files on top (same as `dsh --profile acp`).

Options:
  --patch FILE         one more patch layer (repeatable)
  --projection P       rich (what editors expect, the default) or committed (upstream
                       0.1's stream)
  --compositions DIR   serve one of upstream's example compositions instead, chosen by
                       DSH_SNAPSHOT_CONFIG (a file in DIR, default cordis.yml): for the
                       conformance suite. With DSH_SNAPSHOT_CONFIG or DSH_SNAPSHOT set and
                       no DIR, the built-in copy of upstream's example composition serves.

Environment:
  DSH_GATEWAY          URL of a team gateway (`dsh serve`): the team's workers run the
                       sessions; this server only queues prompts and shows their turns
  DSH_GATEWAY_TOKEN    the team account's token for that gateway
";

/// The ACP server app, marked by the `@deepseek-ai/dsh-acp-demo` row.
pub struct AcpApp;

impl App for AcpApp {
    fn plugin(&self) -> &'static str {
        crate::ACP_AGENT_PLUGIN
    }

    fn start(&self, launch: &Launch<'_>) -> Start {
        let mut projection = None;
        let mut it = launch.args.iter();
        while let Some(a) = it.next() {
            let value = match a.split_once('=') {
                Some(("--projection", v)) => Some(v.to_string()),
                _ if a == "--projection" => it.next().cloned(),
                _ if a == "-h" || a == "--help" => {
                    return Start::Exit(dsh_app::stdout::print(PROFILE_HELP));
                }
                _ => {
                    return dsh_app::usage_error(&format!(
                        "error: the ACP server takes no argument {a:?} (see dsh acp --help)"
                    ));
                }
            };
            projection = match parse_projection(value.as_deref()) {
                Ok(p) => Some(p),
                Err(e) => return dsh_app::usage_error(&format!("error: {e}")),
            };
        }
        Start::Run(Run {
            ctx: serde_json::Map::new(),
            threads: Threads::Server,
            main: Box::new(move |ctx| {
                Box::pin(async move {
                    dsh_app::served(
                        crate::serve_with(ctx, tokio::io::stdin(), tokio::io::stdout(), projection)
                            .await,
                    )
                })
            }),
        })
    }
}

fn parse_projection(value: Option<&str>) -> Result<Projection, String> {
    match value {
        Some("rich") => Ok(Projection::Rich),
        Some("committed") => Ok(Projection::Committed),
        Some(other) => Err(format!(
            "--projection must be rich or committed, not {other:?}"
        )),
        None => Err("--projection needs rich or committed".into()),
    }
}

/// What `dsh acp` serves.
pub enum Command {
    /// Nothing to serve: help was printed, or the arguments or composition were wrong.
    Exit(ExitCode),
    /// The `acp` profile, with these `--patch` files and app arguments.
    Profile {
        patches: Vec<String>,
        args: Vec<String>,
    },
    /// An example composition (`name`), composed from `layers`, with these app arguments.
    Composition {
        name: String,
        layers: Vec<Layer>,
        args: Vec<String>,
    },
}

/// Parses `dsh acp`'s arguments. The example compositions serve when `--compositions`,
/// `DSH_SNAPSHOT` or `DSH_SNAPSHOT_CONFIG` asks for them, with `$DSH_HOME/cordis.patch.yml`
/// on top unless `DSH_SNAPSHOT` pins the recorded setup.
pub fn command(home: &Path, args: &[String]) -> Command {
    let mut compositions: Option<std::path::PathBuf> = None;
    let mut patches = Vec::new();
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = |what: &str| {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("error: dsh acp: {flag} needs {what}"))
        };
        let parsed = match flag {
            "-h" | "--help" => return Command::Exit(dsh_app::stdout::print(COMMAND_HELP)),
            "--compositions" => value("a folder").map(|v| compositions = Some(v.into())),
            "--patch" => value("a file").map(|v| patches.push(v)),
            "--projection" => value("rich or committed").and_then(|v| {
                parse_projection(Some(&v))
                    .map(|_| rest.push(format!("--projection={v}")))
                    .map_err(|e| format!("error: dsh acp: {e}"))
            }),
            _ => Err(format!(
                "error: dsh acp: unknown argument {a:?} (see dsh acp --help)"
            )),
        };
        if let Err(line) = parsed {
            eprintln!("{line}");
            return Command::Exit(ExitCode::from(1));
        }
    }
    let snapshot = std::env::var("DSH_SNAPSHOT").ok().filter(|v| !v.is_empty());
    let config = std::env::var("DSH_SNAPSHOT_CONFIG")
        .ok()
        .filter(|v| !v.is_empty());
    if compositions.is_none() && snapshot.is_none() && config.is_none() {
        return Command::Profile {
            patches,
            args: rest,
        };
    }
    if !patches.is_empty() {
        eprintln!(
            "error: dsh acp: --patch applies to the acp profile, not to an example composition"
        );
        return Command::Exit(ExitCode::from(1));
    }
    let config_error = |e: String| {
        eprintln!("dsh: {e}");
        Command::Exit(ExitCode::from(CONFIG_ERROR))
    };
    let mut layers = match crate::composition_layers(compositions.as_deref(), config.as_deref()) {
        Ok(l) => l,
        Err(e) => return config_error(e),
    };
    if snapshot.is_none() {
        let patch = home.join("cordis.patch.yml");
        let label = patch.display().to_string();
        match dsh_kernel::config::read_config_file(&patch) {
            Ok(None) => {}
            Ok(Some(text)) => match Layer::parse(label.clone(), label, &text) {
                Ok(l) => layers.push(l),
                Err(e) => return config_error(e.to_string()),
            },
            Err(e) => return config_error(e.to_string()),
        }
    }
    Command::Composition {
        name: config.unwrap_or_else(|| crate::DEFAULT_COMPOSITION.to_string()),
        layers,
        args: rest,
    }
}
