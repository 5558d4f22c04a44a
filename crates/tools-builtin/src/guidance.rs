//! Prompt guidance: each tool contributes one short system-prompt section, named and
//! ordered as upstream (`tool:read` 100 … `tool:bash` 105). The wording is our own.
//!
//! Every plugin publishes the sections of the tools it registered as its own service
//! (one service type per plugin, so unloading a plugin withdraws exactly its sections);
//! [`tool_guidance`] collects whatever is currently loaded.

use std::marker::PhantomData;
use std::sync::Arc;

use dsh_kernel::{BoxError, Context};

/// One system-prompt section contributed by a tool.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptSection {
    /// Upstream's section name, e.g. `tool:read`.
    pub name: &'static str,
    /// Upstream's order (sections are sorted ascending).
    pub order: u32,
    pub text: String,
}

impl PromptSection {
    pub(crate) fn new(name: &'static str, order: u32, text: impl Into<String>) -> Self {
        Self {
            name,
            order,
            text: text.into(),
        }
    }
}

/// The sections one plugin contributed (service key per plugin marker `M`).
pub(crate) struct Guidance<M: Send + Sync + 'static> {
    sections: Vec<PromptSection>,
    _plugin: PhantomData<fn() -> M>,
}

impl<M: Send + Sync + 'static> Guidance<M> {
    /// Publishes the sections; a second instance of the same plugin (loaded again in
    /// another composition layer) keeps the first one's sections.
    pub(crate) fn publish(ctx: &Context, sections: Vec<PromptSection>) -> Result<(), BoxError> {
        if ctx.get::<Self>().is_some() {
            return Ok(());
        }
        // Also contribute the guidance to the system prompt, as effects of this plugin.
        if let Some(prompt) = ctx.get::<dsh_prompt::SystemPrompt>() {
            for s in &sections {
                let text = s.text.clone();
                prompt.section(
                    ctx,
                    s.name,
                    f64::from(s.order),
                    Arc::new(move |_| text.clone()),
                )?;
            }
        }
        ctx.provide(Arc::new(Self {
            sections,
            _plugin: PhantomData,
        }))?;
        Ok(())
    }
}

pub(crate) struct BashGuidance;
pub(crate) struct FsGuidance;
pub(crate) struct SearchGuidance;

/// The prompt sections of every builtin tool currently loaded in `ctx`'s runtime, sorted
/// by order (then name).
pub fn tool_guidance(ctx: &Context) -> Vec<PromptSection> {
    let mut out = Vec::new();
    let mut take =
        |sections: Option<&[PromptSection]>| out.extend(sections.into_iter().flatten().cloned());
    take(
        ctx.get::<Guidance<FsGuidance>>()
            .as_deref()
            .map(|g| g.sections.as_slice()),
    );
    take(
        ctx.get::<Guidance<SearchGuidance>>()
            .as_deref()
            .map(|g| g.sections.as_slice()),
    );
    take(
        ctx.get::<Guidance<BashGuidance>>()
            .as_deref()
            .map(|g| g.sections.as_slice()),
    );
    out.sort_by(|a, b| a.order.cmp(&b.order).then(a.name.cmp(b.name)));
    out
}
