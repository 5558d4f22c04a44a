//! Terminal output to plain text: escape sequences removed (CSI, OSC, two-byte escapes,
//! split across chunks), line endings normalized (`\r\n` and lone `\r` become `\n`), BEL
//! dropped. The shell's OSC `133;D;<status>` marks a prompt; the text after it tells
//! whether the prompt is the bare `dsh> `.

/// Longest escape sequence kept pending across chunks; a longer one is dropped.
const MAX_PENDING: usize = 4096;

#[derive(Default)]
pub struct Sanitizer {
    /// An unfinished escape sequence.
    pending: Vec<u8>,
    /// Bytes of an unfinished UTF-8 character.
    partial: Vec<u8>,
    last_was_cr: bool,
    /// A prompt marker was seen at least once.
    pub prompt_seen: bool,
    /// Text since the last prompt marker (bounded).
    pub after_prompt: String,
}

/// What one chunk of output held.
pub struct Sanitized {
    pub text: String,
    /// A prompt marker appeared in this chunk.
    pub prompt: bool,
}

enum Esc {
    /// Not finished yet.
    More,
    /// Finished after `n` bytes; `osc` holds an OSC payload.
    Done(usize, Option<Vec<u8>>),
}

fn parse_escape(bytes: &[u8]) -> Esc {
    // bytes[0] == ESC
    let Some(&kind) = bytes.get(1) else {
        return Esc::More;
    };
    match kind {
        b'[' => {
            for (i, b) in bytes.iter().enumerate().skip(2) {
                if (0x40..=0x7e).contains(b) {
                    return Esc::Done(i + 1, None);
                }
            }
            Esc::More
        }
        b']' => {
            let mut i = 2;
            while i < bytes.len() {
                if bytes[i] == 0x07 {
                    return Esc::Done(i + 1, Some(bytes[2..i].to_vec()));
                }
                if bytes[i] == 0x1b {
                    return match bytes.get(i + 1) {
                        Some(b'\\') => Esc::Done(i + 2, Some(bytes[2..i].to_vec())),
                        Some(_) => Esc::Done(i, Some(bytes[2..i].to_vec())),
                        None => Esc::More,
                    };
                }
                i += 1;
            }
            Esc::More
        }
        // Character-set and similar selections take one more byte.
        b'(' | b')' | b'*' | b'+' | b'#' | b'%' => {
            if bytes.len() >= 3 {
                Esc::Done(3, None)
            } else {
                Esc::More
            }
        }
        _ => Esc::Done(2, None),
    }
}

impl Sanitizer {
    pub fn push(&mut self, chunk: &[u8]) -> Sanitized {
        let mut bytes = std::mem::take(&mut self.pending);
        bytes.extend_from_slice(chunk);
        let mut plain: Vec<u8> = std::mem::take(&mut self.partial);
        let mut prompt = false;
        let mut out = String::new();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b == 0x1b {
                match parse_escape(&bytes[i..]) {
                    Esc::More => {
                        if bytes.len() - i <= MAX_PENDING {
                            self.pending = bytes[i..].to_vec();
                        }
                        break;
                    }
                    Esc::Done(n, osc) => {
                        if let Some(payload) = osc
                            && payload.starts_with(b"133;D")
                        {
                            // Text before the marker belongs to the previous output.
                            let before = self.finish_text(&mut plain);
                            out.push_str(&before);
                            prompt = true;
                            self.prompt_seen = true;
                            self.after_prompt.clear();
                        }
                        i += n;
                        continue;
                    }
                }
            }
            match b {
                0x07 => {}
                b'\r' => {
                    plain.push(b'\n');
                    self.last_was_cr = true;
                    i += 1;
                    continue;
                }
                b'\n' if self.last_was_cr => {}
                _ => plain.push(b),
            }
            self.last_was_cr = false;
            i += 1;
        }
        let text = self.finish_text(&mut plain);
        out.push_str(&text);
        Sanitized { text: out, prompt }
    }

    /// Decodes `plain`, keeping an unfinished character for the next chunk.
    fn finish_text(&mut self, plain: &mut Vec<u8>) -> String {
        let keep = incomplete_suffix(plain);
        self.partial = plain.split_off(plain.len() - keep);
        let text = String::from_utf8_lossy(plain).into_owned();
        plain.clear();
        self.after_prompt.push_str(&text);
        if self.after_prompt.len() > 256 {
            let cut = self.after_prompt.len() - 256;
            let cut = (cut..self.after_prompt.len())
                .find(|i| self.after_prompt.is_char_boundary(*i))
                .unwrap_or(self.after_prompt.len());
            self.after_prompt.drain(..cut);
        }
        text
    }
}

fn incomplete_suffix(bytes: &[u8]) -> usize {
    let n = bytes.len();
    let mut i = n;
    while i > 0 && n - i < 3 && (bytes[i - 1] & 0xc0) == 0x80 {
        i -= 1;
    }
    if i == 0 {
        return 0;
    }
    let need = match bytes[i - 1] {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => return 0,
    };
    let have = n - (i - 1);
    if have < need { have } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn escapes_split_anywhere_are_removed() {
        let input = b"a\x1b[1;31mred\x1b[0m\r\nb\x1b]0;title\x07c\rd\x07\xc3\xa9";
        for split in 0..input.len() {
            let mut s = Sanitizer::default();
            let mut out = s.push(&input[..split]).text;
            out += &s.push(&input[split..]).text;
            assert_eq!(out, "ared\nbc\ndé", "split at {split}");
        }
    }

    #[test]
    fn the_prompt_marker_is_detected() {
        let mut s = Sanitizer::default();
        let r = s.push(b"out\n\x1b]133;D;0\x07dsh> ");
        assert!(r.prompt);
        assert_eq!(r.text, "out\ndsh> ");
        assert_eq!(s.after_prompt, "dsh> ");
        let r = s.push(b"ls");
        assert!(!r.prompt);
        assert_eq!(s.after_prompt, "dsh> ls");
    }
}
