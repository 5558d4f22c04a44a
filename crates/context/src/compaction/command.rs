//! `@deepseek-ai/dsh-command-compact`: `/compact` compacts an idle session's history now.

use std::sync::Arc;

use dsh_commands::{CommandDefinition, CommandRegistry, CommandResult};
use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};

use super::{CompactionEngine, ManualError};

/// Upstream's user-visible answers.
fn manual_error_text(e: ManualError) -> &'static str {
    match e {
        ManualError::Busy => {
            "Compaction is unavailable because this process has an active compaction, or the agent is not idle."
        }
        ManualError::Cancelled => "Compaction cancelled.",
        ManualError::Changed => {
            "The history selected for compaction changed before it could be replaced. The conversation is unchanged; the attempt is recorded in the session log."
        }
        ManualError::Summary => {
            "Compaction could not produce a useful summary. The conversation is unchanged; the attempt is recorded in the session log."
        }
        ManualError::Commit => {
            "Compaction did not finish cleanly; some session history may have changed. Inspect the current session state before retrying."
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
