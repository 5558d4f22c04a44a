//! v4 rows → in-memory events. The in-memory vocabulary stays the one the rest of the
//! harness speaks: stream chunks become `assistant/chunk` events again (cited by their
//! message), the system prompt returns to the next `request/header`, tool results are
//! wrapped user messages, sources are `{kind:"plugin", plugin}` again, and every reference
//! is renumbered to in-memory seqs. Strict where damage would lose data, lenient only at
//! a torn tail (as the v0 reader).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::encode::V4Encoder;
use super::messages::message_from_v4;
use super::stream;
use crate::event::{Event, EventType, SurfaceKeyOrder, SurfaceOp, types};
use crate::header::SessionHeader;
use crate::payload::EventData;
use crate::records::RecordFormat;
use crate::storage::{MAX_LINE_BYTES, ParsedLog, StorageError};

/// Envelope keys a v4 row may carry.
const ENVELOPE: [&str; 7] = [
    "type",
    "seq",
    "time",
    "data",
    "ignorable",
    "sourceEventSeqs",
    "surfaceOp",
];

/// What decoding state an appender needs to continue the log.
#[derive(Clone, Debug, PartialEq)]
pub struct V4Resume {
    pub encoder: V4Encoder,
}

struct Decoder {
    session_id: String,
    events: Vec<Arc<Event>>,
    /// Disk seq → in-memory seq of the event it became (`None`: no in-memory event).
    back: Vec<Option<u64>>,
    /// In-memory seq → disk seq.
    forward: Vec<Option<u64>>,
    prompt: Option<String>,
    head: Option<u64>,
    last_inherited_seed: Option<u64>,
}

fn bad(line: usize, why: impl std::fmt::Display) -> String {
    format!("line {line}: {why}")
}

impl Decoder {
    fn m_of(&self, d: u64, line: usize) -> Result<u64, String> {
        self.back.get(d as usize).copied().flatten().ok_or_else(|| {
            bad(
                line,
                format!("refers to row {d}, which has no event it can name"),
            )
        })
    }

    fn push(&mut self, mut event: Event, disk: Option<u64>) {
        event.seq = self.events.len() as u64;
        self.forward.push(disk);
        self.events.push(Arc::new(event));
    }

    fn sources(&self, v: Option<&Value>, line: usize) -> Result<Option<Vec<u64>>, String> {
        let Some(v) = v else { return Ok(None) };
        let Value::Array(items) = v else {
            return Err(bad(line, "sourceEventSeqs is not an array"));
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Value::Array(range) => {
                    let (Some(a), Some(b)) = (
                        range.first().and_then(Value::as_u64),
                        range.get(1).and_then(Value::as_u64),
                    ) else {
                        return Err(bad(line, "sourceEventSeqs holds an invalid range"));
                    };
                    for d in a..=b {
                        out.push(self.m_of(d, line)?);
                    }
                }
                other => {
                    let d = other
                        .as_u64()
                        .ok_or_else(|| bad(line, "sourceEventSeqs holds a non-number"))?;
                    out.push(self.m_of(d, line)?);
                }
            }
        }
        Ok(Some(out))
    }

    fn surface_op(&self, v: Option<&Value>, line: usize) -> Result<Option<SurfaceOp>, String> {
        match v {
            None => Ok(None),
            Some(Value::String(s)) if s == "append" => Ok(Some(SurfaceOp::Append)),
            Some(Value::Object(m)) => {
                let (Some(start), Some(end)) = (
                    m.get("startSeq").and_then(Value::as_u64),
                    m.get("endSeq").and_then(Value::as_u64),
                ) else {
                    return Err(bad(line, "surfaceOp is not a valid replace"));
                };
                Ok(Some(SurfaceOp::Replace {
                    start: self.m_of(start, line)?,
                    end: self.m_of(end, line)?,
                }))
            }
            Some(_) => Err(bad(line, "surfaceOp is invalid")),
        }
    }

    fn map_list(&self, v: Option<&mut Value>, line: usize) -> Result<(), String> {
        if let Some(Value::Array(items)) = v {
            for item in items {
                if let Some(d) = item.as_u64() {
                    *item = Value::from(self.m_of(d, line)?);
                }
            }
        }
        Ok(())
    }

    fn map_one(&self, v: Option<&mut Value>, line: usize) -> Result<(), String> {
        if let Some(item) = v
            && let Some(d) = item.as_u64()
        {
            *item = Value::from(self.m_of(d, line)?);
        }
        Ok(())
    }

    /// Decodes one row (disk seq `d`) into zero or more in-memory events.
    fn row(&mut self, value: Value, d: u64, line: usize) -> Result<(), String> {
        let Value::Object(mut row) = value else {
            return Err(bad(line, "row is not a JSON object"));
        };
        if let Some(k) = row.keys().find(|k| !ENVELOPE.contains(&k.as_str())) {
            return Err(bad(line, format!("row has the unexpected field \"{k}\"")));
        }
        // Before any key is removed (removal may reorder the map).
        let key_order = match row
            .keys()
            .position(|k| k == "surfaceOp")
            .zip(row.keys().position(|k| k == "sourceEventSeqs"))
        {
            Some((op_at, src_at)) if op_at < src_at => SurfaceKeyOrder::OpFirst,
            _ => SurfaceKeyOrder::SourcesFirst,
        };
        let seq = row.get("seq").and_then(Value::as_u64);
        if seq != Some(d) {
            return Err(bad(
                line,
                format!(
                    "seq gap (expected {d}, got {})",
                    row.get("seq").map_or("none".into(), |v| v.to_string())
                ),
            ));
        }
        let Some(Value::String(t)) = row.remove("type") else {
            return Err(bad(line, "row has no type"));
        };
        let time = row
            .get("time")
            .and_then(|v| v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)))
            .ok_or_else(|| bad(line, "row has no valid time"))?;
        let ignorable = match row.get("ignorable") {
            None => false,
            Some(Value::Bool(true)) => true,
            Some(_) => return Err(bad(line, "ignorable must be true when present")),
        };
        let mut data = row.remove("data").unwrap_or(Value::Null);
        if t == "system/message" {
            let text: String = data
                .pointer("/message/content")
                .and_then(Value::as_array)
                .map(|b| {
                    b.iter()
                        .filter_map(|x| x.get("text").and_then(Value::as_str))
                        .collect()
                })
                .unwrap_or_default();
            self.prompt = Some(text);
            self.head = Some(d);
            // Folded into the next `request/header` (the in-memory vocabulary carries the
            // prompt there); the encoder writes system messages again from it.
            self.back.push(None);
            return Ok(());
        }
        let sources = self.sources(row.get("sourceEventSeqs"), line)?;
        let op = self.surface_op(row.get("surfaceOp"), line)?;
        let event = |event_type: &str, data: Value, sources, op| Event {
            event_type: EventType::new(event_type),
            seq: 0,
            time,
            data: EventData::new(data),
            source_event_seqs: sources,
            surface_op: op,
            ignorable,
            key_order,
        };
        let mut in_memory_type = t.clone();
        match t.as_str() {
            types::ASSISTANT_MESSAGE | "assistant/attempt" => {
                let Value::Object(m) = &mut data else {
                    return Err(bad(line, format!("{t} data is not an object")));
                };
                let stream_value = m
                    .remove("stream")
                    .ok_or_else(|| bad(line, format!("{t} has no stream")))?;
                let (turn, step) = (
                    m.get("turn").and_then(Value::as_u64).unwrap_or(0),
                    m.get("step").and_then(Value::as_u64).unwrap_or(0),
                );
                let first = self.events.len() as u64;
                let mut chunks = Vec::new();
                stream::expand(&stream_value, turn, step, first, &mut chunks)
                    .map_err(|e| bad(line, e))?;
                let cited: Vec<u64> = (first..first + chunks.len() as u64).collect();
                for c in chunks {
                    let c = Arc::try_unwrap(c).unwrap_or_else(|a| (*a).clone());
                    self.push(c, None);
                }
                if t == "assistant/attempt" {
                    self.back.push(None);
                    return Ok(());
                }
                if sources.is_some() {
                    return Err(bad(
                        line,
                        "assistant/message must not carry sourceEventSeqs",
                    ));
                }
                if let Some(message) = m.get_mut("message") {
                    message_from_v4(message);
                }
                let sources = (!cited.is_empty()).then_some(cited);
                let m = self.events.len() as u64;
                self.push(event(&t, data, sources, op), Some(d));
                self.back.push(Some(m));
                return Ok(());
            }
            "developer/message" => {
                self.map_one(data.get_mut("headerSeq"), line)?;
                let m = self.events.len() as u64;
                self.push(event(&t, data, None, None), Some(d));
                self.back.push(Some(m));
                return Ok(());
            }
            types::REQUEST_HEADER => {
                if data.pointer("/header/system").is_some() {
                    return Err(bad(
                        line,
                        "a v4 request/header must not carry the system prompt",
                    ));
                }
                if let (Some(prompt), Some(Value::Object(h))) = (
                    self.prompt.clone().filter(|p| !p.is_empty()),
                    data.get_mut("header"),
                ) {
                    let mut out = Map::new();
                    for (k, v) in std::mem::take(h) {
                        if k == "tools" {
                            out.insert("system".into(), Value::from(prompt.clone()));
                        }
                        out.insert(k, v);
                    }
                    if !out.contains_key("system") {
                        out.insert("system".into(), Value::from(prompt));
                    }
                    *h = out;
                }
            }
            types::USER_MESSAGE => message_from_v4(&mut data),
            types::TOOL_RESULT => {
                if let Some(m) = data.get_mut("message") {
                    message_from_v4(m);
                }
            }
            types::INBOX_SPLICED => {
                if let Some(Value::Array(items)) = data.get_mut("inserted") {
                    items.iter_mut().for_each(message_from_v4);
                }
            }
            types::SESSION_TITLE => self.map_list(data.get_mut("messageSeqs"), line)?,
            "session/title-llm-request" => {
                self.map_list(data.get_mut("messageSeqs"), line)?;
                if let Some(Value::Array(items)) = data.get_mut("messages") {
                    items.iter_mut().for_each(message_from_v4);
                }
            }
            "command/done" => self.map_one(data.get_mut("sourceEventSeq"), line)?,
            "compaction/summary" | "compaction/prune" => {
                if let Some(range) = data.get_mut("shadowedRange") {
                    self.map_one(range.get_mut("start"), line)?;
                    self.map_one(range.get_mut("end"), line)?;
                }
                self.map_list(data.get_mut("shadowedSeqs"), line)?;
            }
            "session-log-deepseek/delivery-accepted" => {
                self.map_one(data.get_mut("throughSeq"), line)?;
            }
            types::END_SEED if data.get("inherited") == Some(&Value::Bool(true)) => {
                self.last_inherited_seed = Some(self.events.len() as u64);
                data = Value::Object(Map::new());
            }
            "tool/ptc-dispatch-start" => in_memory_type = "tool/code-dispatch-start".into(),
            "tool/ptc-dispatch" => in_memory_type = "tool/code-dispatch".into(),
            _ => {}
        }
        let m = self.events.len() as u64;
        self.push(event(&in_memory_type, data, sources, op), Some(d));
        self.back.push(Some(m));
        Ok(())
    }
}

fn contains_turn_end(value: &Value) -> bool {
    value.get("type").and_then(Value::as_str) == Some(types::TURN_END)
}

/// Parses a whole v4 log text (header + rows) into in-memory events.
pub fn parse_log_v4(text: &str) -> Result<(ParsedLog, V4Resume), StorageError> {
    let corrupt = |m: String| StorageError::Corrupt(m);
    let Some(header_end) = text.find('\n') else {
        return Err(corrupt(
            "the file ends inside its header line; it holds no complete session header".into(),
        ));
    };
    let header_value: Value = serde_json::from_str(&text[..header_end])
        .map_err(|_| corrupt("header line is not valid JSON".into()))?;
    let (mut header, seeded) = SessionHeader::from_v4_value(&header_value)
        .map_err(|e| StorageError::Corrupt(e.to_string()))?;
    let mut dec = Decoder {
        session_id: header.id.clone(),
        events: Vec::new(),
        back: Vec::new(),
        forward: Vec::new(),
        prompt: None,
        head: None,
        last_inherited_seed: None,
    };
    let mut pos = header_end + 1;
    let mut committed_bytes = pos;
    let mut issue: Option<String> = None;
    let mut line_no = 1usize;
    while pos < text.len() {
        let Some(rel) = text[pos..].find('\n') else {
            break; // a torn final fragment
        };
        let line = &text[pos..pos + rel];
        pos += rel + 1;
        line_no += 1;
        let parsed: Result<Value, String> = if line.len() > MAX_LINE_BYTES {
            Err(format!(
                "line {line_no}: longer than {MAX_LINE_BYTES} bytes"
            ))
        } else {
            serde_json::from_str(line).map_err(|e| format!("line {line_no}: not valid JSON: {e}"))
        };
        if let Some(existing) = &issue {
            if parsed.as_ref().is_ok_and(contains_turn_end) {
                return Err(corrupt(existing.clone()));
            }
            continue;
        }
        let value = match parsed {
            Ok(v) => v,
            Err(e) => {
                issue = Some(e);
                continue;
            }
        };
        let commits_turn_end = contains_turn_end(&value);
        let d = dec.back.len() as u64;
        let mark = (
            dec.events.len(),
            dec.forward.len(),
            dec.back.len(),
            dec.prompt.clone(),
            dec.head,
            dec.last_inherited_seed,
        );
        if let Err(e) = dec.row(value, d, line_no) {
            if commits_turn_end {
                return Err(corrupt(e));
            }
            dec.events.truncate(mark.0);
            dec.forward.truncate(mark.1);
            dec.back.truncate(mark.2);
            (dec.prompt, dec.head, dec.last_inherited_seed) = (mark.3, mark.4, mark.5);
            issue = Some(e);
            continue;
        }
        committed_bytes = pos;
    }
    if let Some(e) = dec
        .events
        .iter()
        .find(|e| !e.ignorable && !e.event_type.is_known())
    {
        return Err(StorageError::Unsupported(format!(
            "session \"{}\" has an event of type \"{}\" (seq {}) that this harness does not know and that is not marked ignorable, so the log is not read; a newer harness probably wrote it, so open it with an up-to-date dsh",
            header.id, e.event_type, e.seq
        )));
    }
    if seeded {
        let Some(cut) = dec.last_inherited_seed else {
            return Err(corrupt(
                "the header says the session is seeded, but the log has no inherited end-seed marker".into(),
            ));
        };
        header.seed_length = Some(cut);
    }
    let encoder = V4Encoder::resume(
        &dec.session_id,
        header.seed_length,
        dec.forward,
        dec.back.len() as u64,
        dec.prompt,
        dec.head,
    );
    Ok((
        ParsedLog {
            header,
            records: Vec::new(),
            events: dec.events,
            committed_bytes,
            tail_issue: issue,
            format: RecordFormat::Full,
        },
        V4Resume { encoder },
    ))
}
