//! Permission requests: the approval answerer that asks the ACP client
//! (`session/request_permission`) and reads its answer.

use super::*;
use crate::protocol::{
    PermissionOption, PermissionToolCall, RequestPermission, ToolCall, ToolCallContent,
};

pub(crate) const ALLOW_ONCE: PermissionOption = PermissionOption {
    option_id: "allow-once",
    name: "Allow once",
    kind: "allow_once",
};
const ALLOW_ALWAYS: PermissionOption = PermissionOption {
    option_id: "allow-always",
    name: "Always allow",
    kind: "allow_always",
};
pub(crate) const REJECT_ONCE: PermissionOption = PermissionOption {
    option_id: "reject-once",
    name: "Reject",
    kind: "reject_once",
};

pub(super) struct Answerer {
    pub(super) peer: Peer,
    pub(super) sessions: Sessions,
    pub(super) projection: Projection,
}

/// The tool call a permission request is about, as editors render it: the call as
/// announced, plus the reason approval is needed.
fn permission_tool_call(request: &ApprovalRequest, cwd: &Path) -> ToolCall {
    let mut call = describe_call(
        &request.call_id,
        &request.tool_name,
        &request.arguments,
        cwd,
    );
    call.content = request
        .reason
        .as_ref()
        .map(|reason| vec![ToolCallContent::text(reason.clone())]);
    call
}

impl ApprovalAnswerer for Answerer {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalOutcome> {
        let peer = self.peer.clone();
        let projection = self.projection;
        let session_id = request.session.as_ref().map(|s| s.id());
        let session = session_id
            .as_deref()
            .and_then(|id| owned(&self.sessions, id));
        Box::pin(async move {
            let (Some(session_id), Some(session)) = (session_id, session) else {
                return ApprovalOutcome::Unavailable;
            };
            if request.call_id.is_empty() {
                return ApprovalOutcome::Unavailable;
            }
            let rich = projection == Projection::Rich;
            let always = session
                .always_allowed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&request.tool_name);
            if rich && always {
                return ApprovalOutcome::AllowedOnce;
            }
            let (tool_call, options) = if rich {
                let call = {
                    let mut projector = session.projector();
                    let call = permission_tool_call(&request, projector.cwd());
                    // Editors refuse a permission request about a call they never saw.
                    if projector.announce(&request.call_id) {
                        update(&peer, &session_id, SessionUpdate::ToolCall(call.clone()));
                    }
                    call
                };
                (
                    PermissionToolCall::Described(call),
                    vec![ALLOW_ONCE, ALLOW_ALWAYS, REJECT_ONCE],
                )
            } else {
                (
                    PermissionToolCall::Id {
                        tool_call_id: request.call_id.clone(),
                    },
                    vec![ALLOW_ONCE, REJECT_ONCE],
                )
            };
            let params = protocol::to_value(&RequestPermission {
                session_id: &session_id,
                tool_call,
                options,
            });
            let answer = tokio::select! {
                a = peer.request("session/request_permission", params) => a,
                _ = request.cancel.cancelled() => return ApprovalOutcome::Cancelled,
            };
            match answer {
                Ok(v) => match (
                    v.pointer("/outcome/outcome").and_then(Value::as_str),
                    v.pointer("/outcome/optionId").and_then(Value::as_str),
                ) {
                    (Some("cancelled"), _) => ApprovalOutcome::Cancelled,
                    (Some("selected"), Some("allow-once")) => ApprovalOutcome::AllowedOnce,
                    (Some("selected"), Some("allow-always")) if rich => {
                        session
                            .always_allowed
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(request.tool_name.clone());
                        ApprovalOutcome::AllowedOnce
                    }
                    (Some("selected"), _) => ApprovalOutcome::Rejected,
                    _ => ApprovalOutcome::Unavailable,
                },
                Err(_) => ApprovalOutcome::Unavailable,
            }
        })
    }
}
