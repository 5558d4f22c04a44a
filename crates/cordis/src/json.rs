//! `JSON.stringify(value, null, 2)`: the text of the JSON-valued cordis results.

use serde_json::Value;

/// Two-space-indented JSON, as JavaScript writes it.
pub fn pretty(value: &Value) -> String {
    let mut out = String::new();
    write(&mut out, value, 0);
    out
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

fn write(out: &mut String, value: &Value, depth: usize) {
    match value {
        Value::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                indent(out, depth + 1);
                write(out, item, depth + 1);
            }
            out.push('\n');
            indent(out, depth);
            out.push(']');
        }
        Value::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                indent(out, depth + 1);
                dsh_kernel::json::write_string(out, key);
                out.push_str(": ");
                write(out, item, depth + 1);
            }
            out.push('\n');
            indent(out, depth);
            out.push('}');
        }
        other => dsh_kernel::json::write_value(out, other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn writes_like_json_stringify_with_two_spaces() {
        let v = json!({"a": [1, {"b": "x"}], "c": {}, "d": [], "e": null});
        assert_eq!(
            pretty(&v),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": \"x\"\n    }\n  ],\n  \"c\": {},\n  \"d\": [],\n  \"e\": null\n}"
        );
    }
}
