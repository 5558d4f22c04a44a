//! Running one configured command hook: resolve its timeout, serialize the payload onto
//! stdin, build the child environment, run it, decode the outcome. Never fails: a hook
//! that cannot run becomes an outcome with no exit code and the failure on stderr.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::codec::{HookOutput, parse_hook_output};
use super::process::{ProcessSpec, run_process};

/// The reference per-hook timeout (10 minutes) when a hook sets none.
pub const DEFAULT_HOOK_TIMEOUT_MS: f64 = 600_000.0;
/// The longest timeout a hook may ask for (the shell executor's `maxTimeoutMs`).
pub const MAX_HOOK_TIMEOUT_MS: f64 = 600_000.0;

/// One configured command hook.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandHook {
    pub command: String,
    /// Per-hook timeout in seconds (the wire unit).
    pub timeout_sec: Option<f64>,
}

/// Whether the stdin payload ends with a newline (Claude Code yes, Codex no).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StdinFraming {
    TrailingNewline,
    Bare,
}

/// Everything one invocation needs besides its command.
#[derive(Clone, Debug)]
pub struct HookRun<'a> {
    /// Written to stdin as `JSON.stringify` would.
    pub payload: &'a Value,
    /// Trusted entries merged last into the child environment (`CLAUDE_PROJECT_DIR`).
    pub env: Vec<(String, String)>,
    /// Working directory; `None`: the process cwd.
    pub cwd: Option<PathBuf>,
    /// Cancels the run (the process group is killed).
    pub cancel: CancellationToken,
    pub framing: StdinFraming,
    /// Used when the hook sets no timeout.
    pub default_timeout_ms: f64,
    /// Run the command under this sandbox and policy (a confined mode), or refuse it.
    pub confine: Option<(Arc<dsh_sandbox::Sandbox>, dsh_sandbox::ExecutionPolicy)>,
    /// The firing event; a `hookSpecificOutput` for another event is discarded.
    pub expected_event: Option<&'a str>,
}

/// A decoded run plus its wall-clock duration.
#[derive(Clone, Debug, PartialEq)]
pub struct HookRunResult {
    pub output: HookOutput,
    pub duration_ms: f64,
}

/// The child environment: the scrubbed parent environment (credential-shaped names, `DSH_*`
/// names and secret values removed), the terminal overrides (no colour, no pager), then
/// `trusted`; later layers win.
pub fn child_env(trusted: &[(String, String)]) -> Vec<(String, String)> {
    dsh_sandbox::secrets::child_env(trusted)
}

/// The effective timeout: the hook's own (seconds) or the default, capped at
/// [`MAX_HOOK_TIMEOUT_MS`]. A non-positive or non-finite value is refused with the shell
/// executor's message.
pub fn effective_timeout(hook: &CommandHook, default_timeout_ms: f64) -> Result<Duration, String> {
    let ms = hook.timeout_sec.map_or(default_timeout_ms, |s| s * 1000.0);
    if !ms.is_finite() || ms <= 0.0 {
        return Err("bash-local: request.timeoutMs must be a positive finite number".into());
    }
    Ok(Duration::from_secs_f64(
        ms.min(MAX_HOOK_TIMEOUT_MS) / 1000.0,
    ))
}

/// Runs `hook` and decodes its outcome.
pub async fn run_hook(hook: &CommandHook, run: HookRun<'_>) -> HookRunResult {
    let started = Instant::now();
    let elapsed = |started: Instant| started.elapsed().as_secs_f64() * 1000.0;
    let failed = |message: String| parse_hook_output(None, "", &message, None);
    let timeout = match effective_timeout(hook, run.default_timeout_ms) {
        Ok(t) => t,
        Err(message) => {
            return HookRunResult {
                output: failed(message),
                duration_ms: elapsed(started),
            };
        }
    };
    let mut stdin = dsh_kernel::json::to_string(run.payload);
    if run.framing == StdinFraming::TrailingNewline {
        stdin.push('\n');
    }
    let cwd = match run.cwd {
        Some(cwd) => cwd,
        None => match std::env::current_dir() {
            Ok(cwd) => cwd,
            Err(e) => {
                return HookRunResult {
                    output: failed(e.to_string()),
                    duration_ms: elapsed(started),
                };
            }
        },
    };
    let runner = match run.confine {
        None => None,
        Some((sandbox, policy)) => {
            let argv = vec!["bash".into(), "-c".into(), hook.command.clone().into()];
            match sandbox.0.confine(argv, policy).await {
                Ok(c) => Some((c.program, c.args)),
                Err(refused) => {
                    return HookRunResult {
                        output: failed(refused.message()),
                        duration_ms: elapsed(started),
                    };
                }
            }
        }
    };
    let spec = ProcessSpec {
        command: hook.command.clone(),
        runner,
        cwd,
        env: child_env(&run.env),
        stdin: stdin.into_bytes(),
        timeout,
    };
    let output = match run_process(spec, &run.cancel).await {
        Ok(outcome) => parse_hook_output(
            outcome.exit_code,
            &outcome.stdout,
            &outcome.stderr,
            run.expected_event,
        ),
        Err(e) => failed(format!("spawn bash: {e}")),
    };
    HookRunResult {
        output,
        duration_ms: elapsed(started),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn timeouts_resolve_like_the_shell_executor() {
        let hook = |timeout_sec| CommandHook {
            command: "true".into(),
            timeout_sec,
        };
        assert_eq!(
            effective_timeout(&hook(None), 1500.0),
            Ok(Duration::from_millis(1500))
        );
        assert_eq!(
            effective_timeout(&hook(Some(0.25)), 1500.0),
            Ok(Duration::from_millis(250))
        );
        assert_eq!(
            effective_timeout(&hook(Some(3600.0)), 1500.0),
            Ok(Duration::from_secs(600))
        );
        assert!(effective_timeout(&hook(Some(0.0)), 1500.0).is_err());
        assert!(effective_timeout(&hook(None), -1.0).is_err());
    }

    #[test]
    fn trusted_variables_layer_over_the_terminal_overrides() {
        let env = child_env(&[
            ("TERM".into(), "xterm".into()),
            ("CLAUDE_PROJECT_DIR".into(), "/p".into()),
        ]);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(
            (get("TERM"), get("NO_COLOR"), get("CLAUDE_PROJECT_DIR")),
            (Some("xterm"), Some("1"), Some("/p"))
        );
    }
}
