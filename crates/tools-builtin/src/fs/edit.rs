//! `edit`: replace literal text in an existing UTF-8 file (unique match unless `replace_all`).

use std::sync::Arc;

use dsh_kernel::BoxError;
use dsh_tools::{ObjectSchema, Reply, ToolRunContext, TypedTool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::FsBackend;
use super::diff::{diffs_meta, hunk_diffs};
use super::events::{IntentRequest, Observation, edit_intent, observed};
use super::io::{EditRequest, edit_text};
use super::mutate::{DenialText, mutation_base, remediate, resolve_policy, with_escalation_fields};
use crate::errors;
use crate::guidance::PromptSection;
use crate::paths::resolve_target;

/// The `edit` tool.
#[derive(Clone)]
pub struct EditTool {
    backend: Arc<FsBackend>,
}

// The arguments (no doc: upstream's parameter object carries no description). Under a
// confining backend the escalation pair is declared too (`tune`) and read from the call's
// arguments as sent.
#[derive(Deserialize, JsonSchema)]
pub struct EditArgs {
    /// The file to change; relative paths start at the session workspace.
    file_path: String,
    /// The exact text to find, character for character.
    old_string: String,
    /// The text to put in its place; an empty string deletes the match.
    new_string: String,
    /// Replace every occurrence. Defaults to false, in which case old_string has to occur exactly once.
    replace_all: Option<bool>,
}

/// What a Code Mode binding of `edit` resolves to.
#[derive(Serialize, JsonSchema)]
pub struct EditValue {
    path: String,
    before: String,
    after: String,
}

impl EditTool {
    pub fn new(backend: Arc<FsBackend>) -> Self {
        Self { backend }
    }

    /// The `tool:edit` prompt section.
    pub fn prompt_section(&self) -> PromptSection {
        PromptSection::new(
            "tool:edit",
            102,
            "edit is for targeted changes to a UTF-8 text file: it finds old_string literally and puts new_string in its place. Unless replace_all is set, old_string must be found exactly once, so widen it with neighbouring text when it is not unique. The file must have been read in this session first (or written or edited by you since), otherwise the edit is refused.",
        )
    }
}

impl TypedTool for EditTool {
    type Args = EditArgs;
    type Value = EditValue;

    fn name(&self) -> String {
        "edit".into()
    }

    fn description(&self) -> String {
        "Swaps one exact snippet of an existing UTF-8 file for new text (or every copy of it with replace_all).".into()
    }

    fn tune(&self, params: &mut ObjectSchema) {
        if self.backend.sandbox.is_some() {
            *params = with_escalation_fields(std::mem::take(params));
        }
    }

    async fn run(
        self: Arc<Self>,
        args: EditArgs,
        run: ToolRunContext,
    ) -> Result<Reply<EditValue>, BoxError> {
        let EditArgs {
            file_path,
            old_string: old,
            new_string: new,
            replace_all,
        } = args;
        let replace_all = replace_all.unwrap_or(false);
        if file_path.trim().is_empty() {
            return Err(errors::plain("file_path must be a non-empty string"));
        }
        if old.is_empty() {
            return Err(errors::plain(
                "old_string is empty: pass the exact text to replace",
            ));
        }
        if old == new {
            return Err(errors::plain(
                "old_string and new_string are identical, so the edit would change nothing: put the replacement text in new_string",
            ));
        }
        let policy = resolve_policy(&self.backend, run.arguments(), &run).await?;
        let base = mutation_base(&self.backend, &run, &file_path, policy.as_ref());
        let target = resolve_target(&base, &file_path)?;
        let request = IntentRequest {
            target: target.clone(),
            session: run.session.clone(),
        };
        let outcome = async {
            let expected = edit_intent(&run.ctx, &request).await?;
            edit_text(
                &target,
                EditRequest {
                    old,
                    new,
                    replace_all,
                },
                expected,
                policy.as_ref(),
                dsh_tools::client_files(&run),
            )
            .await
        }
        .await
        .map_err(|e| remediate(e, policy.as_ref(), DenialText::MarkerAndHint))?;
        observed(
            &run.ctx,
            &target,
            Observation::Present {
                version: outcome.version.clone(),
            },
            run.session.as_ref(),
        );
        let message = if replace_all {
            format!(
                "The file {} has been updated. All occurrences were successfully replaced.",
                target.display
            )
        } else {
            format!("The file {} has been updated successfully.", target.display)
        };
        let meta = diffs_meta(hunk_diffs(&file_path, &outcome.before, &outcome.after));
        Ok(Reply::text(message).with_meta(meta).with_value(EditValue {
            path: target.display,
            before: outcome.before,
            after: outcome.after,
        }))
    }
}
