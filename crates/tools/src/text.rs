//! Text measured the way upstream's JavaScript measures it: in UTF-16 code units
//! (`String.prototype.length`). Limits that tools and notices copy from upstream count these
//! units, not bytes or characters.

/// The length of `s` in UTF-16 code units.
pub fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count()
}

/// The longest prefix of `s` of at most `max` UTF-16 code units. A cut never splits a
/// character (a surrogate pair that would straddle `max` is left out whole).
pub fn utf16_prefix(s: &str, max: usize) -> &str {
    let mut units = 0;
    for (i, c) in s.char_indices() {
        units += c.len_utf16();
        if units > max {
            return &s[..i];
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_cuts_in_utf16_units() {
        assert_eq!(utf16_len("héllo"), 5);
        assert_eq!(utf16_len("a😀b"), 4);
        assert_eq!(utf16_prefix("a😀b", 1), "a");
        assert_eq!(utf16_prefix("a😀b", 2), "a");
        assert_eq!(utf16_prefix("a😀b", 3), "a😀");
        assert_eq!(utf16_prefix("a😀b", 9), "a😀b");
        assert_eq!(utf16_prefix("", 0), "");
    }
}
