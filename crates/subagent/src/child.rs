//! What every in-process child gets from its parent: depth, header lineage, route, the
//! delegated policy (written into its log before its first input) and its composition
//! (the `subagent:delegation` context, a persona).

use std::sync::Arc;

use dsh_agent::{AgentOptions, AgentRef, SessionMeta};
use dsh_kernel::{BoxError, Context};
use dsh_prompt::SystemPrompt;
use dsh_session::LiveSession;
use serde_json::json;

/// The runtime-context text every delegated child reads (model-visible).
pub const DELEGATION_CONTEXT: &str = "You are a delegated subagent: your permission scope was fixed when you were started and cannot be widened from inside this session \u{2014} operations that require approval are rejected automatically. When the task needs access beyond that scope, do not retry the denied operation; state the limitation in your reply so the delegating agent can handle it.";

/// A start refused because the child would be too deep.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("subagent depth {attempted} exceeds maxDepth {max}")]
pub struct DepthError {
    pub attempted: u64,
    pub max: u64,
}

/// How deep `agent` is in its delegation tree (0 for a root).
pub fn delegation_depth_of(agent: &AgentRef) -> u64 {
    agent.session().read(|s| s.header().delegation_depth)
}

/// The depth a child of `parent` would have, refused past `max_depth`.
pub fn resolve_child_depth(parent: &AgentRef, max_depth: Option<u64>) -> Result<u64, DepthError> {
    let attempted = delegation_depth_of(parent).saturating_add(1);
    match max_depth {
        Some(max) if attempted > max => Err(DepthError { attempted, max }),
        _ => Ok(attempted),
    }
}

/// The child's route: the parent's, overridden field by field by `requested`. The
/// parent's reasoning effort belongs to its model: a child on another route starts from
/// that adapter's default unless the request names one.
pub fn child_options(parent: &AgentRef, requested: Option<&AgentOptions>) -> AgentOptions {
    let mut o = parent.options();
    if let Some(r) = requested {
        let rerouted = (r.provider.is_some() && r.provider != o.provider)
            || (r.model.is_some() && r.model != o.model);
        if rerouted {
            o.reasoning_effort = None;
        }
        if r.reasoning_effort.is_some() {
            o.reasoning_effort = r.reasoning_effort.clone();
        }
        if r.provider.is_some() {
            o.provider = r.provider.clone();
        }
        if r.model.is_some() {
            o.model = r.model.clone();
        }
        if r.max_tokens.is_some() {
            o.max_tokens = r.max_tokens;
        }
    }
    o
}

/// The header lineage of a child of `parent` at `depth`.
pub fn child_meta(parent: &AgentRef, depth: u64) -> SessionMeta {
    let header = parent.session().header();
    SessionMeta {
        parent_session: Some(header.id),
        origin: Some("subagent".into()),
        delegation_depth: depth,
        agent_preset: header.agent_preset,
    }
}

/// The parent's header cwd (children share it).
pub fn parent_cwd(parent: &AgentRef) -> Option<std::path::PathBuf> {
    parent
        .session()
        .read(|s| s.header().cwd.clone())
        .map(std::path::PathBuf::from)
}

/// The policy a child inherits, captured when it is requested.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelegatedPolicy {
    /// The parent session's explicit sandbox mode (its last `sandbox/mode`), if any.
    pub sandbox_mode: Option<String>,
    /// `never` whenever an approval service is composed: a child cannot ask the user.
    pub approval_never: bool,
}

impl DelegatedPolicy {
    pub fn capture(ctx: &Context, parent: &AgentRef) -> Self {
        let sandbox_mode = ctx
            .get::<dsh_sandbox::SandboxPolicy>()
            .and_then(|_| dsh_sandbox::session_mode(parent.session()))
            .map(|m| m.as_str().to_string());
        Self {
            sandbox_mode,
            approval_never: ctx.get::<dsh_tools::Approval>().is_some(),
        }
    }

    /// Writes the delegated policy into the child's log (`source: "delegation"`).
    pub fn append(&self, session: &Arc<LiveSession>) -> Result<(), BoxError> {
        if let Some(mode) = &self.sandbox_mode {
            session.append(
                "sandbox/mode",
                json!({"mode": mode, "source": "delegation"}),
                None,
            )?;
        }
        if self.approval_never {
            session.append(
                "approval/policy",
                json!({"policy": "never", "source": "delegation"}),
                None,
            )?;
        }
        Ok(())
    }
}

/// Registers the child's prompt composition in its scope.
pub fn compose_child(
    child_ctx: &Context,
    prompt: &Arc<SystemPrompt>,
    persona: Option<&str>,
) -> Result<(), BoxError> {
    prompt.context(
        child_ctx,
        "subagent:delegation",
        120.0,
        Arc::new(|_| DELEGATION_CONTEXT.to_string()),
    )?;
    if let Some(p) = persona {
        let p = p.to_string();
        prompt.section(
            child_ctx,
            "deployment:persona",
            0.0,
            Arc::new(move |_| p.clone()),
        )?;
    }
    Ok(())
}
