//! The declared output schemas (`Tool::output_schema`) of the `terminal_*` tools: the shape
//! of the canonical value each reports through `ToolRunContext::set_value`, which a Code
//! Mode binding resolves to and `ToolOutputMap` is typed from. Field names and shapes follow
//! upstream's output declarations; the schemas are plain JSON Schema. The values never
//! reach durable records: results keep their bounded rendered text.

use std::sync::LazyLock;

use serde_json::{Map, Value, json};

use crate::service::TerminalInfo;
use crate::types::{ReadPage, SendResult, SessionStatus};

/// An object closed to other keys; `required` lists the keys that must be present.
fn object(required: &[&str], properties: Value) -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": required,
        "properties": properties,
    })
}

fn nullable(kind: &str) -> Value {
    json!({"oneOf": [{"type": kind}, {"type": "null"}]})
}

/// `{kind: "running"}` | `{kind: "exited", exitCode: integer|null, signal: string|null}`.
fn status() -> Value {
    json!({"oneOf": [
        object(&["kind"], json!({"kind": {"type": "string", "const": "running"}})),
        object(&["kind", "exitCode", "signal"], json!({
            "kind": {"type": "string", "const": "exited"},
            "exitCode": nullable("integer"),
            "signal": nullable("string"),
        })),
    ]})
}

/// A session snapshot's properties: `sessionId, name?, type, pid?, status`.
fn snapshot_properties() -> Map<String, Value> {
    let Value::Object(map) = json!({
        "sessionId": {"type": "string"},
        "name": {"type": "string"},
        "type": {"type": "string"},
        "pid": {"type": "integer"},
        "status": status(),
    }) else {
        unreachable!("a JSON object literal")
    };
    map
}

const SNAPSHOT_REQUIRED: [&str; 3] = ["sessionId", "type", "status"];

/// `terminal_open`: a session snapshot plus `motd`.
pub(crate) fn open() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        let mut props = snapshot_properties();
        props.insert("motd".into(), json!({"type": "string"}));
        let mut required = SNAPSHOT_REQUIRED.to_vec();
        required.push("motd");
        object(&required, Value::Object(props))
    });
    &S
}

/// `terminal_send`: `{kind: "background", jobId}` |
/// `{kind: "foreground", viewport, waitReason, sessionStatus, truncated}`.
pub(crate) fn send() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        json!({"oneOf": [
            object(&["kind", "jobId"], json!({
                "kind": {"type": "string", "const": "background"},
                "jobId": {"type": "string"},
            })),
            object(&["kind", "viewport", "waitReason", "sessionStatus", "truncated"], json!({
                "kind": {"type": "string", "const": "foreground"},
                "viewport": {"type": "string"},
                "waitReason": {
                    "type": "string",
                    "enum": ["stdin_read", "inferred_idle", "timeout", "session_exit"],
                },
                "sessionStatus": status(),
                "truncated": {"type": "boolean"},
            })),
        ]})
    });
    &S
}

/// `terminal_read`: `{text, totalLines, lineBegin, lineEnd, truncated}`.
pub(crate) fn read() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        object(
            &["text", "totalLines", "lineBegin", "lineEnd", "truncated"],
            json!({
                "text": {"type": "string"},
                "totalLines": {"type": "integer"},
                "lineBegin": {"type": "integer"},
                "lineEnd": {"type": "integer"},
                "truncated": {"type": "boolean"},
            }),
        )
    });
    &S
}

/// `terminal_signal`: `{delivered: true, targetPgid}`.
pub(crate) fn signal() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        object(
            &["delivered", "targetPgid"],
            json!({
                "delivered": {"type": "boolean", "const": true},
                "targetPgid": {"type": "integer"},
            }),
        )
    });
    &S
}

/// `terminal_close`: `{sessionId, outcome: "closed" | "already-closing"}`.
pub(crate) fn close() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        object(
            &["sessionId", "outcome"],
            json!({
                "sessionId": {"type": "string"},
                "outcome": {"type": "string", "enum": ["closed", "already-closing"]},
            }),
        )
    });
    &S
}

/// `terminal_list`: an array of session snapshots.
pub(crate) fn list() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        json!({
            "type": "array",
            "items": object(&SNAPSHOT_REQUIRED, Value::Object(snapshot_properties())),
        })
    });
    &S
}

/// A session snapshot: `name` and `pid` only when known.
pub(crate) fn snapshot_value(
    id: &str,
    name: Option<&str>,
    type_name: &str,
    pid: Option<u32>,
    status: &SessionStatus,
) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("sessionId".into(), json!(id));
    if let Some(name) = name {
        map.insert("name".into(), json!(name));
    }
    map.insert("type".into(), json!(type_name));
    if let Some(pid) = pid {
        map.insert("pid".into(), json!(pid));
    }
    map.insert("status".into(), status.to_value());
    map
}

pub(crate) fn info_value(info: &TerminalInfo) -> Value {
    Value::Object(snapshot_value(
        &info.id,
        info.name.as_deref(),
        &info.type_name,
        info.pid,
        &info.status,
    ))
}

pub(crate) fn send_value(result: &SendResult) -> Value {
    json!({
        "kind": "foreground",
        "viewport": result.viewport,
        "waitReason": result.wait.as_str(),
        "sessionStatus": result.status.to_value(),
        "truncated": result.truncated,
    })
}

pub(crate) fn read_value(page: &ReadPage) -> Value {
    json!({
        "text": page.text,
        "totalLines": page.total_lines,
        "lineBegin": page.line_begin,
        "lineEnd": page.line_end,
        "truncated": page.truncated,
    })
}
