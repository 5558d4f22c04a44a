//! One writer per session across processes: an advisory `flock` on `session.lock` beside the
//! log, held by the process that appends to it.
//!
//! The lock is taken before a stored log is repaired for resuming and before a fresh log is
//! published, and released when the session's writer retires (or when the process dies: the
//! kernel drops `flock`s of dead processes, so a crash never leaves a stale lock behind).
//! While held, the file names its holder (`pid`, host, since) so a refused second writer can
//! say who has the session. Readers (listing, `show`, forking from a stored prefix) never
//! take it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::PersistenceError;

/// The lock file's name inside a session directory.
pub const LOCK_FILE: &str = "session.lock";

/// The locks this process holds, by session id.
#[derive(Clone, Debug, Default)]
pub(crate) struct HeldLocks {
    held: Arc<Mutex<HashMap<String, File>>>,
}

impl HeldLocks {
    fn map(&self) -> MutexGuard<'_, HashMap<String, File>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this process holds the lock of `id`.
    pub fn holds(&self, id: &str) -> bool {
        self.map().contains_key(id)
    }

    /// Takes the lock of session `id` whose directory is `dir` (which must exist). Taking a
    /// lock this process already holds is a no-op.
    pub fn acquire(&self, id: &str, dir: &Path) -> Result<(), PersistenceError> {
        let mut map = self.map();
        if map.contains_key(id) {
            return Ok(());
        }
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| PersistenceError::io("cannot open session lock", &path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(PersistenceError::Locked {
                    id: id.to_string(),
                    path,
                    holder: describe_holder(&mut file),
                });
            }
            Err(TryLockError::Error(e)) => {
                return Err(PersistenceError::io("cannot lock session", &path, e));
            }
        }
        // Best effort: the lock itself is what excludes; the text only names the holder.
        let note = holder_note();
        let _ = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(note.as_bytes()));
        map.insert(id.to_string(), file);
        Ok(())
    }

    /// Releases the lock of `id` (empties the holder note first).
    pub fn release(&self, id: &str) {
        if let Some(file) = self.map().remove(id) {
            let _ = file.set_len(0);
            drop(file); // closing the descriptor drops the flock
        }
    }
}

/// Whether `name` is a temp file [`crate::fsio::publish_new_file`] writes before linking a
/// log into place: `<log name>.<12 hex digits>.tmp`.
pub(crate) fn is_temp_log_name(name: &str) -> bool {
    let Some(rest) = name.strip_suffix(".tmp") else {
        return false;
    };
    let Some((log, suffix)) = rest.rsplit_once('.') else {
        return false;
    };
    suffix.len() == 12
        && suffix.bytes().all(|b| b.is_ascii_hexdigit())
        && log.starts_with("session.")
        && log.contains(".jsonl")
}

/// Removes the temp files of session directory `dir`. Only call it while holding the
/// session's lock: every temp file is written under that lock, so whatever is left then
/// belongs to a writer that died (killed between writing and publishing).
pub(crate) fn remove_temp_files_locked(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut removed = false;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_str().is_some_and(is_temp_log_name) {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => {
                    removed = true;
                    tracing::info!(path = %entry.path().display(), "removed a temp file a killed writer left");
                }
                Err(e) => {
                    tracing::warn!(path = %entry.path().display(), error = %e, "cannot remove a stale temp file");
                }
            }
        }
    }
    if removed {
        let _ = crate::fsio::sync_dir(dir);
    }
}

/// Removes temp files a killed writer left in session directory `dir`, when no process
/// holds the session's lock (a live writer may be about to publish one). Costs one
/// directory read; the lock is only tried when there is something to remove.
pub(crate) fn sweep_temp_files(dir: &Path) {
    let has_temp = std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_str().is_some_and(is_temp_log_name))
    });
    if !has_temp {
        return;
    }
    // No lock file: nobody ever held the lock here, so the files are not ours to judge.
    let Ok(file) = OpenOptions::new().read(true).open(dir.join(LOCK_FILE)) else {
        return;
    };
    if file.try_lock().is_ok() {
        remove_temp_files_locked(dir);
        // Closing the descriptor releases the lock; the holder note is left as it was.
    }
}

fn holder_note() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!(
        "{{\"pid\":{},\"host\":{},\"since\":{since}}}\n",
        std::process::id(),
        serde_json::Value::String(host)
    )
}

/// "pid 123 on host vm" from a held lock file's note, or a generic phrase.
fn describe_holder(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file
        .rewind()
        .and_then(|_| file.take(4096).read_to_string(&mut text).map(|_| ()));
    let note: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_default();
    match note.get("pid").and_then(serde_json::Value::as_u64) {
        Some(pid) => match note.get("host").and_then(serde_json::Value::as_str) {
            Some(host) if !host.is_empty() => format!("dsh process {pid} on {host}"),
            _ => format!("dsh process {pid}"),
        },
        None => "another process".to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn stale_temp_files_are_swept_only_when_the_lock_is_free() {
        assert!(is_temp_log_name("session.v4.jsonl.zstd.0123456789ab.tmp"));
        assert!(is_temp_log_name("session.jsonl.abcdef012345.tmp"));
        for other in [
            "session.v4.jsonl.zstd",
            "notes.0123456789ab.tmp",
            "session.v4.jsonl.zstd.0123.tmp",
            "session.v4.jsonl.zstd.0123456789xy.tmp",
            "session.lock",
        ] {
            assert!(!is_temp_log_name(other), "{other}");
        }
        let dir = tempfile::tempdir().unwrap();
        let temp = dir.path().join("session.v4.jsonl.zstd.0123456789ab.tmp");
        let keep = dir.path().join("notes.tmp");
        std::fs::write(&temp, b"x").unwrap();
        std::fs::write(&keep, b"x").unwrap();
        // No lock file: left alone.
        sweep_temp_files(dir.path());
        assert!(temp.exists());
        // A live holder: left alone.
        let live = HeldLocks::default();
        live.acquire("s", dir.path()).unwrap();
        sweep_temp_files(dir.path());
        assert!(temp.exists());
        // The holder died (its lock released): swept, other files kept.
        live.release("s");
        sweep_temp_files(dir.path());
        assert!(!temp.exists());
        assert!(keep.exists());
        assert!(dir.path().join(LOCK_FILE).exists());
    }

    #[test]
    fn a_second_holder_is_refused_with_the_first_named() {
        let dir = tempfile::tempdir().unwrap();
        let a = HeldLocks::default();
        let b = HeldLocks::default();
        a.acquire("s1", dir.path()).unwrap();
        a.acquire("s1", dir.path()).unwrap();
        let err = b.acquire("s1", dir.path()).unwrap_err().to_string();
        assert!(
            err.contains(&format!("dsh process {}", std::process::id())),
            "{err}"
        );
        a.release("s1");
        b.acquire("s1", dir.path()).unwrap();
        assert!(b.holds("s1"));
    }
}
