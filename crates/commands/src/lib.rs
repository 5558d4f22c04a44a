//! Slash commands (`dsh-commands`); see README.md.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use dsh_agent::AgentRef;
use dsh_kernel::{BoxError, BoxFuture, Context, EffectHandle, Plugin, PluginConfig};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// What a command handler reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandResult {
    Success {
        text: Option<String>,
        /// The durable event the command produced, if one stands for it.
        source_event_seq: Option<u64>,
    },
    Error {
        text: String,
    },
}

impl CommandResult {
    pub fn ok(text: impl Into<String>) -> Self {
        Self::Success {
            text: Some(text.into()),
            source_event_seq: None,
        }
    }

    pub fn error(text: impl Into<String>) -> Self {
        Self::Error { text: text.into() }
    }

    /// The text shown to whoever typed the command.
    pub fn text(&self) -> &str {
        match self {
            Self::Success { text, .. } => text.as_deref().unwrap_or(""),
            Self::Error { text } => text,
        }
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Self::Error { .. })
    }
}

/// One invocation handed to a handler.
pub struct CommandInvocation {
    pub command_id: String,
    pub agent: AgentRef,
    /// Everything after the name, separator included (`/permission read-only` → ` read-only`).
    pub raw_input: String,
    pub cancel: CancellationToken,
}

/// A command handler.
pub type Handler = Arc<
    dyn Fn(CommandInvocation) -> BoxFuture<'static, Result<CommandResult, BoxError>> + Send + Sync,
>;

/// A registered command.
#[derive(Clone)]
pub struct CommandDefinition {
    pub name: String,
    pub description: String,
    /// What the input looks like (`<preset>`), when it takes one.
    pub hint: Option<String>,
    /// Whether `command/run` records the raw input (off for secrets).
    pub record_input: bool,
    pub handler: Handler,
}

/// A command as listed to users and clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandDescriptor {
    pub name: String,
    pub description: String,
    pub hint: Option<String>,
}

/// `/name rest` at the start of `line`: the name and the raw input after it.
pub fn parse_command(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix('/')?;
    let end = rest
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'))
        .unwrap_or(rest.len());
    let name = &rest[..end];
    let after = &rest[end..];
    let starts_right = name.as_bytes().first().is_some_and(u8::is_ascii_lowercase);
    let ends_right = after.is_empty() || after.starts_with([' ', '\t', '\n', '\r']);
    (starts_right && ends_right).then_some((name, after))
}

/// Claims a `/name` that names no command as a gesture handled in the conversation (a
/// user-invocable skill), so the line reaches the model unchanged instead of failing as an
/// unknown command. Must be quick and must not panic.
pub type PromptGesture = Arc<dyn Fn(&AgentRef, &str) -> bool + Send + Sync>;

/// The `ctx.commands` service.
pub struct CommandRegistry {
    commands: RwLock<BTreeMap<String, CommandDefinition>>,
    gestures: RwLock<Vec<(u64, PromptGesture)>>,
    next_gesture: AtomicU64,
    instance: String,
    next: AtomicU64,
}

/// What a frontend does with a line.
pub enum LineOutcome {
    /// Not a command: send it to the model.
    NotACommand,
    /// A command ran (it is logged); show its result.
    Executed {
        command_id: String,
        result: CommandResult,
    },
    /// `/name` names no command; show the known ones. Nothing was logged or sent.
    Unknown {
        name: String,
        known: Vec<CommandDescriptor>,
    },
    /// `/help` (when no command of that name is registered): the commands there are.
    /// Nothing was logged or sent.
    Help { known: Vec<CommandDescriptor> },
}

/// One line per command: `/name hint — description`.
fn command_lines(known: &[CommandDescriptor]) -> Vec<String> {
    known
        .iter()
        .map(|c| match &c.hint {
            Some(h) => format!("/{} {h} — {}", c.name, c.description),
            None => format!("/{} — {}", c.name, c.description),
        })
        .collect()
}

impl LineOutcome {
    /// The reply text for the user.
    pub fn reply(&self) -> String {
        match self {
            LineOutcome::NotACommand => String::new(),
            LineOutcome::Executed { result, .. } => result.text().to_string(),
            LineOutcome::Help { known } => {
                let list = command_lines(known);
                if list.is_empty() {
                    "No slash commands are available in this session.".to_string()
                } else {
                    format!("Slash commands:\n{}", list.join("\n"))
                }
            }
            LineOutcome::Unknown { name, known } => {
                let list = command_lines(known);
                if list.is_empty() {
                    format!("unknown command /{name}: no commands are available")
                } else {
                    format!(
                        "unknown command /{name}; available commands:\n{}",
                        list.join("\n")
                    )
                }
            }
        }
    }
}

fn valid_name(name: &str) -> bool {
    parse_command(&format!("/{name}")).is_some_and(|(n, rest)| n == name && rest.is_empty())
}

impl CommandRegistry {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            commands: RwLock::new(BTreeMap::new()),
            gestures: RwLock::new(Vec::new()),
            next_gesture: AtomicU64::new(1),
            instance: uuid::Uuid::new_v4().simple().to_string()[..8].to_string(),
            next: AtomicU64::new(1),
        })
    }

    /// Registers `definition` as an effect of `owner`.
    pub fn register(
        self: &Arc<Self>,
        owner: &Context,
        definition: CommandDefinition,
    ) -> Result<EffectHandle, BoxError> {
        if !valid_name(&definition.name) {
            return Err(format!(
                "invalid command name \"{}\" (lowercase letters, digits, - and _)",
                definition.name
            )
            .into());
        }
        if definition.description.trim().is_empty() {
            return Err(format!("command /{} needs a description", definition.name).into());
        }
        let name = definition.name.clone();
        {
            let mut map = self.commands.write().unwrap_or_else(|p| p.into_inner());
            if map.contains_key(&name) {
                return Err(format!("command /{name} is already registered").into());
            }
            map.insert(name.clone(), definition);
        }
        let this = Arc::downgrade(self);
        Ok(owner.effect("command", move || {
            if let Some(this) = this.upgrade() {
                this.commands
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&name);
            }
        })?)
    }

    /// Registers a [`PromptGesture`] as an effect of `owner`. Commands still win a name.
    pub fn register_prompt_gesture(
        self: &Arc<Self>,
        owner: &Context,
        gesture: PromptGesture,
    ) -> Result<EffectHandle, BoxError> {
        let id = self.next_gesture.fetch_add(1, Ordering::Relaxed);
        self.gestures
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, gesture));
        let this = Arc::downgrade(self);
        Ok(owner.effect("prompt gesture", move || {
            if let Some(this) = this.upgrade() {
                this.gestures
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|(g, _)| *g != id);
            }
        })?)
    }

    fn is_prompt_gesture(&self, agent: &AgentRef, name: &str) -> bool {
        let gestures: Vec<PromptGesture> = self
            .gestures
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(_, g)| g.clone())
            .collect();
        gestures.iter().any(|g| g(agent, name))
    }

    /// Every command, by name.
    pub fn list(&self) -> Vec<CommandDescriptor> {
        self.commands
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|d| CommandDescriptor {
                name: d.name.clone(),
                description: d.description.clone(),
                hint: d.hint.clone(),
            })
            .collect()
    }

    fn get(&self, name: &str) -> Option<CommandDefinition> {
        self.commands
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Runs the command `line` names for `agent`, logging `command/run` and
    /// `command/done`; `None` when the line is not a known command (nothing logged).
    pub async fn execute(
        &self,
        agent: &AgentRef,
        line: &str,
        cancel: CancellationToken,
    ) -> Option<(String, CommandResult)> {
        let (name, raw) = parse_command(line)?;
        let definition = self.get(name)?;
        let command_id = format!(
            "cmd-{}-{}",
            self.instance,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let session = agent.session().clone();
        let mut run = Map::new();
        run.insert("commandId".into(), json!(command_id));
        run.insert("name".into(), json!(name));
        if definition.record_input {
            run.insert("args".into(), json!(raw));
        }
        run.insert("source".into(), json!({"kind": "user"}));
        if let Err(e) = session.append("command/run", Value::Object(run), None) {
            let result = CommandResult::error(format!("the command could not be recorded: {e}"));
            return Some((command_id, result));
        }
        let invocation = CommandInvocation {
            command_id: command_id.clone(),
            agent: agent.clone(),
            raw_input: raw.to_string(),
            cancel: cancel.clone(),
        };
        let result = tokio_select(cancel, (definition.handler)(invocation)).await;
        let result = match result {
            Some(Ok(CommandResult::Error { text })) if text.trim().is_empty() => {
                CommandResult::error(format!("/{name} failed"))
            }
            Some(Ok(r)) => r,
            Some(Err(e)) => CommandResult::error(e.to_string()),
            None => CommandResult::error(format!("/{name} was cancelled")),
        };
        let mut done = Map::new();
        done.insert("commandId".into(), json!(command_id));
        match &result {
            CommandResult::Success {
                text,
                source_event_seq,
            } => {
                done.insert("kind".into(), json!("success"));
                if let Some(t) = text {
                    done.insert("text".into(), json!(t));
                }
                if let Some(s) = source_event_seq {
                    done.insert("sourceEventSeq".into(), json!(s));
                }
            }
            CommandResult::Error { text } => {
                done.insert("kind".into(), json!("error"));
                done.insert("text".into(), json!(text));
            }
        }
        if let Err(e) = session.append("command/done", Value::Object(done), None) {
            tracing::warn!("cannot record the end of /{name}: {e}");
        }
        Some((command_id, result))
    }

    /// What a frontend does with `line` (see [`LineOutcome`]).
    pub async fn dispatch_line(
        &self,
        agent: &AgentRef,
        line: &str,
        cancel: CancellationToken,
    ) -> LineOutcome {
        let Some((name, _)) = parse_command(line) else {
            return LineOutcome::NotACommand;
        };
        if self.get(name).is_none() {
            if self.is_prompt_gesture(agent, name) {
                return LineOutcome::NotACommand;
            }
            if name == "help" {
                return LineOutcome::Help { known: self.list() };
            }
            return LineOutcome::Unknown {
                name: name.to_string(),
                known: self.list(),
            };
        }
        match self.execute(agent, line, cancel).await {
            Some((command_id, result)) => LineOutcome::Executed { command_id, result },
            None => LineOutcome::NotACommand,
        }
    }
}

/// The handler's result, or `None` when `cancel` fires first.
async fn tokio_select<T>(cancel: CancellationToken, work: BoxFuture<'static, T>) -> Option<T> {
    tokio::select! {
        v = work => Some(v),
        () = cancel.cancelled() => None,
    }
}

/// `@deepseek-ai/dsh-command-feedback`: `/feedback <text>` records a remark about the
/// session in its log (`feedback/record {text}`), where whoever reads the log later finds it.
pub struct FeedbackCommandPlugin;

/// The event `/feedback` appends.
pub const FEEDBACK_EVENT: &str = "feedback/record";

impl Plugin for FeedbackCommandPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-command-feedback"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let commands = ctx.require::<CommandRegistry>()?;
        commands.register(
            ctx,
            CommandDefinition {
                name: "feedback".into(),
                description: "Leave a remark about this session in its log".into(),
                hint: Some("<text>".into()),
                // The text goes into the feedback event, not the command record as well.
                record_input: false,
                handler: Arc::new(|invocation| {
                    Box::pin(async move {
                        let text = invocation.raw_input.trim();
                        if text.is_empty() {
                            return Ok(CommandResult::error(
                                "Nothing to record: write the remark after the command, as in /feedback the tests were flaky",
                            ));
                        }
                        let session = invocation.agent.session();
                        let event = session.append(FEEDBACK_EVENT, json!({"text": text}), None)?;
                        Ok(CommandResult::Success {
                            text: Some(format!("Feedback recorded in session {}.", session.id())),
                            source_event_seq: Some(event.seq),
                        })
                    })
                }),
            },
        )?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-commands`: provides [`CommandRegistry`].
pub struct CommandsPlugin;

impl Plugin for CommandsPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-commands"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.provide(CommandRegistry::new())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_line_grammar_matches_upstream() {
        assert_eq!(parse_command("/compact"), Some(("compact", "")));
        assert_eq!(
            parse_command("/permission read-only"),
            Some(("permission", " read-only"))
        );
        assert_eq!(parse_command("/tmp is full"), Some(("tmp", " is full")));
        assert_eq!(parse_command("/usr/bin/x"), None);
        assert_eq!(parse_command("/Compact"), None);
        assert_eq!(parse_command("/"), None);
        assert_eq!(parse_command(" /compact"), None);
        assert_eq!(parse_command("/9lives"), None);
        assert_eq!(parse_command("/a-b_c\tx"), Some(("a-b_c", "\tx")));
    }
}
