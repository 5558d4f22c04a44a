//! One loaded bridge: its parsed config, and running the hooks of one point (matching,
//! the durable `hook/*` pair around each command, merging), plus the listeners that map
//! merged outcomes onto the interception points.
//!
//! | point | interception point | honoured |
//! |---|---|---|
//! | SessionStart | `agent/session-start` (emit; run detached, no `hook/*` pair) | context (`agent.inject`) |
//! | UserPromptSubmit | `agent/pre-step` (waterfall; only for a step with claimed input) | block → reject; context appended after downstream's messages |
//! | PreToolUse | `tools/pre-execute` (waterfall) | deny; ask (Claude Code only) |
//! | PostToolUse | `tools/post-execute` (waterfall) | block with feedback; context prepended to downstream's |
//! | Stop | `agent/turn-stopping` (serial) | block → `agent.steer` (another step, no loop cap) |
//!
//! A failing `hook/*` append fails the listener (and so the call, step or turn), as
//! upstream's throwing append does. `continue:false` is recorded (`decision: "stop"`) but
//! not acted on, and `systemMessage`/`updatedInput` are ignored with a warning, as upstream.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dsh_agent::{
    AgentRef, PreStep, PreStepDecision, SessionStart, SessionStartSource, SubagentEnd,
    SubagentStart, TurnStopping,
};
use dsh_kernel::{BoxError, Context, ListenOptions};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_session::LiveSession;
use dsh_tools::{PostExecute, PostToolDecision, PreExecute, PreToolDecision};
use tokio_util::sync::CancellationToken;

use crate::config::{HookConfig, HookPoint};
use crate::payload::{self, PayloadBase};
use crate::protocol::{
    HookDialect, HookInvocation, HookRun, MergedDecision, MergedOutcome, StdinFraming,
    append_hook_invoked, append_hook_result, merge_hook_outputs, run_hook,
};

/// Per-bridge settings from the plugin row.
#[derive(Clone, Debug, PartialEq)]
pub struct BridgeSettings {
    pub default_timeout_ms: f64,
    pub stderr_summary_max_chars: usize,
    /// Claude Code: `CLAUDE_PROJECT_DIR` (default: the session workspace).
    pub project_dir: Option<String>,
    /// Codex: the `model` stamped on payloads.
    pub model: String,
}

/// Whether clean, non-JSON stdout counts as context (Codex SessionStart and
/// UserPromptSubmit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PlainStdout {
    AsContext,
    Ignored,
}

/// Where one point fires.
struct Site<'a> {
    session: Option<&'a Arc<LiveSession>>,
    /// Used when the session header has no cwd.
    cwd: Option<PathBuf>,
    /// The open turn; `None` writes no `hook/*` pair (detached points).
    turn: Option<u64>,
    cancel: CancellationToken,
    plain_stdout: PlainStdout,
}

pub(crate) struct Bridge {
    dialect: HookDialect,
    config: HookConfig,
    settings: BridgeSettings,
    next_handler: AtomicU64,
    confinement: Option<(Arc<dsh_sandbox::Sandbox>, Arc<dsh_sandbox::SandboxPolicy>)>,
}

impl Bridge {
    pub(crate) fn new(dialect: HookDialect, config: HookConfig, settings: BridgeSettings) -> Self {
        Self {
            dialect,
            config,
            settings,
            next_handler: AtomicU64::new(1),
            confinement: None,
        }
    }

    pub(crate) fn with_confinement(
        mut self,
        confinement: Option<(Arc<dsh_sandbox::Sandbox>, Arc<dsh_sandbox::SandboxPolicy>)>,
    ) -> Self {
        self.confinement = confinement;
        self
    }

    fn plugin_label(&self) -> &'static str {
        match self.dialect {
            HookDialect::ClaudeCode => "hooks-claude-code",
            HookDialect::Codex => "hooks-codex",
        }
    }

    fn framing(&self) -> StdinFraming {
        match self.dialect {
            HookDialect::ClaudeCode => StdinFraming::TrailingNewline,
            HookDialect::Codex => StdinFraming::Bare,
        }
    }

    fn payload_base<'a>(
        &'a self,
        ctx: &'a Context,
        session: Option<&'a Arc<LiveSession>>,
    ) -> PayloadBase<'a> {
        PayloadBase {
            dialect: self.dialect,
            ctx,
            session,
            model: &self.settings.model,
        }
    }

    /// Runs every hook of `point` whose matcher selects `query`, serially in config order,
    /// and folds their outcomes.
    /// Runs the hooks of a tool point (`PreToolUse`, `PostToolUse`) for `exec`, with the
    /// tool's response for the latter.
    async fn run_tool_point(
        &self,
        point: HookPoint,
        exec: &dsh_tools::ToolExecution,
        response: Option<String>,
    ) -> Result<MergedOutcome, BoxError> {
        let session = exec.session.as_ref();
        let turn = last_turn(session);
        let base = self.payload_base(&exec.ctx, session);
        let payload = payload::tool_use(
            &base,
            point,
            turn,
            &exec.name,
            &exec.arguments,
            &exec.call_id,
            response,
        );
        let site = Site {
            session,
            cwd: exec.cwd.clone(),
            turn: Some(turn),
            cancel: exec.cancel.clone(),
            plain_stdout: PlainStdout::Ignored,
        };
        self.run_point(point, &exec.name, &payload, site).await
    }

    async fn run_point(
        &self,
        point: HookPoint,
        query: &str,
        payload: &serde_json::Value,
        site: Site<'_>,
    ) -> Result<MergedOutcome, BoxError> {
        let workdir = payload::workdir(site.session, site.cwd.as_deref());
        let env = match self.dialect {
            HookDialect::ClaudeCode => {
                let dir = self
                    .settings
                    .project_dir
                    .clone()
                    .or_else(|| workdir.as_ref().map(|p| p.display().to_string()));
                dir.map(|d| vec![("CLAUDE_PROJECT_DIR".to_string(), d)])
                    .unwrap_or_default()
            }
            HookDialect::Codex => Vec::new(),
        };
        let mut outputs = Vec::new();
        for group in self.config.groups(point) {
            if !group.matcher.matches(query) {
                continue;
            }
            for hook in &group.hooks {
                let n = self.next_handler.fetch_add(1, Ordering::Relaxed);
                let invocation = HookInvocation {
                    turn: site.turn.unwrap_or(0),
                    point: point.as_str().to_owned(),
                    dialect: self.dialect,
                    handler_id: format!("{}:{}:{n}", self.dialect.as_str(), point.as_str()),
                    matcher: group.pattern.clone(),
                };
                let recorded = site.session.filter(|_| site.turn.is_some());
                if let Some(session) = recorded {
                    append_hook_invoked(session, &invocation)?;
                }
                let run = HookRun {
                    payload,
                    env: env.clone(),
                    cwd: workdir.clone(),
                    cancel: site.cancel.clone(),
                    framing: self.framing(),
                    default_timeout_ms: self.settings.default_timeout_ms,
                    expected_event: Some(point.as_str()),
                    confine: self.confinement.as_ref().and_then(|(sandbox, policy)| {
                        let policy = policy.resolve(None);
                        policy.mode.is_confined().then(|| (sandbox.clone(), policy))
                    }),
                };
                let result = run_hook(hook, run).await;
                let mut output = result.output;
                if site.plain_stdout == PlainStdout::AsContext
                    && output.exit_code == Some(0)
                    && output.additional_context.is_none()
                    && !output.stdout.is_empty()
                    && !output.stdout.starts_with('{')
                {
                    output.additional_context = Some(output.stdout.clone());
                }
                let label = self.plugin_label();
                if output.updated_input.is_some() && self.dialect == HookDialect::ClaudeCode {
                    tracing::warn!(
                        "{label}: {} hook requested updatedInput, which is not yet honored (ignored)",
                        point.as_str()
                    );
                }
                if output.system_message.is_some() {
                    tracing::warn!(
                        "{label}: {} hook emitted a systemMessage, which is not yet surfaced (ignored)",
                        point.as_str()
                    );
                }
                if let Some(session) = recorded {
                    append_hook_result(
                        session,
                        &invocation,
                        &output,
                        self.settings.stderr_summary_max_chars,
                        result.duration_ms,
                    )?;
                }
                outputs.push(output);
            }
        }
        Ok(merge_hook_outputs(&outputs))
    }

    /// The merged context as one user message from this plugin, if any.
    fn context_message(&self, merged: &MergedOutcome) -> Option<Message> {
        if merged.additional_context.is_empty() {
            return None;
        }
        let content = merged
            .additional_context
            .iter()
            .map(|t| ContentBlock::text(t.clone()))
            .collect();
        Some(Message::user(
            content,
            MessageSource::plugin(self.plugin_label(), []),
        ))
    }

    fn plain_stdout_for_context_points(&self) -> PlainStdout {
        match self.dialect {
            HookDialect::ClaudeCode => PlainStdout::Ignored,
            HookDialect::Codex => PlainStdout::AsContext,
        }
    }

    async fn session_start(
        &self,
        agent: AgentRef,
        source: SessionStartSource,
        cancel: CancellationToken,
    ) {
        let source = match source {
            SessionStartSource::Startup => "startup",
            SessionStartSource::Resume => "resume",
        };
        let session = agent.session().clone();
        let payload =
            payload::session_start(&self.payload_base(agent.ctx(), Some(&session)), source);
        let site = Site {
            session: Some(&session),
            cwd: agent.cwd(),
            turn: None,
            cancel,
            plain_stdout: self.plain_stdout_for_context_points(),
        };
        let merged = match self
            .run_point(HookPoint::SessionStart, source, &payload, site)
            .await
        {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("{}: SessionStart hook failed: {e}", self.plugin_label());
                return;
            }
        };
        if let Some(context) = self.context_message(&merged)
            && let Err(e) = agent.inject(context)
        {
            tracing::warn!("{}: SessionStart hook failed: {e}", self.plugin_label());
        }
    }
    /// Runs `SubagentStart` / `SubagentStop` for child `agent_id` (Claude Code only). The
    /// payload describes the child's session when it runs in this process; context from
    /// SubagentStart is injected into the child, SubagentStop only observes.
    async fn subagent_point(
        &self,
        point: HookPoint,
        agent_id: String,
        parent: AgentRef,
        child: Option<AgentRef>,
        cancel: CancellationToken,
    ) {
        let session = child.as_ref().map(|c| c.session().clone());
        let payload = match &child {
            Some(c) => payload::subagent(
                &self.payload_base(c.ctx(), session.as_ref()),
                point,
                &agent_id,
            ),
            None => payload::subagent(&self.payload_base(parent.ctx(), None), point, &agent_id),
        };
        let site = Site {
            session: session.as_ref(),
            cwd: child.as_ref().and_then(|c| c.cwd()),
            turn: None,
            cancel,
            plain_stdout: PlainStdout::Ignored,
        };
        let merged = match self
            .run_point(point, payload::SUBAGENT_TYPE, &payload, site)
            .await
        {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(
                    "{}: {} hook failed: {e}",
                    self.plugin_label(),
                    point.as_str()
                );
                return;
            }
        };
        if point == HookPoint::SubagentStart
            && let (Some(context), Some(child)) = (self.context_message(&merged), child)
            && let Err(e) = child.inject(context)
        {
            tracing::warn!("{}: SubagentStart hook failed: {e}", self.plugin_label());
        }
    }
}

/// Cancels detached runs (SessionStart) when the plugin unloads; their process groups
/// are killed by the runner.
struct DetachedRuns {
    cancel: CancellationToken,
}

fn last_turn(session: Option<&Arc<LiveSession>>) -> u64 {
    session.map_or(0, |s| s.read(|s| s.last_turn()))
}

/// Registers the listeners of the points `bridge` has hooks for.
pub(crate) fn install(ctx: &Context, bridge: Bridge) -> Result<(), BoxError> {
    let bridge = Arc::new(bridge);
    let opts = ListenOptions::default();

    if bridge.config.has(HookPoint::SessionStart) {
        let detached = Arc::new(DetachedRuns {
            cancel: CancellationToken::new(),
        });
        let on_unload = detached.cancel.clone();
        ctx.effect("drain detached hook runs", move || on_unload.cancel())?;
        let b = bridge.clone();
        ctx.on_emit::<SessionStart>(opts, move |p| {
            let Ok(handle) = tokio::runtime::Handle::try_current() else {
                tracing::warn!(
                    "{}: SessionStart hook skipped: no async runtime",
                    b.plugin_label()
                );
                return Ok(());
            };
            let (b, agent, source, cancel) = (
                b.clone(),
                p.agent.clone(),
                p.source,
                detached.cancel.child_token(),
            );
            handle.spawn(async move { b.session_start(agent, source, cancel).await });
            Ok(())
        })?;
    }

    if bridge.config.has(HookPoint::UserPromptSubmit) {
        install_prompt_submit(ctx, &bridge, opts)?;
    }

    if bridge.config.has(HookPoint::PreToolUse) {
        install_pre_tool_use(ctx, &bridge, opts)?;
    }

    if bridge.config.has(HookPoint::PostToolUse) {
        install_post_tool_use(ctx, &bridge, opts)?;
    }

    if bridge.config.has(HookPoint::Stop) {
        install_stop(ctx, &bridge, opts)?;
    }

    // SubagentStart / SubagentStop fire for Claude Code hooks only (the Codex dialect has
    // no such events; its loader drops them with a warning). Detached, like SessionStart:
    // a delegation never waits for them.
    let subagent_points = [HookPoint::SubagentStart, HookPoint::SubagentStop]
        .into_iter()
        .filter(|p| bridge.dialect == HookDialect::ClaudeCode && bridge.config.has(*p))
        .collect::<Vec<_>>();
    if !subagent_points.is_empty() {
        let detached = CancellationToken::new();
        let on_unload = detached.clone();
        ctx.effect("drain detached subagent hook runs", move || {
            on_unload.cancel()
        })?;
        let spawn = {
            let b = bridge.clone();
            move |point: HookPoint, id: String, parent: AgentRef, child: Option<AgentRef>| {
                let Ok(handle) = tokio::runtime::Handle::try_current() else {
                    tracing::warn!(
                        "{}: {} hook skipped: no async runtime",
                        b.plugin_label(),
                        point.as_str()
                    );
                    return;
                };
                let (b, cancel) = (b.clone(), detached.child_token());
                handle
                    .spawn(async move { b.subagent_point(point, id, parent, child, cancel).await });
            }
        };
        if subagent_points.contains(&HookPoint::SubagentStart) {
            let spawn = spawn.clone();
            ctx.on_emit::<SubagentStart>(opts, move |info| {
                spawn(
                    HookPoint::SubagentStart,
                    info.id.clone(),
                    info.parent.clone(),
                    info.child.clone(),
                );
                Ok(())
            })?;
        }
        if subagent_points.contains(&HookPoint::SubagentStop) {
            ctx.on_emit::<SubagentEnd>(opts, move |end| {
                spawn(
                    HookPoint::SubagentStop,
                    end.info.id.clone(),
                    end.info.parent.clone(),
                    end.info.child.clone(),
                );
                Ok(())
            })?;
        }
    }
    Ok(())
}

/// Hooks a prompt passes before the turn starts: they can refuse it or add context.
fn install_prompt_submit(
    ctx: &Context,
    bridge: &Arc<Bridge>,
    opts: ListenOptions,
) -> Result<(), BoxError> {
    let b = bridge.clone();
    ctx.on_waterfall::<PreStep>(opts, move |p, next| {
        let b = b.clone();
        Box::pin(async move {
            if p.messages.is_empty() {
                return next.run().await;
            }
            let session = p.agent.session();
            let base = b.payload_base(p.agent.ctx(), Some(session));
            let payload =
                payload::prompt_submit(&base, p.turn, payload::messages_text(&p.messages));
            let site = Site {
                session: Some(session),
                cwd: p.agent.cwd(),
                turn: Some(p.turn),
                cancel: p.cancel.clone(),
                plain_stdout: b.plain_stdout_for_context_points(),
            };
            let merged = b
                .run_point(HookPoint::UserPromptSubmit, "", &payload, site)
                .await?;
            if merged.decision == MergedDecision::Deny {
                return Ok(PreStepDecision::Reject);
            }
            let downstream = next.run().await?;
            Ok(match (downstream, b.context_message(&merged)) {
                (PreStepDecision::Enter(mut messages), Some(ours)) => {
                    messages.push(Arc::new(ours));
                    PreStepDecision::Enter(messages)
                }
                (downstream, _) => downstream,
            })
        })
    })?;
    Ok(())
}

/// Hooks a tool call passes before it runs: they can block it or ask a person.
fn install_pre_tool_use(
    ctx: &Context,
    bridge: &Arc<Bridge>,
    opts: ListenOptions,
) -> Result<(), BoxError> {
    let b = bridge.clone();
    ctx.on_waterfall::<PreExecute>(opts, move |exec, next| {
        let b = b.clone();
        Box::pin(async move {
            let merged = b.run_tool_point(HookPoint::PreToolUse, exec, None).await?;
            match (merged.decision, b.dialect) {
                (MergedDecision::Deny, _) => Ok(PreToolDecision::Deny {
                    reason: merged
                        .reason
                        .unwrap_or_else(|| "blocked by PreToolUse hook".into()),
                }),
                (MergedDecision::Ask, HookDialect::ClaudeCode) => Ok(PreToolDecision::Ask {
                    reason: merged.reason,
                }),
                // Codex honours blocks only; `allow` never pre-approves.
                (MergedDecision::Ask, HookDialect::Codex)
                | (MergedDecision::Allow | MergedDecision::None, _) => next.run().await,
            }
        })
    })?;
    Ok(())
}

/// Hooks a tool result passes: they can block it (the model sees their reason) or add context.
fn install_post_tool_use(
    ctx: &Context,
    bridge: &Arc<Bridge>,
    opts: ListenOptions,
) -> Result<(), BoxError> {
    let b = bridge.clone();
    ctx.on_waterfall::<PostExecute>(opts, move |p, next| {
        let b = b.clone();
        Box::pin(async move {
            let response = Some(payload::blocks_text(&p.result.content));
            let merged = b
                .run_tool_point(HookPoint::PostToolUse, &p.exec, response)
                .await?;
            let ours = b.context_message(&merged);
            if merged.decision == MergedDecision::Deny {
                let text = merged
                    .reason
                    .unwrap_or_else(|| "blocked by PostToolUse hook".into());
                return Ok(PostToolDecision::Block {
                    feedback: vec![ContentBlock::text(text)],
                    additional_contexts: ours.into_iter().collect(),
                });
            }
            let downstream = next.run().await?;
            let Some(ours) = ours else {
                return Ok(downstream);
            };
            Ok(match downstream {
                PostToolDecision::Accept {
                    content,
                    additional_contexts,
                } => PostToolDecision::Accept {
                    content,
                    additional_contexts: std::iter::once(ours).chain(additional_contexts).collect(),
                },
                PostToolDecision::Block {
                    feedback,
                    additional_contexts,
                } => PostToolDecision::Block {
                    feedback,
                    additional_contexts: std::iter::once(ours).chain(additional_contexts).collect(),
                },
            })
        })
    })?;
    Ok(())
}

/// Hooks asked when a turn would end: a block steers the agent to go on.
fn install_stop(ctx: &Context, bridge: &Arc<Bridge>, opts: ListenOptions) -> Result<(), BoxError> {
    let b = bridge.clone();
    ctx.on_serial::<TurnStopping>(opts, move |p| {
        let b = b.clone();
        Box::pin(async move {
            let session = p.agent.session();
            let base = b.payload_base(p.agent.ctx(), Some(session));
            let payload = payload::stop(&base, last_turn(Some(session)));
            let site = Site {
                session: Some(session),
                cwd: p.agent.cwd(),
                turn: Some(p.turn),
                cancel: p.cancel.clone(),
                plain_stdout: PlainStdout::Ignored,
            };
            let merged = b.run_point(HookPoint::Stop, "", &payload, site).await?;
            if merged.decision == MergedDecision::Deny {
                let text = merged
                    .reason
                    .unwrap_or_else(|| "continue: blocked by Stop hook".into());
                let source = MessageSource::plugin(b.plugin_label(), []);
                p.agent
                    .steer(Message::user(vec![ContentBlock::text(text)], source))?;
            }
            Ok(())
        })
    })?;
    Ok(())
}
