//! Managing stored sessions from a frontend: every log under the root (unreadable ones
//! included, so a list can show them), a summary for listing and search, the fork cut, and
//! deletion under the session's writer lock.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_session::{Event, SessionHeader, types};
use serde_json::Value;

use crate::error::PersistenceError;
use crate::files::SessionFiles;
use crate::layout::{self, Compression};
use crate::lock::HeldLocks;

/// Most searchable text a summary keeps per session.
const MAX_SEARCH_TEXT: usize = 256 * 1024;

/// What a session list shows about one stored session.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSummary {
    pub header: SessionHeader,
    pub path: PathBuf,
    /// The last `session/title` (empty when none).
    pub title: String,
    /// The later of the creation time and the last human prompt (ms).
    pub updated_at: i64,
    /// `turn/start` events.
    pub turns: usize,
    /// No turn ever started (an empty "new session").
    pub blank: bool,
    /// Events in the log (repair closers included).
    pub events: usize,
    /// User and assistant text, in order, for search (at most 256 KiB).
    pub text: String,
}

impl SessionSummary {
    /// Summarizes a session's events.
    pub fn of(header: SessionHeader, path: PathBuf, events: &[Arc<Event>]) -> Self {
        let mut title = String::new();
        let mut updated_at = header.created_at as i64;
        let mut turns = 0;
        let mut text = String::new();
        for e in events {
            match e.event_type.as_ref() {
                types::SESSION_TITLE => {
                    if let Some(t) = e.data.get("title").and_then(Value::as_str) {
                        title = t.to_string();
                    }
                }
                types::TURN_START => turns += 1,
                types::USER_MESSAGE | types::ASSISTANT_MESSAGE => {
                    // `user/message` data is the message; `assistant/message` nests it.
                    let message = match e.is(types::USER_MESSAGE) {
                        true => &e.data,
                        false => &e.data["message"],
                    };
                    let human = e.is(types::USER_MESSAGE)
                        && message.pointer("/source/kind").and_then(Value::as_str) == Some("user");
                    if human {
                        updated_at = updated_at.max(e.time);
                    }
                    if (human || !e.is(types::USER_MESSAGE)) && text.len() < MAX_SEARCH_TEXT {
                        let blocks = message.get("content").and_then(Value::as_array);
                        for b in blocks.into_iter().flatten() {
                            if b.get("type").and_then(Value::as_str) == Some("text")
                                && let Some(t) = b.get("text").and_then(Value::as_str)
                            {
                                text.push_str(t);
                                text.push('\n');
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if text.len() > MAX_SEARCH_TEXT {
            let mut cut = MAX_SEARCH_TEXT;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        Self {
            header,
            path,
            title,
            updated_at,
            turns,
            blank: turns == 0,
            events: events.len(),
            text,
        }
    }
}

/// The fork cut: the end of the turn containing `at` (the first `turn/end` at or after it;
/// default the last one), extended to just before the next `turn/start`. Returns how many
/// leading events the child keeps.
pub fn fork_cut(events: &[Arc<Event>], at: Option<u64>) -> Result<usize, String> {
    let ends: Vec<u64> = events
        .iter()
        .filter(|e| e.is(types::TURN_END))
        .map(|e| e.seq)
        .collect();
    let last_seq = events.last().map(|e| e.seq).unwrap_or(0);
    let boundary = match at {
        Some(at) if at <= last_seq => match ends.iter().find(|s| **s >= at) {
            Some(b) => *b,
            None => {
                return Err(format!(
                    "the turn containing event {at} has not completed; nothing to fork"
                ));
            }
        },
        _ => *ends
            .last()
            .ok_or("the session has no completed turn to fork from")?,
    };
    let Some(mut cut) = events.iter().position(|e| e.seq == boundary).map(|i| i + 1) else {
        return Err(format!("event {boundary} is not in the log"));
    };
    while cut < events.len() && !events[cut].is(types::TURN_START) {
        cut += 1;
    }
    Ok(cut)
}

impl SessionFiles {
    /// The current log of every session directory under the root, of either compression
    /// (per directory the newest format generation), without reading any of them.
    pub fn log_paths(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let Ok(projects) = std::fs::read_dir(&self.root) else {
            return out;
        };
        for project in projects.flatten() {
            let Ok(sessions) = std::fs::read_dir(project.path()) else {
                continue;
            };
            for s in sessions.flatten() {
                crate::lock::sweep_temp_files(&s.path());
                let newest = [Compression::Zstd, Compression::None]
                    .into_iter()
                    .flat_map(|c| layout::generations(&s.path(), c))
                    .max_by_key(|(version, _)| *version);
                if let Some((_, path)) = newest {
                    out.push(path);
                }
            }
        }
        out.sort();
        out
    }

    /// Reads and summarizes one log (read-only; a repair happens in memory only).
    pub fn summarize_file(&self, path: &Path) -> Result<SessionSummary, PersistenceError> {
        let loaded = self.inspect_file(path)?;
        Ok(SessionSummary::of(
            loaded.header,
            path.to_path_buf(),
            &loaded.events,
        ))
    }

    /// Deletes session `id`: its directory (every log generation, the lock file and spilled
    /// outputs) is removed while its writer lock is held, so a session live in any process
    /// (this one included: close it first) is refused with [`PersistenceError::Locked`].
    /// Returns the removed directory.
    pub fn delete(&self, id: &str) -> Result<PathBuf, PersistenceError> {
        let path = self.find(id)?.ok_or_else(|| PersistenceError::NotFound {
            id: id.to_string(),
            root: self.root.clone(),
        })?;
        let dir = path
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| PersistenceError::corrupt(&path, "a log outside any directory"))?;
        if self.holds_lock(id) {
            return Err(PersistenceError::Locked {
                id: id.to_string(),
                path: dir.join(crate::LOCK_FILE),
                holder: "this process (close the session first)".into(),
            });
        }
        // A lock handle of its own: taking it fails while anyone (this process included)
        // appends to the session.
        let locks = HeldLocks::default();
        locks.acquire(id, &dir)?;
        let removed = std::fs::remove_dir_all(&dir)
            .map_err(|e| PersistenceError::io("cannot delete session directory", &dir, e));
        locks.release(id);
        removed.map(|()| dir)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::files::ChunkPacking;
    use pretty_assertions::assert_eq;

    fn header(id: &str, cwd: &str) -> SessionHeader {
        let mut h = SessionHeader::new(id.to_string(), 1_000);
        h.cwd = Some(cwd.to_string());
        h
    }

    fn session_events(id: &str) -> Vec<Arc<Event>> {
        let mut s = dsh_session::Session::new(header(id, "/w"));
        let append = |s: &mut dsh_session::Session, t: &str, d: Value, time: i64| {
            let surface = (t == "user/message").then(dsh_session::SurfaceIntent::append);
            s.append_at(t, d, surface, time).unwrap();
        };
        append(&mut s, "turn/start", serde_json::json!({"turn": 1}), 2_000);
        append(
            &mut s,
            "step/start",
            serde_json::json!({"turn": 1, "step": 1}),
            2_000,
        );
        let user = dsh_llm::Message::user_text("find the needle");
        append(&mut s, "user/message", user.to_value(), 3_000);
        append(
            &mut s,
            "session/title",
            serde_json::json!({"title": "Needle hunt", "source": {"kind": "fallback"}}),
            3_000,
        );
        append(
            &mut s,
            "step/end",
            serde_json::json!({"turn": 1, "step": 1}),
            4_000,
        );
        append(
            &mut s,
            "turn/end",
            serde_json::json!({"turn": 1, "reason": {"kind": "completed"}}),
            4_000,
        );
        s.events().to_vec()
    }

    #[test]
    fn summaries_list_and_delete_under_the_lock() {
        let root = tempfile::tempdir().unwrap();
        let files = SessionFiles::new(root.path(), Compression::Zstd, ChunkPacking::Packed);
        let events = session_events("s-1");
        let path = files.create(&header("s-1", "/w"), &events).unwrap();
        assert_eq!(files.log_paths(), vec![path.clone()]);
        let summary = files.summarize_file(&path).unwrap();
        assert_eq!(
            (
                summary.title.as_str(),
                summary.updated_at,
                summary.turns,
                summary.blank
            ),
            ("Needle hunt", 3_000, 1, false)
        );
        assert!(summary.text.contains("find the needle"));
        assert_eq!(fork_cut(&events, None), Ok(events.len()));
        assert!(fork_cut(&events[..4], None).is_err());

        // Held by a "writer": refused, nothing removed.
        files.load("s-1").unwrap();
        assert!(matches!(
            files.delete("s-1"),
            Err(PersistenceError::Locked { .. })
        ));
        assert!(path.exists());
        files.release("s-1");
        let dir = files.delete("s-1").unwrap();
        assert!(!dir.exists());
        assert!(files.log_paths().is_empty());
        assert!(matches!(
            files.delete("s-1"),
            Err(PersistenceError::NotFound { .. })
        ));
    }
}
