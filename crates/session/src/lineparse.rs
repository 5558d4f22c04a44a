//! Fast paths for record lines, used by [`crate::decode_line`]:
//!
//! * a packed row written in its canonical form (keys in the written order, no escapes in
//!   keys) is read straight into a [`DeltaRun`] — fragments appended to one buffer —
//!   without building a `serde_json::Value` per fragment;
//! * an event's envelope is read field by field, so only its `data` becomes a `Value`.
//!
//! Each accepts only what the generic decoder (`serde_json::Value` + `decode_record`)
//! accepts and yields the same record; anything else (other key orders, duplicate or
//! escaped keys, invalid records) returns `None` so the caller falls back to the generic
//! decoder, which also produces the error messages.

use std::fmt;
use std::sync::Arc;

use serde::Deserializer as _;
use serde::de::{DeserializeSeed, Error, MapAccess, SeqAccess, Visitor};

use serde_json::Value;

use crate::delta::{ChunkDelta, DeltaRun, MAX_SAFE_INT};
use crate::event::{Event, EventType, SurfaceKeyOrder, SurfaceOp};
use crate::payload::{EventData, NegativeZero};
use crate::records::{PackedRow, Record, RecordFormat, RowKind};

/// Decodes a canonical packed-row line, or `None` when the line is not one (then the generic
/// decoder must be used).
pub(crate) fn decode_row_line(line: &str, next_seq: u64) -> Option<(Record, RecordFormat)> {
    let kind = row_kind_of(line)?;
    let mut de = serde_json::Deserializer::from_str(line);
    let (row, format) = (&mut de)
        .deserialize_map(RowVisitor {
            kind,
            next_seq,
            text_capacity: line.len(),
        })
        .ok()?;
    de.end().ok()?;
    Some((Record::Row(Box::new(row)), format))
}

const ROW_KINDS: [RowKind; 3] = [RowKind::Text, RowKind::Reasoning, RowKind::ToolCall];

fn row_kind_of(line: &str) -> Option<RowKind> {
    let rest = line.strip_prefix("{\"type\":\"")?;
    ROW_KINDS.into_iter().find(|k| {
        rest.strip_prefix(k.record_type())
            .is_some_and(|r| r.starts_with('"'))
    })
}

fn row_kind_of_type(t: &str) -> Option<RowKind> {
    ROW_KINDS.into_iter().find(|k| k.record_type() == t)
}

fn expect_key<'de, A: MapAccess<'de>>(map: &mut A, want: &str) -> Result<(), A::Error> {
    match map.next_key::<&str>()? {
        Some(k) if k == want => Ok(()),
        _ => Err(A::Error::custom("not a canonical row")),
    }
}

fn safe_int<'de, A: MapAccess<'de>>(map: &mut A, key: &str) -> Result<u64, A::Error> {
    expect_key(map, key)?;
    let n: u64 = map.next_value()?;
    if n > MAX_SAFE_INT {
        return Err(A::Error::custom("not a safe integer"));
    }
    Ok(n)
}

struct RowVisitor {
    kind: RowKind,
    next_seq: u64,
    text_capacity: usize,
}

impl<'de> Visitor<'de> for RowVisitor {
    type Value = (PackedRow, RecordFormat);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a packed chunk row")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        expect_key(&mut map, "type")?;
        if map.next_value::<&str>()? != self.kind.record_type() {
            return Err(A::Error::custom("row type"));
        }
        let (seq0, time0, format) = match map.next_key::<&str>()? {
            Some("seq0") => {
                let seq0: u64 = map.next_value()?;
                expect_key(&mut map, "time0")?;
                let time0: i64 = map.next_value()?;
                expect_key(&mut map, "data")?;
                (seq0, time0, RecordFormat::Full)
            }
            Some("data") => (self.next_seq, 0, RecordFormat::Projected),
            _ => return Err(A::Error::custom("row envelope")),
        };
        let (run, dt) = map.next_value_seed(DataSeed {
            kind: self.kind,
            text_capacity: self.text_capacity,
        })?;
        if map.next_key::<&str>()?.is_some() {
            return Err(A::Error::custom("row envelope"));
        }
        let row = PackedRow::new(seq0, time0, dt, Arc::new(run))
            .ok_or_else(|| A::Error::custom("row members"))?;
        Ok((row, format))
    }
}

/// The row's `data` object.
struct DataSeed {
    kind: RowKind,
    text_capacity: usize,
}

impl<'de> DeserializeSeed<'de> for DataSeed {
    type Value = (DeltaRun, Vec<i64>);

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for DataSeed {
    type Value = (DeltaRun, Vec<i64>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("packed row data")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let turn = safe_int(&mut map, "turn")?;
        let step = safe_int(&mut map, "step")?;
        let index = safe_int(&mut map, "index")?;
        expect_key(&mut map, "dt")?;
        let dt: Vec<i64> = map.next_value()?;
        let (call_id, call_name): (Option<String>, Option<String>) = match self.kind {
            RowKind::Text | RowKind::Reasoning => {
                expect_key(&mut map, "texts")?;
                (None, None)
            }
            RowKind::ToolCall => {
                expect_key(&mut map, "id")?;
                let id: String = map.next_value()?;
                match map.next_key::<&str>()? {
                    Some("args") => (Some(id), None),
                    Some("name") => {
                        let name: String = map.next_value()?;
                        expect_key(&mut map, "args")?;
                        (Some(id), Some(name))
                    }
                    _ => return Err(A::Error::custom("row data keys")),
                }
            }
        };
        let shape = ChunkDelta {
            kind: self.kind,
            turn,
            step,
            index,
            part: "",
            call_id: call_id.as_deref(),
            call_name: call_name.as_deref(),
        };
        let mut run = DeltaRun::new(&shape, self.text_capacity);
        map.next_value_seed(Parts(&mut run))?;
        if map.next_key::<&str>()?.is_some() {
            return Err(A::Error::custom("row data keys"));
        }
        run.shrink_to_fit();
        Ok((run, dt))
    }
}

/// The `texts` / `args` array, appended to the run.
struct Parts<'r>(&'r mut DeltaRun);

impl<'de> DeserializeSeed<'de> for Parts<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Parts<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of strings")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(AppendStr(self.0.text_mut()))?
            .is_some()
        {
            self.0.end_part();
        }
        Ok(())
    }
}

/// One string, appended to the fragment buffer.
struct AppendStr<'t>(&'t mut String);

impl<'de> DeserializeSeed<'de> for AppendStr<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for AppendStr<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<(), E> {
        self.0.push_str(v);
        Ok(())
    }
}

/// Decodes an event line whose envelope keys are plain (unescaped) and unique, or `None`.
pub(crate) fn decode_event_line(
    line: &str,
    next_seq: u64,
    negative_zero: NegativeZero,
) -> Option<(Event, RecordFormat)> {
    let mut de = serde_json::Deserializer::from_str(line);
    let decoded = (&mut de)
        .deserialize_map(EventVisitor {
            next_seq,
            negative_zero,
        })
        .ok()?;
    de.end().ok()?;
    Some(decoded)
}

struct EventVisitor {
    next_seq: u64,
    negative_zero: NegativeZero,
}

impl<'de> Visitor<'de> for EventVisitor {
    type Value = (Event, RecordFormat);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a session event")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut event_type: Option<EventType> = None;
        let mut seq: Option<u64> = None;
        let mut time: Option<i64> = None;
        let mut data: Option<Value> = None;
        let mut surface_op: Option<SurfaceOp> = None;
        let mut sources: Option<Vec<u64>> = None;
        let mut ignorable = false;
        let mut seen = 0u8;
        let mut key_order = SurfaceKeyOrder::SourcesFirst;
        while let Some(key) = map.next_key::<&str>()? {
            let bit = match key {
                "type" => 1,
                "seq" => 2,
                "time" => 4,
                "data" => 8,
                "surfaceOp" => 16,
                "sourceEventSeqs" => 32,
                "ignorable" => 64,
                _ => return Err(A::Error::custom("unexpected envelope key")),
            };
            if seen & bit != 0 {
                return Err(A::Error::custom("duplicate envelope key"));
            }
            seen |= bit;
            match key {
                "type" => {
                    let t: &str = map.next_value()?;
                    // Rows are not events (and a row that missed the row fast path must
                    // reach the generic row decoder).
                    if t.is_empty() || row_kind_of_type(t).is_some() {
                        return Err(A::Error::custom("not an event type"));
                    }
                    event_type = Some(EventType::new(t));
                }
                "seq" => seq = Some(map.next_value()?),
                "time" => time = Some(map.next_value()?),
                "data" => data = Some(map.next_value()?),
                "surfaceOp" => {
                    let v: Value = map.next_value()?;
                    surface_op = Some(SurfaceOp::from_value(&v).map_err(A::Error::custom)?);
                }
                "sourceEventSeqs" => {
                    sources = Some(map.next_value()?);
                    if surface_op.is_some() {
                        key_order = SurfaceKeyOrder::OpFirst;
                    }
                }
                _ => {
                    if !map.next_value::<bool>()? {
                        return Err(A::Error::custom("`ignorable` may only be true"));
                    }
                    ignorable = true;
                }
            }
        }
        let (Some(event_type), Some(data)) = (event_type, data) else {
            return Err(A::Error::custom("incomplete event"));
        };
        let format = if seq.is_some() {
            RecordFormat::Full
        } else {
            RecordFormat::Projected
        };
        let event = Event {
            event_type,
            seq: seq.unwrap_or(self.next_seq),
            time: time.unwrap_or(0),
            data: EventData::from_json(data, self.negative_zero),
            source_event_seqs: sources,
            surface_op,
            ignorable,
            key_order,
        };
        Ok((event, format))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_lines_take_the_fast_paths() {
        for line in [
            r#"{"type":"text-chunks","seq0":4,"time0":100,"data":{"turn":1,"step":2,"index":0,"dt":[0,3],"texts":["a","\n",""]}}"#,
            r#"{"type":"tool-call-chunks","data":{"turn":1,"step":1,"index":1,"dt":[0],"id":"c","name":"bash","args":["{","}"]}}"#,
        ] {
            assert!(decode_row_line(line, 0).is_some(), "{line}");
        }
        for line in [
            r#"{"type":"turn/start","seq":3,"time":17,"data":{"turn":1}}"#,
            r#"{"type":"tool/result","seq":9,"time":1,"data":{},"surfaceOp":"append","sourceEventSeqs":[4]}"#,
            r#"{"type":"x","data":null,"ignorable":true}"#,
        ] {
            assert!(
                decode_event_line(line, 0, NegativeZero::Impossible).is_some(),
                "{line}"
            );
        }
        // Duplicate keys keep the generic decoder's last-wins meaning.
        assert!(
            decode_event_line(
                r#"{"type":"a","type":"b","data":1}"#,
                0,
                NegativeZero::Impossible
            )
            .is_none()
        );
        assert!(decode_row_line(r#"{"type":"text-chunks","data":{"step":1,"turn":1,"index":0,"dt":[0],"texts":["a","b"]}}"#, 0).is_none());
    }
}
