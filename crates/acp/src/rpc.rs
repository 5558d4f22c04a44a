//! JSON-RPC 2.0 over NDJSON: one frame per line each way. Frames are written through one
//! queue in `JSON.stringify` form; the agent's own request ids count up from 0.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};

/// A JSON-RPC error.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn invalid_params(detail: impl std::fmt::Display) -> Self {
        Self {
            code: -32602,
            message: format!("Invalid params: {detail}"),
            data: None,
        }
    }

    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self {
            code: -32603,
            message: format!("Internal error: {detail}"),
            data: None,
        }
    }

    pub fn method_not_found(method: &str) -> Self {
        Self {
            code: -32601,
            message: format!("\"Method not found\": {method}"),
            data: Some(json!({"method": method})),
        }
    }

    /// `-32002 Resource not found` for a session id nobody knows.
    pub fn not_found(session_id: &str) -> Self {
        Self {
            code: -32002,
            message: "Resource not found".into(),
            data: Some(json!({"sessionId": session_id})),
        }
    }

    pub fn schema(data: Value) -> Self {
        Self {
            code: -32602,
            message: "Invalid params".into(),
            data: Some(data),
        }
    }

    fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("code".into(), Value::from(self.code));
        m.insert("message".into(), Value::from(self.message.clone()));
        if let Some(d) = &self.data {
            m.insert("data".into(), d.clone());
        }
        Value::Object(m)
    }
}

type Answer = oneshot::Sender<Result<Value, RpcError>>;

/// The outgoing side: responses, notifications and the agent's own requests.
#[derive(Clone)]
pub struct Peer {
    tx: mpsc::UnboundedSender<String>,
    next_id: Arc<AtomicU64>,
    pending: Arc<Mutex<HashMap<u64, Answer>>>,
    closed: Arc<std::sync::atomic::AtomicBool>,
}

impl Peer {
    /// Sends an error response with `id: null` (a frame whose id could not be read).
    pub fn send_error_without_id(&self, error: RpcError) {
        self.respond(Value::Null, Err(error));
    }

    pub fn new(tx: mpsc::UnboundedSender<String>) -> Self {
        Self {
            tx,
            next_id: Arc::new(AtomicU64::new(0)),
            pending: Arc::new(Mutex::new(HashMap::new())),
            closed: Arc::new(false.into()),
        }
    }

    fn send(&self, frame: Value) {
        let mut line = dsh_kernel::json::to_string(&frame);
        line.push('\n');
        let _ = self.tx.send(line);
    }

    pub fn respond(&self, id: Value, result: Result<Value, RpcError>) {
        let mut m = Map::new();
        m.insert("jsonrpc".into(), Value::from("2.0"));
        m.insert("id".into(), id);
        match result {
            Ok(v) => {
                m.insert("result".into(), v);
            }
            Err(e) => {
                m.insert("error".into(), e.to_value());
            }
        }
        self.send(Value::Object(m));
    }

    /// Sends a notification unless the connection already closed.
    pub fn notify(&self, method: &str, params: Value) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let mut m = Map::new();
        m.insert("jsonrpc".into(), Value::from("2.0"));
        m.insert("method".into(), Value::from(method));
        m.insert("params".into(), params);
        self.send(Value::Object(m));
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
        if self.closed.load(Ordering::Acquire) {
            return Err(RpcError::internal("the connection is closed"));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        let mut m = Map::new();
        m.insert("jsonrpc".into(), Value::from("2.0"));
        m.insert("id".into(), Value::from(id));
        m.insert("method".into(), Value::from(method));
        m.insert("params".into(), params);
        self.send(Value::Object(m));
        // A request dropped before its answer (a cancelled prompt's permission request)
        // forgets its slot, so a client that never answers does not grow the table.
        let _forget = Forget {
            pending: &self.pending,
            id,
        };
        rx.await.unwrap_or_else(|_| {
            Err(RpcError::internal(
                "the connection closed before the client answered",
            ))
        })
    }

    /// Routes a response frame from the client.
    pub fn resolve(&self, frame: &Map<String, Value>) {
        let Some(id) = frame.get("id").and_then(Value::as_u64) else {
            tracing::warn!("acp: got a response with an unknown id");
            return;
        };
        let Some(tx) = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
        else {
            tracing::warn!("acp: got a response to unknown request {id}");
            return;
        };
        let result = match (frame.get("result"), frame.get("error")) {
            (_, Some(e)) => Err(RpcError {
                code: e.get("code").and_then(Value::as_i64).unwrap_or(-32603),
                message: e
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                data: e.get("data").cloned(),
            }),
            (Some(r), None) => Ok(r.clone()),
            (None, None) => Ok(Value::Null),
        };
        let _ = tx.send(result);
    }

    /// Marks the connection closed: no more notifications; pending requests fail.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// Removes a request's slot from the pending table when the request ends, answered or not.
struct Forget<'a> {
    pending: &'a Mutex<HashMap<u64, Answer>>,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// What one incoming line is.
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    Response(Map<String, Value>),
    /// Not a JSON-RPC message: logged, and answered with `answer` (`id: null`) by servers
    /// that answer malformed frames as the reference SDK does.
    Invalid {
        message: String,
        answer: Option<RpcError>,
    },
}

fn invalid(message: String, code: i64, text: &str, data: Option<Value>) -> Option<Incoming> {
    Some(Incoming::Invalid {
        message,
        answer: Some(RpcError {
            code,
            message: text.into(),
            data,
        }),
    })
}

/// Classifies one line of input.
pub fn classify(line: &str) -> Option<Incoming> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    let value: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            return invalid(
                format!("Failed to parse JSON message: {line} {e}"),
                -32700,
                "Parse error",
                None,
            );
        }
    };
    let map = match value {
        Value::Object(map) => map,
        Value::Array(_) => {
            return invalid(
                "Invalid message: a batch".into(),
                -32600,
                "Invalid request: JSON-RPC batches are not supported",
                None,
            );
        }
        // Falsy values were silently ignored by upstream's SDK; they are still answered
        // by servers that answer malformed frames.
        other => {
            let quiet = matches!(&other, Value::Null | Value::Bool(false))
                || matches!(&other, Value::Number(n) if n.as_f64() == Some(0.0))
                || matches!(&other, Value::String(s) if s.is_empty());
            return Some(Incoming::Invalid {
                message: if quiet {
                    String::new()
                } else {
                    format!("Invalid message: {other}")
                },
                answer: Some(RpcError {
                    code: -32600,
                    message: "Invalid request".into(),
                    data: Some(other),
                }),
            });
        }
    };
    match (
        map.get("method").and_then(Value::as_str).map(str::to_owned),
        map.contains_key("id"),
    ) {
        (Some(method), true) => Some(Incoming::Request {
            id: map.get("id").cloned().unwrap_or(Value::Null),
            method,
            params: map.get("params").cloned(),
        }),
        (Some(method), false) => Some(Incoming::Notification {
            method,
            params: map.get("params").cloned(),
        }),
        (None, true) => Some(Incoming::Response(map)),
        (None, false) => invalid(
            "Invalid message".into(),
            -32600,
            "Invalid request",
            Some(Value::Object(map)),
        ),
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
        assert_eq!(peer.pending.lock().unwrap().len(), 1);
        task.abort();
        let _ = task.await;
        assert!(peer.pending.lock().unwrap().is_empty());

        // An answered request leaves no slot either.
        let asking = peer.clone();
        let task =
            tokio::spawn(async move { asking.request("fs/read_text_file", Value::Null).await });
        let line = rx.recv().await.unwrap();
        let id = serde_json::from_str::<Value>(&line).unwrap()["id"]
            .as_u64()
            .unwrap();
        let frame = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {"content": "x"}});
        peer.resolve(frame.as_object().unwrap());
        assert_eq!(task.await.unwrap().unwrap()["content"], "x");
        assert!(peer.pending.lock().unwrap().is_empty());
    }
}
