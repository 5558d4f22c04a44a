//! What clients add to a session beside input: withdrawing input no turn has taken, and
//! answering the approvals a running turn asked for.

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use dsh_store_pg::{APPROVAL_OUTCOMES, ApprovalAnswer, StoreError, User, Withdrawal};

use super::{Body, Gateway, body_json, error, json_response, not_found};

impl Gateway {
    pub(super) async fn withdraw(
        &self,
        user: &User,
        id: &str,
        message: &str,
    ) -> Result<Response<Body>, StoreError> {
        if !self.visible(user, id).await? {
            return Ok(not_found());
        }
        let (state, why) = match self.db.get().withdraw(id, message).await? {
            Withdrawal::Withdrawn => {
                let mut resp = Response::new(Full::new(Bytes::new()).boxed());
                *resp.status_mut() = StatusCode::NO_CONTENT;
                return Ok(resp);
            }
            Withdrawal::Unknown => {
                return Ok(error(
                    StatusCode::NOT_FOUND,
                    &format!("session {id} has no input with message id {message}"),
                ));
            }
            Withdrawal::Held => (
                "held",
                "a worker holds the session and may be starting this input; ask again",
            ),
            Withdrawal::Recorded => (
                "recorded",
                "a turn already recorded this input; cancel the turn instead",
            ),
        };
        Ok(json_response(
            StatusCode::CONFLICT,
            &json!({"error": why, "state": state}),
        ))
    }

    pub(super) async fn answer(
        &self,
        user: &User,
        id: &str,
        approval: &str,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, StoreError> {
        if !self.visible(user, id).await? {
            return Ok(not_found());
        }
        let body = match body_json(req).await {
            Ok(v) => v,
            Err(resp) => return Ok(resp),
        };
        let Some(outcome) = body
            .get("outcome")
            .and_then(Value::as_str)
            .filter(|o| APPROVAL_OUTCOMES.contains(o))
        else {
            return Ok(error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "the body needs \"outcome\": one of {}",
                    APPROVAL_OUTCOMES.join(", ")
                ),
            ));
        };
        let answered = self
            .db
            .get()
            .answer_approval(id, approval, outcome, Some(&user.name))
            .await?;
        let (status, state) = match answered {
            ApprovalAnswer::Accepted => (StatusCode::ACCEPTED, "accepted"),
            ApprovalAnswer::Answered => (StatusCode::CONFLICT, "answered"),
            ApprovalAnswer::Decided => (StatusCode::CONFLICT, "decided"),
            ApprovalAnswer::Unknown => {
                return Ok(error(
                    StatusCode::NOT_FOUND,
                    &format!("session {id} asked no approval {approval}"),
                ));
            }
        };
        Ok(json_response(status, &json!({"state": state})))
    }
}
