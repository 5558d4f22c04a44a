//! The control tools: `send_message` and `interrupt_agent`
//! (`@deepseek-ai/dsh-tool-subagent-control`), `list_agents`
//! (`@deepseek-ai/dsh-tool-subagent-control/list-agents`) and `report`
//! (`@deepseek-ai/dsh-tool-subagent-report`, installed in continuable children only).

use std::sync::Arc;

use dsh_agent::{AgentRef, AgentStatus, Agents};
use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_llm::ContentBlock;
use dsh_persistence::SessionFiles;
use dsh_prompt::SystemPrompt;
use dsh_session::SessionStore;
use dsh_tools::{Reply, ToolRegistry, ToolRunContext, Typed, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::continuation::{InterruptAuthority, ReportDelivery, coordinator_source};
use crate::descriptor::Descriptor;
use crate::listing::{ChildEntry, list_children};
use crate::service::Subagents;

const SEND_MESSAGE: &str = "send_message";
const INTERRUPT_AGENT: &str = "interrupt_agent";
const LIST_AGENTS: &str = "list_agents";
const REPORT: &str = "report";

const SEND_MESSAGE_DESCRIPTION: &str = "Give one of your continuable background subagents another turn: the message is queued as its next turn, in order, whether it is working, idle or only stored. Use the id the subagent tool returned.";
const INTERRUPT_DESCRIPTION: &str = "Stop what a background subagent below you is doing right now. Messages already queued for it stay queued; it is not deleted and can be continued later.";
const LIST_AGENTS_DESCRIPTION: &str = "List the continuable background subagents you started, with their ids and labels, to recall what exists (you are told when one finishes, so do not poll). running: working now; idle: loaded, between turns; ready: only stored, continue it with send_message. Children that cannot be read show as diagnostics. With scope `descendants` the whole tree below you is listed in pre-order with each entry's parent id and depth; only depth-1 entries accept send_message, deeper ones only interrupt_agent.";
const REPORT_DESCRIPTION: &str = "Send an interim result to the agent that started you while you keep working. Your final answer reaches it anyway when you finish; use this for findings it needs sooner.";

/// `send_message`.
struct SendMessageTool {
    ctx: Context,
}

/// `interrupt_agent`.
struct InterruptAgentTool {
    ctx: Context,
}

/// `list_agents`.
struct ListAgentsTool {
    ctx: Context,
}

/// `report`.
struct ReportTool {
    ctx: Context,
    delivery: ReportDelivery,
}

// The arguments of each (no doc: upstream's parameter objects carry no description).
#[derive(Deserialize, JsonSchema)]
struct SendMessageArgs {
    /// The durable id of a subagent you started.
    agent_id: String,
    /// What the subagent should do next; it keeps its own conversation so far.
    message: String,
    // `agent_id`'s 0.1 name, still read from older transcripts when `agent_id` is empty;
    // not offered to the model.
    #[schemars(skip)]
    #[serde(default, deserialize_with = "dsh_tools::lenient::string")]
    subagent_id: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct InterruptAgentArgs {
    /// The id of a subagent you started, or of one started below it.
    agent_id: String,
}

#[derive(Deserialize, JsonSchema)]
struct ListAgentsArgs {
    // `#[serde(default)]` rather than `Option`: an optional unit enum would add `null` to
    // the derived `enum` list. A missing scope is `children`.
    /// children (the default): your direct subagents; descendants: everything below you.
    #[serde(default)]
    scope: Scope,
}

#[derive(Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Scope {
    #[default]
    Children,
    Descendants,
}

#[derive(Deserialize, JsonSchema)]
struct ReportArgs {
    /// What to tell the agent that started you.
    output: String,
}

/// The calling agent of `run`.
fn caller(ctx: &Context, name: &str, run: &ToolRunContext) -> Result<AgentRef, BoxError> {
    run.session
        .as_ref()
        .and_then(|s| ctx.get::<Agents>()?.get(&s.id()))
        .ok_or_else(|| format!("{name} requires a calling agent (exec.agent was undefined)").into())
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

impl TypedTool for SendMessageTool {
    type Args = SendMessageArgs;
    type Value = Value;

    fn name(&self) -> String {
        SEND_MESSAGE.into()
    }

    fn description(&self) -> String {
        SEND_MESSAGE_DESCRIPTION.into()
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(crate::outputs::message_id().clone()))
    }

    async fn run(
        self: Arc<Self>,
        args: SendMessageArgs,
        run: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let caller = caller(&self.ctx, SEND_MESSAGE, &run)?;
        let subagents = self.ctx.require::<Subagents>()?;
        // `subagent_id` is the 0.1 name, still read from older transcripts.
        let id = if args.agent_id.is_empty() {
            args.subagent_id.unwrap_or_default()
        } else {
            args.agent_id
        };
        let source = coordinator_source(caller.id());
        let message_id = subagents
            .continuations()?
            .followup(&caller, &id, vec![ContentBlock::text(args.message)], source)
            .await?;
        Ok(
            Reply::text(format!("message queued as the next turn for subagent {id}"))
                .with_value(json!({"messageId": message_id})),
        )
    }
}

impl TypedTool for InterruptAgentTool {
    type Args = InterruptAgentArgs;
    type Value = Value;

    fn name(&self) -> String {
        INTERRUPT_AGENT.into()
    }

    fn description(&self) -> String {
        INTERRUPT_DESCRIPTION.into()
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(crate::outputs::interrupt().clone()))
    }

    async fn run(
        self: Arc<Self>,
        args: InterruptAgentArgs,
        run: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let caller = caller(&self.ctx, INTERRUPT_AGENT, &run)?;
        let subagents = self.ctx.require::<Subagents>()?;
        let id = args.agent_id;
        subagents
            .continuations()?
            .interrupt(&id, &InterruptAuthority::Ancestor(caller))?;
        Ok(Reply::text(format!("interrupt requested for agent {id}"))
            .with_value(json!({"accepted": true})))
    }
}

impl TypedTool for ListAgentsTool {
    type Args = ListAgentsArgs;
    type Value = Value;

    fn name(&self) -> String {
        LIST_AGENTS.into()
    }

    fn description(&self) -> String {
        LIST_AGENTS_DESCRIPTION.into()
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(crate::outputs::list_agents().clone()))
    }

    async fn run(
        self: Arc<Self>,
        args: ListAgentsArgs,
        run: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let caller = caller(&self.ctx, LIST_AGENTS, &run)?;
        self.ctx.require::<Subagents>()?;
        let descendants = args.scope == Scope::Descendants;
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
        let text = if rows.is_empty() {
            "(no subagents)".to_string()
        } else {
            rows.join("\n")
        };
        Ok(Reply::text(text).with_value(Value::Array(values)))
    }
}

impl TypedTool for ReportTool {
    type Args = ReportArgs;
    type Value = Value;

    fn name(&self) -> String {
        REPORT.into()
    }

    fn description(&self) -> String {
        REPORT_DESCRIPTION.into()
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(crate::outputs::message_id().clone()))
    }

    async fn run(
        self: Arc<Self>,
        args: ReportArgs,
        run: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let caller = caller(&self.ctx, REPORT, &run)?;
        let subagents = self.ctx.require::<Subagents>()?;
        let id = subagents.continuations()?.report_from(
            &caller,
            vec![ContentBlock::text(args.output)],
            self.delivery,
        )?;
        Ok(Reply::text(format!(
            "report accepted by the agent that started you as message {id}"
        ))
        .with_value(json!({"messageId": id})))
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
        let send = SendMessageTool { ctx: ctx.clone() };
        tools.register(ctx, Arc::new(Typed::new(send)?))?;
        let interrupt = InterruptAgentTool { ctx: ctx.clone() };
        tools.register(ctx, Arc::new(Typed::new(interrupt)?))?;
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
        let list = ListAgentsTool { ctx: ctx.clone() };
        tools.register(ctx, Arc::new(Typed::new(list)?))?;
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
                let tool = ReportTool {
                    ctx: owner.clone(),
                    delivery,
                };
                tools.register(child, Arc::new(Typed::new(tool)?))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_tools::{ObjectSchema, Prop, params_schema};
    use pretty_assertions::assert_eq;

    fn text(s: ObjectSchema) -> String {
        dsh_kernel::json::to_string(&s.to_value())
    }

    #[test]
    fn parameter_schemas_are_the_declared_ones() {
        assert_eq!(
            text(params_schema::<SendMessageArgs>().unwrap()),
            text(
                ObjectSchema::new()
                    .required("agent_id", Prop::string("The durable id of a subagent you started."))
                    .required("message", Prop::string("What the subagent should do next; it keeps its own conversation so far."))
            )
        );
        assert_eq!(
            text(params_schema::<InterruptAgentArgs>().unwrap()),
            text(ObjectSchema::new().required(
                "agent_id",
                Prop::string("The id of a subagent you started, or of one started below it."),
            ))
        );
        assert_eq!(
            text(params_schema::<ListAgentsArgs>().unwrap()),
            text(ObjectSchema::new().optional(
                "scope",
                Prop::enumeration(
                    "children (the default): your direct subagents; descendants: everything below you.",
                    &["children", "descendants"],
                ),
            ))
        );
        assert_eq!(
            text(params_schema::<ReportArgs>().unwrap()),
            text(ObjectSchema::new().required(
                "output",
                Prop::string("What to tell the agent that started you.")
            ))
        );
    }

    #[test]
    fn arguments_decode_as_the_untyped_reads_did() {
        let args: SendMessageArgs =
            serde_json::from_value(json!({"agent_id": "", "message": "m", "subagent_id": "s-1"}))
                .unwrap();
        assert_eq!(args.subagent_id.as_deref(), Some("s-1"));
        let args: SendMessageArgs =
            serde_json::from_value(json!({"agent_id": "", "message": "m", "subagent_id": 3}))
                .unwrap();
        assert_eq!(args.subagent_id, None);
        let args: ListAgentsArgs = serde_json::from_value(json!({})).unwrap();
        assert!(args.scope == Scope::Children);
        let args: ListAgentsArgs = serde_json::from_value(json!({"scope": "descendants"})).unwrap();
        assert!(args.scope == Scope::Descendants);
    }
}
