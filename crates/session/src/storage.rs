//! The JSONL text form of a stored log: a header line, then one record per line.
//! Parsing is strict where damage would lose data and lenient only at the tail: a torn or
//! damaged tail after the last committed `turn/end` is reported (so it can be cut and the
//! open turn closed), damage before it is refused.

use std::sync::Arc;

use serde_json::Value;

use crate::event::{Event, types};
use crate::header::{HeaderError, SessionHeader};
use crate::records::{Record, RecordFormat, decode_line, pack, write_event, write_record};

/// Longest record line a log may hold (a longer one is damage, never parsed).
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// A stored log could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StorageError {
    /// The log is damaged before its last committed turn, or is not a session log at all.
    #[error("corrupt session log: {0}")]
    Corrupt(String),
    /// The log was written in another format version, or holds an event type this build
    /// does not know that is not marked ignorable.
    #[error("{0}")]
    Unsupported(String),
}

/// A parsed log text.
#[derive(Debug, Clone)]
pub struct ParsedLog {
    pub header: SessionHeader,
    /// The decoded records of the committed prefix, as stored.
    pub records: Vec<Record>,
    /// The events of the committed prefix (rows expanded).
    pub events: Vec<Arc<Event>>,
    /// Bytes of the text that form complete, valid records (header included).
    pub committed_bytes: usize,
    /// Why the tail after `committed_bytes` was not accepted (a torn fragment has no issue).
    pub tail_issue: Option<String>,
    /// Whether records carried `seq`/`time`.
    pub format: RecordFormat,
}

impl ParsedLog {
    /// Whether the text had anything after its committed prefix.
    pub fn has_damaged_tail(&self, text_len: usize) -> bool {
        self.committed_bytes < text_len
    }
}

/// Parses the header line of a log.
pub fn parse_header_line(line: &str) -> Result<SessionHeader, StorageError> {
    let value: Value = serde_json::from_str(line)
        .map_err(|_| StorageError::Corrupt("header line is not valid JSON".into()))?;
    SessionHeader::from_value(&value).map_err(|e| match e {
        HeaderError::Version { .. } => StorageError::Unsupported(e.to_string()),
        HeaderError::Shape(m) => StorageError::Corrupt(m),
    })
}

fn contains_turn_end(record: &Record) -> bool {
    matches!(record, Record::Event(e) if e.event_type == types::TURN_END)
}

/// Parses a whole log text (header + records).
pub fn parse_log(text: &str) -> Result<ParsedLog, StorageError> {
    let Some(header_end) = text.find('\n') else {
        return Err(StorageError::Corrupt(
            if text.trim_matches('\0').is_empty() {
                "empty or header-less session log".into()
            } else {
                "the file ends inside its header line; it holds no complete session header".into()
            },
        ));
    };
    let header = parse_header_line(&text[..header_end])?;
    let mut pos = header_end + 1;
    let mut committed_bytes = pos;
    let mut records = Vec::new();
    let mut events: Vec<Arc<Event>> = Vec::new();
    let mut issue: Option<String> = None;
    let mut format: Option<RecordFormat> = None;
    let mut line_no = 0usize;
    while pos < text.len() {
        let Some(rel) = text[pos..].find('\n') else {
            break; // a torn final fragment: ignored
        };
        let line = &text[pos..pos + rel];
        let line_end = pos + rel + 1;
        pos = line_end;
        line_no += 1;
        let next_seq = events.len() as u64;
        if line.len() > MAX_LINE_BYTES {
            issue.get_or_insert_with(|| {
                format!("line {line_no} is longer than {MAX_LINE_BYTES} bytes")
            });
            continue;
        }
        let (record, record_format) = match decode_line(line, next_seq) {
            Ok(r) => r,
            Err(_) => {
                issue
                    .get_or_insert_with(|| format!("unparsable committed event at line {line_no}"));
                continue;
            }
        };
        if let Some(existing) = &issue {
            if contains_turn_end(&record) {
                return Err(StorageError::Corrupt(existing.clone()));
            }
            continue;
        }
        let first_seq = match &record {
            Record::Event(e) => e.seq,
            Record::Row(r) => r.seq0,
        };
        if first_seq != next_seq {
            let msg = format!(
                "seq gap in committed region at line {line_no} (expected {next_seq}, got {first_seq})"
            );
            if contains_turn_end(&record) {
                return Err(StorageError::Corrupt(msg));
            }
            issue = Some(msg);
            continue;
        }
        format.get_or_insert(record_format);
        match &record {
            Record::Event(e) => events.push(e.clone()),
            Record::Row(r) => r.expand_into(&mut events),
        }
        records.push(record);
        committed_bytes = line_end;
    }
    if let Some(e) = events
        .iter()
        .find(|e| !e.ignorable && !e.event_type.is_known())
    {
        return Err(StorageError::Unsupported(format!(
            "session \"{}\" has an event of type \"{}\" (seq {}) that this harness does not know and that is not marked ignorable, so the log is not read; a newer harness probably wrote it, so open it with an up-to-date dsh",
            header.id, e.event_type, e.seq
        )));
    }
    Ok(ParsedLog {
        header,
        records,
        events,
        committed_bytes,
        tail_issue: issue,
        format: format.unwrap_or(RecordFormat::Full),
    })
}

/// The header line (with newline).
pub fn header_line(header: &SessionHeader) -> String {
    let mut s = dsh_kernel::json::to_string(&header.to_value());
    s.push('\n');
    s
}

/// Encodes records, one line each (with newlines).
pub fn encode_records(records: &[Record], format: RecordFormat) -> String {
    let mut out = String::with_capacity(records.len() * 128);
    for r in records {
        write_record(&mut out, r, format);
        out.push('\n');
    }
    out
}

/// Encodes a batch of events, packing delta runs into rows when `packed`.
pub fn encode_batch(events: &[Arc<Event>], packed: bool) -> String {
    if packed {
        return encode_records(&pack(events), RecordFormat::Full);
    }
    let mut out = String::with_capacity(events.len() * 128);
    for e in events {
        write_event(&mut out, e, RecordFormat::Full);
        out.push('\n');
    }
    out
}
