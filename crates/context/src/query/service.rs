//! The `sessionQuery` service: exact reads and traces over live and stored sessions, and
//! full-text search through the SQLite index.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{Context, HarnessError};
use dsh_persistence::SessionFiles;
use dsh_session::{Event, SessionHeader, SessionStore, types};
use serde_json::Value;

use super::extract::{SurfaceClass, SurfaceFold};
use super::index::{EventFilters, Hit, SearchIndex};

/// A failure the tools report to the model with a fixed, model-safe message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryError {
    SessionNotFound,
    EventNotFound,
    CorruptSession,
    PersistenceFailed,
    IndexFailed,
    SearchDisabled,
    Aborted,
    Unauthorized,
    MissingAgent,
    NoCurrentStep,
}

impl QueryError {
    pub fn code(self) -> &'static str {
        match self {
            // A target that does not exist.
            QueryError::SessionNotFound => "SESSION_QUERY_SESSION_NOT_FOUND",
            QueryError::EventNotFound => "SESSION_QUERY_EVENT_NOT_FOUND",
            // Storage, index and caller failures.
            QueryError::CorruptSession => "SESSION_QUERY_CORRUPT_SESSION",
            QueryError::PersistenceFailed => "SESSION_QUERY_PERSISTENCE_FAILED",
            QueryError::IndexFailed => "SESSION_QUERY_INDEX_FAILED",
            QueryError::SearchDisabled => "SESSION_QUERY_SEARCH_DISABLED",
            QueryError::Aborted => "SESSION_QUERY_ABORTED",
            QueryError::Unauthorized => "SESSION_QUERY_TOOL_UNAUTHORIZED",
            QueryError::MissingAgent => "SESSION_QUERY_TOOL_MISSING_AGENT",
            QueryError::NoCurrentStep => "SESSION_QUERY_TOOL_NO_CURRENT_STEP",
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            QueryError::SessionNotFound => "session was not found",
            QueryError::EventNotFound => "session event was not found",
            QueryError::CorruptSession => "session event history is corrupt",
            QueryError::PersistenceFailed => "session history storage is unavailable",
            QueryError::IndexFailed => "session search index is unavailable",
            QueryError::SearchDisabled => "session search is disabled in this deployment",
            QueryError::Aborted => "session query was cancelled",
            QueryError::Unauthorized => "session target is outside the caller workspace",
            QueryError::MissingAgent => "session query tools need a calling agent session",
            QueryError::NoCurrentStep => "the current session has no open step to exclude",
        }
    }

    pub fn into_error(self) -> HarnessError {
        HarnessError::new("HarnessError", self.code(), self.message())
    }
}

/// One session as the service sees it.
pub struct SessionView {
    pub header: SessionHeader,
    pub events: Vec<Arc<Event>>,
    pub live: bool,
    pub persisted: bool,
    /// The stored log, when there is one (index revision).
    pub path: Option<PathBuf>,
}

impl SessionView {
    /// The latest `session/title` text.
    pub fn title(&self) -> Option<String> {
        self.events
            .iter()
            .rev()
            .find(|e| e.is(types::SESSION_TITLE))
            .and_then(|e| {
                e.data
                    .get("title")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
    }

    pub fn title_text(&self) -> String {
        self.title().unwrap_or_else(|| "untitled".into())
    }

    pub fn availability(&self) -> String {
        availability(self.live, self.persisted)
    }
}

pub fn availability(live: bool, persisted: bool) -> String {
    match (live, persisted) {
        (true, true) => "live, persisted".into(),
        (true, false) => "live".into(),
        (false, true) => "persisted".into(),
        (false, false) => "unavailable".into(),
    }
}

/// A session's header and where it is, without its events.
#[derive(Clone, Debug)]
pub struct SessionRecord {
    pub header: SessionHeader,
    pub live: bool,
    pub persisted: bool,
    pub path: Option<PathBuf>,
}

/// Configuration of the service (the `session-query-sqlite` row).
#[derive(Clone, Debug)]
pub struct QueryConfig {
    pub read_window_max: u64,
    pub snippet_chars: usize,
}

/// The `sessionQuery` service.
pub struct SessionQuery {
    ctx: Context,
    pub config: QueryConfig,
    index: Option<Arc<SearchIndex>>,
}

impl SessionQuery {
    /// `index: None` disables full-text search (`openAt: never`).
    pub fn new(ctx: Context, config: QueryConfig, index: Option<Arc<SearchIndex>>) -> Arc<Self> {
        Arc::new(Self { ctx, config, index })
    }

    fn files(&self) -> Option<Arc<SessionFiles>> {
        self.ctx.get::<SessionFiles>()
    }

    /// Every known session: live ones and stored ones (live shadows stored).
    pub fn records(&self) -> Result<Vec<SessionRecord>, QueryError> {
        let mut out: BTreeMap<String, SessionRecord> = BTreeMap::new();
        if let Some(files) = self.files() {
            let listed = files.list().map_err(|e| {
                tracing::warn!("session query: cannot list stored sessions: {e}");
                QueryError::PersistenceFailed
            })?;
            for (header, path) in listed {
                out.insert(
                    header.id.clone(),
                    SessionRecord {
                        header,
                        live: false,
                        persisted: true,
                        path: Some(path),
                    },
                );
            }
        }
        if let Some(store) = self.ctx.get::<SessionStore>() {
            for live in store.list() {
                let header = live.header();
                let entry = out.entry(header.id.clone()).or_insert(SessionRecord {
                    header: header.clone(),
                    live: true,
                    persisted: false,
                    path: None,
                });
                entry.live = true;
                entry.header = header;
            }
        }
        Ok(out.into_values().collect())
    }

    /// The session `id` with its events (live when it is live in this process).
    pub fn view(&self, id: &str) -> Result<SessionView, QueryError> {
        let files = self.files();
        let stored = files.as_ref().and_then(|f| f.find(id).ok().flatten());
        if let Some(live) = self.ctx.get::<SessionStore>().and_then(|s| s.get(id)) {
            return Ok(SessionView {
                header: live.header(),
                events: live.events(),
                live: true,
                persisted: stored.is_some(),
                path: stored,
            });
        }
        let (Some(files), Some(path)) = (files, stored) else {
            return Err(QueryError::SessionNotFound);
        };
        let loaded = files.inspect(id).map_err(|e| {
            tracing::warn!("session query: cannot read session {id}: {e}");
            QueryError::CorruptSession
        })?;
        Ok(SessionView {
            header: loaded.header,
            events: loaded.events,
            live: false,
            persisted: true,
            path: Some(path),
        })
    }

    /// `target` (default: the caller) when it shares the caller's workspace.
    pub fn authorized(
        &self,
        caller: &SessionHeader,
        target: Option<&str>,
    ) -> Result<SessionView, QueryError> {
        let id = target.unwrap_or(&caller.id);
        let view = self.view(id)?;
        if id != caller.id && (caller.cwd.is_none() || view.header.cwd != caller.cwd) {
            return Err(QueryError::Unauthorized);
        }
        Ok(view)
    }

    /// Searches one session's events.
    pub fn search_events(
        &self,
        view: &SessionView,
        query: &str,
        filters: &EventFilters,
        limit: usize,
    ) -> Result<Vec<Hit>, QueryError> {
        let index = self.index.as_ref().ok_or(QueryError::SearchDisabled)?;
        index.sync(view).map_err(|e| {
            tracing::warn!("session query: indexing failed: {e}");
            QueryError::IndexFailed
        })?;
        index
            .search(
                query,
                Some(std::slice::from_ref(&view.header.id)),
                filters,
                limit,
                self.config.snippet_chars,
            )
            .map_err(|e| {
                tracing::warn!("session query: search failed: {e}");
                QueryError::IndexFailed
            })
    }

    /// Searches every session in `records`: the best event of each, best first.
    pub fn search_sessions(
        &self,
        records: &[SessionRecord],
        query: &str,
        filters: &EventFilters,
        limit: usize,
    ) -> Result<Vec<Hit>, QueryError> {
        let index = self.index.as_ref().ok_or(QueryError::SearchDisabled)?;
        for record in records {
            if !index.is_fresh(record) {
                match self.view(&record.header.id) {
                    Ok(view) => index.sync(&view).map_err(|e| {
                        tracing::warn!("session query: indexing failed: {e}");
                        QueryError::IndexFailed
                    })?,
                    Err(e) => tracing::warn!(
                        "session query: skipping session {}: {}",
                        record.header.id,
                        e.message()
                    ),
                }
            }
        }
        let ids: Vec<String> = records.iter().map(|r| r.header.id.clone()).collect();
        let hits = index
            .search(
                query,
                Some(&ids),
                filters,
                usize::MAX,
                self.config.snippet_chars,
            )
            .map_err(|e| {
                tracing::warn!("session query: search failed: {e}");
                QueryError::IndexFailed
            })?;
        let mut best: Vec<Hit> = Vec::new();
        for hit in hits {
            if !best.iter().any(|b| b.session_id == hit.session_id) {
                best.push(hit);
            }
            if best.len() >= limit {
                break;
            }
        }
        Ok(best)
    }
}

/// The trace of one event: replacements and source relationships.
pub struct EventTrace {
    pub class: SurfaceClass,
    pub replaced_by: Option<u64>,
    pub chain: Vec<u64>,
    pub replaced: Vec<u64>,
    pub sources: Vec<u64>,
    pub derived: Vec<u64>,
}

/// Traces event `seq` of `events`.
pub fn trace_event(events: &[Arc<Event>], seq: u64) -> Option<EventTrace> {
    let target = events.get(seq as usize)?;
    let fold = SurfaceFold::of(events);
    let replaced_by = fold.replaced_by.get(&seq).copied();
    let mut chain = Vec::new();
    let mut at = replaced_by;
    while let Some(s) = at {
        chain.push(s);
        at = fold.replaced_by.get(&s).copied();
    }
    let mut replaced = fold.replaced.get(&seq).cloned().unwrap_or_default();
    replaced.sort_unstable();
    let derived = events[seq as usize + 1..]
        .iter()
        .filter(|e| {
            e.source_event_seqs
                .as_ref()
                .is_some_and(|s| s.contains(&seq))
        })
        .map(|e| e.seq)
        .collect();
    Some(EventTrace {
        class: fold.class(seq),
        replaced_by,
        chain,
        replaced,
        sources: target.source_event_seqs.clone().unwrap_or_default(),
        derived,
    })
}
