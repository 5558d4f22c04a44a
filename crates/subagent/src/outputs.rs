//! The declared output schemas (`Tool::output_schema`) of the subagent family's tools: the
//! shape of the canonical value each reports through `ToolRunContext::set_value`, which a
//! Code Mode binding resolves to and `ToolOutputMap` is typed from. Field names and shapes
//! follow upstream's output declarations; the schemas are plain JSON Schema. The values
//! never reach durable records: results keep their rendered text.

use std::sync::LazyLock;

use serde_json::{Value, json};

/// An object closed to other keys; `required` lists the keys that must be present.
fn object(required: &[&str], properties: Value) -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": required,
        "properties": properties,
    })
}

/// `subagent` / `subagent_fork`: `{kind: "background", jobId}` |
/// `{kind: "continuable", subagentId}` | `{kind: "foreground", runId, output: JsonValue[]}`
/// (the child's final content blocks).
pub fn subagent() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        json!({"oneOf": [
            object(&["kind", "jobId"], json!({
                "kind": {"type": "string", "const": "background"},
                "jobId": {"type": "string"},
            })),
            object(&["kind", "subagentId"], json!({
                "kind": {"type": "string", "const": "continuable"},
                "subagentId": {"type": "string"},
            })),
            object(&["kind", "runId", "output"], json!({
                "kind": {"type": "string", "const": "foreground"},
                "runId": {"type": "string"},
                "output": {"type": "array", "items": {}},
            })),
        ]})
    });
    &S
}

/// `send_message` and `report`: `{messageId}`.
pub fn message_id() -> &'static Value {
    static S: LazyLock<Value> =
        LazyLock::new(|| object(&["messageId"], json!({"messageId": {"type": "string"}})));
    &S
}

/// `interrupt_agent`: `{accepted}`.
pub fn interrupt() -> &'static Value {
    static S: LazyLock<Value> =
        LazyLock::new(|| object(&["accepted"], json!({"accepted": {"type": "boolean"}})));
    &S
}

/// `list_agents`: an array of `{kind: "child", id, label, status, parent?, depth?}` |
/// `{kind: "diagnostic", id, reason, parent?, depth?}`.
pub fn list_agents() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        json!({"type": "array", "items": {"oneOf": [
            object(&["kind", "id", "label", "status"], json!({
                "kind": {"type": "string", "enum": ["child"]},
                "id": {"type": "string"},
                "label": {"type": "string"},
                "status": {"type": "string", "enum": ["running", "idle", "ready"]},
                "parent": {"type": "string"},
                "depth": {"type": "number"},
            })),
            object(&["kind", "id", "reason"], json!({
                "kind": {"type": "string", "enum": ["diagnostic"]},
                "id": {"type": "string"},
                "reason": {"type": "string", "enum": ["corrupt", "unsupported", "unavailable"]},
                "parent": {"type": "string"},
                "depth": {"type": "number"},
            })),
        ]}})
    });
    &S
}

/// `structured_output`: `{recorded: true}`.
pub fn structured() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        object(
            &["recorded"],
            json!({"recorded": {"type": "boolean", "const": true}}),
        )
    });
    &S
}
