//! The model-facing text of a program's completion value: a string as is, anything else as
//! two-space-indented JSON whose indentation stops growing past ten characters (deeper
//! subtrees are written compact), so the text stays linear in the value's size.

use serde_json::Value;

const INDENT: &str = "  ";
const MAX_INDENT_CHARS: usize = 10;

/// Renders one completion value.
pub fn render_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => {
            let mut out = String::new();
            write(&mut out, other, 0, false);
            out
        }
    }
}

fn write(out: &mut String, value: &Value, depth: usize, compact: bool) {
    let compact = compact || (depth + 1) * INDENT.len() > MAX_INDENT_CHARS;
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            dsh_kernel::json::write_value(out, value);
        }
        Value::Array(items) => {
            out.push('[');
            if items.is_empty() {
                out.push(']');
                return;
            }
            for (i, item) in items.iter().enumerate() {
                if compact {
                    if i > 0 {
                        out.push(',');
                    }
                } else {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    out.push_str(&INDENT.repeat(depth + 1));
                }
                write(out, item, depth + 1, compact);
            }
            if !compact {
                out.push('\n');
                out.push_str(&INDENT.repeat(depth));
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            if map.is_empty() {
                out.push('}');
                return;
            }
            for (i, (key, item)) in map.iter().enumerate() {
                if compact {
                    if i > 0 {
                        out.push(',');
                    }
                    dsh_kernel::json::write_string(out, key);
                    out.push(':');
                } else {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    out.push_str(&INDENT.repeat(depth + 1));
                    dsh_kernel::json::write_string(out, key);
                    out.push_str(": ");
                }
                write(out, item, depth + 1, compact);
            }
            if !compact {
                out.push('\n');
                out.push_str(&INDENT.repeat(depth));
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn strings_are_raw_and_values_indented() {
        assert_eq!(render_value(&json!("a+b")), "a+b");
        assert_eq!(render_value(&json!(3)), "3");
        assert_eq!(
            render_value(&json!({"path": "/x", "lines": [{"number": 1}], "e": []})),
            "{\n  \"path\": \"/x\",\n  \"lines\": [\n    {\n      \"number\": 1\n    }\n  ],\n  \"e\": []\n}"
        );
    }

    #[test]
    fn deep_values_turn_compact() {
        let v = json!({"a": {"b": {"c": {"d": {"e": {"f": [1, 2]}}}}}});
        assert_eq!(
            render_value(&v),
            "{\n  \"a\": {\n    \"b\": {\n      \"c\": {\n        \"d\": {\n          \"e\": {\"f\":[1,2]}\n        }\n      }\n    }\n  }\n}"
        );
    }
}
