//! The two rows: `memory` (`@deepseek-ai/dsh-memory`: the service, the prompt section, the
//! commands, proposals) and `tool-memory` (`@deepseek-ai/dsh-tool-memory`: the tools).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use dsh_agent::{AgentRef, PreStep, PreStepDecision};
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_session::{LiveSession, types};
use dsh_tools::ToolRegistry;
use serde_json::{Map, Value, json};

use crate::service::{Found, Memory, MemoryConfig};
use crate::store::Scope;
use crate::{MEMORY_CHANGE_EVENT, MEMORY_SECTION, MEMORY_SECTION_ORDER, SOURCE_KIND};

/// The `memory` row's service: its configuration and which sessions granted the model
/// memory writes.
pub struct MemoryService {
    pub config: MemoryConfig,
    granted: Mutex<HashSet<String>>,
    /// Per agent: the length of its session's log when this process last checked whether
    /// the memory section was due (only a compaction after it can make it due again).
    checked: Mutex<HashMap<String, usize>>,
    /// Proposal calls running per session (awaited when it ends).
    pending: Mutex<HashMap<String, Vec<tokio::task::JoinHandle<()>>>>,
}

impl MemoryService {
    pub fn new(config: MemoryConfig) -> Arc<Self> {
        Arc::new(Self {
            config,
            granted: Mutex::default(),
            checked: Mutex::default(),
            pending: Mutex::default(),
        })
    }

    /// The memory files seen from `cwd`.
    pub fn at(&self, cwd: &Path) -> Memory {
        Memory::new(self.config.clone(), cwd)
    }

    /// Whether the model already holds this session's yes to memory writes: granted in
    /// this process, or a model write recorded in its log (a resumed session).
    pub fn granted(&self, session: &LiveSession) -> bool {
        if self
            .granted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&session.id())
        {
            return true;
        }
        session.read(|log| {
            log.events().iter().any(|e| {
                e.event_type == MEMORY_CHANGE_EVENT
                    && e.data.get("by").and_then(Value::as_str) == Some("model")
            })
        })
    }

    /// Adds a running proposal call of session `id`.
    pub(crate) fn push_pending(&self, id: &str, task: tokio::task::JoinHandle<()>) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let list = pending.entry(id.to_string()).or_default();
        list.retain(|t| !t.is_finished());
        list.push(task);
    }

    /// Takes the proposal calls of session `id` still known.
    pub(crate) fn take_pending(&self, id: &str) -> Vec<tokio::task::JoinHandle<()>> {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
            .unwrap_or_default()
    }

    pub fn grant(&self, session: &LiveSession) {
        self.granted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session.id());
    }
}

/// The 1-based number of the session's current turn.
pub fn turn_number(session: &LiveSession) -> u64 {
    session.read(|log| log.last_turn())
}

/// Appends the `memory/change` event of one change and returns its seq.
pub fn record_change(
    session: &Arc<LiveSession>,
    action: &str,
    by: &str,
    memory: &Memory,
    found: &Found,
    extra: Map<String, Value>,
) -> Result<u64, BoxError> {
    let mut data = Map::new();
    data.insert("action".into(), json!(action));
    data.insert("by".into(), json!(by));
    data.insert("scope".into(), json!(found.scope.as_str()));
    data.insert("id".into(), json!(found.entry.id));
    data.insert("text".into(), json!(found.entry.text));
    if !found.entry.tags.is_empty() {
        data.insert("tags".into(), json!(found.entry.tags));
    }
    data.insert("path".into(), json!(memory.display_path(found.scope)));
    data.extend(extra);
    let event = session.append(MEMORY_CHANGE_EVENT, Value::Object(data), None)?;
    Ok(event.seq)
}

fn frame(body: &str) -> String {
    format!(
        "<system-reminder>\n{}\n</system-reminder>",
        body.replace("</system-reminder>", "<\\/system-reminder>")
    )
}

/// What the log says about the memory section of `agent`'s session.
struct SectionState {
    /// The last memory message is still part of what the model sees.
    visible: bool,
    /// The model has not answered yet in this session: its first step.
    first_step: bool,
    /// A compaction finished after the last memory message (after the start without one).
    compacted_since: bool,
}

fn section_state(agent: &AgentRef) -> SectionState {
    agent.session().read(|s| {
        let events = s.events();
        let last = events.iter().rev().find(|e| {
            e.is(types::USER_MESSAGE)
                && e.data.pointer("/source/kind").and_then(Value::as_str) == Some(SOURCE_KIND)
        });
        let since = last.map_or(0, |e| e.seq);
        SectionState {
            visible: last.is_some_and(|e| s.surface().nodes().contains(&e.seq)),
            first_step: !events.iter().any(|e| e.is(types::ASSISTANT_MESSAGE)),
            compacted_since: events
                .iter()
                .any(|e| e.seq > since && e.event_type == "compaction/end"),
        }
    })
}

/// Whether the section may be due before this step: not when this process already checked
/// the session and no compaction finished since (the common case, decided without reading
/// the whole log or any file). Records the check.
fn may_be_due(service: &MemoryService, agent: &AgentRef) -> bool {
    let len = agent.session().read(|s| s.events().len());
    let mut checked = service.checked.lock().unwrap_or_else(|p| p.into_inner());
    let due = match checked.get(agent.id()) {
        None => true,
        Some(&at) => agent.session().read(|s| {
            s.events()
                .get(at..)
                .is_some_and(|new| new.iter().any(|e| e.event_type == "compaction/end"))
        }),
    };
    checked.insert(agent.id().to_string(), len);
    due
}

/// The message to enter before this step, if the section is due: at the session's first
/// step, and at the first step after a compaction replaced it. Memory written meanwhile
/// waits for the next session or compaction, so the prompt prefix stays as it was.
fn due_message(service: &MemoryService, agent: &AgentRef) -> Option<Message> {
    let cwd = agent.cwd()?;
    let state = section_state(agent);
    if state.visible || !(state.first_step || state.compacted_since) {
        return None;
    }
    let memory = service.at(&cwd);
    let text = memory.prompt_text()?;
    let mut source = Map::new();
    source.insert("kind".into(), json!(SOURCE_KIND));
    // Upstream's clients know the form `recall` (material from earlier sessions).
    source.insert("form".into(), json!("recall"));
    Some(Message::user(
        vec![ContentBlock::text(frame(&text))],
        MessageSource::Other(source),
    ))
}

/// `@deepseek-ai/dsh-memory` (config: [`MemoryConfig`]).
pub struct MemoryPlugin;

impl Plugin for MemoryPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-memory"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let parsed: MemoryConfig = config.parse()?;
        if Scope::parse(&parsed.suggest_scope).is_none() {
            return Err(format!(
                "{}: row \"{}\": config field `suggestScope`: must be workspace or user (got \"{}\")",
                config.source, config.row_id, parsed.suggest_scope
            )
            .into());
        }
        if parsed.max_prompt_bytes < 256 {
            return Err(format!(
                "{}: row \"{}\": config field `maxPromptBytes`: at least 256 (got {})",
                config.source, config.row_id, parsed.max_prompt_bytes
            )
            .into());
        }
        let service = MemoryService::new(parsed);
        ctx.provide(service.clone())?;
        {
            let service = service.clone();
            ctx.on_waterfall::<PreStep>(ListenOptions::default(), move |p, next| {
                let service = service.clone();
                Box::pin(async move {
                    let decision = next.run().await?;
                    let PreStepDecision::Enter(mut messages) = decision else {
                        return Ok(decision);
                    };
                    let agent = p.agent.clone();
                    if !may_be_due(&service, &agent) {
                        return Ok(PreStepDecision::Enter(messages));
                    }
                    let due = {
                        let service = service.clone();
                        let agent = agent.clone();
                        tokio::task::spawn_blocking(move || due_message(&service, &agent))
                            .await
                            .ok()
                            .flatten()
                    };
                    if let Some(message) = due {
                        let at = p.messages.len().min(messages.len());
                        messages.insert(at, Arc::new(message));
                    }
                    Ok(PreStepDecision::Enter(messages))
                })
            })?;
        }
        {
            // A disposed agent's bookkeeping goes with it (a long-running web host).
            let service = service.clone();
            ctx.on_emit::<dsh_agent::AgentDisposed>(ListenOptions::GLOBAL, move |p| {
                let id = p.agent.id().to_string();
                service
                    .checked
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                service
                    .granted
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&p.agent.session().id());
                Ok(())
            })?;
        }
        if let Some(commands) = ctx.get::<dsh_commands::CommandRegistry>() {
            crate::commands::register(ctx, &commands, &service)?;
        }
        if service.config.suggest {
            crate::suggest::install(ctx, &service)?;
        }
        Ok(())
    }
}

/// `@deepseek-ai/dsh-tool-memory`: `remember`, `recall`, `forget` and their section.
pub struct ToolMemoryPlugin;

impl Plugin for ToolMemoryPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-memory"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        struct ToolConfig {
            #[serde(default)]
            max_recall_results: Option<u64>,
        }
        let c: ToolConfig = config.parse()?;
        let service = ctx.require::<MemoryService>()?;
        let registry = ctx.require::<ToolRegistry>()?;
        let prompt = ctx.require::<dsh_prompt::SystemPrompt>()?;
        prompt.section(
            ctx,
            MEMORY_SECTION,
            MEMORY_SECTION_ORDER,
            Arc::new(|_| crate::tools::SECTION.to_string()),
        )?;
        let cap = c.max_recall_results.unwrap_or(50).clamp(1, 500) as usize;
        for tool in crate::tools::tools(ctx, &service, cap)? {
            registry.register(ctx, tool)?;
        }
        Ok(())
    }
}
