//! `schedule.*`: the page's view of reminders. `schedule.list {sessionId}` answers that
//! session's pending reminders, `schedule.catalog` every task (pending and finished, with
//! the session and the last delivery), `schedule.delete {id}` removes one.

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::rpc::{ApiError, ApiResult, Args, ErrorCode};
use crate::schedule::{ScheduleError, ScheduleService};
use crate::state::WebState;

fn service(s: &WebState) -> Result<std::sync::Arc<ScheduleService>, ApiError> {
    s.root.get::<ScheduleService>().ok_or_else(|| {
        ApiError::new(
            ErrorCode::BadRequest,
            "reminders are off in this profile (no schedule row)",
        )
    })
}

fn failed(e: ScheduleError) -> ApiError {
    ApiError::internal(e)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ScheduleError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(ApiError::internal)?
        .map_err(failed)
}

pub async fn list(s: &WebState, p: &Value) -> ApiResult {
    let svc = service(s)?;
    let session = Args(p).str("sessionId")?.to_string();
    let now = Timestamp::now();
    let tasks = blocking(move || svc.catalog()).await?;
    let tasks: Vec<Value> = tasks
        .iter()
        .filter(|t| t.active && t.session_id == session)
        .map(|t| t.to_page_json(now))
        .collect();
    Ok(json!({"tasks": tasks}))
}

pub async fn catalog(s: &WebState) -> ApiResult {
    let svc = service(s)?;
    let now = Timestamp::now();
    let tasks = blocking(move || svc.catalog()).await?;
    Ok(json!({"tasks": tasks.iter().map(|t| t.to_page_json(now)).collect::<Vec<_>>()}))
}

pub async fn delete(s: &WebState, p: &Value) -> ApiResult {
    let svc = service(s)?;
    let id = Args(p).str("id")?.to_string();
    let shown = id.clone();
    if !blocking(move || svc.delete(None, &id)).await? {
        return Err(ApiError::new(
            ErrorCode::ScheduleNotFound,
            format!("no reminder {shown}"),
        ));
    }
    Ok(json!({"deleted": true}))
}
