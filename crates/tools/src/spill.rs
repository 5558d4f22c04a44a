//! The spill vocabulary (no IO): where complete tool outputs that do not fit inline are
//! saved, and how a tool or policy names what it saved. The `spillStore` service is
//! provided by a storage plugin (`dsh-context`'s `spill-local`); every tool and the spill
//! policy use this one mechanism.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{BoxError, BoxFuture};

/// Where a saved complete result can be found.
#[derive(Clone, Debug, PartialEq)]
pub struct SpillRef {
    pub locator: String,
    /// How to read it back (appended after the locator).
    pub retrieval_hint: String,
}

/// One complete formatted result to save.
#[derive(Clone, Debug, PartialEq)]
pub struct SpillRequest {
    pub session_id: String,
    pub tool_name: String,
    pub call_id: String,
    pub suggested_name: String,
    pub content: String,
}

/// A store for complete results that do not fit inline. Implementations must persist the
/// whole `content` under a locator the model can later `read` or `grep`, must not block the
/// async runtime, and report failures as errors (a failure only costs the recovery path).
pub trait TextSpillStore: Send + Sync + 'static {
    fn save_text(&self, request: SpillRequest) -> BoxFuture<'static, Result<SpillRef, BoxError>>;

    /// The session's spill directory, for tools that stream a whole output to a file as it
    /// is produced (bash). Created privately (0700) on demand; `None` when the store has no
    /// place for the session.
    fn session_dir(&self, _session_id: &str) -> Option<PathBuf> {
        None
    }
}

/// The `spillStore` service. Without it (or without a session) an over-cap result says it
/// could not be saved.
pub struct SpillStore(pub Arc<dyn TextSpillStore>);
