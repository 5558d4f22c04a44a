//! `workspace.*`: the registry of directories sessions run in, and archiving.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::hub::Signal;
use crate::rpc::{ApiError, ApiResult, Args, ErrorCode};
use crate::state::WebState;
use crate::workspaces::{WorkspaceError, WorkspaceStore};

pub fn store(s: &WebState) -> Result<Arc<WorkspaceStore>, ApiError> {
    s.workspaces.clone().ok_or_else(|| {
        ApiError::new(
            ErrorCode::WorkspaceNotFound,
            "the workspace row is disabled in this composition",
        )
    })
}

pub fn error(e: WorkspaceError) -> ApiError {
    let code = match &e {
        WorkspaceError::InvalidPath { .. } => ErrorCode::WorkspaceInvalidPath,
        WorkspaceError::NotFound(_) => ErrorCode::WorkspaceNotFound,
        WorkspaceError::NameConflict(_) => ErrorCode::WorkspaceNameConflict,
        WorkspaceError::EmptyTitle => ErrorCode::BadRequest,
        WorkspaceError::Store { .. } | WorkspaceError::Io { .. } => ErrorCode::Internal,
    };
    tracing::warn!("web: workspace operation failed: {e}");
    ApiError::new(code, e.to_string())
}

/// Runs a store operation (file IO) off the async threads.
async fn blocking<R: Send + 'static>(
    s: &WebState,
    f: impl FnOnce(&WorkspaceStore) -> Result<R, WorkspaceError> + Send + 'static,
) -> Result<R, ApiError> {
    let store = store(s)?;
    tokio::task::spawn_blocking(move || f(&store))
        .await
        .map_err(ApiError::internal)?
        .map_err(error)
}

/// First use: one workspace per directory stored sessions ran in (header data only).
async fn bootstrap(s: &WebState) -> Result<(), ApiError> {
    if blocking(s, |w| w.initialized()).await? {
        return Ok(());
    }
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    if let Some(files) = s.files.clone() {
        let headers = tokio::task::spawn_blocking(move || files.list())
            .await
            .map_err(ApiError::internal)?
            .unwrap_or_default();
        for (header, _) in headers.into_iter().rev() {
            let Some(cwd) = header.cwd.clone() else {
                continue;
            };
            match groups.iter_mut().find(|(c, _)| *c == cwd) {
                Some((_, ids)) => ids.push(header.id),
                None => groups.push((cwd, vec![header.id])),
            }
        }
    }
    blocking(s, move |w| w.bootstrap(groups)).await
}

pub async fn list(s: &WebState) -> ApiResult {
    bootstrap(s).await?;
    let (items, archived) = blocking(s, |w| w.list()).await?;
    Ok(json!({
        "items": items.iter().map(|w| w.to_json()).collect::<Vec<_>>(),
        "archivedSessionIds": archived,
    }))
}

pub async fn create(s: &WebState, p: &Value) -> ApiResult {
    let path = Args(p).str("path")?.trim().to_string();
    let (ws, created) = blocking(s, move |w| w.create(&path)).await?;
    s.hub.send(Signal::Lists);
    Ok(json!({"workspace": ws.to_json(), "created": created}))
}

pub async fn rename(s: &WebState, p: &Value) -> ApiResult {
    let args = Args(p);
    let id = args.str("workspaceId")?.to_string();
    let title = args.str("title")?.to_string();
    let ws = blocking(s, move |w| w.rename(&id, &title)).await?;
    s.hub.send(Signal::Lists);
    Ok(json!({"workspace": ws.to_json()}))
}

pub async fn delete(s: &WebState, p: &Value) -> ApiResult {
    let id = Args(p).str("workspaceId")?.to_string();
    blocking(s, move |w| w.delete(&id)).await?;
    s.hub.send(Signal::Lists);
    Ok(json!({"deleted": true}))
}

pub async fn archive(s: &WebState, p: &Value, archived: bool) -> ApiResult {
    let args = Args(p);
    let id = args.str("sessionId")?.to_string();
    let stop = args.flag("stopActivity")?;
    super::sessions::require_known(s, &id).await?;
    if archived
        && let Some(agent) = s.hosting.get(&id).and_then(|h| h.agent())
        && agent.status() == dsh_agent::AgentStatus::Running
    {
        if !stop {
            return Err(ApiError::new(
                ErrorCode::AgentBusy,
                "the session is running; stop it before archiving",
            )
            .with(json!({"sessionId": id})));
        }
        agent.cancel(dsh_session::CancelCause::User, true);
    }
    let list = blocking(s, move |w| w.set_archived(&id, archived)).await?;
    s.hub.send(Signal::Lists);
    Ok(json!({"archivedSessionIds": list}))
}

/// The workspace a session belongs to: the one listing it, else the one at its cwd.
pub fn workspace_of(
    items: &[crate::workspaces::Workspace],
    session_id: &str,
    cwd: Option<&str>,
) -> Option<String> {
    items
        .iter()
        .find(|w| w.session_ids.iter().any(|s| s == session_id))
        .or_else(|| cwd.and_then(|c| items.iter().find(|w| w.path == c)))
        .map(|w| w.id.clone())
}

/// Registers `session_id` with the workspace at `cwd` (creating none).
pub async fn attach(s: &WebState, workspace_id: Option<String>, session_id: &str, cwd: &str) {
    if s.workspaces.is_none() {
        return;
    }
    let session = session_id.to_string();
    let cwd = cwd.to_string();
    let result = blocking(s, move |w| {
        let id = match workspace_id {
            Some(id) => Some(id),
            None => w
                .list()?
                .0
                .into_iter()
                .find(|ws| ws.path == cwd)
                .map(|ws| ws.id),
        };
        match id {
            Some(id) => w.attach_session(&id, &session),
            None => Ok(()),
        }
    })
    .await;
    if let Err(e) = result {
        tracing::warn!(
            "web: cannot attach a session to its workspace: {}",
            e.message
        );
    }
}

/// Forgets a deleted session in the registry.
pub async fn forget(s: &WebState, session_id: &str) {
    if s.workspaces.is_none() {
        return;
    }
    let session = session_id.to_string();
    if let Err(e) = blocking(s, move |w| w.forget_session(&session)).await {
        tracing::warn!("web: cannot forget a deleted session: {}", e.message);
    }
}
