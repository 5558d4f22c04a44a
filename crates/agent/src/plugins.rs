//! The core plugins: services (`llm`, `session`, `tools`, `system-prompt`, `agent`) and the
//! default driver (`agent-loop`), plus the "model-visible means logged" invariant.

use std::sync::Arc;

use dsh_kernel::{BoxError, Catalog, Context, HarnessError, ListenOptions, Plugin, PluginConfig};
use dsh_llm::{LlmRuntime, LlmStreamEvent};
use dsh_prompt::{PromptConfig, SystemPrompt};
use dsh_session::{SessionStore, system_clock};
use dsh_tools::ToolRegistry;
use serde::Deserialize;

use crate::driver::{
    DEFAULT_MAX_IDENTICAL_FAILING_CALLS, DEFAULT_MAX_STEPS_PER_TURN,
    DEFAULT_MAX_TOOL_CALLS_PER_RESPONSE, LoopConfig, LoopFactory, Services,
};
use crate::registry::Agents;

/// `@deepseek-ai/dsh-llm`: the adapter registry and the `llm/stream` waterfall.
pub struct LlmPlugin;
impl Plugin for LlmPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-llm"
    }
    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.provide(LlmRuntime::new(ctx.with_scope(None)))?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-session`: the live session store.
pub struct SessionPlugin;
impl Plugin for SessionPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-session"
    }
    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.provide(SessionStore::new(system_clock()))?;
        Ok(())
    }
}

#[derive(Deserialize, Default)]
struct ToolsConfig {
    mode: Option<String>,
}

/// `@deepseek-ai/dsh-tools`: the tool registry and its presentation `mode` (`native`,
/// `code`, `both`; `code`/`both` present `run_code` once a code runtime row mounts it).
pub struct ToolsPlugin;
impl Plugin for ToolsPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tools"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "maxParallelSubCalls",
            "code mode's run_code overlaps the tool calls it makes as their tools allow (reads together, writes alone), without a numeric cap",
        )]
    }
    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: ToolsConfig = config.parse()?;
        let mode = match c.mode.as_deref() {
            None => dsh_tools::ToolsMode::Native,
            Some(text) => dsh_tools::ToolsMode::parse(text).ok_or_else(|| {
                format!("tools mode \"{text}\" is not one of \"native\", \"code\", \"both\"")
            })?,
        };
        let registry = ToolRegistry::new();
        registry.set_mode(mode);
        ctx.provide(registry)?;
        ctx.provide(dsh_tools::ClientFileRoutes::new())?;
        ctx.provide(dsh_tools::ClientTerminalRoutes::new())?;
        ctx.provide(dsh_tools::AskAtOnce::new())?;
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SystemPromptConfig {
    /// The 0.1 spelling of `personaPrefix`.
    #[serde(default)]
    persona: Option<String>,
    #[serde(default)]
    persona_prefix: Option<String>,
    #[serde(default)]
    persona_suffix: Option<String>,
    #[serde(default = "yes")]
    include_harness_identity: bool,
    /// `false`: no runtime-context snapshot messages (upstream's spine option of that name).
    #[serde(default = "yes")]
    include_runtime_context: bool,
    #[serde(default)]
    tool_order: Option<Vec<String>>,
}

fn yes() -> bool {
    true
}

/// `@deepseek-ai/dsh-system-prompt`: sections, contexts, variables, tool order.
pub struct SystemPromptPlugin;
impl Plugin for SystemPromptPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-system-prompt"
    }
    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: SystemPromptConfig = config.parse()?;
        let persona = match (c.persona, c.persona_prefix) {
            (Some(old), Some(new)) if old != new => {
                return Err(
                    "system-prompt: both persona (the 0.1 name) and personaPrefix are set; keep only personaPrefix"
                        .into(),
                );
            }
            (old, new) => new.or(old).unwrap_or_default(),
        };
        let prompt = SystemPrompt::new(PromptConfig {
            persona,
            persona_suffix: c.persona_suffix.unwrap_or_default(),
            include_harness_identity: c.include_harness_identity,
            tool_order: c.tool_order,
        });
        ctx.provide(prompt.clone())?;
        if !c.include_runtime_context {
            prompt.suppress_runtime_context(ctx)?;
        }
        Ok(())
    }
}

/// `@deepseek-ai/dsh-agent`: the agent registry.
pub struct AgentPlugin;
impl Plugin for AgentPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-agent"
    }
    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.provide(Agents::new())?;
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AgentLoopConfig {
    #[serde(default = "ten")]
    max_parallel_tool_calls: usize,
    #[serde(default)]
    agents: Vec<serde_json::Value>,
    #[serde(default)]
    check_invariants: Option<bool>,
    /// Loop bounds of this build (upstream has none): see [`LoopConfig`].
    #[serde(default)]
    max_steps_per_turn: Option<u64>,
    #[serde(default)]
    max_tool_calls_per_response: Option<u64>,
    #[serde(default)]
    max_identical_failing_calls: Option<u64>,
}

/// A configured bound: absent means `default`; zero is refused with the key's name.
fn bound(value: Option<u64>, key: &str, default: u64) -> Result<u64, BoxError> {
    match value {
        None => Ok(default),
        Some(0) => Err(format!(
            "@deepseek-ai/dsh-agent-loop: {key} must be a positive integer (got 0)"
        )
        .into()),
        Some(n) => Ok(n),
    }
}

fn ten() -> usize {
    10
}

/// `@deepseek-ai/dsh-agent-loop`: the default driver.
pub struct AgentLoopPlugin;
impl Plugin for AgentLoopPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-agent-loop"
    }
    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: AgentLoopConfig = config.parse()?;
        if !c.agents.is_empty() {
            return Err(
                "declarative `agents` are not supported yet; create agents from a frontend".into(),
            );
        }
        let services = Services {
            llm: ctx.require::<LlmRuntime>()?,
            tools: ctx.require::<ToolRegistry>()?,
            prompt: ctx.require::<SystemPrompt>()?,
            agents: ctx.require::<Agents>()?,
            sessions: ctx.require::<SessionStore>()?,
        };
        let tools = services.tools.clone();
        services.prompt.tools(
            ctx,
            Arc::new(move |a| {
                let session = a.session.as_ref().map(|s| s.id());
                tools.schemas_in(&a.ctx, session.as_deref())
            }),
        )?;
        let as_count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        let config = LoopConfig {
            max_parallel_tool_calls: c.max_parallel_tool_calls.max(1),
            check_invariants: c.check_invariants.unwrap_or(cfg!(debug_assertions)),
            max_steps_per_turn: bound(
                c.max_steps_per_turn,
                "maxStepsPerTurn",
                DEFAULT_MAX_STEPS_PER_TURN,
            )?,
            max_tool_calls_per_response: as_count(bound(
                c.max_tool_calls_per_response,
                "maxToolCallsPerResponse",
                DEFAULT_MAX_TOOL_CALLS_PER_RESPONSE as u64,
            )?),
            max_identical_failing_calls: as_count(bound(
                c.max_identical_failing_calls,
                "maxIdenticalFailingCalls",
                DEFAULT_MAX_IDENTICAL_FAILING_CALLS as u64,
            )?),
        };
        if config.check_invariants {
            install_request_invariant(ctx, services.sessions.clone())?;
        }
        services
            .agents
            .set_factory(ctx, Arc::new(LoopFactory::new(services.clone(), config)))?;
        Ok(())
    }
}

/// "Model-visible means logged": before any loop-built request reaches an adapter, its
/// messages must equal `derive_messages()` and its model/system/limits/tools the latest
/// logged `request/header`. A violation fails the request (the turn ends with an error).
pub fn install_request_invariant(
    ctx: &Context,
    sessions: Arc<SessionStore>,
) -> Result<(), BoxError> {
    ctx.on_waterfall::<LlmStreamEvent>(
        ListenOptions {
            prepend: true,
            global: true,
        },
        move |req, next| {
            let sessions = sessions.clone();
            Box::pin(async move {
                let options = &req.options;
                if options.agent_loop_request {
                    let violation = |what: String| -> BoxError {
                        Box::new(HarnessError::new(
                            "InvariantError",
                            "INVARIANT",
                            format!(
                                "invariant violated by \"@deepseek-ai/dsh-agent-loop\": {what}"
                            ),
                        ))
                    };
                    let id = options
                        .session_id
                        .as_deref()
                        .ok_or_else(|| violation("request has no sessionId".into()))?;
                    let session = sessions
                        .get(id)
                        .ok_or_else(|| violation(format!("session \"{id}\" is not live")))?;
                    let derived = session.derive_messages();
                    let same = derived.len() == options.messages.len()
                        && derived.iter().zip(&options.messages).all(|(a, b)| a == b);
                    if !same {
                        return Err(violation(
                            "request messages differ from the session's derived history".into(),
                        ));
                    }
                    let header =
                        session
                            .read(|s| s.request_header().cloned())
                            .ok_or_else(|| {
                                violation("no request/header was logged before the request".into())
                            })?;
                    let c = &options.config;
                    if header.config.model != c.model
                        || header.config.max_tokens != c.max_tokens
                        || header.config.temperature != c.temperature
                        || header.config.stop != c.stop
                        || header.system != options.system
                        || header.tools.clone().unwrap_or_default()
                            != options.tools.clone().unwrap_or_default()
                    {
                        return Err(violation(
                            "request config/system/tools differ from the logged request/header"
                                .into(),
                        ));
                    }
                }
                next.run().await
            })
        },
    )?;
    Ok(())
}

/// Adds the core plugins to `catalog`.
pub fn register_core(catalog: &mut Catalog) {
    catalog
        .register(LlmPlugin)
        .register(SessionPlugin)
        .register(ToolsPlugin)
        .register(SystemPromptPlugin)
        .register(AgentPlugin)
        .register(AgentLoopPlugin);
}
