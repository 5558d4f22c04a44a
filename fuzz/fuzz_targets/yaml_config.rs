//! A composition layer or settings document, and the same text as a `!!js` expression.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(Some(node)) = dsh_kernel::config::parse(&text) {
        let _ = dsh_kernel::config::emit(&node);
    }
    let _ = dsh_kernel::config::Layer::parse("fuzz", "fuzz.yml", &text);
    let env = dsh_kernel::config::EvalEnv::from_process("/home/fuzz".into());
    let _ = dsh_kernel::config::evaluate(&text, &env);
});
