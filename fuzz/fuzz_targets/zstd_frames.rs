//! A compressed (and a plain) log's bytes through the loader's scanner and frame decoder.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = dsh_persistence::fuzzing::frames(data);
    let _ = dsh_persistence::fuzzing::scan_log(data, true);
    let _ = dsh_persistence::fuzzing::scan_log(data, false);
});
