//! Incremental Server-Sent Events framing (WHATWG EventSource parsing rules).
//!
//! The decoder is fed raw bytes exactly as they arrive and returns every event `data`
//! payload completed by them. Framing is spec-strict, as upstream's: CRLF, CR and LF all end
//! a line, a leading BOM is dropped, comment lines (`:`) and fields other than `data` are
//! skipped, several `data:` lines join with `\n`, and an event dispatches only at its blank
//! line — an unterminated tail at EOF is truncation, never a payload. Because line
//! terminators are ASCII, splitting lines on bytes and decoding each line (lossily) gives
//! the same text whatever the read boundaries, including splits inside a UTF-8 sequence.

/// The terminal payload OpenAI-style endpoints send after the last chunk.
pub(crate) const DONE: &str = "[DONE]";

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// Longest SSE line accepted (a provider's delta events are a few hundred bytes).
pub(crate) const MAX_LINE_BYTES: usize = 4 << 20;
/// Largest event payload accepted.
pub(crate) const MAX_EVENT_BYTES: usize = 16 << 20;

/// The stream broke a size limit; the attempt fails as a malformed response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SseOverflow {
    #[error("an SSE line is longer than {MAX_LINE_BYTES} bytes")]
    Line,
    #[error("an SSE event is larger than {MAX_EVENT_BYTES} bytes")]
    Event,
}

/// Stateful SSE framer; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// Accumulated `data` lines of the current event, each followed by `\n`.
    data: String,
    /// How many bytes of a leading BOM were seen; `None` once the stream start is past.
    bom_seen: Option<usize>,
    /// The previous byte was a CR, so an immediately following LF belongs to it.
    after_cr: bool,
}

impl SseDecoder {
    pub(crate) fn new() -> Self {
        Self {
            bom_seen: Some(0),
            ..Self::default()
        }
    }

    /// Feeds one read and returns the payloads of the events it completed, in order.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Result<Vec<String>, SseOverflow> {
        let mut out = Vec::new();
        for &byte in bytes {
            if let Some(seen) = self.bom_seen {
                if byte == BOM[seen] {
                    self.bom_seen = if seen + 1 == BOM.len() {
                        None
                    } else {
                        Some(seen + 1)
                    };
                    continue;
                }
                // Not a BOM after all: replay the held prefix as ordinary bytes.
                self.bom_seen = None;
                for &held in &BOM[..seen] {
                    self.push_byte(held, &mut out)?;
                }
            }
            self.push_byte(byte, &mut out)?;
        }
        Ok(out)
    }

    fn push_byte(&mut self, byte: u8, out: &mut Vec<String>) -> Result<(), SseOverflow> {
        let after_cr = std::mem::replace(&mut self.after_cr, false);
        match byte {
            b'\n' if after_cr => {}
            b'\n' => self.end_line(out)?,
            b'\r' => {
                self.after_cr = true;
                self.end_line(out)?;
            }
            _ => {
                if self.line.len() >= MAX_LINE_BYTES {
                    return Err(SseOverflow::Line);
                }
                self.line.push(byte);
            }
        }
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<String>) -> Result<(), SseOverflow> {
        let raw = std::mem::take(&mut self.line);
        let line = String::from_utf8_lossy(&raw);
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        if field == "data" {
            if self.data.len() + value.len() >= MAX_EVENT_BYTES {
                return Err(SseOverflow::Event);
            }
            self.data.push_str(value);
            self.data.push('\n');
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<String>) {
        let mut data = std::mem::take(&mut self.data);
        if data.is_empty() {
            return;
        }
        data.pop();
        out.push(data);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;
    use proptest::prelude::*;

    fn decode_all(bytes: &[u8]) -> Vec<String> {
        SseDecoder::new().feed(bytes).unwrap()
    }

    #[test]
    fn frames_events_per_the_spec() {
        let stream = "\u{feff}: keep-alive\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: one\ndata:two\nid: 3\nretry: 10\n\n\
                      data\n\ndata: [DONE]\rdata: tail-without-terminator";
        assert_eq!(
            decode_all(stream.as_bytes()),
            vec!["{\"a\":1}", "one\ntwo", ""]
        );
    }

    #[test]
    fn cr_lf_and_lone_cr_both_terminate_lines() {
        assert_eq!(
            decode_all(b"data: a\r\rdata: b\r\n\r\ndata: c\n\r\n"),
            vec!["a", "b", "c"]
        );
    }

    #[test]
    fn unterminated_tail_is_dropped_and_blank_events_are_skipped() {
        assert_eq!(
            decode_all(b"\n\n: c\n\nevent: e\n\ndata: x\n"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn bom_only_at_stream_start_and_partial_bom_is_kept() {
        let mut decoder = SseDecoder::new();
        assert_eq!(decoder.feed(&[0xEF, 0xBB]).unwrap(), Vec::<String>::new());
        assert_eq!(
            decoder
                .feed(b"\xBFdata: x\n\ndata: \xEF\xBB\xBFy\n\n")
                .unwrap(),
            vec!["x", "\u{feff}y"]
        );
        // A stream starting with a BOM prefix that is not a BOM keeps those bytes.
        assert_eq!(decode_all(b"\xEFdata: x\n\n"), Vec::<String>::new());
        assert_eq!(decode_all(b"\xEF\n\ndata: y\n\n"), vec!["y"]);
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        assert_eq!(decode_all(b"data: a\xFFb\n\n"), vec!["a\u{fffd}b"]);
    }

    const SAMPLE: &str = "\u{feff}: hi\r\n\
        data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"\u{601d}\u{8003}\"}}]}\r\n\r\n\
        data: {\"choices\":[{\"delta\":{\"content\":\"h\u{e9}llo \u{1f600}\"}}]}\n\n\
        data: line1\rdata: line2\r\r\
        : comment\n\
        data: [DONE]\n\n";

    proptest! {
        /// Any split of the byte stream yields the same payloads.
        #[test]
        fn any_split_yields_the_same_payloads(cuts in proptest::collection::vec(0usize..200, 0..12)) {
            let bytes = SAMPLE.as_bytes();
            let whole = decode_all(bytes);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut decoder = SseDecoder::new();
            let mut pieces = Vec::new();
            let mut start = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                pieces.extend(decoder.feed(&bytes[start..cut]).unwrap());
                start = cut;
            }
            prop_assert_eq!(pieces, whole);
        }
    }
}

#[cfg(test)]
mod limits {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn oversized_lines_and_events_are_refused_without_buffering_them() {
        let mut d = SseDecoder::new();
        let chunk = vec![b'a'; 1 << 20];
        let mut result = Ok(Vec::new());
        for _ in 0..5 {
            result = d.feed(&chunk);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(SseOverflow::Line));
        let mut d = SseDecoder::new();
        let line = format!("data: {}\n", "b".repeat(1 << 20));
        let mut result = Ok(Vec::new());
        for _ in 0..20 {
            result = d.feed(line.as_bytes());
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(SseOverflow::Event));
    }
}
