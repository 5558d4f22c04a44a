//! The headless app: one task in, a fresh persisted session, the final answer out.
//!
//! [`HeadlessApp`] owns the app's command line (`dsh headless [options] [task...]`) and its
//! main loop ([`run`]); the `@deepseek-ai/dsh-headless` row ([`HeadlessPlugin`]) marks a tree
//! as this app and carries the task.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod progress;
mod run_events;
mod stream_json;
mod team_turn;

use team_turn::{Remote, move_to, store_task_images};

use std::process::ExitCode;
use std::sync::Arc;

use dsh_agent::Agents;
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::LlmCallConfig;
use dsh_llm::Message;
use dsh_session::{CancelCause, SessionAppended, TurnEndReason, types};
use serde::Deserialize;

use dsh_app::stdout::{self, StdoutError};
use dsh_app::{App, Launch, Run, Start, Threads};

use crate::progress::Progress;
pub use crate::progress::Verbosity;
use crate::run_events::RunEvents;
use crate::stream_json::{StreamJson, Style};

pub const HELP: &str = "\
Usage: dsh headless [options] [task...]
       dsh --profile headless [options] [task...]

Answer one task, print the final assistant message, and exit.

Arguments:
  task                         the task text; multiple words are joined by spaces;
                               `-` reads the task from standard input

Options:
  --json                       print run events as JSON lines instead of the answer, as
                               upstream dsh 0.2 does: `session` (sessionId, cwd) first,
                               `status` phases with each step's token usage, `thinking`,
                               `text`, `tool_call`, `tool_result`, then `final` (or
                               `error`); same as --output-format json
  --output-format <format>     text (default), json (the run events of --json) or
                               stream-json: every session event exactly as the session
                               log records it (a reply's stream chunks come with the reply)
  --session-id <id>            continue a stored session (see `dsh sessions list`)
                               instead of starting a fresh one
  --resume <id>                the same as --session-id
  -q, --quiet                  no progress on stderr (errors only)
  -v, --verbose                a line per step, tool call and reasoning block on stderr,
                               also when stderr is not a terminal
  -h, --help                   show this help

Limits (environment): DSH_MAX_TASK_BYTES caps a task read with `-` (default 16 MiB);
DSH_MAX_CONFIG_BYTES caps each config or patch file read (default 16 MiB).

On a terminal, stderr shows live progress (turn, step, elapsed time, tokens, each tool
call and how it ended); stdout holds only the answer. When nothing reads stdout any more
(`| head`), the run ends with status 141 (with --json at once, as on Ctrl-C).

Examples:
  dsh headless \"run the tests and fix what fails\"
  dsh headless --session-id <id> \"continue\"
  dsh headless --json \"summarize README.md\" > events.jsonl
  dsh headless - < task.txt
";

/// Exit status after SIGTERM (128 + 15, as shells report a process ended by the signal).
const SIGTERM_EXIT: u8 = 143;

/// How results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Text,
    /// Upstream 0.2's run events (`--json`).
    Events,
    /// The session's log events (`--output-format stream-json`).
    StreamJson,
}

/// Parsed headless app arguments.
#[derive(Debug, PartialEq, Eq)]
pub enum Startup {
    Help,
    Run {
        task: String,
        format: OutputFormat,
        resume: Option<String>,
        progress: Verbosity,
    },
}

/// Parses the app arguments; `Err` is a usage error line (exit 1). A task of `-` is read
/// from standard input.
pub fn parse_args(args: &[String]) -> Result<Startup, String> {
    parse_args_with(args, || {
        let limit =
            dsh_kernel::config::byte_limit_from_env(MAX_TASK_BYTES_ENV, DEFAULT_MAX_TASK_BYTES)
                .map_err(|e| format!("error: {e}"))?;
        read_task(std::io::stdin().lock(), limit)
    })
}

/// The environment variable that sets the largest task read from standard input.
pub const MAX_TASK_BYTES_ENV: &str = "DSH_MAX_TASK_BYTES";
/// The default largest task read from standard input.
pub const DEFAULT_MAX_TASK_BYTES: u64 = 16 << 20;

/// Reads a task of at most `limit` bytes; more is an error naming the limit and setting.
fn read_task(input: impl std::io::Read, limit: u64) -> Result<String, String> {
    match dsh_kernel::config::read_text_bounded(input, limit) {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(())) => Err(format!(
            "error: the task on standard input is larger than {limit} bytes (set {MAX_TASK_BYTES_ENV} to raise the limit)"
        )),
        Err(e) => Err(format!(
            "error: cannot read the task from standard input: {e}"
        )),
    }
}

fn parse_args_with(
    args: &[String],
    stdin: impl FnOnce() -> Result<String, String>,
) -> Result<Startup, String> {
    let mut words = Vec::new();
    let mut format = OutputFormat::Text;
    let mut resume = None;
    let mut progress = Verbosity::Normal;
    let mut i = 0;
    let mut literal = false;
    let value_of = |i: &mut usize, a: &str, flag: &str| -> Result<String, String> {
        match a.split_once('=') {
            Some((_, v)) => Ok(v.to_string()),
            None => {
                *i += 1;
                args.get(*i)
                    .cloned()
                    .ok_or(format!("error: option '{flag}' argument missing"))
            }
        }
    };
    while i < args.len() {
        let a = args[i].as_str();
        let name = a.split_once('=').map_or(a, |(n, _)| n);
        if literal {
            words.push(a.to_string());
        } else if a == "--" {
            literal = true;
        } else if a == "-h" || a == "--help" {
            return Ok(Startup::Help);
        } else if a == "-q" || a == "--quiet" {
            progress = Verbosity::Quiet;
        } else if a == "-v" || a == "--verbose" {
            progress = Verbosity::Verbose;
        } else if a == "--json" {
            format = OutputFormat::Events;
        } else if name == "--output-format" {
            format = match value_of(&mut i, a, "--output-format <format>")?.as_str() {
                "text" => OutputFormat::Text,
                "json" => OutputFormat::Events,
                "stream-json" => OutputFormat::StreamJson,
                other => {
                    return Err(format!(
                        "error: unknown output format '{other}' (expected text, json or stream-json)"
                    ));
                }
            };
        } else if name == "--resume" || name == "--session-id" {
            let id = value_of(&mut i, a, &format!("{name} <id>"))?;
            if id.is_empty() {
                return Err(format!("error: {name} needs a session id"));
            }
            resume = Some(id);
        } else if a.starts_with('-') && a.len() > 1 {
            return Err(format!("error: unknown option '{a}'"));
        } else {
            words.push(a.to_string());
        }
        i += 1;
    }
    let task = if words.iter().any(|w| w == "-") && !literal {
        if words.len() > 1 {
            return Err(
                "error: `-` (read the task from standard input) must be the only task argument"
                    .into(),
            );
        }
        // Empty is refused once the composition is loaded, unless the run has task images
        // (a team turn queued with images alone): see [`run`].
        stdin()?.trim_end().to_string()
    } else {
        words.join(" ")
    };
    if task.trim().is_empty() && !words.iter().any(|w| w == "-") {
        return Err(
            "error: a task is required, for example: dsh headless \"run the tests\"".into(),
        );
    }
    Ok(Startup::Run {
        task,
        format,
        resume,
        progress,
    })
}

/// The headless app, marked by the `@deepseek-ai/dsh-headless` row.
pub struct HeadlessApp;

impl App for HeadlessApp {
    fn plugin(&self) -> &'static str {
        HEADLESS_PLUGIN
    }

    fn start(&self, launch: &Launch<'_>) -> Start {
        let args = launch.args;
        let (task, format, resume, progress) = match parse_args(args) {
            Ok(Startup::Help) => return Start::Exit(stdout::print(HELP)),
            Ok(Startup::Run {
                task,
                format,
                resume,
                progress,
            }) => (task, format, resume, progress),
            Err(e) => {
                let json = args.iter().any(|a| a == "--json");
                return Start::Exit(usage_error(json, &e));
            }
        };
        let mut ctx = serde_json::Map::new();
        ctx.insert("headlessStartup".into(), serde_json::json!({"task": task}));
        Start::Run(Run {
            ctx,
            threads: Threads::One,
            main: Box::new(move |tree| Box::pin(run(tree, format, resume, progress))),
        })
    }
}

/// Reports a usage error (`error: …` on stderr; with `--json` an `error` line on stdout too,
/// where a script reading the run events finds it); exit code 1.
fn usage_error(json: bool, e: &str) -> ExitCode {
    eprintln!("{e}");
    if json {
        let message = e.strip_prefix("error: ").unwrap_or(e);
        let line = RunEvents::error_line(message);
        let _ = stdout::write(&format!("{line}\n"));
    }
    ExitCode::from(1)
}

/// The refusal of an empty task read from standard input.
const EMPTY_STDIN_TASK: &str = "error: the task read from standard input is empty";

/// The runner row's plugin.
pub const HEADLESS_PLUGIN: &str = "@deepseek-ai/dsh-headless";

/// The task given to the runner row.
pub struct HeadlessTask(pub String);

#[derive(Deserialize)]
struct RunnerConfig {
    task: Option<String>,
}

/// `@deepseek-ai/dsh-headless`: the runner row; its `task` comes from the command line.
pub struct HeadlessPlugin;

impl Plugin for HeadlessPlugin {
    fn name(&self) -> &'static str {
        HEADLESS_PLUGIN
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "sessionId",
                "pass it as the headless app's flag: dsh headless --session-id <id>",
            ),
            (
                "json",
                "pass it as the headless app's flag: dsh headless --json",
            ),
        ]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: RunnerConfig = config.parse()?;
        let task = c
            .task
            .ok_or("headless-runner: no task (run `dsh --profile headless \"<task>\"`)")?;
        ctx.provide(Arc::new(HeadlessTask(task)))?;
        Ok(())
    }
}

fn summarize(
    events: &[Arc<dsh_session::Event>],
    first_seq: u64,
) -> (String, Option<TurnEndReason>) {
    let mut text = String::new();
    let mut reason = None;
    let mut started = false;
    for e in events.iter().filter(|e| e.seq >= first_seq) {
        if e.is(types::TURN_START) {
            started = true;
        }
        if !started {
            continue;
        }
        if e.is(types::ASSISTANT_MESSAGE)
            && let Ok(m) = Message::from_json(&e.data["message"])
        {
            let t = m.text();
            if !t.is_empty() {
                text = t;
            }
        }
        if e.is(types::TURN_END) {
            reason = TurnEndReason::from_value(&e.data["reason"]);
        }
    }
    (text, reason)
}

/// Reports a failure that ends the run: `dsh: <message>` on stderr, and with `--json` an
/// `error` line on stdout too (where a script reading the run events looks for it).
fn fail(format: OutputFormat, message: &str) -> ExitCode {
    eprintln!("dsh: {message}");
    if format == OutputFormat::Events {
        let _ = stdout::write(&format!("{}\n", RunEvents::error_line(message)));
    }
    ExitCode::from(1)
}

/// Runs the task on a loaded tree (in a fresh session, or continuing `resume`).
pub async fn run(
    root: &Context,
    format: OutputFormat,
    resume: Option<String>,
    verbosity: Verbosity,
) -> ExitCode {
    let Some(task) = root.get::<HeadlessTask>() else {
        return fail(
            format,
            "the profile has no headless-runner row; nothing to run",
        );
    };
    // Only a run with task images may have no text (a task of `-` reads it from stdin).
    if task.0.trim().is_empty()
        && root
            .get::<dsh_session::TaskImages>()
            .is_none_or(|images| images.0.is_empty())
    {
        return usage_error(format == OutputFormat::Events, EMPTY_STDIN_TASK);
    }
    let agents = match root.require::<Agents>() {
        Ok(a) => a,
        Err(e) => return fail(format, &e.to_string()),
    };
    let mut request = dsh_tui::session::fresh_request(root, std::env::current_dir().ok());
    if let Some(id) = resume {
        match load_for_resume(root, id).await {
            Ok(loaded) => dsh_tui::session::resume_into(&mut request, loaded),
            Err(message) => return fail(format, &message),
        }
    }
    let cwd_text = request.cwd.as_ref().map(|p| p.display().to_string());
    let agent = match agents.create(root, request) {
        Ok(a) => a,
        Err(e) => return fail(format, &e.to_string()),
    };
    if format == OutputFormat::Events {
        let line = RunEvents::session_line(agent.id(), cwd_text.as_deref());
        if let Err(e) = stdout::write(&format!("{line}\n")) {
            agent.dispose().await;
            return e.exit_code();
        }
    }
    // Events the session got while it was created (pinned policy facts, a resumed log's
    // end-seed) come first, then the rest, each once it is durable.
    let style = match format {
        OutputFormat::StreamJson => Some(Style::Log),
        OutputFormat::Events => Some(Style::Run),
        OutputFormat::Text => None,
    };
    let printer = match style.map(|style| StreamJson::start(root, agent.session(), style)) {
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => {
            agent.dispose().await;
            return fail(format, &e.to_string());
        }
        None => None,
    };
    // Cancelled when the reader of stdout went away: the run then stops like on Ctrl-C.
    let stdout_closed = printer
        .as_ref()
        .map_or_else(tokio_util::sync::CancellationToken::new, StreamJson::closed);
    // Approvals answered outside this process (a team turn whose client answers through
    // the gateway) get the answerer headless otherwise lacks.
    if let (Some(remote), Some(approvals)) = (
        root.get::<dsh_tools::RemoteApprovals>(),
        root.get::<dsh_policies::Approvals>(),
    ) && let Err(e) = approvals.register_answerer(root, Arc::new(Remote(remote.0.clone())))
    {
        return fail(format, &format!("cannot wire remote approvals: {e}"));
    }
    let progress = LiveProgress::start(root, agent.id(), verbosity);
    let first_seq = agent.session().next_seq();
    // A `/command` task runs the command instead of reaching the model (unless a plugin says
    // the task is a message: a team worker's turn).
    let mut command_started_turn = false;
    if let Some(commands) = root
        .get::<dsh_commands::CommandRegistry>()
        .filter(|_| root.get::<dsh_session::TaskIsMessage>().is_none())
    {
        let outcome = commands
            .dispatch_line(&agent, &task.0, tokio_util::sync::CancellationToken::new())
            .await;
        let failed = match &outcome {
            dsh_commands::LineOutcome::NotACommand => None,
            dsh_commands::LineOutcome::Executed { result, .. } => Some(result.is_error()),
            dsh_commands::LineOutcome::Unknown { .. } => Some(true),
            dsh_commands::LineOutcome::Help { .. } => Some(false),
        };
        // A command that sent the model a message (`/plan <message>`) started a turn: the
        // run then waits for it and prints its answer like any task.
        command_started_turn =
            failed == Some(false) && agent.status() == dsh_agent::AgentStatus::Running;
        if let Some(failed) = failed.filter(|_| !command_started_turn) {
            progress.stop();
            return end_after_command(root, &agent, format, printer, &outcome.reply(), failed)
                .await;
        }
    }
    if let Some(wanted) = root.get::<dsh_session::AssignedWorkingDirectory>()
        && let Err(e) = move_to(&agent, &wanted)
    {
        progress.stop();
        return fail(format, &e);
    }
    let mut message = Message::user_text(task.0.clone());
    if let Some(id) = root.get::<dsh_session::AssignedMessageId>() {
        message.id.clone_from(&id.0);
    }
    if let Some(images) = root.get::<dsh_session::TaskImages>() {
        match store_task_images(root, &images).await {
            Ok(blocks) => {
                // An image-only task has no text block.
                message
                    .content
                    .retain(|b| b.as_text().is_none_or(|t| !t.is_empty()));
                message.content.extend(blocks);
            }
            Err(e) => {
                progress.stop();
                return fail(format, &e);
            }
        }
    }
    if !command_started_turn && let Err(e) = agent.followup(message) {
        progress.stop();
        return fail(format, &e.to_string());
    }
    let mut code = None;
    let term = dsh_app::sigterm();
    tokio::select! {
        _ = agent.when_idle() => {}
        _ = tokio::signal::ctrl_c() => { code = Some(130u8); }
        _ = term => { code = Some(SIGTERM_EXIT); }
        _ = stdout_closed.cancelled() => { code = Some(stdout::CLOSED_EXIT); }
    }
    if code.is_some() {
        agent.cancel(CancelCause::User, false);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), agent.when_idle()).await;
    }
    let mut saved = true;
    if let Err(e) = agent.session().flush().await {
        eprintln!("dsh: the session could not be saved completely: {e}");
        saved = false;
    }
    let (text, reason) = summarize(&agent.session().events(), first_seq);
    let route = agent
        .session()
        .read(|s| s.request_header().map(|h| h.config.clone()));
    let session_id = agent.id().to_string();
    progress.stop();
    agent.dispose().await;
    if let Some(writers) = root.get::<dsh_persistence::SessionWriters>()
        && let Err(e) = writers.flush_all().await
    {
        if saved {
            eprintln!("dsh: the session could not be saved completely: {e}");
        }
        saved = false;
    }
    let mut printed: Result<(), StdoutError> = Ok(());
    if let Some(p) = printer
        && let Some(e) = p.finish().await
    {
        printed = Err(e);
    }
    if format == OutputFormat::Events && printed.is_ok() && code != Some(stdout::CLOSED_EXIT) {
        printed = stdout::write(&format!("{}\n", RunEvents::final_line(&text)));
    }
    if let Some(c) = code {
        return ExitCode::from(c);
    }
    if format == OutputFormat::Text && printed.is_ok() {
        printed = stdout::write(&format!("{text}\n"));
    }
    if let Err(e) = printed {
        // The reader went away (or stdout failed): the log is complete, nothing else to say.
        return e.exit_code();
    }
    match reason {
        // A completed turn whose log could not be stored is not a success.
        Some(TurnEndReason::Completed) if saved => ExitCode::SUCCESS,
        Some(TurnEndReason::Completed) => ExitCode::from(1),
        Some(TurnEndReason::Error(f)) => {
            eprintln!("dsh: {}: {}", f.code, f.message);
            ExitCode::from(1)
        }
        Some(TurnEndReason::MaxTokens) => {
            eprintln!("dsh: {}", max_tokens_message(route.as_ref(), &session_id));
            ExitCode::from(1)
        }
        _ => ExitCode::from(1),
    }
}

/// Loads the log `--resume` names.
async fn load_for_resume(root: &Context, id: String) -> Result<dsh_persistence::Loaded, String> {
    let Some(files) = root.get::<dsh_persistence::SessionFiles>() else {
        return Err(
            "--resume needs session persistence (the session-persistence-jsonl row is disabled)"
                .into(),
        );
    };
    match tokio::task::spawn_blocking(move || files.load(&id)).await {
        Ok(Ok(l)) => Ok(l),
        Ok(Err(e)) => Err(format!("cannot resume: {e}")),
        Err(e) => Err(format!("cannot resume: {e}")),
    }
}

/// The progress shown on stderr while the run goes on (when stderr is a terminal).
struct LiveProgress {
    progress: Option<Arc<Progress>>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl LiveProgress {
    fn start(root: &Context, agent: &str, verbosity: Verbosity) -> Self {
        let progress = Progress::for_stderr(verbosity);
        let mut ticker = None;
        if let Some(p) = &progress {
            let id = agent.to_string();
            let observer = p.clone();
            let listening = root.on_emit::<SessionAppended>(ListenOptions::GLOBAL, move |e| {
                if e.session.id() == id {
                    observer.observe(&e.event);
                }
                Ok(())
            });
            if let Err(e) = listening {
                eprintln!("dsh: {e}");
            }
            let p = p.clone();
            ticker = Some(tokio::spawn(async move {
                let mut every = tokio::time::interval(std::time::Duration::from_millis(125));
                loop {
                    every.tick().await;
                    p.tick();
                }
            }));
        }
        Self { progress, ticker }
    }

    fn stop(&self) {
        if let Some(t) = &self.ticker {
            t.abort();
        }
        if let Some(p) = &self.progress {
            p.finish();
        }
    }
}

/// Ends a run whose task was a command that did not start a turn: its reply goes to stdout
/// (or stderr when it failed), the session is saved, and the exit code says how it went.
async fn end_after_command(
    root: &Context,
    agent: &dsh_agent::AgentRef,
    format: OutputFormat,
    printer: Option<StreamJson>,
    reply: &str,
    failed: bool,
) -> ExitCode {
    let mut printed = Ok(());
    if failed {
        eprintln!("dsh: {reply}");
    } else if format == OutputFormat::Text {
        printed = stdout::write(&format!("{reply}\n"));
    }
    let last_line = match (format, failed) {
        (OutputFormat::Events, true) => Some(RunEvents::error_line(reply)),
        (OutputFormat::Events, false) => Some(RunEvents::final_line(reply)),
        _ => None,
    };
    let saved = agent.session().flush().await;
    agent.dispose().await;
    if let Some(writers) = root.get::<dsh_persistence::SessionWriters>() {
        let _ = writers.flush_all().await;
    }
    if let Some(p) = printer
        && let Some(e) = p.finish().await
    {
        printed = Err(e);
    }
    if let (Ok(()), Some(line)) = (&printed, last_line) {
        printed = stdout::write(&format!("{line}\n"));
    }
    if let Err(e) = printed {
        return e.exit_code();
    }
    match (failed, saved) {
        (false, Ok(_)) => ExitCode::SUCCESS,
        (_, Err(e)) => {
            eprintln!("dsh: the session could not be saved completely: {e}");
            ExitCode::from(1)
        }
        (true, _) => ExitCode::from(1),
    }
}

/// What to tell the user when the model stopped at its output cap: what happened, which
/// setting raises the cap, and how to go on.
fn max_tokens_message(route: Option<&LlmCallConfig>, session_id: &str) -> String {
    let limit = match route {
        Some(LlmCallConfig {
            provider,
            model,
            max_tokens: Some(n),
            ..
        }) => format!("its output limit of {n} tokens ({provider} / {model})"),
        Some(LlmCallConfig {
            provider, model, ..
        }) => format!("its output limit ({provider} / {model})"),
        None => "its output limit".to_string(),
    };
    let section = match route.map(|r| r.provider.as_str()) {
        Some(dsh_providers::DEEPSEEK_ROUTE) => {
            format!("the {} section", dsh_providers::DEEPSEEK_PLUGIN)
        }
        Some(other) => format!(
            "the {} or {} profile of route \"{other}\"",
            dsh_providers::OPENAI_COMPAT_PLUGIN,
            dsh_providers::ANTHROPIC_PLUGIN
        ),
        None => "the provider's section".to_string(),
    };
    format!(
        "the model stopped at {limit} before finishing, so the answer is cut short \
         (what it wrote is kept in the session). Raise maxTokens for the model in {section} of \
         the settings, or let it go on with: dsh headless --session-id {session_id} \"continue\""
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn p(a: &[&str]) -> Result<Startup, String> {
        parse_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn task_words_join_and_options_parse() {
        assert_eq!(
            p(&["fix", "the", "test"]),
            Ok(Startup::Run {
                task: "fix the test".into(),
                format: OutputFormat::Text,
                resume: None,
                progress: Verbosity::Normal
            })
        );
        assert_eq!(
            p(&["--output-format", "stream-json", "go"]),
            Ok(Startup::Run {
                task: "go".into(),
                format: OutputFormat::StreamJson,
                resume: None,
                progress: Verbosity::Normal
            })
        );
        assert_eq!(
            p(&["a", "--", "--b"]),
            Ok(Startup::Run {
                task: "a --b".into(),
                format: OutputFormat::Text,
                resume: None,
                progress: Verbosity::Normal
            })
        );
        assert_eq!(
            p(&["--resume", "s-1", "more"]),
            Ok(Startup::Run {
                task: "more".into(),
                format: OutputFormat::Text,
                resume: Some("s-1".into()),
                progress: Verbosity::Normal
            })
        );
        assert_eq!(p(&["--help"]), Ok(Startup::Help));
        assert_eq!(
            p(&["  "]),
            Err("error: a task is required, for example: dsh headless \"run the tests\"".into())
        );
        assert_eq!(
            p(&["x", "--bogus"]),
            Err("error: unknown option '--bogus'".into())
        );
    }

    #[test]
    fn upstream_02_forms() {
        let run = |task: &str, format, resume: Option<&str>| {
            Ok(Startup::Run {
                task: task.into(),
                format,
                resume: resume.map(str::to_owned),
                progress: Verbosity::Normal,
            })
        };
        assert_eq!(
            p(&["--json", "--session-id", "s-9", "continue"]),
            run("continue", OutputFormat::Events, Some("s-9"))
        );
        assert_eq!(
            p(&["--session-id=s-9", "go"]),
            run("go", OutputFormat::Text, Some("s-9"))
        );
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let from = |text: &'static str| move || Ok(text.to_string());
        assert_eq!(
            parse_args_with(&args(&["--json", "-"]), from("fix it\n")),
            run("fix it", OutputFormat::Events, None)
        );
        // Refused by `run` unless the run has task images.
        assert_eq!(
            parse_args_with(&args(&["-"]), from(" \n")),
            run("", OutputFormat::Text, None)
        );
        assert!(parse_args_with(&args(&["-", "more"]), from("x")).is_err());
        assert_eq!(
            parse_args_with(&args(&["--", "-"]), || Err("stdin is not read".into())),
            run("-", OutputFormat::Text, None)
        );
        assert_eq!(
            p(&["--session-id"]),
            Err("error: option '--session-id <id>' argument missing".into())
        );
    }

    #[test]
    fn a_stdin_task_is_read_within_its_limit() {
        assert_eq!(read_task(&b"fix it\n"[..], 7), Ok("fix it\n".to_string()));
        assert_eq!(
            read_task(&b"fix it\n"[..], 6),
            Err("error: the task on standard input is larger than 6 bytes (set DSH_MAX_TASK_BYTES to raise the limit)".to_string())
        );
        // An endless input stops at the limit.
        assert!(read_task(std::io::repeat(b'x'), 1 << 16).is_err());
        assert!(
            read_task(&[0xFFu8, b'\n'][..], 64)
                .unwrap_err()
                .contains("cannot read the task from standard input")
        );
    }
}
