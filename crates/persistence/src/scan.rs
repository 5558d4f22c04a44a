//! Reading a stored log's bytes (plain or zstd) into its committed events, plus what a
//! repair has to cut and re-append. No IO here: callers pass the file's bytes.

use std::sync::Arc;

use dsh_session::v4::{V4Resume, parse_any_log};
use dsh_session::{
    Event, ParsedLog, Record, SessionHeader, StorageError, decode_record, parse_header_line, types,
};
use serde_json::Value;

use crate::frames::{self, Budget, DecodeError, InflateLimits};
use crate::layout::Compression;

/// A log read from bytes.
#[derive(Debug, Clone)]
pub(crate) struct ScannedLog {
    pub header: SessionHeader,
    /// Committed events, then events salvaged from a torn zstd frame.
    pub events: Vec<Arc<Event>>,
    /// How many leading `events` are stored intact (not counting salvaged ones).
    pub intact: usize,
    /// The byte length the file must be cut to before anything is appended, when it has a
    /// torn or damaged tail.
    pub truncate_to: Option<u64>,
    /// Why the tail was not accepted (a merely torn tail has none).
    pub tail_issue: Option<String>,
    /// A v4 log's continuation state (as of every event read, salvaged ones included).
    pub v4: Option<V4Resume>,
}

impl ScannedLog {
    /// Events salvaged from a torn last frame (they must be re-appended after the cut).
    pub fn recovered(&self) -> &[Arc<Event>] {
        &self.events[self.intact..]
    }
}

fn corrupt(detail: impl Into<String>) -> StorageError {
    StorageError::Corrupt(detail.into())
}

/// Reads a log in the given encoding; a compressed log inflates within `limits`.
pub(crate) fn scan(
    bytes: &[u8],
    compression: Compression,
    limits: InflateLimits,
) -> Result<ScannedLog, StorageError> {
    match compression {
        Compression::None => scan_plain(bytes),
        Compression::Zstd => scan_zstd(bytes, limits),
    }
}

fn scan_plain(bytes: &[u8]) -> Result<ScannedLog, StorageError> {
    let (parsed, v4) = parse_bytes(bytes)?;
    let truncate_to =
        (parsed.committed_bytes < bytes.len()).then_some(parsed.committed_bytes as u64);
    let intact = parsed.events.len();
    Ok(ScannedLog {
        header: parsed.header,
        events: parsed.events,
        intact,
        truncate_to,
        tail_issue: parsed.tail_issue,
        v4,
    })
}

fn scan_zstd(bytes: &[u8], limits: InflateLimits) -> Result<ScannedLog, StorageError> {
    // Every frame inflated while reading this log (kept, probed or salvaged) draws from
    // one budget, so damaged bytes cannot make the scan do unbounded work.
    let mut budget = Budget::for_log(bytes.len(), limits);
    // Structural damage with no valid frame after it is what a crash or power loss leaves
    // (a torn write, a zero-filled tail): it is cut like a torn frame. Damage followed by a
    // valid frame is inside the log and refused.
    let (complete_frames, mut torn_start, mut tail_issue) =
        match frames::scan_frames(bytes, usize::MAX) {
            Ok(scan) => (scan.frames, scan.torn_start, None),
            Err(damage) => (
                damage.frames,
                Some(damage.frame_start),
                Some(damage.message),
            ),
        };
    if let Some(torn) = torn_start {
        match frames::valid_frame_follows(&bytes[torn..], torn, &mut budget) {
            Ok(None) => {}
            Ok(Some(at)) => {
                return Err(corrupt(format!(
                    "damaged Zstandard frame at byte {torn} is followed by a valid frame at byte {}",
                    torn + at
                )));
            }
            Err(e) => {
                return Err(corrupt(format!(
                    "damaged Zstandard frame at byte {torn}; looking for a valid frame after it: {}",
                    decode_message(e)
                )));
            }
        }
    }
    let Some(&(header_start, header_end)) = complete_frames.first() else {
        return Err(corrupt(match tail_issue {
            Some(issue) if torn_start == Some(0) && bytes.iter().any(|b| *b != 0) => issue,
            _ if bytes.is_empty() || bytes.iter().all(|b| *b == 0) => {
                "empty or header-less Zstandard session log".to_string()
            }
            _ => "the log was cut inside its header frame; it holds no session header".to_string(),
        }));
    };
    // Size the plaintext once (frames declare their content size); a bogus declaration
    // only costs a capacity hint, capped by the plaintext budget.
    let hint = frames::declared_size(bytes, &complete_frames)
        .min(usize::try_from(budget.left()).unwrap_or(usize::MAX));
    let mut plain = Vec::with_capacity(hint + 1);
    frames::decode_bounded(
        bytes,
        &[(header_start, header_end)],
        &mut plain,
        &mut budget,
    )
    .map_err(|e| {
        corrupt(match e {
            DecodeError::Invalid { message, .. } => {
                format!("Zstandard header frame failed validation: {message}")
            }
            DecodeError::TooLarge { message } => message,
        })
    })?;
    check_header_frame(&plain)?;
    let body_frames = &complete_frames[1..];
    // A last complete frame that fails validation (with nothing valid after it) was not
    // fully written before a power loss: it is torn, not damage inside the log.
    match frames::decode_bounded(bytes, body_frames, &mut plain, &mut budget) {
        Ok(()) => {}
        Err(DecodeError::TooLarge { message }) => return Err(corrupt(message)),
        Err(DecodeError::Invalid { frame, message }) => {
            // Only the last complete frame can be a power-loss artifact (whatever follows
            // it is already known to hold no valid frame). `plain` holds the frames
            // before it.
            if frame + 1 != body_frames.len() {
                return Err(corrupt(message));
            }
            torn_start = Some(body_frames[frame].0);
            tail_issue = Some(message);
        }
    }
    let (complete, complete_v4) = parse_bytes(&plain)?;
    if complete.committed_bytes != plain.len() {
        // Checksummed frames are written whole; damage inside one is not a crash artifact.
        return Err(corrupt(match complete.tail_issue {
            Some(issue) => issue,
            None => "complete Zstandard frame contains a torn JSONL record".to_string(),
        }));
    }
    let intact = complete.events.len();
    let Some(torn_start) = torn_start else {
        return Ok(ScannedLog {
            header: complete.header,
            events: complete.events,
            intact,
            truncate_to: None,
            tail_issue: None,
            v4: complete_v4,
        });
    };
    let salvaged =
        frames::salvage_torn(&bytes[torn_start..], torn_start, &mut budget).map_err(|e| {
            corrupt(format!(
                "salvaging the torn Zstandard frame at byte {torn_start}: {}",
                decode_message(e)
            ))
        })?;
    // Only whole lines of the salvaged text can be records; the rest is dropped.
    let whole_lines = salvaged
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    if whole_lines == 0 {
        return Ok(ScannedLog {
            header: complete.header,
            events: complete.events,
            intact,
            truncate_to: Some(torn_start as u64),
            tail_issue,
            v4: complete_v4,
        });
    }
    plain.extend_from_slice(&salvaged[..whole_lines]);
    let (with_salvage, salvage_v4) = parse_bytes(&plain)?;
    Ok(ScannedLog {
        header: with_salvage.header,
        events: with_salvage.events,
        intact,
        truncate_to: Some(torn_start as u64),
        tail_issue: with_salvage.tail_issue.or(tail_issue),
        v4: salvage_v4,
    })
}

fn decode_message(e: DecodeError) -> String {
    match e {
        DecodeError::Invalid { message, .. } | DecodeError::TooLarge { message } => message,
    }
}

/// The header frame holds exactly one newline-terminated line.
fn check_header_frame(plain: &[u8]) -> Result<(), StorageError> {
    match plain.iter().position(|b| *b == b'\n') {
        Some(i) if i + 1 == plain.len() => Ok(()),
        _ => Err(corrupt("Zstandard header frame must hold exactly one line")),
    }
}

/// Parses the header line of a log (for listings: the first line or frame only).
pub(crate) fn header_of(first_line: &[u8]) -> Result<SessionHeader, StorageError> {
    let text = std::str::from_utf8(first_line)
        .map_err(|_| StorageError::Corrupt("header line is not valid JSON".into()))?;
    parse_header_line(text)
}

/// [`parse_log`] over bytes that may not be valid UTF-8. Invalid UTF-8 is damage of the
/// line that holds it: the log is cut before that line, unless a later line commits a
/// `turn/end` (then the damage is inside committed history and the log is refused).
pub(crate) fn parse_bytes(bytes: &[u8]) -> Result<(ParsedLog, Option<V4Resume>), StorageError> {
    let bad_at = match std::str::from_utf8(bytes) {
        Ok(text) => return parse_any_log(text),
        Err(e) => e.valid_up_to(),
    };
    let line_start = bytes[..bad_at]
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    if line_start == 0 {
        return Err(match bytes.contains(&b'\n') {
            true => StorageError::Corrupt("header line is not valid JSON".into()),
            false => StorageError::Corrupt("empty or header-less session log".into()),
        });
    }
    // The prefix before the damaged line is valid UTF-8 and ends with a newline.
    let prefix = std::str::from_utf8(&bytes[..line_start])
        .map_err(|_| StorageError::Corrupt("header line is not valid JSON".into()))?;
    let (mut parsed, v4) = parse_any_log(prefix)?;
    let rest = &bytes[line_start..];
    let Some(bad_line_len) = rest.iter().position(|b| *b == b'\n') else {
        return Ok((parsed, v4)); // the damaged bytes are a torn final fragment
    };
    let line_no = prefix.bytes().filter(|b| *b == b'\n').count(); // header excluded, +1 for this line
    let issue = parsed
        .tail_issue
        .clone()
        .unwrap_or_else(|| format!("unparsable committed event at line {line_no}"));
    let mut pos = bad_line_len + 1;
    while let Some(len) = rest[pos..].iter().position(|b| *b == b'\n') {
        if line_commits_turn_end(&rest[pos..pos + len]) {
            return Err(StorageError::Corrupt(issue));
        }
        pos += len + 1;
    }
    parsed.tail_issue = Some(issue);
    Ok((parsed, v4))
}

fn line_commits_turn_end(line: &[u8]) -> bool {
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        return false;
    };
    matches!(decode_record(value, 0), Ok(Record::Event(e)) if e.event_type == types::TURN_END)
}
