//! The `Subagents` service (upstream `ctx.subagents`): the provider registry, one-shot
//! starts with their `subagent/start` / `subagent/end` lifecycle, and the continuation
//! manager of continuable children.

use std::sync::{Arc, OnceLock, RwLock};

use dsh_agent::{SubagentEnd, SubagentRunEnd, SubagentRunInfo, SubagentStart};
use dsh_kernel::{BoxError, Context, EffectHandle, EmitEvent, Event};
use indexmap::IndexMap;

use crate::continuation::Continuations;
use crate::descriptor::Descriptor;
use crate::types::{ProviderRef, ResolvedStart, StartRequest, SubagentRun, subagent_error};

/// `subagent/provider-added` (emit, contained): a provider was registered. Tool rows mount
/// their tool on it.
pub struct ProviderAdded;
impl Event for ProviderAdded {
    const NAME: &'static str = "subagent/provider-added";
    type Payload = ProviderRef;
}
impl EmitEvent for ProviderAdded {}

/// `subagent/provider-removed` (emit, contained): a provider was unregistered (payload: its
/// name). Tool rows unmount their tool.
pub struct ProviderRemoved;
impl Event for ProviderRemoved {
    const NAME: &'static str = "subagent/provider-removed";
    type Payload = String;
}
impl EmitEvent for ProviderRemoved {}

/// The delegation service.
pub struct Subagents {
    ctx: Context,
    providers: RwLock<IndexMap<String, ProviderRef>>,
    continuations: OnceLock<Arc<Continuations>>,
}

impl Subagents {
    pub fn new(ctx: Context) -> Arc<Self> {
        Arc::new(Self {
            ctx,
            providers: RwLock::new(IndexMap::new()),
            continuations: OnceLock::new(),
        })
    }

    /// Registers `provider` as an effect of `ctx` (its plugin); announces it.
    pub fn register_provider(
        self: &Arc<Self>,
        ctx: &Context,
        provider: ProviderRef,
    ) -> Result<EffectHandle, BoxError> {
        let name = provider.name().to_string();
        {
            let mut map = self.providers.write().unwrap_or_else(|p| p.into_inner());
            if map.contains_key(&name) {
                return Err(subagent_error(
                    "DUPLICATE_PROVIDER",
                    format!("a subagent provider named \"{name}\" is already registered"),
                ));
            }
            map.insert(name.clone(), provider.clone());
        }
        let this = Arc::downgrade(self);
        let undo_name = name.clone();
        let handle = ctx.effect("subagent provider", move || {
            if let Some(this) = this.upgrade() {
                this.providers
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .shift_remove(&undo_name);
                this.ctx.emit::<ProviderRemoved>(&undo_name);
            }
        })?;
        self.ctx.emit::<ProviderAdded>(&provider);
        Ok(handle)
    }

    pub fn provider(&self, name: &str) -> Option<ProviderRef> {
        self.providers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Registered provider names, in registration order.
    pub fn list(&self) -> Vec<String> {
        self.providers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    pub(crate) fn expect_provider(&self, name: &str) -> Result<ProviderRef, BoxError> {
        self.provider(name).ok_or_else(|| {
            subagent_error(
                "NO_PROVIDER",
                format!("no subagent provider registered for \"{name}\""),
            )
        })
    }

    /// Starts a one-shot child on provider `name`; resolves once it is published. The
    /// caller must dispose the run.
    pub async fn start(&self, name: &str, request: StartRequest) -> Result<SubagentRun, BoxError> {
        let provider = self.expect_provider(name)?;
        let caps = provider.capabilities();
        let needs = [
            (
                request.output_schema.is_some(),
                caps.output_schema,
                "outputSchema",
            ),
            (request.max_depth.is_some(), caps.depth_limit, "depthLimit"),
            (
                request.tool_filter.is_some(),
                caps.tool_filter,
                "toolFilter",
            ),
            (request.persona.is_some(), caps.persona, "persona"),
            (request.cwd.is_some(), caps.cwd, "cwd"),
        ];
        for (wanted, offered, cap) in needs {
            if wanted && !offered {
                return Err(subagent_error(
                    "UNSUPPORTED_CAPABILITY",
                    format!(
                        "subagent provider \"{}\" does not support the \"{cap}\" capability",
                        provider.name()
                    ),
                ));
            }
        }
        let descriptor = Descriptor::OneShot {
            provider: name.to_string(),
            label: request.label.clone(),
        };
        let parent = request.parent.clone();
        let mut run = provider
            .start(ResolvedStart {
                request,
                descriptor,
            })
            .await?;
        observe_run(name, parent, &mut run);
        Ok(run)
    }

    /// The continuation manager (continuable children).
    pub fn continuations(&self) -> Result<Arc<Continuations>, BoxError> {
        self.continuations.get().cloned().ok_or_else(|| {
            subagent_error(
                "CONTINUATION_UNAVAILABLE",
                "continuable subagents require the agents service",
            )
        })
    }

    pub(crate) fn set_continuations(&self, manager: Arc<Continuations>) {
        let _ = self.continuations.set(manager);
    }
}

/// Emits `subagent/start` now and `subagent/end` when the run's result settles, before
/// any awaiter of the result sees it (as upstream, whose tool result follows the end).
fn observe_run(provider: &str, parent: dsh_agent::AgentRef, run: &mut SubagentRun) {
    use futures::FutureExt;
    let info = SubagentRunInfo {
        run_id: uuid::Uuid::new_v4().to_string(),
        provider: provider.to_string(),
        id: run.id.clone(),
        parent: parent.clone(),
        child: run.local.clone(),
    };
    parent.ctx().emit::<SubagentStart>(&info);
    let result = run.result.clone();
    let end_info = info;
    let observed = async move {
        let outcome = result.await;
        let end = match &outcome {
            Ok(r) => SubagentRunEnd {
                info: end_info,
                stop_reason: r.stop_reason.as_str().to_string(),
                last_assistant_message: (!r.output.is_empty()).then(|| r.output.clone()),
            },
            Err(_) => SubagentRunEnd {
                info: end_info,
                stop_reason: "error".into(),
                last_assistant_message: None,
            },
        };
        let parent = end.info.parent.clone();
        parent.ctx().emit::<SubagentEnd>(&end);
        outcome
    }
    .boxed()
    .shared();
    run.result = observed.clone();
    // Settles (and reports) even when nobody awaits the result.
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            let _ = observed.await;
        });
    }
}
