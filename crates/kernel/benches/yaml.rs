//! Parsing and composing config documents with large mappings (the parser must stay linear
//! in the number of keys). Run: `cargo bench -p dsh-kernel --bench yaml`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::config::{Layer, compose, parse};

fn main() {
    divan::main();
}

/// A settings-style document: one section with `keys` keys.
fn section(keys: usize) -> String {
    let mut text = String::from("section:\n");
    for i in 0..keys {
        text.push_str(&format!("  key{i}: value {i}\n"));
    }
    text
}

/// A patch layer: one row whose config has `keys` keys, then `rows` small rows.
fn layer(keys: usize, rows: usize) -> String {
    let mut text = String::from("- insert:\n  - id: big\n    name: '@x/big'\n    config:\n");
    for i in 0..keys {
        text.push_str(&format!("      key{i}: {i}\n"));
    }
    for i in 0..rows {
        text.push_str(&format!("  - {{id: row{i}, name: '@x/row'}}\n"));
    }
    text
}

#[divan::bench(args = [1_000, 10_000, 99_000], sample_count = 5, sample_size = 1)]
fn parse_mapping(bencher: divan::Bencher, keys: usize) {
    let text = section(keys);
    bencher.bench(|| parse(divan::black_box(&text)).unwrap());
}

#[divan::bench(args = [1_000, 10_000, 30_000], sample_count = 5, sample_size = 1)]
fn compose_rows(bencher: divan::Bencher, rows: usize) {
    let text = layer(1_000, rows);
    bencher.bench(|| {
        let layer = Layer::parse("bench", "bench.yml", divan::black_box(&text)).unwrap();
        compose(&[layer]).unwrap()
    });
}
