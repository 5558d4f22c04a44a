//! `@deepseek-ai/dsh-session-checkpoint-policy`: durability barriers at the points where the
//! log must be ahead of the world.
//!
//! * `llm/stream` (waterfall): before a loop request reaches the adapter, the session is
//!   flushed through its last surface change, so every event the model is about to see is
//!   durable ("model-visible means logged", across crashes). The persistence backend starts
//!   writing a tool result or user message as soon as it is appended, so this barrier
//!   usually finds the write done. The downstream stream is not built when the flush fails; the
//!   request fails with the write error and the turn ends `error`.
//! * `tools/execute` (waterfall, top-level calls only): the recorded call is durable before
//!   the tool body can have side effects. A failed flush refuses the call; a call cancelled
//!   while the flush ran gets `ABORTED_BEFORE_DISPATCH`.
//! * `session/write-failed` (emit): a running top-level tool of that session is stopped (its
//!   process group dies with the dropped body) and returns an error result, so no work
//!   outruns a log that can no longer record it.
//!
//! Upstream also flushes at `agent/pre-step`; the `llm/stream` barrier that follows it in the
//! same step makes the same events durable, so that extra barrier is not repeated here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::{ChunkStream, LlmError, LlmStreamEvent, codes};
use dsh_session::{LiveSession, SessionDisposed, SessionStore, SessionWriteFailed, WriteFailure};
use dsh_tools::{Execute, ToolResult};
use tokio::sync::watch;

/// The plugin's package name.
pub const PLUGIN_NAME: &str = "@deepseek-ai/dsh-session-checkpoint-policy";

/// `@deepseek-ai/dsh-session-checkpoint-policy`.
pub struct CheckpointPolicyPlugin;

/// The latest write failure of each live session (keyed by session address).
#[derive(Default)]
struct Failures {
    by_session: Mutex<HashMap<usize, watch::Sender<Option<String>>>>,
}

impl Failures {
    fn channel(&self, session: &Arc<LiveSession>) -> watch::Receiver<Option<String>> {
        let mut map = self.by_session.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(Arc::as_ptr(session) as usize)
            .or_insert_with(|| watch::channel(None).0)
            .subscribe()
    }

    fn record(&self, failure: &WriteFailure) {
        let mut map = self.by_session.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(Arc::as_ptr(&failure.session) as usize)
            .or_insert_with(|| watch::channel(None).0)
            .send_replace(Some(failure.message.clone()));
    }

    fn clear(&self, session: &Arc<LiveSession>) {
        let map = self.by_session.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = map.get(&(Arc::as_ptr(session) as usize)) {
            tx.send_replace(None);
        }
    }

    fn forget(&self, session: &Arc<LiveSession>) {
        let mut map = self.by_session.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&(Arc::as_ptr(session) as usize));
    }
}

fn write_error(e: &BoxError) -> LlmError {
    LlmError::new(
        codes::UNKNOWN,
        format!("the session log could not be written, so the request was not sent: {e}"),
    )
}

/// Makes what the model is about to be shown durable before the downstream stream is
/// built: every event up to the last one that changed the surface. Bookkeeping appended
/// after it (the step's start, the request header) may still be queued: a crash then loses
/// no message the model saw, and the request is sent again on resume.
async fn checkpointed(
    session: Arc<LiveSession>,
    next: impl std::future::Future<Output = Result<ChunkStream, BoxError>>,
) -> Result<ChunkStream, BoxError> {
    tracing::trace!(target: "dsh_step", "request barrier");
    let flushed = match session.last_surface_seq() {
        Some(seq) => session.flush_through(seq).await,
        None => session.flush().await,
    };
    tracing::trace!(target: "dsh_step", "request barrier passed");
    if let Err(e) = flushed {
        return Err(Box::new(write_error(&e)));
    }
    next.await
}

impl Plugin for CheckpointPolicyPlugin {
    fn name(&self) -> &'static str {
        PLUGIN_NAME
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["session-checkpoint-policy"]
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let failures = Arc::new(Failures::default());
        let store: Weak<SessionStore> = Arc::downgrade(&ctx.require::<SessionStore>()?);

        ctx.on_waterfall::<LlmStreamEvent>(ListenOptions::GLOBAL, move |request, next| {
            let session = request
                .options
                .session_id
                .as_deref()
                .filter(|_| request.options.agent_loop_request)
                .and_then(|id| store.upgrade()?.get(id));
            Box::pin(async move {
                match session {
                    Some(session) => checkpointed(session, next.run()).await,
                    None => next.run().await,
                }
            })
        })?;

        let f = failures.clone();
        ctx.on_waterfall::<Execute>(ListenOptions::GLOBAL, move |exec, next| {
            let session = exec.session.clone().filter(|_| exec.parent.is_none());
            let failures = f.clone();
            Box::pin(async move {
                let Some(session) = session else {
                    return next.run().await;
                };
                tracing::trace!(target: "dsh_step", "tool barrier");
                let flushed = session.flush().await;
                tracing::trace!(target: "dsh_step", "tool barrier passed");
                if let Err(e) = flushed {
                    return Ok(ToolResult::failure(
                        format!(
                            "the session log could not be written, so the tool did not run: {e}"
                        ),
                        None,
                    ));
                }
                if exec.cancel.is_cancelled() {
                    return Ok(ToolResult::aborted_before_dispatch());
                }
                // Everything up to here is durable: an older failure no longer applies.
                let mut failed = failures.channel(&session);
                failures.clear(&session);
                let body = async {
                    let result = next.run().await;
                    tracing::trace!(target: "dsh_step", "tool done");
                    result
                };
                tokio::pin!(body);
                tokio::select! {
                    result = &mut body => result,
                    message = failed.wait_for(Option::is_some) => {
                        let message = message.ok().and_then(|m| m.clone()).unwrap_or_default();
                        Ok(ToolResult::failure(
                            format!("stopped: the session log could not be written ({message})"),
                            None,
                        ))
                    }
                }
            })
        })?;

        let f = failures.clone();
        ctx.on_emit::<SessionWriteFailed>(ListenOptions::GLOBAL, move |failure| {
            f.record(failure);
            Ok(())
        })?;
        let f = failures;
        ctx.on_emit::<SessionDisposed>(ListenOptions::GLOBAL, move |session| {
            f.forget(session);
            Ok(())
        })?;
        Ok(())
    }
}
