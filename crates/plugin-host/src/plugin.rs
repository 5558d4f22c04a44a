//! The `plugin-host` row: config, the handshake's registration, and what each registered
//! stage, tool, section and event listener does. Everything is an effect of the row.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dsh_agent::Request;
use dsh_kernel::{BoxError, BoxFuture, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::{ContentBlock, LlmCallConfig, ToolSchema};
use dsh_tools::{
    PostExecute, PostToolDecision, PreExecute, PreToolDecision, Tool, ToolExecution, ToolOutput,
    ToolRegistry, ToolResult, ToolResultEvent, ToolRunContext,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::host::{Host, HostConfig};

/// The protocol version sent in `initialize`.
pub const PROTOCOL_VERSION: u64 = 1;

/// The waterfall stages a plugin may take part in.
pub const STAGES: &[&str] = &["agent/request", "tools/pre-execute", "tools/post-execute"];
/// The emit events a plugin may listen to.
pub const EVENTS: &[&str] = &["tools/result"];

/// The row's config.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RowConfig {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default)]
    pub restart: RestartConfig,
}

/// `restart: {maxRestarts, backoffMs}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestartConfig {
    #[serde(default = "default_max_restarts")]
    pub max_restarts: u32,
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: u64,
}

impl Default for RestartConfig {
    fn default() -> Self {
        Self {
            max_restarts: default_max_restarts(),
            backoff_ms: default_backoff_ms(),
        }
    }
}

fn default_timeout_ms() -> u64 {
    5000
}
fn default_max_restarts() -> u32 {
    3
}
fn default_backoff_ms() -> u64 {
    200
}

/// What a plugin registers, from its answer to `initialize`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Registration {
    #[serde(default)]
    pub tools: Vec<ToolDecl>,
    #[serde(default)]
    pub sections: Vec<SectionDecl>,
    #[serde(default)]
    pub events: Vec<String>,
    #[serde(default)]
    pub stages: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDecl {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "empty_object_schema")]
    pub input_schema: Value,
}

fn empty_object_schema() -> Value {
    json!({"type": "object", "properties": {}})
}

#[derive(Clone, Debug, Deserialize)]
pub struct SectionDecl {
    pub name: String,
    pub text: String,
    #[serde(default = "default_order")]
    pub order: f64,
}

fn default_order() -> f64 {
    500.0
}

/// `dsh-plugin-host` (`plugin-host`): one external plugin process per row.
pub struct PluginHostPlugin;

impl Plugin for PluginHostPlugin {
    fn name(&self) -> &'static str {
        "dsh-plugin-host"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["@dsh/plugin-host"]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: RowConfig = config.parse()?;
        load(ctx, &config.row_id, &row, config.raw().clone())?;
        Ok(())
    }
}

/// Starts the plugin of `row` as an effect of `ctx` and registers what it declares.
/// Returns the host (tests and benches look at its pid and restarts).
pub fn load(
    ctx: &Context,
    row_id: &str,
    row: &RowConfig,
    raw_config: Value,
) -> Result<Arc<Host>, BoxError> {
    if row.command.trim().is_empty() {
        return Err("config field `command`: must not be empty".into());
    }
    if row.timeout_ms == 0 {
        return Err("config field `timeoutMs`: must be positive".into());
    }
    let label = format!("plugin-host({row_id})");
    let cfg = HostConfig {
        label: label.clone(),
        command: row.command.clone(),
        args: row.args.clone(),
        env: row
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        cwd: row.cwd.as_ref().map(PathBuf::from),
        timeout: Duration::from_millis(row.timeout_ms),
        max_restarts: row.restart.max_restarts,
        backoff: Duration::from_millis(row.restart.backoff_ms),
        initialize: json!({
            "protocolVersion": PROTOCOL_VERSION,
            "rowId": row_id,
            "config": raw_config,
        }),
    };
    let (host, answer) = Host::start(cfg).map_err(|e| format!("{label}: {e}"))?;
    let h = host.clone();
    ctx.effect("plugin process", move || h.stop())?;
    let registration: Registration = serde_json::from_value(answer)
        .map_err(|e| format!("{label}: invalid answer to `initialize`: {e}"))?;
    for stage in &registration.stages {
        if !STAGES.contains(&stage.as_str()) {
            return Err(format!(
                "{label}: unknown stage \"{stage}\" (known: {})",
                STAGES.join(", ")
            )
            .into());
        }
    }
    for event in &registration.events {
        if !EVENTS.contains(&event.as_str()) {
            return Err(format!(
                "{label}: unknown event \"{event}\" (known: {})",
                EVENTS.join(", ")
            )
            .into());
        }
    }
    if !registration.tools.is_empty() {
        register_tools(ctx, &label, &registration.tools, &host)?;
    }
    if !registration.sections.is_empty() {
        match ctx.get::<dsh_prompt::SystemPrompt>() {
            Some(prompt) => {
                for s in &registration.sections {
                    let text = s.text.clone();
                    prompt.section(
                        ctx,
                        &format!("plugin:{row_id}:{}", s.name),
                        s.order,
                        Arc::new(move |_| text.clone()),
                    )?;
                }
            }
            None => tracing::warn!("{label}: no system prompt in this tree; sections ignored"),
        }
    }
    let opts = ListenOptions::default();
    for stage in &registration.stages {
        register_stage(ctx, opts, stage, host.clone())?;
    }
    for event in &registration.events {
        if event == "tools/result" {
            let h = host.clone();
            ctx.on_emit::<ToolResultEvent>(opts, move |p| {
                let mut payload = exec_json(&p.exec);
                payload["result"] = result_json(&p.result);
                h.notify("event", json!({"type": "tools/result", "payload": payload}));
                Ok(())
            })?;
        }
    }
    Ok(host)
}

/// Registers the tools the plugin declares; each call goes to the plugin process.
fn register_tools(
    ctx: &Context,
    label: &str,
    decls: &[ToolDecl],
    host: &Arc<Host>,
) -> Result<(), BoxError> {
    let tools = ctx.require::<ToolRegistry>()?;
    for decl in decls {
        if !valid_tool_name(&decl.name) {
            return Err(format!(
                "{label}: invalid tool name \"{}\" (1-64 of A-Z a-z 0-9 _ -)",
                decl.name
            )
            .into());
        }
        if decl.input_schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(format!(
                "{label}: tool \"{}\": inputSchema is not an object schema",
                decl.name
            )
            .into());
        }
        tools
            .register(
                ctx,
                Arc::new(PluginTool {
                    schema: ToolSchema {
                        name: decl.name.clone(),
                        description: decl.description.clone(),
                        parameters: Arc::new(decl.input_schema.clone()),
                    },
                    host: host.clone(),
                }),
            )
            .map_err(|e| format!("{label}: {e}"))?;
    }
    Ok(())
}

/// Puts the plugin in the chain of one stage it asked for (`stage` is one of [`STAGES`]).
fn register_stage(
    ctx: &Context,
    opts: ListenOptions,
    stage: &str,
    h: Arc<Host>,
) -> Result<(), BoxError> {
    match stage {
        "tools/pre-execute" => {
            ctx.on_waterfall::<PreExecute>(opts, move |exec, next| {
                let h = h.clone();
                Box::pin(async move {
                    let verdict = ask(&h, "tools/pre-execute", exec_json(exec)).await;
                    match verdict {
                        Verdict::Next => next.run().await,
                        Verdict::ShortCircuit(v) => match pre_decision(&v) {
                            Ok(d) => Ok(d),
                            Err(e) => {
                                invalid(&h, "tools/pre-execute", &e);
                                next.run().await
                            }
                        },
                        Verdict::Replace(v) => {
                            let downstream = next.run().await?;
                            if downstream != PreToolDecision::Allow {
                                return Ok(downstream);
                            }
                            Ok(pre_decision(&v).unwrap_or_else(|e| {
                                invalid(&h, "tools/pre-execute", &e);
                                downstream
                            }))
                        }
                    }
                })
            })?;
        }
        "tools/post-execute" => {
            ctx.on_waterfall::<PostExecute>(opts, move |p, next| {
                let h = h.clone();
                Box::pin(async move {
                    let mut payload = exec_json(&p.exec);
                    payload["result"] = result_json(&p.result);
                    match ask(&h, "tools/post-execute", payload).await {
                        Verdict::Next => next.run().await,
                        Verdict::ShortCircuit(v) => match post_decision(&v, Vec::new()) {
                            Ok(d) => Ok(d),
                            Err(e) => {
                                invalid(&h, "tools/post-execute", &e);
                                next.run().await
                            }
                        },
                        Verdict::Replace(v) => {
                            let downstream = next.run().await?;
                            let PostToolDecision::Accept {
                                content: None,
                                additional_contexts,
                            } = &downstream
                            else {
                                return Ok(downstream);
                            };
                            Ok(
                                post_decision(&v, additional_contexts.clone()).unwrap_or_else(
                                    |e| {
                                        invalid(&h, "tools/post-execute", &e);
                                        downstream
                                    },
                                ),
                            )
                        }
                    }
                })
            })?;
        }
        "agent/request" => {
            ctx.on_waterfall::<Request>(opts, move |p, next| {
                let h = h.clone();
                Box::pin(async move {
                    let payload = json!({"turn": p.turn, "step": p.step});
                    match ask(&h, "agent/request", payload).await {
                        Verdict::Next => next.run().await,
                        Verdict::ShortCircuit(v) => {
                            match serde_json::from_value::<LlmCallConfig>(v) {
                                Ok(c) => Ok(c),
                                Err(e) => {
                                    invalid(&h, "agent/request", &e.to_string());
                                    next.run().await
                                }
                            }
                        }
                        Verdict::Replace(v) => {
                            let downstream = next.run().await?;
                            Ok(merge_config(&downstream, &v).unwrap_or_else(|e| {
                                invalid(&h, "agent/request", &e);
                                downstream
                            }))
                        }
                    }
                })
            })?;
        }
        _ => {}
    }
    Ok(())
}

fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A plugin's answer to one stage.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Next,
    Replace(Value),
    ShortCircuit(Value),
}

/// Sends one stage; any failure (crash, timeout, garbage, an unknown action) is logged and
/// the stage passes through.
pub async fn ask(host: &Host, stage: &str, payload: Value) -> Verdict {
    let answer = match host.call(stage, payload).await {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(
                "{}: stage {stage} failed ({e}); continuing as `next`",
                host.label()
            );
            return Verdict::Next;
        }
    };
    match parse_verdict(&answer) {
        Ok(v) => v,
        Err(e) => {
            invalid(host, stage, &e);
            Verdict::Next
        }
    }
}

fn invalid(host: &Host, stage: &str, error: &str) {
    tracing::error!(
        "{}: invalid answer to stage {stage} ({error}); continuing as `next`",
        host.label()
    );
}

/// `{action: "next" | "replace" | "short-circuit", value?}`.
pub fn parse_verdict(answer: &Value) -> Result<Verdict, String> {
    let action = answer
        .get("action")
        .and_then(Value::as_str)
        .ok_or("no `action`")?;
    let value = || answer.get("value").cloned().ok_or("no `value`");
    match action {
        "next" => Ok(Verdict::Next),
        "replace" => Ok(Verdict::Replace(value()?)),
        "short-circuit" => Ok(Verdict::ShortCircuit(value()?)),
        other => Err(format!("unknown action \"{other}\"")),
    }
}

fn exec_json(exec: &ToolExecution) -> Value {
    json!({
        "callId": exec.call_id,
        "name": exec.name,
        "arguments": exec.arguments,
        "cwd": exec.cwd.as_ref().map(|p| p.display().to_string()),
    })
}

fn content_text(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn result_json(result: &ToolResult) -> Value {
    json!({"isError": result.is_error, "content": content_text(&result.content)})
}

/// `{decision: "allow"} | {decision: "deny", reason} | {decision: "ask", reason?}`.
pub fn pre_decision(value: &Value) -> Result<PreToolDecision, String> {
    let reason = value
        .get("reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    match value.get("decision").and_then(Value::as_str) {
        Some("allow") => Ok(PreToolDecision::Allow),
        Some("deny") => Ok(PreToolDecision::Deny {
            reason: reason.unwrap_or_else(|| "denied by a plugin".into()),
        }),
        Some("ask") => Ok(PreToolDecision::Ask { reason }),
        _ => Err("`value.decision` is not allow, deny or ask".into()),
    }
}

/// `{decision: "accept", content?}` | `{decision: "block", feedback}`.
fn post_decision(
    value: &Value,
    additional_contexts: Vec<dsh_llm::Message>,
) -> Result<PostToolDecision, String> {
    let text = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .map(ContentBlock::text)
    };
    match value.get("decision").and_then(Value::as_str) {
        Some("accept") => Ok(PostToolDecision::Accept {
            content: text("content").map(|b| vec![b]),
            additional_contexts,
        }),
        Some("block") => Ok(PostToolDecision::Block {
            feedback: vec![text("feedback").ok_or("`value.feedback` is not a string")?],
            additional_contexts,
        }),
        _ => Err("`value.decision` is not accept or block".into()),
    }
}

/// The downstream config with the fields of `patch` laid over it.
fn merge_config(config: &LlmCallConfig, patch: &Value) -> Result<LlmCallConfig, String> {
    let Value::Object(patch) = patch else {
        return Err("`value` is not an object".into());
    };
    let mut merged = serde_json::to_value(config).map_err(|e| e.to_string())?;
    if let Value::Object(m) = &mut merged {
        for (k, v) in patch {
            m.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(merged).map_err(|e| e.to_string())
}

/// A tool the plugin registered; calls are `tool/execute` requests.
struct PluginTool {
    schema: ToolSchema,
    host: Arc<Host>,
}

impl Tool for PluginTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let host = self.host.clone();
        let name = self.schema.name.clone();
        Box::pin(async move {
            let params = json!({"name": name, "arguments": args, "callId": ctx.call_id});
            let answer = tokio::select! {
                a = host.call("tool/execute", params) => a,
                () = ctx.cancel.cancelled() => return Err("tool call aborted".into()),
            };
            let answer = answer.map_err(|e| -> BoxError {
                format!("plugin tool \"{name}\" failed: {e}").into()
            })?;
            let text = match answer.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(blocks)) => blocks
                    .iter()
                    .filter_map(|b| b.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => {
                    return Err(format!(
                        "plugin tool \"{name}\" failed: the answer has no `content`"
                    )
                    .into());
                }
            };
            if answer.get("isError").and_then(Value::as_bool) == Some(true) {
                return Err(text.into());
            }
            Ok(ToolOutput::text(text))
        })
    }
}
