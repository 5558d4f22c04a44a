//! An SSE byte stream, fed in pieces: the first byte picks how many cut points the next
//! bytes encode, so splits land anywhere (inside CRLF, a BOM or a UTF-8 sequence).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 8).min(rest.len());
    let (cut_bytes, body) = rest.split_at(n);
    let mut cuts: Vec<usize> = cut_bytes
        .iter()
        .map(|b| usize::from(*b) * body.len() / 256)
        .collect();
    cuts.sort_unstable();
    let whole = dsh_providers::fuzzing::sse(body, &[]);
    let split = dsh_providers::fuzzing::sse(body, &cuts);
    // Any split of the same bytes yields the same events.
    if let (Ok(a), Ok(b)) = (&whole, &split) {
        assert_eq!(a, b);
    }
});
