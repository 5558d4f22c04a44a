//! `tool-skill`: the `skill` loader tool, the durable session catalog, and the `/name`
//! gesture.
//!
//! The catalog is a user message with source `{kind: "skill-catalog", form: "catalog",
//! entries}` appended to a step's entered messages (after the runtime-context snapshot)
//! the first time a model-invocable skill exists, and replaced (`update: true`) only when
//! the entries differ from the visible catalog's. It is published only while this
//! plugin's own `skill` tool is the one the agent sees, so a shadowed or withheld tool
//! takes its guidance with it.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_agent::{AgentRef, PreStep, PreStepDecision};
use dsh_kernel::{BoxError, Context, ListenOptions};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_session::types;
use dsh_tools::{Reply, Tool, ToolRegistry, ToolRunContext, Typed, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::registry::{Lookup, SkillRegistry, SkillSummary, is_skill_name};
use crate::render::{catalog_description, escape_text, render_skill_content};

/// The `skill` tool's description.
pub const SKILL_TOOL_DESCRIPTION: &str = "Fetch the complete instructions of a skill from this session's skill catalog. Use it before working on a task that names a skill or plainly fits one, passing the skill's exact name.";
const NAME_DESCRIPTION: &str = "The skill's name, exactly as the catalog lists it.";
const CATALOG_KIND: &str = "skill-catalog";

struct SkillTool {
    skills: Arc<SkillRegistry>,
}

impl SkillTool {
    fn new(skills: Arc<SkillRegistry>) -> Self {
        Self { skills }
    }
}

// The arguments (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
struct SkillArgs {
    #[schemars(description = NAME_DESCRIPTION)]
    name: String,
}

async fn load(
    skills: Arc<SkillRegistry>,
    view: Context,
    name: String,
    cwd: Option<PathBuf>,
) -> Result<Reply<Value>, BoxError> {
    if !is_skill_name(&name) {
        return Err(format!("invalid skill name \"{name}\"").into());
    }
    let lookup = Lookup { cwd };
    let found = tokio::task::spawn_blocking(move || {
        let unknown =
            || -> BoxError { format!("skill \"{name}\" is unknown or no longer available").into() };
        let refused = || -> BoxError {
            format!("skill \"{name}\" is not available for model invocation").into()
        };
        let summary = skills
            .list(&view, &lookup)
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(unknown)?;
        if !summary.invocation.model_invocable {
            return Err(refused());
        }
        let skill = skills.get(&view, &name, &lookup)?.ok_or_else(unknown)?;
        if !skill.summary.invocation.model_invocable {
            return Err(refused());
        }
        Ok((render_skill_content(&skill), skill_value(&skill)))
    })
    .await
    .map_err(|e| -> BoxError { format!("skill lookup failed: {e}").into() })??;
    let (text, value) = found;
    Ok(Reply::text(text).with_value(value))
}

/// The canonical value: `{name, provider, resourceBase?, content}`.
fn skill_value(skill: &crate::registry::SkillDefinition) -> Value {
    use crate::registry::ResourceBase;
    let mut m = Map::new();
    m.insert("name".into(), json!(skill.summary.name));
    m.insert("provider".into(), json!(skill.summary.provider));
    if let Some(base) = &skill.summary.resource_base {
        let base = match base {
            ResourceBase::Directory(path) => {
                json!({"kind": "directory", "path": path.to_string_lossy()})
            }
            ResourceBase::Url(url) => json!({"kind": "url", "url": url}),
            ResourceBase::Opaque(description) => {
                json!({"kind": "opaque", "description": description})
            }
        };
        m.insert("resourceBase".into(), base);
    }
    m.insert("content".into(), json!(skill.content));
    Value::Object(m)
}

/// The declared output schema of `skill`.
fn output_schema() -> &'static Value {
    static S: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
        let base = |kind: &str, field: &str| {
            json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["kind", field],
                "properties": {"kind": {"type": "string", "const": kind}, field: {"type": "string"}},
            })
        };
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["name", "provider", "content"],
            "properties": {
                "name": {"type": "string"},
                "provider": {"type": "string"},
                "resourceBase": {"oneOf": [
                    base("directory", "path"),
                    base("url", "url"),
                    base("opaque", "description"),
                ]},
                "content": {"type": "string"},
            },
        })
    });
    &S
}

impl TypedTool for SkillTool {
    type Args = SkillArgs;
    type Value = Value;

    fn name(&self) -> String {
        "skill".into()
    }

    fn description(&self) -> String {
        SKILL_TOOL_DESCRIPTION.into()
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(output_schema().clone()))
    }

    async fn run(
        self: Arc<Self>,
        args: SkillArgs,
        ctx: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let cwd = ctx.cwd.clone().or_else(|| {
            ctx.session
                .as_ref()
                .and_then(|s| s.header().cwd)
                .map(PathBuf::from)
        });
        load(self.skills.clone(), ctx.ctx.clone(), args.name, cwd).await
    }
}

/// Registers the tool, then the gesture listener, then the catalog listener (so the
/// gesture, outermost, appends after the catalog, and teardown removes guidance first).
pub(crate) fn install(
    ctx: &Context,
    skills: Arc<SkillRegistry>,
    tools: Arc<ToolRegistry>,
    description_max: usize,
) -> Result<(), BoxError> {
    let tool: Arc<dyn Tool> = Arc::new(Typed::new(SkillTool::new(skills.clone()))?);
    tools.register(ctx, tool.clone())?;

    // A line starting with `/name` of a user-invocable skill is a prompt, not an unknown
    // command: it reaches the model, and the listener below injects the skill.
    if let Some(commands) = ctx.get::<dsh_commands::CommandRegistry>() {
        let skills = skills.clone();
        commands.register_prompt_gesture(
            ctx,
            Arc::new(move |agent: &AgentRef, name: &str| {
                let lookup = Lookup { cwd: agent.cwd() };
                matches!(
                    skills.get(agent.ctx(), name, &lookup),
                    Ok(Some(skill)) if skill.summary.invocation.user_invocable
                )
            }),
        )?;
    }

    let gesture_skills = skills.clone();
    ctx.on_waterfall::<PreStep>(ListenOptions::default(), move |p, next| {
        let skills = gesture_skills.clone();
        Box::pin(async move {
            let decision = next.run().await?;
            let PreStepDecision::Enter(mut messages) = decision else {
                return Ok(decision);
            };
            let names = invoked_skill_names(p.messages.iter().map(|m| m.as_ref()));
            if names.is_empty() {
                return Ok(PreStepDecision::Enter(messages));
            }
            let view = p.agent.ctx().clone();
            let lookup = Lookup { cwd: p.agent.cwd() };
            let injected = tokio::task::spawn_blocking(move || {
                names
                    .into_iter()
                    .filter_map(|name| match skills.get(&view, &name, &lookup) {
                        Ok(Some(skill)) if skill.summary.invocation.user_invocable => {
                            Some(invocation_message(&name, render_skill_content(&skill)))
                        }
                        Ok(_) => None,
                        Err(e) => {
                            tracing::warn!("skill \"{name}\" not loaded for /{name}: {e}");
                            None
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .await
            .map_err(|e| -> BoxError { format!("skill lookup failed: {e}").into() })?;
            messages.extend(injected.into_iter().map(Arc::new));
            Ok(PreStepDecision::Enter(messages))
        })
    })?;

    let catalog_tools = tools.clone();
    ctx.on_waterfall::<PreStep>(ListenOptions::default(), move |p, next| {
        let skills = skills.clone();
        let tools = catalog_tools.clone();
        let tool = tool.clone();
        Box::pin(async move {
            let decision = next.run().await?;
            let PreStepDecision::Enter(messages) = decision else {
                return Ok(decision);
            };
            let agent = p.agent.clone();
            let visible = tools
                .get(agent.ctx(), "skill")
                .is_some_and(|t| std::ptr::addr_eq(Arc::as_ptr(&t), Arc::as_ptr(&tool)));
            let snapshot = if visible {
                let view = agent.ctx().clone();
                let lookup = Lookup { cwd: agent.cwd() };
                tokio::task::spawn_blocking(move || skills.snapshot(&view, &lookup))
                    .await
                    .map_err(|e| -> BoxError { format!("skill listing failed: {e}").into() })?
            } else {
                crate::registry::SkillSnapshot {
                    skills: Vec::new(),
                    complete: true,
                }
            };
            if !snapshot.complete {
                return Ok(PreStepDecision::Enter(messages));
            }
            Ok(PreStepDecision::Enter(publish(
                &agent,
                messages,
                &snapshot.skills,
                description_max,
            )))
        })
    })?;
    Ok(())
}

type Entries = Vec<(String, String)>;

/// The step's messages with the catalog added, replaced or dropped, as upstream decides.
fn publish(
    agent: &AgentRef,
    mut messages: Vec<Arc<Message>>,
    skills: &[SkillSummary],
    description_max: usize,
) -> Vec<Arc<Message>> {
    let entries: Entries = skills
        .iter()
        .filter(|s| s.invocation.model_invocable)
        .map(|s| {
            (
                s.name.clone(),
                catalog_description(&s.description, description_max),
            )
        })
        .collect();
    let (visible, published) = catalog_history(agent);
    let existing = messages.iter().position(|m| {
        m.source.kind() == CATALOG_KIND && entries_of(&m.to_value()["source"]).is_some()
    });
    let drop_existing = |mut messages: Vec<Arc<Message>>| {
        if let Some(i) = existing {
            messages.remove(i);
        }
        messages
    };
    if visible.as_ref() == Some(&entries) {
        return drop_existing(messages);
    }
    if let Some(i) = existing
        && entries_of(&messages[i].to_value()["source"]).as_ref() == Some(&entries)
    {
        return messages;
    }
    if !published && entries.is_empty() {
        return drop_existing(messages);
    }
    let catalog = Arc::new(catalog_message(&entries, published));
    match existing {
        Some(i) => messages[i] = catalog,
        None => messages.push(catalog),
    }
    messages
}

/// The entries of the latest catalog still on the surface, and whether any was ever
/// published in this session. Unreadable records are not this plugin's catalogs.
fn catalog_history(agent: &AgentRef) -> (Option<Entries>, bool) {
    agent.session().read(|s| {
        let surface = s.surface().nodes();
        let mut published = false;
        for event in s.events().iter().rev() {
            if !event.is(types::USER_MESSAGE)
                || event.data.pointer("/source/kind").and_then(Value::as_str) != Some(CATALOG_KIND)
            {
                continue;
            }
            let Some(entries) = entries_of(&event.data["source"]) else {
                continue;
            };
            published = true;
            if surface.contains(&event.seq) {
                return (Some(entries), true);
            }
        }
        (None, published)
    })
}

fn entries_of(source: &Value) -> Option<Entries> {
    source
        .get("entries")?
        .as_array()?
        .iter()
        .map(|e| {
            let name = e.get("name")?.as_str().filter(|n| !n.is_empty())?;
            let description = e.get("description")?.as_str()?;
            Some((name.to_string(), description.to_string()))
        })
        .collect()
}

fn catalog_message(entries: &Entries, update: bool) -> Message {
    let lines: Vec<String> = entries
        .iter()
        .map(|(name, description)| format!("- `{name}`: {}", escape_text(description)))
        .collect();
    let mut text: Vec<String> = vec!["<system-reminder>".into()];
    if update {
        text.push("The skill catalog has changed. The list below is complete and replaces every earlier list of skills in this session:".into());
    } else {
        text.push("Skills are packaged instructions for particular kinds of tasks. These skills can be loaded in this session:".into());
    }
    text.push(String::new());
    text.push("<available_skills>".into());
    text.extend(lines);
    text.push("</available_skills>".into());
    text.push(String::new());
    match (update, entries.is_empty()) {
        (false, _) => {
            text.push("When the user names a skill, or a task plainly fits a skill's description, load it with the `skill` tool, using its exact name, before you act. Load every skill that applies and follow its instructions in full. The list above only summarizes them: do not guess at or act on a skill's instructions before loading it.".into());
            text.push("The user can also start a skill directly; its instructions then appear in the conversation inside a <skill_content> block. Follow them, and do not load that skill again with the `skill` tool.".into());
        }
        (true, true) => {
            text.push("No skill can be loaded with the `skill` tool now. Do not use skill names from earlier lists.".into());
            text.push("The user can still start a skill directly; its instructions then appear in the conversation inside a <skill_content> block. Follow them without calling the `skill` tool for it.".into());
        }
        (true, false) => {
            text.push("Only the names in this new list are valid. When the user names one of these skills, or a task plainly fits its description, load it with the `skill` tool, using its exact name, before you act.".into());
            text.push("The user can also start a skill directly; its instructions then appear in the conversation inside a <skill_content> block. Follow them, and do not load that skill again with the `skill` tool.".into());
        }
    }
    text.push("</system-reminder>".into());
    let mut source = Map::new();
    source.insert("kind".into(), Value::from(CATALOG_KIND));
    source.insert("form".into(), Value::from("catalog"));
    if update {
        source.insert("update".into(), Value::Bool(true));
    }
    source.insert(
        "entries".into(),
        Value::Array(
            entries
                .iter()
                .map(|(name, description)| json!({"name": name, "description": description}))
                .collect(),
        ),
    );
    Message::user(
        vec![ContentBlock::text(text.join("\n"))],
        MessageSource::Other(source),
    )
}

fn invocation_message(name: &str, rendered: String) -> Message {
    let mut source = Map::new();
    source.insert("kind".into(), Value::from("skill-invocation"));
    source.insert("name".into(), Value::from(name));
    source.insert("form".into(), Value::from("instructions"));
    Message::user(
        vec![ContentBlock::text(rendered)],
        MessageSource::Other(source),
    )
}

/// The `/name` tokens (whitespace-bounded, skill-name grammar) in the text of the user's
/// own messages, first seen first, without repeats. No other source can forge a gesture.
pub fn invoked_skill_names<'a>(messages: impl IntoIterator<Item = &'a Message>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for message in messages {
        if message.source.kind() != "user" {
            continue;
        }
        for block in &message.content {
            let ContentBlock::Text { text } = block else {
                continue;
            };
            for token in text.split(char::is_whitespace) {
                if let Some(name) = token.strip_prefix('/')
                    && is_skill_name(name)
                    && !names.iter().any(|n| n == name)
                {
                    names.push(name.to_string());
                }
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_value_carries_the_declared_fields() {
        use crate::registry::{InvocationPolicy, ResourceBase, SkillDefinition};
        let mut skill = SkillDefinition {
            summary: SkillSummary {
                name: "review".into(),
                description: "d".into(),
                when_to_use: None,
                invocation: InvocationPolicy {
                    model_invocable: true,
                    user_invocable: true,
                },
                source: "bundled".into(),
                provider: "filesystem".into(),
                resource_base: Some(ResourceBase::Directory("/s/review".into())),
            },
            content: "Do it.".into(),
            path: None,
            metadata: None,
        };
        assert_eq!(
            skill_value(&skill),
            json!({"name": "review", "provider": "filesystem",
                   "resourceBase": {"kind": "directory", "path": "/s/review"}, "content": "Do it."})
        );
        skill.summary.resource_base = None;
        assert_eq!(
            skill_value(&skill),
            json!({"name": "review", "provider": "filesystem", "content": "Do it."})
        );
        let declared = output_schema();
        assert_eq!(declared["required"], json!(["name", "provider", "content"]));
        assert_eq!(
            declared["properties"]["resourceBase"]["oneOf"][0]["required"],
            json!(["kind", "path"])
        );
    }

    #[test]
    fn the_parameter_schema_is_unchanged() {
        use dsh_tools::{ObjectSchema, Prop};
        let params = ObjectSchema::new().required("name", Prop::string(NAME_DESCRIPTION));
        assert_eq!(
            dsh_kernel::json::to_string(
                &dsh_tools::params_schema::<SkillArgs>().unwrap().to_value()
            ),
            dsh_kernel::json::to_string(&params.to_value())
        );
    }

    #[test]
    fn gestures_are_whitespace_bounded_names_in_user_text_only() {
        let user = Message::user_text(
            "/review this, then /fix-it and /review again; /usr/bin 5/8 /Bad x/y",
        );
        let plugin = Message::user(
            vec![ContentBlock::text("/other")],
            MessageSource::plugin("p", []),
        );
        assert_eq!(
            invoked_skill_names([&user, &plugin]),
            vec!["review".to_string(), "fix-it".to_string()]
        );
    }

    #[test]
    fn the_first_catalog_lists_escaped_entries_and_records_them() {
        let m = catalog_message(&vec![("a-b".into(), "x < y & z".into())], false);
        let v = m.to_value();
        assert_eq!(
            v["source"],
            json!({"kind": "skill-catalog", "form": "catalog", "entries": [{"name": "a-b", "description": "x < y & z"}]})
        );
        let text = v["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("<available_skills>\n- `a-b`: x &lt; y &amp; z\n</available_skills>"),
            "{text}"
        );
        let update = catalog_message(&vec![], true).to_value();
        assert_eq!(update["source"]["update"], json!(true));
        assert!(
            update["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("No skill can be loaded")
        );
    }
}
