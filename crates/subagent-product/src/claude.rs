//! `@deepseek-ai/dsh-subagent-claude-code`: Claude Code as a one-shot child, driven the way
//! the Claude Agent SDK drives the `claude` CLI: `--output-format stream-json --verbose
//! --input-format stream-json` with a control protocol on stdin/stdout (an `initialize`
//! control request, then the task as one `user` message; `can_use_tool` control requests
//! from the CLI are denied unattended, since `--permission-prompt-tool stdio` routes every
//! permission prompt to us). The run succeeds only with a `result` message of subtype
//! `success`, `is_error: false` and a non-blank `result`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_kernel::BoxError;
use dsh_llm::ContentBlock;
use dsh_subagent::{StopReason, SubagentResult, SubagentRun};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::common::{Publish, failure_line, publish, text_task};
use crate::process::{Launch, Outbox, StderrMode, spawn};

const PREFIX: &str = "subagent-claude-code";
const PRODUCT: &str = "Claude Code";

/// Claude Code's `--permission-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaudeMode {
    DontAsk,
    AcceptEdits,
    Auto,
    Plan,
    BypassPermissions,
}

impl ClaudeMode {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "dontAsk" => Some(Self::DontAsk),
            "acceptEdits" => Some(Self::AcceptEdits),
            "auto" => Some(Self::Auto),
            "plan" => Some(Self::Plan),
            "bypassPermissions" => Some(Self::BypassPermissions),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::DontAsk => "dontAsk",
            Self::AcceptEdits => "acceptEdits",
            Self::Auto => "auto",
            Self::Plan => "plan",
            Self::BypassPermissions => "bypassPermissions",
        }
    }
}

/// A resolved Claude Code child.
#[derive(Clone, Debug)]
pub struct ClaudeSpec {
    /// `claude` unless configured.
    pub command: String,
    /// Put before the SDK-protocol flags.
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub mode: ClaudeMode,
    pub dispose_grace: Duration,
    pub timeout: Option<Duration>,
}

/// The CLI flags of an unattended stream-json session in `mode` (the Agent SDK's order).
pub fn protocol_args(mode: ClaudeMode) -> Vec<String> {
    let mut args: Vec<String> = [
        "--output-format",
        "stream-json",
        "--verbose",
        "--system-prompt",
        "",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push("--disallowedTools".into());
    args.push(if mode == ClaudeMode::Plan {
        "AskUserQuestion,ExitPlanMode".into()
    } else {
        "AskUserQuestion".into()
    });
    if mode != ClaudeMode::BypassPermissions {
        args.push("--permission-prompt-tool".into());
        args.push("stdio".into());
    }
    args.push("--permission-mode".into());
    args.push(mode.as_str().into());
    args.push("--input-format".into());
    args.push("stream-json".into());
    args
}

fn unattended(mode: ClaudeMode, request: &str, decision: &str, reason: &str) -> String {
    format!(
        "Claude Code unattended decision (mode: {}; request: {request}; decision: {decision}): {reason}",
        mode.as_str()
    )
}

fn control_response(out: &Outbox, request_id: &Value, reply: Result<Value, String>) {
    let frame = match reply {
        Ok(response) => json!({"type": "control_response", "response": {
            "subtype": "success", "request_id": request_id, "response": response}}),
        Err(error) => json!({"type": "control_response", "response": {
            "subtype": "error", "request_id": request_id, "error": error}}),
    };
    out.send(frame.to_string());
}

fn request_id() -> String {
    format!("req_{}", uuid::Uuid::new_v4().simple())
}

/// The result category of a `result` message: `Ok(answer)` or `Err(category)`.
pub fn result_outcome(message: &Value) -> Result<String, String> {
    match message.get("subtype").and_then(Value::as_str) {
        Some("success") => {
            let text = message
                .get("result")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if message.get("is_error") == Some(&Value::Bool(true)) || text.trim().is_empty() {
                Err("invalid-success".into())
            } else {
                Ok(text.to_string())
            }
        }
        Some(
            s @ ("error_during_execution"
            | "error_max_turns"
            | "error_max_budget_usd"
            | "error_max_structured_output_retries"),
        ) => Err(s.to_string()),
        _ => Err("unknown".into()),
    }
}

/// Answers a control request of the child: tool permissions are denied (nobody is there to
/// ask), anything else is unsupported. Returns the note to add to a failure's diagnosis.
fn answer_control_request(out: &Outbox, msg: &Value, mode: ClaudeMode) -> Option<String> {
    let id = msg.get("request_id").cloned().unwrap_or(Value::Null);
    let subtype = msg
        .pointer("/request/subtype")
        .and_then(Value::as_str)
        .unwrap_or("");
    if subtype != "can_use_tool" || mode == ClaudeMode::BypassPermissions {
        control_response(
            out,
            &id,
            Err(format!("Unsupported control request subtype: {subtype}")),
        );
        return None;
    }
    control_response(
        out,
        &id,
        Ok(json!({
            "behavior": "deny",
            "message": "This unattended Claude Code subagent cannot request human approval."
        })),
    );
    Some(unattended(
        mode,
        "tool permission",
        "denied",
        "the subagent runs unattended and cannot ask a person to approve",
    ))
}

/// Starts one Claude Code child (published as soon as the process runs).
pub async fn start(
    spec: ClaudeSpec,
    prompt: Vec<ContentBlock>,
    cancel: CancellationToken,
) -> Result<SubagentRun, BoxError> {
    let task = text_task(PREFIX, &prompt)?.concat();
    if cancel.is_cancelled() {
        return Err(format!("{PREFIX}: request was aborted before SDK startup").into());
    }
    let mut args = spec.args.clone();
    args.extend(protocol_args(spec.mode));
    let launch = Launch {
        program: spec.command.clone(),
        args,
        cwd: spec.cwd.clone(),
        env: spec.env.clone(),
        stderr: StderrMode::Inherit,
        grace: spec.dispose_grace,
    };
    let spawned = spawn(&launch).map_err(|e| {
        format!(
            "{PREFIX}: {}: cannot start `{}`: {e}",
            failure_line(PRODUCT, "query-start", "unknown", ""),
            spec.command
        )
    })?;
    let proc = spawned.proc.clone();
    let mut lines = spawned.lines;
    let mode = spec.mode;
    let grace = spec.dispose_grace;
    let unattended_line: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));

    let attempt = {
        let proc = proc.clone();
        let out = proc.out.clone();
        let noted = unattended_line.clone();
        Box::pin(async move {
            let note = |line: String| *noted.lock().unwrap_or_else(|p| p.into_inner()) = Some(line);
            let failed = |stage: &str, category: &str, extra: String| {
                let mut d = failure_line(PRODUCT, stage, category, &extra);
                if let Some(u) = noted.lock().unwrap_or_else(|p| p.into_inner()).clone() {
                    d.push('\n');
                    d.push_str(&u);
                }
                let mut r = SubagentResult::new(Vec::new(), StopReason::Error);
                r.diagnostic = Some(d);
                r
            };
            let init_id = request_id();
            out.send(
                json!({"type": "control_request", "request_id": init_id,
                       "request": {"subtype": "initialize", "hooks": null}})
                .to_string(),
            );
            let mut initialized = false;
            while let Some(line) = lines.recv().await {
                let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                match msg.get("type").and_then(Value::as_str) {
                    Some("control_response") => {
                        let response = msg.get("response").cloned().unwrap_or(Value::Null);
                        if !initialized
                            && response.get("request_id").and_then(Value::as_str) == Some(&init_id)
                        {
                            if response.get("subtype").and_then(Value::as_str) == Some("error") {
                                out.close();
                                return failed("query-run", "unknown", String::new());
                            }
                            initialized = true;
                            out.send(
                                json!({"type": "user", "session_id": "",
                                       "message": {"role": "user", "content": task},
                                       "parent_tool_use_id": null})
                                .to_string(),
                            );
                        }
                    }
                    Some("control_request") => {
                        if let Some(line) = answer_control_request(&out, &msg, mode) {
                            note(line);
                        }
                    }
                    Some("system")
                        if msg.get("subtype").and_then(Value::as_str)
                            == Some("permission_denied") =>
                    {
                        note(unattended(
                            mode,
                            "tool permission",
                            "denied",
                            "Claude Code refused the request without asking anyone",
                        ));
                    }
                    Some("result") => {
                        // End of the one-shot task: end input, as the SDK does after a result.
                        out.close();
                        return match result_outcome(&msg) {
                            Ok(answer) => SubagentResult::new(
                                vec![ContentBlock::text(answer)],
                                StopReason::Completed,
                            ),
                            Err(category) => failed("query-run", &category, String::new()),
                        };
                    }
                    _ => {}
                }
            }
            // Output ended without a result.
            let exit = match proc.exit_now() {
                Some(x) => Some(x),
                None => proc.exited_within(grace).await,
            };
            match exit {
                Some(x) if x.code != Some(0) => failed("process", "process-exit", x.fields()),
                _ => failed("query-run", "missing-result", String::new()),
            }
        })
    };
    let on_cancel: Arc<dyn Fn() + Send + Sync> = {
        let out = proc.out.clone();
        Arc::new(move || {
            out.send(
                json!({"type": "control_request", "request_id": request_id(),
                       "request": {"subtype": "interrupt"}})
                .to_string(),
            );
        })
    };
    Ok(publish(
        Publish {
            parent_cancel: cancel,
            local: CancellationToken::new(),
            on_cancel,
            partial: Arc::new(Vec::new),
            timeout: spec
                .timeout
                .map(|d| (d, failure_line(PRODUCT, "query-run", "timeout", ""))),
            teardown: Box::new(move || Box::pin(async move { proc.teardown(None, grace).await })),
        },
        attempt,
    ))
}
