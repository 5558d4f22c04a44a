//! Session summaries for the list and search: stored logs are summarized once per
//! (path, modification time, length) and cached; live sessions are summarized from their
//! in-memory log. An unreadable log is listed with its error instead of being skipped.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use dsh_persistence::{SessionFiles, SessionSummary};

/// One stored session as listed.
#[derive(Clone, Debug)]
pub enum Listed {
    Ok(Arc<SessionSummary>),
    /// The log could not be read: its path, the session id from the directory name, why.
    Unreadable {
        path: PathBuf,
        id: String,
        error: String,
    },
}

type Key = (SystemTime, u64);

/// The summary cache.
#[derive(Default)]
pub struct Listing {
    cache: Mutex<HashMap<PathBuf, (Key, Listed)>>,
}

impl Listing {
    /// Every stored session under `files`' root except those whose session directory is
    /// named in `skip` (live sessions are summarized from memory, not re-read from a log
    /// that grows on every step). Blocking: call from `spawn_blocking`.
    pub fn stored(&self, files: &SessionFiles, skip: &HashSet<String>) -> Vec<Listed> {
        let paths: Vec<PathBuf> = files
            .log_paths()
            .into_iter()
            .filter(|p| {
                let dir = p.parent().and_then(|d| d.file_name());
                !dir.is_some_and(|d| skip.contains(d.to_string_lossy().as_ref()))
            })
            .collect();
        let mut out = Vec::with_capacity(paths.len());
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.retain(|p, _| paths.contains(p));
        for path in paths {
            let key = match std::fs::metadata(&path) {
                Ok(m) => (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()),
                Err(_) => continue, // removed meanwhile
            };
            if let Some((k, listed)) = cache.get(&path)
                && *k == key
            {
                out.push(listed.clone());
                continue;
            }
            let listed = match files.summarize_file(&path) {
                Ok(s) => Listed::Ok(Arc::new(s)),
                Err(e) => {
                    tracing::warn!("web: cannot list {}: {e}", path.display());
                    Listed::Unreadable {
                        id: path
                            .parent()
                            .and_then(|d| d.file_name())
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                        path: path.clone(),
                        error: e.to_string(),
                    }
                }
            };
            cache.insert(path, (key, listed.clone()));
            out.push(listed);
        }
        out
    }
}
