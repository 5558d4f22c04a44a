//! JSON-RPC 2.0 over newline-delimited JSON (ACP, Codex app-server, the dsh SDK runtime):
//! requests with responses matched by id, notifications, and the peer's requests answered
//! by a synchronous handler (in stream order, so state a notification set is visible to
//! the response that follows it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
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

/// One parsed message from the peer, by its shape.
pub(crate) enum Incoming<'a> {
    Request {
        id: &'a Value,
        method: &'a str,
        params: &'a Value,
    },
    Notification {
        method: &'a str,
        params: &'a Value,
    },
    /// The answer to our request `id` (an error response is an `Err` with its message).
    Response {
        id: u64,
        outcome: Result<Value, String>,
    },
    /// Neither (or a response to an id we never use): dropped.
    Ignored,
}

static NULL: Value = Value::Null;

/// Sorts a peer message into request, notification or response.
pub(crate) fn classify(msg: &Value) -> Incoming<'_> {
    let method = msg.get("method").and_then(Value::as_str);
    let id = msg.get("id").filter(|v| !v.is_null());
    let params = msg.get("params").unwrap_or(&NULL);
    match (method, id) {
        (Some(method), Some(id)) => Incoming::Request { id, method, params },
        (Some(method), None) => Incoming::Notification { method, params },
        (None, Some(id)) => {
            let Some(id) = id.as_u64() else {
                return Incoming::Ignored;
            };
            let outcome = match msg.get("error") {
                Some(e) if !e.is_null() => Err(e
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| e.to_string())),
                _ => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
            };
            Incoming::Response { id, outcome }
        }
        (None, None) => Incoming::Ignored,
    }
}

/// Our answer to a peer request.
pub(crate) fn reply_frame(id: &Value, reply: Reply) -> Value {
    match reply {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    }
}

/// One connection.
pub(crate) struct Rpc {
    out: Outbox,
    pending: Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>,
    next: AtomicU64,
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
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            closed: CancellationToken::new(),
        });
        let handler: Handler = Box::new(handler);
        let this = rpc.clone();
        tokio::spawn(async move {
            while let Some(line) = lines.recv().await {
                let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                this.dispatch(&msg, &handler);
            }
            this.closed.cancel();
            let pending: Vec<_> = this
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain()
                .collect();
            for (_, tx) in pending {
                let _ = tx.send(Err("protocol stream closed".into()));
            }
        });
        rpc
    }

    fn dispatch(&self, msg: &Value, handler: &Handler) {
        match classify(msg) {
            Incoming::Request { id, method, params } => {
                let reply = handler(Inbound::Request { method, params })
                    .unwrap_or_else(|| Err((-32601, format!("method not found: {method}"))));
                self.out.send(reply_frame(id, reply).to_string());
            }
            Incoming::Notification { method, params } => {
                let _ = handler(Inbound::Notification { method, params });
            }
            Incoming::Response { id, outcome } => {
                let tx = self
                    .pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                if let Some(tx) = tx {
                    let _ = tx.send(outcome);
                }
            }
            Incoming::Ignored => {}
        }
    }

    /// Sends a request and waits for its response (an error response or a closed stream
    /// is an `Err` with its message).
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, String> {
        if self.closed.is_cancelled() {
            return Err("protocol stream closed".into());
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        if self.closed.is_cancelled() {
            self.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            return Err("protocol stream closed".into());
        }
        self.out.send(
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
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
        let frame = match params {
            Some(p) => json!({"jsonrpc": "2.0", "method": method, "params": p}),
            None => json!({"jsonrpc": "2.0", "method": method}),
        };
        self.out.send(frame.to_string());
    }

    /// Cancelled when the peer's output ended.
    pub fn closed(&self) -> CancellationToken {
        self.closed.clone()
    }
}
