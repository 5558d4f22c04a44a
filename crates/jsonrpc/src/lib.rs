//! JSON-RPC 2.0 as every stdio peer of dsh speaks it — the ACP server, the ACP and Codex
//! app-server clients of product subagents, plugin-host processes and language servers:
//! frame builders in the order peers expect (`jsonrpc`, `id`, `method`, `params`; `result`
//! or `error`), the error object, the classification of an incoming frame, and
//! [`Pending`], the table of our requests awaiting an answer. Transport (NDJSON or
//! `Content-Length` framing), threads or tasks, and what a closed connection means stay
//! with each peer.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Standard error codes.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
}

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// `-32602 Invalid params: {detail}`.
    pub fn invalid_params(detail: impl std::fmt::Display) -> Self {
        Self::new(code::INVALID_PARAMS, format!("Invalid params: {detail}"))
    }

    /// `-32602 Invalid params` carrying what failed to validate.
    pub fn schema(data: Value) -> Self {
        Self::new(code::INVALID_PARAMS, "Invalid params").with_data(data)
    }

    /// `-32603 Internal error: {detail}`.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::new(code::INTERNAL_ERROR, format!("Internal error: {detail}"))
    }

    /// `-32601` naming the method (in the reference ACP SDK's words) with `{method}` data.
    pub fn method_not_found(method: &str) -> Self {
        let mut data = Map::new();
        data.insert("method".into(), Value::from(method));
        Self::new(
            code::METHOD_NOT_FOUND,
            format!("\"Method not found\": {method}"),
        )
        .with_data(Value::Object(data))
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// `{code, message, data?}`.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("code".into(), Value::from(self.code));
        m.insert("message".into(), Value::from(self.message.clone()));
        if let Some(d) = &self.data {
            m.insert("data".into(), d.clone());
        }
        Value::Object(m)
    }

    /// Reads an error object leniently: a missing code is `-32603`, a missing message empty.
    pub fn from_value(e: &Value) -> Self {
        Self {
            code: e
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or(code::INTERNAL_ERROR),
            message: e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            data: e.get("data").cloned(),
        }
    }
}

fn frame(entries: impl IntoIterator<Item = (&'static str, Value)>) -> Value {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), Value::from("2.0"));
    for (k, v) in entries {
        m.insert(k.into(), v);
    }
    Value::Object(m)
}

/// `{"jsonrpc":"2.0","id":…,"method":…,"params":…}`.
pub fn request(id: impl Into<Value>, method: &str, params: Value) -> Value {
    frame([
        ("id", id.into()),
        ("method", Value::from(method)),
        ("params", params),
    ])
}

/// `{"jsonrpc":"2.0","method":…,"params":…}`; no `params` member when `None`.
pub fn notification(method: &str, params: Option<Value>) -> Value {
    let mut entries = vec![("method", Value::from(method))];
    entries.extend(params.map(|p| ("params", p)));
    frame(entries)
}

/// `{"jsonrpc":"2.0","id":…,"result":…}` or `…,"error":{…}}`.
pub fn response(id: Value, outcome: Result<Value, RpcError>) -> Value {
    match outcome {
        Ok(result) => frame([("id", id), ("result", result)]),
        Err(e) => frame([("id", id), ("error", e.to_value())]),
    }
}

/// What one incoming frame is. A frame with an `id` member and a `method` is a request
/// (even `"id": null`); with a `method` and no `id` a notification; with an `id` and no
/// `method` a response.
#[derive(Debug, PartialEq)]
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
    /// The answer to request `id`: its `result` (null when absent), or its `error` object
    /// as sent.
    Response {
        id: Value,
        outcome: Result<Value, Value>,
    },
    /// Not a JSON-RPC message. `log` says why (empty for the falsy values reference SDKs
    /// drop silently); `answer` is what a server that answers malformed frames sends back
    /// with `id: null`.
    Invalid { log: String, answer: RpcError },
}

impl Incoming {
    /// The response's id as one of our (unsigned) request ids.
    pub fn response_id(id: &Value) -> Option<u64> {
        id.as_u64()
    }
}

/// Classifies one parsed frame.
pub fn classify(value: Value) -> Incoming {
    let mut map = match value {
        Value::Object(map) => map,
        Value::Array(_) => {
            return Incoming::Invalid {
                log: "Invalid message: a batch".into(),
                answer: RpcError::new(
                    code::INVALID_REQUEST,
                    "Invalid request: JSON-RPC batches are not supported",
                ),
            };
        }
        other => {
            let quiet = matches!(&other, Value::Null | Value::Bool(false))
                || matches!(&other, Value::Number(n) if n.as_f64() == Some(0.0))
                || matches!(&other, Value::String(s) if s.is_empty());
            return Incoming::Invalid {
                log: if quiet {
                    String::new()
                } else {
                    format!("Invalid message: {other}")
                },
                answer: RpcError::new(code::INVALID_REQUEST, "Invalid request").with_data(other),
            };
        }
    };
    let method = map.get("method").and_then(Value::as_str).map(str::to_owned);
    let id = map.remove("id");
    match (method, id) {
        (Some(method), Some(id)) => Incoming::Request {
            id,
            method,
            params: map.remove("params"),
        },
        (Some(method), None) => Incoming::Notification {
            method,
            params: map.remove("params"),
        },
        (None, Some(id)) => {
            let outcome = match map.remove("error") {
                Some(e) if !e.is_null() => Err(e),
                _ => Ok(map.remove("result").unwrap_or(Value::Null)),
            };
            Incoming::Response { id, outcome }
        }
        (None, None) => Incoming::Invalid {
            log: "Invalid message".into(),
            answer: RpcError::new(code::INVALID_REQUEST, "Invalid request")
                .with_data(Value::Object(map)),
        },
    }
}

/// Classifies one line of text (`None` for a blank line); unparseable JSON is a parse
/// error.
pub fn classify_line(line: &str) -> Option<Incoming> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    Some(match serde_json::from_str(line) {
        Ok(value) => classify(value),
        Err(e) => Incoming::Invalid {
            log: format!("Failed to parse JSON message: {line} {e}"),
            answer: RpcError::new(code::PARSE_ERROR, "Parse error"),
        },
    })
}

/// Our requests awaiting an answer, by id: each holds a waiter `W` (a channel, a
/// callback). Ids count up from the first one; once closed, no request is taken and the
/// waiters are handed back to be failed.
#[derive(Debug)]
pub struct Pending<W> {
    next: u64,
    waiters: HashMap<u64, W>,
    closed: bool,
}

impl<W> Pending<W> {
    /// An open table whose first id is `first`.
    pub fn new(first: u64) -> Self {
        Self {
            next: first,
            waiters: HashMap::new(),
            closed: false,
        }
    }

    /// Takes the next id for `waiter`; a closed table hands the waiter back.
    pub fn open(&mut self, waiter: W) -> Result<u64, W> {
        if self.closed {
            return Err(waiter);
        }
        let id = self.next;
        self.next += 1;
        self.waiters.insert(id, waiter);
        Ok(id)
    }

    /// The waiter of request `id`, removed (an answer, a timeout, a dropped request).
    pub fn take(&mut self, id: u64) -> Option<W> {
        self.waiters.remove(&id)
    }

    /// Whether request `id` still awaits its answer.
    pub fn awaits(&self, id: u64) -> bool {
        self.waiters.contains_key(&id)
    }

    /// Closes the table and hands back every waiter.
    pub fn close(&mut self) -> Vec<W> {
        self.closed = true;
        self.waiters.drain().map(|(_, w)| w).collect()
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub fn len(&self) -> usize {
        self.waiters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn text(v: &Value) -> String {
        serde_json::to_string(v).unwrap()
    }

    #[test]
    fn frames_keep_the_member_order_peers_expect() {
        assert_eq!(
            text(&request(3u64, "m", json!({"a": 1}))),
            r#"{"jsonrpc":"2.0","id":3,"method":"m","params":{"a":1}}"#
        );
        assert_eq!(
            text(&notification("n", None)),
            r#"{"jsonrpc":"2.0","method":"n"}"#
        );
        assert_eq!(
            text(&response(json!(1), Ok(json!(true)))),
            r#"{"jsonrpc":"2.0","id":1,"result":true}"#
        );
        assert_eq!(
            text(&response(
                Value::Null,
                Err(RpcError::new(-32601, "nope").with_data(json!({"method": "x"})))
            )),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"nope","data":{"method":"x"}}}"#
        );
    }

    #[test]
    fn frames_are_classified_by_their_members() {
        assert_eq!(
            classify(json!({"jsonrpc": "2.0", "id": null, "method": "m"})),
            Incoming::Request {
                id: Value::Null,
                method: "m".into(),
                params: None
            }
        );
        assert_eq!(
            classify(json!({"method": "n", "params": [1]})),
            Incoming::Notification {
                method: "n".into(),
                params: Some(json!([1]))
            }
        );
        assert_eq!(
            classify(json!({"id": 4, "error": {"code": 1, "message": "x"}, "result": 2})),
            Incoming::Response {
                id: json!(4),
                outcome: Err(json!({"code": 1, "message": "x"}))
            }
        );
        assert_eq!(
            classify(json!({"id": 4, "error": null})),
            Incoming::Response {
                id: json!(4),
                outcome: Ok(Value::Null)
            }
        );
        assert!(matches!(
            classify_line("{oops"),
            Some(Incoming::Invalid { answer, .. }) if answer.code == code::PARSE_ERROR
        ));
        // Falsy values are answered but not logged.
        let Incoming::Invalid { log, answer } = classify(json!(0)) else {
            panic!("0 is not a message");
        };
        assert_eq!((log.as_str(), answer.code), ("", code::INVALID_REQUEST));
        let Incoming::Invalid { log, .. } = classify(json!([])) else {
            panic!("a batch is refused");
        };
        assert_eq!(log, "Invalid message: a batch");
        assert_eq!(classify_line("  "), None);
    }

    #[test]
    fn the_pending_table_counts_ids_and_hands_back_waiters_when_closed() {
        let mut p = Pending::new(1);
        assert_eq!(p.open("a"), Ok(1));
        assert_eq!(p.open("b"), Ok(2));
        assert!(p.awaits(1));
        assert_eq!(p.take(1), Some("a"));
        assert_eq!(p.take(1), None);
        assert_eq!(p.close(), vec!["b"]);
        assert!(p.is_empty());
        assert_eq!(p.open("c"), Err("c"));
    }
}
