//! JSON text exactly as JavaScript's `JSON.stringify` writes it.
//!
//! Session logs and protocol frames must be byte-compatible with the TypeScript
//! implementation. `serde_json` (with `preserve_order`) keeps key order; this module adds
//! JavaScript's number formatting (`1e+21`, `1e-7`, integers without `.0`) and its string
//! escapes (only `"`, `\`, and control characters; non-ASCII is written raw).

use std::fmt::Write as _;

use serde_json::{Number, Value};

/// Serializes `value` the way `JSON.stringify(value)` would.
pub fn to_string(value: &Value) -> String {
    let mut out = String::with_capacity(128);
    write_value(&mut out, value);
    out
}

/// [`to_string`] of `value`, except that each top-level field named in `raw` is written as
/// the JSON text given for it, whatever value it holds (a placeholder): for large parts of a
/// document that were serialized once and are reused. Not an object: [`to_string`].
pub fn to_string_with_raw(value: &Value, raw: &[(&str, &str)]) -> String {
    let Value::Object(map) = value else {
        return to_string(value);
    };
    let mut out = String::with_capacity(raw.iter().map(|(_, r)| r.len()).sum::<usize>() + 128);
    out.push('{');
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(&mut out, k);
        out.push(':');
        match raw.iter().find(|(field, _)| field == k) {
            Some((_, text)) => out.push_str(text),
            None => write_value(&mut out, v),
        }
    }
    out.push('}');
    out
}

/// Appends the `JSON.stringify` text of `value` to `out`.
pub fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, v);
            }
            out.push('}');
        }
    }
}

/// Which bytes a JSON string literal escapes: `"`, `\` and the controls below 0x20. Every
/// other byte, ASCII or part of a UTF-8 sequence, is copied as it is.
const NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Writes a JSON string literal with JavaScript's escaping rules.
pub fn write_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !NEEDS_ESCAPE[b as usize] {
            continue;
        }
        // `i` is an ASCII byte, so both slices end on character boundaries.
        out.push_str(&s[start..i]);
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            _ => {
                let _ = write!(out, "\\u{:04x}", b);
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Writes a number the way JavaScript's `Number.prototype.toString` does.
pub fn write_number(out: &mut String, n: &Number) {
    if let Some(i) = n.as_u64() {
        let _ = write!(out, "{i}");
    } else if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(f) = n.as_f64() {
        write_f64(out, f);
    } else {
        out.push_str("null");
    }
}

/// JavaScript number formatting for a finite double.
pub fn write_f64(out: &mut String, f: f64) {
    if !f.is_finite() {
        out.push_str("null");
        return;
    }
    if f == 0.0 {
        out.push('0');
        return;
    }
    // Shortest round-trip digits, as both Rust and JavaScript use.
    let formatted = format!("{:e}", f.abs());
    let (mantissa, exp) = match formatted.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (formatted.as_str(), 0),
    };
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let k = digits.len() as i32; // number of significant digits
    let n = exp + 1; // position of the decimal point relative to the digits
    if f < 0.0 {
        out.push('-');
    }
    if k <= n && n <= 21 {
        out.push_str(&digits);
        for _ in 0..(n - k) {
            out.push('0');
        }
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        for _ in 0..(-n) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        let _ = write!(out, "{}", (n - 1).abs());
    }
}

/// Whether `value` is lossless JSON in upstream's sense: no `-0` and no non-finite numbers
/// (`serde_json` cannot hold the latter, so only `-0` needs checking).
pub fn is_lossless(value: &Value) -> bool {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Number(n) => {
                if let Some(f) = n.as_f64()
                    && f == 0.0
                    && f.is_sign_negative()
                    && !n.is_i64()
                    && !n.is_u64()
                {
                    return false;
                }
            }
            Value::Array(items) => stack.extend(items.iter()),
            Value::Object(map) => stack.extend(map.values()),
            Value::Null | Value::Bool(_) | Value::String(_) => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn num(f: f64) -> String {
        let mut s = String::new();
        write_f64(&mut s, f);
        s
    }

    #[test]
    fn numbers_match_javascript() {
        let cases = [
            (1.0, "1"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (1e-7, "1e-7"),
            (0.000001, "0.000001"),
            (1.5e-10, "1.5e-10"),
            (2.5e300, "2.5e+300"),
            (0.5, "0.5"),
            (100.25, "100.25"),
        ];
        for (f, want) in cases {
            assert_eq!(num(f), want, "formatting {f}");
        }
    }

    #[test]
    fn strings_escape_like_javascript() {
        let v = json!({"a": "q\"b\\s\n\t\u{1}\u{7f}é\u{2028}"});
        assert_eq!(
            to_string(&v),
            "{\"a\":\"q\\\"b\\\\s\\n\\t\\u0001\u{7f}é\u{2028}\"}"
        );
    }

    /// Every character below U+0100 and a few beyond, alone and between others, escapes as
    /// serde_json escapes it (the same rules: `"`, `\`, controls, nothing else) except
    /// that JavaScript writes the controls without a short form as lower-case `\u00xx`,
    /// which serde_json does too.
    #[test]
    fn every_character_escapes_as_serde_json_does() {
        let mut chars: Vec<char> = (0u32..0x100).filter_map(char::from_u32).collect();
        chars.extend(['\u{2028}', '\u{fffd}', '\u{10ffff}', '\u{1f600}', 'é']);
        for c in &chars {
            for text in [c.to_string(), format!("a{c}b{c}{c}"), format!("{c}é\"{c}")] {
                let mut ours = String::new();
                write_string(&mut ours, &text);
                assert_eq!(ours, serde_json::to_string(&text).unwrap(), "{text:?}");
            }
        }
    }

    #[test]
    fn object_order_is_preserved() {
        let v: Value = serde_json::from_str(r#"{"z":1,"a":[true,null,{"m":-3}]}"#).unwrap();
        assert_eq!(to_string(&v), r#"{"z":1,"a":[true,null,{"m":-3}]}"#);
    }

    #[test]
    fn negative_zero_is_not_lossless() {
        let v: Value = serde_json::from_str(r#"{"a":-0.0}"#).unwrap();
        assert!(!is_lossless(&v));
        assert!(is_lossless(&json!({"a": 0, "b": [1.5]})));
    }
}
