//! `@deepseek-ai/dsh-subagent-dsh-sdk`: another dsh runtime (`dsh --profile sdk`, the SDK
//! JSON-RPC protocol) as a one-shot child: `initialize {cwd, provider, model, maxTokens?}`
//! (published now), `session/prompt` on a fresh `session-<hex>` id, the session's
//! `session.event` notifications folded into the output until its `session.status idle`
//! after a `turn/end`; the stop reason is that turn's. Disposal asks for `shutdown` (bounded)
//! before the EOF → SIGTERM → SIGKILL ladder.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_kernel::BoxError;
use dsh_llm::ContentBlock;
use dsh_subagent::{StopReason, SubagentResult, SubagentRun};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::common::{Publish, failure_line, publish};
use crate::process::{Launch, StderrMode, spawn};
use crate::rpc::{Inbound, Rpc};

const PREFIX: &str = "subagent-dsh-sdk";

/// A resolved SDK-runtime child.
#[derive(Clone, Debug)]
pub struct SdkSpec {
    pub command: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub provider: String,
    pub model: String,
    pub max_tokens: Option<u64>,
    pub shutdown_timeout: Duration,
    pub dispose_eof_grace: Duration,
    pub dispose_grace: Duration,
    pub timeout: Option<Duration>,
}

/// A `turn/end` reason kind as a delegation stop reason.
pub fn sdk_stop_reason(kind: Option<&str>) -> StopReason {
    match kind {
        Some("completed") => StopReason::Completed,
        Some("max-tokens") => StopReason::MaxTokens,
        Some("aborted") => StopReason::Aborted,
        _ => StopReason::Error,
    }
}

#[derive(Default)]
struct Fold {
    message: Option<Vec<ContentBlock>>,
    partial: String,
    turn_end: Option<Option<String>>,
    idle: Option<oneshot::Sender<()>>,
}

impl Fold {
    fn push(&mut self, event: &Value) {
        match event.get("type").and_then(Value::as_str) {
            Some("assistant/message") => {
                let content: Vec<ContentBlock> = event
                    .pointer("/data/message/content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|b| ContentBlock::from_json(b).ok())
                    .collect();
                if !content.is_empty() {
                    self.message = Some(content);
                }
            }
            // A 0.1 runtime streams each chunk.
            Some("assistant/chunk") => {
                if let Some(chunk) = event.pointer("/data/chunk") {
                    self.push_chunk(chunk);
                }
            }
            // A 0.2 runtime streams the chunks of an unfinished reply as one attempt row.
            Some("assistant/attempt") => {
                let stream = event.pointer("/data/stream").and_then(Value::as_array);
                for item in stream.into_iter().flatten() {
                    match item.get("type").and_then(Value::as_str) {
                        Some("chunk") => {
                            if let Some(chunk) = item.get("chunk") {
                                self.push_chunk(chunk);
                            }
                        }
                        Some("text-chunks") => {
                            let texts = item.get("texts").and_then(Value::as_array);
                            for t in texts.into_iter().flatten().filter_map(Value::as_str) {
                                self.partial.push_str(t);
                            }
                        }
                        _ => {}
                    }
                }
            }
            Some("turn/end") => {
                self.turn_end = Some(
                    event
                        .pointer("/data/reason/kind")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                );
            }
            _ => {}
        }
    }

    fn push_chunk(&mut self, chunk: &Value) {
        if chunk.get("type").and_then(Value::as_str) == Some("text-delta")
            && let Some(t) = chunk.get("text").and_then(Value::as_str)
        {
            self.partial.push_str(t);
        }
    }

    fn output(&self) -> Vec<ContentBlock> {
        self.message.clone().unwrap_or_else(|| {
            if self.partial.is_empty() {
                Vec::new()
            } else {
                vec![ContentBlock::text(self.partial.clone())]
            }
        })
    }
}

/// Starts one SDK-runtime child and publishes it once it is initialized.
pub async fn start(
    spec: SdkSpec,
    prompt: Vec<ContentBlock>,
    cancel: CancellationToken,
) -> Result<SubagentRun, BoxError> {
    if cancel.is_cancelled() {
        return Err("subagent request was aborted before the SDK child started".into());
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
    let session_id = format!("session-{}", uuid::Uuid::new_v4().simple());
    let fold = Arc::new(Mutex::new(Fold::default()));
    let rpc = {
        let fold = fold.clone();
        let sid = session_id.clone();
        Rpc::start(spawned.lines, proc.out.clone(), move |msg| {
            if let Inbound::Notification { method, params } = msg
                && params.get("sessionId").and_then(Value::as_str) == Some(&sid)
            {
                let mut f = fold.lock().unwrap_or_else(|p| p.into_inner());
                match method {
                    "session.event" => {
                        if let Some(e) = params.get("event") {
                            f.push(e);
                        }
                    }
                    "session.status"
                        if params.get("status").and_then(Value::as_str) == Some("idle")
                            && f.turn_end.is_some() =>
                    {
                        if let Some(tx) = f.idle.take() {
                            let _ = tx.send(());
                        }
                    }
                    _ => {}
                }
            }
            None
        })
    };
    let eof = spec.dispose_eof_grace;
    let grace = spec.dispose_grace;
    let shutdown = spec.shutdown_timeout;
    let teardown = {
        let rpc = rpc.clone();
        let proc = proc.clone();
        move || -> futures::future::BoxFuture<'static, ()> {
            Box::pin(async move {
                if proc.exit_now().is_none() {
                    let _ =
                        tokio::time::timeout(shutdown, rpc.request("shutdown", json!({}))).await;
                }
                proc.teardown(Some(eof), grace).await;
            })
        }
    };

    let mut init = json!({
        "cwd": spec.cwd.display().to_string(),
        "provider": spec.provider,
        "model": spec.model,
    });
    if let Some(n) = spec.max_tokens {
        init["maxTokens"] = json!(n);
    }
    let started = tokio::select! {
        r = rpc.request("initialize", init) => r.map(|_| ()),
        _ = cancel.cancelled() => Err("cancelled".into()),
    };
    if let Err(e) = started {
        teardown().await;
        if cancel.is_cancelled() {
            return Err("subagent request was aborted before the SDK child started".into());
        }
        let exit = proc.exit_now().map(|x| x.fields()).unwrap_or_default();
        return Err(format!("{PREFIX}: the SDK child failed to initialize ({e}{exit})").into());
    }

    let partial: Arc<dyn Fn() -> Vec<ContentBlock> + Send + Sync> = {
        let fold = fold.clone();
        Arc::new(move || fold.lock().unwrap_or_else(|p| p.into_inner()).output())
    };
    let blocks: Vec<Value> = prompt
        .iter()
        .map(|b| serde_json::to_value(b).unwrap_or(Value::Null))
        .collect();
    let attempt = {
        let rpc = rpc.clone();
        let fold = fold.clone();
        let partial = partial.clone();
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            fold.lock().unwrap_or_else(|p| p.into_inner()).idle = Some(tx);
            let closed = rpc.closed();
            if let Err(e) = rpc
                .request(
                    "session/prompt",
                    json!({"sessionId": session_id, "contentBlocks": blocks}),
                )
                .await
            {
                tracing::warn!("{PREFIX}: the SDK child refused the prompt: {e}");
                return SubagentResult::new(partial(), StopReason::Error);
            }
            tokio::select! {
                r = rx => if r.is_err() { return SubagentResult::new(partial(), StopReason::Error) },
                _ = closed.cancelled() => {
                    tracing::warn!("{PREFIX}: the SDK child's output ended before its turn did");
                    return SubagentResult::new(partial(), StopReason::Error);
                }
            }
            let kind = fold
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .turn_end
                .clone()
                .flatten();
            SubagentResult::new(partial(), sdk_stop_reason(kind.as_deref()))
        })
    };
    Ok(publish(
        Publish {
            parent_cancel: cancel,
            local: CancellationToken::new(),
            // The runtime has no per-turn cancel request; disposal's `shutdown` cancels.
            on_cancel: Arc::new(|| {}),
            partial,
            timeout: spec
                .timeout
                .map(|d| (d, failure_line("dsh SDK", "turn", "timeout", ""))),
            teardown: Box::new(teardown),
        },
        attempt,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partial(events: &[Value]) -> Vec<ContentBlock> {
        let mut fold = Fold::default();
        events.iter().for_each(|e| fold.push(e));
        fold.output()
    }

    #[test]
    fn an_unfinished_reply_is_read_from_either_runtimes_stream() {
        let v0 = [
            json!({"type": "assistant/chunk", "data": {"chunk": {"type": "text-delta", "text": "half "}}}),
            json!({"type": "assistant/chunk", "data": {"chunk": {"type": "text-delta", "text": "done"}}}),
        ];
        let v4 = [
            json!({"type": "assistant/attempt", "data": {"turn": 1, "step": 1, "stream": [
                {"type": "chunk", "time": 1, "chunk": {"type": "block-start", "index": 0, "blockType": "text"}},
                {"type": "chunk", "time": 1, "chunk": {"type": "text-delta", "text": "half "}},
                {"type": "text-chunks", "time0": 2, "index": 0, "dt": [], "texts": ["done"]},
            ]}}),
        ];
        assert_eq!(partial(&v0), vec![ContentBlock::text("half done")]);
        assert_eq!(partial(&v4), vec![ContentBlock::text("half done")]);
    }

    #[test]
    fn a_finished_message_wins_over_its_chunks() {
        let events = [
            json!({"type": "assistant/attempt", "data": {"stream": [
                {"type": "text-chunks", "texts": ["draft"]}]}}),
            json!({"type": "assistant/message", "data": {"message": {"role": "assistant",
                "content": [{"type": "text", "text": "final"}]}}}),
        ];
        assert_eq!(partial(&events), vec![ContentBlock::text("final")]);
    }
}
