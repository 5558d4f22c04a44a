//! Harness overhead per step: a zero-latency scripted model, a no-op tool, the in-memory
//! log (no persistence), the invariant check off (as in release builds).
//! Run: `cargo bench -p dsh-agent --bench step`
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use dsh_llm::Message;
use serde_json::json;
use support::{Harness, calls, text};

const STEPS: usize = 20;

fn main() {
    divan::main();
}

/// One turn of `STEPS` tool steps plus a final answer; divan reports the time per turn,
/// divide by `STEPS + 1` for the per-step overhead. `threads` is the runtime's worker
/// count: 0 is tokio's current-thread runtime (what the headless `dsh` uses), 2 the
/// multi-thread runtime `dsh acp` serves on.
#[divan::bench(args = [0, 2], sample_count = 100)]
fn turn_of_20_tool_steps(bencher: divan::Bencher, threads: usize) {
    let rt = if threads == 0 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    }
    .enable_all()
    .build()
    .unwrap();
    bencher
        .with_inputs(|| {
            let _guard = rt.enter();
            let h = Harness::with(
                dsh_kernel::Catalog::new(),
                &[(
                    "agent-loop",
                    "@deepseek-ai/dsh-agent-loop",
                    json!({"checkInvariants": false}),
                )],
            );
            for i in 0..STEPS {
                h.model
                    .push(calls(&[(&format!("c{i}"), "echo", json!({"text": "x"}))]));
            }
            h.model.push(text("done"));
            let agent = h.agent();
            (h, agent)
        })
        .bench_local_values(|(h, agent)| {
            rt.block_on(async {
                agent.followup(Message::user_text("go")).unwrap();
                agent.when_idle().await;
            });
            // Returned, so divan drops the harness outside the timed region.
            (h, agent)
        });
}
