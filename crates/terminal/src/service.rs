//! The terminal registry (upstream's `terminal` service): owner-scoped sessions with ids
//! `pty-<n>`, unique names per owner, one active send per session, and every session of an
//! owner closed when the owner is disposed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use dsh_agent::{AgentRef, Agents};
use dsh_kernel::{BoxError, Context};
use indexmap::IndexMap;

use crate::types::{SessionStatus, SpawnSpec, TerminalBackend, TerminalSession};

struct Entry {
    owner: String,
    name: Option<String>,
    type_name: String,
    /// `None` while the backend is still starting it.
    session: Option<Arc<dyn TerminalSession>>,
    closing: bool,
    send_active: Arc<AtomicBool>,
}

/// What `terminal_list` shows of one session.
#[derive(Clone, Debug, PartialEq)]
pub struct TerminalInfo {
    pub id: String,
    pub name: Option<String>,
    pub type_name: String,
    pub pid: Option<u32>,
    pub status: SessionStatus,
}

/// A claimed session: its handle and its send slot.
pub struct Claimed {
    pub session: Arc<dyn TerminalSession>,
    pub send_active: Arc<AtomicBool>,
}

/// The `terminals` service.
pub struct TerminalService {
    ctx: Context,
    backends: RwLock<Vec<Arc<dyn TerminalBackend>>>,
    sessions: Mutex<IndexMap<String, Entry>>,
    counter: AtomicU64,
    disposing: AtomicBool,
}

impl TerminalService {
    pub fn new(ctx: Context) -> Arc<Self> {
        Arc::new(Self {
            ctx,
            backends: RwLock::new(Vec::new()),
            sessions: Mutex::new(IndexMap::new()),
            counter: AtomicU64::new(0),
            disposing: AtomicBool::new(false),
        })
    }

    fn sessions(&self) -> MutexGuard<'_, IndexMap<String, Entry>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a backend as an effect of `ctx`.
    pub fn register_backend(
        self: &Arc<Self>,
        ctx: &Context,
        backend: Arc<dyn TerminalBackend>,
    ) -> Result<(), BoxError> {
        let name = backend.type_name().to_string();
        {
            let mut all = self.backends.write().unwrap_or_else(|p| p.into_inner());
            if all.iter().any(|b| b.type_name() == name) {
                return Err(format!("a PTY backend for \"{name}\" is already registered").into());
            }
            all.push(backend);
        }
        let me = Arc::downgrade(self);
        ctx.effect("terminal backend", move || {
            if let Some(me) = me.upgrade() {
                me.backends
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|b| b.type_name() != name);
            }
        })?;
        Ok(())
    }

    fn check_owner(&self, owner: &AgentRef) -> Result<(), BoxError> {
        if self.disposing.load(Ordering::SeqCst) {
            return Err("PTY service is disposing".into());
        }
        match self.ctx.get::<Agents>().and_then(|a| a.get(owner.id())) {
            Some(live) if std::ptr::addr_eq(Arc::as_ptr(&live), Arc::as_ptr(owner)) => Ok(()),
            _ => Err(format!("agent \"{}\" is not the registered PTY owner", owner.id()).into()),
        }
    }

    /// Starts a terminal of `type_name` for `owner`; published only once the backend's
    /// startup succeeded.
    pub async fn spawn(
        &self,
        owner: &AgentRef,
        type_name: &str,
        name: Option<String>,
        cwd: Option<std::path::PathBuf>,
    ) -> Result<(String, Arc<dyn TerminalSession>), BoxError> {
        self.check_owner(owner)?;
        if name.as_deref().is_some_and(|n| n.trim().is_empty()) {
            return Err("PTY session name must be non-empty".into());
        }
        let backend = self
            .backends
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|b| b.type_name() == type_name)
            .cloned()
            .ok_or_else(|| format!("no PTY backend registered for \"{type_name}\""))?;
        let id = {
            let mut all = self.sessions();
            if let Some(n) = &name
                && let Some(e) = all
                    .values()
                    .find(|e| e.owner == owner.id() && e.name.as_ref() == Some(n))
            {
                return Err(if e.session.is_some() {
                    format!("PTY session name \"{n}\" already exists for this owner")
                } else {
                    format!("PTY session name \"{n}\" is already being created")
                }
                .into());
            }
            let id = format!("pty-{}", self.counter.fetch_add(1, Ordering::SeqCst) + 1);
            all.insert(
                id.clone(),
                Entry {
                    owner: owner.id().to_string(),
                    name: name.clone(),
                    type_name: type_name.to_string(),
                    session: None,
                    closing: false,
                    send_active: Arc::new(AtomicBool::new(false)),
                },
            );
            id
        };
        let spec = SpawnSpec {
            terminal_id: id.clone(),
            owner_session: owner.session().clone(),
            ctx: owner.ctx().clone(),
            cwd,
        };
        match backend.spawn(spec).await {
            Ok(session) => {
                let published = match self.sessions().get_mut(&id) {
                    Some(e) => {
                        e.session = Some(session.clone());
                        true
                    }
                    None => false,
                };
                if published {
                    Ok((id, session))
                } else {
                    // The owner went away while the terminal started.
                    let _ = session.close().await;
                    Err("PTY owner is no longer live".into())
                }
            }
            Err(e) => {
                self.sessions().shift_remove(&id);
                Err(e)
            }
        }
    }

    /// The session `id` of `owner`.
    pub fn get(&self, owner: &str, id: &str) -> Result<Claimed, BoxError> {
        let all = self.sessions();
        let Some(e) = all.get(id).filter(|e| e.session.is_some()) else {
            return Err(format!("unknown PTY session {id}").into());
        };
        if e.owner != owner {
            return Err(format!("PTY session {id} belongs to another agent").into());
        }
        if e.closing {
            return Err(format!("PTY session {id} is closing").into());
        }
        let session = e
            .session
            .clone()
            .ok_or_else(|| format!("unknown PTY session {id}"))?;
        Ok(Claimed {
            session,
            send_active: e.send_active.clone(),
        })
    }

    /// Takes the session's send slot (`SEND_ACTIVE` when taken).
    pub fn claim_send(&self, owner: &str, id: &str) -> Result<Claimed, BoxError> {
        let claimed = self.get(owner, id)?;
        if claimed.send_active.swap(true, Ordering::SeqCst) {
            return Err(format!("PTY session {id} already has an active send").into());
        }
        Ok(claimed)
    }

    /// Closes and forgets a session. `Ok(false)` when it was already closing.
    pub async fn kill(&self, owner: &str, id: &str) -> Result<bool, BoxError> {
        let session = {
            let mut all = self.sessions();
            let Some(e) = all.get_mut(id).filter(|e| e.session.is_some()) else {
                return Err(format!("unknown PTY session {id}").into());
            };
            if e.owner != owner {
                return Err(format!("PTY session {id} belongs to another agent").into());
            }
            if e.closing {
                return Ok(false);
            }
            e.closing = true;
            e.session.clone()
        };
        let result = match session {
            Some(s) => s.close().await,
            None => Ok(()),
        };
        self.sessions().shift_remove(id);
        result.map(|()| true)
    }

    /// The owner's sessions, in creation order.
    pub fn list(&self, owner: &str) -> Vec<TerminalInfo> {
        self.sessions()
            .iter()
            .filter(|(_, e)| e.owner == owner && !e.closing)
            .filter_map(|(id, e)| {
                let s = e.session.as_ref()?;
                Some(TerminalInfo {
                    id: id.clone(),
                    name: e.name.clone(),
                    type_name: e.type_name.clone(),
                    pid: s.pid(),
                    status: s.status(),
                })
            })
            .collect()
    }

    /// Whether `owner` has sessions open or being created.
    pub fn has_sessions(&self, owner: &str) -> bool {
        self.sessions().values().any(|e| e.owner == owner)
    }

    /// Closes every session of `owner` (its disposal).
    pub async fn dispose_owner(&self, owner: &str) {
        let ids: Vec<String> = self
            .sessions()
            .iter()
            .filter(|(_, e)| e.owner == owner)
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            if let Err(e) = self.kill(owner, &id).await {
                tracing::warn!("terminal {id}: {e}");
            }
        }
    }

    /// Service teardown: refuse new sessions; close the rest (their guards kill what is
    /// left if this cannot finish).
    pub fn close_all(&self) {
        self.disposing.store(true, Ordering::SeqCst);
        let sessions: Vec<Arc<dyn TerminalSession>> = self
            .sessions()
            .drain(..)
            .filter_map(|(_, e)| e.session)
            .collect();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            for s in sessions {
                rt.spawn(async move {
                    let _ = s.close().await;
                });
            }
        }
    }
}
