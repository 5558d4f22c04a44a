//! `@deepseek-ai/dsh-subagent-codex`: OpenAI Codex as a one-shot child over
//! `codex app-server --stdio` (JSON-RPC 2.0, one object per line): `initialize`,
//! `initialized`, an ephemeral `thread/start` with the permission mode's parameters
//! (published now), `turn/start` with the task's texts, `agentMessage` items collected until
//! `turn/completed`. The app-server's approval and input requests are answered unattended
//! (never granted); a cancel sends `turn/interrupt`. Failures end `error` with a product
//! diagnostic naming the stage and category.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_kernel::BoxError;
use dsh_llm::ContentBlock;
use dsh_subagent::{StopReason, SubagentResult, SubagentRun};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::common::{Publish, failure_line, publish, text_task};
use crate::process::{Exit, Launch, StderrMode, spawn};
use crate::rpc::{Inbound, Reply, Rpc};

const PREFIX: &str = "subagent-codex";
const PRODUCT: &str = "Codex";

/// What Codex may do without asking (`permissionMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodexMode {
    Never,
    ApproveForMe,
    Bypass,
}

impl CodexMode {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "never" => Some(Self::Never),
            "approve-for-me" => Some(Self::ApproveForMe),
            "dangerously-bypass-approvals-and-sandbox" => Some(Self::Bypass),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::ApproveForMe => "approve-for-me",
            Self::Bypass => "dangerously-bypass-approvals-and-sandbox",
        }
    }

    fn thread_params(self, cwd: &str) -> Value {
        match self {
            Self::Never => json!({"cwd": cwd, "ephemeral": true, "approvalPolicy": "never"}),
            Self::ApproveForMe => json!({
                "cwd": cwd, "ephemeral": true, "approvalPolicy": "on-request",
                "approvalsReviewer": "auto_review", "sandbox": "workspace-write"
            }),
            Self::Bypass => json!({
                "cwd": cwd, "ephemeral": true, "approvalPolicy": "never",
                "sandbox": "danger-full-access"
            }),
        }
    }
}

/// A resolved Codex child.
#[derive(Clone, Debug)]
pub struct CodexSpec {
    /// `codex` unless configured.
    pub command: String,
    /// `app-server --stdio` unless configured.
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub mode: CodexMode,
    pub dispose_grace: Duration,
    pub timeout: Option<Duration>,
}

#[derive(Default)]
struct State {
    thread_id: Option<String>,
    turn_id: Option<String>,
    /// Notifications naming a turn before `turn/start` answered.
    early: Vec<(String, Value)>,
    final_answer: Option<String>,
    unphased: Option<String>,
    unattended: Option<String>,
    terminal: Option<oneshot::Sender<Value>>,
    fatal: Option<String>,
    /// The latest `error` notification of the turn (`{message, codexErrorInfo,
    /// additionalDetails}`): what a failure says the child itself reported.
    last_error: Option<Value>,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

fn unattended(mode: CodexMode, request: &str, decision: &str, reason: &str) -> String {
    format!(
        "Codex unattended decision (mode: {}; request: {request}; decision: {decision}): {reason}",
        mode.as_str()
    )
}

/// Longest child message quoted in a diagnostic.
const MAX_CHILD_MESSAGE_CHARS: usize = 400;

/// An error's `message` with its `additionalDetails`, on one line, bounded.
fn child_message(error: &Value) -> Option<String> {
    let message = error.get("message").and_then(Value::as_str)?.trim();
    let mut text = match error.get("additionalDetails").and_then(Value::as_str) {
        Some(d) if !d.trim().is_empty() => format!("{message} ({})", d.trim()),
        _ => message.to_string(),
    };
    text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() > MAX_CHILD_MESSAGE_CHARS {
        text = text
            .chars()
            .take(MAX_CHILD_MESSAGE_CHARS)
            .collect::<String>()
            + "…";
    }
    (!text.is_empty()).then_some(text)
}

/// Whether a child's message says a credential is missing (Codex: "Missing environment
/// variable: `OPENAI_API_KEY`").
fn names_missing_credential(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("missing environment variable")
        || (m.contains("api key")
            && (m.contains("missing") || m.contains("not set") || m.contains("no ")))
}

/// The failure category of a terminal turn and its HTTP status, if any.
pub fn failure_category(turn: &Value) -> (String, Option<u64>) {
    if turn.get("status").and_then(Value::as_str) != Some("failed") {
        return ("unknown".into(), None);
    }
    let info = turn.pointer("/error/codexErrorInfo");
    match info {
        Some(Value::String(s)) => match s.as_str() {
            "contextWindowExceeded"
            | "sessionBudgetExceeded"
            | "usageLimitExceeded"
            | "serverOverloaded"
            | "cyberPolicy"
            | "internalServerError"
            | "unauthorized"
            | "badRequest"
            | "threadRollbackFailed"
            | "sandboxError"
            | "other" => (s.clone(), None),
            _ => ("unknown".into(), None),
        },
        Some(Value::Object(o)) if o.len() == 1 => {
            let Some((k, detail)) = o.iter().next() else {
                return ("unknown".into(), None);
            };
            if !detail.is_object() {
                return ("unknown".into(), None);
            }
            match k.as_str() {
                "httpConnectionFailed"
                | "responseStreamConnectionFailed"
                | "responseStreamDisconnected"
                | "responseTooManyFailedAttempts" => (
                    k.clone(),
                    detail
                        .get("httpStatusCode")
                        .and_then(Value::as_u64)
                        .filter(|n| *n <= 65_535),
                ),
                "activeTurnNotSteerable" => (k.clone(), None),
                _ => ("unknown".into(), None),
            }
        }
        _ => ("unknown".into(), None),
    }
}

fn decision(params: &Value) -> Result<&'static str, String> {
    match params.get("availableDecisions") {
        None | Some(Value::Null) => Ok("decline"),
        Some(Value::Array(a)) if a.iter().any(|d| d == "cancel") => Ok("cancel"),
        Some(Value::Array(a)) if a.iter().any(|d| d == "decline") => Ok("decline"),
        _ => Err(format!(
            "{PREFIX}: app-server offered no unattended approval decision"
        )),
    }
}

fn on_request(state: &Shared, mode: CodexMode, method: &str, params: &Value) -> Reply {
    let mut s = lock(state);
    if params.get("threadId").and_then(Value::as_str) != s.thread_id.as_deref() {
        let msg = format!("{PREFIX}: app-server request referenced another thread");
        s.fatal = Some(msg.clone());
        return Err((-32603, msg));
    }
    let grant = "the provider does not grant interactive approval";
    let (reply, line) = match method {
        "item/commandExecution/requestApproval" | "item/fileChange/requestApproval" => {
            let d = match decision(params) {
                Ok(d) => d,
                Err(e) => {
                    s.fatal = Some(e.clone());
                    return Err((-32603, e));
                }
            };
            let what = if method.contains("command") {
                "command approval"
            } else {
                "file approval"
            };
            let decided = if d == "cancel" {
                "cancelled"
            } else {
                "declined"
            };
            (
                json!({"decision": d}),
                unattended(mode, what, decided, grant),
            )
        }
        "item/permissions/requestApproval" => (
            json!({"permissions": {}, "scope": "turn"}),
            unattended(
                mode,
                "permission grant",
                "denied",
                "the provider grants no additional turn permissions",
            ),
        ),
        "item/tool/requestUserInput" => (
            json!({"answers": {}}),
            unattended(
                mode,
                "user input",
                "empty response",
                "the provider does not collect interactive answers",
            ),
        ),
        "mcpServer/elicitation/request" => (
            json!({"action": "decline", "content": null, "_meta": null}),
            unattended(
                mode,
                "MCP elicitation",
                "declined",
                "the provider does not collect interactive MCP input",
            ),
        ),
        other => {
            let msg = format!("{PREFIX}: unsupported app-server request \"{other}\"");
            s.fatal = Some(msg.clone());
            return Err((-32601, msg));
        }
    };
    s.unattended = Some(line);
    Ok(reply)
}

fn on_item(s: &mut State, mode: CodexMode, item: &Value) {
    let status = item.get("status").and_then(Value::as_str);
    match item.get("type").and_then(Value::as_str) {
        Some("commandExecution") if status == Some("declined") => {
            s.unattended = Some(unattended(
                mode,
                "command execution",
                "declined",
                "the selected permission mode made Codex decline the command",
            ));
        }
        Some("fileChange") if status == Some("declined") => {
            s.unattended = Some(unattended(
                mode,
                "file change",
                "declined",
                "the selected permission mode made Codex decline the file change",
            ));
        }
        Some("agentMessage") => {
            let text = item
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            match item.get("phase") {
                Some(Value::String(p)) if p == "final_answer" => s.final_answer = Some(text),
                None | Some(Value::Null) => s.unphased = Some(text),
                _ => {}
            }
        }
        _ => {}
    }
}

fn on_note(s: &mut State, mode: CodexMode, method: &str, params: &Value) {
    if params.get("threadId").and_then(Value::as_str) != s.thread_id.as_deref() {
        return;
    }
    let turn = match method {
        "item/completed" | "error" => params.get("turnId").and_then(Value::as_str),
        "turn/completed" => params.pointer("/turn/id").and_then(Value::as_str),
        _ => return,
    };
    let Some(turn) = turn else { return };
    match &s.turn_id {
        None => {
            if s.terminal.is_some() {
                s.early.push((method.to_string(), params.clone()));
            }
        }
        Some(id) if id == turn => {
            if method == "item/completed" {
                if let Some(item) = params.get("item") {
                    on_item(s, mode, item);
                }
            } else if method == "error" {
                let error = params.get("error").cloned().unwrap_or(Value::Null);
                s.last_error = Some(error.clone());
                // Codex has used up its reconnects and now waits for the network to come
                // back, without end: the turn has failed for the parent.
                let waiting = error
                    .get("message")
                    .and_then(Value::as_str)
                    .is_some_and(|m| m.contains("waiting for network"));
                if waiting && let Some(tx) = s.terminal.take() {
                    let _ = tx.send(json!({"status": "failed", "error": error}));
                }
            } else if let Some(tx) = s.terminal.take() {
                let _ = tx.send(params.get("turn").cloned().unwrap_or(Value::Null));
            }
        }
        Some(_) => {}
    }
}

const STDERR_SIGNATURES: [(&str, &str, &str, &str); 2] = [
    (
        "approval policy is Never; reject command",
        "command execution",
        "denied",
        "Codex turned down an escalation, since under the selected policy it never asks for approval",
    ),
    (
        "recorded sandbox violation:",
        "sandbox execution",
        "failed",
        "Codex reported a sandbox violation",
    ),
];

/// Starts one Codex child and publishes it once its ephemeral thread exists.
pub async fn start(
    spec: CodexSpec,
    prompt: Vec<ContentBlock>,
    cancel: CancellationToken,
) -> Result<SubagentRun, BoxError> {
    let texts = text_task(PREFIX, &prompt)?;
    if cancel.is_cancelled() {
        return Err(format!("{PREFIX}: request was aborted before app-server startup").into());
    }
    let launch = Launch {
        program: spec.command.clone(),
        args: spec.args.clone(),
        cwd: spec.cwd.clone(),
        env: spec.env.clone(),
        stderr: StderrMode::Piped,
        grace: spec.dispose_grace,
    };
    let spawned = spawn(&launch).map_err(|e| {
        format!(
            "{PREFIX}: {}: cannot start `{}`: {e}",
            failure_line(PRODUCT, "initialize", "unknown", ""),
            spec.command
        )
    })?;
    let proc = spawned.proc.clone();
    let mode = spec.mode;
    let state: Shared = Arc::new(Mutex::new(State::default()));
    let fatal = CancellationToken::new();
    let rpc = {
        let state = state.clone();
        let fatal = fatal.clone();
        Rpc::start(spawned.lines, proc.out.clone(), move |msg| match msg {
            Inbound::Request { method, params } => {
                let reply = on_request(&state, mode, method, params);
                if lock(&state).fatal.is_some() {
                    fatal.cancel();
                }
                Some(reply)
            }
            Inbound::Notification { method, params } => {
                on_note(&mut lock(&state), mode, method, params);
                None
            }
        })
    };
    if let Some(stderr) = spawned.stderr {
        forward_stderr(stderr, state.clone(), mode);
    }
    let grace = spec.dispose_grace;
    let cwd = spec.cwd.display().to_string();

    let mut stage = "initialize";
    let startup = async {
        rpc.request(
            "initialize",
            json!({
                "clientInfo": {"name": "deepseek-harness", "title": "DeepSeek Harness", "version": "0.0.1"},
                "capabilities": {"experimentalApi": false, "requestAttestation": false}
            }),
        )
        .await?;
        rpc.notify("initialized", None);
        stage = "thread-start";
        let r = rpc
            .request("thread/start", mode.thread_params(&cwd))
            .await?;
        let id = r
            .pointer("/thread/id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                format!("{PREFIX}: app-server returned invalid thread/start thread id")
            })?;
        if r.pointer("/thread/ephemeral") != Some(&Value::Bool(true)) {
            return Err(format!(
                "{PREFIX}: app-server did not create an ephemeral thread"
            ));
        }
        lock(&state).thread_id = Some(id.to_string());
        Ok::<(), String>(())
    };
    let started = tokio::select! {
        r = startup => r,
        _ = cancel.cancelled() => Err("cancelled".into()),
        _ = fatal.cancelled() => Err(lock(&state).fatal.clone().unwrap_or_default()),
    };
    if let Err(e) = started {
        proc.teardown(None, grace).await;
        if cancel.is_cancelled() {
            return Err(format!("{PREFIX}: request was aborted before run publication").into());
        }
        let exit = proc.exit_now().map(|x| x.fields()).unwrap_or_default();
        return Err(format!(
            "{PREFIX}: {}: {e}",
            failure_line(PRODUCT, stage, "unknown", &exit)
        )
        .into());
    }

    let partial: Arc<dyn Fn() -> Vec<ContentBlock> + Send + Sync> = {
        let state = state.clone();
        Arc::new(move || {
            let s = lock(&state);
            match s.final_answer.as_ref().or(s.unphased.as_ref()) {
                Some(t) if !t.trim().is_empty() => vec![ContentBlock::text(t.clone())],
                _ => Vec::new(),
            }
        })
    };
    let attempt = Box::pin(run_turn(TurnRun {
        rpc: rpc.clone(),
        state: state.clone(),
        proc: proc.clone(),
        partial: partial.clone(),
        fatal,
        texts,
        mode,
        grace,
    }));
    let on_cancel: Arc<dyn Fn() + Send + Sync> = {
        let rpc = rpc.clone();
        let state = state.clone();
        Arc::new(move || {
            let s = lock(&state);
            if let (Some(thread), Some(turn)) = (s.thread_id.clone(), s.turn_id.clone()) {
                rpc.request_detached(
                    "turn/interrupt",
                    json!({"threadId": thread, "turnId": turn}),
                );
            }
        })
    };
    Ok(publish(
        Publish {
            parent_cancel: cancel,
            local: CancellationToken::new(),
            on_cancel,
            partial,
            timeout: spec
                .timeout
                .map(|d| (d, failure_line(PRODUCT, "turn", "timeout", ""))),
            teardown: Box::new(move || Box::pin(async move { proc.teardown(None, grace).await })),
        },
        attempt,
    ))
}

/// What one turn of a started Codex child needs.
struct TurnRun {
    rpc: Arc<Rpc>,
    state: Shared,
    proc: Arc<crate::process::Proc>,
    partial: Arc<dyn Fn() -> Vec<ContentBlock> + Send + Sync>,
    fatal: CancellationToken,
    texts: Vec<String>,
    mode: CodexMode,
    grace: Duration,
}

/// Starts the turn on the child's thread and waits for its end: the answer, or a failure
/// that says at which stage and why.
async fn run_turn(run: TurnRun) -> SubagentResult {
    let TurnRun {
        rpc,
        state,
        proc,
        partial,
        fatal,
        texts,
        mode,
        grace,
    } = run;
    let diagnose = |stage: &str, category: &str, extra: String| {
        let mut d = failure_line(PRODUCT, stage, category, &extra);
        if let Some(u) = lock(&state).unattended.clone() {
            d.push('\n');
            d.push_str(&u);
        }
        d
    };
    let failed = |diag: String| {
        let mut r = SubagentResult::new(partial(), StopReason::Error);
        r.diagnostic = Some(diag);
        r
    };
    let (tx, rx) = oneshot::channel();
    lock(&state).terminal = Some(tx);
    let thread_id = lock(&state).thread_id.clone().unwrap_or_default();
    let input: Vec<Value> = texts
        .iter()
        .map(|t| json!({"type": "text", "text": t, "text_elements": []}))
        .collect();
    let closed = rpc.closed();
    let turn = tokio::select! {
        r = rpc.request("turn/start", json!({"threadId": thread_id, "input": input})) => r,
        _ = fatal.cancelled() => Err(lock(&state).fatal.clone().unwrap_or_default()),
    };
    let turn_id = match turn
        .as_ref()
        .ok()
        .and_then(|r| r.pointer("/turn/id"))
        .and_then(Value::as_str)
    {
        Some(id) => id.to_string(),
        None => {
            let exit = process_fields(&proc, grace).await;
            let (stage, category) = if exit.is_some() {
                ("process", "process-exit")
            } else {
                ("turn-start", "unknown")
            };
            return failed(diagnose(
                stage,
                category,
                exit.map(|x| x.fields()).unwrap_or_default(),
            ));
        }
    };
    {
        let mut s = lock(&state);
        s.turn_id = Some(turn_id);
        let early = std::mem::take(&mut s.early);
        for (method, params) in early {
            on_note(&mut s, mode, &method, &params);
        }
    }
    let terminal = tokio::select! {
        t = rx => t.ok(),
        _ = closed.cancelled() => None,
        _ = fatal.cancelled() => None,
    };
    let Some(turn) = terminal else {
        if fatal.is_cancelled() {
            return failed(diagnose("turn", "unknown", String::new()));
        }
        let exit = process_fields(&proc, grace).await;
        return match exit {
            Some(x) => failed(diagnose("process", "process-exit", x.fields())),
            None => failed(diagnose("turn", "unknown", String::new())),
        };
    };
    match turn.get("status").and_then(Value::as_str) {
        Some("completed") => {
            let output = partial();
            if output.is_empty() {
                failed(diagnose("turn", "unknown", String::new()))
            } else {
                SubagentResult::new(output, StopReason::Completed)
            }
        }
        _ => {
            let (mut category, status) = failure_category(&turn);
            // The child's own words: the turn's error, else the last one it reported.
            let error = turn
                .get("error")
                .filter(|e| e.get("message").is_some())
                .cloned()
                .or_else(|| lock(&state).last_error.clone());
            let said = error.as_ref().and_then(child_message);
            if matches!(category.as_str(), "other" | "unknown")
                && said.as_deref().is_some_and(names_missing_credential)
            {
                category = "missingCredential".into();
            }
            if category == "sandboxError" {
                lock(&state).unattended = Some(unattended(
                    mode,
                    "sandbox execution",
                    "failed",
                    "Codex reported a sandbox failure",
                ));
            }
            let mut extra = status
                .map(|s| format!("; HTTP status: {s}"))
                .unwrap_or_default();
            if let Some(said) = said {
                extra.push_str(&format!("; message: {said}"));
            }
            let mut r = failed(diagnose("turn", &category, extra));
            if category == "contextWindowExceeded" {
                r.stop_reason = StopReason::MaxTokens;
            }
            r
        }
    }
}

/// Copies the child's stderr to ours, noting the lines that say it refused to ask for an
/// approval it needed.
fn forward_stderr(stderr: tokio::process::ChildStderr, state: Shared, mode: CodexMode) {
    tokio::spawn(async move {
        use std::io::Write as _;
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = writeln!(std::io::stderr(), "{line}");
            if let Some((_, request, decision, reason)) = STDERR_SIGNATURES
                .iter()
                .find(|(sig, ..)| line.contains(sig))
            {
                lock(&state).unattended = Some(unattended(mode, request, decision, reason));
            }
        }
    });
}

/// The child's exit when it ended (waiting up to `grace` for a closing stream's process).
async fn process_fields(proc: &crate::process::Proc, grace: Duration) -> Option<Exit> {
    match proc.exit_now() {
        Some(x) => Some(x),
        None => proc.exited_within(grace).await,
    }
}
