//! `@deepseek-ai/dsh-subagent-acp`: any Agent Client Protocol agent as a one-shot child.
//! We are its client: `initialize` (no client capabilities), `session/new {cwd,
//! mcpServers: []}` (the run is published only now), `session/prompt` with the task's text
//! blocks; `agent_message_chunk` texts accumulate as the output; permission requests are
//! answered by the configured policy; a cancel sends `session/cancel`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_kernel::BoxError;
use dsh_llm::ContentBlock;
use dsh_subagent::{StopReason, SubagentResult, SubagentRun};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::common::{Publish, failure_line, publish};
use crate::process::{Launch, StderrMode, spawn};
use crate::rpc::{Inbound, Rpc};

const PREFIX: &str = "subagent-acp";

/// How the child's permission prompts are answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permission {
    /// The first `allow_once` / `allow_always` option.
    Allow,
    /// Always `cancelled`.
    Reject,
}

/// A resolved ACP child.
#[derive(Clone, Debug)]
pub struct AcpSpec {
    pub command: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub permission: Permission,
    pub dispose_eof_grace: Duration,
    pub dispose_grace: Duration,
    pub timeout: Option<Duration>,
}

/// An ACP stop reason as a delegation stop reason (`max_turn_requests` and anything
/// unknown are failures).
pub fn acp_stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" => StopReason::Completed,
        "max_tokens" => StopReason::MaxTokens,
        "refusal" => StopReason::Refusal,
        "cancelled" => StopReason::Aborted,
        _ => StopReason::Error,
    }
}

fn permission_answer(policy: Permission, params: &Value) -> Value {
    if policy == Permission::Allow
        && let Some(option) = params
            .get("options")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|o| {
                matches!(
                    o.get("kind").and_then(Value::as_str),
                    Some("allow_once" | "allow_always")
                )
            })
        && let Some(id) = option.get("optionId")
    {
        return json!({"outcome": {"outcome": "selected", "optionId": id}});
    }
    json!({"outcome": {"outcome": "cancelled"}})
}

/// Starts one ACP child and publishes it once its session exists.
pub async fn start(
    spec: AcpSpec,
    prompt: Vec<ContentBlock>,
    cancel: CancellationToken,
) -> Result<SubagentRun, BoxError> {
    if cancel.is_cancelled() {
        return Err("subagent request was aborted before the ACP child started".into());
    }
    let launch = Launch {
        program: spec.command.clone(),
        args: spec.args.clone(),
        cwd: spec.cwd.clone(),
        env: spec.env.clone(),
        stderr: StderrMode::Inherit,
        grace: spec.dispose_grace,
    };
    let spawned =
        spawn(&launch).map_err(|e| format!("{PREFIX}: cannot start `{}`: {e}", spec.command))?;
    let proc = spawned.proc.clone();
    let text = Arc::new(Mutex::new(String::new()));
    let policy = spec.permission;
    let rpc = {
        let text = text.clone();
        Rpc::start(spawned.lines, proc.out.clone(), move |msg| match msg {
            Inbound::Notification { method, params } => {
                if method == "session/update"
                    && let Some(update) = params.get("update")
                    && update.get("sessionUpdate").and_then(Value::as_str)
                        == Some("agent_message_chunk")
                    && update.pointer("/content/type").and_then(Value::as_str) == Some("text")
                    && let Some(t) = update.pointer("/content/text").and_then(Value::as_str)
                {
                    text.lock().unwrap_or_else(|p| p.into_inner()).push_str(t);
                }
                None
            }
            Inbound::Request { method, params } => match method {
                "session/request_permission" => Some(Ok(permission_answer(policy, params))),
                _ => None,
            },
        })
    };
    let eof = spec.dispose_eof_grace;
    let grace = spec.dispose_grace;

    // Establish the remote session before publishing; any failure reaps the process.
    let startup = async {
        rpc.request(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await?;
        let session = rpc
            .request(
                "session/new",
                json!({"cwd": spec.cwd.display().to_string(), "mcpServers": []}),
            )
            .await?;
        session
            .get("sessionId")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| "ACP child published without a session id".to_string())
    };
    let session_id = tokio::select! {
        r = startup => r,
        _ = cancel.cancelled() => Err("cancelled".into()),
    };
    let session_id = match session_id {
        Ok(id) => id,
        Err(e) => {
            proc.teardown(Some(eof), grace).await;
            if cancel.is_cancelled() {
                return Err("subagent request was aborted before the ACP child started".into());
            }
            let exit = proc.exit_now().map(|x| x.fields()).unwrap_or_default();
            return Err(
                format!("{PREFIX}: the ACP child failed to start a session ({e}{exit})").into(),
            );
        }
    };

    let blocks: Vec<Value> = prompt
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(json!({"type": "text", "text": text})),
            _ => None,
        })
        .collect();
    let partial: Arc<dyn Fn() -> Vec<ContentBlock> + Send + Sync> = {
        let text = text.clone();
        Arc::new(move || {
            let t = text.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if t.is_empty() {
                Vec::new()
            } else {
                vec![ContentBlock::text(t)]
            }
        })
    };
    let attempt = {
        let rpc = rpc.clone();
        let partial = partial.clone();
        let session_id = session_id.clone();
        Box::pin(async move {
            match rpc
                .request(
                    "session/prompt",
                    json!({"sessionId": session_id, "prompt": blocks}),
                )
                .await
            {
                Ok(r) => {
                    let reason = r.get("stopReason").and_then(Value::as_str).unwrap_or("");
                    SubagentResult::new(partial(), acp_stop_reason(reason))
                }
                Err(e) => {
                    tracing::warn!("{PREFIX}: the ACP child failed: {e}");
                    SubagentResult::new(partial(), StopReason::Error)
                }
            }
        })
    };
    let on_cancel: Arc<dyn Fn() + Send + Sync> = {
        let rpc = rpc.clone();
        Arc::new(move || rpc.notify("session/cancel", Some(json!({"sessionId": session_id}))))
    };
    Ok(publish(
        Publish {
            parent_cancel: cancel,
            local: CancellationToken::new(),
            on_cancel,
            partial,
            timeout: spec
                .timeout
                .map(|d| (d, failure_line("ACP agent", "turn", "timeout", ""))),
            teardown: Box::new(move || {
                Box::pin(async move { proc.teardown(Some(eof), grace).await })
            }),
        },
        attempt,
    ))
}
