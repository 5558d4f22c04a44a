//! `tool-terminal`: `terminal_open`, `terminal_send`, `terminal_read`, `terminal_signal`,
//! `terminal_close`, `terminal_list`, with upstream's renderings bounded to
//! `maxResultBytes`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use dsh_agent::{AgentRef, Agents};
use dsh_jobs::{
    Announce, JobHooks, JobOutcome, JobRegistry, JobStart, Terminal, head_bytes, tail_bytes,
};
use dsh_kernel::{BoxError, Context};
use dsh_tools::{ObjectSchema, Prop, Reply, ToolOutput, ToolRunContext, Typed, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::outputs;
use crate::service::{TerminalInfo, TerminalService};
#[cfg(test)]
use crate::types::WaitReason;
use crate::types::{ReadPage, SendRequest, SendResult, SessionStatus, TerminalSignal};

const TRUNCATED: &str = "\n[output truncated]";

/// `tool-terminal` settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolTerminalConfig {
    pub enable_run_in_background: bool,
    pub max_result_bytes: usize,
}

impl Default for ToolTerminalConfig {
    fn default() -> Self {
        Self {
            enable_run_in_background: true,
            max_result_bytes: 262_144,
        }
    }
}

fn fit_with_suffix(content: &str, suffix: &str, max: usize) -> String {
    if suffix.len() >= max {
        return tail_bytes(suffix, max).to_string();
    }
    format!("{}{suffix}", tail_bytes(content, max - suffix.len()))
}

fn bound_body_with_suffix(
    content: &str,
    metadata: &str,
    upstream_truncated: bool,
    max: usize,
) -> String {
    let suffix = format!(
        "{metadata}{}",
        if upstream_truncated { TRUNCATED } else { "" }
    );
    let complete = format!("{content}{suffix}");
    if complete.len() <= max {
        return complete;
    }
    fit_with_suffix(content, &format!("{metadata}{TRUNCATED}"), max)
}

/// A plain text over the bound keeps its head and says so.
pub fn bound_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    if TRUNCATED.len() >= max {
        return tail_bytes(TRUNCATED, max).to_string();
    }
    format!("{}{TRUNCATED}", head_bytes(text, max - TRUNCATED.len()))
}

pub fn render_open(
    id: &str,
    name: Option<&str>,
    type_name: &str,
    motd: &str,
    max: usize,
) -> String {
    let label = match name {
        Some(n) => format!("{id} ({n})"),
        None => id.to_string(),
    };
    let prefix = format!("started terminal session {label} [type: {type_name}]\n");
    let motd = if motd.is_empty() {
        "(no startup output)"
    } else {
        motd
    };
    let complete = format!("{prefix}{motd}");
    if complete.len() <= max {
        return complete;
    }
    let fixed = format!("{prefix}{TRUNCATED}");
    if fixed.len() >= max {
        return head_bytes(&fixed, max).to_string();
    }
    format!("{prefix}{}{TRUNCATED}", tail_bytes(motd, max - fixed.len()))
}

pub fn render_send(result: &SendResult, max: usize) -> String {
    let output = if result.viewport.is_empty() {
        "(no new output)"
    } else {
        &result.viewport
    };
    bound_body_with_suffix(
        output,
        &format!(
            "\n[wait: {}]\n[session: {}]",
            result.wait.as_str(),
            result.status.describe()
        ),
        result.truncated,
        max,
    )
}

pub fn render_read(page: &ReadPage, max: usize) -> String {
    let output = if page.text.is_empty() {
        "(no retained output)"
    } else {
        &page.text
    };
    bound_body_with_suffix(
        output,
        &format!(
            "\n[lines: {}-{} of {}]",
            page.line_begin, page.line_end, page.total_lines
        ),
        page.truncated,
        max,
    )
}

pub fn render_list(sessions: &[TerminalInfo], max: usize) -> String {
    if sessions.is_empty() {
        return "(no terminal sessions)".into();
    }
    let text = sessions
        .iter()
        .map(|s| {
            let name = s
                .name
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            let pid = s.pid.map(|p| format!(" pid={p}")).unwrap_or_default();
            format!(
                "{}{name} [{}] {}{pid}",
                s.id,
                s.type_name,
                s.status.describe()
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    bound_body_with_suffix(&text, "", false, max)
}

/// What the six terminal tools share.
#[derive(Clone)]
struct Terminals {
    terminals: Arc<TerminalService>,
    config: ToolTerminalConfig,
}

/// `terminal_open`, `terminal_send`, `terminal_read`, `terminal_signal`, `terminal_close`
/// and `terminal_list`, each holding what they share.
struct TerminalOpenTool(Terminals);
struct TerminalSendTool(Terminals);
struct TerminalReadTool(Terminals);
struct TerminalSignalTool(Terminals);
struct TerminalCloseTool(Terminals);
struct TerminalListTool(Terminals);

const SESSION_ID: &str = "The terminal session id terminal_open returned (pty-N).";
const SIGNAL_DESCRIPTION: &str = "The signal to deliver.";

const OPEN_DESCRIPTION: &str = "Open a persistent interactive terminal (a shell on a pseudo-terminal) and return its session id. State such as the working directory, variables and running programs stays between sends.";
const SEND_DESCRIPTION: &str = "Type text into a terminal and wait until it settles: the shell or program waits for input, output goes quiet, the terminal exits, or the wait times out. Returns what appeared meanwhile and why it stopped waiting.";
const READ_DESCRIPTION: &str =
    "Read a terminal's retained output (scrollback), counted in lines back from the newest.";
const SIGNAL_TOOL_DESCRIPTION: &str =
    "Send a signal to the program in the terminal's foreground (SIGINT is Ctrl-C).";
const CLOSE_DESCRIPTION: &str = "Close a terminal and end every process running in it.";
const LIST_DESCRIPTION: &str = "List your open terminals with their ids, names, kinds and states.";

// The arguments of each (no doc: upstream's parameter objects carry no description).
#[derive(Deserialize, JsonSchema)]
struct OpenArgs {
    /// The kind of terminal; "shell" is an interactive bash.
    #[serde(rename = "type")]
    type_name: String,
    /// An optional name, unique among your terminals.
    name: Option<String>,
    /// The directory to start in (default: the workspace).
    cwd: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct SendArgs {
    #[serde(rename = "sessionId")]
    #[schemars(description = SESSION_ID)]
    session_id: String,
    /// What to type.
    text: String,
    /// Press Enter after the text (default true).
    submit: Option<bool>,
    /// Return a job id at once instead of waiting; read it with job_output.
    // Read leniently, as before: when the configuration leaves it out of the schema, an
    // undeclared non-boolean value counts as absent.
    #[serde(default, deserialize_with = "dsh_tools::lenient::bool")]
    run_in_background: Option<bool>,
}

#[derive(Deserialize, JsonSchema)]
struct ReadArgs {
    #[serde(rename = "sessionId")]
    #[schemars(description = SESSION_ID)]
    session_id: String,
    /// Lines to skip back from the newest (default 0).
    offset: Option<f64>,
    /// How many lines to return (default 500).
    count: Option<f64>,
}

#[derive(Deserialize, JsonSchema)]
struct SignalArgs {
    #[serde(rename = "sessionId")]
    #[schemars(description = SESSION_ID)]
    session_id: String,
    // Its values ([`TerminalSignal::NAMES`]) are set by `tune`.
    #[schemars(description = SIGNAL_DESCRIPTION)]
    signal: String,
}

#[derive(Deserialize, JsonSchema)]
struct CloseArgs {
    #[serde(rename = "sessionId")]
    #[schemars(description = SESSION_ID)]
    session_id: String,
}

#[derive(Deserialize, JsonSchema)]
struct ListArgs {}

/// `terminal_send` offers `run_in_background` only when the configuration enables it.
fn tune_send(config: &ToolTerminalConfig, params: &mut ObjectSchema) {
    if !config.enable_run_in_background {
        params
            .properties
            .retain(|(name, _, _)| name != "run_in_background");
    }
}

/// `terminal_signal`'s `signal` is one of [`TerminalSignal::NAMES`].
fn tune_signal(_config: &ToolTerminalConfig, params: &mut ObjectSchema) {
    if let Some((_, prop, _)) = params.properties.iter_mut().find(|(n, _, _)| n == "signal") {
        *prop = Prop::enumeration(SIGNAL_DESCRIPTION, &TerminalSignal::NAMES);
    }
}

fn owner(run: &ToolRunContext) -> Result<AgentRef, BoxError> {
    let session = run
        .session
        .as_ref()
        .ok_or("terminal tools require an initiating agent")?;
    run.ctx
        .get::<Agents>()
        .and_then(|a| a.get(&session.id()))
        .ok_or_else(|| "terminal tools require an initiating agent".into())
}

fn session_id(id: &str) -> Result<String, BoxError> {
    if id.is_empty() {
        return Err("sessionId must be a non-empty string".into());
    }
    Ok(id.to_string())
}

/// What the six tools have in common: the declared value, and errors bounded so that
/// "Error: " + message fits `maxResultBytes` too.
macro_rules! terminal_tool {
    ($ty:ident, $args:ident, $name:expr, $description:expr, $output:path, $body:ident $(, tune = $tune:path)?) => {
        impl TypedTool for $ty {
            type Args = $args;
            type Value = Value;

            fn name(&self) -> String {
                $name.into()
            }

            fn description(&self) -> String {
                $description.into()
            }

            $(
                fn tune(&self, params: &mut ObjectSchema) {
                    $tune(&self.0.config, params);
                }
            )?

            fn value_schema(&self) -> Result<Option<Value>, String> {
                Ok(Some($output().clone()))
            }

            async fn run(
                self: Arc<Self>,
                args: $args,
                run: ToolRunContext,
            ) -> Result<Reply<Value>, BoxError> {
                let shared = &self.0;
                shared.$body(args, run).await.map_err(|e| shared.bounded(e))
            }
        }
    };
}

terminal_tool!(
    TerminalOpenTool,
    OpenArgs,
    "terminal_open",
    OPEN_DESCRIPTION,
    outputs::open,
    open
);
terminal_tool!(
    TerminalSendTool,
    SendArgs,
    "terminal_send",
    SEND_DESCRIPTION,
    outputs::send,
    send,
    tune = tune_send
);
terminal_tool!(
    TerminalReadTool,
    ReadArgs,
    "terminal_read",
    READ_DESCRIPTION,
    outputs::read,
    read
);
terminal_tool!(
    TerminalSignalTool,
    SignalArgs,
    "terminal_signal",
    SIGNAL_TOOL_DESCRIPTION,
    outputs::signal,
    signal,
    tune = tune_signal
);
terminal_tool!(
    TerminalCloseTool,
    CloseArgs,
    "terminal_close",
    CLOSE_DESCRIPTION,
    outputs::close,
    close
);
terminal_tool!(
    TerminalListTool,
    ListArgs,
    "terminal_list",
    LIST_DESCRIPTION,
    outputs::list,
    list
);

impl Terminals {
    /// An error whose text, after "Error: ", would pass the bound keeps its head.
    fn bounded(&self, e: BoxError) -> BoxError {
        let max = self.config.max_result_bytes;
        let message = e.to_string();
        if message.len() + 7 <= max {
            e
        } else {
            BoxError::from(bound_text(&message, max.saturating_sub(7)))
        }
    }

    async fn open(&self, args: OpenArgs, run: ToolRunContext) -> Result<Reply<Value>, BoxError> {
        let max = self.config.max_result_bytes;
        let owner = owner(&run)?;
        if args.type_name.is_empty() {
            return Err("type must be a non-empty string".into());
        }
        let type_name = args.type_name;
        let name = args.name;
        let cwd = args.cwd.map(
            |c| match (&run.cwd, std::path::Path::new(&c).is_absolute()) {
                (Some(base), false) => base.join(&c),
                _ => std::path::PathBuf::from(c),
            },
        );
        let (id, session) = self
            .terminals
            .spawn(&owner, &type_name, name.clone(), cwd)
            .await?;
        let motd = session.motd();
        let mut value = outputs::snapshot_value(
            &id,
            name.as_deref(),
            &type_name,
            session.pid(),
            &session.status(),
        );
        value.insert("motd".into(), Value::String(motd));
        let text = render_open(&id, name.as_deref(), &type_name, &session.motd(), max);
        Ok(Reply::text(text).with_value(Value::Object(value)))
    }

    async fn read(&self, args: ReadArgs, run: ToolRunContext) -> Result<Reply<Value>, BoxError> {
        let max = self.config.max_result_bytes;
        let owner = owner(&run)?;
        let me = owner.id().to_string();
        let id = session_id(&args.session_id)?;
        let number = |v: Option<f64>, d: usize| {
            v.filter(|v| v.is_finite() && *v >= 0.0)
                .map_or(d, |v| v as usize)
        };
        let claimed = self.terminals.get(&me, &id)?;
        let page = claimed
            .session
            .read(number(args.offset, 0), number(args.count, 500));
        let text = render_read(&page, max);
        Ok(Reply::text(text).with_value(outputs::read_value(&page)))
    }

    async fn signal(
        &self,
        args: SignalArgs,
        run: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let max = self.config.max_result_bytes;
        let owner = owner(&run)?;
        let me = owner.id().to_string();
        let id = session_id(&args.session_id)?;
        let signal = TerminalSignal::parse(&args.signal)
            .ok_or_else(|| format!("signal must be one of {}", TerminalSignal::NAMES.join(", ")))?;
        let claimed = self.terminals.get(&me, &id)?;
        let pgid = claimed.session.signal(signal)?;
        let text = bound_text(
            &format!(
                "delivered {} to foreground process group {pgid}",
                signal.name()
            ),
            max,
        );
        Ok(Reply::text(text).with_value(json!({"delivered": true, "targetPgid": pgid})))
    }

    async fn close(&self, args: CloseArgs, run: ToolRunContext) -> Result<Reply<Value>, BoxError> {
        let max = self.config.max_result_bytes;
        let owner = owner(&run)?;
        let me = owner.id().to_string();
        let id = session_id(&args.session_id)?;
        let closed = self.terminals.kill(&me, &id).await?;
        let outcome = if closed { "closed" } else { "already-closing" };
        let text = if closed {
            bound_text(&format!("closed terminal session {id}"), max)
        } else {
            bound_text(&format!("terminal session {id} was already closing"), max)
        };
        Ok(Reply::text(text).with_value(json!({"sessionId": id, "outcome": outcome})))
    }

    async fn list(&self, _args: ListArgs, run: ToolRunContext) -> Result<Reply<Value>, BoxError> {
        let max = self.config.max_result_bytes;
        let owner = owner(&run)?;
        let me = owner.id().to_string();
        let sessions = self.terminals.list(&me);
        let value = Value::Array(sessions.iter().map(outputs::info_value).collect());
        Ok(Reply::text(render_list(&sessions, max)).with_value(value))
    }

    async fn send(&self, args: SendArgs, run: ToolRunContext) -> Result<Reply<Value>, BoxError> {
        let max = self.config.max_result_bytes;
        let owner = owner(&run)?;
        let owner = &owner;
        let id = session_id(&args.session_id)?;
        let text = args.text;
        let submit = args.submit.unwrap_or(true);
        let background = args.run_in_background == Some(true);
        let jobs = if background {
            if !self.config.enable_run_in_background {
                return Err(
                    "background terminal sends are disabled by tool-terminal configuration".into(),
                );
            }
            Some(run.ctx.get::<JobRegistry>().ok_or(
                "background terminal sends require @deepseek-ai/dsh-jobs and @deepseek-ai/dsh-tool-jobs",
            )?)
        } else {
            None
        };
        let claimed = self.terminals.claim_send(owner.id(), &id)?;
        let request = SendRequest {
            text: text.clone(),
            submit,
        };
        if let Some(jobs) = jobs {
            let label = format!("{id}: {}", if text.is_empty() { "(input)" } else { &text });
            let started = jobs.start(
                JobStart {
                    kind: "pty-send".into(),
                    label,
                    owner: Some(owner.clone()),
                    output_limit_bytes: Some(max),
                    announce: Announce::AfterStartingStep,
                    tool_call: Some(run.call_id.clone()),
                },
                |settler| {
                    let cancel = CancellationToken::new();
                    let handle = claimed.session.start_send(request, cancel.clone());
                    let slot = claimed.send_active.clone();
                    let c = cancel.clone();
                    let watcher = tokio::spawn(async move {
                        let outcome = match handle.done.await {
                            Ok(r) => {
                                let status = if c.is_cancelled() {
                                    Terminal::Killed
                                } else {
                                    Terminal::Completed
                                };
                                let detail = match &r.status {
                                    SessionStatus::Running => format!("wait: {}", r.wait.as_str()),
                                    SessionStatus::Exited { code, signal } => format!(
                                        "session exited: {}",
                                        code.map(|c| c.to_string())
                                            .or_else(|| signal.clone())
                                            .unwrap_or_else(|| "unknown".into())
                                    ),
                                };
                                JobOutcome::new(status, detail)
                            }
                            Err(e) => JobOutcome::new(Terminal::Failed, e.to_string()),
                        };
                        slot.store(false, Ordering::SeqCst);
                        settler.settle(outcome);
                    });
                    let read = handle.read_output.clone();
                    Ok(JobHooks {
                        cancel: Box::new(move |_| {
                            cancel.cancel();
                            Ok(())
                        }),
                        read_output: Some(Box::new(move || {
                            let (delta, lost) = read();
                            let sep = if delta.is_empty() || delta.ends_with('\n') {
                                ""
                            } else {
                                "\n"
                            };
                            format!(
                                "{delta}{}",
                                if lost {
                                    format!("{sep}[output truncated]")
                                } else {
                                    String::new()
                                }
                            )
                        })),
                        keep_alive: Some(Box::new(dsh_process::AbortOnDrop(watcher))),
                    })
                },
            );
            return match started {
                Ok(job) => {
                    let value = json!({"kind": "background", "jobId": job});
                    Ok(Reply::text(format!("started background job {job}")).with_value(value))
                }
                Err(e) => {
                    claimed.send_active.store(false, Ordering::SeqCst);
                    Err(e)
                }
            };
        }
        let handle = claimed.session.start_send(request, run.cancel.clone());
        let result = handle.done.await;
        claimed.send_active.store(false, Ordering::SeqCst);
        let result = result?;
        if run.cancel.is_cancelled() {
            return Err("terminal send aborted".into());
        }
        let mut out = ToolOutput::text(render_send(&result, max));
        out.meta = Some(json!({
            "viewport": result.viewport,
            "waitReason": result.wait.as_str(),
            "sessionStatus": result.status.to_value(),
            "truncated": result.truncated,
        }));
        Ok(Reply::output(out).with_value(outputs::send_value(&result)))
    }
}

/// Registers the six tools and the `tool:pty` section.
pub fn register(
    ctx: &Context,
    terminals: Arc<TerminalService>,
    config: ToolTerminalConfig,
) -> Result<(), BoxError> {
    let tools = ctx.require::<dsh_tools::ToolRegistry>()?;
    if let Some(prompt) = ctx.get::<dsh_prompt::SystemPrompt>() {
        prompt.section(
            ctx,
            "tool:pty",
            106.0,
            Arc::new(|_| "Use terminal_open for interactive or long-lived programs (a REPL, a dev server you talk to, a prompt that asks questions): the terminal keeps its state, terminal_send types into it and reports why it stopped waiting, terminal_read pages back through its output. Close terminals you no longer need.".to_string()),
        )?;
    }
    let shared = Terminals { terminals, config };
    tools.register(ctx, Arc::new(Typed::new(TerminalOpenTool(shared.clone()))?))?;
    tools.register(ctx, Arc::new(Typed::new(TerminalSendTool(shared.clone()))?))?;
    tools.register(ctx, Arc::new(Typed::new(TerminalReadTool(shared.clone()))?))?;
    tools.register(
        ctx,
        Arc::new(Typed::new(TerminalSignalTool(shared.clone()))?),
    )?;
    tools.register(
        ctx,
        Arc::new(Typed::new(TerminalCloseTool(shared.clone()))?),
    )?;
    tools.register(ctx, Arc::new(Typed::new(TerminalListTool(shared))?))?;
    Ok(())
}

#[cfg(test)]
mod tests;
