//! `tools/output`: output a running tool produced, announced while it runs (frontends show
//! it live; the durable record is still the `tool/result`).

use dsh_kernel::{EmitEvent, Event};

use crate::tool::ToolRunContext;

/// Which pipe the bytes came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

impl OutputStream {
    pub fn as_str(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// Payload of [`ToolOutputEvent`].
pub struct ToolOutputPayload {
    pub session_id: String,
    pub call_id: String,
    pub stream: OutputStream,
    /// Whole UTF-8 characters (a character split across reads is held back until complete;
    /// invalid bytes become U+FFFD).
    pub text: String,
}

/// `tools/output` (emit, contained): a running tool produced output. Dispatched through the
/// calling agent's scoped context. Listeners must be cheap (they run on the pipe reader);
/// a failing listener is contained and never affects the tool.
pub struct ToolOutputEvent;
impl Event for ToolOutputEvent {
    const NAME: &'static str = "tools/output";
    type Payload = ToolOutputPayload;
}
impl EmitEvent for ToolOutputEvent {}

/// Announces one pipe's bytes as `tools/output`, keeping UTF-8 characters whole across reads.
#[derive(Clone)]
pub struct OutputTap {
    ctx: dsh_kernel::Context,
    session_id: String,
    call_id: String,
    stream: OutputStream,
    /// The start of a character whose remaining bytes have not arrived yet (≤ 3 bytes).
    pending: Vec<u8>,
}

impl OutputTap {
    /// A tap for `stream` of the call `run` is executing; `None` when the call has no
    /// session (nothing could show the output).
    pub fn for_call(run: &ToolRunContext, stream: OutputStream) -> Option<Self> {
        let session = run.session.as_ref()?;
        Some(Self {
            ctx: run.ctx.clone(),
            session_id: session.id(),
            call_id: run.call_id.clone(),
            stream,
            pending: Vec::new(),
        })
    }

    /// Announces `chunk` (plus any held-back prefix).
    pub fn push(&mut self, chunk: &[u8]) {
        let mut bytes = std::mem::take(&mut self.pending);
        bytes.extend_from_slice(chunk);
        let keep = incomplete_tail(&bytes);
        self.pending = bytes.split_off(bytes.len() - keep);
        if bytes.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        self.ctx.emit::<ToolOutputEvent>(&ToolOutputPayload {
            session_id: self.session_id.clone(),
            call_id: self.call_id.clone(),
            stream: self.stream,
            text,
        });
    }
}

impl std::fmt::Debug for OutputTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputTap")
            .field("call_id", &self.call_id)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

/// How many trailing bytes of `bytes` start a UTF-8 character that is not complete yet.
fn incomplete_tail(bytes: &[u8]) -> usize {
    for back in 1..=3.min(bytes.len()) {
        let b = bytes[bytes.len() - back];
        if b & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte: look further back for the lead byte
        }
        let need = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if need > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn split_characters_are_held_back_until_complete() {
        let s = "a€b😀".as_bytes();
        assert_eq!(incomplete_tail(&s[..2]), 1); // 'a' + first byte of €
        assert_eq!(incomplete_tail(&s[..3]), 2);
        assert_eq!(incomplete_tail(&s[..4]), 0);
        assert_eq!(incomplete_tail(&s[..s.len() - 1]), 3);
        assert_eq!(incomplete_tail(s), 0);
        assert_eq!(incomplete_tail(b"\xff"), 0, "invalid bytes are not held");
        assert_eq!(incomplete_tail(b""), 0);
    }
}
