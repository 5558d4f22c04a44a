//! `memory.*`: the page's view of memory. `memory.list {workspaceId}` answers both scopes
//! (the workspace's file and the person's) with every entry, proposals marked, and the files
//! skipped; `memory.add {workspaceId, scope, text, tags?}`, `memory.edit {workspaceId, id,
//! text}`, `memory.forget {workspaceId, id}` and `memory.accept {workspaceId, id}` change
//! them. The files are the same ones `dsh memory` and the sessions use.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_memory::{Found, Memory, MemoryError, MemoryService, Origin, Scope};
use serde_json::{Value, json};

use crate::api::workspaces;
use crate::rpc::{ApiError, ApiResult, Args, ErrorCode};
use crate::state::WebState;

fn service(s: &WebState) -> Result<Arc<MemoryService>, ApiError> {
    s.root.get::<MemoryService>().ok_or_else(|| {
        ApiError::new(
            ErrorCode::BadRequest,
            "memory is off in this profile (no memory row)",
        )
    })
}

fn failed(e: MemoryError) -> ApiError {
    match e {
        MemoryError::NotFound(_) | MemoryError::Invalid(_) => {
            ApiError::new(ErrorCode::BadRequest, e.to_string())
        }
        other => ApiError::new(ErrorCode::Internal, other.to_string()),
    }
}

/// The memory files seen from workspace `workspaceId`.
async fn memory(s: &WebState, p: &Value) -> Result<Memory, ApiError> {
    let svc = service(s)?;
    let id = Args(p).str("workspaceId")?.to_string();
    let store = workspaces::store(s)?;
    let (items, _) = tokio::task::spawn_blocking(move || store.list())
        .await
        .map_err(ApiError::internal)?
        .map_err(workspaces::error)?;
    let found = items
        .into_iter()
        .find(|w| w.id == id)
        .ok_or_else(|| ApiError::new(ErrorCode::WorkspaceNotFound, format!("No workspace {id}")))?;
    Ok(svc.at(&PathBuf::from(found.path)))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, MemoryError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(ApiError::internal)?
        .map_err(failed)
}

fn entry_json(f: &Found) -> Value {
    let o = &f.entry.origin;
    json!({
        "id": f.entry.id,
        "scope": f.scope.as_str(),
        "text": f.entry.text,
        "tags": f.entry.tags,
        "proposed": f.entry.proposed,
        "at": f.entry.at,
        "by": if o.by.is_empty() { Value::Null } else { json!(o.by) },
        "sessionId": o.session,
        "turn": o.turn,
    })
}

pub async fn list(s: &WebState, p: &Value) -> ApiResult {
    let m = memory(s, p).await?;
    let writes = m.config.writes.as_str();
    let suggest = m.config.suggest;
    let view = m.clone();
    let (found, warnings) = blocking(move || Ok(view.all())).await?;
    let scope = |scope: Scope| {
        json!({
            "path": m.path(scope).display().to_string(),
            "display": m.display_path(scope),
            "entries": found.iter().filter(|f| f.scope == scope).map(entry_json).collect::<Vec<_>>(),
        })
    };
    Ok(json!({
        "workspace": scope(Scope::Workspace),
        "user": scope(Scope::User),
        "warnings": warnings.iter().map(|w| w.message.clone()).collect::<Vec<_>>(),
        "writes": writes,
        "suggest": suggest,
    }))
}

pub async fn add(s: &WebState, p: &Value) -> ApiResult {
    let m = memory(s, p).await?;
    let args = Args(p);
    let scope = match args.opt_str("scope")? {
        None => Scope::Workspace,
        Some(text) => Scope::parse(text).ok_or_else(|| {
            ApiError::bad_request(format!("scope must be workspace or user (got \"{text}\")"))
        })?,
    };
    let text = args.str("text")?.to_string();
    let tags = if p.get("tags").is_some() {
        args.strings("tags")?
    } else {
        Vec::new()
    };
    let origin = Origin {
        by: "user".into(),
        session: None,
        turn: None,
    };
    let (added, redacted) =
        blocking(move || m.remember(scope, &text, &tags, origin, false)).await?;
    Ok(json!({
        "entry": entry_json(&Found { scope, entry: added.entry, score: 0 }),
        "duplicate": added.duplicate,
        "redacted": redacted,
    }))
}

pub async fn edit(s: &WebState, p: &Value) -> ApiResult {
    let m = memory(s, p).await?;
    let id = Args(p).str("id")?.to_string();
    let text = Args(p).str("text")?.to_string();
    let found = blocking(move || m.edit(&id, &text)).await?;
    Ok(json!({"entry": entry_json(&found)}))
}

pub async fn forget(s: &WebState, p: &Value) -> ApiResult {
    let m = memory(s, p).await?;
    let id = Args(p).str("id")?.to_string();
    let found = blocking(move || m.forget(&id)).await?;
    Ok(json!({"entry": entry_json(&found)}))
}

pub async fn accept(s: &WebState, p: &Value) -> ApiResult {
    let m = memory(s, p).await?;
    let id = Args(p).str("id")?.to_string();
    let found = blocking(move || m.accept(&id)).await?;
    Ok(json!({"entry": entry_json(&found)}))
}
