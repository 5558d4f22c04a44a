//! `/plan [off|message]`.

use std::sync::Arc;

use dsh_commands::{CommandDefinition, CommandRegistry, CommandResult};
use dsh_kernel::{BoxError, Context};
use dsh_llm::Message;

use crate::service::{PlanMode, SetOutcome};

/// Registers `/plan`: bare selects plan mode; `off` selects the normal mode (cancelling a
/// pending entry); any other text selects plan mode and steers the text in as the next
/// step's user message.
pub(crate) fn register(
    ctx: &Context,
    commands: &Arc<CommandRegistry>,
    service: Arc<PlanMode>,
) -> Result<(), BoxError> {
    commands.register(
        ctx,
        CommandDefinition {
            name: "plan".into(),
            description: "Enter or leave plan mode".into(),
            hint: Some("[off|message]".into()),
            record_input: true,
            handler: Arc::new(move |invocation| {
                let service = service.clone();
                Box::pin(async move {
                    let agent = &invocation.agent;
                    let message = invocation.raw_input.trim();
                    if message == "off" {
                        return Ok(match service.set(agent, false) {
                            Ok(SetOutcome::Committed) => CommandResult::ok("Plan mode off."),
                            Ok(SetOutcome::Queued) => {
                                CommandResult::ok("Leaving plan mode from the next step.")
                            }
                            Ok(SetOutcome::Cancelled) => {
                                CommandResult::ok("Plan mode will not start: entry cancelled.")
                            }
                            Ok(SetOutcome::Noop) if service.get(agent).active => {
                                CommandResult::ok("Leaving plan mode from the next step.")
                            }
                            Ok(SetOutcome::Noop) => CommandResult::ok("Plan mode is already off."),
                            Err(e) => CommandResult::error(format!(
                                "plan mode could not be switched off: {e}"
                            )),
                        });
                    }
                    let outcome = match service.set(agent, true) {
                        Ok(o) => o,
                        Err(e) => {
                            return Ok(CommandResult::error(format!(
                                "plan mode could not be switched on: {e}"
                            )));
                        }
                    };
                    if !message.is_empty()
                        && let Err(e) = agent.steer(Message::user_text(message))
                    {
                        return Ok(CommandResult::error(format!(
                            "plan mode is selected, but the message was not sent: {e}"
                        )));
                    }
                    Ok(CommandResult::ok(match outcome {
                        SetOutcome::Committed => "Plan mode on. Leave it with /plan off.",
                        SetOutcome::Noop if service.get(agent).active => {
                            "Plan mode is already on. Leave it with /plan off."
                        }
                        SetOutcome::Cancelled => {
                            "Plan mode stays on: the pending exit was cancelled."
                        }
                        SetOutcome::Queued | SetOutcome::Noop => {
                            "Entering plan mode from the next step. Leave it with /plan off."
                        }
                    }))
                })
            }),
        },
    )?;
    Ok(())
}
