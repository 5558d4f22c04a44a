//! The subagent crate's harness (shared by path: a composed runtime, a scripted model that
//! gives each session its own script) plus the workflow rows and Code Mode.
#![allow(dead_code)]

#[path = "../../../subagent/tests/support/mod.rs"]
mod shared;

use std::sync::Arc;

use dsh_kernel::Catalog;
use dsh_kernel::LoadRow;
use serde_json::{Value, json};
pub use shared::*;

/// What the workflow rows need beside the subagent harness's catalog.
fn workflow_catalog(catalog: &mut Catalog) {
    dsh_workflow::register_catalog(catalog);
    catalog.register(dsh_code_mode::CodeRuntimePlugin);
}

/// The workflow rows with `engine` as the engine row's config.
pub fn workflow_rows(engine: Value) -> Vec<LoadRow> {
    vec![
        plain_row(
            "workflow-worker-thread",
            "@deepseek-ai/dsh-workflow-worker-thread",
            engine,
        ),
        plain_row(
            "tool-workflow",
            "@deepseek-ai/dsh-tool-workflow",
            Value::Null,
        ),
        plain_row(
            "tool-ralph",
            "@deepseek-ai/dsh-tool-ralph",
            json!({"maxRounds": 8}),
        ),
    ]
}

impl Harness {
    /// The base rows plus the workflow rows.
    pub fn workflows(engine: Value) -> Self {
        let mut rows = base_rows();
        rows.extend(workflow_rows(engine));
        Self::with_rows(rows, workflow_catalog)
    }

    /// The workflow rows with Code Mode on (`run_code` beside the native tools).
    pub fn code_mode() -> Self {
        let mut rows = base_rows();
        for r in rows.iter_mut() {
            if r.id == "tools" {
                r.config = json!({"mode": "both"});
            }
        }
        rows.push(plain_row(
            "code-runtime",
            "@deepseek-ai/dsh-code-runtime-worker-thread",
            Value::Null,
        ));
        rows.extend(workflow_rows(json!({})));
        Self::with_rows(rows, workflow_catalog)
    }

    pub fn engine(&self) -> Arc<dsh_workflow::WorkflowEngine> {
        self.root.get::<dsh_workflow::WorkflowEngine>().unwrap()
    }
}
