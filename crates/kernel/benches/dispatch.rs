//! Dispatch cost of the kernel's event modes.
//! Run: `cargo bench -p dsh-kernel --bench dispatch`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dsh_kernel::{Context, EmitEvent, Event, ListenOptions, WaterfallEvent};

struct Ping;
impl Event for Ping {
    const NAME: &'static str = "bench/ping";
    type Payload = u64;
}
impl EmitEvent for Ping {}

struct Decide;
impl Event for Decide {
    const NAME: &'static str = "bench/decide";
    type Payload = u64;
}
impl WaterfallEvent for Decide {
    type Output = u64;
}

fn main() {
    divan::main();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

#[divan::bench(args = [1, 10])]
fn emit(bencher: divan::Bencher, listeners: usize) {
    let ctx = Context::new_root();
    let hits = Arc::new(AtomicU64::new(0));
    for _ in 0..listeners {
        let hits = hits.clone();
        ctx.on_emit::<Ping>(ListenOptions::default(), move |p| {
            hits.fetch_add(*p, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
    }
    bencher
        .counter(divan::counter::ItemsCount::new(1usize))
        .bench_local(|| ctx.emit::<Ping>(divan::black_box(&1)));
}

#[divan::bench(args = [1, 10])]
fn waterfall(bencher: divan::Bencher, listeners: usize) {
    let rt = runtime();
    let ctx = Context::new_root();
    for _ in 0..listeners {
        ctx.on_waterfall::<Decide>(ListenOptions::default(), |_p, next| {
            Box::pin(async move { Ok(next.run().await? + 1) })
        })
        .unwrap();
    }
    let default = |p: &u64| -> dsh_kernel::BoxFuture<'_, Result<u64, dsh_kernel::BoxError>> {
        let v = *p;
        Box::pin(async move { Ok(v) })
    };
    // 100 dispatches per sample inside one `block_on`, so the runtime entry does not count;
    // divan reports the time per dispatch (item).
    bencher
        .counter(divan::counter::ItemsCount::new(100usize))
        .bench_local(|| {
            rt.block_on(async {
                let mut total = 0;
                for _ in 0..100 {
                    total += ctx
                        .waterfall::<Decide, _>(divan::black_box(&1), &default)
                        .await
                        .unwrap();
                }
                total
            })
        });
}
