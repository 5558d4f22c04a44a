//! A session log's text: the header line and every record line (packed chunk rows included).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = dsh_session::parse_log(&text);
    for (i, line) in text.lines().enumerate() {
        let _ = dsh_session::decode_line(line, i as u64);
    }
});
