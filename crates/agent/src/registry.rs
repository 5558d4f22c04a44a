//! The agent registry (`ctx.agents`) and the factory seam that makes the driver a plugin.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use dsh_kernel::{BoxError, Context, EffectHandle};
use dsh_session::{Event, LiveSession, SessionHeader};

use crate::handle::{AgentOptions, AgentRef};

/// Where a new agent's session comes from.
pub enum AgentSource {
    /// A fresh session.
    Fresh,
    /// A session seeded with `prefix` (a fork's inherited history, or a continuable
    /// child's descriptor). `seed_length` is the header's durable fork boundary: the
    /// number of inherited parent events, which may differ from the prefix (a
    /// continuable child's seed is its own descriptor and inherits nothing).
    Seeded {
        prefix: Vec<Arc<Event>>,
        seed_length: Option<u64>,
    },
    /// A stored session being resumed (events already include any repair closers).
    Resume {
        header: SessionHeader,
        events: Vec<Arc<Event>>,
        stored_len: u64,
    },
}

/// Composes an agent before it is published: called with the agent's scoped context and
/// its freshly created session (header and seed written, nothing else), before the inbox
/// and projections are rebuilt from the log, before the agent is entered in the registry
/// and before `agent/created`. It may register scoped tools, sections and listeners and
/// append setup events (delegated policy). An error disposes the session and the scope.
pub type SetupFn = Box<dyn FnOnce(&Context, &Arc<LiveSession>) -> Result<(), BoxError> + Send>;

/// Header facts of a new session beyond its id, time and cwd: the delegation lineage.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionMeta {
    pub parent_session: Option<String>,
    /// `subagent` for delegated children.
    pub origin: Option<String>,
    pub delegation_depth: u64,
    pub agent_preset: Option<String>,
}

/// Everything needed to create an agent.
pub struct CreateAgent {
    pub session_id: Option<String>,
    pub cwd: Option<PathBuf>,
    pub options: AgentOptions,
    pub source: AgentSource,
    /// Header lineage facts (ignored when resuming: the stored header is kept).
    pub meta: SessionMeta,
    /// The live agent that owns this one (a delegating parent); `None` for a runtime root.
    pub owner: Option<String>,
    /// Composes scoped registrations (tools, sections, listeners) before publication.
    pub setup: Option<SetupFn>,
}

impl CreateAgent {
    pub fn fresh(options: AgentOptions) -> Self {
        Self {
            session_id: None,
            cwd: None,
            options,
            source: AgentSource::Fresh,
            meta: SessionMeta::default(),
            owner: None,
            setup: None,
        }
    }
}

/// Builds agents. Exactly one factory is registered (by the driver plugin).
pub trait AgentFactory: Send + Sync + 'static {
    fn create(&self, owner: &Context, request: CreateAgent) -> Result<AgentRef, BoxError>;
}

/// The `ctx.agents` service.
#[derive(Default)]
pub struct Agents {
    factory: RwLock<Option<(String, Arc<dyn AgentFactory>)>>,
    live: RwLock<Vec<Entry>>,
}

struct Entry {
    agent: AgentRef,
    owner: Option<String>,
}

impl Agents {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Installs the driver factory as an effect of `ctx` (its plugin).
    pub fn set_factory(
        self: &Arc<Self>,
        ctx: &Context,
        factory: Arc<dyn AgentFactory>,
    ) -> Result<EffectHandle, BoxError> {
        {
            let mut slot = self.factory.write().unwrap_or_else(|p| p.into_inner());
            if let Some((owner, _)) = slot.as_ref() {
                return Err(format!("an agent driver is already installed by \"{owner}\"").into());
            }
            *slot = Some((ctx.owner().to_string(), factory));
        }
        let this = Arc::downgrade(self);
        Ok(ctx.effect("agent factory", move || {
            if let Some(this) = this.upgrade() {
                *this.factory.write().unwrap_or_else(|p| p.into_inner()) = None;
            }
        })?)
    }

    /// Creates (and publishes) an agent through the installed driver.
    pub fn create(&self, owner: &Context, request: CreateAgent) -> Result<AgentRef, BoxError> {
        let factory = self
            .factory
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(_, f)| f.clone())
            .ok_or(
                "no agent driver is installed (compose the agent-loop plugin or another driver)",
            )?;
        factory.create(owner, request)
    }

    /// Registers a published runtime root (drivers call this).
    pub fn enter(&self, agent: AgentRef) -> Result<(), BoxError> {
        self.enter_owned(agent, None)
    }

    /// Registers a published agent owned by the live agent `owner` (a delegated child),
    /// or a root when `owner` is `None`.
    pub fn enter_owned(&self, agent: AgentRef, owner: Option<String>) -> Result<(), BoxError> {
        let mut live = self.live.write().unwrap_or_else(|p| p.into_inner());
        if live.iter().any(|e| e.agent.id() == agent.id()) {
            return Err(format!("agent \"{}\" is already live", agent.id()).into());
        }
        live.push(Entry { agent, owner });
        Ok(())
    }

    /// Removes an agent (drivers call this during disposal).
    pub fn leave(&self, id: &str) {
        self.live
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|e| e.agent.id() != id);
    }

    pub fn get(&self, id: &str) -> Option<AgentRef> {
        self.live
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|e| e.agent.id() == id)
            .map(|e| e.agent.clone())
    }

    pub fn list(&self) -> Vec<AgentRef> {
        self.live
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|e| e.agent.clone())
            .collect()
    }

    /// The id of the agent that owns live agent `id` (`None`: a root, or not live).
    pub fn owner_of(&self, id: &str) -> Option<String> {
        self.live
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|e| e.agent.id() == id)
            .and_then(|e| e.owner.clone())
    }

    /// Whether `id` is a live agent that no other agent owns (a runtime root: the only
    /// kind of agent that may talk to the user).
    pub fn is_root(&self, id: &str) -> bool {
        self.live
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|e| e.agent.id() == id && e.owner.is_none())
    }

    /// The live runtime roots, in publication order.
    pub fn roots(&self) -> Vec<AgentRef> {
        self.live
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|e| e.owner.is_none())
            .map(|e| e.agent.clone())
            .collect()
    }

    /// The live agents `id` owns directly, in publication order.
    pub fn children_of(&self, id: &str) -> Vec<AgentRef> {
        self.live
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|e| e.owner.as_deref() == Some(id))
            .map(|e| e.agent.clone())
            .collect()
    }
}
