//! Bytes a `plugin-host` plugin writes on stdout: bounded line reading and JSON-RPC
//! classification (log notifications, replies, garbage).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = dsh_plugin_host::fuzzing::lines(data, 256);
});
