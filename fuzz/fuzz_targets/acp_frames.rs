//! Bytes on the ACP server's stdin: framing (with a small frame limit) and classification.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    let _ = rt.block_on(dsh_acp::fuzzing::frames(data, 256));
});
