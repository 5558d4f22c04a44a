//! The compact form of stream-delta chunk data.
//!
//! Nine in ten events of a long session are `assistant/chunk` deltas whose `data` has one
//! fixed shape — `{turn, step, chunk: {type, index, text}}` or the tool-call variant with
//! `id`, optional `name` and `argumentsDelta`. Holding each as a `serde_json::Value`
//! (preserve-order maps, a dozen allocations) made them cost over a kilobyte apiece. A
//! [`DeltaRun`] holds the shared fields once and the fragments in one buffer; an event's
//! data then points at one member of it. Packed chunk rows decode straight into a run, so
//! a row's events and its storage record share the same text.
//!
//! The compact form is a *representation* of exactly one JSON value: it is used only when
//! the value has precisely that shape (same keys in the same order, safe integers, strings),
//! so materializing or writing it reproduces the original bytes.

use dsh_kernel::json::write_string;
use serde_json::{Map, Value};

use crate::records::RowKind;

/// `Number.MAX_SAFE_INTEGER`: turn, step and index numbers of a compact delta are at most this.
pub(crate) const MAX_SAFE_INT: u64 = 9_007_199_254_740_991;

impl RowKind {
    pub(crate) fn delta_type(self) -> &'static str {
        match self {
            RowKind::Text => "text-delta",
            RowKind::Reasoning => "reasoning-delta",
            RowKind::ToolCall => "tool-call-delta",
        }
    }
}

/// One stream delta, read from an event without building its JSON
/// ([`crate::EventData::delta`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkDelta<'a> {
    /// Which stream the delta extends (`text-delta`, `reasoning-delta`, `tool-call-delta`).
    pub kind: RowKind,
    pub turn: u64,
    pub step: u64,
    /// The content-block index.
    pub index: u64,
    /// The text (text and reasoning deltas) or the arguments fragment (tool-call deltas).
    pub part: &'a str,
    /// The call id (tool-call deltas only).
    pub call_id: Option<&'a str>,
    /// The tool name, when this tool-call delta carries one.
    pub call_name: Option<&'a str>,
}

fn keys_are(map: &Map<String, Value>, keys: &[&str]) -> bool {
    map.len() == keys.len() && map.keys().zip(keys).all(|(a, b)| a == b)
}

fn safe_int(v: &Value) -> Option<u64> {
    v.as_u64().filter(|n| *n <= MAX_SAFE_INT)
}

impl<'a> ChunkDelta<'a> {
    /// The delta `data` holds, when it has exactly the compact shape (keys in this order:
    /// `turn, step, chunk`; chunk `type, index, text` or `type, index, id[, name],
    /// argumentsDelta`; safe-integer numbers).
    pub fn from_value(data: &'a Value) -> Option<Self> {
        let Value::Object(data) = data else {
            return None;
        };
        if !keys_are(data, &["turn", "step", "chunk"]) {
            return None;
        }
        let (turn, step) = (safe_int(data.get("turn")?)?, safe_int(data.get("step")?)?);
        let Value::Object(chunk) = data.get("chunk")? else {
            return None;
        };
        let index = safe_int(chunk.get("index")?)?;
        let delta = |kind, part, call_id, call_name| ChunkDelta {
            kind,
            turn,
            step,
            index,
            part,
            call_id,
            call_name,
        };
        match chunk.get("type")?.as_str()? {
            t @ ("text-delta" | "reasoning-delta")
                if keys_are(chunk, &["type", "index", "text"]) =>
            {
                let kind = if t == "text-delta" {
                    RowKind::Text
                } else {
                    RowKind::Reasoning
                };
                Some(delta(kind, chunk.get("text")?.as_str()?, None, None))
            }
            "tool-call-delta" => {
                let with_name = keys_are(chunk, &["type", "index", "id", "name", "argumentsDelta"]);
                if !with_name && !keys_are(chunk, &["type", "index", "id", "argumentsDelta"]) {
                    return None;
                }
                let name = if with_name {
                    Some(chunk.get("name")?.as_str()?)
                } else {
                    None
                };
                Some(delta(
                    RowKind::ToolCall,
                    chunk.get("argumentsDelta")?.as_str()?,
                    Some(chunk.get("id")?.as_str()?),
                    name,
                ))
            }
            _ => None,
        }
    }

    /// `chunk.type`: `text-delta`, `reasoning-delta` or `tool-call-delta`.
    pub fn chunk_type(&self) -> &'static str {
        self.kind.delta_type()
    }

    /// The `data` JSON value this delta stands for.
    pub fn to_value(&self) -> Value {
        let mut chunk = Map::new();
        chunk.insert("type".into(), Value::from(self.kind.delta_type()));
        chunk.insert("index".into(), Value::from(self.index));
        match self.kind {
            RowKind::Text | RowKind::Reasoning => {
                chunk.insert("text".into(), Value::from(self.part));
            }
            RowKind::ToolCall => {
                chunk.insert("id".into(), Value::from(self.call_id.unwrap_or_default()));
                if let Some(name) = self.call_name {
                    chunk.insert("name".into(), Value::from(name));
                }
                chunk.insert("argumentsDelta".into(), Value::from(self.part));
            }
        }
        let mut data = Map::new();
        data.insert("turn".into(), Value::from(self.turn));
        data.insert("step".into(), Value::from(self.step));
        data.insert("chunk".into(), Value::Object(chunk));
        Value::Object(data)
    }

    /// Appends the `JSON.stringify` text of [`ChunkDelta::to_value`].
    pub(crate) fn write_json(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = write!(
            out,
            "{{\"turn\":{},\"step\":{},\"chunk\":{{\"type\":\"{}\",\"index\":{}",
            self.turn,
            self.step,
            self.kind.delta_type(),
            self.index
        );
        match self.kind {
            RowKind::Text | RowKind::Reasoning => out.push_str(",\"text\":"),
            RowKind::ToolCall => {
                out.push_str(",\"id\":");
                write_string(out, self.call_id.unwrap_or_default());
                if let Some(name) = self.call_name {
                    out.push_str(",\"name\":");
                    write_string(out, name);
                }
                out.push_str(",\"argumentsDelta\":");
            }
        }
        write_string(out, self.part);
        out.push_str("}}");
    }

    /// Whether `next` continues this delta's run (same stream, block and call).
    pub(crate) fn same_stream(&self, next: &ChunkDelta<'_>) -> bool {
        self.kind == next.kind
            && self.turn == next.turn
            && self.step == next.step
            && self.index == next.index
            && self.call_id == next.call_id
            && self.call_name == next.call_name
    }
}

/// The shared body of consecutive deltas of one stream: the members of a packed row, or a
/// single live delta. Immutable once built (shared through `Arc`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DeltaRun {
    pub kind: RowKind,
    pub turn: u64,
    pub step: u64,
    pub index: u64,
    /// Present exactly for tool-call runs.
    pub call_id: Option<Box<str>>,
    pub call_name: Option<Box<str>>,
    /// The members' fragments, concatenated.
    text: String,
    /// End offset in `text` of each member's fragment.
    ends: Vec<usize>,
}

impl DeltaRun {
    /// An empty run; `text_capacity` sizes the fragment buffer.
    pub fn new(first: &ChunkDelta<'_>, text_capacity: usize) -> Self {
        Self {
            kind: first.kind,
            turn: first.turn,
            step: first.step,
            index: first.index,
            call_id: first.call_id.map(Box::from),
            call_name: first.call_name.map(Box::from),
            text: String::with_capacity(text_capacity),
            ends: Vec::new(),
        }
    }

    /// A run of one member.
    pub fn single(delta: &ChunkDelta<'_>) -> Self {
        let mut run = Self::new(delta, delta.part.len());
        run.push_part(delta.part);
        run
    }

    pub fn push_part(&mut self, part: &str) {
        self.text.push_str(part);
        self.ends.push(self.text.len());
    }

    /// The fragment buffer, for parsers that append a member's fragment in place; close the
    /// member with [`DeltaRun::end_part`].
    pub fn text_mut(&mut self) -> &mut String {
        &mut self.text
    }

    pub fn end_part(&mut self) {
        self.ends.push(self.text.len());
    }

    /// Gives back buffer space reserved beyond the fragments (parsers reserve generously).
    pub fn shrink_to_fit(&mut self) {
        self.text.shrink_to_fit();
        self.ends.shrink_to_fit();
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn part(&self, k: usize) -> &str {
        let start = match k {
            0 => 0,
            _ => self.ends.get(k - 1).copied().unwrap_or(self.text.len()),
        };
        let end = self.ends.get(k).copied().unwrap_or(start);
        self.text.get(start..end).unwrap_or_default()
    }

    pub fn parts(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).map(|k| self.part(k))
    }

    pub fn member(&self, k: usize) -> ChunkDelta<'_> {
        ChunkDelta {
            kind: self.kind,
            turn: self.turn,
            step: self.step,
            index: self.index,
            part: self.part(k),
            call_id: self.call_id.as_deref(),
            call_name: self.call_name.as_deref(),
        }
    }
}
