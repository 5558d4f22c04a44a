//! `dsh web` in front of a team gateway. With `DSH_GATEWAY` (and `DSH_GATEWAY_TOKEN`) set,
//! the page lists, opens and drives the sessions of that account on the gateway; the team's
//! workers run their turns. This process hosts no agent for them.
//!
//! What the page can do here, and how it maps onto the gateway's API:
//! * the session list (one workspace, "Team", holds them all) and a search by title;
//! * a new session (its id is chosen here; the first message creates it on the gateway);
//! * a message (text and images), queued as the session's next input; steering queues too,
//!   since a team turn takes its input at the start;
//! * Stop, which cancels the running turn;
//! * approvals, answered on the gateway (input sent from here says it answers them);
//! * the conversation, followed live from the gateway's event stream ([`stream`]).
//!
//! Everything that belongs to a machine rather than to the team (settings, keys, memory,
//! workspaces, reminders, rename, fork, delete, export) answers an error that says so.

mod stream;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use dsh_gateway_client::Gateway;
use serde_json::{Value, json};

use crate::rpc::{ApiError, ApiResult, Args, ErrorCode};
use crate::state::WebState;

pub use stream::spawn;

/// The one workspace the page shows: the team's.
const WORKSPACE: &str = "team";

/// The gateway this page's sessions live on.
pub struct Remote {
    pub gateway: Gateway,
    /// Ids `session.create` chose whose first message has not reached the gateway yet.
    fresh: Mutex<HashSet<String>>,
}

impl Remote {
    /// The gateway `DSH_GATEWAY` names, or `None` (sessions run in this process).
    pub fn from_env() -> Result<Option<Arc<Self>>, String> {
        Ok(Gateway::from_env()?.map(|gateway| {
            Arc::new(Self {
                gateway,
                fresh: Mutex::default(),
            })
        }))
    }

    fn fresh(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.fresh.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unavailable(&self, what: &str) -> ApiError {
        ApiError::new(
            ErrorCode::BadRequest,
            format!(
                "{what} is not available here: this dsh web shows the sessions of the team gateway at {}, and its workers run them",
                self.gateway.base()
            ),
        )
    }

    fn gateway_error(&self, what: &str, e: String) -> ApiError {
        tracing::warn!("web: {what} through the gateway: {e}");
        ApiError::new(ErrorCode::Internal, format!("{what}: {e}"))
    }

    /// The account's sessions as the page lists them.
    async fn sessions(&self) -> Result<Vec<Value>, ApiError> {
        let listed = self
            .gateway
            .get("/v1/sessions")
            .await
            .map_err(|e| self.gateway_error("the session list could not be read", e))?;
        let rows = listed["sessions"].as_array().cloned().unwrap_or_default();
        Ok(rows.iter().map(row).collect())
    }
}

/// One gateway session as a row of the page's list.
fn row(s: &Value) -> Value {
    let running = s["turnOpen"].as_bool().unwrap_or(false);
    let turns = s["turns"].as_i64().unwrap_or(0);
    json!({
        "sessionId": s["sessionId"],
        "title": s["title"].as_str().unwrap_or_default(),
        "cwd": Value::Null,
        "workspaceId": WORKSPACE,
        "createdAt": s["createdAt"],
        "updatedAt": s["updatedAt"],
        "turns": turns,
        "blank": turns == 0,
        "live": true,
        "running": running,
        "state": if running { "running" } else { "idle" },
        "error": Value::Null,
        "archived": false,
        "parentSessionId": Value::Null,
    })
}

fn session_id(p: &Value) -> Result<&str, ApiError> {
    let id = Args(p).str("sessionId")?;
    if !dsh_session::is_plain_id(id) {
        return Err(ApiError::bad_request("sessionId is not a session id"));
    }
    Ok(id)
}

/// Runs one method of the page against the gateway.
pub async fn dispatch(s: &WebState, r: &Remote, method: &str, p: &Value) -> ApiResult {
    match method {
        "host.describe" => Ok(json!({
            "version": env!("CARGO_PKG_VERSION"),
            "instance": s.instance,
            "cwd": Value::Null,
            "home": s.home.display().to_string(),
            "provider": Value::Null,
            "model": Value::Null,
            "attachedSessions": 0,
            "persistence": true,
            "workspaces": true,
            "gateway": r.gateway.base(),
        })),
        "workspace.list" => {
            let listed = r
                .gateway
                .get("/v1/sessions?brief=1")
                .await
                .map_err(|e| r.gateway_error("the session list could not be read", e))?;
            let ids: Vec<Value> = listed["sessions"]
                .as_array()
                .map(|rows| rows.iter().map(|row| row["sessionId"].clone()).collect())
                .unwrap_or_default();
            Ok(json!({
                "items": [{
                    "workspaceId": WORKSPACE,
                    "path": r.gateway.base(),
                    "title": "Team",
                    "sessionIds": ids,
                    "createdAt": "",
                    "updatedAt": "",
                    "status": "ok",
                }],
                "archivedSessionIds": [],
            }))
        }
        "session.list" => {
            if Args(p).flag("archived")? {
                return Ok(json!({"items": []}));
            }
            Ok(json!({"items": r.sessions().await?}))
        }
        "session.search" => {
            let query = Args(p).str("query")?.trim().to_lowercase();
            let items: Vec<Value> = r
                .sessions()
                .await?
                .into_iter()
                .filter(|row| {
                    row["title"]
                        .as_str()
                        .is_some_and(|t| t.to_lowercase().contains(&query))
                })
                .take(20)
                .collect();
            Ok(json!({"items": items}))
        }
        "session.create" => {
            let id = format!("session-{}", uuid::Uuid::new_v4());
            r.fresh().insert(id.clone());
            Ok(json!({"sessionId": id, "workspaceId": WORKSPACE}))
        }
        "session.prompt" => prompt(r, p).await,
        "session.cancel" => {
            let id = session_id(p)?;
            r.gateway
                .cancel(id)
                .await
                .map_err(|e| r.gateway_error("the turn could not be stopped", e))?;
            Ok(json!({"accepted": true}))
        }
        // Asked by the page on its own: an empty answer keeps it quiet.
        "session.commands" => Ok(json!({"items": []})),
        "schedule.list" => Ok(json!({"tasks": []})),
        "agentPresets.list" => Ok(json!({"presets": []})),
        other => Err(r.unavailable(other)),
    }
}

/// `session.prompt`: the message is queued as the session's next input (creating the
/// session with it when `session.create` chose its id).
async fn prompt(r: &Remote, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    let mode = Args(p).opt_str("mode")?.unwrap_or("queue");
    if !matches!(mode, "queue" | "steer") {
        return Err(ApiError::bad_request("mode must be \"queue\" or \"steer\""));
    }
    let content = p
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad_request("content must be a list of blocks"))?;
    let mut text = String::new();
    let mut images = Vec::new();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => match block.get("text").and_then(Value::as_str) {
                Some(t) => text.push_str(t),
                None => return Err(ApiError::bad_request("a text block needs text")),
            },
            Some("image") => images.push(json!({
                "mediaType": block.get("mediaType"),
                "data": block.get("data"),
                "name": block.get("name"),
            })),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "{other} blocks are not supported; send text or images"
                )));
            }
            None => return Err(ApiError::bad_request("each block needs a type")),
        }
    }
    if text.trim().is_empty() && images.is_empty() {
        return Err(ApiError::bad_request("the message is empty"));
    }
    let mut body = json!({"text": text, "answersApprovals": true});
    if !images.is_empty() {
        body["images"] = Value::Array(images);
    }
    let fresh = r.fresh().contains(id);
    let queued = if fresh {
        body["sessionId"] = json!(id);
        r.gateway.post("/v1/sessions", &body).await
    } else {
        r.gateway
            .post(&format!("/v1/sessions/{id}/messages"), &body)
            .await
    };
    match queued {
        Ok(_) => {
            r.fresh().remove(id);
            Ok(json!({"accepted": true}))
        }
        Err(e) if e.contains("answered 404") => Err(ApiError::new(
            ErrorCode::SessionNotFound,
            format!("No session {id}"),
        )
        .with(json!({"sessionId": id}))),
        Err(e) if e.contains("answered 400") || e.contains("answered 413") => Err(
            ApiError::bad_request(format!("the gateway refused the message: {e}")),
        ),
        Err(e) => Err(r.gateway_error("the message was not queued", e)),
    }
}

/// `POST /api/respond`: an approval's answer goes to the gateway; user questions are never
/// asked by team turns.
pub async fn respond(r: &Remote, body: &Value) -> Value {
    let value = body.pointer("/result/value");
    let field = |k: &str| value.and_then(|v| v.get(k)).and_then(Value::as_str);
    let well_formed = body.get("type").and_then(Value::as_str) == Some("client-response")
        && body.pointer("/result/ok") == Some(&Value::Bool(true));
    let outcome = field("outcome").filter(|o| matches!(*o, "allowed-once" | "rejected"));
    let (true, Some(session), Some(approval), Some(outcome)) = (
        well_formed,
        field("sessionId"),
        field("approvalId"),
        outcome,
    ) else {
        return json!({"accepted": false, "reason": "bad-response"});
    };
    if body.get("rpcId").and_then(Value::as_str) != Some(approval)
        || !dsh_session::is_plain_id(session)
    {
        return json!({"accepted": false, "reason": "bad-response"});
    }
    match r.gateway.answer_approval(session, approval, outcome).await {
        Ok(true) => json!({"accepted": true}),
        Ok(false) => json!({"accepted": false, "reason": "not-pending"}),
        Err(e) => {
            tracing::warn!("web: answering approval {approval} through the gateway: {e}");
            json!({"accepted": false, "reason": "unavailable", "message": e})
        }
    }
}
