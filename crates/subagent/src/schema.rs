//! The JSON-schema subset structured results are checked against: `type` (object, array,
//! string, number, integer, boolean, null), `oneOf`, `properties`, `required`,
//! `additionalProperties` (a boolean), `items`, `enum` and `const` (scalars), plus the
//! annotations `description`, `title`, `default`, `examples`. Anything else is refused when
//! the schema is accepted, so a value is never checked against a rule that is ignored.

use serde_json::Value;

const CONSTRAINTS: [&str; 8] = [
    "type",
    "oneOf",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
];
const ANNOTATIONS: [&str; 4] = ["description", "title", "default", "examples"];
const TYPES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];
/// Nesting bound of schemas and checked values (untrusted model input).
const MAX_DEPTH: usize = 64;

/// Checks that `schema` is an object schema within the subset; the violations otherwise.
pub fn check_object_schema(schema: &Value) -> Result<(), Vec<String>> {
    let mut violations = Vec::new();
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        violations.push("schema: the root must declare type \"object\"".to_string());
    }
    check_node(schema, "schema", 0, &mut violations);
    if violations.is_empty() {
        Ok(())
    } else {
        Err(violations)
    }
}

fn is_scalar(v: &Value) -> bool {
    matches!(
        v,
        Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null
    )
}

fn check_node(node: &Value, path: &str, depth: usize, out: &mut Vec<String>) {
    if depth > MAX_DEPTH {
        out.push(format!("{path}: nested deeper than {MAX_DEPTH} levels"));
        return;
    }
    let Value::Object(m) = node else {
        out.push(format!("{path}: must be an object"));
        return;
    };
    for k in m.keys() {
        if !CONSTRAINTS.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()) {
            out.push(format!("{path}: keyword \"{k}\" is not supported"));
        }
    }
    if let Some(t) = m.get("type")
        && !t.as_str().is_some_and(|t| TYPES.contains(&t))
    {
        out.push(format!("{path}.type: must be one of {}", TYPES.join(", ")));
    }
    if let Some(props) = m.get("properties") {
        match props {
            Value::Object(p) => {
                for (k, v) in p {
                    check_node(v, &format!("{path}.properties.{k}"), depth + 1, out);
                }
            }
            _ => out.push(format!("{path}.properties: must be an object")),
        }
    }
    if let Some(req) = m.get("required")
        && !req
            .as_array()
            .is_some_and(|a| a.iter().all(Value::is_string))
    {
        out.push(format!("{path}.required: must be an array of strings"));
    }
    if let Some(a) = m.get("additionalProperties")
        && !a.is_boolean()
    {
        out.push(format!("{path}.additionalProperties: must be a boolean"));
    }
    if let Some(items) = m.get("items") {
        check_node(items, &format!("{path}.items"), depth + 1, out);
    }
    if let Some(e) = m.get("enum")
        && !e.as_array().is_some_and(|a| a.iter().all(is_scalar))
    {
        out.push(format!("{path}.enum: must be an array of scalars"));
    }
    if let Some(c) = m.get("const")
        && !is_scalar(c)
    {
        out.push(format!("{path}.const: must be a scalar"));
    }
    if let Some(one_of) = m.get("oneOf") {
        match one_of.as_array() {
            Some(items) if !items.is_empty() => {
                for (i, v) in items.iter().enumerate() {
                    check_node(v, &format!("{path}.oneOf[{i}]"), depth + 1, out);
                }
            }
            _ => out.push(format!("{path}.oneOf: must be a non-empty array")),
        }
    }
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v
            .as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f.is_finite()),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The ways `value` violates `schema` (empty: it conforms). `path` names the value.
pub fn validate(schema: &Value, value: &Value, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    validate_into(schema, value, path, 0, &mut out);
    out
}

fn validate_into(schema: &Value, value: &Value, path: &str, depth: usize, out: &mut Vec<String>) {
    if depth > MAX_DEPTH {
        out.push(format!("{path}: nested deeper than {MAX_DEPTH} levels"));
        return;
    }
    let Value::Object(s) = schema else { return };
    if let Some(t) = s.get("type").and_then(Value::as_str)
        && !type_matches(t, value)
    {
        out.push(format!("{path}: expected {t}, got {}", type_name(value)));
        return;
    }
    if let Some(c) = s.get("const")
        && c != value
    {
        out.push(format!(
            "{path}: must equal {}",
            dsh_kernel::json::to_string(c)
        ));
    }
    if let Some(Value::Array(options)) = s.get("enum")
        && !options.contains(value)
    {
        let list: Vec<String> = options.iter().map(dsh_kernel::json::to_string).collect();
        out.push(format!("{path}: must be one of {}", list.join(", ")));
    }
    if let Some(Value::Array(options)) = s.get("oneOf") {
        let matching = options
            .iter()
            .filter(|o| validate(o, value, path).is_empty())
            .count();
        if matching != 1 {
            out.push(format!(
                "{path}: must match exactly one alternative of oneOf (matches {matching})"
            ));
        }
    }
    if let Value::Object(v) = value {
        let props = s.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(req)) = s.get("required") {
            for k in req.iter().filter_map(Value::as_str) {
                if !v.contains_key(k) {
                    out.push(format!("{path}.{k}: is required"));
                }
            }
        }
        for (k, item) in v {
            match props.and_then(|p| p.get(k)) {
                Some(ps) => validate_into(ps, item, &format!("{path}.{k}"), depth + 1, out),
                None if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    out.push(format!("{path}.{k}: is not an allowed property"));
                }
                None => {}
            }
        }
    }
    if let (Value::Array(items), Some(is)) = (value, s.get("items")) {
        for (i, item) in items.iter().enumerate() {
            validate_into(is, item, &format!("{path}[{i}]"), depth + 1, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn the_subset_is_enforced_on_schemas_and_values() {
        let schema = json!({
            "type": "object",
            "properties": {
                "status": {"type": "string", "enum": ["continue", "complete"]},
                "evidence": {"type": "array", "items": {"type": "string"}},
                "n": {"type": "integer"}
            },
            "required": ["status", "evidence"],
            "additionalProperties": false
        });
        assert_eq!(check_object_schema(&schema), Ok(()));
        assert!(
            validate(
                &schema,
                &json!({"status": "complete", "evidence": ["a"]}),
                "value"
            )
            .is_empty()
        );
        assert_eq!(
            validate(
                &schema,
                &json!({"status": "maybe", "evidence": [1], "n": 1.5, "extra": true}),
                "value"
            ),
            [
                "value.status: must be one of \"continue\", \"complete\"",
                "value.evidence[0]: expected string, got number",
                "value.n: expected integer, got number",
                "value.extra: is not an allowed property",
            ]
        );
        assert_eq!(
            validate(&schema, &json!([]), "value"),
            ["value: expected object, got array"]
        );
        assert_eq!(
            check_object_schema(&json!({"type": "array", "pattern": "x"})),
            Err(vec![
                "schema: the root must declare type \"object\"".to_string(),
                "schema: keyword \"pattern\" is not supported".to_string(),
            ])
        );
    }
}
