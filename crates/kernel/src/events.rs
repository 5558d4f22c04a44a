//! Typed events and their dispatch modes.
//!
//! Every event is a type implementing one of the mode traits; the mode is part of the type,
//! so a listener cannot be registered (or an event dispatched) in the wrong mode:
//!
//! * [`EmitEvent`] — notification. Listeners run synchronously in order; a failing
//!   (or panicking) listener is logged and contained, the others still run.
//! * [`SerialEvent`] — listeners are awaited one after another in order; the first error
//!   stops the dispatch and is returned.
//! * [`ParallelEvent`] — listeners run concurrently; all are awaited; the first error (in
//!   registration order) is returned after all settled.
//! * [`WaterfallEvent`] — an onion: each listener receives `next`; calling it runs the rest of
//!   the chain and finally the built-in default; not calling it short-circuits. The outermost
//!   listener's return value is the decision.
//!
//! Listener selection is a snapshot taken when the dispatch starts. A listener registered
//! through a scoped context only receives events whose carrier scope is its own scope or a
//! descendant of it; `global` listeners and unscoped listeners receive everything.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, RwLock};

use futures::future::BoxFuture;

use crate::error::BoxError;
use crate::scope::{Scope, ScopeId};

/// The static description of an event type.
pub trait Event: Send + Sync + 'static {
    /// The upstream name, e.g. `agent/pre-step`. Used in logs and diagnostics.
    const NAME: &'static str;
    /// What listeners receive (by reference).
    type Payload: Send + Sync + 'static;
}

/// Marker: this event is dispatched with [`crate::Context::emit`].
pub trait EmitEvent: Event {}
/// Marker: this event is dispatched with [`crate::Context::serial`].
pub trait SerialEvent: Event {}
/// Marker: this event is dispatched with [`crate::Context::parallel`].
pub trait ParallelEvent: Event {}
/// This event is dispatched with [`crate::Context::waterfall`] and yields `Output`.
pub trait WaterfallEvent: Event {
    type Output: Send + 'static;
}

pub type EmitFn<E> = dyn Fn(&<E as Event>::Payload) -> Result<(), BoxError> + Send + Sync;
pub type AsyncFn<E> =
    dyn for<'a> Fn(&'a <E as Event>::Payload) -> BoxFuture<'a, Result<(), BoxError>> + Send + Sync;
pub type WaterfallFn<E> = dyn for<'a> Fn(
        &'a <E as Event>::Payload,
        Next<'a, E>,
    ) -> BoxFuture<'a, Result<<E as WaterfallEvent>::Output, BoxError>>
    + Send
    + Sync;
/// The innermost `next` of a waterfall: the built-in default decision.
pub type DefaultFn<'a, E> = dyn Fn(&'a <E as Event>::Payload) -> BoxFuture<'a, Result<<E as WaterfallEvent>::Output, BoxError>>
    + Send
    + Sync
    + 'a;

/// Registration options.
#[derive(Clone, Copy, Debug, Default)]
pub struct ListenOptions {
    /// Insert before the listeners already registered.
    pub prepend: bool,
    /// Receive events of every scope, bypassing scope filtering.
    pub global: bool,
}

impl ListenOptions {
    pub const PREPEND: Self = Self {
        prepend: true,
        global: false,
    };
    pub const GLOBAL: Self = Self {
        prepend: false,
        global: true,
    };
}

pub(crate) struct Hook<F: ?Sized> {
    pub(crate) id: u64,
    pub(crate) scope: Option<ScopeId>,
    pub(crate) global: bool,
    pub(crate) callback: Arc<F>,
}

impl<F: ?Sized> Clone for Hook<F> {
    fn clone(&self) -> Self {
        Self {
            id: self.id,
            scope: self.scope,
            global: self.global,
            callback: self.callback.clone(),
        }
    }
}

impl<F: ?Sized> Hook<F> {
    pub(crate) fn admitted_by(&self, carrier: Option<&Scope>) -> bool {
        match (self.global, self.scope, carrier) {
            (true, _, _) | (false, None, _) | (false, Some(_), None) => true,
            (false, Some(scope), Some(carrier)) => carrier.admits(scope),
        }
    }
}

/// Copy-on-write listener list of one event type.
pub(crate) struct Slot<F: ?Sized> {
    hooks: RwLock<Arc<Vec<Hook<F>>>>,
}

impl<F: ?Sized> Slot<F> {
    fn new() -> Self {
        Self {
            hooks: RwLock::new(Arc::new(Vec::new())),
        }
    }

    pub(crate) fn insert(&self, hook: Hook<F>, prepend: bool) {
        let mut guard = self.hooks.write().unwrap_or_else(|p| p.into_inner());
        let mut next: Vec<Hook<F>> = guard.as_ref().clone();
        if prepend {
            next.insert(0, hook);
        } else {
            next.push(hook);
        }
        *guard = Arc::new(next);
    }

    pub(crate) fn remove(&self, id: u64) {
        let mut guard = self.hooks.write().unwrap_or_else(|p| p.into_inner());
        if guard.iter().any(|h| h.id == id) {
            let next: Vec<Hook<F>> = guard.iter().filter(|h| h.id != id).cloned().collect();
            *guard = Arc::new(next);
        }
    }

    pub(crate) fn snapshot(&self) -> Arc<Vec<Hook<F>>> {
        self.hooks.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The callbacks admitted by `carrier`, in order.
    pub(crate) fn select(&self, carrier: Option<&Scope>) -> Vec<Arc<F>> {
        let snapshot = self.snapshot();
        snapshot
            .iter()
            .filter(|h| h.admitted_by(carrier))
            .map(|h| h.callback.clone())
            .collect()
    }
}

/// All listener lists, keyed by event type.
#[derive(Default)]
pub(crate) struct EventBus {
    slots: RwLock<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    pub(crate) listeners: std::sync::atomic::AtomicUsize,
}

impl EventBus {
    pub(crate) fn slot<F: ?Sized + Send + Sync + 'static>(&self, key: TypeId) -> Arc<Slot<F>> {
        if let Some(existing) = self
            .slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            && let Ok(slot) = existing.clone().downcast::<Slot<F>>()
        {
            return slot;
        }
        let mut slots = self.slots.write().unwrap_or_else(|p| p.into_inner());
        let entry = slots
            .entry(key)
            .or_insert_with(|| Arc::new(Slot::<F>::new()));
        match entry.clone().downcast::<Slot<F>>() {
            Ok(slot) => slot,
            // Each event type has exactly one listener type, so the downcast cannot fail;
            // fall back to a fresh detached slot rather than panicking.
            Err(_) => Arc::new(Slot::new()),
        }
    }

    pub(crate) fn existing<F: ?Sized + Send + Sync + 'static>(
        &self,
        key: TypeId,
    ) -> Option<Arc<Slot<F>>> {
        self.slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .and_then(|s| s.clone().downcast::<Slot<F>>().ok())
    }

    /// Total number of registered listeners over all events.
    pub(crate) fn total_listeners(&self) -> usize {
        self.listeners.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Runs the emit listeners admitted by `carrier`, with containment.
pub(crate) fn run_emit<E: EmitEvent>(
    hooks: &[Hook<EmitFn<E>>],
    carrier: Option<&Scope>,
    payload: &E::Payload,
) {
    for cb in hooks
        .iter()
        .filter(|h| h.admitted_by(carrier))
        .map(|h| &h.callback)
    {
        match std::panic::catch_unwind(AssertUnwindSafe(|| cb(payload))) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(event = E::NAME, %error, "listener failed (contained)");
            }
            Err(_) => {
                tracing::error!(event = E::NAME, "listener panicked (contained)");
            }
        }
    }
}

/// The rest of a waterfall chain, handed to each listener. It walks the listener snapshot
/// taken at dispatch, skipping listeners the carrier does not admit (no per-dispatch
/// allocation of the selection).
pub struct Next<'a, E: WaterfallEvent> {
    chain: Arc<Vec<Hook<WaterfallFn<E>>>>,
    index: usize,
    carrier: Option<Scope>,
    payload: &'a E::Payload,
    default: &'a DefaultFn<'a, E>,
}

impl<'a, E: WaterfallEvent> Next<'a, E> {
    pub(crate) fn new(
        chain: Arc<Vec<Hook<WaterfallFn<E>>>>,
        carrier: Option<Scope>,
        payload: &'a E::Payload,
        default: &'a DefaultFn<'a, E>,
    ) -> Self {
        Self {
            chain,
            index: 0,
            carrier,
            payload,
            default,
        }
    }

    /// Runs the remaining listeners and, innermost, the default decision.
    pub fn run(self) -> BoxFuture<'a, Result<E::Output, BoxError>> {
        let mut i = self.index;
        while let Some(h) = self.chain.get(i) {
            if h.admitted_by(self.carrier.as_ref()) {
                let head = h.callback.clone();
                let next = Next {
                    chain: self.chain,
                    index: i + 1,
                    carrier: self.carrier,
                    payload: self.payload,
                    default: self.default,
                };
                return head(self.payload, next);
            }
            i += 1;
        }
        (self.default)(self.payload)
    }
}
