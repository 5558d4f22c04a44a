//! In-memory events → v4 rows. Stateful: stream chunks wait in the encoder until the
//! message (or the end of the attempt) they belong to, the system prompt is written as
//! `system/message` rows, and every reference is renumbered from in-memory seqs to the
//! dense on-disk seqs.

use std::sync::Arc;

use dsh_kernel::json::{write_string, write_value};
use serde_json::{Map, Value, json};

use super::messages::message_to_v4;
use super::stream::Accumulator;
use crate::event::{Event, SurfaceKeyOrder, SurfaceOp, types};

/// Why events could not be encoded (a bug or an inconsistent log, never input damage).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode event {seq} as format v4: {reason}")]
pub struct EncodeError {
    pub seq: u64,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq)]
struct Pending {
    turn: u64,
    step: u64,
    acc: Accumulator,
    /// A `finish` chunk was seen: the next chunk starts a new attempt.
    terminal: bool,
}

/// Where the encoder is: what is on disk, and what waits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct V4Encoder {
    session_id: String,
    /// In-memory seq → disk seq (`None`: a stream chunk folded into a message or attempt).
    map: Vec<Option<u64>>,
    next_disk: u64,
    pending: Option<Pending>,
    /// The system prompt last written, and the disk seq of the system head.
    prompt: Option<String>,
    head: Option<u64>,
    /// The in-memory seq of a seeded session's inherited end-seed marker.
    seed_length: Option<u64>,
    /// The open turn/step (system messages carry it).
    open_step: Option<(u64, u64)>,
}

/// A point to roll back to after a failed write.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    map_len: usize,
    next_disk: u64,
    pending: Option<Pending>,
    prompt: Option<String>,
    head: Option<u64>,
    open_step: Option<(u64, u64)>,
}

struct Row<'a> {
    event_type: &'a str,
    time: i64,
    sources: Option<Vec<u64>>,
    op: Option<DiskOp>,
    ignorable: bool,
    key_order: SurfaceKeyOrder,
}

#[derive(Clone, Copy)]
enum DiskOp {
    Append,
    Replace { start: u64, end: u64 },
}

impl V4Encoder {
    /// An encoder for a new log of session `session_id`.
    pub fn new(session_id: &str, seed_length: Option<u64>) -> Self {
        Self {
            session_id: session_id.to_string(),
            seed_length,
            ..Self::default()
        }
    }

    /// An encoder continuing a decoded v4 log.
    pub(crate) fn resume(
        session_id: &str,
        seed_length: Option<u64>,
        map: Vec<Option<u64>>,
        next_disk: u64,
        prompt: Option<String>,
        head: Option<u64>,
    ) -> Self {
        Self {
            session_id: session_id.to_string(),
            map,
            next_disk,
            pending: None,
            prompt,
            head,
            seed_length,
            open_step: None,
        }
    }

    /// How many in-memory events the encoder has taken.
    pub fn events_seen(&self) -> u64 {
        self.map.len() as u64
    }

    /// The row (disk seq) in-memory event `memory` became, if it became one of its own.
    pub fn disk_seq(&self, memory: u64) -> Option<u64> {
        self.map.get(memory as usize).copied().flatten()
    }

    /// The latest in-memory event whose row is at or before row `disk` (what a reference
    /// to "everything through row `disk`" is recorded as in memory).
    pub fn memory_seq_through(&self, disk: u64) -> Option<u64> {
        self.map
            .iter()
            .enumerate()
            .rev()
            .find(|(_, d)| d.is_some_and(|d| d <= disk))
            .map(|(m, _)| m as u64)
    }

    /// Whether a `system/message` row was written yet. Until then the first step's system
    /// message takes its prompt from a request header in the same batch, so a caller that
    /// encodes event by event holds a first step's events until its header.
    pub fn has_system_message(&self) -> bool {
        self.head.is_some()
    }

    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            map_len: self.map.len(),
            next_disk: self.next_disk,
            pending: self.pending.clone(),
            prompt: self.prompt.clone(),
            head: self.head,
            open_step: self.open_step,
        }
    }

    pub fn rollback(&mut self, cp: Checkpoint) {
        self.map.truncate(cp.map_len);
        self.next_disk = cp.next_disk;
        self.pending = cp.pending;
        self.prompt = cp.prompt;
        self.head = cp.head;
        self.open_step = cp.open_step;
    }

    fn disk(&self, m: u64, at: u64) -> Result<u64, EncodeError> {
        match self.map.get(m as usize) {
            Some(Some(d)) => Ok(*d),
            Some(None) => Err(EncodeError {
                seq: at,
                reason: format!("it refers to stream chunk {m}, which has no row of its own"),
            }),
            None => Err(EncodeError {
                seq: at,
                reason: format!("it refers to event {m}, which is not in the log"),
            }),
        }
    }

    /// Writes the row's envelope up to `"data":` and assigns its disk seq.
    fn begin(&mut self, out: &mut String, row: &Row<'_>) -> u64 {
        use std::fmt::Write as _;
        let d = self.next_disk;
        self.next_disk += 1;
        out.push_str("{\"type\":");
        write_string(out, row.event_type);
        let _ = write!(out, ",\"seq\":{d},\"time\":{},\"data\":", row.time);
        d
    }

    fn finish(out: &mut String, row: &Row<'_>) {
        use std::fmt::Write as _;
        let sources = |out: &mut String| {
            if let Some(s) = &row.sources {
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
        let op = |out: &mut String| match row.op {
            None => {}
            Some(DiskOp::Append) => out.push_str(",\"surfaceOp\":\"append\""),
            Some(DiskOp::Replace { start, end }) => {
                let _ = write!(
                    out,
                    ",\"surfaceOp\":{{\"op\":\"replace\",\"startSeq\":{start},\"endSeq\":{end}}}"
                );
            }
        };
        match row.key_order {
            SurfaceKeyOrder::SourcesFirst => {
                sources(out);
                op(out);
            }
            SurfaceKeyOrder::OpFirst => {
                op(out);
                sources(out);
            }
        }
        if row.ignorable {
            out.push_str(",\"ignorable\":true");
        }
        out.push_str("}\n");
    }

    /// Writes one row with JSON `data`.
    fn row_value(&mut self, out: &mut String, row: Row<'_>, data: &Value) -> u64 {
        let d = self.begin(out, &row);
        write_value(out, data);
        Self::finish(out, &row);
        d
    }

    fn flush_attempt(&mut self, out: &mut String, fallback_time: i64) {
        let Some(p) = self.pending.take() else { return };
        if p.acc.is_empty() {
            return;
        }
        let time = p.acc.last_time().unwrap_or(fallback_time);
        let row = plain_row("assistant/attempt", time);
        let _ = self.begin(out, &row);
        use std::fmt::Write as _;
        let _ = write!(out, "{{\"turn\":{},\"step\":{},\"stream\":", p.turn, p.step);
        p.acc.write_json(out);
        out.push('}');
        Self::finish(out, &row);
    }

    fn system_message(&mut self, out: &mut String, turn: u64, step: u64, time: i64, prompt: &str) {
        let content = if prompt.is_empty() {
            json!([])
        } else {
            json!([{"type": "text", "text": prompt}])
        };
        let id = format!("system-{}-{}", self.session_id, self.next_disk);
        let data = json!({"turn": turn, "step": step,
            "message": {"role": "system", "content": content, "source": {"kind": "system-prompt"}, "id": id}});
        let (sources, op) = match self.head {
            None => (None, DiskOp::Append),
            Some(h) => (Some(vec![h]), DiskOp::Replace { start: h, end: h }),
        };
        let row = Row {
            sources,
            op: Some(op),
            ..plain_row("system/message", time)
        };
        let d = self.row_value(out, row, &data);
        self.head = Some(d);
        self.prompt = Some(prompt.to_string());
    }

    fn map_sources(&self, e: &Event) -> Result<Option<Vec<u64>>, EncodeError> {
        match &e.source_event_seqs {
            None => Ok(None),
            Some(s) => s
                .iter()
                .map(|m| self.disk(*m, e.seq))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
        }
    }

    fn map_op(&self, e: &Event) -> Result<Option<DiskOp>, EncodeError> {
        Ok(match e.surface_op {
            None => None,
            Some(SurfaceOp::Append) => Some(DiskOp::Append),
            Some(SurfaceOp::Replace { start, end }) => Some(DiskOp::Replace {
                start: self.disk(start, e.seq)?,
                end: self.disk(end, e.seq)?,
            }),
        })
    }

    fn map_seq_list(&self, v: Option<&mut Value>, at: u64) -> Result<(), EncodeError> {
        if let Some(Value::Array(items)) = v {
            for item in items {
                if let Some(m) = item.as_u64() {
                    *item = Value::from(self.disk(m, at)?);
                }
            }
        }
        Ok(())
    }

    fn map_seq(&self, v: Option<&mut Value>, at: u64) -> Result<(), EncodeError> {
        if let Some(item) = v
            && let Some(m) = item.as_u64()
        {
            *item = Value::from(self.disk(m, at)?);
        }
        Ok(())
    }

    /// Encodes `events` (the next in-memory events, in order) as rows appended to `out`.
    /// Returns how many rows were written. On error the encoder is unchanged.
    pub fn encode(
        &mut self,
        events: &[Arc<Event>],
        out: &mut String,
    ) -> Result<usize, EncodeError> {
        let cp = self.checkpoint();
        let start_rows = self.next_disk;
        let start_len = out.len();
        for (i, e) in events.iter().enumerate() {
            if let Err(err) = self.encode_one(e, &events[i + 1..], out) {
                self.rollback(cp);
                out.truncate(start_len);
                return Err(err);
            }
        }
        Ok((self.next_disk - start_rows) as usize)
    }

    /// `rest` is what follows `e` in the same batch: the first step's system message takes
    /// its prompt from the step's request header when that is already in the batch (as
    /// upstream writes it), else it starts empty and the header replaces it.
    fn encode_one(
        &mut self,
        e: &Event,
        rest: &[Arc<Event>],
        out: &mut String,
    ) -> Result<(), EncodeError> {
        if e.seq != self.map.len() as u64 {
            return Err(EncodeError {
                seq: e.seq,
                reason: format!("expected event {} next", self.map.len()),
            });
        }
        let t = e.event_type.as_str();
        if t == types::ASSISTANT_CHUNK {
            let (turn, step) = (e.turn().unwrap_or(0), e.step().unwrap_or(0));
            let starts_new = self
                .pending
                .as_ref()
                .is_some_and(|p| p.terminal || p.turn != turn || p.step != step);
            if starts_new {
                self.flush_attempt(out, e.time);
            }
            let p = self.pending.get_or_insert_with(|| Pending {
                turn,
                step,
                acc: Accumulator::default(),
                terminal: false,
            });
            p.acc.push_event(e);
            if e.data.delta().is_none()
                && e.data
                    .as_value()
                    .pointer("/chunk/type")
                    .and_then(Value::as_str)
                    == Some("finish")
            {
                p.terminal = true;
            }
            self.map.push(None);
            return Ok(());
        }
        if matches!(
            t,
            types::STEP_END | types::TURN_END | types::LLM_RETRY | types::LLM_RETRY_STARTED
        ) {
            self.flush_attempt(out, e.time);
        }
        if t == types::STEP_END || t == types::TURN_END {
            self.open_step = None;
        }
        // A message's stream stands for the chunks it cites: those are not renumbered.
        let sources = match t {
            types::ASSISTANT_MESSAGE => None,
            _ => self.map_sources(e)?,
        };
        let op = self.map_op(e)?;
        let mut row = Row {
            event_type: t,
            time: e.time,
            sources,
            op,
            ignorable: e.ignorable,
            key_order: e.key_order,
        };
        let d = match t {
            types::ASSISTANT_MESSAGE => {
                let (turn, step) = (e.turn().unwrap_or(0), e.step().unwrap_or(0));
                let stream = match self.pending.take() {
                    Some(p) if p.turn == turn && p.step == step => p.acc,
                    other => {
                        self.pending = other;
                        self.flush_attempt(out, e.time);
                        Accumulator::default()
                    }
                };
                let mut data = e.data.to_value();
                if let Some(m) = data.get_mut("message") {
                    message_to_v4(m);
                }
                let d = self.begin(out, &row);
                let mut text = String::new();
                write_value(&mut text, &data);
                text.pop(); // the closing brace: `stream` is the last key
                if data.as_object().is_some_and(|o| !o.is_empty()) {
                    text.push(',');
                }
                out.push_str(&text);
                out.push_str("\"stream\":");
                stream.write_json(out);
                out.push('}');
                Self::finish(out, &row);
                d
            }
            types::STEP_START => {
                let d = self.row_value(out, row, e.data.as_value());
                let (turn, step) = (e.turn().unwrap_or(0), e.step().unwrap_or(0));
                self.open_step = Some((turn, step));
                if self.head.is_none() {
                    let prompt = first_prompt_of_step(rest).unwrap_or_default();
                    self.system_message(out, turn, step, e.time, prompt);
                }
                d
            }
            types::REQUEST_HEADER => {
                let mut data = e.data.to_value();
                let system = data
                    .pointer_mut("/header")
                    .and_then(Value::as_object_mut)
                    .and_then(|h| h.remove("system"))
                    .and_then(|s| s.as_str().map(str::to_owned))
                    .unwrap_or_default();
                if self.prompt.as_deref() != Some(system.as_str()) {
                    let (turn, step) = self.open_step.unwrap_or((0, 0));
                    self.system_message(out, turn, step, e.time, &system);
                }
                if let Some(Value::Object(h)) = data.get_mut("header") {
                    if h.get("tools")
                        .and_then(Value::as_array)
                        .is_some_and(Vec::is_empty)
                    {
                        h.remove("tools");
                    }
                    if h.get("adapterDefaults")
                        .and_then(Value::as_object)
                        .is_some_and(Map::is_empty)
                    {
                        h.remove("adapterDefaults");
                    }
                }
                self.row_value(out, row, &data)
            }
            "system/message" => {
                let prompt = e
                    .data
                    .as_value()
                    .pointer("/message/content")
                    .and_then(Value::as_array)
                    .map(|blocks| {
                        blocks
                            .iter()
                            .filter_map(|b| b.get("text").and_then(Value::as_str))
                            .collect::<String>()
                    })
                    .unwrap_or_default();
                (row.sources, row.op) = match self.head {
                    None => (None, Some(DiskOp::Append)),
                    Some(h) => (Some(vec![h]), Some(DiskOp::Replace { start: h, end: h })),
                };
                let d = self.row_value(out, row, e.data.as_value());
                self.head = Some(d);
                self.prompt = Some(prompt);
                d
            }
            "developer/message" => {
                let mut data = e.data.to_value();
                self.map_seq(data.get_mut("headerSeq"), e.seq)?;
                row.op = Some(DiskOp::Append);
                self.row_value(out, row, &data)
            }
            types::USER_MESSAGE => {
                let mut data = e.data.to_value();
                message_to_v4(&mut data);
                self.row_value(out, row, &data)
            }
            types::TOOL_RESULT => {
                let mut data = e.data.to_value();
                if let Some(m) = data.get_mut("message") {
                    message_to_v4(m);
                }
                self.row_value(out, row, &data)
            }
            types::INBOX_SPLICED => {
                let mut data = e.data.to_value();
                if let Some(Value::Array(items)) = data.get_mut("inserted") {
                    items.iter_mut().for_each(message_to_v4);
                }
                self.row_value(out, row, &data)
            }
            types::SESSION_TITLE => {
                let mut data = e.data.to_value();
                self.map_seq_list(data.get_mut("messageSeqs"), e.seq)?;
                self.row_value(out, row, &data)
            }
            "session/title-llm-request" => {
                let mut data = e.data.to_value();
                self.map_seq_list(data.get_mut("messageSeqs"), e.seq)?;
                if let Some(Value::Array(items)) = data.get_mut("messages") {
                    items.iter_mut().for_each(message_to_v4);
                }
                self.row_value(out, row, &data)
            }
            "command/done" => {
                let mut data = e.data.to_value();
                self.map_seq(data.get_mut("sourceEventSeq"), e.seq)?;
                self.row_value(out, row, &data)
            }
            "compaction/summary" | "compaction/prune" => {
                let mut data = e.data.to_value();
                if let Some(range) = data.get_mut("shadowedRange") {
                    self.map_seq(range.get_mut("start"), e.seq)?;
                    self.map_seq(range.get_mut("end"), e.seq)?;
                }
                self.map_seq_list(data.get_mut("shadowedSeqs"), e.seq)?;
                self.row_value(out, row, &data)
            }
            "session-log-deepseek/delivery-accepted" => {
                let mut data = e.data.to_value();
                self.map_seq(data.get_mut("throughSeq"), e.seq)?;
                self.row_value(out, row, &data)
            }
            types::END_SEED => {
                let inherited = self.seed_length == Some(e.seq);
                let data = if inherited {
                    json!({"inherited": true})
                } else {
                    e.data.to_value()
                };
                self.row_value(out, row, &data)
            }
            "tool/code-dispatch-start" | "tool/code-dispatch" => {
                row.event_type = if t == "tool/code-dispatch" {
                    "tool/ptc-dispatch"
                } else {
                    "tool/ptc-dispatch-start"
                };
                self.row_value(out, row, e.data.as_value())
            }
            _ => {
                let d = self.begin(out, &row);
                e.data.write_json(out);
                Self::finish(out, &row);
                d
            }
        };
        self.map.push(Some(d));
        Ok(())
    }
}

fn plain_row(event_type: &'static str, time: i64) -> Row<'static> {
    Row {
        event_type,
        time,
        sources: None,
        op: None,
        ignorable: false,
        key_order: SurfaceKeyOrder::SourcesFirst,
    }
}

/// The system prompt of the first request header in `rest` before the step closes.
fn first_prompt_of_step(rest: &[Arc<Event>]) -> Option<&str> {
    rest.iter()
        .take_while(|e| !e.is(types::STEP_END) && !e.is(types::TURN_END))
        .find(|e| e.is(types::REQUEST_HEADER))?
        .data
        .as_value()
        .pointer("/header/system")?
        .as_str()
}
