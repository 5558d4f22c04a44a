//! JSON-RPC 2.0 over newline-delimited JSON (ACP, Codex app-server, the dsh SDK runtime):
//! requests with responses matched by id, notifications, and the peer's requests answered
//! by a synchronous handler (in stream order, so state a notification set is visible to
//! the response that follows it).

use std::sync::{Arc, Mutex};

use dsh_jsonrpc::{Incoming, Pending, RpcError, classify};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::process::Outbox;

/// A message from the peer that is not a response.
pub(crate) enum Inbound<'a> {
    Notification { method: &'a str, params: &'a Value },
    Request { method: &'a str, params: &'a Value },
}

/// The answer to a peer request: a result, or an error `(code, message)`.
pub(crate) type Reply = Result<Value, (i64, String)>;

type Handler = Box<dyn Fn(Inbound<'_>) -> Option<Reply> + Send + Sync>;

/// Our answer to a peer request.
pub(crate) fn reply_frame(id: &Value, reply: Reply) -> Value {
    dsh_jsonrpc::response(
        id.clone(),
        reply.map_err(|(code, message)| RpcError::new(code, message)),
    )
}

/// An error response's text: its message, else the error object itself.
fn error_text(e: &Value) -> String {
    e.get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| e.to_string())
}

/// One connection.
pub(crate) struct Rpc {
    out: Outbox,
    pending: Mutex<Pending<oneshot::Sender<Result<Value, String>>>>,
    closed: CancellationToken,
}

impl Rpc {
    /// Starts reading `lines`; `handler` sees every notification and request (a request
    /// it answers `None` gets `-32601`).
    pub fn start(
        mut lines: mpsc::UnboundedReceiver<String>,
        out: Outbox,
        handler: impl Fn(Inbound<'_>) -> Option<Reply> + Send + Sync + 'static,
    ) -> Arc<Rpc> {
        let rpc = Arc::new(Rpc {
            out,
            pending: Mutex::new(Pending::new(1)),
            closed: CancellationToken::new(),
        });
        let handler: Handler = Box::new(handler);
        let this = rpc.clone();
        tokio::spawn(async move {
            while let Some(line) = lines.recv().await {
                let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                this.dispatch(msg, &handler);
            }
            this.closed.cancel();
            for tx in this.pending().close() {
                let _ = tx.send(Err("protocol stream closed".into()));
            }
        });
        rpc
    }

    fn pending(
        &self,
    ) -> std::sync::MutexGuard<'_, Pending<oneshot::Sender<Result<Value, String>>>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dispatch(&self, msg: Value, handler: &Handler) {
        match classify(msg) {
            // A request without a usable id cannot be answered: it is heard as a notice.
            Incoming::Request { id, method, params } if !id.is_null() => {
                let params = params.unwrap_or(Value::Null);
                let reply = handler(Inbound::Request {
                    method: &method,
                    params: &params,
                })
                .unwrap_or_else(|| Err((-32601, format!("method not found: {method}"))));
                self.out.send(reply_frame(&id, reply).to_string());
            }
            Incoming::Request { method, params, .. }
            | Incoming::Notification { method, params } => {
                let params = params.unwrap_or(Value::Null);
                let _ = handler(Inbound::Notification {
                    method: &method,
                    params: &params,
                });
            }
            Incoming::Response { id, outcome } => {
                let Some(id) = id.as_u64() else {
                    return;
                };
                if let Some(tx) = self.pending().take(id) {
                    let _ = tx.send(outcome.map_err(|e| error_text(&e)));
                }
            }
            Incoming::Invalid { .. } => {}
        }
    }

    /// Sends a request and waits for its response (an error response or a closed stream
    /// is an `Err` with its message).
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, String> {
        if self.closed.is_cancelled() {
            return Err("protocol stream closed".into());
        }
        let (tx, rx) = oneshot::channel();
        let Ok(id) = self.pending().open(tx) else {
            return Err("protocol stream closed".into());
        };
        self.out
            .send(dsh_jsonrpc::request(id, method, params).to_string());
        match rx.await {
            Ok(r) => r.map_err(|e| format!("{method}: {e}")),
            Err(_) => Err("protocol stream closed".into()),
        }
    }

    /// Sends a request without waiting for its answer.
    pub fn request_detached(self: &Arc<Self>, method: &'static str, params: Value) {
        let this = self.clone();
        tokio::spawn(async move {
            let _ = this.request(method, params).await;
        });
    }

    pub fn notify(&self, method: &str, params: Option<Value>) {
        self.out
            .send(dsh_jsonrpc::notification(method, params).to_string());
    }

    /// Cancelled when the peer's output ended.
    pub fn closed(&self) -> CancellationToken {
        self.closed.clone()
    }
}
