//! The spill policy over the real tool pipeline: big results are saved and previewed, a
//! broken spill area truncates with a marker, `read` and small results pass untouched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_context::spill::{SpillLocalPlugin, SpillPolicyPlugin};
use dsh_kernel::{BoxError, BoxFuture, Context, Plugin, PluginConfig};
use dsh_llm::ToolSchema;
use dsh_session::{LiveSession, SessionHeader, SessionSource, SessionStore, system_clock};
use dsh_tools::{Tool, ToolExecution, ToolOutput, ToolRegistry, ToolRunContext};
use serde_json::{Value, json};

struct Echo {
    schema: ToolSchema,
}

impl Echo {
    fn named(name: &str) -> Arc<Self> {
        Arc::new(Self {
            schema: ToolSchema {
                name: name.into(),
                description: "prints n bytes".into(),
                parameters: Arc::new(json!({"type": "object"})),
            },
        })
    }
}

impl Tool for Echo {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }
    fn execute(
        &self,
        args: Value,
        _run: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let n = args["n"].as_u64().unwrap_or(0) as usize;
        Box::pin(async move { Ok(ToolOutput::text("é".repeat(n / 2))) })
    }
}

fn setup(spill_root: Option<&std::path::Path>) -> (Context, Arc<ToolRegistry>, Arc<LiveSession>) {
    setup_with(spill_root, json!({"maxInlineBytes": 600}))
}

fn setup_with(
    spill_root: Option<&std::path::Path>,
    policy: serde_json::Value,
) -> (Context, Arc<ToolRegistry>, Arc<LiveSession>) {
    let root = Context::new_root();
    let store = SessionStore::new(system_clock());
    root.provide(store.clone()).unwrap();
    let registry = ToolRegistry::new();
    root.provide(registry.clone()).unwrap();
    if let Some(dir) = spill_root {
        let c = PluginConfig::new(
            "spill-local",
            "test",
            json!({"root": dir.to_string_lossy()}),
        );
        SpillLocalPlugin.apply(&root, &c).unwrap();
    }
    let c = PluginConfig::new("spill-policy", "test", policy);
    SpillPolicyPlugin.apply(&root, &c).unwrap();
    registry.register(&root, Echo::named("echo")).unwrap();
    registry.register(&root, Echo::named("read")).unwrap();
    let session = store
        .create(
            &root,
            SessionHeader::new("spill-test", 0),
            SessionSource::Fresh,
        )
        .unwrap();
    (root, registry, session)
}

async fn call(
    root: &Context,
    registry: &ToolRegistry,
    session: &Arc<LiveSession>,
    name: &str,
    n: u64,
) -> String {
    let mut exec = ToolExecution::new("c1", name, json!({"n": n}), root.clone());
    exec.session = Some(session.clone());
    let r = registry.execute(exec).await;
    assert!(!r.is_error);
    r.content.iter().filter_map(|b| b.as_text()).collect()
}

#[tokio::test]
async fn big_results_are_saved_whole_and_previewed_within_the_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, registry, session) = setup(Some(tmp.path()));
    let small = call(&root, &registry, &session, "echo", 600).await;
    assert_eq!(small, "é".repeat(300));
    let text = call(&root, &registry, &session, "echo", 5000).await;
    assert!(text.len() <= 600, "{}", text.len());
    let locator = text
        .split("Full formatted result stored at: ")
        .nth(1)
        .and_then(|t| t.split(". Use read with offset/limit").next())
        .unwrap();
    assert_eq!(std::fs::read_to_string(locator).unwrap(), "é".repeat(2500));
    assert!(locator.ends_with("-echo.txt"), "{locator}");
    assert!(
        text.starts_with("ééé") && text.contains("\n\n(Omitted "),
        "{text}"
    );
    // `read` is never spilled (it is how a spilled file is read back).
    assert_eq!(
        call(&root, &registry, &session, "read", 5000).await.len(),
        5000
    );
}

#[tokio::test]
async fn without_a_spill_area_results_are_truncated_with_a_marker() {
    let (root, registry, session) = setup(None);
    let text = call(&root, &registry, &session, "echo", 5000).await;
    assert!(text.len() <= 600, "{}", text.len());
    assert!(
        text.contains("The complete result could not be saved (no spill store is loaded)"),
        "{text}"
    );
}

/// Upstream 0.2's key: the cap is in estimated tokens (UTF-16 units / 4, plus 4 per block).
#[tokio::test]
async fn the_cap_in_tokens_counts_utf16_units() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, registry, session) = setup_with(Some(tmp.path()), json!({"maxInlineTokens": 154}));
    // 300 × "é" is 600 bytes but 300 UTF-16 units: 75 + 4 tokens, under the cap.
    assert_eq!(
        call(&root, &registry, &session, "echo", 600).await,
        "é".repeat(300)
    );
    // 1200 × "é": 304 tokens, over; the replacement is priced within the cap.
    let text = call(&root, &registry, &session, "echo", 2400).await;
    assert!(text.contains("\n\n(Omitted "), "{text}");
    let units = text.encode_utf16().count();
    assert!(units.div_ceil(4) + 4 <= 154, "{units} units");
    // Both keys: the smaller budget wins; a bad value names its key.
    let bad = PluginConfig::new("spill-policy", "t", json!({"maxInlineTokens": -1}));
    let err = SpillPolicyPlugin
        .apply(&Context::new_root(), &bad)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("maxInlineTokens must be a non-negative integer"),
        "{err}"
    );
}
