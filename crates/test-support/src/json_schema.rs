//! A checker for the JSON Schema subset tool output declarations use: `type`, `enum`,
//! `const`, `oneOf` (exactly one branch), `properties`, `required`,
//! `additionalProperties: false` and `items`. Tests check tools' canonical values with it.

use serde_json::{Value, json};

/// Whether `value` conforms to `schema`; the error names the path (`at` is its root name).
pub fn conforms(schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    if let Some(branches) = schema.get("oneOf").and_then(Value::as_array) {
        let passing = branches
            .iter()
            .filter(|b| conforms(b, value, at).is_ok())
            .count();
        return match passing {
            1 => Ok(()),
            n => Err(format!("{at}: {n} oneOf branches match {value}")),
        };
    }
    if let Some(kind) = schema.get("type").and_then(Value::as_str) {
        let ok = match kind {
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            "object" => value.is_object(),
            "array" => value.is_array(),
            other => return Err(format!("{at}: unsupported type {other}")),
        };
        if !ok {
            return Err(format!("{at}: expected {kind}, got {value}"));
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        return Err(format!("{at}: {value} not in {allowed:?}"));
    }
    if let Some(want) = schema.get("const")
        && want != value
    {
        return Err(format!("{at}: {value} is not {want}"));
    }
    if let Some(map) = value.as_object() {
        let props = schema.get("properties").and_then(Value::as_object);
        for key in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(key) = key.as_str() else { continue };
            if !map.contains_key(key) {
                return Err(format!("{at}: missing required {key}"));
            }
        }
        for (key, v) in map {
            match props.and_then(|p| p.get(key)) {
                Some(sub) => conforms(sub, v, &format!("{at}.{key}"))?,
                None if schema.get("additionalProperties") == Some(&json!(false)) => {
                    return Err(format!("{at}: unexpected key {key}"));
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array()) {
        for (i, v) in list.iter().enumerate() {
            conforms(items, v, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}
