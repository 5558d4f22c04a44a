//! Scope keys: an agent (or any other subject) owns a scope; listeners registered through a
//! scoped context receive only events dispatched for that scope or one of its descendants.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

/// Identity of one scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopeId(u64);

/// A scope and its ancestor chain (nearest first). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Scope {
    chain: Arc<[ScopeId]>,
}

impl Scope {
    /// A new root scope.
    pub fn new_root() -> Self {
        Self {
            chain: Arc::from([ScopeId(NEXT_SCOPE.fetch_add(1, Ordering::Relaxed))]),
        }
    }

    /// A new scope whose parent is `self`. Events dispatched for the child also reach
    /// listeners scoped to `self` (events flow up the chain, never down).
    pub fn child(&self) -> Self {
        let mut chain = Vec::with_capacity(self.chain.len() + 1);
        chain.push(ScopeId(NEXT_SCOPE.fetch_add(1, Ordering::Relaxed)));
        chain.extend_from_slice(&self.chain);
        Self {
            chain: chain.into(),
        }
    }

    pub fn id(&self) -> ScopeId {
        self.chain[0]
    }

    /// Whether a listener registered in scope `id` may receive an event carried by `self`.
    pub fn admits(&self, id: ScopeId) -> bool {
        self.chain.contains(&id)
    }

    /// This scope and its ancestors, nearest first.
    pub fn chain(&self) -> &[ScopeId] {
        &self.chain
    }
}
