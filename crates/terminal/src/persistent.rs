//! `tool-bash-persistent`: a `bash` tool whose commands run in one interactive shell per
//! agent (a terminal of the service), so the working directory, variables and functions
//! carry over between calls. Each command is wrapped in unique markers that capture its
//! output and exit status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_agent::{AgentRef, Agents};
use dsh_kernel::BoxError;
use dsh_tools::{Reply, ToolRunContext, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::service::TerminalService;
use crate::types::{SendRequest, SessionStatus, WaitReason};

/// `tool-bash-persistent` settings.
#[derive(Clone, Debug, PartialEq)]
pub struct PersistentConfig {
    pub backend_type: String,
    pub timeout: Duration,
    pub max_output_chars: usize,
    /// The model-facing tool description in place of the built-in one.
    pub description: Option<String>,
}

impl Default for PersistentConfig {
    fn default() -> Self {
        Self {
            backend_type: "shell".into(),
            timeout: Duration::from_millis(300_000),
            max_output_chars: 16_000,
            description: None,
        }
    }
}

/// `$'…'` quoting: backslash, quote, CR and LF escaped.
pub fn ansi_c_quote(text: &str) -> String {
    let mut out = String::from("$'");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The one-line wrapper and its markers.
pub fn wrap(command: &str, nonce: &str) -> (String, String, String) {
    let start = format!("__DSH_PERSISTENT_BASH_START_{nonce}__");
    let end = format!("__DSH_PERSISTENT_BASH_END_{nonce}:");
    let line = format!(
        "printf '%s\\n' {}; eval -- {}; __dsh_persistent_bash_status=$?; printf '%s%s\\n' {} \"$__dsh_persistent_bash_status\"",
        ansi_c_quote(&start),
        ansi_c_quote(command),
        ansi_c_quote(&end)
    );
    (line, start, end)
}

/// The command's output and status, once the end marker is in `scrollback`.
pub fn extract(scrollback: &str, start: &str, end: &str) -> Option<(String, Option<i32>)> {
    let at = scrollback.rfind(end)?;
    let digits: String = scrollback[at + end.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    if digits.is_empty() || !scrollback[at + end.len() + digits.len()..].starts_with('\n') {
        return None;
    }
    let body_start = scrollback[..at]
        .rfind(start)
        .map(|s| s + start.len())
        .unwrap_or(0);
    let body = &scrollback[body_start..at];
    let body = body.strip_prefix('\n').unwrap_or(body);
    let body = body.strip_suffix('\n').unwrap_or(body);
    Some((body.to_string(), digits.parse().ok()))
}

fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((i, _)) => format!(
            "{}<response clipped><NOTE>The output was longer than {max} characters and was cut here. Run the command again with its output filtered (grep, head, tail) or written to a file you can search.</NOTE>",
            &text[..i]
        ),
    }
}

/// Recorded behaviour: the SDK `persistent-tools` snapshot compares the result bytes.
const RESET: &str = "The persistent bash shell was reset; the next bash call starts from the workspace with a fresh current directory and environment.";

/// Per owner: its shell's terminal id; under `lock:<owner>`, the lock serializing its calls.
type Shells = Arc<Mutex<HashMap<String, (String, Arc<tokio::sync::Mutex<()>>)>>>;

const DESCRIPTION: &str = "Run a command in your persistent bash shell. The shell lives across calls: the working directory, exported and shell variables, and functions carry over. A non-zero exit status is reported as `[exit code: N]`; a command that runs too long is stopped and the shell reset.";

/// The persistent `bash` tool.
pub struct PersistentBashTool {
    terminals: Arc<TerminalService>,
    config: PersistentConfig,
    shells: Shells,
}

// The arguments (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
pub struct PersistentBashArgs {
    /// The command line to run.
    command: String,
}

impl PersistentBashTool {
    pub fn new(terminals: Arc<TerminalService>, config: PersistentConfig) -> Self {
        Self {
            terminals,
            config,
            shells: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    fn lock_for(&self, owner: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut shells = self.shells.lock().unwrap_or_else(|p| p.into_inner());
        shells
            .entry(format!("lock:{owner}"))
            .or_insert_with(|| (String::new(), Arc::new(tokio::sync::Mutex::new(()))))
            .1
            .clone()
    }

    fn shell_of(&self, owner: &str) -> Option<String> {
        self.shells
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(owner)
            .map(|(id, _)| id.clone())
    }

    async fn reset(&self, owner: &str) {
        let id = self
            .shells
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(owner)
            .map(|(id, _)| id);
        if let Some(id) = id {
            let _ = self.terminals.kill(owner, &id).await;
        }
    }

    /// Forgets `owner` (its disposal closed its terminals).
    pub fn forget(&self, owner: &str) {
        let mut shells = self.shells.lock().unwrap_or_else(|p| p.into_inner());
        shells.remove(owner);
        shells.remove(&format!("lock:{owner}"));
    }

    async fn ensure_shell(&self, agent: &AgentRef) -> Result<String, BoxError> {
        let owner = agent.id().to_string();
        if let Some(id) = self.shell_of(&owner) {
            // The model may have closed it with terminal_close; then start a fresh one.
            if self.terminals.get(&owner, &id).is_ok() {
                return Ok(id);
            }
            self.shells
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&owner);
        }
        let cwd = agent.session().header().cwd.map(std::path::PathBuf::from);
        let (id, session) = self
            .terminals
            .spawn(agent, &self.config.backend_type, None, cwd)
            .await?;
        let setup = session
            .start_send(
                SendRequest {
                    text: "stty -echo".into(),
                    submit: true,
                },
                tokio_util::sync::CancellationToken::new(),
            )
            .done
            .await;
        let accepted = matches!(&setup, Ok(r) if matches!(r.wait, WaitReason::StdinRead | WaitReason::InferredIdle) && r.status == SessionStatus::Running);
        if !accepted {
            let _ = self.terminals.kill(&owner, &id).await;
            return Err("persistent bash shell did not accept initialization".into());
        }
        self.shells
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(owner, (id.clone(), Arc::new(tokio::sync::Mutex::new(()))));
        Ok(id)
    }

    /// One call; the result text.
    async fn call(
        &self,
        args: PersistentBashArgs,
        run: ToolRunContext,
    ) -> Result<String, BoxError> {
        let command = args.command.as_str();
        if command.trim().is_empty() {
            return Err("command must be a non-empty string".into());
        }
        let agent = run
            .session
            .as_ref()
            .and_then(|s| run.ctx.get::<Agents>()?.get(&s.id()))
            .ok_or("bash requires an owning agent session")?;
        let owner = agent.id().to_string();
        let serial = self.lock_for(&owner);
        let _turn = serial.lock().await;
        let id = self.ensure_shell(&agent).await?;
        let session = self.terminals.claim_send(&owner, &id)?;
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let (line, start, end) = wrap(command, &nonce);
        let started = Instant::now();
        let mut first = true;
        let outcome = loop {
            let request = if first {
                SendRequest {
                    text: line.clone(),
                    submit: true,
                }
            } else {
                SendRequest {
                    text: String::new(),
                    submit: false,
                }
            };
            first = false;
            let result = session
                .session
                .start_send(request, run.cancel.clone())
                .done
                .await;
            let page = session.session.read(0, 1000).text;
            let result = match result {
                Ok(r) => r,
                Err(e) => break Err(e),
            };
            if let Some((body, status)) = extract(&page, &start, &end) {
                break Ok((body, status, None));
            }
            if run.cancel.is_cancelled() {
                break Err("tool call aborted".into());
            }
            // After the start marker, without the line break that opens it or one that
            // ends it (as upstream renders a partial output).
            let partial = page
                .rfind(&start)
                .map(|s| {
                    let rest = page[s + start.len()..].trim_start_matches('\n');
                    let rest = rest.strip_suffix('\n').unwrap_or(rest);
                    rest.strip_suffix('\r').unwrap_or(rest).to_string()
                })
                .unwrap_or_default();
            if let SessionStatus::Exited { code, signal } = &result.status {
                let marker = match (signal, code) {
                    (Some(s), _) => format!("[shell killed by signal: {s}]"),
                    (None, Some(c)) => format!("[shell exited: code {c}]"),
                    (None, None) => "[shell exited]".to_string(),
                };
                break Ok((partial, None, Some(marker)));
            }
            if result.wait == WaitReason::StdinRead {
                // The command (or a program it started) waits for input.
                break Ok((partial, None, Some(String::new())));
            }
            if started.elapsed() >= self.config.timeout {
                let secs = (self.config.timeout.as_millis() as f64 / 1000.0).round();
                break Ok((
                    String::new(),
                    None,
                    Some(format!(
                        "Your command timed out after {secs} seconds or experienced an OOM error. Below is partial output:\n{partial}"
                    )),
                ));
            }
        };
        session
            .send_active
            .store(false, std::sync::atomic::Ordering::SeqCst);
        match outcome {
            Err(e) => {
                self.reset(&owner).await;
                Err(e)
            }
            Ok((body, status, None)) => {
                let mut text = clip(&body, self.config.max_output_chars);
                if let Some(code) = status.filter(|c| *c != 0) {
                    text.push_str(&format!("\n[exit code: {code}]"));
                }
                Ok(text)
            }
            Ok((body, _, Some(note))) if note.is_empty() => {
                Ok(clip(&body, self.config.max_output_chars))
            }
            Ok((body, _, Some(note))) => {
                self.reset(&owner).await;
                let body = clip(&body, self.config.max_output_chars);
                let text = if body.is_empty() {
                    format!("{note}\n{RESET}")
                } else {
                    format!("{body}\n{note}\n{RESET}")
                };
                Ok(text)
            }
        }
    }
}

/// The canonical value is the result text itself (upstream: `{type: string}`).
impl TypedTool for PersistentBashTool {
    type Args = PersistentBashArgs;
    type Value = String;

    fn name(&self) -> String {
        "bash".into()
    }

    fn description(&self) -> String {
        self.config
            .description
            .clone()
            .unwrap_or_else(|| DESCRIPTION.into())
    }

    async fn run(
        self: Arc<Self>,
        args: PersistentBashArgs,
        run: ToolRunContext,
    ) -> Result<Reply<String>, BoxError> {
        let text = self.call(args, run).await?;
        Ok(Reply::text(text.clone()).with_value(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_schemas_are_the_declared_ones() {
        use dsh_tools::{ObjectSchema, Prop};
        assert_eq!(
            dsh_kernel::json::to_string(
                &dsh_tools::params_schema::<PersistentBashArgs>()
                    .unwrap()
                    .to_value()
            ),
            dsh_kernel::json::to_string(
                &ObjectSchema::new()
                    .required("command", Prop::string("The command line to run."))
                    .to_value()
            )
        );
        assert_eq!(
            dsh_kernel::json::to_string(&dsh_tools::output_schema::<String>().unwrap().unwrap()),
            dsh_kernel::json::to_string(&serde_json::json!({"type": "string"}))
        );
    }

    #[test]
    fn wrapping_quotes_and_markers_are_recovered() {
        assert_eq!(ansi_c_quote("a'b\\c\nd"), "$'a\\'b\\\\c\\nd'");
        let (line, start, end) = wrap("echo hi", "N");
        assert!(line.contains("eval -- $'echo hi'"), "{line}");
        let screen = format!("dsh> \n{start}\nhi\nthere\n{end}3\ndsh> ");
        assert_eq!(
            extract(&screen, &start, &end),
            Some(("hi\nthere".to_string(), Some(3)))
        );
        assert_eq!(
            extract(&format!("{start}\nhi\n{end}"), &start, &end),
            None,
            "no status yet"
        );
        assert_eq!(clip("abcdef", 3).starts_with("abc<response clipped>"), true);
    }
}
