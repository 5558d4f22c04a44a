//! Head/tail retention of a text by UTF-8 bytes, never splitting a character.

/// What [`head_tail`] kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retained {
    /// The kept head and tail, joined with nothing in between (the whole text when nothing
    /// was omitted).
    pub text: String,
    /// Bytes of the original not in `text`.
    pub omitted: usize,
}

/// Keeps the first `head_bytes` and the last `tail_bytes` bytes of `text`. A character cut
/// by either edge is dropped whole, so `omitted` counts the bytes actually left out.
pub fn head_tail(text: &str, head_bytes: usize, tail_bytes: usize) -> Retained {
    let total = text.len();
    if total <= head_bytes.saturating_add(tail_bytes) {
        return Retained {
            text: text.to_string(),
            omitted: 0,
        };
    }
    let mut head_end = head_bytes;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = total - tail_bytes;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let mut kept = String::with_capacity(head_end + (total - tail_start));
    kept.push_str(&text[..head_end]);
    kept.push_str(&text[tail_start..]);
    Retained {
        omitted: total - head_end - (total - tail_start),
        text: kept,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn short_texts_are_kept_whole() {
        assert_eq!(
            head_tail("abcdef", 3, 3),
            Retained {
                text: "abcdef".into(),
                omitted: 0
            }
        );
    }

    #[test]
    fn the_middle_is_dropped_and_counted() {
        assert_eq!(
            head_tail("abcdefghij", 3, 2),
            Retained {
                text: "abcij".into(),
                omitted: 5
            }
        );
        assert_eq!(
            head_tail("abcdefghij", 0, 0),
            Retained {
                text: String::new(),
                omitted: 10
            }
        );
    }

    #[test]
    fn characters_cut_by_an_edge_are_dropped_whole() {
        // "é" is two bytes: a head of 2 bytes would cut it; the tail start too.
        let got = head_tail("aébcdeéz", 2, 2);
        assert_eq!(
            got,
            Retained {
                text: "az".into(),
                omitted: 8
            }
        );
        for head in 0..12 {
            for tail in 0..12 {
                let text = "ü€😀xyz€ü";
                let r = head_tail(text, head, tail);
                assert_eq!(r.text.len() + r.omitted, text.len(), "{head}/{tail}");
            }
        }
    }
}
