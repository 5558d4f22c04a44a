//! The agent registry (`ctx.agents`) and the factory seam that makes the driver a plugin.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use dsh_kernel::{BoxError, Context, EffectHandle};
use dsh_session::{Event, SessionHeader};

use crate::handle::{AgentOptions, AgentRef};

/// Where a new agent's session comes from.
pub enum AgentSource {
    /// A fresh session.
    Fresh,
    /// A child seeded with a prefix of another session (fork).
    Seeded {
        prefix: Vec<Arc<Event>>,
        parent: String,
    },
    /// A stored session being resumed (events already include any repair closers).
    Resume {
        header: SessionHeader,
        events: Vec<Arc<Event>>,
        stored_len: u64,
    },
}

/// Composes an agent's scoped registrations before it is published.
pub type SetupFn = Box<dyn FnOnce(&Context) -> Result<(), BoxError> + Send>;

/// Everything needed to create an agent.
pub struct CreateAgent {
    pub session_id: Option<String>,
    pub cwd: Option<PathBuf>,
    pub options: AgentOptions,
    pub source: AgentSource,
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
    live: RwLock<Vec<AgentRef>>,
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

    /// Registers a published agent (drivers call this).
    pub fn enter(&self, agent: AgentRef) -> Result<(), BoxError> {
        let mut live = self.live.write().unwrap_or_else(|p| p.into_inner());
        if live.iter().any(|a| a.id() == agent.id()) {
            return Err(format!("agent \"{}\" is already live", agent.id()).into());
        }
        live.push(agent);
        Ok(())
    }

    /// Removes an agent (drivers call this during disposal).
    pub fn leave(&self, id: &str) {
        self.live
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|a| a.id() != id);
    }

    pub fn get(&self, id: &str) -> Option<AgentRef> {
        self.live
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|a| a.id() == id)
            .cloned()
    }

    pub fn list(&self) -> Vec<AgentRef> {
        self.live.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
