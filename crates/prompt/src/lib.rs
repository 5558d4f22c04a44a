//! System-prompt assembly (`ctx.systemPrompt`).
//!
//! * **Sections** (static per agent composition) render, in `order`, into the system prompt
//!   that is logged in `request/header` — it stays byte-stable so provider prefix caches hold.
//! * **Contexts** (dynamic facts) render into a runtime-context snapshot that the loop appends
//!   as a user message only when it changed.
//! * **Variables** (`{{model}}`, `{{cwd}}`, …) are interpolated strictly: an unknown or unset
//!   variable is an error, never silently empty.
//! * **Tool providers** contribute schemas; the result is ordered by name or by `toolOrder`.
//!
//! Every registration is scoped to the registering context and is an effect of it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use dsh_kernel::{BoxError, BoxFuture, Context, EffectHandle, Event, ScopeId, WaterfallEvent};
use dsh_llm::ToolSchema;
use dsh_session::LiveSession;

/// The identity line every composition starts with unless disabled.
pub const HARNESS_IDENTITY: &str = "You are an AI agent running on DeepSeek Harness.";
/// The preamble of a runtime-context snapshot message. Recorded behaviour: the model can read
/// a snapshot back through `session_event_read`, and the `session-query-spill` conformance
/// scenario compares the bytes it returns.
pub const CONTEXT_PREAMBLE: &str =
    "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.";
/// The snapshot text when every context section went away.
pub const CONTEXT_CLEARED: &str =
    "Runtime context: nothing applies now; disregard earlier runtime-context snapshots.";
/// The reserved tool-order marker.
pub const UNLISTED_TOOLS: &str = "<unlisted-tools>";

/// Who is being assembled for.
#[derive(Clone)]
pub struct AssembleContext {
    /// The agent's scoped context.
    pub ctx: Context,
    pub session: Option<Arc<LiveSession>>,
    pub provider: String,
    pub model: String,
    pub cwd: Option<PathBuf>,
}

pub type TextFn = Arc<dyn Fn(&AssembleContext) -> String + Send + Sync>;
pub type VariableFn = Arc<dyn Fn(&AssembleContext) -> Option<String> + Send + Sync>;
pub type ToolsFn = Arc<dyn Fn(&AssembleContext) -> Vec<ToolSchema> + Send + Sync>;

#[derive(Clone)]
struct Named {
    id: u64,
    scope: Option<ScopeId>,
    name: String,
    order: f64,
    text: TextFn,
}

#[derive(Default)]
struct Registry {
    sections: Vec<Named>,
    contexts: Vec<Named>,
    variables: Vec<(u64, Option<ScopeId>, String, VariableFn)>,
    tools: Vec<(u64, Option<ScopeId>, ToolsFn)>,
    suppressors: Vec<(u64, Option<ScopeId>)>,
}

/// Config of the system-prompt plugin.
#[derive(Clone, Debug, Default)]
pub struct PromptConfig {
    pub persona: String,
    /// Upstream 0.2's `personaSuffix`: a deployment's text after every other section.
    pub persona_suffix: String,
    pub include_harness_identity: bool,
    pub tool_order: Option<Vec<String>>,
}

/// One assembled section, text not yet interpolated.
#[derive(Clone, Debug, PartialEq)]
pub struct AssembledSection {
    pub name: String,
    pub text: String,
}

/// The result of assembly for one proposed step.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptAssembly {
    pub sections: Vec<AssembledSection>,
    pub contexts: Vec<AssembledSection>,
    pub tools: Vec<ToolSchema>,
    pub variables: HashMap<String, Option<String>>,
}

/// Assembly or rendering failed (the turn fails before any request).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PromptError {
    #[error("system prompt: unknown variable \"{0}\" in {{{{{0}}}}}")]
    UnknownVariable(String),
    #[error("system prompt: variable \"{0}\" has no value")]
    UnsetVariable(String),
    #[error("system prompt: malformed placeholder near \"{0}\"")]
    Malformed(String),
    #[error("system prompt: toolOrder names unknown tool \"{0}\"")]
    UnknownToolInOrder(String),
}

/// `system-prompt/assemble` (waterfall, scoped to the agent): listeners may rewrite the
/// assembly. Default: the assembly built from the registrations.
pub struct AssembleEvent;
/// Payload of [`AssembleEvent`].
pub struct AssemblePayload {
    pub assembly: PromptAssembly,
    pub context: AssembleContext,
}
impl Event for AssembleEvent {
    const NAME: &'static str = "system-prompt/assemble";
    type Payload = AssemblePayload;
}
impl WaterfallEvent for AssembleEvent {
    type Output = PromptAssembly;
}

/// The `ctx.systemPrompt` service.
pub struct SystemPrompt {
    config: PromptConfig,
    registry: RwLock<Registry>,
    next_id: AtomicU64,
}

fn admits(scope: Option<ScopeId>, ctx: &Context) -> bool {
    match (scope, ctx.scope()) {
        (None, _) => true,
        (Some(s), Some(c)) => c.admits(s),
        (Some(_), None) => false,
    }
}

/// Chain position: global = 0, farther ancestors lower than nearer ones.
fn depth(scope: Option<ScopeId>, ctx: &Context) -> usize {
    match (scope, ctx.scope()) {
        (Some(s), Some(c)) => c.chain().len() - c.chain().iter().position(|x| *x == s).unwrap_or(0),
        _ => 0,
    }
}

impl SystemPrompt {
    pub fn new(config: PromptConfig) -> Arc<Self> {
        let this = Arc::new(Self {
            config,
            registry: RwLock::default(),
            next_id: AtomicU64::new(1),
        });
        {
            let mut reg = this.registry.write().unwrap_or_else(|p| p.into_inner());
            if this.config.include_harness_identity {
                reg.sections.push(Named {
                    id: 0,
                    scope: None,
                    name: "harness:identity".into(),
                    order: -100.0,
                    text: Arc::new(|_| HARNESS_IDENTITY.to_string()),
                });
            }
            let persona = this.config.persona.clone();
            reg.sections.push(Named {
                id: 0,
                scope: None,
                name: "deployment:persona".into(),
                order: 0.0,
                text: Arc::new(move |_| persona.clone()),
            });
            let suffix = this.config.persona_suffix.clone();
            if !suffix.is_empty() {
                reg.sections.push(Named {
                    id: 0,
                    scope: None,
                    name: "deployment:persona-suffix".into(),
                    // Last: upstream 0.2 places it after every other section.
                    order: 10_200.0,
                    text: Arc::new(move |_| suffix.clone()),
                });
            }
        }
        this
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn undo(self: &Arc<Self>, ctx: &Context, id: u64) -> Result<EffectHandle, BoxError> {
        let this = Arc::downgrade(self);
        Ok(ctx.effect("prompt registration", move || {
            if let Some(this) = this.upgrade() {
                let mut r = this.registry.write().unwrap_or_else(|p| p.into_inner());
                r.sections.retain(|n| n.id != id);
                r.contexts.retain(|n| n.id != id);
                r.variables.retain(|v| v.0 != id);
                r.tools.retain(|t| t.0 != id);
                r.suppressors.retain(|s| s.0 != id);
            }
        })?)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.registry.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a system-prompt section (a scoped one shadows a same-named outer one).
    pub fn section(
        self: &Arc<Self>,
        ctx: &Context,
        name: &str,
        order: f64,
        text: TextFn,
    ) -> Result<EffectHandle, BoxError> {
        self.register_text(ctx, name, order, text, |r| &mut r.sections)
    }

    /// Registers a runtime-context section (rendered into the snapshot message).
    pub fn context(
        self: &Arc<Self>,
        ctx: &Context,
        name: &str,
        order: f64,
        text: TextFn,
    ) -> Result<EffectHandle, BoxError> {
        self.register_text(ctx, name, order, text, |r| &mut r.contexts)
    }

    /// Adds a named text to one of the registry's lists, undone with `ctx`'s scope.
    fn register_text(
        self: &Arc<Self>,
        ctx: &Context,
        name: &str,
        order: f64,
        text: TextFn,
        list: fn(&mut Registry) -> &mut Vec<Named>,
    ) -> Result<EffectHandle, BoxError> {
        let id = self.id();
        let scope = ctx.scope().map(|s| s.id());
        list(&mut self.write()).push(Named {
            id,
            scope,
            name: name.into(),
            order,
            text,
        });
        self.undo(ctx, id)
    }

    /// Registers a variable provider (`name` must match `^[a-z][a-z0-9_]*$`).
    pub fn variable(
        self: &Arc<Self>,
        ctx: &Context,
        name: &str,
        provider: VariableFn,
    ) -> Result<EffectHandle, BoxError> {
        let valid = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(format!("invalid prompt variable name \"{name}\"").into());
        }
        let id = self.id();
        self.write()
            .variables
            .push((id, ctx.scope().map(|s| s.id()), name.into(), provider));
        self.undo(ctx, id)
    }

    /// Registers a tool-schema provider.
    pub fn tools(
        self: &Arc<Self>,
        ctx: &Context,
        provider: ToolsFn,
    ) -> Result<EffectHandle, BoxError> {
        let id = self.id();
        self.write()
            .tools
            .push((id, ctx.scope().map(|s| s.id()), provider));
        self.undo(ctx, id)
    }

    /// Suppresses runtime-context snapshots for `ctx`'s scope.
    pub fn suppress_runtime_context(
        self: &Arc<Self>,
        ctx: &Context,
    ) -> Result<EffectHandle, BoxError> {
        let id = self.id();
        self.write()
            .suppressors
            .push((id, ctx.scope().map(|s| s.id())));
        self.undo(ctx, id)
    }

    fn merged(items: &[Named], ctx: &Context) -> Vec<Named> {
        // Registration order; a nearer scope shadows the same name in place.
        let mut out: Vec<(Named, usize)> = Vec::new();
        for n in items.iter().filter(|n| admits(n.scope, ctx)) {
            let d = depth(n.scope, ctx);
            match out.iter_mut().find(|(o, _)| o.name == n.name) {
                Some(slot) if d >= slot.1 => *slot = (n.clone(), d),
                Some(_) => {}
                None => out.push((n.clone(), d)),
            }
        }
        let mut v: Vec<Named> = out.into_iter().map(|(n, _)| n).collect();
        v.sort_by(|a, b| {
            a.order
                .partial_cmp(&b.order)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        v
    }

    /// Builds the assembly for `context` and runs the `system-prompt/assemble` waterfall.
    pub async fn assemble(&self, context: AssembleContext) -> Result<PromptAssembly, BoxError> {
        let assembly = {
            let reg = self.registry.read().unwrap_or_else(|p| p.into_inner());
            let ctx = &context.ctx;
            let suppressed = reg.suppressors.iter().any(|(_, s)| admits(*s, ctx));
            let mut variables: HashMap<String, Option<String>> = HashMap::new();
            let mut vars: Vec<_> = reg.variables.iter().filter(|v| admits(v.1, ctx)).collect();
            vars.sort_by_key(|v| depth(v.1, ctx));
            for (_, _, name, provider) in vars {
                variables.insert(name.clone(), provider(&context));
            }
            let sections = Self::merged(&reg.sections, ctx)
                .into_iter()
                .map(|n| AssembledSection {
                    text: (n.text)(&context),
                    name: n.name,
                })
                .collect();
            let contexts = if suppressed {
                Vec::new()
            } else {
                Self::merged(&reg.contexts, ctx)
                    .into_iter()
                    .map(|n| AssembledSection {
                        text: (n.text)(&context),
                        name: n.name,
                    })
                    .collect()
            };
            let mut schemas = Vec::new();
            for (_, scope, provider) in &reg.tools {
                if admits(*scope, ctx) {
                    schemas.extend(provider(&context));
                }
            }
            let tools = order_tools(schemas, self.config.tool_order.as_deref())?;
            PromptAssembly {
                sections,
                contexts,
                tools,
                variables,
            }
        };
        let payload = AssemblePayload { assembly, context };
        let default = |p: &AssemblePayload| -> BoxFuture<'_, Result<PromptAssembly, BoxError>> {
            let a = p.assembly.clone();
            Box::pin(async move { Ok(a) })
        };
        payload
            .context
            .ctx
            .clone()
            .waterfall::<AssembleEvent, _>(&payload, &default)
            .await
    }
}

/// Orders tool schemas: by name (UTF-16 order) or by `tool_order` with the
/// `<unlisted-tools>` marker standing for every other tool, sorted by name.
pub fn order_tools(
    mut schemas: Vec<ToolSchema>,
    tool_order: Option<&[String]>,
) -> Result<Vec<ToolSchema>, PromptError> {
    schemas.sort_by(|a, b| a.name.encode_utf16().cmp(b.name.encode_utf16()));
    let Some(order) = tool_order else {
        return Ok(schemas);
    };
    for name in order {
        if name != UNLISTED_TOOLS && !schemas.iter().any(|s| &s.name == name) {
            return Err(PromptError::UnknownToolInOrder(name.clone()));
        }
    }
    let listed = |n: &str| order.iter().any(|o| o == n);
    let mut out = Vec::with_capacity(schemas.len());
    let mut placed_rest = false;
    for name in order {
        if name == UNLISTED_TOOLS {
            out.extend(schemas.iter().filter(|s| !listed(&s.name)).cloned());
            placed_rest = true;
        } else if let Some(s) = schemas.iter().find(|s| &s.name == name) {
            out.push(s.clone());
        }
    }
    if !placed_rest {
        out.extend(schemas.iter().filter(|s| !listed(&s.name)).cloned());
    }
    Ok(out)
}

/// Strict `{{name}}` interpolation. A `{{` with no later `}}` is literal; a `{{` that does
/// not form a valid group while a `}}` follows is an error; values are not rescanned.
pub fn interpolate(
    text: &str,
    variables: &HashMap<String, Option<String>>,
) -> Result<String, PromptError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            break;
        };
        let name = &after[..end];
        let valid = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(PromptError::Malformed(format!(
                "{{{{{}",
                &after[..end.min(20)]
            )));
        }
        let value = match variables.get(name) {
            None => return Err(PromptError::UnknownVariable(name.into())),
            Some(None) => return Err(PromptError::UnsetVariable(name.into())),
            Some(Some(v)) => v,
        };
        out.push_str(&rest[..start]);
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The rendered system prompt: interpolated sections, empty ones dropped, joined by a blank line.
pub fn render_prompt(assembly: &PromptAssembly) -> Result<String, PromptError> {
    let mut parts = Vec::new();
    for s in &assembly.sections {
        let text = interpolate(&s.text, &assembly.variables)?;
        if !text.is_empty() {
            parts.push(text);
        }
    }
    Ok(parts.join("\n\n"))
}

/// Interpolated, non-empty context sections.
pub fn render_context_sections(
    assembly: &PromptAssembly,
) -> Result<Vec<AssembledSection>, PromptError> {
    let mut out = Vec::new();
    for s in &assembly.contexts {
        let text = interpolate(&s.text, &assembly.variables)?;
        if !text.is_empty() {
            out.push(AssembledSection {
                name: s.name.clone(),
                text,
            });
        }
    }
    Ok(out)
}

/// `""` without sections, else the preamble and the section texts.
pub fn join_context_sections(sections: &[AssembledSection]) -> String {
    if sections.is_empty() {
        return String::new();
    }
    let mut out = CONTEXT_PREAMBLE.to_string();
    for s in sections {
        out.push_str("\n\n");
        out.push_str(&s.text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn vars(pairs: &[(&str, Option<&str>)]) -> HashMap<String, Option<String>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_owned)))
            .collect()
    }

    #[test]
    fn interpolation_is_strict() {
        let v = vars(&[("model", Some("m1")), ("cwd", None)]);
        assert_eq!(
            interpolate("use {{model}} now", &v),
            Ok("use m1 now".into())
        );
        assert_eq!(interpolate("lone {{ brace", &v), Ok("lone {{ brace".into()));
        assert_eq!(
            interpolate("{{cwd}}", &v),
            Err(PromptError::UnsetVariable("cwd".into()))
        );
        assert_eq!(
            interpolate("{{nope}}", &v),
            Err(PromptError::UnknownVariable("nope".into()))
        );
        assert!(matches!(
            interpolate("{{ model }}", &v),
            Err(PromptError::Malformed(_))
        ));
        assert_eq!(
            interpolate("{{model}}{{model}}", &vars(&[("model", Some("{{x}}"))])),
            Ok("{{x}}{{x}}".into())
        );
    }

    fn schema(name: &str) -> ToolSchema {
        ToolSchema {
            name: name.into(),
            description: String::new(),
            parameters: serde_json::json!({}).into(),
        }
    }

    #[test]
    fn tools_sort_by_name_or_follow_tool_order() {
        let names = |v: Vec<ToolSchema>| v.into_iter().map(|s| s.name).collect::<Vec<_>>();
        let all = || {
            vec![
                schema("write"),
                schema("bash"),
                schema("read"),
                schema("Zed"),
            ]
        };
        assert_eq!(
            names(order_tools(all(), None).unwrap()),
            ["Zed", "bash", "read", "write"]
        );
        let order: Vec<String> = vec!["read".into(), UNLISTED_TOOLS.into(), "bash".into()];
        assert_eq!(
            names(order_tools(all(), Some(&order)).unwrap()),
            ["read", "Zed", "write", "bash"]
        );
        assert!(order_tools(all(), Some(&["nope".to_string()])).is_err());
    }

    #[tokio::test]
    async fn sections_sort_by_order_and_scoped_ones_shadow() {
        let root = Context::new_root();
        let sp = SystemPrompt::new(PromptConfig {
            persona: "P {{model}}".into(),
            persona_suffix: String::new(),
            include_harness_identity: true,
            tool_order: None,
        });
        sp.section(&root, "tool:b", 105.0, Arc::new(|_| "B".into()))
            .unwrap();
        sp.section(&root, "tool:a", 100.0, Arc::new(|_| "A".into()))
            .unwrap();
        let agent = root.create_scope("agent");
        sp.section(&agent, "tool:a", 100.0, Arc::new(|_| "A-scoped".into()))
            .unwrap();
        sp.variable(&root, "model", Arc::new(|c| Some(c.model.clone())))
            .unwrap();
        let ac = |ctx: &Context| AssembleContext {
            ctx: ctx.clone(),
            session: None,
            provider: "p".into(),
            model: "m".into(),
            cwd: None,
        };
        let a = sp.assemble(ac(&agent)).await.unwrap();
        assert_eq!(
            render_prompt(&a).unwrap(),
            format!("{HARNESS_IDENTITY}\n\nP m\n\nA-scoped\n\nB")
        );
        let g = sp.assemble(ac(&root)).await.unwrap();
        assert_eq!(
            render_prompt(&g).unwrap(),
            format!("{HARNESS_IDENTITY}\n\nP m\n\nA\n\nB")
        );
        agent.dispose();
        let after = sp.assemble(ac(&root.create_scope("other"))).await.unwrap();
        assert_eq!(
            render_prompt(&after).unwrap(),
            format!("{HARNESS_IDENTITY}\n\nP m\n\nA\n\nB")
        );
    }
}
