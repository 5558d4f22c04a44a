//! Session log format v4 (upstream 0.2.x), as a codec at the storage boundary: the
//! in-memory vocabulary stays the one the rest of the harness speaks (v0-shaped), and
//! [`V4Encoder`] / [`parse_log_v4`] translate rows and renumber seqs on the way to and from
//! disk. See each module for the mapping.

mod decode;
mod encode;
mod messages;
mod stream;

pub use decode::{V4Resume, parse_log_v4};
pub use encode::{Checkpoint, EncodeError, V4Encoder};

/// The header line of a v4 log (with newline).
pub fn header_line_v4(header: &crate::SessionHeader) -> String {
    let mut s = dsh_kernel::json::to_string(&header.to_v4_value());
    s.push('\n');
    s
}

/// Parses a stored log of either format (chosen by the header's `version`): the v4
/// continuation state comes with a v4 log.
pub fn parse_any_log(
    text: &str,
) -> Result<(crate::ParsedLog, Option<V4Resume>), crate::StorageError> {
    let first = text.split('\n').next().unwrap_or_default();
    let is_v4 = serde_json::from_str::<serde_json::Value>(first)
        .ok()
        .and_then(|h| h.get("version").and_then(serde_json::Value::as_u64))
        == Some(crate::SESSION_FORMAT_V4);
    if is_v4 {
        let (parsed, resume) = parse_log_v4(text)?;
        Ok((parsed, Some(resume)))
    } else {
        crate::parse_log(text).map(|p| (p, None))
    }
}
