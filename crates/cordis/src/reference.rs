//! `@pluginId` in the user's own message: before the step, the model gets the plugin's
//! identity, version pointers and state (never its source), or a note that the plugin is
//! unavailable, so it modifies that plugin instead of creating another one.

use std::sync::Arc;

use dsh_agent::{PreStep, PreStepDecision};
use dsh_kernel::{BoxError, Context, ListenOptions};
use dsh_llm::{ContentBlock, Message, MessageSource};
use serde_json::Value;

use crate::json::pretty;
use crate::runner::DynamicPackages;

/// The `@<prefix>-<n>` tokens (whitespace-bounded) of the user's own messages, first seen
/// first, without repeats. Only the user can reference a plugin this way.
pub fn referenced_plugin_ids<'a>(messages: impl IntoIterator<Item = &'a Message>) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for message in messages {
        if message.source.kind() != "user" {
            continue;
        }
        for block in &message.content {
            let ContentBlock::Text { text } = block else {
                continue;
            };
            for token in text.split(char::is_whitespace) {
                if let Some(id) = token.strip_prefix('@')
                    && is_plugin_id(id)
                    && !ids.iter().any(|i| i == id)
                {
                    ids.push(id.to_string());
                }
            }
        }
    }
    ids
}

fn is_plugin_id(id: &str) -> bool {
    let Some((prefix, number)) = id.split_once('-') else {
        return false;
    };
    (3..=6).contains(&prefix.len())
        && prefix.chars().all(|c| c.is_ascii_lowercase())
        && !number.is_empty()
        && number.chars().all(|c| c.is_ascii_digit())
}

/// The context text for one reference.
pub fn render_reference(id: &str, reference: Option<&Value>) -> String {
    let Some(reference) = reference else {
        return format!(
            "<cordis_dynamic_plugin_context>\n\
             The user referenced @{id}, but no such dynamic plugin exists in this session: it was removed, \
             belongs to another session, or was lost when dsh restarted. Tell the user so; do not claim to \
             have changed it and do not quietly create a replacement.\n\
             </cordis_dynamic_plugin_context>"
        );
    };
    let package = reference["packageId"].as_str().unwrap_or_default();
    let mode = if reference.get("currentPackageId").is_some() {
        "update"
    } else {
        "run"
    };
    format!(
        "<cordis_dynamic_plugin_context>\n{}\n\n\
         The user referenced @{id}; treat package {package} as the base of the change. Read its source first \
         with cordis_inspect_self (pluginId \"{id}\", packageId \"{package}\"), then add the new version with \
         cordis_define (plugin.kind \"existing\", pluginId \"{id}\") and start it with cordis_run mode \"{mode}\". \
         Do not create a new plugin for this request.\n\
         </cordis_dynamic_plugin_context>",
        pretty(reference)
    )
}

fn context_message(text: String) -> Message {
    Message::user(
        vec![ContentBlock::text(text)],
        MessageSource::plugin(
            "tool-cordis",
            [("form".to_string(), Value::from("instructions"))],
        ),
    )
}

/// Adds the reference context after whatever the step would enter.
pub fn install(ctx: &Context, runner: &Arc<DynamicPackages>) -> Result<(), BoxError> {
    let runner = Arc::downgrade(runner);
    ctx.on_waterfall::<PreStep>(ListenOptions::default(), move |p, next| {
        let runner = runner.clone();
        Box::pin(async move {
            let decision = next.run().await?;
            let PreStepDecision::Enter(mut messages) = decision else {
                return Ok(decision);
            };
            let ids = referenced_plugin_ids(p.messages.iter().map(|m| m.as_ref()));
            let Some(runner) = runner.upgrade() else {
                return Ok(PreStepDecision::Enter(messages));
            };
            let session_id = p.agent.session().id();
            for id in ids {
                let reference = runner.reference(&session_id, &id);
                messages.push(Arc::new(context_message(render_reference(
                    &id,
                    reference.as_ref(),
                ))));
            }
            Ok(PreStepDecision::Enter(messages))
        })
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn only_the_users_whole_tokens_count() {
        let user = Message::user_text(
            "fix @words-1 and @words-1, also @Bad-2 @ab-3 me@snap-4 @snap-12\n@tool-7",
        );
        let model = Message::user(
            vec![ContentBlock::text("@other-1")],
            MessageSource::plugin("x", []),
        );
        assert_eq!(
            referenced_plugin_ids([&user, &model]),
            vec!["words-1", "snap-12", "tool-7"]
        );
    }
}
