//! The control tools: `send_message` and `interrupt_agent`
//! (`@deepseek-ai/dsh-tool-subagent-control`), `list_agents`
//! (`@deepseek-ai/dsh-tool-subagent-control/list-agents`) and `report`
//! (`@deepseek-ai/dsh-tool-subagent-report`, installed in continuable children only).

use std::sync::Arc;

use dsh_agent::{AgentRef, AgentStatus, Agents};
use dsh_kernel::{BoxError, BoxFuture, Context, Plugin, PluginConfig};
use dsh_llm::{ContentBlock, ToolSchema};
use dsh_persistence::SessionFiles;
use dsh_prompt::SystemPrompt;
use dsh_session::SessionStore;
use dsh_tools::{ObjectSchema, Prop, Tool, ToolOutput, ToolRegistry, ToolRunContext};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::continuation::{InterruptAuthority, ReportDelivery, coordinator_source};
use crate::descriptor::Descriptor;
use crate::listing::{ChildEntry, list_children};
use crate::service::Subagents;

#[derive(Clone, Copy)]
enum Which {
    SendMessage,
    Interrupt,
    ListAgents,
    Report(ReportDelivery),
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::SendMessage => "send_message",
            Which::Interrupt => "interrupt_agent",
            Which::ListAgents => "list_agents",
            Which::Report(_) => "report",
        }
    }
}

struct ControlTool {
    which: Which,
    schema: ToolSchema,
    params: ObjectSchema,
    ctx: Context,
}

fn build(which: Which, ctx: &Context) -> ControlTool {
    let (description, params) = match which {
        Which::SendMessage => (
            "Give one of your continuable background subagents another turn: the message is queued as its next turn, in order, whether it is working, idle or only stored. Use the id the subagent tool returned.",
            ObjectSchema::new()
                .required("agent_id", Prop::string("The durable id of a subagent you started."))
                .required("message", Prop::string("What the subagent should do next; it keeps its own conversation so far.")),
        ),
        Which::Interrupt => (
            "Stop what a background subagent below you is doing right now. Messages already queued for it stay queued; it is not deleted and can be continued later.",
            ObjectSchema::new().required(
                "agent_id",
                Prop::string("The id of a subagent you started, or of one started below it."),
            ),
        ),
        Which::ListAgents => (
            "List the continuable background subagents you started, with their ids and labels, to recall what exists (you are told when one finishes, so do not poll). running: working now; idle: loaded, between turns; ready: only stored, continue it with send_message. Children that cannot be read show as diagnostics. With scope `descendants` the whole tree below you is listed in pre-order with each entry's parent id and depth; only depth-1 entries accept send_message, deeper ones only interrupt_agent.",
            ObjectSchema::new().optional(
                "scope",
                Prop::enumeration(
                    "children (the default): your direct subagents; descendants: everything below you.",
                    &["children", "descendants"],
                ),
            ),
        ),
        Which::Report(_) => (
            "Send an interim result to the agent that started you while you keep working. Your final answer reaches it anyway when you finish; use this for findings it needs sooner.",
            ObjectSchema::new().required("output", Prop::string("What to tell the agent that started you.")),
        ),
    };
    ControlTool {
        which,
        schema: ToolSchema {
            name: which.name().into(),
            description: description.into(),
            parameters: params.to_value().into(),
        },
        params,
        ctx: ctx.clone(),
    }
}

fn text_arg(args: &Value, k: &str) -> String {
    args.get(k)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// One `list_agents` row.
pub fn render_entry(entry: &ChildEntry, status: &str, descendants: bool) -> Option<String> {
    let at = if descendants {
        format!(" parent={} depth={}", entry.parent, entry.depth)
    } else {
        String::new()
    };
    match &entry.identity {
        Err(d) => Some(format!("{} [diagnostic: {}]{at}", entry.id, d.as_str())),
        Ok(Descriptor::Continuable { label, .. }) => {
            Some(format!("{} [{status}]{at} \u{2014} {label}", entry.id))
        }
        // One-shot children cannot be continued: never offered.
        Ok(Descriptor::OneShot { .. }) => None,
    }
}

/// One `list_agents` entry as its canonical value (`{kind: "child", id, label, status}` or
/// `{kind: "diagnostic", id, reason}`, with `parent` and `depth` for descendants); `None`
/// for a one-shot child, which is never listed.
pub fn entry_value(entry: &ChildEntry, status: &str, descendants: bool) -> Option<Value> {
    let mut value = match &entry.identity {
        Err(d) => json!({"kind": "diagnostic", "id": entry.id, "reason": d.as_str()}),
        Ok(Descriptor::Continuable { label, .. }) => {
            json!({"kind": "child", "id": entry.id, "label": label, "status": status})
        }
        Ok(Descriptor::OneShot { .. }) => return None,
    };
    if descendants && let Some(map) = value.as_object_mut() {
        map.insert("parent".into(), json!(entry.parent));
        map.insert("depth".into(), json!(entry.depth));
    }
    Some(value)
}

impl ControlTool {
    fn caller(&self, run: &ToolRunContext) -> Result<AgentRef, BoxError> {
        run.session
            .as_ref()
            .and_then(|s| self.ctx.get::<Agents>()?.get(&s.id()))
            .ok_or_else(|| {
                format!(
                    "{} requires a calling agent (exec.agent was undefined)",
                    self.which.name()
                )
                .into()
            })
    }

    async fn run(&self, args: Value, run: ToolRunContext) -> Result<ToolOutput, BoxError> {
        let caller = self.caller(&run)?;
        let subagents = self.ctx.require::<Subagents>()?;
        match self.which {
            Which::SendMessage => {
                // `subagent_id` is the 0.1 name, still read from older transcripts.
                let id = match text_arg(&args, "agent_id") {
                    id if id.is_empty() => text_arg(&args, "subagent_id"),
                    id => id,
                };
                let message = text_arg(&args, "message");
                let source = coordinator_source(caller.id());
                let message_id = subagents
                    .continuations()?
                    .followup(&caller, &id, vec![ContentBlock::text(message)], source)
                    .await?;
                run.set_value(json!({"messageId": message_id}));
                Ok(ToolOutput::text(format!(
                    "message queued as the next turn for subagent {id}"
                )))
            }
            Which::Interrupt => {
                let id = text_arg(&args, "agent_id");
                subagents
                    .continuations()?
                    .interrupt(&id, &InterruptAuthority::Ancestor(caller))?;
                run.set_value(json!({"accepted": true}));
                Ok(ToolOutput::text(format!(
                    "interrupt requested for agent {id}"
                )))
            }
            Which::ListAgents => {
                let descendants = args.get("scope").and_then(Value::as_str) == Some("descendants");
                let files = self.ctx.get::<SessionFiles>();
                let sessions = self.ctx.require::<SessionStore>()?;
                let root = caller.id().to_string();
                let entries = tokio::task::spawn_blocking(move || {
                    list_children(files.as_deref(), &sessions, &root, descendants)
                })
                .await?;
                let agents = self.ctx.require::<Agents>()?;
                let (rows, values): (Vec<String>, Vec<Value>) = entries
                    .iter()
                    .filter_map(|e| {
                        let status = match agents.get(&e.id) {
                            Some(a) if a.status() == AgentStatus::Running => "running",
                            Some(_) => "idle",
                            None => "ready",
                        };
                        Some((
                            render_entry(e, status, descendants)?,
                            entry_value(e, status, descendants)?,
                        ))
                    })
                    .unzip();
                run.set_value(Value::Array(values));
                Ok(ToolOutput::text(if rows.is_empty() {
                    "(no subagents)".to_string()
                } else {
                    rows.join("\n")
                }))
            }
            Which::Report(delivery) => {
                let output = text_arg(&args, "output");
                let id = subagents.continuations()?.report_from(
                    &caller,
                    vec![ContentBlock::text(output)],
                    delivery,
                )?;
                run.set_value(json!({"messageId": id}));
                Ok(ToolOutput::text(format!(
                    "report accepted by the agent that started you as message {id}"
                )))
            }
        }
    }
}

impl Tool for ControlTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn output_schema(&self) -> Option<&Value> {
        Some(match self.which {
            Which::SendMessage | Which::Report(_) => crate::outputs::message_id(),
            Which::Interrupt => crate::outputs::interrupt(),
            Which::ListAgents => crate::outputs::list_agents(),
        })
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        self.params.validate(args)
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let this = build(self.which, &self.ctx);
        Box::pin(async move { this.run(args, ctx).await })
    }
}

/// `@deepseek-ai/dsh-tool-subagent-control`: `send_message` and `interrupt_agent`.
pub struct ToolSubagentControlPlugin;

impl Plugin for ToolSubagentControlPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-subagent-control"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.require::<Subagents>()?;
        let tools = ctx.require::<ToolRegistry>()?;
        tools.register(ctx, Arc::new(build(Which::SendMessage, ctx)))?;
        tools.register(ctx, Arc::new(build(Which::Interrupt, ctx)))?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-tool-subagent-control/list-agents`: `list_agents`.
pub struct ToolListAgentsPlugin;

impl Plugin for ToolListAgentsPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-subagent-control/list-agents"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.require::<Subagents>()?;
        ctx.require::<SessionStore>()?;
        let tools = ctx.require::<ToolRegistry>()?;
        tools.register(ctx, Arc::new(build(Which::ListAgents, ctx)))?;
        Ok(())
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReportRow {
    report_delivery: Option<String>,
}

const REPORT_SECTION: &str = "You are a background subagent. The agent that started you is told when you finish and receives your final answer. Call `report` only for an interim finding it needs before then.";

/// `@deepseek-ai/dsh-tool-subagent-report` (`{reportDelivery: next-step | quiet}`): the
/// `report` tool and its section, installed in every continuable child's scope.
pub struct ToolSubagentReportPlugin;

impl Plugin for ToolSubagentReportPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-subagent-report"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: ReportRow = config.parse()?;
        let delivery = match row.report_delivery.as_deref() {
            None | Some("next-step") => ReportDelivery::NextStep,
            Some("quiet") => ReportDelivery::Quiet,
            Some(other) => {
                return Err(format!(
                    "tool-subagent-report: reportDelivery must be \"next-step\" or \"quiet\", got \"{other}\""
                )
                .into());
            }
        };
        let subagents = ctx.require::<Subagents>()?;
        let tools = ctx.require::<ToolRegistry>()?;
        let prompt = ctx.require::<SystemPrompt>()?;
        let owner = ctx.clone();
        subagents.continuations()?.register_setup(
            ctx,
            Arc::new(move |child: &Context| {
                let mut tool = build(Which::Report(delivery), &owner);
                tool.ctx = owner.clone();
                tools.register(child, Arc::new(tool))?;
                prompt.section(
                    child,
                    "tool:report",
                    117.0,
                    Arc::new(|_| REPORT_SECTION.to_string()),
                )?;
                Ok(())
            }),
        )?;
        Ok(())
    }
}
