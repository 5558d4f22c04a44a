//! Bytes a product subagent (Codex app-server, an ACP agent, a dsh SDK runtime) writes on
//! stdout: bounded line reading, JSON-RPC classification and the reply to a request.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    let _ = rt.block_on(dsh_subagent_product::fuzzing::lines(data, 256));
});
