//! Sessions hosted by this process. A session is *cold* (viewed from its stored log,
//! read-only, no lock taken) until the first action that writes (prompt, rename) resumes
//! it: the log is loaded under its writer lock and an agent is created. Every live agent
//! of the process is reachable here; pages are driven from the session log (the in-memory
//! log is the replay buffer) and from `agent/*` live events, never from loop internals.
//!
//! Invariants: the revision watch of a session moves forward only (its `next_seq` follows
//! committed events; its `generation` changes when the session goes live or leaves), and
//! resume/dispose/delete of one session are serialized by its `op` lock.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use dsh_agent::{
    AgentErrorEvent, AgentOptions, AgentRef, AgentSource, AgentStatusChanged, Agents, CreateAgent,
    InboxClaimed, InboxDiscarded, InboxInserted,
};
use dsh_kernel::{Context, ListenOptions};
use dsh_persistence::{PersistenceError, SessionFiles};
use dsh_session::{CancelCause, SessionAppended, SessionWriteFailed, types};
use dsh_tools::ToolOutputEvent;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::hub::{Hub, Signal};
use crate::rpc::{ApiError, ErrorCode};

/// Most live output kept per running tool call (the tail).
const OUTPUT_TAIL: usize = 64 * 1024;

/// Where a session's stream stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rev {
    /// Changes when the session goes live in this process (or is closed).
    pub generation: u64,
    /// The seq the next committed event will have (live sessions).
    pub next_seq: u64,
}

/// One session known to this process.
pub struct Hosted {
    pub id: String,
    agent: RwLock<Option<AgentRef>>,
    /// Serializes resume, dispose and delete.
    pub op: tokio::sync::Mutex<()>,
    rev: watch::Sender<Rev>,
    /// Live output of running tool calls: call id → (order, tail).
    outputs: Mutex<BTreeMap<String, (u64, String)>>,
    next_output: std::sync::atomic::AtomicU64,
    last_error: Mutex<Option<String>>,
    /// The model (and effort) chosen for this session in the page; every later request of
    /// the session runs on it.
    choice: Mutex<Option<Choice>>,
}

/// A session's chosen route: provider, model and (when chosen) reasoning effort.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Choice {
    pub provider: String,
    pub model: String,
    pub effort: Option<String>,
}

impl Hosted {
    fn new(id: &str) -> Self {
        Self {
            id: id.to_string(),
            agent: RwLock::new(None),
            op: tokio::sync::Mutex::new(()),
            rev: watch::channel(Rev::default()).0,
            outputs: Mutex::new(BTreeMap::new()),
            next_output: Default::default(),
            last_error: Mutex::new(None),
            choice: Mutex::new(None),
        }
    }

    pub fn choice(&self) -> Option<Choice> {
        self.choice
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn choose(&self, choice: Choice) {
        *self.choice.lock().unwrap_or_else(|p| p.into_inner()) = Some(choice);
    }

    pub fn agent(&self) -> Option<AgentRef> {
        self.agent.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Rev> {
        self.rev.subscribe()
    }

    /// Live output tails of running calls: `{callId: text}`.
    pub fn outputs(&self) -> Value {
        let map = self.outputs.lock().unwrap_or_else(|p| p.into_inner());
        let mut items: Vec<(&String, &(u64, String))> = map.iter().collect();
        items.sort_by_key(|(_, (o, _))| *o);
        Value::Object(
            items
                .into_iter()
                .map(|(k, (_, t))| (k.clone(), Value::from(t.as_str())))
                .collect(),
        )
    }

    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_agent(&self, agent: Option<AgentRef>) {
        let next = agent.as_ref().map_or(0, |a| a.session().next_seq());
        *self.agent.write().unwrap_or_else(|p| p.into_inner()) = agent;
        self.rev.send_modify(|r| {
            r.generation += 1;
            r.next_seq = next;
        });
    }

    fn append_output(&self, call: &str, text: &str) {
        let mut map = self.outputs.lock().unwrap_or_else(|p| p.into_inner());
        let order = self
            .next_output
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let entry = map
            .entry(call.to_string())
            .or_insert_with(|| (order, String::new()));
        entry.1.push_str(text);
        if entry.1.len() > OUTPUT_TAIL {
            let mut cut = entry.1.len() - OUTPUT_TAIL;
            while !entry.1.is_char_boundary(cut) {
                cut += 1;
            }
            entry.1.drain(..cut);
        }
    }
}

/// Every hosted session.
#[derive(Default)]
pub struct Hosting {
    sessions: RwLock<HashMap<String, Arc<Hosted>>>,
}

impl Hosting {
    pub fn get(&self, id: &str) -> Option<Arc<Hosted>> {
        self.sessions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// The hosted entry of `id`, created on first use.
    pub fn entry(&self, id: &str) -> Arc<Hosted> {
        if let Some(h) = self.get(id) {
            return h;
        }
        self.sessions
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.to_string())
            .or_insert_with(|| Arc::new(Hosted::new(id)))
            .clone()
    }

    pub fn forget(&self, id: &str) {
        self.sessions
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    /// Every live agent.
    pub fn live(&self) -> Vec<AgentRef> {
        self.sessions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter_map(|h| h.agent())
            .collect()
    }
}

/// Wires the kernel's live events to the hosted sessions and the hub.
pub fn install_listeners(
    root: &Context,
    hosting: &Arc<Hosting>,
    hub: &Hub,
) -> Result<(), dsh_kernel::BoxError> {
    // A route chosen in the page replaces the seed's for every later request of the session
    // (the request header logs it, so a reload and a resume see it).
    let h = hosting.clone();
    root.on_waterfall::<dsh_agent::Request>(ListenOptions::GLOBAL, move |payload, next| {
        let chosen = h
            .get(&payload.agent.session().id())
            .and_then(|hosted| hosted.choice());
        Box::pin(async move {
            let mut config = next.run().await?;
            if let Some(choice) = chosen {
                // The seed's effort belongs to the seed's model.
                if choice.provider != config.provider || choice.model != config.model {
                    config.reasoning_effort = None;
                }
                config.provider = choice.provider;
                config.model = choice.model;
                if choice.effort.is_some() {
                    config.reasoning_effort = choice.effort;
                }
            }
            Ok(config)
        })
    })?;
    let (h, signals) = (hosting.clone(), hub.clone());
    root.on_emit::<SessionAppended>(ListenOptions::GLOBAL, move |p| {
        let id = p.session.id();
        if let Some(hosted) = h.get(&id) {
            hosted
                .rev
                .send_modify(|r| r.next_seq = r.next_seq.max(p.event.seq + 1));
            if p.event.is(types::TOOL_RESULT)
                && let Some(call) = p
                    .event
                    .data
                    .pointer("/message/source/callId")
                    .and_then(Value::as_str)
            {
                hosted
                    .outputs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(call);
            }
            if p.event.is(types::TURN_START) {
                *hosted.last_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
            }
        }
        if p.event.is(types::TURN_START)
            || p.event.is(types::TURN_END)
            || p.event.is(types::SESSION_TITLE)
        {
            signals.send(Signal::Lists);
        }
        Ok(())
    })?;
    let signals = hub.clone();
    root.on_emit::<AgentStatusChanged>(ListenOptions::GLOBAL, move |p| {
        signals.send(Signal::Status {
            session: p.agent.id().to_string(),
            running: p.status == dsh_agent::AgentStatus::Running,
        });
        signals.send(Signal::Lists);
        Ok(())
    })?;
    for_inbox::<InboxInserted>(root, hub)?;
    for_inbox::<InboxClaimed>(root, hub)?;
    for_inbox::<InboxDiscarded>(root, hub)?;
    let (h, signals) = (hosting.clone(), hub.clone());
    root.on_emit::<AgentErrorEvent>(ListenOptions::GLOBAL, move |p| {
        let id = p.agent.id().to_string();
        tracing::warn!(session = %id, "web: turn {} failed: {}", p.turn, p.message);
        if let Some(hosted) = h.get(&id) {
            *hosted.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(p.message.clone());
        }
        signals.send(Signal::AgentError {
            session: id,
            message: p.message.clone(),
        });
        signals.send(Signal::Lists);
        Ok(())
    })?;
    let (h, signals) = (hosting.clone(), hub.clone());
    root.on_emit::<SessionWriteFailed>(ListenOptions::GLOBAL, move |p| {
        let id = p.session.id();
        tracing::warn!(session = %id, "web: session log write failed: {}", p.message);
        let message = format!("The session log could not be written: {}", p.message);
        if let Some(hosted) = h.get(&id) {
            *hosted.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(message.clone());
        }
        signals.send(Signal::AgentError {
            session: id,
            message,
        });
        Ok(())
    })?;
    let (h, signals) = (hosting.clone(), hub.clone());
    root.on_emit::<ToolOutputEvent>(ListenOptions::GLOBAL, move |p| {
        if let Some(hosted) = h.get(&p.session_id) {
            hosted.append_output(&p.call_id, &p.text);
            signals.send(Signal::Output {
                session: p.session_id.clone(),
                call: p.call_id.clone(),
                stream: p.stream.as_str(),
                text: p.text.clone(),
            });
        }
        Ok(())
    })?;
    Ok(())
}

fn for_inbox<E>(root: &Context, hub: &Hub) -> Result<(), dsh_kernel::BoxError>
where
    E: dsh_kernel::EmitEvent<Payload = dsh_agent::InboxPayload>,
{
    let signals = hub.clone();
    root.on_emit::<E>(ListenOptions::GLOBAL, move |p| {
        signals.send(Signal::Queue(p.agent.id().to_string()));
        Ok(())
    })?;
    Ok(())
}

/// The pending inbox as the page shows it.
pub fn queue_items(agent: &AgentRef) -> Value {
    let inbox = agent.inbox();
    let item = |m: &dsh_llm::Message, placement: &str| {
        let images = m
            .content
            .iter()
            .filter(|b| b.block_type() == "image")
            .count();
        json!({"id": m.id, "placement": placement, "text": m.text(), "images": images})
    };
    Value::Array(
        inbox
            .next_step
            .iter()
            .map(|m| item(m, "steering"))
            .chain(inbox.next_turn.iter().map(|m| item(m, "queued")))
            .collect(),
    )
}

/// Starts and stops agents of hosted sessions.
pub struct Lifecycle<'a> {
    pub root: &'a Context,
    pub hosting: &'a Hosting,
    pub hub: &'a Hub,
    pub files: Option<&'a Arc<SessionFiles>>,
}

fn agents(root: &Context) -> Result<Arc<Agents>, ApiError> {
    root.require::<Agents>().map_err(ApiError::internal)
}

/// The model new sessions use: the default-model row, overridden by the live
/// `agent-default-model` settings section (changed in Settings → Models).
pub fn default_model(root: &Context) -> (String, String) {
    let row = root
        .get::<dsh_policies::DefaultModel>()
        .map_or_else(dsh_policies::DefaultModel::fallback, |m| (*m).clone());
    let mut provider = row.provider;
    let mut model = row.model;
    if let Some(live) = root
        .get::<dsh_policies::Settings>()
        .and_then(|s| s.live_section("agent-default-model"))
        && let (Some(p), Some(m)) = (
            live.get("provider").and_then(Value::as_str),
            live.get("model").and_then(Value::as_str),
        )
    {
        provider = p.to_string();
        model = m.to_string();
    }
    (provider, model)
}

fn options(root: &Context) -> AgentOptions {
    let (provider, model) = default_model(root);
    AgentOptions {
        reasoning_effort: default_effort(root, &provider, &model),
        provider: Some(provider),
        model: Some(model),
        max_tokens: None,
    }
}

/// The reasoning effort of the default selection, when it is the selection new sessions
/// use: the live `agent-default-model` section's, else the row's.
pub fn default_effort(root: &Context, provider: &str, model: &str) -> Option<String> {
    let live = root
        .get::<dsh_policies::Settings>()
        .and_then(|s| s.live_section("agent-default-model"));
    if let Some(live) = live
        && live.get("provider").and_then(Value::as_str) == Some(provider)
        && live.get("model").and_then(Value::as_str) == Some(model)
    {
        return live
            .get("reasoningEffort")
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
    root.get::<dsh_policies::DefaultModel>()
        .filter(|m| m.provider == provider && m.model == model)
        .and_then(|m| m.reasoning_effort.clone())
}

/// The message shown when a stored log cannot be resumed or viewed.
pub fn persistence_error(id: &str, e: PersistenceError) -> ApiError {
    match e {
        PersistenceError::Locked { .. } => ApiError::new(
            ErrorCode::SessionLocked,
            format!("This session is open in another dsh process: {e}"),
        ),
        PersistenceError::NotFound { .. } => ApiError::new(
            ErrorCode::SessionNotFound,
            format!("No stored session {id}"),
        ),
        other => ApiError::new(
            ErrorCode::SessionUnreadable,
            format!("The session log cannot be opened: {other}"),
        ),
    }
    .with(json!({"sessionId": id}))
}

impl Lifecycle<'_> {
    /// A new live session in `cwd`.
    pub fn create(&self, cwd: PathBuf) -> Result<AgentRef, ApiError> {
        let id = format!("session-{}", uuid::Uuid::new_v4());
        let hosted = self.hosting.entry(&id);
        let mut request = CreateAgent::fresh(options(self.root));
        request.session_id = Some(id.clone());
        request.cwd = Some(cwd);
        let agent = match agents(self.root)?.create(self.root, request) {
            Ok(a) => a,
            Err(e) => {
                self.hosting.forget(&id);
                return Err(ApiError::internal(format!("cannot start a session: {e}")));
            }
        };
        hosted.set_agent(Some(agent.clone()));
        self.hub.send(Signal::Lists);
        Ok(agent)
    }

    /// The live agent of `id`, resuming the stored session first when it is cold.
    pub async fn ensure_live(&self, id: &str) -> Result<AgentRef, ApiError> {
        let hosted = self.hosting.entry(id);
        if let Some(agent) = hosted.agent() {
            return Ok(agent);
        }
        let _op = hosted.op.lock().await;
        if let Some(agent) = hosted.agent() {
            return Ok(agent);
        }
        let files = self.files.cloned().ok_or_else(|| {
            ApiError::new(
                ErrorCode::SessionNotFound,
                "session persistence is disabled in this composition",
            )
        })?;
        let owned = id.to_string();
        let loaded = tokio::task::spawn_blocking(move || files.load(&owned))
            .await
            .map_err(ApiError::internal)?
            .map_err(|e| persistence_error(id, e))?;
        let mut request = CreateAgent::fresh(options(self.root));
        request.session_id = Some(loaded.header.id.clone());
        request.cwd = loaded.header.cwd.as_ref().map(PathBuf::from);
        request.source = AgentSource::Resume {
            header: loaded.header,
            events: loaded.events,
            stored_len: loaded.stored_len,
        };
        let agent = match agents(self.root)?.create(self.root, request) {
            Ok(a) => a,
            Err(e) => {
                if let Some(files) = self.files {
                    files.release(id);
                }
                return Err(ApiError::internal(format!(
                    "cannot resume the session: {e}"
                )));
            }
        };
        hosted.set_agent(Some(agent.clone()));
        self.hub.send(Signal::Lists);
        Ok(agent)
    }

    /// Stops a live session (cancels its turn, keeps its inbox), flushes its log and
    /// releases it; waits (bounded) until its writer lock is released.
    pub async fn close(&self, id: &str) -> Result<(), ApiError> {
        let Some(hosted) = self.hosting.get(id) else {
            return Ok(());
        };
        let _op = hosted.op.lock().await;
        let Some(agent) = hosted.agent() else {
            return Ok(());
        };
        agent.cancel(CancelCause::User, true);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), agent.when_idle()).await;
        let flushed = agent.session().flush().await;
        agent.dispose().await;
        hosted.set_agent(None);
        if let Some(files) = self.files {
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
            while files.holds_lock(id) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
        self.hub.send(Signal::Lists);
        flushed
            .map(|_| ())
            .map_err(|e| ApiError::internal(format!("the session log could not be flushed: {e}")))
    }
}
