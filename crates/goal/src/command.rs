//! `/goal` (`@deepseek-ai/dsh-command-goal`): show, set, edit, pause, resume or clear the
//! session's goal by hand.

use std::sync::Arc;

use dsh_commands::{CommandDefinition, CommandRegistry, CommandResult};
use dsh_kernel::{BoxError, Context};

use crate::GoalPhase;
use crate::service::{GoalEdit, GoalRef, GoalView, Goals};

/// The grammar `/goal` accepts.
pub const USAGE: &str = "Usage: /goal [<objective>|clear|edit <objective>|pause|resume]";
const HINT: &str = "[<objective>|clear|edit <objective>|pause|resume]";

/// One parsed `/goal` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GoalCommand {
    Show,
    Create(String),
    Edit(String),
    EditWithoutObjective,
    Pause,
    Resume,
    Clear,
}

/// Parses the text after `/goal`. The control words are matched case-insensitively; any
/// other text is a new objective.
pub fn parse(raw: &str) -> GoalCommand {
    let input = raw.trim();
    if input.is_empty() {
        return GoalCommand::Show;
    }
    match input.to_lowercase().as_str() {
        "clear" => return GoalCommand::Clear,
        "pause" => return GoalCommand::Pause,
        "resume" => return GoalCommand::Resume,
        "edit" => return GoalCommand::EditWithoutObjective,
        _ => {}
    }
    let mut chars = input.char_indices();
    let head: String = chars.by_ref().take(4).map(|(_, c)| c).collect();
    if head.eq_ignore_ascii_case("edit")
        && let Some((i, c)) = chars.next()
        && c.is_whitespace()
    {
        return GoalCommand::Edit(input[i..].trim().to_string());
    }
    GoalCommand::Create(input.to_string())
}

/// The commands that make sense for `goal` as it is now.
fn next_commands(goal: &GoalView) -> &'static str {
    match goal.goal().phase {
        GoalPhase::Active if goal.drivable() => "/goal edit <objective>, /goal pause, /goal clear",
        GoalPhase::Active | GoalPhase::Paused | GoalPhase::Blocked => {
            "/goal edit <objective>, /goal resume, /goal clear"
        }
        GoalPhase::Complete => "/goal <objective>, /goal clear",
    }
}

/// The text a person sees for `goal` under `title`.
pub fn render(title: &str, goal: &GoalView) -> String {
    let g = goal.goal();
    let mut lines = vec![title.to_string(), format!("Status: {}", g.phase.as_str())];
    if let Some(r) = &g.blocked_reason {
        lines.push(format!("Blocker: {}: {}", r.code, r.message));
    }
    lines.push(format!("Objective: {}", g.objective));
    lines.push(format!(
        "Rounds: {}/{}",
        goal.record.rounds_started, g.max_goal_rounds
    ));
    lines.push(format!("Activation: {}", goal.activation.as_str()));
    lines.push(String::new());
    lines.push(format!("Commands: {}", next_commands(goal)));
    lines.join("\n")
}

fn missing(action: &str) -> CommandResult {
    CommandResult::error(format!(
        "This session has no goal, so /goal {action} has nothing to act on. {USAGE}"
    ))
}

fn run(goals: &Goals, agent: &dsh_agent::AgentRef, command: GoalCommand) -> CommandResult {
    let current = match goals.get(agent) {
        Ok(c) => c,
        Err(e) => return CommandResult::error(format!("the goal cannot be read: {e}")),
    };
    let outcome = match command {
        GoalCommand::Show => {
            return match &current {
                None => CommandResult::ok(format!("This session has no goal yet.\n{USAGE}")),
                Some(goal) => CommandResult::ok(render("Goal", goal)),
            };
        }
        GoalCommand::EditWithoutObjective => {
            return CommandResult::error(format!("/goal edit needs the new objective.\n{USAGE}"));
        }
        GoalCommand::Create(objective) => {
            if let Some(c) = &current
                && c.goal().phase != GoalPhase::Complete
            {
                return CommandResult::error(format!(
                    "This session's goal is {}. Change it with /goal edit <objective>, or remove it with /goal clear first.",
                    c.goal().phase.as_str()
                ));
            }
            goals
                .create(agent, &objective, None)
                .map(|g| render("Goal set", &g))
        }
        GoalCommand::Edit(objective) => match &current {
            None => return missing("edit"),
            Some(c) if c.goal().phase == GoalPhase::Complete => goals
                .create(agent, &objective, None)
                .map(|g| render("Goal set", &g)),
            Some(c) => goals
                .edit(
                    agent,
                    &GoalRef::from(c),
                    GoalEdit {
                        objective: Some(objective),
                        max_goal_rounds: None,
                    },
                )
                .map(|g| render("Goal changed", &g)),
        },
        GoalCommand::Pause => match &current {
            None => return missing("pause"),
            Some(c) => goals.pause(agent, &GoalRef::from(c)).map(|g| {
                // A person pausing while a turn runs (a web or ACP prompt during a round)
                // stops that turn too, as upstream; queued input stays for later.
                if agent.status() == dsh_agent::AgentStatus::Running {
                    agent.cancel(dsh_session::CancelCause::User, true);
                }
                render("Goal paused", &g)
            }),
        },
        GoalCommand::Resume => match &current {
            None => return missing("resume"),
            Some(c) => goals
                .resume(agent, &GoalRef::from(c))
                .map(|g| render("Goal resumed", &g)),
        },
        GoalCommand::Clear => match &current {
            None => return CommandResult::ok("There is no goal to clear."),
            Some(c) => goals
                .clear(agent, &GoalRef::from(c))
                .map(|_| "Goal removed.".to_string()),
        },
    };
    match outcome {
        Ok(text) => CommandResult::ok(text),
        Err(e) if e.code.starts_with("GOAL_") => CommandResult::error(format!(
            "That /goal command does not fit the goal as it is now ({}). Run /goal to see what you can do.",
            e.message
        )),
        Err(e) => CommandResult::error(e.to_string()),
    }
}

/// Registers `/goal`.
pub(crate) fn register(
    ctx: &Context,
    commands: &Arc<CommandRegistry>,
    goals: Arc<Goals>,
) -> Result<(), BoxError> {
    commands.register(
        ctx,
        CommandDefinition {
            name: "goal".into(),
            description: "Show or set the goal of a long-running task".into(),
            hint: Some(HINT.into()),
            record_input: true,
            handler: Arc::new(move |invocation| {
                let goals = goals.clone();
                Box::pin(
                    async move { Ok(run(&goals, &invocation.agent, parse(&invocation.raw_input))) },
                )
            }),
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_is_upstreams() {
        assert_eq!(parse("  "), GoalCommand::Show);
        assert_eq!(parse(" Pause "), GoalCommand::Pause);
        assert_eq!(parse("RESUME"), GoalCommand::Resume);
        assert_eq!(parse("clear"), GoalCommand::Clear);
        assert_eq!(parse("edit"), GoalCommand::EditWithoutObjective);
        assert_eq!(parse("Edit  ship it "), GoalCommand::Edit("ship it".into()));
        assert_eq!(
            parse("editor fixes"),
            GoalCommand::Create("editor fixes".into())
        );
        assert_eq!(
            parse("pause the build"),
            GoalCommand::Create("pause the build".into())
        );
    }
}
