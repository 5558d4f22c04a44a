//! The tool registry (`ctx.tools`): scoped layers and the staged execution pipeline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use dsh_kernel::{BoxError, BoxFuture, Context, EffectHandle, ScopeId};
use dsh_llm::{ContentBlock, ToolSchema};
use serde_json::Value;

use crate::exec::{
    Approval, ApprovalOutcome, ApprovalRequest, Execute, PostExecute, PostExecutePayload,
    PostToolDecision, PreExecute, PreToolDecision, ToolExecution, ToolResult, ToolResultEvent,
    ToolResultPayload,
};
use crate::tool::{Tool, ToolRunContext};

/// How a call may be scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecutionMode {
    Parallel,
    Exclusive,
}

/// Outcome of the policy stage.
pub enum Prepared {
    /// Run the body (then post-execute).
    Dispatch(ToolExecution),
    /// Skip the body; post-execute still runs.
    PostResult(ToolExecution, ToolResult),
    /// Final; post-execute is skipped.
    FinalResult(ToolExecution, ToolResult),
}

/// A guard denies a call by returning a reason.
pub type Guard = Arc<dyn Fn(&ToolExecution) -> Option<String> + Send + Sync>;

struct Registered {
    id: u64,
    tool: Arc<dyn Tool>,
    /// The registering row (its context's owner): what a [`ToolView`] narrows by.
    owner: String,
}

/// Narrows what one session sees (agent presets): consulted for every schema list and
/// every call made in a session.
pub trait ToolView: Send + Sync {
    /// Whether `session` sees tool `name`, registered by row `owner`.
    fn admits(&self, session: &str, owner: &str, name: &str) -> bool;
    /// `session`'s presentation mode when it differs from the registry's.
    fn mode(&self, session: &str) -> Option<ToolsMode>;
}

#[derive(Default)]
struct Layers {
    tools: HashMap<Option<ScopeId>, Vec<Registered>>,
    guards: Vec<(u64, Option<ScopeId>, Guard)>,
}

/// How the registry presents tools to the model (the `tools` row's `mode`, upstream's
/// `DSH_TOOLS_MODE`): `native` tools on the wire, `code` only `run_code` (every other tool
/// is reached from the program), or `both`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ToolsMode {
    #[default]
    Native,
    Code,
    Both,
}

impl ToolsMode {
    /// `native` | `code` | `both`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "native" => Some(ToolsMode::Native),
            "code" => Some(ToolsMode::Code),
            "both" => Some(ToolsMode::Both),
            _ => None,
        }
    }
}

/// The reserved name of the Code Mode tool.
pub const RUN_CODE: &str = "run_code";

/// The `ctx.tools` service.
#[derive(Default)]
pub struct ToolRegistry {
    layers: RwLock<Layers>,
    next_id: AtomicU64,
    mode: RwLock<ToolsMode>,
    /// `run_code`, presentation infrastructure outside the scoped layers (Code Mode).
    code_tool: RwLock<Option<(u64, Arc<dyn Tool>)>>,
    /// The per-session narrowing, when one is installed.
    view: RwLock<Option<(u64, Arc<dyn ToolView>)>>,
}

/// A tool with this name is already registered in the same layer.
#[derive(Debug, thiserror::Error)]
#[error("tool \"{0}\" is already registered in this scope")]
pub struct DuplicateTool(pub String);

impl ToolRegistry {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn layers(&self) -> std::sync::RwLockReadGuard<'_, Layers> {
        self.layers.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `tool` in the layer of `ctx`'s scope (global when unscoped), as an effect
    /// of `ctx`. A scoped registration shadows a global one of the same name.
    pub fn register(
        self: &Arc<Self>,
        ctx: &Context,
        tool: Arc<dyn Tool>,
    ) -> Result<EffectHandle, BoxError> {
        let scope = ctx.scope().map(|s| s.id());
        let name = tool.schema().name.clone();
        if name == RUN_CODE {
            return Err("the tool name \"run_code\" is reserved".into());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut layers = self.layers.write().unwrap_or_else(|p| p.into_inner());
            let layer = layers.tools.entry(scope).or_default();
            if layer.iter().any(|r| r.tool.schema().name == name) {
                return Err(Box::new(DuplicateTool(name)));
            }
            layer.push(Registered {
                id,
                tool,
                owner: ctx.owner().to_string(),
            });
        }
        let this = Arc::downgrade(self);
        Ok(ctx.effect("tool", move || {
            if let Some(this) = this.upgrade() {
                let mut layers = this.layers.write().unwrap_or_else(|p| p.into_inner());
                if let Some(layer) = layers.tools.get_mut(&scope) {
                    layer.retain(|r| r.id != id);
                    if layer.is_empty() {
                        layers.tools.remove(&scope);
                    }
                }
            }
        })?)
    }

    /// Installs the per-session view, as an effect of `ctx` (one at a time).
    pub fn set_view(
        self: &Arc<Self>,
        ctx: &Context,
        view: Arc<dyn ToolView>,
    ) -> Result<EffectHandle, BoxError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut slot = self.view.write().unwrap_or_else(|p| p.into_inner());
            if slot.is_some() {
                return Err("a tool view is already installed".into());
            }
            *slot = Some((id, view));
        }
        let this = Arc::downgrade(self);
        Ok(ctx.effect("tool view", move || {
            if let Some(this) = this.upgrade() {
                let mut slot = this.view.write().unwrap_or_else(|p| p.into_inner());
                if slot.as_ref().is_some_and(|(i, _)| *i == id) {
                    *slot = None;
                }
            }
        })?)
    }

    fn view(&self) -> Option<Arc<dyn ToolView>> {
        self.view
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(_, v)| v.clone())
    }

    /// The presentation mode for `session` (its view's, else the registry's).
    pub fn mode_for(&self, session: Option<&str>) -> ToolsMode {
        session
            .and_then(|s| self.view().and_then(|v| v.mode(s)))
            .unwrap_or_else(|| self.mode())
    }

    /// Sets the presentation mode (boot time, from the `tools` row).
    pub fn set_mode(&self, mode: ToolsMode) {
        *self.mode.write().unwrap_or_else(|p| p.into_inner()) = mode;
    }

    pub fn mode(&self) -> ToolsMode {
        *self.mode.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Installs the `run_code` tool (the code runtime's plugin), as an effect of `ctx`. It is
    /// presented under the `code` and `both` modes only, and callable only at top level.
    pub fn register_code_tool(
        self: &Arc<Self>,
        ctx: &Context,
        tool: Arc<dyn Tool>,
    ) -> Result<EffectHandle, BoxError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut slot = self.code_tool.write().unwrap_or_else(|p| p.into_inner());
            if slot.is_some() {
                return Err(Box::new(DuplicateTool(RUN_CODE.into())));
            }
            *slot = Some((id, tool));
        }
        let this = Arc::downgrade(self);
        Ok(ctx.effect("run_code tool", move || {
            if let Some(this) = this.upgrade() {
                let mut slot = this.code_tool.write().unwrap_or_else(|p| p.into_inner());
                if slot.as_ref().is_some_and(|(i, _)| *i == id) {
                    *slot = None;
                }
            }
        })?)
    }

    fn code_tool(&self) -> Option<Arc<dyn Tool>> {
        self.code_tool
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(_, t)| t.clone())
    }

    /// The tool a call resolves to under the presentation mode: `run_code` only at top level
    /// and outside `native`; under `code`, a top-level call naming any other tool resolves
    /// to nothing (unknown tool), while a program's nested calls reach every visible tool.
    fn resolve(&self, exec: &ToolExecution) -> Option<Arc<dyn Tool>> {
        let session = exec.session.as_ref().map(|s| s.id());
        let mode = self.mode_for(session.as_deref());
        let nested = exec.parent.is_some();
        if exec.name == RUN_CODE {
            return match mode {
                ToolsMode::Native => None,
                ToolsMode::Code | ToolsMode::Both if nested => None,
                ToolsMode::Code | ToolsMode::Both => self.code_tool(),
            };
        }
        if mode == ToolsMode::Code && !nested {
            return None;
        }
        self.visible_named(&exec.ctx, session.as_deref(), &exec.name)
    }

    /// Registers a guard for calls made in `ctx`'s scope (or all calls when unscoped).
    pub fn guard(self: &Arc<Self>, ctx: &Context, guard: Guard) -> Result<EffectHandle, BoxError> {
        let scope = ctx.scope().map(|s| s.id());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.layers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .guards
            .push((id, scope, guard));
        let this = Arc::downgrade(self);
        Ok(ctx.effect("tool guard", move || {
            if let Some(this) = this.upgrade() {
                this.layers
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .guards
                    .retain(|(g, _, _)| *g != id);
            }
        })?)
    }

    /// The tools visible from `ctx`'s scope: global ones overlaid by each scope of the chain
    /// (nearest wins), sorted by name.
    pub fn visible(&self, ctx: &Context) -> Vec<Arc<dyn Tool>> {
        self.visible_in(ctx, None)
    }

    /// [`Self::visible`] as `session` sees them (narrowed by the installed view).
    pub fn visible_in(&self, ctx: &Context, session: Option<&str>) -> Vec<Arc<dyn Tool>> {
        let view = session.and_then(|s| self.view().map(|v| (s, v)));
        let layers = self.layers();
        let scoped = ctx.scope().map_or(&[][..], |s| s.chain());
        // Global first, then the scopes from the outermost in: a later layer shadows.
        let order = std::iter::once(None).chain(scoped.iter().rev().copied().map(Some));
        let mut by_name: Vec<(&str, &Arc<dyn Tool>)> = Vec::new();
        for key in order {
            for r in layers.tools.get(&key).into_iter().flatten() {
                let name = r.tool.schema().name.as_str();
                if let Some((s, v)) = &view
                    && !v.admits(s, &r.owner, name)
                {
                    continue;
                }
                match by_name.iter_mut().find(|(n, _)| *n == name) {
                    Some(slot) => slot.1 = &r.tool,
                    None => by_name.push((name, &r.tool)),
                }
            }
        }
        by_name.sort_by(|a, b| utf16_cmp(a.0, b.0));
        by_name.into_iter().map(|(_, t)| t.clone()).collect()
    }

    /// The tool named `name` that `session` sees from `ctx`: the one [`Self::visible_in`]
    /// lists under that name, found without listing the others.
    fn visible_named(
        &self,
        ctx: &Context,
        session: Option<&str>,
        name: &str,
    ) -> Option<Arc<dyn Tool>> {
        let view = session.and_then(|s| self.view().map(|v| (s, v)));
        let layers = self.layers();
        // The overlay order of `visible_in`, last applied first: the innermost scope, then
        // its parents, then the global layer (a layer holds a name once).
        let scoped = ctx.scope().map_or(&[][..], |s| s.chain());
        let keys = scoped
            .iter()
            .copied()
            .map(Some)
            .chain(std::iter::once(None));
        for key in keys {
            let found = layers.tools.get(&key).into_iter().flatten().find(|r| {
                r.tool.schema().name == name
                    && view
                        .as_ref()
                        .is_none_or(|(s, v)| v.admits(s, &r.owner, name))
            });
            if let Some(r) = found {
                return Some(r.tool.clone());
            }
        }
        None
    }

    /// The model-facing schemas visible from `ctx` under the presentation mode, sorted by
    /// name: the native tools, `run_code` alone (`code`), or both.
    pub fn schemas(&self, ctx: &Context) -> Vec<ToolSchema> {
        self.schemas_in(ctx, None)
    }

    /// [`Self::schemas`] as `session` sees them (its view's tools and mode).
    pub fn schemas_in(&self, ctx: &Context, session: Option<&str>) -> Vec<ToolSchema> {
        let native = || self.native_schemas_in(ctx, session);
        let code = self.code_tool().map(|t| t.schema().clone());
        match (self.mode_for(session), code) {
            (ToolsMode::Native, _) | (_, None) => native(),
            (ToolsMode::Code, Some(code)) => vec![code],
            (ToolsMode::Both, Some(code)) => {
                let mut all = native();
                all.push(code);
                all.sort_by(|a, b| utf16_cmp(&a.name, &b.name));
                all
            }
        }
    }

    /// The schemas of the tools visible from `ctx`, whatever the mode (what a Code Mode
    /// program can bind), sorted by name.
    pub fn native_schemas(&self, ctx: &Context) -> Vec<ToolSchema> {
        self.native_schemas_in(ctx, None)
    }

    /// [`Self::native_schemas`] as `session` sees them.
    pub fn native_schemas_in(&self, ctx: &Context, session: Option<&str>) -> Vec<ToolSchema> {
        self.visible_in(ctx, session)
            .iter()
            .map(|t| t.schema().clone())
            .collect()
    }

    /// The declared output schemas of the tools visible from `ctx`, by tool name (tools that
    /// declare none are absent): what a Code Mode program's binding resolves to.
    pub fn output_schemas(&self, ctx: &Context) -> std::collections::BTreeMap<String, Value> {
        self.visible(ctx)
            .iter()
            .filter_map(|t| {
                t.output_schema()
                    .map(|s| (t.schema().name.clone(), s.clone()))
            })
            .collect()
    }

    pub fn get(&self, ctx: &Context, name: &str) -> Option<Arc<dyn Tool>> {
        self.visible_named(ctx, None, name)
    }

    /// Parallel only when the visible tool says exactly yes; anything else is exclusive.
    pub fn execution_mode(&self, exec: &ToolExecution) -> ExecutionMode {
        match self.resolve(exec) {
            Some(tool)
                if tool.validate(&exec.arguments).is_ok()
                    && tool.concurrency_safe(&exec.arguments) =>
            {
                ExecutionMode::Parallel
            }
            _ => ExecutionMode::Exclusive,
        }
    }

    fn guard_reason(&self, exec: &ToolExecution) -> Option<String> {
        let guards: Vec<Guard> = {
            let layers = self.layers();
            let chain: Vec<ScopeId> = exec
                .ctx
                .scope()
                .map(|s| s.chain().to_vec())
                .unwrap_or_default();
            let mut ordered: Vec<Guard> = layers
                .guards
                .iter()
                .filter(|(_, s, _)| s.is_none())
                .map(|(_, _, g)| g.clone())
                .collect();
            for id in chain.iter().rev() {
                ordered.extend(
                    layers
                        .guards
                        .iter()
                        .filter(|(_, s, _)| *s == Some(*id))
                        .map(|(_, _, g)| g.clone()),
                );
            }
            ordered
        };
        guards.iter().find_map(|g| g(exec))
    }

    /// Policy stage: pre-execute waterfall, approval, guards.
    pub async fn prepare(&self, exec: ToolExecution) -> Prepared {
        if !dsh_kernel::json::is_lossless(&exec.arguments) {
            let r = ToolResult::failure(
                "tool execution arguments must be losslessly JSON-serializable",
                None,
            );
            return Prepared::FinalResult(exec, r);
        }
        if exec.cancel.is_cancelled() {
            return Prepared::FinalResult(exec, ToolResult::aborted_before_dispatch());
        }
        let allow = |_| -> BoxFuture<'_, Result<PreToolDecision, BoxError>> {
            Box::pin(async { Ok(PreToolDecision::Allow) })
        };
        let decision = match exec.ctx.waterfall::<PreExecute, _>(&exec, &allow).await {
            Ok(d) => d,
            Err(e) => {
                let r = ToolResult::from_error(e.as_ref());
                return Prepared::FinalResult(exec, r);
            }
        };
        let (decision, approval_cancelled) = match decision {
            PreToolDecision::Ask { reason } => self.ask(&exec, reason).await,
            other => (other, false),
        };
        if exec.cancel.is_cancelled() && approval_cancelled {
            return Prepared::PostResult(exec, ToolResult::aborted_before_dispatch());
        }
        let denial = match decision {
            PreToolDecision::Deny { reason } => Some(reason),
            _ => self.guard_reason(&exec),
        };
        if let Some(reason) = denial {
            return Prepared::PostResult(exec, ToolResult::denied(&reason));
        }
        if exec.cancel.is_cancelled() {
            return Prepared::PostResult(exec, ToolResult::aborted_before_dispatch());
        }
        Prepared::Dispatch(exec)
    }

    async fn ask(&self, exec: &ToolExecution, reason: Option<String>) -> (PreToolDecision, bool) {
        let name = &exec.name;
        let Some(approval) = exec.ctx.get::<Approval>() else {
            let reason = reason.unwrap_or_else(|| {
                format!("tool \"{name}\" requires approval (not yet supported)")
            });
            return (PreToolDecision::Deny { reason }, false);
        };
        let outcome = approval
            .0
            .request(ApprovalRequest {
                approval_id: String::new(),
                ctx: exec.ctx.clone(),
                session: exec.session.clone(),
                tool_name: name.clone(),
                call_id: exec.call_id.clone(),
                arguments: exec.arguments.clone(),
                reason,
                cancel: exec.cancel.clone(),
            })
            .await;
        match outcome {
            ApprovalOutcome::AllowedOnce => (PreToolDecision::Allow, false),
            ApprovalOutcome::Rejected => (
                PreToolDecision::Deny {
                    reason: format!("the user rejected tool \"{name}\""),
                },
                false,
            ),
            ApprovalOutcome::Cancelled => (
                PreToolDecision::Deny {
                    reason: format!("approval for tool \"{name}\" was cancelled"),
                },
                true,
            ),
            ApprovalOutcome::Unavailable => (
                PreToolDecision::Deny {
                    reason: format!(
                        "tool \"{name}\" requires approval, but no approval channel is available"
                    ),
                },
                false,
            ),
        }
    }

    /// Body stage: the `tools/execute` waterfall around the tool body.
    pub async fn dispatch(&self, exec: &ToolExecution) -> ToolResult {
        let body_invoked = Arc::new(Mutex::new(false));
        let invoked = body_invoked.clone();
        let default = move |exec| -> BoxFuture<'_, Result<ToolResult, BoxError>> {
            let invoked = invoked.clone();
            Box::pin(async move { Ok(self.run_body(exec, &invoked).await) })
        };
        let mut result = match exec.ctx.waterfall::<Execute, _>(exec, &default).await {
            Ok(r) => r,
            Err(e) => ToolResult::from_error(e.as_ref()),
        };
        if exec.cancel.is_cancelled() && !result.is_error {
            let contexts = std::mem::take(&mut result.additional_contexts);
            result = if *body_invoked.lock().unwrap_or_else(|p| p.into_inner()) {
                ToolResult::aborted()
            } else {
                ToolResult::aborted_before_dispatch()
            };
            result.additional_contexts = contexts;
        }
        result
    }

    async fn run_body(&self, exec: &ToolExecution, invoked: &Mutex<bool>) -> ToolResult {
        if exec.cancel.is_cancelled() {
            return ToolResult::aborted_before_dispatch();
        }
        let Some(tool) = self.resolve(exec) else {
            return ToolResult::unknown_tool(&exec.name);
        };
        if let Err(message) = tool.validate(&exec.arguments) {
            return ToolResult::invalid_args(message);
        }
        *invoked.lock().unwrap_or_else(|p| p.into_inner()) = true;
        let run = ToolRunContext {
            call_id: exec.call_id.clone(),
            name: exec.name.clone(),
            ctx: exec.ctx.clone(),
            session: exec.session.clone(),
            cwd: exec.cwd.clone(),
            cancel: exec.cancel.clone(),
            deferred: Default::default(),
            concluded: Default::default(),
            value: Default::default(),
            arguments: None,
        };
        let outcome = tool.execute(exec.arguments.clone(), run.clone()).await;
        let deferred = std::mem::take(&mut *run.deferred.lock().unwrap_or_else(|p| p.into_inner()));
        let concluded = *run.concluded.lock().unwrap_or_else(|p| p.into_inner());
        let value = run.value.lock().unwrap_or_else(|p| p.into_inner()).take();
        let mut result = match outcome {
            _ if exec.cancel.is_cancelled() => ToolResult::aborted(),
            Ok(output) => ToolResult {
                content: output.content,
                meta: if exec.parent.is_none() {
                    output.meta
                } else {
                    None
                },
                concludes_turn: concluded,
                value,
                ..ToolResult::default()
            },
            Err(e) => ToolResult::from_error(e.as_ref()),
        };
        let mut contexts = deferred;
        contexts.append(&mut result.additional_contexts);
        result.additional_contexts = contexts;
        result
    }

    /// Post stage + finish: `tools/post-execute`, then [`ToolRegistry::finish`].
    pub async fn finalize(&self, exec: &ToolExecution, result: ToolResult) -> ToolResult {
        let accept = |_| -> BoxFuture<'_, Result<PostToolDecision, BoxError>> {
            Box::pin(async { Ok(PostToolDecision::accept()) })
        };
        let payload = PostExecutePayload {
            exec: exec.clone(),
            result,
        };
        let decided = exec
            .ctx
            .waterfall::<PostExecute, _>(&payload, &accept)
            .await;
        let PostExecutePayload { result, .. } = payload;
        let mut result = match decided {
            Ok(PostToolDecision::Accept {
                content,
                additional_contexts,
            }) => {
                let mut r = result;
                if let Some(c) = content {
                    r.content = c;
                }
                r.additional_contexts.extend(additional_contexts);
                r
            }
            Ok(PostToolDecision::Block {
                feedback,
                additional_contexts,
            }) => {
                let text: Vec<String> = feedback
                    .iter()
                    .map(|b| match b {
                        ContentBlock::Text { text } => text.clone(),
                        other => format!("[{} content]", other.block_type()),
                    })
                    .collect();
                let joined = text.join("\n");
                let message = if joined.is_empty() {
                    "tool result blocked by post-execute policy".to_string()
                } else {
                    joined
                };
                ToolResult {
                    is_error: true,
                    content: feedback,
                    error: Some(crate::exec::ToolFailure {
                        message,
                        info: None,
                    }),
                    meta: result.meta,
                    additional_contexts,
                    concludes_turn: false,
                    value: None,
                }
            }
            Err(e) => {
                let mut r = ToolResult::from_error(e.as_ref());
                r.additional_contexts = result.additional_contexts;
                r
            }
        };
        if exec.cancel.is_cancelled() && !result.is_error {
            let contexts = std::mem::take(&mut result.additional_contexts);
            result = ToolResult::aborted();
            result.additional_contexts = contexts;
        }
        self.finish(exec, result)
    }

    /// Final stage: emit `tools/result` (contained) and return the result.
    pub fn finish(&self, exec: &ToolExecution, result: ToolResult) -> ToolResult {
        let payload = ToolResultPayload {
            exec: exec.clone(),
            result,
        };
        exec.ctx.emit::<ToolResultEvent>(&payload);
        payload.result
    }

    /// Runs every stage for one call.
    pub async fn execute(&self, exec: ToolExecution) -> ToolResult {
        match self.prepare(exec).await {
            Prepared::Dispatch(exec) => {
                let r = self.dispatch(&exec).await;
                self.finalize(&exec, r).await
            }
            Prepared::PostResult(exec, r) => self.finalize(&exec, r).await,
            Prepared::FinalResult(exec, r) => self.finish(&exec, r),
        }
    }
}

/// Wraps a plain value as JSON text for tool results that render values.
pub fn json_text(value: &Value) -> String {
    dsh_kernel::json::to_string(value)
}

/// Orders names as JavaScript sorts strings (by UTF-16 code units), as upstream lists
/// tools. For ASCII names that is byte order, compared without re-encoding.
fn utf16_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    if a.is_ascii() && b.is_ascii() {
        a.cmp(b)
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ToolOutput;

    struct Named {
        schema: ToolSchema,
    }

    impl Tool for Named {
        fn schema(&self) -> &ToolSchema {
            &self.schema
        }
        fn execute(
            &self,
            _args: Value,
            _ctx: ToolRunContext,
        ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
            let text = self.schema.description.clone();
            Box::pin(async move { Ok(ToolOutput::text(text)) })
        }
    }

    fn tool(name: &str, which: &str) -> Arc<dyn Tool> {
        Arc::new(Named {
            schema: ToolSchema {
                name: name.into(),
                description: which.into(),
                parameters: Arc::new(serde_json::json!({"type": "object"})),
            },
        })
    }

    /// Hides the tools the scoped row registered from session "narrow".
    struct HideScoped;
    impl ToolView for HideScoped {
        fn admits(&self, session: &str, owner: &str, _name: &str) -> bool {
            session != "narrow" || owner != "scoped-row"
        }
        fn mode(&self, _session: &str) -> Option<ToolsMode> {
            None
        }
    }

    #[test]
    fn a_lookup_by_name_finds_what_the_listing_shows() {
        let root = Context::new_root();
        let registry = ToolRegistry::new();
        let global = root.child("global-row");
        registry
            .register(&global, tool("read", "global read"))
            .unwrap();
        registry
            .register(&global, tool("Écrire", "global write"))
            .unwrap();
        registry
            .register(&global, tool("bash", "global bash"))
            .unwrap();
        // One name per layer.
        assert!(registry.register(&global, tool("bash", "again")).is_err());
        let inner = root.create_scope("inner").child("scoped-row");
        registry
            .register(&inner, tool("read", "scoped read"))
            .unwrap();
        registry.set_view(&root, Arc::new(HideScoped)).unwrap();

        let described = |t: Option<Arc<dyn Tool>>| t.map(|t| t.schema().description.clone());
        for (ctx, session) in [
            (&root, None),
            (&inner, None),
            (&inner, Some("narrow")),
            (&inner, Some("wide")),
        ] {
            let listed = registry.visible_in(ctx, session);
            let names: Vec<&str> = listed.iter().map(|t| t.schema().name.as_str()).collect();
            // UTF-16 order, as JavaScript sorts: uppercase ASCII before lowercase, and
            // non-ASCII after both.
            assert_eq!(names, ["bash", "read", "Écrire"]);
            for name in ["read", "bash", "Écrire", "missing"] {
                let from_list = listed.iter().find(|t| t.schema().name == name).cloned();
                assert_eq!(
                    described(registry.visible_named(ctx, session, name)),
                    described(from_list),
                    "{name} from {session:?}"
                );
            }
        }
        assert_eq!(
            described(registry.get(&inner, "read")).unwrap(),
            "scoped read"
        );
        assert_eq!(
            described(registry.visible_named(&inner, Some("narrow"), "read")).unwrap(),
            "global read"
        );
        assert_eq!(
            described(registry.get(&root, "read")).unwrap(),
            "global read"
        );
        assert_eq!(
            described(registry.get(&inner, "bash")).unwrap(),
            "global bash"
        );
    }
}
