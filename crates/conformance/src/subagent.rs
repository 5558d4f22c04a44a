//! Subagent fixtures of upstream's snapshot suite: settlement marker, durability failure,
//! continuable fence, parent sandbox override and result diagnostics.

use std::sync::Arc;

use dsh_agent::SubagentEnd;
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};

use dsh_subagent::PublishedRunFaults;

/// `@deepseek-ai/dsh-test-subagent-settlement-marker`: writes an empty
/// `.dsh-snapshot-subagent-settled` in the process cwd on every `subagent/end`, so a
/// scenario can wait for a child's settlement.
pub struct SettlementMarkerPlugin;

impl Plugin for SettlementMarkerPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-test-subagent-settlement-marker"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.on_emit::<SubagentEnd>(ListenOptions::GLOBAL, |_| {
            let path = std::env::current_dir()?.join(".dsh-snapshot-subagent-settled");
            std::fs::write(path, "")?;
            Ok(())
        })?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-test-subagent-durability-failure`: with
/// `DSH_SUBAGENT_PUBLISHED_FAILURE=1`, every published child's prompt delivery fails and
/// its disposal fails after really disposing (the parent must report both).
///
/// Otherwise (the continuable mode): deliveries naming [`PLACEHOLDER_CHILD_ID`] (the id the
/// recorded transcript knows its child by) reach the first live child; the lookup of
/// [`UNKNOWN_CHILD_ID`] and every child step wait until the child's inbox accepted three
/// messages (its prompt and two follow-ups), so the recorded order holds on any runner;
/// and a child's third turn fails its durability checkpoint (`snapshot disk full`) before
/// its first step.
pub struct DurabilityFailurePlugin;

/// The child id the recorded continuable transcript uses.
pub const PLACEHOLDER_CHILD_ID: &str = "33333333-3333-4333-8333-333333333333";
/// The id the recorded transcript uses for a child that does not exist.
pub const UNKNOWN_CHILD_ID: &str = "22222222-2222-4222-8222-222222222222";
const FAILED_CHECKPOINT_TURN: u64 = 3;
const ACCEPTED_BEFORE_LOOKUP: usize = 3;

impl Plugin for DurabilityFailurePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-test-subagent-durability-failure"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        if std::env::var("DSH_SUBAGENT_PUBLISHED_FAILURE").as_deref() == Ok("1") {
            ctx.provide(Arc::new(PublishedRunFaults {
                followup: "snapshot published run failed".into(),
                dispose: "snapshot published handle disposal failed".into(),
            }))?;
            return Ok(());
        }
        let real: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
        let (accepted_tx, accepted_rx) = tokio::sync::watch::channel(0usize);
        let accepted_tx = Arc::new(accepted_tx);
        {
            let real = real.clone();
            let tx = accepted_tx.clone();
            ctx.on_emit::<dsh_agent::InboxInserted>(ListenOptions::GLOBAL, move |p| {
                let header = p.agent.session().header();
                if header.parent_session.is_none() {
                    return Ok(());
                }
                real.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(header.id);
                tx.send_modify(|n| *n += 1);
                Ok(())
            })?;
        }
        let wait_accepted = move || {
            let mut rx = accepted_rx.clone();
            async move {
                let _ = rx.wait_for(|n| *n >= ACCEPTED_BEFORE_LOOKUP).await;
            }
        };
        let lookup_wait = wait_accepted.clone();
        let remap_real = real.clone();
        ctx.provide(Arc::new(dsh_subagent::ContinuationHooks {
            remap: Box::new(move |id| {
                let real = remap_real.lock().unwrap_or_else(|e| e.into_inner()).clone();
                match real {
                    Some(r) if id == PLACEHOLDER_CHILD_ID => r,
                    _ => id.to_string(),
                }
            }),
            before_lookup: Box::new(move |id| {
                let wait = (id == UNKNOWN_CHILD_ID).then(&lookup_wait);
                Box::pin(async move {
                    if let Some(w) = wait {
                        w.await;
                    }
                })
            }),
        }))?;
        ctx.on_waterfall::<dsh_agent::PreStep>(ListenOptions::GLOBAL, move |p, next| {
            let child = p.agent.session().header().parent_session.is_some();
            let fail = child && p.turn == FAILED_CHECKPOINT_TURN && p.step == 1;
            let wait = child.then(&wait_accepted);
            Box::pin(async move {
                if fail {
                    return Err("snapshot disk full".into());
                }
                if let Some(w) = wait {
                    tokio::select! {
                        _ = w => {}
                        _ = p.cancel.cancelled() => {}
                    }
                }
                next.run().await
            })
        })?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-test-subagent-continuable-fence`: a new continuable child's first step
/// waits until its parent has gone idle (ended the turn that started it). Replay runs are
/// faster than the recordings; without the fence a child could settle while its parent is
/// still in that turn, and its notice would land in a different turn than recorded.
///
/// Likewise, the first step of a turn opened by a settlement notice is held for
/// [`NOTICE_TURN_HOLD`]: the snapshot harness waits for that turn by polling the log for an
/// *open* turn, which a replayed turn (a few milliseconds) can close before it looks.
pub struct ContinuableFencePlugin;

/// How long a settlement-notice turn stays open before its first step (replay only).
pub const NOTICE_TURN_HOLD: std::time::Duration = std::time::Duration::from_millis(250);

impl Plugin for ContinuableFencePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-test-subagent-continuable-fence"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let subagents = ctx.require::<dsh_subagent::Subagents>()?;
        let agents = ctx.require::<dsh_agent::Agents>()?;
        ctx.on_waterfall::<dsh_agent::PreStep>(ListenOptions::GLOBAL, move |p, next| {
            let parent = (p.turn == 1 && p.step == 1)
                .then(|| {
                    subagents
                        .continuations()
                        .ok()
                        .filter(|c| c.is_resident(p.agent.id()))
                        .and_then(|_| p.agent.session().header().parent_session)
                        .and_then(|id| agents.get(&id))
                })
                .flatten();
            let notice_turn = p.step == 1
                && p.messages
                    .iter()
                    .any(|m| m.source.kind() == "subagent-settled");
            Box::pin(async move {
                if let Some(parent) = parent {
                    tokio::select! {
                        _ = parent.when_idle() => {}
                        _ = p.cancel.cancelled() => {}
                    }
                }
                if notice_turn {
                    tokio::select! {
                        _ = tokio::time::sleep(NOTICE_TURN_HOLD) => {}
                        _ = p.cancel.cancelled() => {}
                    }
                }
                next.run().await
            })
        })?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-test-parent-sandbox-override`: every root session starts read-only
/// (`sandbox/mode` appended when its agent is created), the way a user switching a session's
/// access would.
pub struct ParentSandboxOverridePlugin;

impl Plugin for ParentSandboxOverridePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-test-parent-sandbox-override"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.on_emit::<dsh_agent::AgentCreated>(ListenOptions::GLOBAL, |p| {
            if p.agent.session().header().parent_session.is_none() {
                p.agent.session().append(
                    "sandbox/mode",
                    serde_json::json!({"mode": "read-only"}),
                    None,
                )?;
            }
            Ok(())
        })?;
        Ok(())
    }
}

/// The four fixed results of [`ResultDiagnosticPlugin`]: run id, diagnostic, partial output.
const DIAGNOSTIC_RESULTS: [(&str, &str, Option<&str>); 4] = [
    (
        "00000000-0000-4000-8000-0000000000d1",
        "Product subagent failure (product: Claude Code; stage: query-run; category: error_max_budget_usd)",
        Some("partial assistant text"),
    ),
    (
        "00000000-0000-4000-8000-0000000000d2",
        "Product subagent failure (product: Claude Code; stage: query-run; category: error_max_budget_usd)",
        None,
    ),
    (
        "00000000-0000-4000-8000-0000000000d3",
        "Product subagent failure (product: Codex; stage: turn; category: httpConnectionFailed; HTTP status: 503)",
        Some("partial assistant text"),
    ),
    (
        "00000000-0000-4000-8000-0000000000d4",
        "Product subagent failure (product: Codex; stage: turn; category: httpConnectionFailed; HTTP status: 503)",
        None,
    ),
];

struct DiagnosticProvider {
    starts: std::sync::atomic::AtomicUsize,
}

impl dsh_subagent::SubagentProvider for DiagnosticProvider {
    fn name(&self) -> &str {
        "snapshot-diagnostic"
    }

    fn capabilities(&self) -> dsh_subagent::Capabilities {
        dsh_subagent::Capabilities::default()
    }

    fn inherits_parent_context(&self) -> bool {
        false
    }

    fn start(
        &self,
        request: dsh_subagent::ResolvedStart,
    ) -> dsh_kernel::BoxFuture<'static, Result<dsh_subagent::SubagentRun, BoxError>> {
        let index = self
            .starts
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let aborted = request.request.cancel.is_cancelled();
        Box::pin(async move {
            if aborted {
                return Err("snapshot diagnostic provider start aborted".into());
            }
            let (id, diagnostic, output) = DIAGNOSTIC_RESULTS
                .get(index)
                .copied()
                .ok_or("snapshot diagnostic provider expected exactly four starts")?;
            let mut result = dsh_subagent::SubagentResult::new(
                output
                    .map(|t| vec![dsh_llm::ContentBlock::text(t)])
                    .unwrap_or_default(),
                dsh_subagent::StopReason::Error,
            );
            result.diagnostic = Some(diagnostic.to_string());
            Ok(dsh_subagent::SubagentRun::new(
                id.to_string(),
                None,
                Box::pin(async move { Ok(result) }),
                || Box::pin(async { Ok(()) }),
            ))
        })
    }
}

/// `@deepseek-ai/dsh-test-subagent-result-diagnostic`: provider `snapshot-diagnostic`, an
/// out-of-process-shaped provider (no local child, no capabilities) whose four starts end
/// in fixed failures with product diagnostics — two with partial output, two without.
pub struct ResultDiagnosticPlugin;

impl Plugin for ResultDiagnosticPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-test-subagent-result-diagnostic"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.require::<dsh_subagent::Subagents>()?
            .register_provider(
                ctx,
                Arc::new(DiagnosticProvider {
                    starts: std::sync::atomic::AtomicUsize::new(0),
                }),
            )?;
        Ok(())
    }
}
