//! `dsh tui`: the interactive terminal UI. A conversation view folded from the session log
//! (streamed text, collapsible reasoning, tool cards with live output and coloured diffs,
//! the plan, usage and the context meter), a multi-line composer with history and the `/`
//! and `@` menus, approvals answered from the keyboard, cancel and steering, and a session
//! picker (resume, fork, archive, delete; subagent sessions under their parent). The row `@deepseek-ai/dsh-tui` mounts it.
//!
//! Invariants: the screen is derived from durable events only (a resumed session shows
//! exactly what was recorded); the terminal is restored however the app ends; quitting,
//! SIGHUP and SIGTERM cancel the running turn and flush the log before exit.

#![allow(clippy::print_stderr)]

mod app;
mod composer;
mod files;
pub mod markdown;
pub mod session;
mod start;
pub mod summary;
pub mod transcript;
pub mod view;

use std::process::ExitCode;
use std::sync::Arc;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use serde::Deserialize;

pub use start::{OpenArchive, TuiApp};

pub const HELP: &str = "\
Usage: dsh tui [options] [message...]
       dsh [options]                (on a terminal, with no arguments)

Talk to dsh turn by turn in the terminal: answers stream in, tool calls show their output
and diffs, approvals are asked inline. The session is stored as any other: leave with
Ctrl-C twice and go on later with --continue or --session-id.

Options:
  --session-id <id>     open a stored session (see `dsh sessions list`)
  --resume <id>         the same as --session-id
  -c, --continue        open the newest session started in this directory
  --steer               typing during a turn steers it (default: the message waits for
                        the next turn; Ctrl-T switches)
  --patch <file>        one more patch layer (repeatable)
  -h, --help            show this help

Keys: Enter sends, Alt-Enter or Ctrl-J adds a line, Esc cancels the running turn,
`/` opens the command menu, `@` completes workspace files, Ctrl-R opens the session
picker, Ctrl-O shows the model's reasoning, /help lists everything.

Without a terminal (or with TERM=dumb) `dsh tui \"task\"` runs the task headless instead.
NO_COLOR turns colours off.
";

/// What the app starts with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Startup {
    pub resume: Option<String>,
    pub continue_last: bool,
    /// A first message sent once the screen is up.
    pub prompt: Option<String>,
    pub steer: bool,
}

/// Parsed arguments: run, or print help.
#[derive(Debug, PartialEq, Eq)]
pub enum Args {
    Help,
    Run(Startup),
}

/// Parses the app's arguments; `Err` is a usage error line.
pub fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut s = Startup::default();
    let mut words = Vec::new();
    let mut i = 0;
    let mut literal = false;
    while i < args.len() {
        let a = args[i].as_str();
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a, None),
        };
        if literal {
            words.push(a.to_string());
        } else if a == "--" {
            literal = true;
        } else if a == "-h" || a == "--help" {
            return Ok(Args::Help);
        } else if a == "-c" || a == "--continue" {
            s.continue_last = true;
        } else if a == "--steer" {
            s.steer = true;
        } else if flag == "--session-id" || flag == "--resume" {
            let v = match inline {
                Some(v) => v,
                None => {
                    i += 1;
                    args.get(i)
                        .cloned()
                        .ok_or(format!("error: option '{flag} <id>' argument missing"))?
                }
            };
            if v.is_empty() {
                return Err(format!("error: {flag} needs a session id"));
            }
            s.resume = Some(v);
        } else if a.starts_with('-') && a.len() > 1 {
            return Err(format!("error: unknown option '{a}' (see dsh tui --help)"));
        } else {
            words.push(a.to_string());
        }
        i += 1;
    }
    let prompt = words.join(" ");
    if !prompt.trim().is_empty() {
        s.prompt = Some(prompt);
    }
    Ok(Args::Run(s))
}

/// Why the terminal cannot host the UI, if it cannot: no terminal on stdin or stdout, or
/// `TERM=dumb`.
pub fn unusable_terminal() -> Option<&'static str> {
    use std::io::IsTerminal as _;
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        return Some("standard input and output are not a terminal");
    }
    match std::env::var("TERM") {
        Ok(t) if t == "dumb" => Some("TERM=dumb cannot draw the interface"),
        _ => None,
    }
}

/// Where archived sessions are recorded (shared with `dsh web`'s session list).
pub trait Archive: Send + Sync + 'static {
    /// The archived session ids.
    fn archived(&self) -> Result<Vec<String>, String>;
    /// Archives (`true`) or restores a session.
    fn set_archived(&self, session_id: &str, archived: bool) -> Result<(), String>;
}

/// Runs the UI on a loaded tree.
pub async fn run(
    root: &Context,
    mut startup: Startup,
    archive: Option<Arc<dyn Archive>>,
) -> ExitCode {
    if let Some(c) = root.get::<TuiConfig>() {
        startup.steer |= c.steer;
    }
    app::run(root, startup, archive).await
}

/// The row's config.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TuiConfig {
    /// Messages typed during a turn steer it instead of waiting for the next turn.
    #[serde(default)]
    pub steer: bool,
}

/// `@deepseek-ai/dsh-tui`: the terminal UI's row.
pub struct TuiPlugin;

/// The row that marks a tree as the terminal UI's.
pub const TUI_PLUGIN: &str = "@deepseek-ai/dsh-tui";

impl Plugin for TuiPlugin {
    fn name(&self) -> &'static str {
        TUI_PLUGIN
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: TuiConfig = config.parse()?;
        ctx.provide(Arc::new(c))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn p(a: &[&str]) -> Result<Args, String> {
        parse_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn arguments() {
        assert_eq!(p(&[]), Ok(Args::Run(Startup::default())));
        assert_eq!(
            p(&["--session-id", "s-1", "go", "on"]),
            Ok(Args::Run(Startup {
                resume: Some("s-1".into()),
                prompt: Some("go on".into()),
                ..Startup::default()
            }))
        );
        assert_eq!(
            p(&["-c", "--steer"]),
            Ok(Args::Run(Startup {
                continue_last: true,
                steer: true,
                ..Startup::default()
            }))
        );
        assert_eq!(p(&["--help"]), Ok(Args::Help));
        assert!(p(&["--bogus"]).is_err());
        assert!(p(&["--resume"]).is_err());
    }
}
