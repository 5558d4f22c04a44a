//! UTF-8-safe byte bounds: keep the first or last `max` bytes of a text without splitting
//! a code point (a cut never introduces a replacement character).

/// The longest prefix of `text` of at most `max` bytes that ends on a char boundary.
pub fn head_bytes(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The longest suffix of `text` of at most `max` bytes that starts on a char boundary.
pub fn tail_bytes(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// `content + suffix` within `max` bytes: when it does not fit, the content keeps its tail
/// and `omitted` marks the cut (unless the content already ends with it); when even the
/// fixed part does not fit, the tail of the fixed part.
pub fn fit_with_suffix(content: &str, suffix: &str, max: Option<usize>, omitted: &str) -> String {
    let complete = format!("{content}{suffix}");
    let Some(max) = max else { return complete };
    if complete.len() <= max {
        return complete;
    }
    let marker = if content.ends_with(omitted.trim_start()) {
        ""
    } else {
        omitted
    };
    let fixed = format!("{marker}{suffix}");
    if fixed.len() >= max {
        return tail_bytes(&fixed, max).to_string();
    }
    format!("{}{fixed}", tail_bytes(content, max - fixed.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn cuts_never_split_a_code_point() {
        assert_eq!(head_bytes("aé", 2), "a");
        assert_eq!(head_bytes("aé", 3), "aé");
        assert_eq!(tail_bytes("éa", 2), "a");
        assert_eq!(tail_bytes("€", 2), "");
    }

    #[test]
    fn fits_keep_the_tail_and_the_suffix() {
        assert_eq!(fit_with_suffix("abc", "!", None, "\n[x]"), "abc!");
        assert_eq!(fit_with_suffix("abc", "!", Some(4), "\n[x]"), "abc!");
        assert_eq!(fit_with_suffix("abcdefgh", "!", Some(8), "+"), "cdefgh+!");
        assert_eq!(fit_with_suffix("abcdefgh", "!!", Some(3), "+"), "+!!");
        assert_eq!(fit_with_suffix("abcdefgh", "!!", Some(2), "+"), "!!");
        // Already marked: the marker is not repeated.
        assert_eq!(fit_with_suffix("abcd+", "!", Some(4), "+"), "cd+!");
    }
}
