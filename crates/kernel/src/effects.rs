//! Effects: every registration returns a handle and is recorded in the fiber (plugin
//! instance or agent scope) that made it; disposing the fiber unwinds its effects in
//! reverse registration order. Child fibers are effects of their parent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

type Disposer = Box<dyn FnOnce() + Send>;

static NEXT_EFFECT: AtomicU64 = AtomicU64::new(1);

/// A unit of ownership: a loaded plugin, an agent scope, or the root.
pub struct Fiber {
    name: String,
    state: Mutex<FiberState>,
}

struct FiberState {
    effects: Vec<(u64, &'static str, Disposer)>,
    disposed: bool,
}

impl Fiber {
    pub(crate) fn new(name: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            state: Mutex::new(FiberState {
                effects: Vec::new(),
                disposed: false,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, FiberState> {
        // A poisoned lock only means a disposer panicked; the state itself stays valid.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn is_disposed(&self) -> bool {
        self.lock().disposed
    }

    /// Number of live effects (registrations not yet unwound). Used by tests to prove
    /// that unloading leaves nothing behind.
    pub fn live_effects(&self) -> usize {
        self.lock().effects.len()
    }

    /// Labels of the live effects, in registration order.
    pub fn effect_labels(&self) -> Vec<&'static str> {
        self.lock()
            .effects
            .iter()
            .map(|(_, label, _)| *label)
            .collect()
    }

    /// Records `disposer` as an effect. When the fiber is already disposed the disposer runs
    /// at once and `None` is returned.
    pub(crate) fn add(
        self: &Arc<Self>,
        label: &'static str,
        disposer: Disposer,
    ) -> Option<EffectHandle> {
        let id = NEXT_EFFECT.fetch_add(1, Ordering::Relaxed);
        let mut state = self.lock();
        if state.disposed {
            drop(state);
            disposer();
            return None;
        }
        state.effects.push((id, label, disposer));
        Some(EffectHandle {
            fiber: Arc::downgrade(self),
            id,
        })
    }

    /// Unwinds every effect in reverse order. Idempotent.
    pub fn dispose(&self) {
        loop {
            let next = {
                let mut state = self.lock();
                state.disposed = true;
                state.effects.pop()
            };
            match next {
                Some((_, _, disposer)) => disposer(),
                None => break,
            }
        }
    }

    fn dispose_one(&self, id: u64) {
        let found = {
            let mut state = self.lock();
            state
                .effects
                .iter()
                .position(|(eid, _, _)| *eid == id)
                .map(|i| state.effects.remove(i))
        };
        if let Some((_, _, disposer)) = found {
            disposer();
        }
    }
}

impl std::fmt::Debug for Fiber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fiber")
            .field("name", &self.name)
            .field("effects", &self.live_effects())
            .finish()
    }
}

/// The handle of one registration. Dropping it does **not** undo the registration (the
/// owning fiber does that on unload); call [`EffectHandle::dispose`] to undo it early.
#[derive(Debug)]
pub struct EffectHandle {
    fiber: Weak<Fiber>,
    id: u64,
}

impl EffectHandle {
    /// Undoes this registration now. Calling it after the fiber unwound is a no-op.
    pub fn dispose(self) {
        if let Some(fiber) = self.fiber.upgrade() {
            fiber.dispose_one(self.id);
        }
    }
}
