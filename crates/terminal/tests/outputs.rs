//! Canonical values: the `terminal_*` tools and the persistent `bash` declare output
//! schemas, and the value each call reports (what a Code Mode binding resolves to) matches
//! it and carries upstream's fields, while the model-visible text stays the rendering.
//! Real terminals: a local interactive bash on a pseudo-terminal, owned by a real agent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_agent::{AgentOptions, AgentRef, Agents, CreateAgent};
use dsh_kernel::{Catalog, Context, LoadRow, LoadedTree, load_tree};
use dsh_llm::ContentBlock;
use dsh_test_support::json_schema::conforms;
use dsh_tools::{ToolExecution, ToolRegistry, ToolResult};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

struct Harness {
    root: Context,
    _tree: LoadedTree,
    tools: Arc<ToolRegistry>,
    agent: AgentRef,
    next: std::sync::atomic::AtomicU64,
}

fn row(name: &str, config: Value) -> LoadRow {
    LoadRow {
        id: name.rsplit('/').next().unwrap().into(),
        name: name.into(),
        source: "test".into(),
        config,
        children: vec![],
    }
}

impl Harness {
    /// The agent core, local jobs, the terminal service with the local bash backend, and
    /// `tool_row` (the terminal tools or the persistent bash).
    fn new(tool_row: &str) -> Self {
        let mut catalog = Catalog::new();
        dsh_agent::register_core(&mut catalog);
        dsh_jobs::register_catalog(&mut catalog);
        dsh_terminal::register_catalog(&mut catalog);
        let rows = vec![
            row("@deepseek-ai/dsh-llm", Value::Null),
            row("@deepseek-ai/dsh-session", Value::Null),
            row("@deepseek-ai/dsh-tools", Value::Null),
            row("@deepseek-ai/dsh-system-prompt", Value::Null),
            row("@deepseek-ai/dsh-agent", Value::Null),
            row("@deepseek-ai/dsh-agent-loop", Value::Null),
            row("@deepseek-ai/dsh-jobs-local", Value::Null),
            row("@deepseek-ai/dsh-tool-jobs", Value::Null),
            row("@deepseek-ai/dsh-terminal", Value::Null),
            row("@deepseek-ai/dsh-terminal-bash", Value::Null),
            row(tool_row, Value::Null),
        ];
        let root = Context::new_root();
        let tree = load_tree(&root, &catalog, &rows).expect("tree loads");
        let mut request = CreateAgent::fresh(AgentOptions {
            provider: Some("test".into()),
            model: Some("m".into()),
            max_tokens: None,
            reasoning_effort: None,
        });
        request.cwd = Some(std::env::temp_dir());
        let agent = root
            .get::<Agents>()
            .unwrap()
            .create(&root, request)
            .expect("agent");
        Self {
            tools: root.get::<ToolRegistry>().unwrap(),
            root,
            _tree: tree,
            agent,
            next: Default::default(),
        }
    }

    async fn call(&self, name: &str, args: Value) -> ToolResult {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut exec = ToolExecution::new(format!("call_{n}"), name, args, self.root.clone());
        exec.session = Some(self.agent.session().clone());
        exec.cwd = Some(std::env::temp_dir());
        self.tools.execute(exec).await
    }

    /// Calls `name`, checks the value against the declared schema; returns `(value, text)`.
    async fn checked(&self, name: &str, args: Value) -> (Value, String) {
        let result = self.call(name, args).await;
        let text = match result.content.as_slice() {
            [ContentBlock::Text { text }] => text.clone(),
            other => panic!("{name}: expected one text block, got {other:?}"),
        };
        assert!(!result.is_error, "{name} failed: {text}");
        let value = result
            .value
            .unwrap_or_else(|| panic!("{name} reported no value ({text})"));
        let schema = self
            .tools
            .get(&self.root, name)
            .expect("tool registered")
            .output_schema()
            .expect("declares an output schema")
            .clone();
        conforms(&schema, &value, name).unwrap_or_else(|e| panic!("{e}"));
        (value, text)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_tools_report_values_matching_their_declared_schemas() {
    let h = Harness::new("@deepseek-ai/dsh-tool-terminal");

    let (opened, text) = h
        .checked("terminal_open", json!({"type": "shell", "name": "main"}))
        .await;
    let id = opened["sessionId"].as_str().unwrap().to_string();
    assert!(id.starts_with("pty-"), "{opened}");
    assert_eq!(opened["name"], "main");
    assert_eq!(opened["type"], "shell");
    assert_eq!(opened["status"], json!({"kind": "running"}));
    assert_eq!(
        text,
        dsh_terminal::render_open(
            &id,
            Some("main"),
            "shell",
            opened["motd"].as_str().unwrap(),
            262_144
        )
    );

    let (sent, text) = h
        .checked(
            "terminal_send",
            json!({"sessionId": id, "text": "echo VALUE_$((40+2))"}),
        )
        .await;
    assert_eq!(sent["kind"], "foreground");
    assert!(
        sent["viewport"].as_str().unwrap().contains("VALUE_42"),
        "{sent}"
    );
    assert_eq!(sent["sessionStatus"], json!({"kind": "running"}));
    assert!(
        text.starts_with(sent["viewport"].as_str().unwrap()),
        "{text}"
    );
    assert!(
        text.contains(&format!("[wait: {}]", sent["waitReason"].as_str().unwrap())),
        "{text}"
    );

    let (page, text) = h.checked("terminal_read", json!({"sessionId": id})).await;
    assert!(
        page["text"].as_str().unwrap().contains("VALUE_42"),
        "{page}"
    );
    assert!(
        text.ends_with(&format!(
            "[lines: {}-{} of {}]",
            page["lineBegin"], page["lineEnd"], page["totalLines"]
        )),
        "{text}"
    );

    let (listed, _) = h.checked("terminal_list", json!({})).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["sessionId"], id.as_str());
    assert_eq!(listed[0]["name"], "main");
    assert!(listed[0]["pid"].is_u64(), "{listed}");

    let (signalled, text) = h
        .checked(
            "terminal_signal",
            json!({"sessionId": id, "signal": "SIGINT"}),
        )
        .await;
    assert_eq!(signalled["delivered"], true);
    assert_eq!(
        text,
        format!(
            "delivered SIGINT to foreground process group {}",
            signalled["targetPgid"]
        )
    );

    let (background, text) = h
        .checked(
            "terminal_send",
            json!({"sessionId": id, "text": "echo LATER", "run_in_background": true}),
        )
        .await;
    assert_eq!(background["kind"], "background");
    assert_eq!(
        text,
        format!(
            "started background job {}",
            background["jobId"].as_str().unwrap()
        )
    );

    let (closed, text) = h.checked("terminal_close", json!({"sessionId": id})).await;
    assert_eq!(closed, json!({"sessionId": id, "outcome": "closed"}));
    assert_eq!(text, format!("closed terminal session {id}"));
    let (listed, text) = h.checked("terminal_list", json!({})).await;
    assert_eq!(
        (listed, text.as_str()),
        (json!([]), "(no terminal sessions)")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_bash_reports_its_result_text_as_the_value() {
    let h = Harness::new("@deepseek-ai/dsh-tool-bash-persistent");
    assert_eq!(
        h.tools
            .get(&h.root, "bash")
            .unwrap()
            .output_schema()
            .cloned(),
        Some(json!({"type": "string"}))
    );
    let (value, text) = h.checked("bash", json!({"command": "X=$((6*7))"})).await;
    assert_eq!(value, json!(text));
    let (value, text) = h
        .checked("bash", json!({"command": "echo carried $X; false"}))
        .await;
    assert_eq!(value, json!(text));
    assert!(text.contains("carried 42"), "{text}");
    assert!(text.ends_with("[exit code: 1]"), "{text}");
}
