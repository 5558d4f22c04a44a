//! Raw requests over an rmcp peer. Results come back as plain JSON so this crate, not the
//! SDK's typed decoding, judges what an untrusted server sent (upstream does the same: it
//! lists and calls with its own schemas to keep the SDK from pre-validating).
//!
//! Failures read as the TypeScript SDK words them, since that text is what the model sees
//! upstream: `MCP error <code>: <message>`.

use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{
    CancelledNotification, CancelledNotificationMethod, CancelledNotificationParam,
    ClientNotification, ClientRequest, CustomRequest,
};
use rmcp::service::{Peer, PeerRequestOptions, ServiceError};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A request failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RpcError {
    /// The server answered with a JSON-RPC error, or the connection is gone
    /// (`-32000 Connection closed`), or the deadline passed (`-32001 Request timed out`).
    #[error("MCP error {code}: {message}")]
    Mcp { code: i32, message: String },
    /// The caller cancelled the request; a `notifications/cancelled` was sent.
    #[error("the MCP request was cancelled")]
    Cancelled,
}

impl RpcError {
    pub(crate) fn closed() -> Self {
        RpcError::Mcp {
            code: -32000,
            message: "Connection closed".into(),
        }
    }

    fn timed_out() -> Self {
        RpcError::Mcp {
            code: -32001,
            message: "Request timed out".into(),
        }
    }
}

fn from_service(e: ServiceError) -> RpcError {
    match e {
        ServiceError::McpError(data) => RpcError::Mcp {
            code: data.code.0,
            message: data.message.into_owned(),
        },
        ServiceError::Timeout { .. } => RpcError::timed_out(),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => RpcError::closed(),
        ServiceError::Cancelled { .. } => RpcError::Cancelled,
        ServiceError::UnexpectedResponse => RpcError::Mcp {
            code: -32603,
            message: "Unexpected response type".into(),
        },
        other => RpcError::Mcp {
            code: -32603,
            message: other.to_string(),
        },
    }
}

/// Sends `method` with `params` and waits at most `timeout` (or until `cancel`) for the
/// result, as raw JSON. A deadline or a cancellation tells the server with
/// `notifications/cancelled`.
pub(crate) async fn request(
    peer: &Peer<RoleClient>,
    method: &str,
    params: Value,
    timeout: Duration,
    cancel: Option<&CancellationToken>,
) -> Result<Value, RpcError> {
    let handle = peer
        .send_request_with_option(
            ClientRequest::CustomRequest(CustomRequest::new(method, Some(params))),
            PeerRequestOptions::no_options(),
        )
        .await
        .map_err(from_service)?;
    let id = handle.id.clone();
    let never = CancellationToken::new();
    let cancel = cancel.unwrap_or(&never);
    let outcome = tokio::select! {
        r = tokio::time::timeout(timeout, handle.rx) => match r {
            Ok(Ok(result)) => result.map_err(from_service),
            Ok(Err(_)) => Err(RpcError::closed()),
            Err(_) => {
                notify_cancelled(peer, id, "request timeout").await;
                return Err(RpcError::timed_out());
            }
        },
        _ = cancel.cancelled() => {
            notify_cancelled(peer, id, "the call was cancelled").await;
            return Err(RpcError::Cancelled);
        }
    };
    let result = outcome?;
    serde_json::to_value(&result).map_err(|e| RpcError::Mcp {
        code: -32603,
        message: format!("the result could not be read: {e}"),
    })
}

async fn notify_cancelled(peer: &Peer<RoleClient>, id: rmcp::model::RequestId, reason: &str) {
    let note = ClientNotification::CancelledNotification(CancelledNotification {
        params: CancelledNotificationParam {
            request_id: id,
            reason: Some(reason.into()),
        },
        method: CancelledNotificationMethod,
        extensions: Default::default(),
    });
    // Best effort: a closed transport has nothing left to cancel.
    let _ = tokio::time::timeout(Duration::from_secs(1), peer.send_notification(note)).await;
}
