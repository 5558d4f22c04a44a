//! What session query reads out of events: the searchable text of an event, the surface
//! class of every event, and JavaScript-compatible times.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use dsh_session::{Event, SurfaceOp, types};
use serde_json::Value;

/// Where an event stands relative to the model-visible surface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SurfaceClass {
    /// On the current surface.
    Current,
    /// Was on the surface and was replaced.
    Shadowed,
    /// Never a surface node.
    LogOnly,
}

impl SurfaceClass {
    pub fn as_str(self) -> &'static str {
        match self {
            SurfaceClass::Current => "current",
            SurfaceClass::Shadowed => "shadowed",
            SurfaceClass::LogOnly => "log-only",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "current" => Some(SurfaceClass::Current),
            "shadowed" => Some(SurfaceClass::Shadowed),
            "log-only" => Some(SurfaceClass::LogOnly),
            _ => None,
        }
    }
}

/// The surface folded over a log: which node replaced which.
#[derive(Debug, Default)]
pub struct SurfaceFold {
    current: HashSet<u64>,
    /// Shadowed seq → the replacement that shadowed it.
    pub replaced_by: HashMap<u64, u64>,
    /// Replacement seq → the seqs it shadowed.
    pub replaced: HashMap<u64, Vec<u64>>,
}

impl SurfaceFold {
    /// Folds `events` (a valid log: replace ranges name live nodes).
    pub fn of(events: &[Arc<Event>]) -> Self {
        let mut nodes: Vec<u64> = Vec::new();
        let mut fold = SurfaceFold::default();
        for e in events {
            match e.surface_op {
                Some(SurfaceOp::Append) => nodes.push(e.seq),
                Some(SurfaceOp::Replace { start, end }) => {
                    let (Some(si), Some(ei)) = (
                        nodes.iter().position(|n| *n == start),
                        nodes.iter().position(|n| *n == end),
                    ) else {
                        continue;
                    };
                    if si > ei {
                        continue;
                    }
                    let shadowed: Vec<u64> = nodes.splice(si..=ei, [e.seq]).collect();
                    for s in &shadowed {
                        fold.replaced_by.insert(*s, e.seq);
                    }
                    fold.replaced.insert(e.seq, shadowed);
                }
                None => {}
            }
        }
        fold.current = nodes.into_iter().collect();
        fold
    }

    pub fn class(&self, seq: u64) -> SurfaceClass {
        if self.current.contains(&seq) {
            SurfaceClass::Current
        } else if self.replaced_by.contains_key(&seq) {
            SurfaceClass::Shadowed
        } else {
            SurfaceClass::LogOnly
        }
    }
}

fn push(parts: &mut Vec<String>, s: &str) {
    let t = s.trim();
    if !t.is_empty() {
        parts.push(t.to_string());
    }
}

fn content_text(content: Option<&Value>, parts: &mut Vec<String>) {
    let Some(Value::Array(blocks)) = content else {
        return;
    };
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => push(parts, b.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool-call") => {
                push(parts, b.get("name").and_then(Value::as_str).unwrap_or(""));
                push(
                    parts,
                    b.get("arguments").and_then(Value::as_str).unwrap_or(""),
                );
            }
            Some("tool-result") => content_text(b.get("content"), parts),
            _ => {}
        }
    }
}

/// The searchable text of `event` (empty when it has none): message text, tool calls and
/// results, todos and turn failures; reasoning is never searchable.
pub fn event_text(event: &Event) -> String {
    let mut parts = Vec::new();
    if event.data.delta().is_some() {
        return String::new();
    }
    let data = event.data.as_value();
    match event.event_type.as_str() {
        types::USER_MESSAGE => content_text(data.get("content"), &mut parts),
        types::ASSISTANT_MESSAGE => content_text(data.pointer("/message/content"), &mut parts),
        types::TOOL_CALL => {
            push(
                &mut parts,
                data.get("name").and_then(Value::as_str).unwrap_or(""),
            );
            match data.get("arguments") {
                Some(Value::String(s)) => push(&mut parts, s),
                Some(v @ (Value::Object(_) | Value::Array(_))) => {
                    push(&mut parts, &dsh_kernel::json::to_string(v))
                }
                _ => {}
            }
        }
        types::TOOL_RESULT => {
            content_text(data.pointer("/message/content"), &mut parts);
            for key in ["/error/name", "/error/code"] {
                push(
                    &mut parts,
                    data.pointer(key).and_then(Value::as_str).unwrap_or(""),
                );
            }
        }
        types::TODO_WRITE => {
            if let Some(Value::Array(todos)) = data.get("todos") {
                for t in todos {
                    push(
                        &mut parts,
                        t.get("status").and_then(Value::as_str).unwrap_or(""),
                    );
                    push(
                        &mut parts,
                        t.get("content").and_then(Value::as_str).unwrap_or(""),
                    );
                }
            }
        }
        types::TURN_END => match data.pointer("/reason/kind").and_then(Value::as_str) {
            Some("error") => {
                push(&mut parts, "error");
                push(
                    &mut parts,
                    data.pointer("/reason/error/message")
                        .or_else(|| data.pointer("/reason/message"))
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                );
            }
            Some(k @ ("aborted" | "max-tokens" | "interrupted")) => push(&mut parts, k),
            _ => {}
        },
        _ => {}
    }
    parts.join("\n")
}

/// `new Date(ms).toISOString()`: `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
pub fn iso_millis(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let (h, mi, s, milli) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000,
    );
    if (0..=9999).contains(&y) {
        format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
    } else {
        let sign = if y < 0 { '-' } else { '+' };
        format!(
            "{sign}{:06}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z",
            y.abs()
        )
    }
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses a timezone-qualified ISO 8601 time
/// (`YYYY-MM-DDTHH:MM[:SS[.fff…]](Z|±HH:MM)`) to epoch milliseconds.
pub fn parse_iso(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let s = text.get(from..from + len)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    if b.len() < 17 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    let (y, mo, d, h, mi) = (num(0, 4)?, num(5, 2)?, num(8, 2)?, num(11, 2)?, num(14, 2)?);
    let mut i = 16;
    let mut sec = 0;
    let mut millis = 0;
    if b.get(i) == Some(&b':') {
        sec = num(i + 1, 2)?;
        i += 3;
        if b.get(i) == Some(&b'.') {
            let start = i + 1;
            let mut end = start;
            while b.get(end).is_some_and(u8::is_ascii_digit) {
                end += 1;
            }
            if end == start {
                return None;
            }
            let frac = &text[start..end.min(start + 3)];
            millis = format!("{frac:0<3}").parse().ok()?;
            i = end;
        }
    }
    let offset_min = match b.get(i) {
        Some(b'Z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let (oh, om) = (num(i + 1, 2)?, num(i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let m = oh * 60 + om;
            if *sign == b'-' { -m } else { m }
        }
        _ => return None,
    };
    let month_days = [
        31,
        if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) {
            29
        } else {
            28
        },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo)
        || d < 1
        || d > month_days[(mo - 1) as usize]
        || h > 23
        || mi > 59
        || sec > 59
    {
        return None;
    }
    let days = days_from_civil(y, mo as u32, d as u32);
    Some(((days * 24 + h) * 60 + mi - offset_min) * 60_000 + sec * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn times_print_like_javascript() {
        assert_eq!(iso_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_millis(1_785_987_646_184), "2026-08-06T03:40:46.184Z");
        assert_eq!(iso_millis(951_782_400_001), "2000-02-29T00:00:00.001Z");
    }

    #[test]
    fn iso_times_parse_with_their_offset() {
        assert_eq!(parse_iso("1970-01-01T00:00Z"), Some(0));
        assert_eq!(
            parse_iso("2026-08-06T03:40:46.184Z"),
            Some(1_785_987_646_184)
        );
        assert_eq!(parse_iso("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_iso("1970-01-01T00:00:00.5-00:30"), Some(1_800_500));
        for bad in [
            "1970-01-01",
            "1970-01-01T00:00",
            "1970-02-30T00:00Z",
            "1970-01-01T00:00:00.Z",
            "x",
        ] {
            assert_eq!(parse_iso(bad), None, "{bad}");
        }
    }
}
