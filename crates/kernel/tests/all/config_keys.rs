//! Config keys are never ignored without a word: a key the plugin's parser does not take,
//! a key given to a plugin that reads no config, and a key upstream 0.2 takes that this
//! build does not are all load errors naming the row and the key. Probing records what
//! each plugin takes without running it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::config_shape::{ConfigShape, probe_rows};
use dsh_kernel::{BoxError, Catalog, Context, LoadRow, Plugin, PluginConfig, load_tree};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct Inner {
    depth: Option<u32>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct Typed {
    limit: Option<u32>,
    inner: Option<Inner>,
}

struct TypedPlugin;
impl Plugin for TypedPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-typed"
    }
    fn apply(&self, _ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let _: Typed = config.parse()?;
        Ok(())
    }
    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[("cacheSize", "nothing is cached here")]
    }
    fn upstream_keys_without_effect(&self) -> &'static [(&'static str, &'static str)] {
        &[("pollMs", "nothing is polled here")]
    }
}

struct NoConfig;
impl Plugin for NoConfig {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-plain"
    }
    fn apply(&self, _ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        Ok(())
    }
}

struct SelfChecked;
impl Plugin for SelfChecked {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-checked"
    }
    fn apply(&self, _ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let _ = config.raw_keys(&["a", "b"]);
        Ok(())
    }
}

fn catalog() -> Catalog {
    let mut c = Catalog::new();
    c.register(TypedPlugin)
        .register(NoConfig)
        .register(SelfChecked);
    c
}

fn row(id: &str, name: &str, config: Value) -> LoadRow {
    LoadRow {
        id: id.into(),
        name: name.into(),
        source: "patch.yml".into(),
        config,
        children: vec![],
    }
}

fn load_error(rows: &[LoadRow]) -> String {
    let root = Context::new_root();
    match load_tree(&root, &catalog(), rows) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn known_keys_load_and_null_counts_as_absent() {
    let rows = [
        row(
            "t",
            "typed",
            json!({"limit": 3, "inner": {"depth": 1}, "stale": null}),
        ),
        row("p", "plain", json!({"unset": null})),
        row("c", "checked", json!({"anything": 1})),
    ];
    assert_eq!(load_error(&rows), "");
}

#[test]
fn an_unknown_key_is_named_with_its_row_at_any_depth() {
    let top = load_error(&[row("t", "typed", json!({"limt": 3}))]);
    assert!(
        top.contains("row \"t\"") && top.contains("`limt`") && top.contains("unknown key"),
        "{top}"
    );
    let nested = load_error(&[row("t", "typed", json!({"inner": {"dept": 1}}))]);
    assert!(nested.contains("`inner.dept`"), "{nested}");
    let two = load_error(&[row("t", "typed", json!({"x": 1, "y": 2}))]);
    assert!(two.contains("and 1 more unknown key"), "{two}");
}

#[test]
fn an_upstream_key_without_effect_is_accepted_and_not_passed_on() {
    // The plugin's strict parser never sees the key (it would refuse it).
    assert_eq!(
        load_error(&[row("t", "typed", json!({"pollMs": 150, "limit": 1}))]),
        ""
    );
}

#[test]
fn a_plugin_that_reads_no_config_refuses_every_key() {
    let e = load_error(&[row("p", "plain", json!({"verbose": true}))]);
    assert!(
        e.contains("row \"p\"") && e.contains("`verbose`") && e.contains("takes no config"),
        "{e}"
    );
}

#[test]
fn an_upstream_key_this_build_lacks_is_refused_with_its_reason() {
    let e = load_error(&[row("t", "typed", json!({"cacheSize": 10}))]);
    assert!(
        e.contains("`cacheSize`")
            && e.contains("upstream 0.2")
            && e.contains("nothing is cached here"),
        "{e}"
    );
}

#[test]
fn probing_records_what_each_plugin_takes() {
    let root = Context::new_root();
    let rows = [
        row("t", "typed", Value::Null),
        row("p", "plain", Value::Null),
        row("c", "checked", Value::Null),
    ];
    let shapes: Vec<_> = probe_rows(&root, &catalog(), &rows)
        .into_iter()
        .map(|r| (r.id, r.shape.unwrap()))
        .collect();
    assert_eq!(
        shapes,
        vec![
            ("t".to_string(), ConfigShape::Fields(vec!["limit", "inner"])),
            ("p".to_string(), ConfigShape::Empty),
            ("c".to_string(), ConfigShape::Fields(vec!["a", "b"])),
        ]
    );
}
