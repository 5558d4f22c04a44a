//! The browser as approval answerer: an `ask` becomes a pending entry (keyed by the
//! approval id the log's `approval/asked` carries) that every open page of the session
//! shows; the first answer wins. The decision reaches the tool through the same
//! `Approvals::request` path ACP uses (which logs `approval/decided`). A turn cancelled
//! while waiting resolves `cancelled`; nothing waits past shutdown.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use dsh_kernel::BoxFuture;
use dsh_policies::ApprovalAnswerer;
use dsh_tools::{ApprovalOutcome, ApprovalRequest};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::hub::{Hub, Signal};

struct Pending {
    order: u64,
    session_id: String,
    view: Value,
    answer: oneshot::Sender<ApprovalOutcome>,
}

/// Pending approvals of every session.
#[derive(Clone)]
pub struct WebApprovals {
    pending: Arc<Mutex<BTreeMap<String, Pending>>>,
    next: Arc<std::sync::atomic::AtomicU64>,
    hub: Hub,
}

/// How an answer was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answered {
    Accepted,
    /// Already answered, cancelled, or never asked.
    NotPending,
}

impl WebApprovals {
    pub fn new(hub: Hub) -> Self {
        Self {
            pending: Arc::default(),
            next: Arc::default(),
            hub,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pending approvals of `session_id`, oldest first.
    pub fn of_session(&self, session_id: &str) -> Vec<Value> {
        let map = self.lock();
        let mut items: Vec<(u64, Value)> = map
            .values()
            .filter(|p| p.session_id == session_id)
            .map(|p| (p.order, p.view.clone()))
            .collect();
        items.sort_by_key(|(o, _)| *o);
        items.into_iter().map(|(_, v)| v).collect()
    }

    /// Sessions with at least one pending approval.
    pub fn sessions_waiting(&self) -> Vec<String> {
        let mut out: Vec<String> = self.lock().values().map(|p| p.session_id.clone()).collect();
        out.sort();
        out.dedup();
        out
    }

    /// Answers `approval_id` of `session_id`.
    pub fn answer(
        &self,
        session_id: &str,
        approval_id: &str,
        outcome: ApprovalOutcome,
    ) -> Answered {
        let entry = {
            let mut map = self.lock();
            match map.get(approval_id) {
                Some(p) if p.session_id == session_id => map.remove(approval_id),
                _ => None,
            }
        };
        match entry {
            Some(p) => {
                let _ = p.answer.send(outcome);
                self.hub.send(Signal::Approvals(session_id.to_string()));
                self.hub.send(Signal::Lists);
                Answered::Accepted
            }
            None => Answered::NotPending,
        }
    }

    fn remove(&self, approval_id: &str) -> Option<String> {
        self.lock().remove(approval_id).map(|p| p.session_id)
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
            let (tx, rx) = oneshot::channel();
            let order = this.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            this.lock().insert(
                id.clone(),
                Pending {
                    order,
                    session_id: session_id.clone(),
                    view: view(&request, &session_id),
                    answer: tx,
                },
            );
            this.hub.send(Signal::Approvals(session_id.clone()));
            this.hub.send(Signal::Lists);
            let outcome = tokio::select! {
                answer = rx => answer.unwrap_or(ApprovalOutcome::Cancelled),
                () = request.cancel.cancelled() => ApprovalOutcome::Cancelled,
            };
            if this.remove(&id).is_some() {
                this.hub.send(Signal::Approvals(session_id));
                this.hub.send(Signal::Lists);
            }
            outcome
        })
    }
}
