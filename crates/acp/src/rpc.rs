//! JSON-RPC 2.0 over NDJSON: one frame per line each way. Frames are written through one
//! queue in `JSON.stringify` form; the agent's own request ids count up from 0. Frames,
//! classification, the error object and the pending table are `dsh-jsonrpc`'s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use dsh_jsonrpc::Pending;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

pub use dsh_jsonrpc::{Incoming, RpcError, classify_line as classify};

/// `-32002 Resource not found` for a session id nobody knows.
pub fn not_found(session_id: &str) -> RpcError {
    let mut data = Map::new();
    data.insert("sessionId".into(), Value::from(session_id));
    RpcError::new(-32002, "Resource not found").with_data(Value::Object(data))
}

type Answer = oneshot::Sender<Result<Value, RpcError>>;

/// The outgoing side: responses, notifications and the agent's own requests.
#[derive(Clone)]
pub struct Peer {
    tx: mpsc::UnboundedSender<String>,
    pending: Arc<Mutex<Pending<Answer>>>,
    closed: Arc<AtomicBool>,
}

impl Peer {
    /// Sends an error response with `id: null` (a frame whose id could not be read).
    pub fn send_error_without_id(&self, error: RpcError) {
        self.respond(Value::Null, Err(error));
    }

    pub fn new(tx: mpsc::UnboundedSender<String>) -> Self {
        Self {
            tx,
            pending: Arc::new(Mutex::new(Pending::new(0))),
            closed: Arc::new(false.into()),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending<Answer>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&self, frame: Value) {
        let mut line = dsh_kernel::json::to_string(&frame);
        line.push('\n');
        let _ = self.tx.send(line);
    }

    pub fn respond(&self, id: Value, result: Result<Value, RpcError>) {
        self.send(dsh_jsonrpc::response(id, result));
    }

    /// Sends a notification unless the connection already closed.
    pub fn notify(&self, method: &str, params: Value) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        self.send(dsh_jsonrpc::notification(method, Some(params)));
    }

    /// Sends a notification whose params are already JSON text (no re-encoding of large
    /// payloads), unless the connection already closed.
    pub fn notify_raw(&self, method: &str, params_json: &str) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let mut line = String::with_capacity(params_json.len() + method.len() + 40);
        line.push_str("{\"jsonrpc\":\"2.0\",\"method\":");
        dsh_kernel::json::write_string(&mut line, method);
        line.push_str(",\"params\":");
        line.push_str(params_json);
        line.push_str("}\n");
        let _ = self.tx.send(line);
    }

    /// Sends a request to the client and waits for its answer.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let closed = || RpcError::internal("the connection is closed");
        if self.closed.load(Ordering::Acquire) {
            return Err(closed());
        }
        let (tx, rx) = oneshot::channel();
        let Ok(id) = self.pending().open(tx) else {
            return Err(closed());
        };
        self.send(dsh_jsonrpc::request(id, method, params));
        // A request dropped before its answer (a cancelled prompt's permission request)
        // forgets its slot, so a client that never answers does not grow the table.
        let _forget = Forget { peer: self, id };
        rx.await.unwrap_or_else(|_| {
            Err(RpcError::internal(
                "the connection closed before the client answered",
            ))
        })
    }

    /// Routes a response frame from the client.
    pub fn resolve(&self, id: &Value, outcome: Result<Value, Value>) {
        let Some(id) = id.as_u64() else {
            tracing::warn!("acp: got a response with an unknown id");
            return;
        };
        let Some(tx) = self.pending().take(id) else {
            tracing::warn!("acp: got a response to unknown request {id}");
            return;
        };
        let _ = tx.send(outcome.map_err(|e| RpcError::from_value(&e)));
    }

    /// Marks the connection closed: no more notifications; pending requests fail.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        drop(self.pending().close());
    }
}

/// Removes a request's slot from the pending table when the request ends, answered or not.
struct Forget<'a> {
    peer: &'a Peer,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.peer.pending().take(self.id);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_request_dropped_before_its_answer_leaves_no_slot() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let peer = Peer::new(tx);
        let asking = peer.clone();
        let task = tokio::spawn(async move {
            asking
                .request("session/request_permission", Value::Null)
                .await
        });
        // The request is on the wire, its slot taken.
        let line = rx.recv().await.unwrap();
        assert!(line.contains("session/request_permission"), "{line}");
        assert_eq!(peer.pending().len(), 1);
        task.abort();
        let _ = task.await;
        assert!(peer.pending().is_empty());

        // An answered request leaves no slot either.
        let asking = peer.clone();
        let task =
            tokio::spawn(async move { asking.request("fs/read_text_file", Value::Null).await });
        let line = rx.recv().await.unwrap();
        let id = serde_json::from_str::<Value>(&line).unwrap()["id"]
            .as_u64()
            .unwrap();
        let frame = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {"content": "x"}});
        peer.resolve(&frame["id"], Ok(frame["result"].clone()));
        assert_eq!(task.await.unwrap().unwrap()["content"], "x");
        assert!(peer.pending().is_empty());
    }
}
