//! Bytes a language server writes: `Content-Length` framing (headers, bodies, limits) read
//! through buffers of every small size, as the LSP client reads them.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&capacity, rest)) = data.split_first() else {
        return;
    };
    let mut reader = std::io::BufReader::with_capacity(usize::from(capacity).max(1), rest);
    // At most one message per input byte: a reader that returns without consuming would
    // otherwise spin here instead of being reported.
    for _ in 0..=rest.len() {
        match dsh_lsp::read_message(&mut reader, 4096) {
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return,
        }
    }
    panic!("read more messages than there were bytes");
});
