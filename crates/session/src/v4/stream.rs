//! `data.stream` of v4 `assistant/message` and `assistant/attempt` events: a model
//! response's stream chunks, packed. Records are `chunk {time, chunk}` or runs of deltas
//! of one block (`text-chunks`, `reasoning-chunks`, `tool-call-chunks` with `time0`,
//! `index`, `dt`, and `texts` or `id`/`name`/`args`). A delta extends the previous record
//! only when it continues the same stream (same kind and block; for tool calls also the
//! same `id` and the same `name` presence), so a single delta is a run of one.

use std::sync::Arc;

use dsh_kernel::json::{write_string, write_value};
use serde_json::{Map, Value};

use crate::delta::{ChunkDelta, DeltaRun, MAX_SAFE_INT};
use crate::event::{Event, EventType, SurfaceKeyOrder, types};
use crate::payload::EventData;
use crate::records::RowKind;

/// One packed run of a v4 stream.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Run {
    pub kind: RowKind,
    pub time0: i64,
    pub index: u64,
    pub dt: Vec<i64>,
    pub id: Option<String>,
    pub name: Option<String>,
    pub parts: Vec<String>,
    /// Time of the last member.
    last: i64,
}

/// One record of a v4 stream.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Record {
    Chunk { time: i64, chunk: Value },
    Run(Run),
}

/// Packs stream chunks (in order) into records.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Accumulator {
    pub records: Vec<Record>,
}

impl Accumulator {
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Adds one `assistant/chunk` event's chunk at `time`.
    pub fn push_event(&mut self, event: &Event) {
        match event.data.delta() {
            Some(d) if packable(&d) => self.push_delta(&d, event.time),
            _ => {
                let chunk = event
                    .data
                    .as_value()
                    .get("chunk")
                    .cloned()
                    .unwrap_or(Value::Null);
                self.records.push(Record::Chunk {
                    time: event.time,
                    chunk,
                });
            }
        }
    }

    fn push_delta(&mut self, d: &ChunkDelta<'_>, time: i64) {
        if let Some(Record::Run(run)) = self.records.last_mut()
            && run.kind == d.kind
            && run.index == d.index
            && (d.kind != RowKind::ToolCall
                || (run.id.as_deref() == d.call_id && run.name.as_deref() == d.call_name))
        {
            run.dt.push(time - run.last);
            run.last = time;
            run.parts.push(d.part.to_string());
            return;
        }
        self.records.push(Record::Run(Run {
            kind: d.kind,
            time0: time,
            index: d.index,
            dt: Vec::new(),
            id: d.call_id.map(str::to_owned),
            name: d.call_name.map(str::to_owned),
            parts: vec![d.part.to_string()],
            last: time,
        }));
    }

    /// The time of the last chunk.
    pub fn last_time(&self) -> Option<i64> {
        self.records.last().map(|r| match r {
            Record::Chunk { time, .. } => *time,
            Record::Run(run) => run.last,
        })
    }

    /// Appends the stream as a JSON array.
    pub fn write_json(&self, out: &mut String) {
        use std::fmt::Write as _;
        out.push('[');
        for (i, r) in self.records.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            match r {
                Record::Chunk { time, chunk } => {
                    let _ = write!(out, "{{\"type\":\"chunk\",\"time\":{time},\"chunk\":");
                    write_value(out, chunk);
                    out.push('}');
                }
                Record::Run(run) => {
                    let _ = write!(
                        out,
                        "{{\"type\":\"{}\",\"time0\":{},\"index\":{},\"dt\":[",
                        run.kind.record_type(),
                        run.time0,
                        run.index
                    );
                    for (k, d) in run.dt.iter().enumerate() {
                        if k > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{d}");
                    }
                    out.push(']');
                    if run.kind == RowKind::ToolCall {
                        out.push_str(",\"id\":");
                        write_string(out, run.id.as_deref().unwrap_or_default());
                        if let Some(name) = &run.name {
                            out.push_str(",\"name\":");
                            write_string(out, name);
                        }
                        out.push_str(",\"args\":[");
                    } else {
                        out.push_str(",\"texts\":[");
                    }
                    for (k, p) in run.parts.iter().enumerate() {
                        if k > 0 {
                            out.push(',');
                        }
                        write_string(out, p);
                    }
                    out.push_str("]}");
                }
            }
        }
        out.push(']');
    }
}

/// Tool-call deltas with an empty id or name stay plain chunks (upstream's rule).
fn packable(d: &ChunkDelta<'_>) -> bool {
    d.kind != RowKind::ToolCall
        || (d.call_id.is_some_and(|i| !i.is_empty()) && d.call_name.is_none_or(|n| !n.is_empty()))
}

fn int(v: Option<&Value>) -> Option<i64> {
    let v = v?;
    v.as_i64()
        .filter(|n| n.unsigned_abs() <= MAX_SAFE_INT)
        .or_else(|| v.as_u64().filter(|n| *n <= MAX_SAFE_INT).map(|n| n as i64))
}

fn keys_are(map: &Map<String, Value>, keys: &[&str]) -> bool {
    map.len() == keys.len() && keys.iter().all(|k| map.contains_key(*k))
}

/// Expands a stored `stream` into `assistant/chunk` events of `turn`/`step`, with seqs from
/// `next_seq` on. `Err` names what is wrong with the entry.
pub(crate) fn expand(
    stream: &Value,
    turn: u64,
    step: u64,
    next_seq: u64,
    out: &mut Vec<Arc<Event>>,
) -> Result<(), String> {
    let Value::Array(entries) = stream else {
        return Err("stream is not an array".into());
    };
    let mut seq = next_seq;
    let chunk_event = |seq: u64, time: i64, data: EventData| Event {
        event_type: EventType::known(types::ASSISTANT_CHUNK),
        seq,
        time,
        data,
        source_event_seqs: None,
        surface_op: None,
        ignorable: false,
        key_order: SurfaceKeyOrder::SourcesFirst,
    };
    for (i, entry) in entries.iter().enumerate() {
        let bad = |why: &str| format!("stream entry {i} {why}");
        let Value::Object(m) = entry else {
            return Err(bad("is not an object"));
        };
        let kind = match m.get("type").and_then(Value::as_str) {
            Some("chunk") => None,
            Some("text-chunks") => Some(RowKind::Text),
            Some("reasoning-chunks") => Some(RowKind::Reasoning),
            Some("tool-call-chunks") => Some(RowKind::ToolCall),
            Some(other) => return Err(bad(&format!("has the unknown type \"{other}\""))),
            None => return Err(bad("has no type")),
        };
        let Some(kind) = kind else {
            if !keys_are(m, &["type", "time", "chunk"]) {
                return Err(bad("is a chunk record with unexpected fields"));
            }
            let time = int(m.get("time")).ok_or_else(|| bad("has an invalid time"))?;
            let mut data = Map::new();
            data.insert("turn".into(), Value::from(turn));
            data.insert("step".into(), Value::from(step));
            data.insert(
                "chunk".into(),
                m.get("chunk").cloned().unwrap_or(Value::Null),
            );
            out.push(Arc::new(chunk_event(
                seq,
                time,
                EventData::new(Value::Object(data)),
            )));
            seq += 1;
            continue;
        };
        let expected: &[&str] = match (kind, m.contains_key("name")) {
            (RowKind::ToolCall, true) => &["type", "time0", "index", "dt", "id", "name", "args"],
            (RowKind::ToolCall, false) => &["type", "time0", "index", "dt", "id", "args"],
            _ => &["type", "time0", "index", "dt", "texts"],
        };
        if !keys_are(m, expected) {
            return Err(bad("has unexpected fields"));
        }
        let time0 = int(m.get("time0")).ok_or_else(|| bad("has an invalid time0"))?;
        let index = m
            .get("index")
            .and_then(Value::as_u64)
            .filter(|n| *n <= MAX_SAFE_INT)
            .ok_or_else(|| bad("has an invalid index"))?;
        let parts_key = if kind == RowKind::ToolCall {
            "args"
        } else {
            "texts"
        };
        let parts: Vec<&str> = m
            .get(parts_key)
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| bad(&format!("needs a non-empty {parts_key} array")))?
            .iter()
            .map(Value::as_str)
            .collect::<Option<_>>()
            .ok_or_else(|| bad(&format!("has a non-string in {parts_key}")))?;
        let dt: Vec<i64> = m
            .get("dt")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("has no dt array"))?
            .iter()
            .map(|v| int(Some(v)))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("has an invalid dt"))?;
        if dt.len() + 1 != parts.len() {
            return Err(bad("has a dt array that does not match its members"));
        }
        let text = |k: &str| m.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
        let (id, name) = match kind {
            RowKind::ToolCall => (
                Some(text("id").ok_or_else(|| bad("has no call id"))?),
                match m.get("name") {
                    None => None,
                    Some(_) => Some(text("name").ok_or_else(|| bad("has an empty name"))?),
                },
            ),
            _ => (None, None),
        };
        let first = ChunkDelta {
            kind,
            turn,
            step,
            index,
            part: parts[0],
            call_id: id,
            call_name: name,
        };
        let mut run = DeltaRun::new(&first, parts.iter().map(|p| p.len()).sum());
        for p in &parts {
            run.push_part(p);
        }
        let run = Arc::new(run);
        let mut time = time0;
        for k in 0..parts.len() {
            if k > 0 {
                time = time
                    .checked_add(dt[k - 1])
                    .ok_or_else(|| bad("has times out of range"))?;
            }
            out.push(Arc::new(chunk_event(
                seq,
                time,
                EventData::from_run(run.clone(), k),
            )));
            seq += 1;
        }
    }
    Ok(())
}
