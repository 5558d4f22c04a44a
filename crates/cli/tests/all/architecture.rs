//! ARCHITECTURE.md draws the workspace's build floors; this recomputes them from
//! `cargo metadata` and fails when the drawing and Cargo disagree.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

type Floors = BTreeMap<usize, BTreeSet<String>>;

/// The floors of the workspace's packages: 0 without workspace dependencies, else one above
/// the highest of them (normal and build dependencies).
fn floors_from_cargo(root: &Path) -> Floors {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let names: BTreeSet<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let deps: BTreeMap<&str, Vec<&str>> = packages
        .iter()
        .map(|p| {
            let uses = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null() || d["kind"] == "build")
                .map(|d| d["name"].as_str().unwrap())
                .filter(|n| names.contains(n))
                .collect();
            (p["name"].as_str().unwrap(), uses)
        })
        .collect();
    fn floor<'a>(
        name: &'a str,
        deps: &BTreeMap<&'a str, Vec<&'a str>>,
        seen: &mut BTreeMap<&'a str, usize>,
    ) -> usize {
        if let Some(f) = seen.get(name) {
            return *f;
        }
        let f = deps[name]
            .iter()
            .map(|d| floor(d, deps, seen) + 1)
            .max()
            .unwrap_or(0);
        seen.insert(name, f);
        f
    }
    let mut seen = BTreeMap::new();
    let mut floors = Floors::new();
    for name in &names {
        let f = floor(name, &deps, &mut seen);
        let short = name.strip_prefix("dsh-").unwrap_or(name);
        floors.entry(f).or_default().insert(short.to_string());
    }
    floors
}

/// The ```floors block of ARCHITECTURE.md.
fn floors_drawn(text: &str) -> Floors {
    let start = text
        .find("```floors\n")
        .expect("ARCHITECTURE.md has a ```floors block")
        + 10;
    let end = start + text[start..].find("```").unwrap();
    text[start..end]
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut words = l.split_whitespace();
            let floor = words.next().unwrap().parse().unwrap();
            (floor, words.map(String::from).collect())
        })
        .collect()
}

fn block(floors: &Floors) -> String {
    floors
        .iter()
        .map(|(f, names)| {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            format!("{f:<3} {}\n", names.join(" "))
        })
        .collect()
}

#[test]
fn the_drawn_floors_are_cargos() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let real = floors_from_cargo(&root);
    let drawn = floors_drawn(&text);
    assert!(
        drawn == real,
        "ARCHITECTURE.md's floors disagree with cargo metadata; the block should read:\n```floors\n{}```",
        block(&real)
    );
}
