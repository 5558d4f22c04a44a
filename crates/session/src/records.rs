//! Storage records: one JSON line each. A record is an event verbatim or a packed row of
//! ≥ 3 consecutive stream deltas (`text-chunks`, `reasoning-chunks`, `tool-call-chunks`).
//! Packing is optional on write; reading always accepts both forms and validates rows
//! strictly.

use std::sync::Arc;

use dsh_kernel::json::{write_string, write_value};
use serde_json::{Map, Value};

use crate::event::{Event, SurfaceKeyOrder, SurfaceOp, types};

/// Runs shorter than this stay unpacked.
pub const MIN_RUN: usize = 3;

/// Whether records carry `seq`/`time` (`Full`, what persistence writes) or have them
/// projected away (`Projected`, the replay-fixture form: seqs are positions, times 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordFormat {
    Full,
    Projected,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    Text,
    Reasoning,
    ToolCall,
}

impl RowKind {
    fn record_type(self) -> &'static str {
        match self {
            RowKind::Text => "text-chunks",
            RowKind::Reasoning => "reasoning-chunks",
            RowKind::ToolCall => "tool-call-chunks",
        }
    }

    fn delta_type(self) -> &'static str {
        match self {
            RowKind::Text => "text-delta",
            RowKind::Reasoning => "reasoning-delta",
            RowKind::ToolCall => "tool-call-delta",
        }
    }
}

/// A packed run of deltas.
#[derive(Clone, Debug, PartialEq)]
pub struct PackedRow {
    pub kind: RowKind,
    pub seq0: u64,
    pub time0: i64,
    pub turn: Value,
    pub step: Value,
    pub index: Value,
    pub dt: Vec<i64>,
    /// Texts (text/reasoning) or argument fragments (tool calls).
    pub parts: Vec<String>,
    pub call_id: Option<String>,
    pub call_name: Option<String>,
}

impl PackedRow {
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The events this row stands for.
    pub fn expand(&self) -> Vec<Event> {
        let mut time = self.time0;
        let mut out = Vec::with_capacity(self.parts.len());
        for (k, part) in self.parts.iter().enumerate() {
            if k > 0 {
                time += self.dt.get(k - 1).copied().unwrap_or(0);
            }
            let mut chunk = Map::new();
            chunk.insert("type".into(), Value::from(self.kind.delta_type()));
            chunk.insert("index".into(), self.index.clone());
            match self.kind {
                RowKind::Text | RowKind::Reasoning => {
                    chunk.insert("text".into(), Value::from(part.clone()));
                }
                RowKind::ToolCall => {
                    chunk.insert("id".into(), Value::from(self.call_id.clone().unwrap_or_default()));
                    if let Some(name) = &self.call_name {
                        chunk.insert("name".into(), Value::from(name.clone()));
                    }
                    chunk.insert("argumentsDelta".into(), Value::from(part.clone()));
                }
            }
            let mut data = Map::new();
            data.insert("turn".into(), self.turn.clone());
            data.insert("step".into(), self.step.clone());
            data.insert("chunk".into(), Value::Object(chunk));
            out.push(Event {
                event_type: types::ASSISTANT_CHUNK.into(),
                seq: self.seq0 + k as u64,
                time,
                data: Value::Object(data),
                source_event_seqs: None,
                surface_op: None,
                ignorable: false,
                key_order: SurfaceKeyOrder::SourcesFirst,
            });
        }
        out
    }
}

/// One stored record.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    Event(Arc<Event>),
    Row(Box<PackedRow>),
}

impl Record {
    /// Number of events this record stands for.
    pub fn event_count(&self) -> usize {
        match self {
            Record::Event(_) => 1,
            Record::Row(r) => r.len(),
        }
    }
}

/// A line could not be decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct RecordError(pub String);

fn err(msg: impl Into<String>) -> RecordError {
    RecordError(msg.into())
}

fn keys_are(map: &Map<String, Value>, keys: &[&str]) -> bool {
    map.len() == keys.len() && map.keys().zip(keys).all(|(a, b)| a == b)
}

// ------------------------------------------------------------------ packing

/// What a delta event contributes to a run.
struct DeltaShape<'a> {
    kind: RowKind,
    turn: &'a Value,
    step: &'a Value,
    index: &'a Value,
    part: &'a str,
    call_id: Option<&'a str>,
    call_name: Option<&'a str>,
}

fn is_safe_int(v: &Value) -> bool {
    v.as_u64().is_some_and(|n| n <= 9_007_199_254_740_991)
}

fn delta_shape(e: &Event) -> Option<DeltaShape<'_>> {
    if e.event_type != types::ASSISTANT_CHUNK
        || e.surface_op.is_some()
        || e.source_event_seqs.is_some()
        || e.ignorable
    {
        return None;
    }
    let Value::Object(data) = &e.data else { return None };
    if !keys_are(data, &["turn", "step", "chunk"]) {
        return None;
    }
    let (turn, step) = (data.get("turn")?, data.get("step")?);
    if !is_safe_int(turn) || !is_safe_int(step) {
        return None;
    }
    let Value::Object(chunk) = data.get("chunk")? else { return None };
    let index = chunk.get("index")?;
    if !is_safe_int(index) {
        return None;
    }
    match chunk.get("type")?.as_str()? {
        t @ ("text-delta" | "reasoning-delta") if keys_are(chunk, &["type", "index", "text"]) => {
            Some(DeltaShape {
                kind: if t == "text-delta" { RowKind::Text } else { RowKind::Reasoning },
                turn,
                step,
                index,
                part: chunk.get("text")?.as_str()?,
                call_id: None,
                call_name: None,
            })
        }
        "tool-call-delta" => {
            let with_name = keys_are(chunk, &["type", "index", "id", "name", "argumentsDelta"]);
            if !with_name && !keys_are(chunk, &["type", "index", "id", "argumentsDelta"]) {
                return None;
            }
            Some(DeltaShape {
                kind: RowKind::ToolCall,
                turn,
                step,
                index,
                part: chunk.get("argumentsDelta")?.as_str()?,
                call_id: Some(chunk.get("id")?.as_str()?),
                call_name: if with_name { Some(chunk.get("name")?.as_str()?) } else { None },
            })
        }
        _ => None,
    }
}

fn continues(a: &DeltaShape<'_>, prev: &Event, b: &DeltaShape<'_>, next: &Event) -> bool {
    a.kind == b.kind
        && a.turn == b.turn
        && a.step == b.step
        && a.index == b.index
        && a.call_id == b.call_id
        && a.call_name == b.call_name
        && next.seq == prev.seq + 1
}

/// Packs runs of ≥ [`MIN_RUN`] consecutive packable deltas into rows.
pub fn pack(events: &[Arc<Event>]) -> Vec<Record> {
    let mut out = Vec::with_capacity(events.len());
    let mut i = 0;
    while i < events.len() {
        let Some(first) = delta_shape(&events[i]) else {
            out.push(Record::Event(events[i].clone()));
            i += 1;
            continue;
        };
        let mut j = i + 1;
        let mut prev = &first;
        let mut shapes = Vec::new();
        while j < events.len() {
            match delta_shape(&events[j]) {
                Some(s) if continues(prev, &events[j - 1], &s, &events[j]) => {
                    shapes.push(s);
                    prev = shapes.last().unwrap_or(&first);
                    j += 1;
                }
                _ => break,
            }
        }
        if j - i < MIN_RUN {
            for e in &events[i..j] {
                out.push(Record::Event(e.clone()));
            }
            i = j;
            continue;
        }
        let mut parts = Vec::with_capacity(j - i);
        parts.push(first.part.to_string());
        parts.extend(shapes.iter().map(|s| s.part.to_string()));
        let dt = events[i..j].windows(2).map(|w| w[1].time - w[0].time).collect();
        out.push(Record::Row(Box::new(PackedRow {
            kind: first.kind,
            seq0: events[i].seq,
            time0: events[i].time,
            turn: first.turn.clone(),
            step: first.step.clone(),
            index: first.index.clone(),
            dt,
            parts,
            call_id: first.call_id.map(str::to_owned),
            call_name: first.call_name.map(str::to_owned),
        })));
        i = j;
    }
    out
}

// ------------------------------------------------------------------ encoding

/// Appends one event record (no newline).
pub fn write_event(out: &mut String, e: &Event, format: RecordFormat) {
    out.push_str("{\"type\":");
    write_string(out, &e.event_type);
    if format == RecordFormat::Full {
        out.push_str(",\"seq\":");
        out.push_str(&e.seq.to_string());
        out.push_str(",\"time\":");
        out.push_str(&e.time.to_string());
    }
    out.push_str(",\"data\":");
    write_value(out, &e.data);
    let write_sources = |out: &mut String| {
        if let Some(s) = &e.source_event_seqs {
            out.push_str(",\"sourceEventSeqs\":[");
            for (i, n) in s.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&n.to_string());
            }
            out.push(']');
        }
    };
    let write_op = |out: &mut String| {
        if let Some(op) = e.surface_op {
            out.push_str(",\"surfaceOp\":");
            write_value(out, &op.to_value());
        }
    };
    match e.key_order {
        SurfaceKeyOrder::SourcesFirst => {
            write_sources(out);
            write_op(out);
        }
        SurfaceKeyOrder::OpFirst => {
            write_op(out);
            write_sources(out);
        }
    }
    if e.ignorable {
        out.push_str(",\"ignorable\":true");
    }
    out.push('}');
}

/// Appends one record (no newline).
pub fn write_record(out: &mut String, record: &Record, format: RecordFormat) {
    match record {
        Record::Event(e) => write_event(out, e, format),
        Record::Row(r) => {
            out.push_str("{\"type\":\"");
            out.push_str(r.kind.record_type());
            out.push('"');
            if format == RecordFormat::Full {
                out.push_str(",\"seq0\":");
                out.push_str(&r.seq0.to_string());
                out.push_str(",\"time0\":");
                out.push_str(&r.time0.to_string());
            }
            out.push_str(",\"data\":{\"turn\":");
            write_value(out, &r.turn);
            out.push_str(",\"step\":");
            write_value(out, &r.step);
            out.push_str(",\"index\":");
            write_value(out, &r.index);
            out.push_str(",\"dt\":[");
            for (i, d) in r.dt.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&d.to_string());
            }
            out.push(']');
            match r.kind {
                RowKind::Text | RowKind::Reasoning => out.push_str(",\"texts\":["),
                RowKind::ToolCall => {
                    out.push_str(",\"id\":");
                    write_string(out, r.call_id.as_deref().unwrap_or(""));
                    if let Some(n) = &r.call_name {
                        out.push_str(",\"name\":");
                        write_string(out, n);
                    }
                    out.push_str(",\"args\":[");
                }
            }
            for (i, p) in r.parts.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, p);
            }
            out.push_str("]}}");
        }
    }
}

// ------------------------------------------------------------------ decoding

const ENVELOPE_KEYS: [&str; 7] = ["type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"];

/// Decodes one parsed record. `next_seq` is the seq the record must start at; in the
/// projected format (no `seq`/`seq0`) it is assigned, with times 0.
pub fn decode_record(value: Value, next_seq: u64) -> Result<Record, RecordError> {
    decode_record_with_format(value, next_seq).map(|(r, _)| r)
}

/// Like [`decode_record`], also telling whether the record carried `seq`/`seq0`.
pub fn decode_record_with_format(value: Value, next_seq: u64) -> Result<(Record, RecordFormat), RecordError> {
    let Value::Object(map) = value else {
        return Err(err("record is not a JSON object"));
    };
    let format = if map.contains_key("seq") || map.contains_key("seq0") {
        RecordFormat::Full
    } else {
        RecordFormat::Projected
    };
    let record = match map.get("type").and_then(Value::as_str) {
        Some("text-chunks") => decode_row(map, RowKind::Text, next_seq),
        Some("reasoning-chunks") => decode_row(map, RowKind::Reasoning, next_seq),
        Some("tool-call-chunks") => decode_row(map, RowKind::ToolCall, next_seq),
        Some(_) => decode_event(map, next_seq).map(|e| Record::Event(Arc::new(e))),
        None => Err(err("record has no string `type`")),
    }?;
    Ok((record, format))
}

fn decode_event(mut map: Map<String, Value>, next_seq: u64) -> Result<Event, RecordError> {
    if let Some(k) = map.keys().find(|k| !ENVELOPE_KEYS.contains(&k.as_str())) {
        return Err(err(format!("event envelope has unexpected key \"{k}\"")));
    }
    let key_order = match (
        map.keys().position(|k| k == "sourceEventSeqs"),
        map.keys().position(|k| k == "surfaceOp"),
    ) {
        (Some(s), Some(o)) if o < s => SurfaceKeyOrder::OpFirst,
        _ => SurfaceKeyOrder::SourcesFirst,
    };
    let event_type = match map.remove("type") {
        Some(Value::String(t)) if !t.is_empty() => t,
        _ => return Err(err("event has no string `type`")),
    };
    let seq = match map.remove("seq") {
        None => next_seq,
        Some(v) => v.as_u64().ok_or_else(|| err("event `seq` is not a non-negative integer"))?,
    };
    let time = match map.remove("time") {
        None => 0,
        Some(v) => v.as_i64().ok_or_else(|| err("event `time` is not an integer"))?,
    };
    let data = map.remove("data").ok_or_else(|| err(format!("event \"{event_type}\" has no `data`")))?;
    let surface_op = match map.remove("surfaceOp") {
        None => None,
        Some(v) => Some(SurfaceOp::from_value(&v).map_err(|m| err(format!("event \"{event_type}\" {m}")))?),
    };
    let source_event_seqs = match map.remove("sourceEventSeqs") {
        None => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|v| v.as_u64().ok_or_else(|| err("sourceEventSeqs must hold non-negative integers")))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => return Err(err("sourceEventSeqs must be an array")),
    };
    let ignorable = match map.remove("ignorable") {
        None => false,
        Some(Value::Bool(true)) => true,
        Some(_) => return Err(err("`ignorable` may only be true")),
    };
    Ok(Event { event_type, seq, time, data, source_event_seqs, surface_op, ignorable, key_order })
}

fn decode_row(map: Map<String, Value>, kind: RowKind, next_seq: u64) -> Result<Record, RecordError> {
    let name = kind.record_type();
    let bad = |what: &str| err(format!("invalid {name} row: {what}"));
    let projected = !map.contains_key("seq0");
    let expected: &[&str] = if projected { &["type", "data"] } else { &["type", "seq0", "time0", "data"] };
    if !keys_are(&map, expected) {
        return Err(bad("unexpected envelope keys"));
    }
    let (seq0, time0) = if projected {
        (next_seq, 0)
    } else {
        (
            map.get("seq0").and_then(Value::as_u64).ok_or_else(|| bad("seq0"))?,
            map.get("time0").and_then(Value::as_i64).ok_or_else(|| bad("time0"))?,
        )
    };
    let Some(Value::Object(data)) = map.get("data") else { return Err(bad("data")) };
    let (parts_key, ok_keys) = match kind {
        RowKind::Text | RowKind::Reasoning => {
            ("texts", keys_are(data, &["turn", "step", "index", "dt", "texts"]))
        }
        RowKind::ToolCall => (
            "args",
            keys_are(data, &["turn", "step", "index", "dt", "id", "args"])
                || keys_are(data, &["turn", "step", "index", "dt", "id", "name", "args"]),
        ),
    };
    if !ok_keys {
        return Err(bad("unexpected data keys"));
    }
    let field = |k: &str| data.get(k).filter(|v| is_safe_int(v)).cloned().ok_or_else(|| bad(k));
    let (turn, step, index) = (field("turn")?, field("step")?, field("index")?);
    let parts: Vec<String> = match data.get(parts_key) {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned).ok_or_else(|| bad(parts_key)))
            .collect::<Result<_, _>>()?,
        _ => return Err(bad(parts_key)),
    };
    let dt: Vec<i64> = match data.get("dt") {
        Some(Value::Array(items)) => {
            items.iter().map(|v| v.as_i64().ok_or_else(|| bad("dt"))).collect::<Result<_, _>>()?
        }
        _ => return Err(bad("dt")),
    };
    if parts.len() < 2 || dt.len() + 1 != parts.len() {
        return Err(bad("dt length must be one less than the number of members"));
    }
    let (call_id, call_name) = match kind {
        RowKind::ToolCall => (
            Some(data.get("id").and_then(Value::as_str).ok_or_else(|| bad("id"))?.to_string()),
            match data.get("name") {
                None => None,
                Some(v) => Some(v.as_str().ok_or_else(|| bad("name"))?.to_string()),
            },
        ),
        _ => (None, None),
    };
    Ok(Record::Row(Box::new(PackedRow { kind, seq0, time0, turn, step, index, dt, parts, call_id, call_name })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn roundtrip(line: &str) {
        let rec = decode_record(serde_json::from_str(line).unwrap(), 7).unwrap();
        let mut out = String::new();
        let format = if line.contains("\"seq") { RecordFormat::Full } else { RecordFormat::Projected };
        write_record(&mut out, &rec, format);
        assert_eq!(out, line);
    }

    #[test]
    fn records_roundtrip() {
        roundtrip(r#"{"type":"turn/start","seq":3,"time":17,"data":{"turn":1}}"#);
        roundtrip(r#"{"type":"tool/result","data":{"turn":1},"sourceEventSeqs":[65],"surfaceOp":"append"}"#);
        roundtrip(r#"{"type":"tool/result","seq":9,"time":1,"data":{},"surfaceOp":"append","sourceEventSeqs":[4]}"#);
        roundtrip(r#"{"type":"user/message","data":{},"surfaceOp":{"op":"replace","start":5,"end":5}}"#);
        roundtrip(r#"{"type":"reasoning-chunks","data":{"turn":1,"step":1,"index":0,"dt":[0,33],"texts":["The"," user","!"]}}"#);
        roundtrip(r#"{"type":"tool-call-chunks","seq0":4,"time0":100,"data":{"turn":1,"step":1,"index":1,"dt":[0,2],"id":"c","name":"bash","args":["","{","}"]}}"#);
    }

    #[test]
    fn bad_rows_are_refused() {
        for line in [
            r#"{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[0,0],"texts":["a","b"]}}"#,
            r#"{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[0],"texts":["a"]}}"#,
            r#"{"type":"text-chunks","extra":1,"data":{"turn":1,"step":1,"index":0,"dt":[0],"texts":["a","b"]}}"#,
            r#"{"type":"turn/start","seq":1,"time":1,"data":{},"bogus":true}"#,
            r#"{"type":"turn/start","seq":-1,"time":1,"data":{}}"#,
            r#"[1,2]"#,
        ] {
            assert!(decode_record(serde_json::from_str(line).unwrap(), 0).is_err(), "{line}");
        }
    }

    #[test]
    fn rows_expand_to_consecutive_chunks() {
        let rec = decode_record(
            serde_json::from_str(r#"{"type":"text-chunks","seq0":10,"time0":100,"data":{"turn":2,"step":1,"index":0,"dt":[5,-1],"texts":["a","b","c"]}}"#).unwrap(),
            0,
        )
        .unwrap();
        let Record::Row(row) = rec else { panic!() };
        let events = row.expand();
        let seqs: Vec<_> = events.iter().map(|e| (e.seq, e.time)).collect();
        assert_eq!(seqs, [(10, 100), (11, 105), (12, 104)]);
        let repacked = pack(&events.into_iter().map(Arc::new).collect::<Vec<_>>());
        assert_eq!(repacked, [Record::Row(row)]);
    }
}
