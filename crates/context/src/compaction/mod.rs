//! Compaction (upstream `compaction/*`): when a session's next request nears the model's
//! context window, the older part of the surface is summarized through the model and
//! replaced by a checkpoint message; later requests are derived from the checkpoint plus
//! the retained tail.
//!
//! Everything the model sees afterwards is in the log: `compaction/start`, then
//! `compaction/summary` (the summary call's route, output and usage), the checkpoint
//! `user/message` replacing the shadowed range, and `compaction/end`. A failed summary
//! closes the bracket with `compaction/end {error}` and leaves the surface as it was; the
//! next step tries again. Resume and fork need nothing special: the surface fold replays
//! the replacement.
//!
//! * `@deepseek-ai/dsh-compaction-basic` ([`CompactionPlugin`]): the engine, its
//!   `agent/pre-step` (pressure) and `agent/request-error` (context overflow) listeners.
//! * `@deepseek-ai/dsh-compaction-tool-result-pruner` ([`ToolResultPrunerPlugin`]).
//! * `@deepseek-ai/dsh-command-compact` ([`CommandCompactPlugin`]): `/compact`.

mod command;
mod config;
mod pruner;
mod select;
mod summarize;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use dsh_agent::{AgentRef, AgentStatus, PreStep, RequestError, RequestErrorAction};
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig, error_chain};
use dsh_llm::{LlmRuntime, Message, MessageSource, codes};
use dsh_session::{LiveSession, SurfaceIntent, SurfaceOp, types};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::meter::{TokenMeter, estimate_message, surface_message};

pub use command::CommandCompactPlugin;
pub use config::{CompactionConfig, Policy, Retain};
pub use pruner::{MARKER, PrunerConfig, ToolResultPruner, ToolResultPrunerPlugin, prune_content};
pub use select::compactable_range;
pub use summarize::{INSTRUCTION, PREAMBLE, frame};

/// Who a compaction runs for.
#[derive(Clone, Debug)]
pub enum Owner {
    /// Inside the open turn `turn` (pressure, overflow).
    Turn(u64),
    /// Between turns, for the command `command_id` (`/compact`).
    Command(String),
}

/// Why a manual compaction did not happen (the `/compact` answers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManualError {
    Busy,
    Cancelled,
    Changed,
    Summary,
    Commit,
    Persistence,
}

/// A landed compaction.
#[derive(Clone, Debug, PartialEq)]
pub struct Compacted {
    pub summary_seq: u64,
    pub shadowed: usize,
    pub shadowed_tokens: u64,
}

#[derive(Debug)]
enum RegionError {
    Busy,
    Cancelled,
    Changed,
    Summary(String),
    Commit(String),
}

impl std::fmt::Display for RegionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegionError::Busy => f.write_str("compaction: compaction already in progress; the session compaction lock is already active"),
            RegionError::Cancelled => f.write_str("compaction was cancelled"),
            RegionError::Changed => f.write_str("compaction: the history being summarized changed before the summary could take its place"),
            RegionError::Summary(m) | RegionError::Commit(m) => f.write_str(m),
        }
    }
}

/// The `compaction` service (basic engine).
pub struct CompactionEngine {
    ctx: Context,
    config: CompactionConfig,
    llm: Arc<LlmRuntime>,
    meter: Arc<TokenMeter>,
    /// Sessions with a compaction in flight (the in-process lock).
    busy: Mutex<HashSet<String>>,
    /// Overflow recoveries since the last successful response, per agent.
    overflow: Mutex<HashMap<String, u32>>,
    /// Targets already warned about (missing context window).
    warned: Mutex<HashSet<String>>,
}

struct BusyGuard<'a>(&'a CompactionEngine, String);

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        self.0
            .busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.1);
    }
}

/// Why a compaction is attempted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    Pressure,
    Overflow,
}

impl CompactionEngine {
    fn lock(&self, session: &str) -> Option<BusyGuard<'_>> {
        self.busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session.to_string())
            .then(|| BusyGuard(self, session.to_string()))
    }

    /// The routed target (the latest logged request header) and its context window.
    fn target(&self, session: &LiveSession) -> Option<(String, String, Option<u64>)> {
        let (provider, model) = session.read(|s| {
            s.request_header()
                .map(|h| (h.config.provider.clone(), h.config.model.clone()))
        })?;
        let window = self
            .llm
            .model_info(&provider, &model)
            .ok()
            .and_then(|i| i.context_window);
        Some((provider, model, window))
    }

    /// Compacts `agent`'s session when its next request is over the threshold (pressure),
    /// or as far as possible (overflow). Returns whether the surface changed.
    pub async fn compact_if_needed(
        &self,
        agent: &AgentRef,
        trigger: Trigger,
        turn: u64,
        cancel: &CancellationToken,
    ) -> Result<bool, BoxError> {
        let session = agent.session().clone();
        let Some((provider, model, window)) = self.target(&session) else {
            return Ok(false);
        };
        let policy = self.config.policy_for(&provider, &model).clone();
        let generation = self.meter.measure(&session).generation;
        let pruner = self.ctx.get::<ToolResultPruner>();
        if trigger == Trigger::Overflow {
            if let Some(p) = &pruner {
                p.prune_session(&self.meter, &session)?;
            }
            let nodes = self.meter.nodes(&session);
            if let Some(end) = compactable_range(&nodes, 0) {
                let seqs: Vec<u64> = nodes[..=end].iter().map(|n| n.seq).collect();
                if let Err(e) = self
                    .compact_region(&session, &seqs, Owner::Turn(turn), &policy, cancel)
                    .await
                {
                    tracing::warn!("overflow compaction failed: {e}");
                }
            }
            return Ok(self.meter.measure(&session).generation != generation);
        }
        let Some(window) = window else {
            if self
                .warned
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(format!("{provider}/{model}"))
            {
                tracing::warn!(
                    "compaction-basic: no context capacity for {provider}/{model}; configure contextWindow on that adapter model"
                );
            }
            return Ok(false);
        };
        let threshold = (window as f64 * policy.threshold_ratio).floor() as u64;
        let retain = match policy.retain {
            Retain::Tokens(t) => t,
            Retain::Ratio(r) => (window as f64 * r).floor() as u64,
        };
        if retain >= threshold {
            return Err(format!("compaction-basic: retained tokens {retain} must be below the threshold {threshold} for {provider}/{model}").into());
        }
        if self.meter.measure(&session).total < threshold {
            return Ok(false);
        }
        if let Some(p) = &pruner {
            p.prune_session(&self.meter, &session)?;
            if self.meter.measure(&session).total < threshold {
                return Ok(true);
            }
        }
        let attempts = 1 + policy.compaction_retries;
        for _ in 0..attempts {
            let nodes = self.meter.nodes(&session);
            let Some(end) = compactable_range(&nodes, retain) else {
                break;
            };
            let seqs: Vec<u64> = nodes[..=end].iter().map(|n| n.seq).collect();
            self.compact_region(&session, &seqs, Owner::Turn(turn), &policy, cancel)
                .await
                .map_err(|e| e.to_string())?;
            let total = self.meter.measure(&session).total;
            if total < threshold {
                return Ok(true);
            }
        }
        let total = self.meter.measure(&session).total;
        Err(format!("compaction still above threshold after {attempts} compaction attempts ({total} estimated tokens >= threshold {threshold})").into())
    }

    /// `/compact`: compacts everything but the newest indivisible unit of an idle agent's
    /// session. `Ok(None)`: nothing to compact (nothing logged).
    pub async fn compact_now(
        &self,
        agent: &AgentRef,
        command_id: &str,
        cancel: &CancellationToken,
    ) -> Result<Option<Compacted>, ManualError> {
        if agent.status() != AgentStatus::Idle {
            return Err(ManualError::Busy);
        }
        let session = agent.session().clone();
        let (provider, model) = match self.target(&session) {
            Some((p, m, _)) => (p, m),
            None => (
                agent.options().provider.unwrap_or_default(),
                agent.options().model.unwrap_or_default(),
            ),
        };
        let policy = self.config.policy_for(&provider, &model).clone();
        let nodes = self.meter.nodes(&session);
        let Some(end) = compactable_range(&nodes, 0) else {
            return Ok(None);
        };
        let seqs: Vec<u64> = nodes[..=end].iter().map(|n| n.seq).collect();
        let done = self
            .compact_region(
                &session,
                &seqs,
                Owner::Command(command_id.to_string()),
                &policy,
                cancel,
            )
            .await
            .map_err(|e| match e {
                RegionError::Busy => ManualError::Busy,
                RegionError::Cancelled => ManualError::Cancelled,
                RegionError::Changed => ManualError::Changed,
                RegionError::Summary(_) => ManualError::Summary,
                RegionError::Commit(_) => ManualError::Commit,
            })?;
        if session.flush().await.is_err() {
            return Err(ManualError::Persistence);
        }
        Ok(Some(done))
    }

    /// The bracketed transaction: `compaction/start`, the summary call, then
    /// `compaction/summary` + the checkpoint replacement + `compaction/end`; on failure
    /// `compaction/end {error}` and the surface untouched.
    async fn compact_region(
        &self,
        session: &Arc<LiveSession>,
        seqs: &[u64],
        owner: Owner,
        policy: &Policy,
        cancel: &CancellationToken,
    ) -> Result<Compacted, RegionError> {
        let (Some(&first), Some(&last)) = (seqs.first(), seqs.last()) else {
            return Err(RegionError::Changed);
        };
        let id = session.id();
        let Some(_guard) = self.lock(&id) else {
            return Err(RegionError::Busy);
        };
        let compaction_id = uuid::Uuid::new_v4().to_string();
        let mut lifecycle = Map::new();
        lifecycle.insert("compactionId".into(), json!(compaction_id));
        let command_id = match &owner {
            Owner::Command(c) => {
                lifecycle.insert("sourceCommandId".into(), json!(c));
                Some(c.clone())
            }
            Owner::Turn(_) => None,
        };
        let turn = match &owner {
            Owner::Turn(t) => json!(t),
            Owner::Command(_) => Value::Null,
        };
        let mut start = lifecycle.clone();
        start.insert("turn".into(), turn.clone());
        let start_event = session
            .append("compaction/start", Value::Object(start), None)
            .map_err(|e| RegionError::Commit(e.to_string()))?;
        let result = self
            .prepare_and_commit(
                session,
                seqs,
                &lifecycle,
                &turn,
                policy,
                cancel,
                start_event.seq,
                command_id.as_deref(),
            )
            .await;
        if let Err(e) = &result {
            let mut end = lifecycle.clone();
            end.insert("turn".into(), turn);
            end.insert("error".into(), json!(e.to_string()));
            if let Err(close) = session.append("compaction/end", Value::Object(end), None) {
                tracing::warn!("compaction: cannot close the failed bracket: {close}");
            }
            tracing::warn!("compaction of {first}..{last} failed: {e}");
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    async fn prepare_and_commit(
        &self,
        session: &Arc<LiveSession>,
        seqs: &[u64],
        lifecycle: &Map<String, Value>,
        turn: &Value,
        policy: &Policy,
        cancel: &CancellationToken,
        start_seq: u64,
        command_id: Option<&str>,
    ) -> Result<Compacted, RegionError> {
        let events = session.events();
        let mut messages = Vec::new();
        let mut shadowed_tokens = 0;
        for seq in seqs {
            if let Some(m) = events.get(*seq as usize).and_then(|e| surface_message(e)) {
                shadowed_tokens += estimate_message(&m);
                messages.push(Arc::new(m));
            }
        }
        let header = session.read(|s| s.request_header().cloned());
        let (provider, model) = match (&self.config.summarization, &header) {
            (Some((p, m)), _) => (p.clone(), m.clone()),
            (None, Some(h)) => (h.config.provider.clone(), h.config.model.clone()),
            (None, None) => {
                return Err(RegionError::Summary("no route for the summary call".into()));
            }
        };
        let summary = summarize::summarize(
            &self.llm,
            summarize::SummaryRequest {
                provider,
                model,
                max_tokens: policy.max_tokens,
                system: header.as_ref().and_then(|h| h.system.clone()),
                tools: header.as_ref().and_then(|h| h.tools.clone()),
                messages,
                session_id: session.id(),
                cancel: cancel.clone(),
            },
        )
        .await
        .map_err(|e| {
            if cancel.is_cancelled() {
                RegionError::Cancelled
            } else {
                RegionError::Summary(error_chain(e.as_ref()))
            }
        })?;
        let mut extra = vec![(
            "compactionId".to_string(),
            lifecycle["compactionId"].clone(),
        )];
        if let Some(c) = command_id {
            extra.push(("sourceCommandId".into(), json!(c)));
        }
        let checkpoint = Message::user(
            frame(&summary.text),
            MessageSource::plugin("compact", extra),
        );
        let checkpoint_tokens = estimate_message(&checkpoint);
        if checkpoint_tokens >= shadowed_tokens {
            return Err(RegionError::Summary(format!(
                "summary is not smaller than the shadowed content ({checkpoint_tokens} >= {shadowed_tokens} estimated tokens)"
            )));
        }
        // The selected span must still be the same contiguous surface nodes.
        let nodes = self.meter.nodes(session);
        let still = nodes
            .iter()
            .position(|n| n.seq == seqs[0])
            .is_some_and(|i| {
                nodes.len() >= i + seqs.len()
                    && nodes[i..i + seqs.len()]
                        .iter()
                        .map(|n| n.seq)
                        .eq(seqs.iter().copied())
            });
        if !still {
            return Err(RegionError::Changed);
        }
        let (first, last) = (seqs[0], seqs[seqs.len() - 1]);
        let mut data = lifecycle.clone();
        data.insert("summary".into(), blocks(&summary.text));
        data.insert("rawOutput".into(), blocks(&summary.raw));
        data.insert("llmStreamCall".into(), json!(true));
        data.insert("shadowedRange".into(), json!({"start": first, "end": last}));
        data.insert("shadowedSeqs".into(), json!(seqs));
        data.insert("shadowedTokenCount".into(), json!(shadowed_tokens));
        data.insert("provider".into(), json!(summary.provider));
        data.insert("model".into(), json!(summary.model));
        data.insert("maxTokens".into(), json!(summary.max_tokens));
        if let Some(u) = &summary.usage {
            data.insert(
                "usage".into(),
                serde_json::to_value(u).unwrap_or(Value::Null),
            );
        }
        let mut end = lifecycle.clone();
        end.insert("turn".into(), turn.clone());
        let (summary_data, checkpoint_data, end_data) = (
            Value::Object(data),
            checkpoint.to_value(),
            Value::Object(end),
        );
        // One group: nothing lands between the metering event and its replacement.
        let appended = session
            .append_group(|summary_seq| {
                let mut sources = vec![start_seq, summary_seq];
                sources.extend_from_slice(seqs);
                vec![
                    ("compaction/summary".into(), summary_data, None),
                    (
                        types::USER_MESSAGE.into(),
                        checkpoint_data,
                        Some(SurfaceIntent {
                            op: SurfaceOp::Replace {
                                start: first,
                                end: last,
                            },
                            sources: Some(sources),
                        }),
                    ),
                    ("compaction/end".into(), end_data, None),
                ]
            })
            .map_err(|e| RegionError::Commit(e.to_string()))?;
        let summary_event = appended
            .first()
            .cloned()
            .ok_or_else(|| RegionError::Commit("the summary was not recorded".into()))?;
        Ok(Compacted {
            summary_seq: summary_event.seq,
            shadowed: seqs.len(),
            shadowed_tokens,
        })
    }

    fn overflow_count(&self, agent: &str) -> u32 {
        *self
            .overflow
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(agent)
            .unwrap_or(&0)
    }

    fn note_overflow(&self, agent: &str) {
        *self
            .overflow
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(agent.to_string())
            .or_insert(0) += 1;
    }

    fn reset_overflow(&self, agent: &str) {
        self.overflow
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(agent);
    }
}

fn blocks(content: &[dsh_llm::ContentBlock]) -> Value {
    Value::Array(
        content
            .iter()
            .map(|b| serde_json::to_value(b).unwrap_or(Value::Null))
            .collect(),
    )
}

/// `@deepseek-ai/dsh-compaction-basic`: provides [`CompactionEngine`]; with `auto` (the
/// default) compacts under pressure before each step and recovers from context overflow.
pub struct CompactionPlugin;

impl Plugin for CompactionPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-compaction-basic"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "headroomTokens",
            "compaction starts at thresholdRatio of the context window; there is no separate headroom",
        )]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let config = CompactionConfig::parse(config.raw_keys(config::KEYS))?;
        let engine = Arc::new(CompactionEngine {
            ctx: ctx.clone(),
            llm: ctx.require::<LlmRuntime>()?,
            meter: ctx.require::<TokenMeter>()?,
            config,
            busy: Mutex::default(),
            overflow: Mutex::default(),
            warned: Mutex::default(),
        });
        ctx.provide(engine.clone())?;
        if !engine.config.auto {
            return Ok(());
        }
        let e = engine.clone();
        ctx.on_waterfall::<PreStep>(ListenOptions::default(), move |payload, next| {
            let e = e.clone();
            Box::pin(async move {
                if !payload.cancel.is_cancelled()
                    && let Err(err) = e
                        .compact_if_needed(
                            &payload.agent,
                            Trigger::Pressure,
                            payload.turn,
                            &payload.cancel,
                        )
                        .await
                {
                    tracing::warn!("step compaction failed: {err}; continuing the turn");
                }
                next.run().await
            })
        })?;
        let e = engine.clone();
        ctx.on_waterfall::<RequestError>(ListenOptions::default(), move |payload, next| {
            let e = e.clone();
            Box::pin(async move {
                let agent_id = payload.agent.id().to_string();
                let max = {
                    let route = e.target(payload.agent.session());
                    route.map_or(e.config.policy.max_overflow_retries, |(p, m, _)| {
                        e.config.policy_for(&p, &m).max_overflow_retries
                    })
                };
                if payload.failure.code != codes::CONTEXT_WINDOW_EXCEEDED
                    || payload.cancel.is_cancelled()
                    || e.overflow_count(&agent_id) >= max
                {
                    return next.run().await;
                }
                match e
                    .compact_if_needed(
                        &payload.agent,
                        Trigger::Overflow,
                        payload.turn,
                        &payload.cancel,
                    )
                    .await
                {
                    Ok(true) => {
                        e.note_overflow(&agent_id);
                        Ok(Some(RequestErrorAction::Retry))
                    }
                    Ok(false) => next.run().await,
                    Err(err) => {
                        tracing::warn!("overflow compaction failed: {err}");
                        next.run().await
                    }
                }
            })
        })?;
        // A successful response (or going idle) starts a new overflow epoch.
        let e = engine.clone();
        ctx.on_emit::<dsh_agent::AgentStatusChanged>(ListenOptions::GLOBAL, move |p| {
            if p.status == AgentStatus::Idle {
                e.reset_overflow(p.agent.id());
            }
            Ok(())
        })?;
        let e = engine;
        ctx.on_emit::<dsh_session::SessionAppended>(ListenOptions::GLOBAL, move |p| {
            if p.event.is(types::ASSISTANT_MESSAGE) {
                e.reset_overflow(&p.session.id());
            }
            Ok(())
        })?;
        Ok(())
    }
}
