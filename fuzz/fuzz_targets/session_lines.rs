//! A session log's text: the header line and every record line (packed chunk rows
//! included), in format v0 and, when the header says so, v4 (the default format).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = dsh_session::parse_log(&text);
    let _ = dsh_session::v4::parse_any_log(&text);
    for (i, line) in text.lines().enumerate() {
        let _ = dsh_session::decode_line(line, i as u64);
    }
});
