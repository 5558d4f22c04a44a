//! The browser as approval answerer: an `ask` becomes a pending entry (keyed by the
//! approval id the log's `approval/asked` carries) that every open page of the session
//! shows; the first answer wins. The decision reaches the tool through the same
//! `Approvals::request` path ACP uses (which logs `approval/decided`). A turn cancelled
//! while waiting resolves `cancelled`; nothing waits past shutdown.

use dsh_kernel::BoxFuture;
use dsh_policies::ApprovalAnswerer;
use dsh_tools::{ApprovalOutcome, ApprovalRequest};
use serde_json::{Value, json};

use crate::hub::{Hub, Signal};
pub use crate::pending::Answered;
use crate::pending::PendingWaits;

/// Pending approvals of every session.
#[derive(Clone)]
pub struct WebApprovals {
    waits: PendingWaits<ApprovalOutcome>,
}

impl WebApprovals {
    pub fn new(hub: Hub) -> Self {
        Self {
            waits: PendingWaits::new(hub, Signal::Approvals),
        }
    }

    /// The pending approvals of `session_id`, oldest first.
    pub fn of_session(&self, session_id: &str) -> Vec<Value> {
        self.waits.of_session(session_id)
    }

    /// Sessions with at least one pending approval.
    pub fn sessions_waiting(&self) -> Vec<String> {
        self.waits.sessions_waiting()
    }

    /// Answers `approval_id` of `session_id`.
    pub fn answer(
        &self,
        session_id: &str,
        approval_id: &str,
        outcome: ApprovalOutcome,
    ) -> Answered {
        self.waits
            .answer_with(session_id, approval_id, |_| Ok(outcome))
    }

    /// Resolves every pending approval `cancelled` (shutdown).
    pub fn close_all(&self) {
        self.waits.close_all();
    }
}

/// What the page shows about a request.
fn view(request: &ApprovalRequest, session_id: &str) -> Value {
    json!({
        "approvalId": request.approval_id,
        "sessionId": session_id,
        "toolName": request.tool_name,
        "callId": request.call_id,
        "reason": request.reason,
        "arguments": request.arguments,
    })
}

impl ApprovalAnswerer for WebApprovals {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalOutcome> {
        let this = self.clone();
        Box::pin(async move {
            let Some(session_id) = request.session.as_ref().map(|s| s.id()) else {
                return ApprovalOutcome::Unavailable;
            };
            let id = if request.approval_id.is_empty() {
                uuid::Uuid::new_v4().to_string()
            } else {
                request.approval_id.clone()
            };
            let view = view(&request, &session_id);
            this.waits
                .wait(id, session_id, view, &request.cancel)
                .await
                .unwrap_or(ApprovalOutcome::Cancelled)
        })
    }
}
