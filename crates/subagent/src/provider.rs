//! The provider seam: one named way to start a child.

use std::sync::Arc;

use dsh_agent::AgentRef;
use dsh_kernel::{BoxError, BoxFuture};
use dsh_session::Event;

use crate::types::{Capabilities, ResolvedStart, SubagentRun};

/// What a continuable child is seeded with (besides its own descriptor).
pub struct ContinuableSpec {
    /// Parent history the child inherits (a fork's completed turns); empty for a fresh child.
    pub prefix: Vec<Arc<Event>>,
}

/// A way to start children. Implementations must: honour `request.cancel` at every stage
/// (a cancelled start fails with an error, a cancelled run ends `aborted`); never leave a
/// child running after [`SubagentRun::dispose`] resolved; report failures as a result with
/// a stop reason and diagnostic where they can, and as an error only when no run exists.
pub trait SubagentProvider: Send + Sync + 'static {
    fn name(&self) -> &str;
    fn capabilities(&self) -> Capabilities;
    /// Whether the child sees the parent's completed turns (changes the tool's wording).
    fn inherits_parent_context(&self) -> bool;
    /// Starts one one-shot child; resolves once the child is published.
    fn start(&self, request: ResolvedStart) -> BoxFuture<'static, Result<SubagentRun, BoxError>>;
    /// The seed of a continuable child of `parent`; `None`: this provider has no continuable
    /// children (out-of-process providers).
    fn prepare_continuable(&self, _parent: &AgentRef) -> Option<ContinuableSpec> {
        None
    }
}
