//! `tool-terminal`: `terminal_open`, `terminal_send`, `terminal_read`, `terminal_signal`,
//! `terminal_close`, `terminal_list`, with upstream's renderings bounded to
//! `maxResultBytes`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use dsh_agent::{AgentRef, Agents};
use dsh_jobs::{
    Announce, JobHooks, JobOutcome, JobRegistry, JobStart, Terminal, head_bytes, tail_bytes,
};
use dsh_kernel::{BoxError, BoxFuture, Context};
use dsh_llm::ToolSchema;
use dsh_tools::{ObjectSchema, Prop, Tool, ToolOutput, ToolRunContext};
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

#[derive(Clone, Copy)]
enum Which {
    Open,
    Send,
    Read,
    Signal,
    Close,
    List,
}

struct TerminalTool {
    which: Which,
    schema: ToolSchema,
    params: ObjectSchema,
    terminals: Arc<TerminalService>,
    config: ToolTerminalConfig,
}

const SESSION_ID: &str = "The terminal session id terminal_open returned (pty-N).";

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

fn session_id(args: &Value) -> Result<String, BoxError> {
    match args.get("sessionId").and_then(Value::as_str) {
        Some(s) if !s.is_empty() => Ok(s.to_string()),
        _ => Err("sessionId must be a non-empty string".into()),
    }
}

impl TerminalTool {
    fn new(which: Which, terminals: Arc<TerminalService>, config: ToolTerminalConfig) -> Self {
        let (name, description, params) = match which {
            Which::Open => (
                "terminal_open",
                "Open a persistent interactive terminal (a shell on a pseudo-terminal) and return its session id. State such as the working directory, variables and running programs stays between sends.",
                ObjectSchema::new()
                    .required(
                        "type",
                        Prop::string("The kind of terminal; \"shell\" is an interactive bash."),
                    )
                    .optional(
                        "name",
                        Prop::string("An optional name, unique among your terminals."),
                    )
                    .optional(
                        "cwd",
                        Prop::string("The directory to start in (default: the workspace)."),
                    ),
            ),
            Which::Send => {
                let mut p = ObjectSchema::new()
                    .required("sessionId", Prop::string(SESSION_ID))
                    .required("text", Prop::string("What to type."))
                    .optional(
                        "submit",
                        Prop::boolean("Press Enter after the text (default true)."),
                    );
                if config.enable_run_in_background {
                    p = p.optional(
                        "run_in_background",
                        Prop::boolean(
                            "Return a job id at once instead of waiting; read it with job_output.",
                        ),
                    );
                }
                (
                    "terminal_send",
                    "Type text into a terminal and wait until it settles: the shell or program waits for input, output goes quiet, the terminal exits, or the wait times out. Returns what appeared meanwhile and why it stopped waiting.",
                    p,
                )
            }
            Which::Read => (
                "terminal_read",
                "Read a terminal's retained output (scrollback), counted in lines back from the newest.",
                ObjectSchema::new()
                    .required("sessionId", Prop::string(SESSION_ID))
                    .optional(
                        "offset",
                        Prop::number("Lines to skip back from the newest (default 0)."),
                    )
                    .optional(
                        "count",
                        Prop::number("How many lines to return (default 500)."),
                    ),
            ),
            Which::Signal => (
                "terminal_signal",
                "Send a signal to the program in the terminal's foreground (SIGINT is Ctrl-C).",
                ObjectSchema::new()
                    .required("sessionId", Prop::string(SESSION_ID))
                    .required(
                        "signal",
                        Prop::enumeration("The signal to deliver.", &TerminalSignal::NAMES),
                    ),
            ),
            Which::Close => (
                "terminal_close",
                "Close a terminal and end every process running in it.",
                ObjectSchema::new().required("sessionId", Prop::string(SESSION_ID)),
            ),
            Which::List => (
                "terminal_list",
                "List your open terminals with their ids, names, kinds and states.",
                ObjectSchema::new(),
            ),
        };
        Self {
            which,
            schema: ToolSchema {
                name: name.into(),
                description: description.into(),
                parameters: params.to_value().into(),
            },
            params,
            terminals,
            config,
        }
    }

    async fn run(&self, args: Value, run: ToolRunContext) -> Result<ToolOutput, BoxError> {
        let max = self.config.max_result_bytes;
        let owner = owner(&run)?;
        let me = owner.id().to_string();
        let text = match self.which {
            Which::Open => {
                let type_name = match args.get("type").and_then(Value::as_str) {
                    Some(t) if !t.is_empty() => t.to_string(),
                    _ => return Err("type must be a non-empty string".into()),
                };
                let name = args.get("name").and_then(Value::as_str).map(str::to_owned);
                let cwd = args.get("cwd").and_then(Value::as_str).map(|c| {
                    match (&run.cwd, std::path::Path::new(c).is_absolute()) {
                        (Some(base), false) => base.join(c),
                        _ => std::path::PathBuf::from(c),
                    }
                });
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
                run.set_value(Value::Object(value));
                render_open(&id, name.as_deref(), &type_name, &session.motd(), max)
            }
            Which::Send => return self.send(args, run, &owner).await,
            Which::Read => {
                let id = session_id(&args)?;
                let number = |k: &str, d: usize| {
                    args.get(k)
                        .and_then(Value::as_f64)
                        .filter(|v| v.is_finite() && *v >= 0.0)
                        .map_or(d, |v| v as usize)
                };
                let claimed = self.terminals.get(&me, &id)?;
                let page = claimed
                    .session
                    .read(number("offset", 0), number("count", 500));
                run.set_value(outputs::read_value(&page));
                render_read(&page, max)
            }
            Which::Signal => {
                let id = session_id(&args)?;
                let name = args.get("signal").and_then(Value::as_str).unwrap_or("");
                let signal = TerminalSignal::parse(name).ok_or_else(|| {
                    format!("signal must be one of {}", TerminalSignal::NAMES.join(", "))
                })?;
                let claimed = self.terminals.get(&me, &id)?;
                let pgid = claimed.session.signal(signal)?;
                run.set_value(json!({"delivered": true, "targetPgid": pgid}));
                bound_text(
                    &format!(
                        "delivered {} to foreground process group {pgid}",
                        signal.name()
                    ),
                    max,
                )
            }
            Which::Close => {
                let id = session_id(&args)?;
                let closed = self.terminals.kill(&me, &id).await?;
                let outcome = if closed { "closed" } else { "already-closing" };
                run.set_value(json!({"sessionId": id, "outcome": outcome}));
                if closed {
                    bound_text(&format!("closed terminal session {id}"), max)
                } else {
                    bound_text(&format!("terminal session {id} was already closing"), max)
                }
            }
            Which::List => {
                let sessions = self.terminals.list(&me);
                run.set_value(Value::Array(
                    sessions.iter().map(outputs::info_value).collect(),
                ));
                render_list(&sessions, max)
            }
        };
        Ok(ToolOutput::text(text))
    }

    async fn send(
        &self,
        args: Value,
        run: ToolRunContext,
        owner: &AgentRef,
    ) -> Result<ToolOutput, BoxError> {
        let max = self.config.max_result_bytes;
        let id = session_id(&args)?;
        let text = args
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let submit = args.get("submit").and_then(Value::as_bool).unwrap_or(true);
        let background = args.get("run_in_background").and_then(Value::as_bool) == Some(true);
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
                    run.set_value(json!({"kind": "background", "jobId": job}));
                    Ok(ToolOutput::text(format!("started background job {job}")))
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
        run.set_value(outputs::send_value(&result));
        let mut out = ToolOutput::text(render_send(&result, max));
        out.meta = Some(json!({
            "viewport": result.viewport,
            "waitReason": result.wait.as_str(),
            "sessionStatus": result.status.to_value(),
            "truncated": result.truncated,
        }));
        Ok(out)
    }
}

impl Tool for TerminalTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn output_schema(&self) -> Option<&Value> {
        Some(match self.which {
            Which::Open => outputs::open(),
            Which::Send => outputs::send(),
            Which::Read => outputs::read(),
            Which::Signal => outputs::signal(),
            Which::Close => outputs::close(),
            Which::List => outputs::list(),
        })
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        self.params.validate(args)
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let this = Self {
            which: self.which,
            schema: self.schema.clone(),
            params: self.params.clone(),
            terminals: self.terminals.clone(),
            config: self.config.clone(),
        };
        Box::pin(async move {
            let max = this.config.max_result_bytes;
            // "Error: " + message must fit the bound too.
            this.run(args, ctx).await.map_err(|e| {
                let message = e.to_string();
                if message.len() + 7 <= max {
                    e
                } else {
                    BoxError::from(bound_text(&message, max.saturating_sub(7)))
                }
            })
        })
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
    for which in [
        Which::Open,
        Which::Send,
        Which::Read,
        Which::Signal,
        Which::Close,
        Which::List,
    ] {
        tools.register(
            ctx,
            Arc::new(TerminalTool::new(which, terminals.clone(), config.clone())),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn renderings_match_the_recorded_bounded_forms() {
        let sent = SendResult {
            viewport: "printf 'PTY_OK\\n'\nPTY_OK\ndsh> ".into(),
            wait: WaitReason::StdinRead,
            status: SessionStatus::Running,
            truncated: false,
        };
        assert_eq!(
            render_send(&sent, 64),
            "K\ndsh> \n[wait: stdin_read]\n[session: running]\n[output truncated]"
        );
        assert_eq!(
            render_open("pty-1", Some("main"), "shell", "dsh> ", 64),
            "started terminal session pty-1 (main) [type: shell]\ndsh> "
        );
        let page = ReadPage {
            text: "dsh> printf 'PTY_OK\\n'\nPTY_OK\ndsh> ".into(),
            total_lines: 3,
            line_begin: 0,
            line_end: 3,
            truncated: false,
        };
        assert_eq!(
            render_read(&page, 64),
            "dsh> printf 'PTY_OK\\n'\nPTY_OK\ndsh> \n[lines: 0-3 of 3]"
        );
        assert_eq!(render_list(&[], 64), "(no terminal sessions)");
        assert_eq!(
            render_send(
                &SendResult {
                    viewport: String::new(),
                    wait: WaitReason::SessionExit,
                    status: SessionStatus::Exited {
                        code: Some(3),
                        signal: None
                    },
                    truncated: false
                },
                1000
            ),
            "(no new output)\n[wait: session_exit]\n[session: exited code=3 signal=null]"
        );
        assert_eq!(
            bound_text(&"x".repeat(100), 30),
            format!("{}{TRUNCATED}", "x".repeat(11))
        );
    }
}
