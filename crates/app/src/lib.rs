//! Apps as plugins: the contract between the launcher and the app a profile runs.
//!
//! A profile does not name its app. The launcher composes the profile's tree and asks each
//! app it was built with whether the tree holds that app's plugin row (`@deepseek-ai/dsh-
//! headless`, `@deepseek-ai/dsh-web-app`, …); the first that does owns the run. From there
//! the launcher knows nothing about the app: it hands over everything after its own flags
//! ([`App::start`]), evaluates and loads the tree with the values the app put in `ctx`,
//! runs the app's main loop on it, flushes every session log and unloads. Every app — and
//! `dsh acp` over an example composition — boots through that one path.
//!
//! [`stdout`] is how every app and command writes to standard output, so that a reader
//! closing the pipe ends the process quietly.

#![allow(clippy::print_stdout, clippy::print_stderr)]

pub mod stdout;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::process::ExitCode;

use dsh_kernel::Context;
use serde_json::{Map, Value};

/// What an app does with its booted tree: its main loop, ending with the process's status.
pub type AppMain =
    Box<dyn for<'a> FnOnce(&'a Context) -> Pin<Box<dyn Future<Output = ExitCode> + 'a>>>;

/// How many threads the app's runtime gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// One agent at a time (the headless runner): a current-thread runtime keeps the loop,
    /// its tool tasks and the provider stream on one thread.
    One,
    /// A server hosting several sessions (web, ACP, SDK, the terminal UI): two workers.
    Server,
}

/// An app ready to run.
pub struct Run {
    /// Values the tree's `!!js` expressions read as `ctx.<key>` (`ctx.webStartup`, …).
    pub ctx: Map<String, Value>,
    pub threads: Threads,
    pub main: AppMain,
}

/// What an app decided from its command line.
pub enum Start {
    /// Done before booting anything: help was printed, or the arguments were wrong (the app
    /// has said why on stderr).
    Exit(ExitCode),
    /// Run this other profile with these arguments instead (the terminal UI without a
    /// terminal hands a task to the headless profile).
    Instead { profile: String, args: Vec<String> },
    /// Boot the tree and run.
    Run(Run),
}

/// What the launcher tells an app about the run it hands over.
pub struct Launch<'a> {
    /// `$DSH_HOME`.
    pub home: &'a Path,
    /// The profile booted, or the composition file `dsh acp` serves.
    pub profile: &'a str,
    /// Everything after the launcher's own flags, verbatim.
    pub args: &'a [String],
}

/// An app: a plugin row that takes over the process once its tree is loaded.
pub trait App: Send + Sync {
    /// The plugin whose (enabled) row in a composed tree makes the tree this app.
    fn plugin(&self) -> &'static str;

    /// Parses the app's own arguments.
    fn start(&self, launch: &Launch<'_>) -> Start;
}

/// `-h` prints `help`; any other argument is a usage error (exit 1). `None` when `args` is
/// empty: the app takes no arguments and has none.
pub fn no_args(what: &str, help: &str, args: &[String]) -> Option<ExitCode> {
    let a = args.first()?;
    if a == "-h" || a == "--help" {
        return Some(stdout::print(help));
    }
    eprintln!("error: {what} takes no arguments, got {a:?}");
    Some(ExitCode::from(1))
}

/// A usage error: the line on stderr and status 1.
pub fn usage_error(line: &str) -> Start {
    eprintln!("{line}");
    Start::Exit(ExitCode::from(1))
}

/// Completes on SIGTERM. The handler is installed when this is called, not when the future
/// is first polled, so a signal that arrives in between is not lost; when it cannot be
/// installed the future never completes. Call it inside the runtime.
pub fn sigterm() -> impl Future<Output = ()> {
    let mut stream = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    async move {
        match stream.as_mut() {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }
}

/// The exit status of a server that ended: 0, or 1 after the reason on stderr.
pub fn served(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dsh: {e}");
            ExitCode::from(1)
        }
    }
}
