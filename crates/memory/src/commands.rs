//! `/remember`, `/forget` and `/memory`: the person's own hand on memory from any front end
//! that runs slash commands (headless, web, ACP).

use std::sync::Arc;

use dsh_commands::{CommandDefinition, CommandInvocation, CommandRegistry, CommandResult};
use dsh_kernel::{BoxError, Context};
use futures::future::BoxFuture;
use serde_json::{Map, json};

use crate::plugin::{MemoryService, record_change, turn_number};
use crate::service::Found;
use crate::store::{Origin, Scope};

/// `/remember [--user] [#tag …] text`: the scope and tags in front, then the text.
pub fn parse_remember(input: &str) -> (Scope, Vec<String>, String) {
    let mut scope = Scope::Workspace;
    let mut tags = Vec::new();
    let mut rest = input.trim();
    loop {
        let (word, after) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        match word {
            "--user" | "-u" => scope = Scope::User,
            "--workspace" | "-w" => scope = Scope::Workspace,
            w if w.len() > 1 && w.starts_with('#') => tags.push(w[1..].to_string()),
            _ => break,
        }
        rest = after.trim_start();
    }
    (scope, tags, rest.to_string())
}

/// The memory files of the session's directory, or the refusal to show.
fn memory_of(
    inv: &dsh_commands::CommandInvocation,
    service: &MemoryService,
) -> Result<crate::service::Memory, CommandResult> {
    inv.agent.cwd().map(|cwd| service.at(&cwd)).ok_or_else(|| {
        CommandResult::error("This session has no working directory, so it has no project memory.")
    })
}

const NOTHING_TO_REMEMBER: &str = "Nothing to remember: write the fact after the command, as in /remember the tests need a running postgres";
const WHICH_MEMORY: &str =
    "Which memory? Give its id, as in /forget 3f2a9c01 (/memory lists them).";

/// Runs file work off the async threads; a memory error becomes the command's error.
async fn off_thread<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, crate::store::MemoryError> + Send + 'static,
) -> Result<Result<T, CommandResult>, BoxError> {
    Ok(tokio::task::spawn_blocking(f)
        .await?
        .map_err(|e| CommandResult::error(e.to_string())))
}

fn list_text(found: &[Found], memory: &crate::service::Memory, warnings: &[String]) -> String {
    let mut out = Vec::new();
    for scope in [Scope::Workspace, Scope::User] {
        let items: Vec<String> = found
            .iter()
            .filter(|f| f.scope == scope)
            .map(|f| {
                let mark = if f.entry.proposed {
                    " (proposed: /memory accept to use it)"
                } else {
                    ""
                };
                format!(
                    "- [{}] {}{mark}",
                    f.entry.id,
                    f.entry.display().replace('\n', "\n  ")
                )
            })
            .collect();
        if items.is_empty() {
            continue;
        }
        out.push(format!(
            "{} memory ({}):\n{}",
            if scope == Scope::Workspace {
                "Workspace"
            } else {
                "User"
            },
            memory.display_path(scope),
            items.join("\n")
        ));
    }
    out.extend(warnings.iter().cloned());
    if out.is_empty() {
        "No memories yet. /remember <fact> keeps one for later sessions.".into()
    } else {
        out.join("\n\n")
    }
}

pub(crate) fn register(
    ctx: &Context,
    commands: &Arc<CommandRegistry>,
    service: &Arc<MemoryService>,
) -> Result<(), BoxError> {
    // `/remember`'s text is in the memory/change event already, so its input is not recorded.
    let commands_of: [(&str, &str, &str, bool, Run); 3] = [
        (
            "remember",
            "Keep a fact for later sessions (--user: for every project)",
            "[--user] [#tag] <fact>",
            false,
            |inv, s| Box::pin(remember(inv, s)),
        ),
        (
            "forget",
            "Remove a memory by its id",
            "<id>",
            true,
            |inv, s| Box::pin(forget(inv, s)),
        ),
        (
            "memory",
            "List memories, or accept a proposed one",
            "[accept <id>]",
            true,
            |inv, s| Box::pin(list_or_accept(inv, s)),
        ),
    ];
    for (name, description, hint, record_input, run) in commands_of {
        let s = service.clone();
        commands.register(
            ctx,
            CommandDefinition {
                name: name.into(),
                description: description.into(),
                hint: Some(hint.into()),
                record_input,
                handler: Arc::new(move |inv| run(inv, s.clone())),
            },
        )?;
    }
    Ok(())
}

/// A command's body: the invocation and the memory service.
type Run = fn(
    CommandInvocation,
    Arc<MemoryService>,
) -> BoxFuture<'static, Result<CommandResult, BoxError>>;

async fn remember(
    inv: CommandInvocation,
    s: Arc<MemoryService>,
) -> Result<CommandResult, BoxError> {
    let (scope, tags, text) = parse_remember(&inv.raw_input);
    if text.trim().is_empty() {
        return Ok(CommandResult::error(NOTHING_TO_REMEMBER));
    }
    let memory = match memory_of(&inv, &s) {
        Ok(m) => m,
        Err(refusal) => return Ok(refusal),
    };
    let session = inv.agent.session().clone();
    let origin = Origin {
        by: "user".into(),
        session: Some(session.id()),
        turn: Some(turn_number(&session)),
    };
    let m = memory.clone();
    let (added, redacted) =
        match off_thread(move || m.remember(scope, &text, &tags, origin, false)).await? {
            Ok(r) => r,
            Err(refusal) => return Ok(refusal),
        };
    let found = Found {
        scope,
        entry: added.entry,
        score: 0,
    };
    if added.duplicate {
        return Ok(CommandResult::ok(format!(
            "Already in {} memory as [{}].",
            scope, found.entry.id
        )));
    }
    let mut extra = Map::new();
    if redacted > 0 {
        extra.insert("redacted".into(), json!(redacted));
    }
    let seq = record_change(&session, "remember", "user", &memory, &found, extra)?;
    let note = if redacted > 0 {
        format!(" ({redacted} secret(s) removed before saving)")
    } else {
        String::new()
    };
    Ok(CommandResult::Success {
        text: Some(format!(
            "Remembered [{}] in {} ({}){note}. Later sessions see it.",
            found.entry.id,
            memory.display_path(scope),
            scope
        )),
        source_event_seq: Some(seq),
    })
}

async fn forget(inv: CommandInvocation, s: Arc<MemoryService>) -> Result<CommandResult, BoxError> {
    let id = inv.raw_input.trim().to_string();
    if id.is_empty() {
        return Ok(CommandResult::error(WHICH_MEMORY));
    }
    let memory = match memory_of(&inv, &s) {
        Ok(m) => m,
        Err(refusal) => return Ok(refusal),
    };
    let m = memory.clone();
    let found = match off_thread(move || m.forget(&id)).await? {
        Ok(f) => f,
        Err(refusal) => return Ok(refusal),
    };
    let session = inv.agent.session().clone();
    let seq = record_change(&session, "forget", "user", &memory, &found, Map::new())?;
    Ok(CommandResult::Success {
        text: Some(format!("Forgot [{}]: {}", found.entry.id, found.entry.text)),
        source_event_seq: Some(seq),
    })
}

async fn list_or_accept(
    inv: CommandInvocation,
    s: Arc<MemoryService>,
) -> Result<CommandResult, BoxError> {
    let memory = match memory_of(&inv, &s) {
        Ok(m) => m,
        Err(refusal) => return Ok(refusal),
    };
    let input = inv.raw_input.trim().to_string();
    let session = inv.agent.session().clone();
    if let Some(id) = input.strip_prefix("accept") {
        let id = id.trim().to_string();
        let m = memory.clone();
        let found = match off_thread(move || m.accept(&id)).await? {
            Ok(f) => f,
            Err(refusal) => return Ok(refusal),
        };
        let seq = record_change(&session, "accept", "user", &memory, &found, Map::new())?;
        return Ok(CommandResult::Success {
            text: Some(format!(
                "Accepted [{}]: later sessions see it.",
                found.entry.id
            )),
            source_event_seq: Some(seq),
        });
    }
    if !input.is_empty() && input != "list" {
        return Ok(CommandResult::error(
            "Usage: /memory, /memory list or /memory accept <id>",
        ));
    }
    let m = memory.clone();
    let (found, warnings) = tokio::task::spawn_blocking(move || m.all()).await?;
    let warnings: Vec<String> = warnings.into_iter().map(|w| w.message).collect();
    Ok(CommandResult::ok(list_text(&found, &memory, &warnings)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn remember_takes_scope_and_tags_first() {
        assert_eq!(
            parse_remember(" --user #style #go  Prefer tabs #really"),
            (
                Scope::User,
                vec!["style".to_string(), "go".to_string()],
                "Prefer tabs #really".to_string()
            )
        );
        assert_eq!(
            parse_remember("x"),
            (Scope::Workspace, vec![], "x".to_string())
        );
    }
}
