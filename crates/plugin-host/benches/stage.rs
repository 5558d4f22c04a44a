//! Round trip of one waterfall stage through a plugin process: `tools/pre-execute` sent to
//! `tests/test_plugin.py` (python3), which answers `{action: "next"}` — the request line
//! out, the plugin's parse and answer, the reply routed back to the waiting stage.
//! Skips without python3.
//!
//! `cargo bench -p dsh-plugin-host --bench stage`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::Path;

use divan::Bencher;
use dsh_kernel::Context;
use dsh_plugin_host::{RowConfig, Verdict, ask, load};
use dsh_tools::ToolRegistry;
use serde_json::json;

fn main() {
    divan::main();
}

#[divan::bench(sample_count = 2000)]
fn pre_execute_stage_round_trip(bencher: Bencher) {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        eprintln!("skipping: python3 is needed for the test plugin");
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let root = Context::new_root();
    root.provide(ToolRegistry::new()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/test_plugin.py");
    let raw = json!({"command": "python3", "args": [script.display().to_string()]});
    let row: RowConfig = serde_json::from_value(raw.clone()).unwrap();
    let owner = root.child("bench");
    let host = load(&owner, "bench", &row, raw).unwrap();
    let payload =
        json!({"callId": "c1", "name": "native", "arguments": {"text": "x"}, "cwd": null});
    bencher.bench_local(|| {
        let verdict = runtime.block_on(ask(&host, "tools/pre-execute", payload.clone()));
        assert_eq!(verdict, Verdict::Next);
    });
    owner.dispose();
}
