//! Where a session's side files live (spilled tool outputs and the like): a directory owned
//! by the session's persistence backend, so they stay with the log they belong to — moved,
//! archived and deleted with it — instead of piling up in the temp directory.

use std::path::PathBuf;
use std::sync::Arc;

use crate::header::SessionHeader;

/// Implemented by persistence backends. Pure path computation: the directory may not exist
/// yet (callers create what they need inside it, privately).
pub trait SessionArtifacts: Send + Sync + 'static {
    /// The directory for side files of the session with `header`, if the backend has one.
    fn artifact_dir(&self, header: &SessionHeader) -> Option<PathBuf>;
}

/// The `ctx` service wrapping the backend's [`SessionArtifacts`].
#[derive(Clone)]
pub struct Artifacts(pub Arc<dyn SessionArtifacts>);
