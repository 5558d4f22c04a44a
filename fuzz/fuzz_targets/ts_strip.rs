//! The TypeScript type stripper of `run_code` (the model writes the input): any text either
//! strips or is refused with an error, never a panic; and stripping only blanks: the output
//! has the input's characters, some replaced by spaces, line breaks kept, so every position
//! an engine error reports still points at what the model wrote.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(stripped) = dsh_code_mode::strip_types(text) {
        assert_eq!(stripped.chars().count(), text.chars().count(), "same length");
        for (i, (a, b)) in text.chars().zip(stripped.chars()).enumerate() {
            assert!(
                a == b || (b == ' ' && a != '\n' && a != '\r'),
                "character {i}: {a:?} became {b:?}"
            );
        }
    }
});
