//! Memory costs: recall over 10,000 entries (full text and newest-first), the prompt text of
//! 100 entries, and one locked write into a file of 10,000 entries. Before the timings it
//! prints the bytes the memory message adds to a prompt per 100 memories.
//!
//! `cargo bench -p dsh-memory --bench memory`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::Path;

use divan::Bencher;
use dsh_memory::{Memory, MemoryConfig, Origin, Scope};

fn main() {
    let (_dir, memory) = filled(100);
    let text = memory.prompt_text().unwrap();
    eprintln!(
        "memory message for 100 memories: {} bytes of text ({} bytes per memory)",
        text.len(),
        text.len() / 100
    );
    divan::main();
}

/// Typical memory lines: a sentence with a command and a tag or two.
fn fact(i: usize) -> String {
    let topics = [
        "tests", "build", "lint", "release", "docs", "style", "deploy", "db",
    ];
    format!(
        "Fact {i}: the {} step runs `make {}-{i}` from the repository root before pushing",
        topics[i % topics.len()],
        topics[(i * 7) % topics.len()]
    )
}

/// A project with `n` workspace memories written the way sessions write them.
fn filled(n: usize) -> (tempfile::TempDir, Memory) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".git")).unwrap();
    let config = MemoryConfig {
        dsh_home: Some(dir.path().join("home").display().to_string()),
        max_prompt_bytes: 1 << 20,
        ..MemoryConfig::default()
    };
    let memory = Memory::new(config, dir.path());
    let origin = Origin {
        by: "model".into(),
        session: Some("session-6f1c2f5e-8a11-4c1e-9d1b-2b7f9a3c4d5e".into()),
        turn: Some(3),
    };
    // Written in one go (the file format is what `remember` writes line by line).
    let mut text = String::from("# Memory\n\n");
    for i in 0..n {
        text.push_str(&format!(
            "- {} <!-- dsh-memory id={:08x} tags=t{} by={} session={} turn=3 at=2026-12-04T18:00:00Z -->\n",
            fact(i),
            i,
            i % 8,
            origin.by,
            origin.session.as_deref().unwrap()
        ));
    }
    write(&memory.path(Scope::Workspace), &text);
    (dir, memory)
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[divan::bench]
fn recall_full_text_over_10000(bencher: Bencher) {
    let (_dir, memory) = filled(10_000);
    bencher.bench(|| memory.recall("release make", &[Scope::Workspace, Scope::User], 10, false));
}

#[divan::bench]
fn recall_newest_over_10000(bencher: Bencher) {
    let (_dir, memory) = filled(10_000);
    bencher.bench(|| memory.recall("", &[Scope::Workspace, Scope::User], 10, false));
}

#[divan::bench]
fn prompt_text_of_100(bencher: Bencher) {
    let (_dir, memory) = filled(100);
    bencher.bench(|| memory.prompt_text());
}

#[divan::bench(sample_count = 20)]
fn remember_into_10000(bencher: Bencher) {
    let (_dir, memory) = filled(10_000);
    let mut i = 0usize;
    bencher.bench_local(|| {
        i += 1;
        let origin = Origin {
            by: "model".into(),
            session: None,
            turn: None,
        };
        memory
            .remember(
                Scope::Workspace,
                &format!("a new fact number {i}"),
                &[],
                origin,
                false,
            )
            .unwrap()
    });
}
