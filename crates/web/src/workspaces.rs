//! The workspace registry: `<storages>/workspace.json`, upstream's unit `workspace` v2
//! (`global.{initialized, workspaceIds, archivedSessionIds, pinnedSessionIds}`,
//! `tables.workspaces.<uuid> = {path, title, sessionIds, createdAt, updatedAt}`).
//!
//! The file is read and rewritten whole (temp file, fsync, rename; directory 0700, file
//! 0600). Keys this build does not know are kept as they were. A file of another version or
//! that is not JSON is refused (nothing is written over it). Workspaces name directories;
//! removing one never touches the directory or its sessions.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Map, Value, json};

/// Why a workspace operation failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The path is not an existing directory. Not retryable.
    #[error("{path} is not an existing directory")]
    InvalidPath { path: String },
    /// No workspace has this id. Not retryable.
    #[error("no workspace {0}")]
    NotFound(String),
    /// Another workspace already has this title. Not retryable.
    #[error("a workspace named \"{0}\" already exists")]
    NameConflict(String),
    /// The title is empty after trimming. Not retryable.
    #[error("a workspace title cannot be empty")]
    EmptyTitle,
    /// The store file cannot be used (another version, not JSON). Not retryable.
    #[error("workspace store {path}: {detail}")]
    Store { path: String, detail: String },
    /// Reading or writing the file failed. Retryable.
    #[error("workspace store {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// One workspace as the API shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Workspace {
    pub id: String,
    pub path: String,
    pub title: String,
    pub session_ids: Vec<String>,
    pub created_at: String,
    pub updated_at: String,
}

impl Workspace {
    pub fn to_json(&self) -> Value {
        let missing = !Path::new(&self.path).is_dir();
        json!({
            "workspaceId": self.id,
            "path": self.path,
            "title": self.title,
            "sessionIds": self.session_ids,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "status": if missing { "missing-dir" } else { "ok" },
        })
    }
}

/// The registry (one per process; operations are serialized).
pub struct WorkspaceStore {
    path: PathBuf,
    lock: Mutex<()>,
}

fn iso_now() -> String {
    // RFC 3339 with milliseconds, UTC (upstream writes `Date.toISOString()`).
    let ms = crate::http::now_ms() as i64;
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(at) => format!("{at:.3}"),
        Err(_) => "1970-01-01T00:00:00.000Z".into(),
    }
}

fn empty_document() -> Value {
    json!({
        "unit": {"name": "workspace", "version": 2},
        "global": {"initialized": false, "workspaceIds": [], "archivedSessionIds": [], "pinnedSessionIds": []},
        "tables": {"workspaces": {}}
    })
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The whole document, with typed access to the parts this build uses.
struct Doc(Value);

impl Doc {
    fn global(&mut self) -> &mut Map<String, Value> {
        let root = ensure_object(&mut self.0);
        ensure_object(root.entry("global").or_insert_with(|| json!({})))
    }

    fn table(&mut self) -> &mut Map<String, Value> {
        let root = ensure_object(&mut self.0);
        let tables = ensure_object(root.entry("tables").or_insert_with(|| json!({})));
        ensure_object(tables.entry("workspaces").or_insert_with(|| json!({})))
    }

    fn ids(&self) -> Vec<String> {
        strings(self.0.pointer("/global/workspaceIds"))
    }

    fn archived(&self) -> Vec<String> {
        strings(self.0.pointer("/global/archivedSessionIds"))
    }

    fn set_list(&mut self, key: &str, list: Vec<String>) {
        self.global().insert(key.into(), json!(list));
    }

    fn workspace(&self, id: &str) -> Option<Workspace> {
        let row = self.0.pointer("/tables/workspaces")?.get(id)?;
        Some(Workspace {
            id: id.to_string(),
            path: row.get("path")?.as_str()?.to_string(),
            title: row
                .get("title")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            session_ids: strings(row.get("sessionIds")),
            created_at: row
                .get("createdAt")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            updated_at: row
                .get("updatedAt")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        })
    }

    fn all(&self) -> Vec<Workspace> {
        let mut order = self.ids();
        if let Some(Value::Object(table)) = self.0.pointer("/tables/workspaces") {
            for id in table.keys() {
                if !order.contains(id) {
                    order.push(id.clone());
                }
            }
        }
        order.iter().filter_map(|id| self.workspace(id)).collect()
    }

    fn row_mut(&mut self, id: &str) -> Option<&mut Map<String, Value>> {
        match self.table().get_mut(id) {
            Some(Value::Object(m)) => Some(m),
            _ => None,
        }
    }
}

/// `v` as an object, replacing anything else with an empty one.
fn ensure_object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let Value::Object(m) = v else {
        unreachable!("the value was just made an object")
    };
    m
}

impl WorkspaceStore {
    pub fn new(storage_root: &Path) -> Self {
        Self {
            path: storage_root.join("workspace.json"),
            lock: Mutex::new(()),
        }
    }

    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, source: std::io::Error) -> WorkspaceError {
        WorkspaceError::Io {
            path: self.path.display().to_string(),
            source,
        }
    }

    fn read(&self) -> Result<Doc, WorkspaceError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Doc(empty_document())),
            Err(e) => return Err(self.io(e)),
        };
        let store = |detail: String| WorkspaceError::Store {
            path: self.path.display().to_string(),
            detail,
        };
        let value: Value =
            serde_json::from_str(&text).map_err(|e| store(format!("not JSON ({e})")))?;
        match value.pointer("/unit/version").and_then(Value::as_u64) {
            Some(2) => {}
            other => {
                return Err(store(format!(
                    "unit version {} is not supported (expected 2)",
                    other.map_or("missing".into(), |v| v.to_string())
                )));
            }
        }
        if value.pointer("/unit/name").and_then(Value::as_str) != Some("workspace") {
            return Err(store("the unit is not \"workspace\"".into()));
        }
        Ok(Doc(value))
    }

    fn write(&self, doc: &Doc) -> Result<(), WorkspaceError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(|e| self.io(e))?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
            }
        }
        let text = serde_json::to_string_pretty(&doc.0).unwrap_or_default() + "\n";
        write_private(&self.path, text.as_bytes()).map_err(|e| self.io(e))
    }

    fn update<R>(
        &self,
        f: impl FnOnce(&mut Doc) -> Result<(R, bool), WorkspaceError>,
    ) -> Result<R, WorkspaceError> {
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut doc = self.read()?;
        let (result, changed) = f(&mut doc)?;
        if changed {
            self.write(&doc)?;
        }
        Ok(result)
    }

    /// Every workspace in order, and the archived session ids.
    pub fn list(&self) -> Result<(Vec<Workspace>, Vec<String>), WorkspaceError> {
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let doc = self.read()?;
        Ok((doc.all(), doc.archived()))
    }

    /// Whether the first-start bootstrap already ran.
    pub fn initialized(&self) -> Result<bool, WorkspaceError> {
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        Ok(self.read()?.0.pointer("/global/initialized") == Some(&Value::Bool(true)))
    }

    /// First start: one workspace per existing directory that stored sessions ran in
    /// (`(cwd, session ids newest first)`), then `initialized: true`.
    pub fn bootstrap(&self, groups: Vec<(String, Vec<String>)>) -> Result<(), WorkspaceError> {
        self.update(|doc| {
            if doc.0.pointer("/global/initialized") == Some(&Value::Bool(true)) {
                return Ok(((), false));
            }
            for (cwd, sessions) in groups {
                if !Path::new(&cwd).is_dir() || doc.all().iter().any(|w| w.path == cwd) {
                    continue;
                }
                let id = insert(doc, &cwd);
                if let Some(row) = doc.row_mut(&id) {
                    row.insert("sessionIds".into(), json!(sessions));
                }
            }
            doc.global().insert("initialized".into(), Value::Bool(true));
            Ok(((), true))
        })
    }

    /// Registers a directory (its canonical path); an already registered one is returned
    /// with `created: false`.
    pub fn create(&self, path: &str) -> Result<(Workspace, bool), WorkspaceError> {
        let invalid = || WorkspaceError::InvalidPath {
            path: path.to_string(),
        };
        if !Path::new(path).is_absolute() {
            return Err(invalid());
        }
        let canonical = std::fs::canonicalize(path).map_err(|_| invalid())?;
        if !canonical.is_dir() {
            return Err(invalid());
        }
        let canonical = canonical.to_string_lossy().into_owned();
        self.update(|doc| {
            if let Some(existing) = doc.all().into_iter().find(|w| w.path == canonical) {
                return Ok(((existing, false), false));
            }
            let id = insert(doc, &canonical);
            let ws = doc.workspace(&id).ok_or(WorkspaceError::NotFound(id))?;
            Ok(((ws, true), true))
        })
    }

    pub fn rename(&self, id: &str, title: &str) -> Result<Workspace, WorkspaceError> {
        let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
        if title.is_empty() {
            return Err(WorkspaceError::EmptyTitle);
        }
        self.update(|doc| {
            if doc.all().iter().any(|w| w.id != id && w.title == title) {
                return Err(WorkspaceError::NameConflict(title.clone()));
            }
            let row = doc
                .row_mut(id)
                .ok_or_else(|| WorkspaceError::NotFound(id.to_string()))?;
            row.insert("title".into(), json!(title));
            row.insert("updatedAt".into(), json!(iso_now()));
            let ws = doc
                .workspace(id)
                .ok_or_else(|| WorkspaceError::NotFound(id.to_string()))?;
            Ok((ws, true))
        })
    }

    /// Unregisters a workspace (the directory and its sessions are untouched).
    pub fn delete(&self, id: &str) -> Result<(), WorkspaceError> {
        self.update(|doc| {
            if doc.table().remove(id).is_none() {
                return Err(WorkspaceError::NotFound(id.to_string()));
            }
            let ids = doc.ids().into_iter().filter(|w| w != id).collect();
            doc.set_list("workspaceIds", ids);
            Ok(((), true))
        })
    }

    /// Puts `session_id` first in workspace `id` (and in no other workspace).
    pub fn attach_session(&self, id: &str, session_id: &str) -> Result<(), WorkspaceError> {
        self.update(|doc| {
            if doc.workspace(id).is_none() {
                return Err(WorkspaceError::NotFound(id.to_string()));
            }
            for ws in doc.all() {
                let mut sessions = ws.session_ids.clone();
                sessions.retain(|s| s != session_id);
                if ws.id == id {
                    sessions.insert(0, session_id.to_string());
                }
                if sessions != ws.session_ids
                    && let Some(row) = doc.row_mut(&ws.id)
                {
                    row.insert("sessionIds".into(), json!(sessions));
                    row.insert("updatedAt".into(), json!(iso_now()));
                }
            }
            Ok(((), true))
        })
    }

    /// Marks a session archived (`true`) or restores it; returns the archived ids.
    pub fn set_archived(
        &self,
        session_id: &str,
        archived: bool,
    ) -> Result<Vec<String>, WorkspaceError> {
        self.update(|doc| {
            let mut list = doc.archived();
            let present = list.iter().any(|s| s == session_id);
            match (archived, present) {
                (true, false) => list.push(session_id.to_string()),
                (false, true) => list.retain(|s| s != session_id),
                _ => return Ok((list, false)),
            }
            doc.set_list("archivedSessionIds", list.clone());
            Ok((list, true))
        })
    }

    /// Forgets a deleted session everywhere.
    pub fn forget_session(&self, session_id: &str) -> Result<(), WorkspaceError> {
        self.update(|doc| {
            let mut changed = false;
            for ws in doc.all() {
                if ws.session_ids.iter().any(|s| s == session_id)
                    && let Some(row) = doc.row_mut(&ws.id)
                {
                    let rest: Vec<String> = ws
                        .session_ids
                        .into_iter()
                        .filter(|s| s != session_id)
                        .collect();
                    row.insert("sessionIds".into(), json!(rest));
                    changed = true;
                }
            }
            for key in ["archivedSessionIds", "pinnedSessionIds"] {
                let list = strings(doc.0.pointer(&format!("/global/{key}")));
                if list.iter().any(|s| s == session_id) {
                    doc.set_list(key, list.into_iter().filter(|s| s != session_id).collect());
                    changed = true;
                }
            }
            Ok(((), changed))
        })
    }
}

fn insert(doc: &mut Doc, path: &str) -> String {
    let id = uuid::Uuid::new_v4().to_string();
    let base = Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string());
    let taken: Vec<String> = doc.all().into_iter().map(|w| w.title).collect();
    let mut title = base.clone();
    let mut n = 2;
    while taken.contains(&title) {
        title = format!("{base} ({n})");
        n += 1;
    }
    let now = iso_now();
    doc.table().insert(
        id.clone(),
        json!({"path": path, "title": title, "sessionIds": [], "createdAt": now, "updatedAt": now}),
    );
    let mut ids = doc.ids();
    ids.push(id.clone());
    doc.set_list("workspaceIds", ids);
    id
}

pub(crate) use dsh_host::fs::write_private;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn an_upstream_file_round_trips_with_unknown_keys_kept() {
        let dir = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let work_path = std::fs::canonicalize(work.path()).unwrap();
        let store = WorkspaceStore::new(dir.path());
        std::fs::write(
            store.path(),
            serde_json::to_string(&json!({
                "unit": {"name": "workspace", "version": 2},
                "global": {"initialized": true, "workspaceIds": ["w1"], "archivedSessionIds": [], "pinnedSessionIds": ["p"], "futureKey": 7},
                "tables": {"workspaces": {"w1": {"path": "/nowhere", "title": "old", "sessionIds": ["s1"], "createdAt": "2026-01-01T00:00:00.000Z", "updatedAt": "2026-01-01T00:00:00.000Z", "extra": true}}}
            }))
            .unwrap(),
        )
        .unwrap();
        let (created, fresh) = store.create(&work_path.to_string_lossy()).unwrap();
        assert!(fresh);
        let (again, fresh) = store.create(&work_path.to_string_lossy()).unwrap();
        assert_eq!((again.id.clone(), fresh), (created.id.clone(), false));
        store.attach_session(&created.id, "s2").unwrap();
        store.attach_session(&created.id, "s1").unwrap();
        assert_eq!(store.set_archived("s2", true).unwrap(), vec!["s2"]);
        assert_eq!(
            store.set_archived("s2", true).unwrap(),
            vec!["s2"],
            "idempotent"
        );
        let (list, archived) = store.list().unwrap();
        assert_eq!(archived, vec!["s2"]);
        assert_eq!(list[0].session_ids, Vec::<String>::new(), "s1 moved");
        assert_eq!(list[1].session_ids, vec!["s1", "s2"]);
        assert_eq!(list[0].to_json()["status"], "missing-dir");
        assert_eq!(list[1].to_json()["status"], "ok");
        store.forget_session("s2").unwrap();
        store.forget_session("p").unwrap();
        let raw: Value =
            serde_json::from_str(&std::fs::read_to_string(store.path()).unwrap()).unwrap();
        assert_eq!(raw["global"]["futureKey"], 7);
        assert_eq!(raw["tables"]["workspaces"]["w1"]["extra"], true);
        assert_eq!(raw["global"]["archivedSessionIds"], json!([]));
        assert_eq!(raw["global"]["pinnedSessionIds"], json!([]));
        assert!(matches!(
            store.rename(&created.id, "old"),
            Err(WorkspaceError::NameConflict(_))
        ));
        store.delete("w1").unwrap();
        assert_eq!(store.list().unwrap().0.len(), 1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(store.path())
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(mode, 0o600);
        }
    }

    #[test]
    fn bad_files_and_paths_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = WorkspaceStore::new(dir.path());
        assert!(matches!(
            store.create("relative/path"),
            Err(WorkspaceError::InvalidPath { .. })
        ));
        assert!(matches!(
            store.create("/definitely/not/here"),
            Err(WorkspaceError::InvalidPath { .. })
        ));
        std::fs::write(store.path(), "{").unwrap();
        assert!(matches!(store.list(), Err(WorkspaceError::Store { .. })));
        std::fs::write(store.path(), r#"{"unit":{"name":"workspace","version":3}}"#).unwrap();
        let err = store.create(&dir.path().to_string_lossy()).unwrap_err();
        assert!(err.to_string().contains("version 3"), "{err}");
        assert_eq!(
            std::fs::read_to_string(store.path()).unwrap(),
            r#"{"unit":{"name":"workspace","version":3}}"#
        );
    }

    #[test]
    fn dates_format_like_to_iso_string() {
        let now = iso_now();
        assert_eq!(now.len(), 24, "{now}");
        assert!(now.ends_with('Z') && now.as_bytes()[19] == b'.', "{now}");
        assert!(now.parse::<jiff::Timestamp>().is_ok(), "{now}");
    }
}
