//! Storage records: one JSON line each. A record is an event verbatim or a packed row of
//! ≥ 3 consecutive stream deltas (`text-chunks`, `reasoning-chunks`, `tool-call-chunks`).
//! Packing is optional on write; reading always accepts both forms and validates rows
//! strictly.

use std::sync::Arc;

use dsh_kernel::json::{write_string, write_value};
use serde_json::{Map, Value};

use crate::delta::{ChunkDelta, DeltaRun, MAX_SAFE_INT};
use crate::event::{Event, EventType, SurfaceKeyOrder, SurfaceOp, types};
use crate::payload::{EventData, NegativeZero};

/// Runs shorter than this stay unpacked.
pub const MIN_RUN: usize = 3;

/// Whether records carry `seq`/`time` (`Full`, what persistence writes) or have them
/// projected away (`Projected`, the replay-fixture form: seqs are positions, times 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordFormat {
    Full,
    Projected,
}

/// Which delta stream a packed row (or a compact delta) belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    Text,
    Reasoning,
    ToolCall,
}

impl RowKind {
    pub(crate) fn record_type(self) -> &'static str {
        match self {
            RowKind::Text => "text-chunks",
            RowKind::Reasoning => "reasoning-chunks",
            RowKind::ToolCall => "tool-call-chunks",
        }
    }
}

/// A packed run of deltas. Its members' text is shared with the events it expands to.
#[derive(Clone, Debug, PartialEq)]
pub struct PackedRow {
    pub seq0: u64,
    pub time0: i64,
    /// Time gaps between consecutive members (one fewer than members).
    pub dt: Vec<i64>,
    run: Arc<DeltaRun>,
}

impl PackedRow {
    /// A row over `run`; `None` unless it has ≥ 2 members, `dt.len() + 1` of them, and
    /// every member time fits an `i64`.
    pub(crate) fn new(seq0: u64, time0: i64, dt: Vec<i64>, run: Arc<DeltaRun>) -> Option<Self> {
        if run.len() < 2 || dt.len() + 1 != run.len() {
            return None;
        }
        dt.iter().try_fold(time0, |t, d| t.checked_add(*d))?;
        seq0.checked_add(run.len() as u64)?;
        Some(Self {
            seq0,
            time0,
            dt,
            run,
        })
    }

    pub fn kind(&self) -> RowKind {
        self.run.kind
    }

    pub fn len(&self) -> usize {
        self.run.len()
    }

    pub fn is_empty(&self) -> bool {
        self.run.len() == 0
    }

    pub fn turn(&self) -> u64 {
        self.run.turn
    }

    pub fn step(&self) -> u64 {
        self.run.step
    }

    pub fn index(&self) -> u64 {
        self.run.index
    }

    pub fn call_id(&self) -> Option<&str> {
        self.run.call_id.as_deref()
    }

    pub fn call_name(&self) -> Option<&str> {
        self.run.call_name.as_deref()
    }

    /// Texts (text/reasoning rows) or argument fragments (tool-call rows).
    pub fn parts(&self) -> impl Iterator<Item = &str> {
        self.run.parts()
    }

    /// The events this row stands for.
    pub fn expand(&self) -> Vec<Event> {
        let mut out = Vec::with_capacity(self.len());
        self.expand_with(|e| out.push(e));
        out
    }

    /// Appends the events this row stands for to `out`.
    pub fn expand_into(&self, out: &mut Vec<Arc<Event>>) {
        out.reserve(self.len());
        self.expand_with(|e| out.push(Arc::new(e)));
    }

    fn expand_with(&self, mut push: impl FnMut(Event)) {
        let mut time = self.time0;
        for k in 0..self.len() {
            if k > 0 {
                // `new` checked that the sums fit.
                time = time.wrapping_add(self.dt.get(k - 1).copied().unwrap_or(0));
            }
            push(Event {
                event_type: EventType::known(types::ASSISTANT_CHUNK),
                seq: self.seq0 + k as u64,
                time,
                data: EventData::from_run(self.run.clone(), k),
                source_event_seqs: None,
                surface_op: None,
                ignorable: false,
                key_order: SurfaceKeyOrder::SourcesFirst,
            });
        }
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

/// The delta an event contributes to a run, if it may be packed.
fn delta_shape(e: &Event) -> Option<ChunkDelta<'_>> {
    if e.event_type != types::ASSISTANT_CHUNK
        || e.surface_op.is_some()
        || e.source_event_seqs.is_some()
        || e.ignorable
    {
        return None;
    }
    e.data.delta()
}

/// The run `events` exactly cover (members 0..n of one shared run, in order), if any: its
/// row can share the text instead of copying it.
fn whole_run(events: &[Arc<Event>]) -> Option<Arc<DeltaRun>> {
    let (run, _) = events.first()?.data.delta_member()?;
    let covers = run.len() == events.len()
        && events.iter().enumerate().all(|(k, e)| {
            e.data
                .delta_member()
                .is_some_and(|(r, member)| Arc::ptr_eq(r, run) && member == k)
        });
    covers.then(|| run.clone())
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
        let mut dt = Vec::new();
        while j < events.len() {
            let (prev, next) = (&events[j - 1], &events[j]);
            let gap = next.time.checked_sub(prev.time);
            match (delta_shape(next), gap) {
                (Some(s), Some(gap))
                    if first.same_stream(&s) && prev.seq.checked_add(1) == Some(next.seq) =>
                {
                    dt.push(gap);
                    j += 1;
                }
                _ => break,
            }
        }
        let members = &events[i..j];
        let row = (members.len() >= MIN_RUN).then(|| {
            let run = whole_run(members).unwrap_or_else(|| {
                let mut run = DeltaRun::new(&first, 0);
                for e in members {
                    if let Some(d) = e.data.delta() {
                        run.push_part(d.part);
                    }
                }
                Arc::new(run)
            });
            PackedRow::new(events[i].seq, events[i].time, dt, run)
        });
        match row.flatten() {
            Some(row) => out.push(Record::Row(Box::new(row))),
            None => out.extend(members.iter().map(|e| Record::Event(e.clone()))),
        }
        i = j;
    }
    out
}

// ------------------------------------------------------------------ encoding

/// Appends one event record (no newline).
pub fn write_event(out: &mut String, e: &Event, format: RecordFormat) {
    use std::fmt::Write as _;
    out.push_str("{\"type\":");
    write_string(out, &e.event_type);
    if format == RecordFormat::Full {
        let _ = write!(out, ",\"seq\":{},\"time\":{}", e.seq, e.time);
    }
    out.push_str(",\"data\":");
    e.data.write_json(out);
    let write_sources = |out: &mut String| {
        if let Some(s) = &e.source_event_seqs {
            out.push_str(",\"sourceEventSeqs\":[");
            for (i, n) in s.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{n}");
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
    use std::fmt::Write as _;
    match record {
        Record::Event(e) => write_event(out, e, format),
        Record::Row(r) => {
            out.push_str("{\"type\":\"");
            out.push_str(r.kind().record_type());
            out.push('"');
            if format == RecordFormat::Full {
                let _ = write!(out, ",\"seq0\":{},\"time0\":{}", r.seq0, r.time0);
            }
            let _ = write!(
                out,
                ",\"data\":{{\"turn\":{},\"step\":{},\"index\":{},\"dt\":[",
                r.turn(),
                r.step(),
                r.index()
            );
            for (i, d) in r.dt.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{d}");
            }
            out.push(']');
            match r.kind() {
                RowKind::Text | RowKind::Reasoning => out.push_str(",\"texts\":["),
                RowKind::ToolCall => {
                    out.push_str(",\"id\":");
                    write_string(out, r.call_id().unwrap_or(""));
                    if let Some(n) = r.call_name() {
                        out.push_str(",\"name\":");
                        write_string(out, n);
                    }
                    out.push_str(",\"args\":[");
                }
            }
            for (i, p) in r.parts().enumerate() {
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

const ENVELOPE_KEYS: [&str; 7] = [
    "type",
    "seq",
    "time",
    "data",
    "surfaceOp",
    "sourceEventSeqs",
    "ignorable",
];

/// Decodes one record line (JSON text). Equivalent to parsing the line and calling
/// [`decode_record_with_format`], but packed rows are read without building their JSON and
/// stored events skip the lossless re-check when their text cannot hold a `-0`.
pub fn decode_line(line: &str, next_seq: u64) -> Result<(Record, RecordFormat), RecordError> {
    if let Some(decoded) = crate::lineparse::decode_row_line(line, next_seq) {
        return Ok(decoded);
    }
    let negative_zero = NegativeZero::in_text(line);
    if let Some((event, format)) =
        crate::lineparse::decode_event_line(line, next_seq, negative_zero)
    {
        return Ok((Record::Event(Arc::new(event)), format));
    }
    let value: Value =
        serde_json::from_str(line).map_err(|e| err(format!("record is not valid JSON: {e}")))?;
    decode_value(value, next_seq, negative_zero)
}

/// Decodes one parsed record. `next_seq` is the seq the record must start at; in the
/// projected format (no `seq`/`seq0`) it is assigned, with times 0.
pub fn decode_record(value: Value, next_seq: u64) -> Result<Record, RecordError> {
    decode_record_with_format(value, next_seq).map(|(r, _)| r)
}

/// Like [`decode_record`], also telling whether the record carried `seq`/`seq0`.
pub fn decode_record_with_format(
    value: Value,
    next_seq: u64,
) -> Result<(Record, RecordFormat), RecordError> {
    decode_value(value, next_seq, NegativeZero::Possible)
}

fn decode_value(
    value: Value,
    next_seq: u64,
    negative_zero: NegativeZero,
) -> Result<(Record, RecordFormat), RecordError> {
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
        Some(_) => decode_event(map, next_seq, negative_zero).map(|e| Record::Event(Arc::new(e))),
        None => Err(err("record has no string `type`")),
    }?;
    Ok((record, format))
}

fn decode_event(
    mut map: Map<String, Value>,
    next_seq: u64,
    negative_zero: NegativeZero,
) -> Result<Event, RecordError> {
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
        Some(Value::String(t)) if !t.is_empty() => EventType::from(t),
        _ => return Err(err("event has no string `type`")),
    };
    let seq = match map.remove("seq") {
        None => next_seq,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| err("event `seq` is not a non-negative integer"))?,
    };
    let time = match map.remove("time") {
        None => 0,
        Some(v) => v
            .as_i64()
            .ok_or_else(|| err("event `time` is not an integer"))?,
    };
    let data = map
        .remove("data")
        .ok_or_else(|| err(format!("event \"{event_type}\" has no `data`")))?;
    let surface_op = match map.remove("surfaceOp") {
        None => None,
        Some(v) => Some(
            SurfaceOp::from_value(&v).map_err(|m| err(format!("event \"{event_type}\" {m}")))?,
        ),
    };
    let source_event_seqs = match map.remove("sourceEventSeqs") {
        None => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|v| {
                    v.as_u64()
                        .ok_or_else(|| err("sourceEventSeqs must hold non-negative integers"))
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => return Err(err("sourceEventSeqs must be an array")),
    };
    let ignorable = match map.remove("ignorable") {
        None => false,
        Some(Value::Bool(true)) => true,
        Some(_) => return Err(err("`ignorable` may only be true")),
    };
    let data = EventData::from_json(data, negative_zero);
    Ok(Event {
        event_type,
        seq,
        time,
        data,
        source_event_seqs,
        surface_op,
        ignorable,
        key_order,
    })
}

fn decode_row(
    map: Map<String, Value>,
    kind: RowKind,
    next_seq: u64,
) -> Result<Record, RecordError> {
    let name = kind.record_type();
    let bad = |what: &str| err(format!("invalid {name} row: {what}"));
    let projected = !map.contains_key("seq0");
    let expected: &[&str] = if projected {
        &["type", "data"]
    } else {
        &["type", "seq0", "time0", "data"]
    };
    if !keys_are(&map, expected) {
        return Err(bad("unexpected envelope keys"));
    }
    let (seq0, time0) = if projected {
        (next_seq, 0)
    } else {
        (
            map.get("seq0")
                .and_then(Value::as_u64)
                .ok_or_else(|| bad("seq0"))?,
            map.get("time0")
                .and_then(Value::as_i64)
                .ok_or_else(|| bad("time0"))?,
        )
    };
    let Some(Value::Object(data)) = map.get("data") else {
        return Err(bad("data"));
    };
    let (parts_key, ok_keys) = match kind {
        RowKind::Text | RowKind::Reasoning => (
            "texts",
            keys_are(data, &["turn", "step", "index", "dt", "texts"]),
        ),
        RowKind::ToolCall => (
            "args",
            keys_are(data, &["turn", "step", "index", "dt", "id", "args"])
                || keys_are(data, &["turn", "step", "index", "dt", "id", "name", "args"]),
        ),
    };
    if !ok_keys {
        return Err(bad("unexpected data keys"));
    }
    let field = |k: &str| {
        data.get(k)
            .and_then(Value::as_u64)
            .filter(|n| *n <= MAX_SAFE_INT)
            .ok_or_else(|| bad(k))
    };
    let (turn, step, index) = (field("turn")?, field("step")?, field("index")?);
    let (call_id, call_name) = match kind {
        RowKind::ToolCall => (
            Some(
                data.get("id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("id"))?,
            ),
            match data.get("name") {
                None => None,
                Some(v) => Some(v.as_str().ok_or_else(|| bad("name"))?),
            },
        ),
        _ => (None, None),
    };
    let shape = ChunkDelta {
        kind,
        turn,
        step,
        index,
        part: "",
        call_id,
        call_name,
    };
    let mut run = DeltaRun::new(&shape, 0);
    match data.get(parts_key) {
        Some(Value::Array(items)) => {
            for v in items {
                run.push_part(v.as_str().ok_or_else(|| bad(parts_key))?);
            }
        }
        _ => return Err(bad(parts_key)),
    }
    let dt: Vec<i64> = match data.get("dt") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_i64().ok_or_else(|| bad("dt")))
            .collect::<Result<_, _>>()?,
        _ => return Err(bad("dt")),
    };
    if run.len() < 2 || dt.len() + 1 != run.len() {
        return Err(bad("dt length must be one less than the number of members"));
    }
    let row = PackedRow::new(seq0, time0, dt, Arc::new(run))
        .ok_or_else(|| bad("member times overflow"))?;
    Ok(Record::Row(Box::new(row)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn roundtrip(line: &str) {
        let rec = decode_record(serde_json::from_str(line).unwrap(), 7).unwrap();
        let mut out = String::new();
        let format = if line.contains("\"seq") {
            RecordFormat::Full
        } else {
            RecordFormat::Projected
        };
        write_record(&mut out, &rec, format);
        assert_eq!(out, line);
    }

    #[test]
    fn records_roundtrip() {
        roundtrip(r#"{"type":"turn/start","seq":3,"time":17,"data":{"turn":1}}"#);
        roundtrip(
            r#"{"type":"tool/result","data":{"turn":1},"sourceEventSeqs":[65],"surfaceOp":"append"}"#,
        );
        roundtrip(
            r#"{"type":"tool/result","seq":9,"time":1,"data":{},"surfaceOp":"append","sourceEventSeqs":[4]}"#,
        );
        roundtrip(
            r#"{"type":"user/message","data":{},"surfaceOp":{"op":"replace","start":5,"end":5}}"#,
        );
        roundtrip(
            r#"{"type":"reasoning-chunks","data":{"turn":1,"step":1,"index":0,"dt":[0,33],"texts":["The"," user","!"]}}"#,
        );
        roundtrip(
            r#"{"type":"tool-call-chunks","seq0":4,"time0":100,"data":{"turn":1,"step":1,"index":1,"dt":[0,2],"id":"c","name":"bash","args":["","{","}"]}}"#,
        );
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
            assert!(
                decode_record(serde_json::from_str(line).unwrap(), 0).is_err(),
                "{line}"
            );
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
