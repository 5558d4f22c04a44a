//! The full-text index (SQLite FTS5, `unicode61`) behind `session_search` and
//! `session_event_search`.
//!
//! The index is derived data: every document comes from a session log and can be rebuilt
//! from it. A session is re-indexed when its revision changed (more events, a new surface
//! replacement, or a changed stored file); appends without replacements only add rows. An
//! index file that is corrupt, or from another schema version, is deleted and rebuilt from
//! the logs; a file that belongs to another application is refused.

use std::path::Path;
use std::sync::{Arc, Mutex};

use dsh_session::{Event, SurfaceOp};
use rusqlite::{Connection, OptionalExtension, params};

use super::extract::{SurfaceClass, SurfaceFold, event_text};
use super::format::{MATCH_END, MATCH_START, match_count, sanitize, snippet};
use super::service::{SessionRecord, SessionView};

const APPLICATION_ID: i64 = 0x4453_4851;
const SCHEMA_VERSION: i64 = 8;

/// Filters on the events a search may return.
#[derive(Clone, Debug, Default)]
pub struct EventFilters {
    pub seq_from: Option<u64>,
    pub seq_to: Option<u64>,
    pub time_from: Option<i64>,
    pub time_to: Option<i64>,
    pub types: Option<Vec<String>>,
    pub surfaces: Option<Vec<SurfaceClass>>,
}

/// One matching event.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    pub session_id: String,
    pub seq: u64,
    pub event_type: String,
    pub time: i64,
    pub surface: SurfaceClass,
    pub snippet: String,
    pub match_count: usize,
    pub codepoints: u64,
}

/// Where the index lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexPath {
    Memory,
    File(std::path::PathBuf),
}

/// The index; one connection, used from blocking sections only.
pub struct SearchIndex {
    path: IndexPath,
    conn: Mutex<Option<Connection>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Revision {
    events: i64,
    replaces: i64,
    file_len: i64,
    file_mtime: i64,
}

fn file_stamp(path: Option<&Path>) -> (i64, i64) {
    let Some(meta) = path.and_then(|p| std::fs::metadata(p).ok()) else {
        return (-1, -1);
    };
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i64);
    (meta.len() as i64, mtime)
}

fn is_corruption(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

type SqlResult<T> = Result<T, rusqlite::Error>;

impl SearchIndex {
    pub fn new(path: IndexPath) -> Arc<Self> {
        Arc::new(Self {
            path,
            conn: Mutex::new(None),
        })
    }

    /// Opens (creating or rebuilding) the index now; `openAt: startup`.
    pub fn open_now(&self) -> Result<(), String> {
        self.with_conn(|_| Ok(()))
    }

    fn open(&self) -> Result<Connection, String> {
        match &self.path {
            IndexPath::Memory => {
                let conn = Connection::open_in_memory().map_err(|e| e.to_string())?;
                init(&conn).map_err(|e| e.to_string())?;
                Ok(conn)
            }
            IndexPath::File(path) => match open_file(path) {
                Ok(conn) => Ok(conn),
                Err(OpenError::Foreign) => Err(format!(
                    "{} is not a dsh session index; refusing to use it",
                    path.display()
                )),
                Err(OpenError::Rebuild(reason)) => {
                    tracing::warn!(
                        "session index {} is unusable ({reason}); rebuilding it from the session logs",
                        path.display()
                    );
                    for suffix in ["", "-wal", "-shm", "-journal"] {
                        let mut p = path.as_os_str().to_owned();
                        p.push(suffix);
                        let _ = std::fs::remove_file(p);
                    }
                    open_file(path).map_err(|e| match e {
                        OpenError::Foreign => "the index was replaced by a foreign file".into(),
                        OpenError::Rebuild(r) => r,
                    })
                }
            },
        }
    }

    /// Runs `f` on the connection, opening it first; a corrupt index is rebuilt and `f`
    /// retried once.
    fn with_conn<T>(&self, f: impl Fn(&Connection) -> SqlResult<T>) -> Result<T, String> {
        let mut guard = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        for attempt in 0..2 {
            if guard.is_none() {
                *guard = Some(self.open()?);
            }
            let Some(conn) = guard.as_ref() else {
                return Err("the session index is not open".into());
            };
            match f(conn) {
                Ok(v) => return Ok(v),
                Err(e) if attempt == 0 && is_corruption(&e) => {
                    tracing::warn!(
                        "session index is corrupt ({e}); rebuilding it from the session logs"
                    );
                    *guard = None;
                    if let IndexPath::File(path) = &self.path {
                        let _ = std::fs::remove_file(path);
                    }
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("the session index could not be rebuilt".into())
    }

    /// Whether a stored-only session's rows are current (live sessions are always synced).
    pub fn is_fresh(&self, record: &SessionRecord) -> bool {
        if record.live {
            return false;
        }
        let (len, mtime) = file_stamp(record.path.as_deref());
        self.with_conn(|conn| {
            Ok(read_revision(conn, &record.header.id)?
                .is_some_and(|r| r.file_len == len && r.file_mtime == mtime))
        })
        .unwrap_or(false)
    }

    /// Brings the rows of `view` up to date.
    pub fn sync(&self, view: &SessionView) -> Result<(), String> {
        let replaces = view
            .events
            .iter()
            .filter(|e| matches!(e.surface_op, Some(SurfaceOp::Replace { .. })))
            .count() as i64;
        let (file_len, file_mtime) = if view.live {
            (-1, -1)
        } else {
            file_stamp(view.path.as_deref())
        };
        let revision = Revision {
            events: view.events.len() as i64,
            replaces,
            file_len,
            file_mtime,
        };
        let id = view.header.id.as_str();
        self.with_conn(|conn| {
            let stored = read_revision(conn, id)?;
            if stored == Some(revision) {
                return Ok(());
            }
            let from = match stored {
                Some(s)
                    if s.replaces == revision.replaces
                        && s.file_len == revision.file_len
                        && s.events <= revision.events =>
                {
                    s.events as usize
                }
                _ => 0,
            };
            let tx = conn.unchecked_transaction()?;
            if from == 0 {
                tx.execute("DELETE FROM docs WHERE session_id = ?1", [id])?;
            }
            let fold = SurfaceFold::of(&view.events);
            insert_docs(&tx, id, &view.events[from.min(view.events.len())..], &fold)?;
            tx.execute(
                "INSERT OR REPLACE INTO sessions (session_id, events, replaces, file_len, file_mtime) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, revision.events, revision.replaces, revision.file_len, revision.file_mtime],
            )?;
            tx.commit()
        })
    }

    /// Matching events of `sessions`, best first (most matched spans, shortest document,
    /// newest), at most `limit`.
    pub fn search(
        &self,
        query: &str,
        sessions: Option<&[String]>,
        filters: &EventFilters,
        limit: usize,
        snippet_chars: usize,
    ) -> Result<Vec<Hit>, String> {
        let phrase = format!("\"{}\"", sanitize(query).replace('"', "\"\""));
        let mut hits = self.with_conn(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT session_id, seq, type, time, surface, codepoint_length, highlight(docs, 0, ?2, ?3) \
                 FROM docs WHERE docs MATCH ?1",
            )?;
            let rows = stmt.query_map(
                params![phrase, MATCH_START.to_string(), MATCH_END.to_string()],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, i64>(5)?,
                        r.get::<_, String>(6)?,
                    ))
                },
            )?;
            let mut out = Vec::new();
            for row in rows {
                let (session_id, seq, event_type, time, surface, cp, marked) = row?;
                if sessions.is_some_and(|s| !s.contains(&session_id)) {
                    continue;
                }
                let seq = seq.max(0) as u64;
                let surface = SurfaceClass::parse(&surface).unwrap_or(SurfaceClass::LogOnly);
                let keep = filters.seq_from.is_none_or(|f| seq >= f)
                    && filters.seq_to.is_none_or(|t| seq <= t)
                    && filters.time_from.is_none_or(|f| time >= f)
                    && filters.time_to.is_none_or(|t| time <= t)
                    && filters.types.as_ref().is_none_or(|t| t.contains(&event_type))
                    && filters.surfaces.as_ref().is_none_or(|s| s.contains(&surface));
                if !keep {
                    continue;
                }
                out.push(Hit {
                    session_id,
                    seq,
                    event_type,
                    time,
                    surface,
                    match_count: match_count(&marked),
                    snippet: snippet(&marked, snippet_chars),
                    codepoints: cp.max(0) as u64,
                });
            }
            Ok(out)
        })?;
        hits.sort_by(|a, b| {
            b.match_count
                .cmp(&a.match_count)
                .then(a.codepoints.cmp(&b.codepoints))
                .then(b.time.cmp(&a.time))
                .then(a.session_id.cmp(&b.session_id))
                .then(b.seq.cmp(&a.seq))
        });
        hits.truncate(limit);
        Ok(hits)
    }
}

enum OpenError {
    /// Another application's database: never touched.
    Foreign,
    /// Ours but unusable (corrupt, other version): delete and rebuild.
    Rebuild(String),
}

fn open_file(path: &Path) -> Result<Connection, OpenError> {
    let conn = Connection::open(path).map_err(|e| OpenError::Rebuild(e.to_string()))?;
    let check = || -> SqlResult<(i64, i64, String, i64)> {
        let app: i64 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let quick: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
        let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        Ok((app, version, quick, tables))
    };
    let (app, version, quick, tables) = check().map_err(|e| OpenError::Rebuild(e.to_string()))?;
    if app != APPLICATION_ID && (app != 0 || tables > 0) {
        return Err(OpenError::Foreign);
    }
    if quick != "ok" {
        return Err(OpenError::Rebuild(format!("quick_check: {quick}")));
    }
    if app == APPLICATION_ID && version != SCHEMA_VERSION {
        return Err(OpenError::Rebuild(format!("schema version {version}")));
    }
    // Several dsh processes may share one index file: wait for a writer instead of failing.
    let _ = conn.busy_timeout(std::time::Duration::from_secs(5));
    let _ = conn.pragma_update(None, "journal_mode", "wal");
    init(&conn).map_err(|e| OpenError::Rebuild(e.to_string()))?;
    Ok(conn)
}

fn init(conn: &Connection) -> SqlResult<()> {
    conn.execute_batch(&format!(
        "PRAGMA application_id = {APPLICATION_ID};
         PRAGMA user_version = {SCHEMA_VERSION};
         CREATE TABLE IF NOT EXISTS sessions (
             session_id TEXT PRIMARY KEY, events INTEGER NOT NULL, replaces INTEGER NOT NULL,
             file_len INTEGER NOT NULL, file_mtime INTEGER NOT NULL);
         CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(
             text, session_id UNINDEXED, seq UNINDEXED, type UNINDEXED, time UNINDEXED,
             surface UNINDEXED, codepoint_length UNINDEXED, tokenize = 'unicode61');"
    ))
}

fn read_revision(conn: &Connection, id: &str) -> SqlResult<Option<Revision>> {
    conn.query_row(
        "SELECT events, replaces, file_len, file_mtime FROM sessions WHERE session_id = ?1",
        [id],
        |r| {
            Ok(Revision {
                events: r.get(0)?,
                replaces: r.get(1)?,
                file_len: r.get(2)?,
                file_mtime: r.get(3)?,
            })
        },
    )
    .optional()
}

fn insert_docs(
    conn: &Connection,
    id: &str,
    events: &[Arc<Event>],
    fold: &SurfaceFold,
) -> SqlResult<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO docs (text, session_id, seq, type, time, surface, codepoint_length) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for e in events {
        let text = event_text(e);
        if text.is_empty() {
            continue;
        }
        let text = sanitize(&text);
        stmt.execute(params![
            text,
            id,
            e.seq as i64,
            e.event_type.as_str(),
            e.time,
            fold.class(e.seq).as_str(),
            text.chars().count() as i64,
        ])?;
    }
    // A new replacement changes the class of earlier rows: handled by a full re-index
    // (the revision counts replacements), so appended rows only need their own class.
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundled_sqlite_has_fts5() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE VIRTUAL TABLE t USING fts5(x)")
            .unwrap();
    }

    #[test]
    fn a_corrupt_index_file_is_rebuilt_and_a_foreign_one_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("index.sqlite");
        std::fs::write(&path, b"this is not a database, just bytes".repeat(200)).unwrap();
        let index = SearchIndex::new(IndexPath::File(path.clone()));
        index.open_now().unwrap();
        drop(index);
        // Reopening the rebuilt file works and keeps it.
        SearchIndex::new(IndexPath::File(path.clone()))
            .open_now()
            .unwrap();

        let foreign = tmp.path().join("other.sqlite");
        let conn = Connection::open(&foreign).unwrap();
        conn.execute_batch("CREATE TABLE mine (x)").unwrap();
        drop(conn);
        let err = SearchIndex::new(IndexPath::File(foreign.clone()))
            .open_now()
            .unwrap_err();
        assert!(err.contains("not a dsh session index"), "{err}");
        assert!(foreign.exists());
    }
}
