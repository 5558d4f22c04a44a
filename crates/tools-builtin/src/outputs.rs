//! The declared output schemas (`Tool::output_schema`) of the builtin tools: the shape of the
//! canonical value each reports through `ToolRunContext::set_value`, which a Code Mode
//! binding resolves to and `ToolOutputMap` is typed from. Field names and shapes follow
//! upstream's output declarations; the schemas are plain JSON Schema. Tools whose value is
//! typed derive their schema from the type; the shapes kept here under `cfg(test)` are the
//! reference those derivations are checked against.

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

fn nullable(kind: &str) -> Value {
    json!({"oneOf": [{"type": kind}, {"type": "null"}]})
}

/// `read`: `{path, offset, lines: [{number, text}], totalLines}`.
#[cfg(test)]
pub(crate) fn read() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        object(
            &["path", "offset", "lines", "totalLines"],
            json!({
                "path": {"type": "string"},
                "offset": {"type": "integer"},
                "lines": {"type": "array", "items": object(&["number", "text"], json!({
                    "number": {"type": "integer"},
                    "text": {"type": "string"},
                }))},
                "totalLines": {"type": "integer"},
            }),
        )
    });
    &S
}

/// `write`: `{path, operation: "create"|"update", before: string|null, after}`.
#[cfg(test)]
pub(crate) fn write() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        object(
            &["path", "operation", "before", "after"],
            json!({
                "path": {"type": "string"},
                "operation": {"type": "string", "enum": ["create", "update"]},
                "before": nullable("string"),
                "after": {"type": "string"},
            }),
        )
    });
    &S
}

/// `edit`: `{path, before, after}`.
#[cfg(test)]
pub(crate) fn edit() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        object(
            &["path", "before", "after"],
            json!({
                "path": {"type": "string"},
                "before": {"type": "string"},
                "after": {"type": "string"},
            }),
        )
    });
    &S
}

/// `read_image`: `{path, image: {attachmentId, mediaType, bytes, width, height, name?,
/// originalDimensions?}}`.
pub(crate) fn read_image() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        let dimensions = object(
            &["width", "height"],
            json!({"width": {"type": "integer"}, "height": {"type": "integer"}}),
        );
        let image = object(
            &["attachmentId", "mediaType", "bytes", "width", "height"],
            json!({
                "attachmentId": {"type": "string"},
                "mediaType": {
                    "type": "string",
                    "enum": ["image/png", "image/jpeg", "image/webp", "image/gif"],
                },
                "bytes": {"type": "integer"},
                "width": {"type": "integer"},
                "height": {"type": "integer"},
                "name": {"type": "string"},
                "originalDimensions": dimensions,
            }),
        );
        object(
            &["path", "image"],
            json!({"path": {"type": "string"}, "image": image}),
        )
    });
    &S
}

/// `glob`: `{root, paths}`, every path found (the text shows only the first page).
#[cfg(test)]
pub(crate) fn glob() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        object(
            &["root", "paths"],
            json!({
                "root": {"type": "string"},
                "paths": {"type": "array", "items": {"type": "string"}},
            }),
        )
    });
    &S
}

/// `grep`: `{matches: [{path, lineNumber, line}]}`, every match found, lines whole.
#[cfg(test)]
pub(crate) fn grep() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        let one = object(
            &["path", "lineNumber", "line"],
            json!({
                "path": {"type": "string"},
                "lineNumber": {"type": "integer"},
                "line": {"type": "string"},
            }),
        );
        object(
            &["matches"],
            json!({"matches": {"type": "array", "items": one}}),
        )
    });
    &S
}

/// `bash`: `{kind: "background", jobId}` or `{kind: "foreground", exitCode, signal,
/// timedOut, aborted, timeoutMs, stdout, stderr, sandbox?}`.
pub(crate) fn bash() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        let stream = object(
            &["text", "truncated"],
            json!({
                "text": {"type": "string"},
                "truncated": {"type": "boolean"},
                "spillPath": {"type": "string"},
            }),
        );
        let sandbox = object(
            &["mode", "denied"],
            json!({
                "mode": {"type": "string"},
                "denied": {"type": "boolean"},
                "enforcement": {"type": "string"},
                "runnerFailed": {"type": "boolean"},
            }),
        );
        let background = object(
            &["kind", "jobId"],
            json!({
                "kind": {"type": "string", "const": "background"},
                "jobId": {"type": "string"},
            }),
        );
        let foreground = object(
            &[
                "kind",
                "exitCode",
                "signal",
                "timedOut",
                "aborted",
                "timeoutMs",
                "stdout",
                "stderr",
            ],
            json!({
                "kind": {"type": "string", "const": "foreground"},
                "exitCode": nullable("integer"),
                "signal": nullable("string"),
                "timedOut": {"type": "boolean"},
                "aborted": {"type": "boolean"},
                "timeoutMs": {"type": "number"},
                "stdout": stream,
                "stderr": stream,
                "sandbox": sandbox,
            }),
        );
        json!({"oneOf": [background, foreground]})
    });
    &S
}

/// `str_replace_editor`: the result text itself.
#[cfg(test)]
pub(crate) fn editor() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| json!({"type": "string"}));
    &S
}

/// `todo_write`: `{todos: [{content, status}], counts: {pending, inProgress, completed}}`.
#[cfg(test)]
pub(crate) fn todo_write() -> &'static Value {
    static S: LazyLock<Value> = LazyLock::new(|| {
        let todo = object(
            &["content", "status"],
            json!({
                "content": {"type": "string"},
                "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
            }),
        );
        let counts = object(
            &["pending", "inProgress", "completed"],
            json!({
                "pending": {"type": "integer"},
                "inProgress": {"type": "integer"},
                "completed": {"type": "integer"},
            }),
        );
        object(
            &["todos", "counts"],
            json!({"todos": {"type": "array", "items": todo}, "counts": counts}),
        )
    });
    &S
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_tools::output_schema;
    use pretty_assertions::assert_eq;

    /// The schemas derived from the typed values are the shapes declared above.
    #[test]
    fn derived_output_schemas_are_the_declared_ones() {
        let same = |derived: Result<Option<Value>, String>, declared: &Value| {
            assert_eq!(
                dsh_kernel::json::to_string(&derived.unwrap().unwrap()),
                dsh_kernel::json::to_string(declared)
            );
        };
        same(output_schema::<crate::fs::ReadValue>(), read());
        same(output_schema::<crate::fs::WriteValue>(), write());
        same(output_schema::<crate::fs::EditValue>(), edit());
        same(output_schema::<crate::search::GlobValue>(), glob());
        same(output_schema::<crate::search::GrepValue>(), grep());
        same(output_schema::<crate::todo::TodoValue>(), todo_write());
        same(output_schema::<String>(), editor());
    }
}
