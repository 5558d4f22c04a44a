//! Loading composed rows: unknown plugins and failing plugins leave nothing registered;
//! rows waiting for a service load once it is provided.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_kernel::{
    BoxError, Catalog, Context, EmitEvent, Event, ListenOptions, LoadRow, Plugin, PluginConfig,
    load_tree,
};
use pretty_assertions::assert_eq;

struct Ping;
impl Event for Ping {
    const NAME: &'static str = "test/ping";
    type Payload = ();
}
impl EmitEvent for Ping {}

struct Store;

struct Provider;
impl Plugin for Provider {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-store"
    }
    fn apply(&self, ctx: &Context, _c: &PluginConfig) -> Result<(), BoxError> {
        ctx.provide(Arc::new(Store))?;
        ctx.on_emit::<Ping>(ListenOptions::default(), |_| Ok(()))?;
        Ok(())
    }
}

struct Consumer;
impl Plugin for Consumer {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-consumer"
    }
    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        ctx.on_emit::<Ping>(ListenOptions::default(), |_| Ok(()))?;
        ctx.require::<Store>()?;
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct C {
            #[serde(default)]
            limit: u32,
        }
        let _c: C = config.parse()?;
        Ok(())
    }
}

struct Failing;
impl Plugin for Failing {
    fn name(&self) -> &'static str {
        "failing"
    }
    fn apply(&self, ctx: &Context, _c: &PluginConfig) -> Result<(), BoxError> {
        ctx.on_emit::<Ping>(ListenOptions::default(), |_| Ok(()))?;
        Err("refused".into())
    }
}

fn row(id: &str, name: &str, config: serde_json::Value) -> LoadRow {
    LoadRow {
        id: id.into(),
        name: name.into(),
        source: "test.yml".into(),
        config,
        children: vec![],
    }
}

fn catalog() -> Catalog {
    let mut c = Catalog::new();
    c.register(Provider).register(Consumer).register(Failing);
    c
}

#[test]
fn a_row_waiting_for_a_service_loads_after_its_provider() {
    let root = Context::new_root();
    let rows = [
        row("consumer", "consumer", serde_json::Value::Null),
        row("store", "@deepseek-ai/dsh-store", serde_json::Value::Null),
    ];
    let tree = load_tree(&root, &catalog(), &rows).unwrap();
    assert_eq!(tree.row_ids(), ["store", "consumer"]);
    assert_eq!(root.listener_count(), 2);
    // Active plugins are named canonically (rows may use short names), in load order.
    assert_eq!(
        root.active_plugins(),
        ["@deepseek-ai/dsh-store", "@deepseek-ai/dsh-consumer"]
    );
    tree.unload();
    assert_eq!((root.listener_count(), root.service_count()), (0, 0));
    assert!(root.active_plugins().is_empty());
}

#[test]
fn failures_name_the_row_and_leave_nothing_registered() {
    let root = Context::new_root();
    let cases = [
        (
            vec![
                row("store", "dsh-store", serde_json::Value::Null),
                row("x", "nope", serde_json::Value::Null),
            ],
            "test.yml: row \"x\": unknown plugin \"nope\"",
        ),
        (
            vec![
                row("store", "store", serde_json::Value::Null),
                row("bad", "failing", serde_json::Value::Null),
            ],
            "test.yml: row \"bad\" (failing): refused",
        ),
        (
            vec![row("c", "consumer", serde_json::Value::Null)],
            "requires service",
        ),
        (
            vec![
                row("store", "store", serde_json::Value::Null),
                row("c", "consumer", serde_json::json!({"limit": "many"})),
            ],
            "test.yml: row \"c\" (consumer): config field `limit`: invalid type: string \"many\", expected u32",
        ),
    ];
    for (rows, expected) in cases {
        let err = match load_tree(&root, &catalog(), &rows) {
            Ok(_) => panic!("{expected}: loaded"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(expected), "{err}");
        assert_eq!(
            (root.listener_count(), root.service_count()),
            (0, 0),
            "{expected}: nothing half-loaded"
        );
        assert!(root.active_plugins().is_empty(), "{expected}");
    }
}
