//! JSON Schema → TypeScript type text, for the declarations the model programs against.
//!
//! Covered nodes: `object` (properties, `required`, `additionalProperties: false`), `array`
//! (`items`), `string`, `number`, `integer`, `boolean`, `null`, a list of types, `enum` and
//! `const` of scalars, `oneOf` and `anyOf`. A node without `type` is any JSON value
//! (`JsonValue`). Anything else (`$ref`, `allOf`, `not`, conditionals, an unknown type
//! name, a non-scalar enum member…) degrades to `unknown` rather than failing.

use serde_json::{Map, Value};

/// How deep schemas may nest before the rest is `unknown`.
const MAX_DEPTH: usize = 64;

/// Keywords whose meaning the rendering cannot express: a node using one is `unknown`.
const UNSUPPORTED: &[&str] = &[
    "$ref",
    "$dynamicRef",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "patternProperties",
    "prefixItems",
    "dependentSchemas",
    "propertyNames",
    "unevaluatedProperties",
];

/// A property name as a TypeScript key: bare when it is an identifier, quoted otherwise.
pub fn render_key(name: &str) -> String {
    let mut chars = name.chars();
    let identifier = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if identifier {
        name.to_string()
    } else {
        Value::String(name.to_string()).to_string()
    }
}

fn pad(indent: usize) -> String {
    "  ".repeat(indent)
}

/// A one-line `/** … */` comment for `description`, or `None` when there is none.
pub fn doc_line(description: Option<&Value>, indent: usize) -> Option<String> {
    let text = description?.as_str()?;
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.is_empty() {
        return None;
    }
    Some(format!(
        "{}/** {} */",
        pad(indent),
        collapsed.replace("*/", "*\\/")
    ))
}

/// The TypeScript type of `schema`, with nested object members indented one level past
/// `indent` (two spaces a level).
pub fn json_schema_to_ts(schema: &Value, indent: usize) -> String {
    render(schema, indent, 0)
}

fn render(schema: &Value, indent: usize, depth: usize) -> String {
    if depth > MAX_DEPTH {
        return "unknown".into();
    }
    let node = match schema {
        Value::Object(node) => node,
        // `true` accepts any value.
        Value::Bool(true) => return "JsonValue".into(),
        _ => return "unknown".into(),
    };
    if UNSUPPORTED.iter().any(|k| node.contains_key(*k)) {
        return "unknown".into();
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = node.get(key) {
            let Some(options) = options.as_array().filter(|o| !o.is_empty()) else {
                return "unknown".into();
            };
            return options
                .iter()
                .map(|o| render(o, indent, depth + 1))
                .collect::<Vec<_>>()
                .join(" | ");
        }
    }
    match node.get("type") {
        None => {
            if node.contains_key("const") || node.contains_key("enum") {
                literals(node).unwrap_or_else(|| "unknown".into())
            } else if node.contains_key("properties") {
                object(node, indent, depth)
            } else {
                "JsonValue".into()
            }
        }
        Some(Value::String(t)) => typed(node, t, indent, depth),
        Some(Value::Array(types)) => {
            let mut out = Vec::new();
            for t in types {
                let Some(t) = t.as_str() else {
                    return "unknown".into();
                };
                out.push(typed(node, t, indent, depth));
            }
            if out.is_empty() {
                "unknown".into()
            } else {
                out.join(" | ")
            }
        }
        Some(_) => "unknown".into(),
    }
}

/// The `const` or `enum` of a node as literal types; `None` when a member is not a scalar.
fn literals(node: &Map<String, Value>) -> Option<String> {
    let scalar = |v: &Value| match v {
        Value::Object(_) | Value::Array(_) => None,
        other => Some(other.to_string()),
    };
    if let Some(c) = node.get("const") {
        return scalar(c);
    }
    let members = node.get("enum")?.as_array()?;
    if members.is_empty() {
        return Some("never".into());
    }
    members
        .iter()
        .map(scalar)
        .collect::<Option<Vec<_>>>()
        .map(|m| m.join(" | "))
}

fn typed(node: &Map<String, Value>, t: &str, indent: usize, depth: usize) -> String {
    match t {
        "string" | "number" | "integer" | "boolean" | "null" => {
            if node.contains_key("const") || node.contains_key("enum") {
                return literals(node).unwrap_or_else(|| "unknown".into());
            }
            if t == "integer" { "number" } else { t }.to_string()
        }
        "array" => match node.get("items") {
            None => "JsonValue[]".into(),
            Some(items) => {
                let inner = render(items, indent, depth + 1);
                if inner.contains('|') || inner.contains('&') {
                    format!("({inner})[]")
                } else {
                    format!("{inner}[]")
                }
            }
        },
        "object" => object(node, indent, depth),
        _ => "unknown".into(),
    }
}

fn object(node: &Map<String, Value>, indent: usize, depth: usize) -> String {
    let closed = node.get("additionalProperties") == Some(&Value::Bool(false));
    let properties = node.get("properties").and_then(Value::as_object);
    let Some(properties) = properties.filter(|p| !p.is_empty()) else {
        return if closed {
            "Record<string, never>".into()
        } else {
            "Record<string, JsonValue>".into()
        };
    };
    let required: Vec<&str> = node
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = String::from("{");
    for (name, prop) in properties {
        if let Some(doc) = doc_line(prop.get("description"), indent + 1) {
            out.push('\n');
            out.push_str(&doc);
        }
        let optional = if required.contains(&name.as_str()) {
            ""
        } else {
            "?"
        };
        out.push_str(&format!(
            "\n{}{}{optional}: {};",
            pad(indent + 1),
            render_key(name),
            render(prop, indent + 1, depth + 1)
        ));
    }
    out.push('\n');
    out.push_str(&pad(indent));
    out.push('}');
    if !closed {
        out.push_str(" & Record<string, JsonValue>");
    }
    out
}
