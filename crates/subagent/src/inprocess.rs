//! The in-process one-shot driver: create the child (lineage, delegated policy, composition,
//! descriptor at its first step), deliver the prompt, wait for it to go idle, read how it
//! ended from its own log, and dispose it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dsh_agent::{
    AgentRef, AgentSource, Agents, CreateAgent, PreStep, PreStepDecision, fold_consumed_work,
};
use dsh_kernel::{BoxError, Context, ListenOptions};
use dsh_llm::{Message, MessageSource};
use dsh_prompt::SystemPrompt;
use dsh_session::{CancelCause, Event, LiveSession};
use dsh_tools::ToolRegistry;
use futures::FutureExt;

use crate::child::{
    DelegatedPolicy, child_meta, child_options, compose_child, parent_cwd, resolve_child_depth,
};
use crate::descriptor::{DESCRIPTOR_EVENT, Descriptor};
use crate::output::final_assistant_output;
use crate::structured::{StructuredCapture, attach_structured_output};
use crate::types::{ResolvedStart, RunFault, StopReason, SubagentResult, SubagentRun};

/// Test-only faults a replay fence injects into published children (upstream's
/// `subagent-durability-failure` fixture): the prompt delivery fails, and disposal fails
/// after really disposing.
pub struct PublishedRunFaults {
    pub followup: String,
    pub dispose: String,
}

/// What the in-process providers need.
#[derive(Clone)]
pub struct InProcess {
    /// Children are created from this (unscoped) context: each gets a fresh root scope, so
    /// registrations scoped to the parent agent do not leak into them.
    pub ctx: Context,
    pub agents: Arc<Agents>,
    pub prompt: Arc<SystemPrompt>,
    pub tools: Arc<ToolRegistry>,
}

impl InProcess {
    pub fn from_ctx(ctx: &Context) -> Result<Self, BoxError> {
        Ok(Self {
            ctx: ctx.with_scope(None),
            agents: ctx.require::<Agents>()?,
            prompt: ctx.require::<SystemPrompt>()?,
            tools: ctx.require::<ToolRegistry>()?,
        })
    }

    /// Starts a one-shot child seeded with `prefix` (a fork's inherited history; empty for
    /// a fresh child).
    pub async fn start(
        &self,
        resolved: ResolvedStart,
        prefix: Vec<Arc<Event>>,
    ) -> Result<SubagentRun, BoxError> {
        let ResolvedStart {
            request,
            descriptor,
        } = resolved;
        if request.cancel.is_cancelled() {
            return Err("subagent request was aborted before child publication".into());
        }
        let parent = request.parent.clone();
        let depth = resolve_child_depth(&parent, request.max_depth)?;
        let child_id = uuid::Uuid::new_v4().to_string();
        let boundary = prefix.len();
        let policy = DelegatedPolicy::capture(&self.ctx, &parent);
        let structured = StructuredCapture::new();
        let setup = {
            let prompt = self.prompt.clone();
            let tools = self.tools.clone();
            let persona = request.persona.clone();
            let schema = request.output_schema.clone();
            let capture = structured.clone();
            Box::new(move |ctx: &Context, session: &Arc<LiveSession>| {
                policy.append(session)?;
                compose_child(ctx, &prompt, persona.as_deref())?;
                if let Some(schema) = schema {
                    attach_structured_output(ctx, &prompt, &tools, schema, capture)?;
                }
                append_descriptor_at_first_step(ctx, descriptor)?;
                Ok(())
            })
        };
        let source = if prefix.is_empty() {
            AgentSource::Fresh
        } else {
            AgentSource::Seeded {
                seed_length: Some(prefix.len() as u64),
                prefix,
            }
        };
        let child = self.agents.create(
            &self.ctx,
            CreateAgent {
                session_id: Some(child_id.clone()),
                cwd: request.cwd.clone().or_else(|| parent_cwd(&parent)),
                options: child_options(&parent, request.agent_options.as_ref()),
                source,
                meta: child_meta(&parent, depth),
                owner: Some(parent.id().to_string()),
                setup: Some(setup),
            },
        )?;
        let faults = self.ctx.get::<PublishedRunFaults>();
        Ok(drive(
            child,
            child_id,
            request.cancel,
            request.prompt,
            boundary,
            request.output_schema.is_some().then_some(structured),
            faults,
        ))
    }
}

/// Appends the descriptor when the child's first step is entered (after the claim, before
/// `step/start`), so it is the child's own first record of the turn.
fn append_descriptor_at_first_step(ctx: &Context, descriptor: Descriptor) -> Result<(), BoxError> {
    let appended = Arc::new(AtomicBool::new(false));
    let data = descriptor.to_data();
    ctx.on_waterfall::<PreStep>(ListenOptions::default(), move |p, next| {
        let appended = appended.clone();
        let data = data.clone();
        Box::pin(async move {
            let decision = next.run().await?;
            if matches!(decision, PreStepDecision::Enter(_))
                && !appended.swap(true, Ordering::SeqCst)
            {
                p.agent.session().append(DESCRIPTOR_EVENT, data, None)?;
            }
            Ok(decision)
        })
    })?;
    Ok(())
}

fn drive(
    child: AgentRef,
    id: String,
    cancel: tokio_util::sync::CancellationToken,
    prompt: Vec<dsh_llm::ContentBlock>,
    boundary: usize,
    structured: Option<StructuredCapture>,
    faults: Option<Arc<PublishedRunFaults>>,
) -> SubagentRun {
    let cancelled = Arc::new(AtomicBool::new(false));
    // Cancelling the request (the parent's call) cancels the child as `{kind: "parent"}`.
    let stop_watch = tokio_util::sync::CancellationToken::new();
    {
        let (child, cancelled, stop_watch) = (child.clone(), cancelled.clone(), stop_watch.clone());
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {
                    cancelled.store(true, Ordering::SeqCst);
                    child.cancel(CancelCause::Parent, false);
                }
                _ = stop_watch.cancelled() => {}
            }
        });
    }
    let result = {
        let (child, cancelled, faults, stop_watch) = (
            child.clone(),
            cancelled.clone(),
            faults.clone(),
            stop_watch.clone(),
        );
        let task = tokio::spawn(async move {
            let outcome = async {
                if !cancelled.load(Ordering::SeqCst) {
                    if let Some(f) = &faults {
                        return Err(RunFault(f.followup.clone()));
                    }
                    child
                        .followup(Message::user(prompt, MessageSource::User))
                        .map_err(|e| RunFault(e.to_string()))?;
                    child.when_idle().await;
                }
                Ok(read_result(
                    &child,
                    boundary,
                    cancelled.load(Ordering::SeqCst),
                    structured.as_ref(),
                ))
            }
            .await;
            stop_watch.cancel();
            outcome
        });
        async move {
            task.await
                .unwrap_or_else(|e| Err(RunFault(format!("subagent run task failed: {e}"))))
        }
        .boxed()
    };
    let local = child.clone();
    SubagentRun::new(id, Some(local), result, move || {
        async move {
            stop_watch.cancel();
            cancelled.store(true, Ordering::SeqCst);
            child.dispose().await;
            match faults {
                Some(f) => Err(RunFault(f.dispose.clone())),
                None => Ok(()),
            }
        }
        .boxed()
    })
}

/// How the child ended, from its own events (after the inherited prefix).
fn read_result(
    child: &AgentRef,
    boundary: usize,
    cancelled: bool,
    structured: Option<&StructuredCapture>,
) -> SubagentResult {
    let own = child
        .session()
        .read(|s| s.events().get(boundary..).map(<[_]>::to_vec))
        .unwrap_or_default();
    let work = fold_consumed_work(&own);
    let output = final_assistant_output(&own).unwrap_or_default();
    let recorded = StopReason::of_run(work.end.as_ref());
    let stop_reason = if cancelled && recorded != StopReason::Completed {
        StopReason::Aborted
    } else {
        recorded
    };
    let mut result = SubagentResult::new(output, stop_reason);
    if let Some(capture) = structured {
        match capture.value() {
            Some(v) => result.structured = Some(v),
            None if stop_reason == StopReason::Completed => {
                result.stop_reason = if cancelled {
                    StopReason::Aborted
                } else {
                    StopReason::Error
                };
            }
            None => {}
        }
    }
    result
}
