//! Continuable children: durable child conversations the parent starts in the background
//! and continues with `send_message`. Each resident child is an *activation* that lives
//! until the child is quiescent (idle, no accepted input waiting, no live continuable
//! children of its own); then it is disposed and its parent gets a settlement notice. A
//! later message cold-resumes the child from its log.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use dsh_agent::{
    AgentOptions, AgentRef, AgentSource, AgentStatus, Agents, CreateAgent, InboxClaimed,
    InboxDiscarded, SubagentEnd, SubagentRunEnd, SubagentRunInfo, SubagentStart,
    fold_consumed_work,
};
use dsh_kernel::{BoxError, BoxFuture, Context, EffectHandle, ListenOptions, error_chain};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_persistence::SessionFiles;
use dsh_prompt::SystemPrompt;
use dsh_session::{CancelCause, Event, EventType, LiveSession, SurfaceKeyOrder};
use futures::FutureExt;
use futures::future::Shared;
use serde_json::{Map, Value};
use tokio::sync::Notify;

use crate::child::{
    DelegatedPolicy, child_meta, child_options, compose_child, parent_cwd, resolve_child_depth,
};
use crate::descriptor::{DESCRIPTOR_EVENT, Descriptor, fold_first};
use crate::output::final_assistant_output;
use crate::service::Subagents;
use crate::types::{StartRequest, StopReason, subagent_error};

mod resume;
mod settle;

use settle::watch;

/// Test-only hooks a replay fixture provides (upstream's `subagent-durability-failure`
/// fixture in its continuable mode): a recorded transcript names its child by a fixed
/// placeholder id, and its unknown-id lookup must not overtake earlier deliveries.
pub struct ContinuationHooks {
    /// Maps the child id a delivery names to the id actually delivered to.
    pub remap: Box<dyn Fn(&str) -> String + Send + Sync>,
    /// Awaited before a cold lookup of the given id reads storage.
    pub before_lookup: LookupFence,
}

/// See [`ContinuationHooks::before_lookup`].
pub type LookupFence = Box<dyn Fn(&str) -> BoxFuture<'static, ()> + Send + Sync>;

/// Installs something in every continuable child's scope (the `report` tool).
pub type SetupContribution = Arc<dyn Fn(&Context) -> Result<(), BoxError> + Send + Sync>;

/// Who asks to interrupt a child.
pub enum InterruptAuthority {
    /// A live ancestor agent (the `interrupt_agent` tool).
    Ancestor(AgentRef),
    /// The user, through a frontend showing the child of `parent_session`.
    User { parent_session: String },
}

/// How a report reaches the parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportDelivery {
    /// At the parent's next step, waking it when idle.
    NextStep,
    /// Injected for the parent's next step, without waking it.
    Quiet,
}

/// A request to start a continuable child.
pub struct ContinuableStart {
    pub provider: String,
    pub label: String,
    pub request: StartRequest,
}

type Disposal = Shared<BoxFuture<'static, Result<(), String>>>;

struct Activation {
    child_id: String,
    parent_session: String,
    agent: AgentRef,
    /// The child and its live lineage at materialization (authority for interrupts).
    ancestry: Vec<AgentRef>,
    owned: Mutex<HashSet<String>>,
    /// Messages accepted into the child's inbox and not yet claimed or discarded.
    accepted: Mutex<HashSet<String>>,
    /// Some delivery was accepted: the parent is owed a settlement notice.
    announced: AtomicBool,
    poke: Notify,
    disposal: Mutex<Option<Disposal>>,
    info: SubagentRunInfo,
    /// Where this activation's epoch starts in the child's log.
    boundary: AtomicU64,
}

impl Activation {
    fn disposing(&self) -> bool {
        self.disposal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    fn wake(&self) {
        self.poke.notify_one();
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ActivationState {
    Running,
    Waiting,
    Settled,
}

#[derive(Default)]
struct State {
    activations: HashMap<String, Arc<Activation>>,
    draining: bool,
    /// Agents whose continuable descendants are being drained (host teardown).
    closing: HashSet<String>,
}

/// The continuation manager.
pub struct Continuations {
    me: Weak<Continuations>,
    /// Children are created from this unscoped context.
    ctx: Context,
    agents: Arc<Agents>,
    prompt: Arc<SystemPrompt>,
    subagents: Weak<Subagents>,
    state: Mutex<State>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    setups: RwLock<Vec<(u64, SetupContribution)>>,
    next_setup: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The opening line of a settlement notice.
pub fn settlement_summary(child_id: &str, stop: StopReason) -> String {
    let subject = format!("Background subagent {child_id}");
    match stop {
        StopReason::Completed => {
            format!("{subject} is done and stays idle until you send it another message.")
        }
        StopReason::Aborted => format!("{subject} was stopped before it finished."),
        StopReason::MaxTokens => format!("{subject} ran out of room before it finished."),
        StopReason::Refusal => format!("{subject} declined the task."),
        StopReason::Error => format!("{subject} failed before it finished."),
    }
}

/// The settlement notice a parent receives.
pub fn settlement_notice(
    child_id: &str,
    stop: StopReason,
    output: Option<Vec<ContentBlock>>,
) -> Message {
    let summary = settlement_summary(child_id, stop);
    let mut content = vec![ContentBlock::text(summary.clone())];
    match output {
        Some(blocks) => {
            content.push(ContentBlock::text("Its closing message:"));
            content.extend(blocks);
        }
        None => content.push(ContentBlock::text("It left no closing message.")),
    }
    let mut source = Map::new();
    source.insert("kind".into(), Value::from("subagent-settled"));
    source.insert("form".into(), Value::from("notice"));
    source.insert(
        "summary".into(),
        Value::from(dsh_jobs::bound_summary(&summary)),
    );
    source.insert("senderSessionId".into(), Value::from(child_id));
    Message::user(content, MessageSource::Other(source))
}

/// The source of a parent's later message to its child.
pub fn coordinator_source(parent_session: &str) -> MessageSource {
    let mut source = Map::new();
    source.insert("kind".into(), Value::from("coordinator"));
    source.insert("form".into(), Value::from("relay"));
    source.insert("senderSessionId".into(), Value::from(parent_session));
    MessageSource::Other(source)
}

fn same(a: &AgentRef, b: &AgentRef) -> bool {
    Arc::ptr_eq(a, b)
}

impl Continuations {
    pub(crate) fn new(ctx: &Context, subagents: Weak<Subagents>) -> Result<Arc<Self>, BoxError> {
        let agents = ctx.require::<Agents>()?;
        let prompt = ctx.require::<SystemPrompt>()?;
        Ok(Arc::new_cyclic(|me| Self {
            me: me.clone(),
            ctx: ctx.with_scope(None),
            agents,
            prompt,
            subagents,
            state: Mutex::new(State::default()),
            locks: Mutex::new(HashMap::new()),
            setups: RwLock::new(Vec::new()),
            next_setup: AtomicU64::new(1),
        }))
    }

    /// Adds `setup` to every continuable child created or resumed from now on, as an
    /// effect of `ctx`.
    pub fn register_setup(
        &self,
        ctx: &Context,
        setup: SetupContribution,
    ) -> Result<EffectHandle, BoxError> {
        let id = self.next_setup.fetch_add(1, Ordering::Relaxed);
        self.setups
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, setup));
        let me = self.me.clone();
        Ok(ctx.effect("continuable setup", move || {
            if let Some(me) = me.upgrade() {
                me.setups
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|(i, _)| *i != id);
            }
        })?)
    }

    /// Whether `id` is a resident continuable child.
    pub fn is_resident(&self, id: &str) -> bool {
        lock(&self.state).activations.contains_key(id)
    }

    fn activation(&self, id: &str) -> Option<Arc<Activation>> {
        lock(&self.state).activations.get(id).cloned()
    }

    fn child_lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.locks).entry(id.to_string()).or_default().clone()
    }

    /// The agent and its live ancestors (by header lineage).
    fn live_lineage(&self, agent: &AgentRef) -> Vec<AgentRef> {
        let mut lineage = vec![agent.clone()];
        let mut seen = HashSet::from([agent.id().to_string()]);
        let mut next = agent.session().header().parent_session;
        while let Some(id) = next {
            let Some(parent) = self.agents.get(&id) else {
                break;
            };
            if !seen.insert(id) {
                break;
            }
            next = parent.session().header().parent_session;
            lineage.push(parent);
        }
        lineage
    }

    fn assert_admitting(&self, agent: &AgentRef) -> Result<(), BoxError> {
        let (draining, closing) = {
            let s = lock(&self.state);
            (s.draining, s.closing.clone())
        };
        if draining {
            return Err(subagent_error(
                "DRAINING",
                "continuable subagents are draining; the operation was not admitted",
            ));
        }
        if let Some(root) = self
            .live_lineage(agent)
            .iter()
            .find(|a| closing.contains(a.id()))
        {
            return Err(subagent_error(
                "DRAINING",
                format!(
                    "continuable subagents below parent \"{}\" are draining; the operation was not admitted",
                    root.id()
                ),
            ));
        }
        Ok(())
    }

    fn closing_for(&self, agent: &AgentRef) -> bool {
        let (draining, closing) = {
            let s = lock(&self.state);
            (s.draining, s.closing.clone())
        };
        draining
            || self
                .live_lineage(agent)
                .iter()
                .any(|a| closing.contains(a.id()))
    }

    fn files(&self) -> Result<Arc<SessionFiles>, BoxError> {
        self.ctx.get::<SessionFiles>().ok_or_else(|| {
            subagent_error(
                "PERSISTENCE_UNAVAILABLE",
                "continuable subagents require session persistence (load a dsh-session-persistence backend)",
            )
        })
    }

    /// Starts a continuable child; resolves once its inbox accepted the prompt. Returns
    /// the child's id.
    pub async fn start(&self, spec: ContinuableStart) -> Result<String, BoxError> {
        let request = spec.request;
        let parent = request.parent.clone();
        self.assert_admitting(&parent)?;
        self.files()?;
        let depth = resolve_child_depth(&parent, request.max_depth)?;
        let child_id = uuid::Uuid::new_v4().to_string();
        let parent_options = parent.options();
        let requested = request.agent_options.clone().unwrap_or_default();
        let descriptor = Descriptor::Continuable {
            provider: spec.provider.clone(),
            label: spec.label,
            agent_provider: requested.provider.or(parent_options.provider),
            agent_model: requested.model.or(parent_options.model),
            persona: request.persona.clone(),
            tool_filter: request.tool_filter.clone(),
        };
        let policy = DelegatedPolicy::capture(&self.ctx, &parent);
        let subagents = self
            .subagents
            .upgrade()
            .ok_or("the subagent service is unloaded")?;
        let provider = subagents.expect_provider(&spec.provider)?;
        let prepared = provider.prepare_continuable(&parent).ok_or_else(|| {
            subagent_error(
                "UNSUPPORTED_CAPABILITY",
                format!(
                    "subagent provider \"{}\" does not support continuable children (no prepareContinuable capability)",
                    provider.name()
                ),
            )
        })?;
        if request.cancel.is_cancelled() {
            return Err("subagent request was aborted before child publication".into());
        }
        let lineage_seed = prepared.prefix.len() as u64;
        let mut seed = prepared.prefix;
        seed.push(Arc::new(Event {
            event_type: EventType::new(DESCRIPTOR_EVENT),
            seq: lineage_seed,
            time: self
                .ctx
                .get::<dsh_session::SessionStore>()
                .map_or(0, |s| s.now()),
            data: descriptor.to_data().into(),
            source_event_seqs: None,
            surface_op: None,
            ignorable: false,
            key_order: SurfaceKeyOrder::SourcesFirst,
        }));
        let child_lock = self.child_lock(&child_id);
        let _held = child_lock.lock().await;
        self.assert_admitting(&parent)?;
        let create = CreateAgent {
            session_id: Some(child_id.clone()),
            cwd: request.cwd.clone().or_else(|| parent_cwd(&parent)),
            options: child_options(&parent, request.agent_options.as_ref()),
            source: AgentSource::Seeded {
                prefix: seed,
                seed_length: (lineage_seed > 0).then_some(lineage_seed),
            },
            meta: child_meta(&parent, depth),
            owner: Some(parent.id().to_string()),
            setup: None,
        };
        let activation = self.materialize(
            &parent,
            &spec.provider,
            create,
            Some(policy),
            request.persona.as_deref(),
        )?;
        let content = request.prompt;
        match self.submit(&activation, content, MessageSource::User, &parent) {
            Ok(_) => Ok(child_id),
            Err(e) => {
                let _ = self.dispose(activation).await;
                Err(e)
            }
        }
    }

    /// Creates (or resumes) the child agent and makes it a resident activation.
    fn materialize(
        &self,
        parent: &AgentRef,
        provider: &str,
        mut create: CreateAgent,
        policy: Option<DelegatedPolicy>,
        persona: Option<&str>,
    ) -> Result<Arc<Activation>, BoxError> {
        self.assert_admitting(parent)?;
        let lineage = self.live_lineage(parent);
        let setups: Vec<SetupContribution> = self
            .setups
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(_, s)| s.clone())
            .collect();
        let prompt = self.prompt.clone();
        let persona = persona.map(str::to_owned);
        create.setup = Some(Box::new(
            move |ctx: &Context, session: &Arc<LiveSession>| {
                // Only a fresh child gets the delegated policy; a resumed one has it in its log.
                if let Some(p) = &policy {
                    p.append(session)?;
                }
                compose_child(ctx, &prompt, persona.as_deref())?;
                for s in &setups {
                    s(ctx)?;
                }
                Ok(())
            },
        ));
        let child_id = create.session_id.clone().unwrap_or_default();
        let agent = self.agents.create(&self.ctx, create)?;
        let mut ancestry = vec![agent.clone()];
        ancestry.extend(lineage);
        let activation = Arc::new(Activation {
            child_id: child_id.clone(),
            parent_session: parent.id().to_string(),
            agent: agent.clone(),
            ancestry,
            owned: Mutex::new(HashSet::new()),
            accepted: Mutex::new(HashSet::new()),
            announced: AtomicBool::new(false),
            poke: Notify::new(),
            disposal: Mutex::new(None),
            info: SubagentRunInfo {
                run_id: uuid::Uuid::new_v4().to_string(),
                provider: provider.to_string(),
                id: child_id.clone(),
                parent: parent.clone(),
                child: Some(agent.clone()),
            },
            boundary: AtomicU64::new(agent.session().next_seq()),
        });
        lock(&self.state)
            .activations
            .insert(child_id.clone(), activation.clone());
        let admitted = (|| -> Result<(), BoxError> {
            self.acquire_ownership(parent, &child_id)?;
            for discarded in [false, true] {
                let a = Arc::downgrade(&activation);
                let on = move |id: &str| {
                    if let Some(a) = a.upgrade()
                        && lock(&a.accepted).remove(id)
                    {
                        a.wake();
                    }
                };
                if discarded {
                    agent
                        .ctx()
                        .on_emit::<InboxDiscarded>(ListenOptions::default(), move |p| {
                            on(&p.message.id);
                            Ok(())
                        })?;
                } else {
                    agent
                        .ctx()
                        .on_emit::<InboxClaimed>(ListenOptions::default(), move |p| {
                            on(&p.message.id);
                            Ok(())
                        })?;
                }
            }
            Ok(())
        })();
        if let Err(e) = admitted {
            lock(&self.state).activations.remove(&child_id);
            self.release_ownership(&child_id);
            let agent = agent.clone();
            tokio::spawn(async move { agent.dispose().await });
            return Err(e);
        }
        parent.ctx().emit::<SubagentStart>(&activation.info);
        let me = self.me.clone();
        let watched = activation.clone();
        tokio::spawn(async move { watch(me, watched).await });
        Ok(activation)
    }

    fn acquire_ownership(&self, parent: &AgentRef, child_id: &str) -> Result<(), BoxError> {
        let Some(pa) = self.activation(parent.id()) else {
            return Ok(());
        };
        if pa.disposing() {
            return Err(subagent_error(
                "ACTIVATION_CLOSING",
                format!(
                    "subagent parent \"{}\" is being disposed; the child was not established",
                    parent.id()
                ),
            ));
        }
        lock(&pa.owned).insert(child_id.to_string());
        Ok(())
    }

    fn release_ownership(&self, child_id: &str) {
        let all: Vec<Arc<Activation>> = lock(&self.state).activations.values().cloned().collect();
        for a in all {
            if lock(&a.owned).remove(child_id) {
                a.wake();
            }
        }
    }

    /// Sends `message` through `send`, counting it as accepted by the receiving activation
    /// (when the receiver is itself a continuable child) so it is not judged settled
    /// before it claims the message.
    fn admit_waking(
        &self,
        receiver: &AgentRef,
        message_id: &str,
        send: impl FnOnce() -> Result<(), BoxError>,
    ) -> Result<(), BoxError> {
        let activation = self
            .activation(receiver.id())
            .filter(|a| same(&a.agent, receiver));
        if let Some(a) = &activation {
            lock(&a.accepted).insert(message_id.to_string());
        }
        if let Err(e) = send() {
            if let Some(a) = &activation {
                lock(&a.accepted).remove(message_id);
            }
            return Err(e);
        }
        if let Some(a) = &activation {
            a.wake();
        }
        Ok(())
    }

    fn authorize_lineage(
        &self,
        parent: &AgentRef,
        child_id: &str,
        parent_session: Option<&str>,
    ) -> Result<(), BoxError> {
        if !self
            .agents
            .get(parent.id())
            .is_some_and(|live| same(&live, parent))
        {
            return Err(subagent_error(
                "UNAUTHORIZED",
                format!("subagent \"{child_id}\" delivery requires the exact live parent agent"),
            ));
        }
        if parent_session != Some(parent.id()) {
            return Err(subagent_error(
                "UNAUTHORIZED",
                format!("subagent \"{child_id}\" belongs to another parent session"),
            ));
        }
        Ok(())
    }

    fn submit(
        &self,
        activation: &Arc<Activation>,
        content: Vec<ContentBlock>,
        source: MessageSource,
        parent: &AgentRef,
    ) -> Result<String, BoxError> {
        self.assert_admitting(parent)?;
        if activation.disposing() {
            return Err(subagent_error(
                "ACTIVATION_CLOSING",
                format!(
                    "subagent \"{}\" activation is being disposed; the message was not accepted",
                    activation.child_id
                ),
            ));
        }
        let header_parent = activation.agent.session().header().parent_session;
        self.authorize_lineage(parent, &activation.child_id, header_parent.as_deref())?;
        self.acquire_ownership(parent, &activation.child_id)?;
        let message = Message::user(content, source);
        let id = message.id.clone();
        let agent = activation.agent.clone();
        lock(&activation.accepted).insert(id.clone());
        if let Err(e) = agent.followup(message) {
            lock(&activation.accepted).remove(&id);
            return Err(Box::new(e));
        }
        activation.wake();
        activation.announced.store(true, Ordering::SeqCst);
        Ok(id)
    }

    /// Stops the current turn of a resident descendant (its queued input stays). An
    /// absent target is not an error.
    pub fn interrupt(&self, target: &str, authority: &InterruptAuthority) -> Result<(), BoxError> {
        if let InterruptAuthority::Ancestor(caller) = authority {
            if !self
                .agents
                .get(caller.id())
                .is_some_and(|live| same(&live, caller))
            {
                return Err(subagent_error(
                    "UNAUTHORIZED",
                    format!("interrupting \"{target}\" requires the exact live ancestor agent"),
                ));
            }
            if caller.id() == target {
                return Err(subagent_error(
                    "UNAUTHORIZED",
                    format!("agent \"{}\" cannot interrupt itself", caller.id()),
                ));
            }
        }
        let Some(a) = self.activation(target) else {
            return Ok(());
        };
        let cause = match authority {
            InterruptAuthority::User { parent_session } => {
                if a.agent.session().header().parent_session.as_deref() != Some(parent_session) {
                    return Err(subagent_error(
                        "UNAUTHORIZED",
                        format!("subagent \"{target}\" belongs to another parent session"),
                    ));
                }
                CancelCause::User
            }
            InterruptAuthority::Ancestor(caller) => {
                if !a.ancestry.iter().any(|x| same(x, caller)) {
                    return Err(subagent_error(
                        "UNAUTHORIZED",
                        format!(
                            "subagent \"{target}\" is not a live descendant of agent \"{}\"",
                            caller.id()
                        ),
                    ));
                }
                CancelCause::Parent
            }
        };
        if a.disposing() {
            return Ok(());
        }
        a.agent.cancel(cause, true);
        Ok(())
    }

    /// Delivers a report from a resident continuable child to its live parent. Returns the
    /// message id.
    pub fn report_from(
        &self,
        child: &AgentRef,
        content: Vec<ContentBlock>,
        delivery: ReportDelivery,
    ) -> Result<String, BoxError> {
        self.assert_admitting(child)?;
        let activation = self
            .activation(child.id())
            .filter(|a| same(&a.agent, child))
            .ok_or_else(|| {
                subagent_error(
                    "UNAUTHORIZED",
                    format!(
                        "agent \"{}\" is not a live continuable subagent and cannot report",
                        child.id()
                    ),
                )
            })?;
        if activation.disposing() {
            return Err(subagent_error(
                "ACTIVATION_CLOSING",
                format!(
                    "subagent \"{}\" activation is being disposed; the report was not delivered",
                    child.id()
                ),
            ));
        }
        let unavailable = || {
            subagent_error(
                "PARENT_UNAVAILABLE",
                "direct parent is not live; report was not delivered",
            )
        };
        let parent = self
            .agents
            .get(&activation.parent_session)
            .ok_or_else(unavailable)?;
        let mut body = vec![ContentBlock::text(format!(
            "Background subagent {} reported:",
            activation.child_id
        ))];
        body.extend(content);
        let mut source = Map::new();
        source.insert("kind".into(), Value::from("subagent-report"));
        source.insert("form".into(), Value::from("relay"));
        source.insert(
            "senderSessionId".into(),
            Value::from(activation.child_id.clone()),
        );
        let message = Message::user(body, MessageSource::Other(source));
        let id = message.id.clone();
        match delivery {
            ReportDelivery::NextStep => self.admit_waking(&parent, &id, || {
                parent.steer(message).map_err(|_| unavailable())
            })?,
            ReportDelivery::Quiet => parent.inject(message).map_err(|_| unavailable())?,
        }
        Ok(id)
    }
}
