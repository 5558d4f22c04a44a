//! `@deepseek-ai/dsh-command-compact`: `/compact` compacts an idle session's history now.

use std::sync::Arc;

use dsh_commands::{CommandDefinition, CommandRegistry, CommandResult};
use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};

use super::{CompactionEngine, ManualError};

/// What `/compact` tells the user when a manual compaction does not happen.
fn manual_error_text(e: ManualError) -> &'static str {
    match e {
        ManualError::Busy => {
            "Cannot compact now: another compaction is running in this process, or the agent is busy. Try again when it is idle."
        }
        ManualError::Cancelled => "Compaction cancelled.",
        ManualError::Changed => {
            "Compaction stopped: the history it was summarizing changed before the summary could take its place. Nothing in the conversation changed, and the session log records the attempt."
        }
        ManualError::Summary => {
            "Compaction stopped: no usable summary came back (the summary call failed, or its result was not shorter than the history). Nothing in the conversation changed, and the session log records the attempt."
        }
        ManualError::Commit => {
            "Compaction failed part-way, so the session history may be partly rewritten. Check the current state of the session before trying again."
        }
        ManualError::Persistence => "Compaction finished, but the session could not be saved.",
    }
}

/// Registers `/compact` in the command registry.
pub struct CommandCompactPlugin;

impl Plugin for CommandCompactPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-command-compact"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let registry = ctx.require::<CommandRegistry>()?;
        let engine = ctx.require::<CompactionEngine>()?;
        registry.register(
            ctx,
            CommandDefinition {
                name: "compact".into(),
                description: "Compact older conversation history".into(),
                hint: None,
                record_input: true,
                handler: Arc::new(move |invocation| {
                    let engine = engine.clone();
                    Box::pin(async move {
                        if !invocation.raw_input.trim().is_empty() {
                            return Ok(CommandResult::error("Usage: /compact (no arguments)"));
                        }
                        if invocation.cancel.is_cancelled() {
                            return Ok(CommandResult::error(manual_error_text(
                                ManualError::Cancelled,
                            )));
                        }
                        Ok(
                            match engine
                                .compact_now(
                                    &invocation.agent,
                                    &invocation.command_id,
                                    &invocation.cancel,
                                )
                                .await
                            {
                                Ok(None) => CommandResult::ok("No compactable history yet."),
                                Ok(Some(done)) => CommandResult::Success {
                                    text: Some(format!(
                                        "Compacted {} history items (~{} tokens).",
                                        done.shadowed, done.shadowed_tokens
                                    )),
                                    source_event_seq: Some(done.summary_seq),
                                },
                                Err(e) => CommandResult::error(manual_error_text(e)),
                            },
                        )
                    })
                }),
            },
        )?;
        Ok(())
    }
}
