//! Why a persistence operation failed.

use std::io;
use std::path::{Path, PathBuf};

use dsh_session::StorageError;

/// A persistence operation failed. Every variant that concerns a file names it.
#[derive(Debug, thiserror::Error)]
pub enum PersistenceError {
    /// The file is not a session log, its frames are invalid, or it is damaged at or before
    /// its last committed `turn/end`. The file is left untouched. Not retryable.
    #[error("corrupt session log \"{}\": {detail}", path.display())]
    Corrupt { path: PathBuf, detail: String },
    /// The log was written in another format version, or holds an event type this build
    /// does not know that is not marked ignorable. Not retryable with this build.
    #[error("{message} (raw log: {})", path.display())]
    Unsupported { path: PathBuf, message: String },
    /// A filesystem operation failed. Retryable once the cause (space, permissions, a
    /// blocking file) is fixed; a failed append has been rolled back.
    #[error("{op} \"{}\": {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// An append failed and truncating the partial batch away failed too. The next load
    /// cuts the torn tail; retrying the append before that may duplicate records.
    #[error("failed to roll back append to \"{}\": {write}; rollback failed: {rollback}", path.display())]
    RollbackFailed {
        path: PathBuf,
        write: io::Error,
        rollback: io::Error,
    },
    /// Another process holds the session's writer lock (it is live there). Retryable once
    /// that process is done with it.
    #[error("session \"{id}\" is in use by {holder} (lock \"{}\"); wait for it to finish, or fork the session to continue separately", path.display())]
    Locked {
        id: String,
        path: PathBuf,
        holder: String,
    },
    /// No stored log has this id. Not retryable.
    #[error("session \"{id}\" not found under \"{}\"", root.display())]
    NotFound { id: String, root: PathBuf },
    /// A log for this id already exists on disk; creating the session again would fork
    /// its identity. Load/resume it instead. Not retryable.
    #[error("session \"{id}\" cannot be created: it already has a persisted log on disk (\"{}\"); load or resume that session instead", path.display())]
    AlreadyPersisted { id: String, path: PathBuf },
    /// The same id has logs in several project directories. Not retryable.
    #[error(
        "duplicate JSONL session id \"{id}\" appears in multiple project directories: {}",
        list_paths(paths)
    )]
    DuplicateId { id: String, paths: Vec<PathBuf> },
    /// The root holds a log of the other encoding. Not retryable with this configuration.
    #[error(
        "session artifact \"{}\" uses {found}, but this backend is configured for compression \"{configured}\"; use a separate root or select the matching compression mode",
        path.display()
    )]
    EncodingMismatch {
        path: PathBuf,
        found: &'static str,
        configured: &'static str,
    },
    /// A log file sits directly in a project directory (an obsolete layout).
    #[error(
        "session artifact \"{}\" lies directly in a project directory, an old layout this backend does not read; move it into its own session directory below the project, or point the backend at a separate root",
        path.display()
    )]
    LegacyLayout { path: PathBuf },
    /// An id or cwd cannot name a storage path (it is empty).
    #[error("{0}")]
    InvalidPath(String),
    /// A setting of this store (an environment variable such as `DSH_MAX_LOG_BYTES`) is
    /// not valid; the message names it. Not retryable until it is fixed.
    #[error("{0}")]
    Setting(String),
}

fn list_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| format!("\"{}\"", p.display()))
        .collect::<Vec<_>>()
        .join(", ")
}

impl PersistenceError {
    pub(crate) fn io(op: &'static str, path: &Path, source: io::Error) -> Self {
        PersistenceError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn corrupt(path: &Path, detail: impl Into<String>) -> Self {
        PersistenceError::Corrupt {
            path: path.to_path_buf(),
            detail: detail.into(),
        }
    }

    /// Attaches `path` to a storage-level parse failure.
    pub(crate) fn from_storage(path: &Path, error: StorageError) -> Self {
        match error {
            StorageError::Corrupt(detail) => Self::corrupt(path, detail),
            StorageError::Unsupported(message) => PersistenceError::Unsupported {
                path: path.to_path_buf(),
                message,
            },
        }
    }

    /// Whether the failure is a refusal to interpret the log with this build.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, PersistenceError::Unsupported { .. })
    }

    /// Whether the failure is damage in (or a non-session) file.
    pub fn is_corrupt(&self) -> bool {
        matches!(self, PersistenceError::Corrupt { .. })
    }
}
