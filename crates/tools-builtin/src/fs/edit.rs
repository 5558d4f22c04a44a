//! `edit`: replace literal text in an existing UTF-8 file (unique match unless `replace_all`).

use std::sync::Arc;

use dsh_kernel::{BoxError, BoxFuture};
use dsh_llm::ToolSchema;
use dsh_tools::{ObjectSchema, Prop, Tool, ToolOutput, ToolRunContext};
use serde_json::Value;

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
    inner: Arc<Inner>,
}

struct Inner {
    schema: ToolSchema,
    params: ObjectSchema,
    backend: Arc<FsBackend>,
}

impl EditTool {
    pub fn new(backend: Arc<FsBackend>) -> Self {
        let mut params = ObjectSchema::new()
            .required("file_path", Prop::string("The file to change; relative paths start at the session workspace."))
            .required("old_string", Prop::string("The exact text to find, character for character."))
            .required("new_string", Prop::string("The text to put in its place; an empty string deletes the match."))
            .optional(
                "replace_all",
                Prop::boolean("Replace every occurrence. Defaults to false, in which case old_string has to occur exactly once."),
            );
        if backend.sandbox.is_some() {
            params = with_escalation_fields(params);
        }
        let schema = ToolSchema {
            name: "edit".into(),
            description: "Swaps one exact snippet of an existing UTF-8 file for new text (or every copy of it with replace_all).".into(),
            parameters: params.to_value().into(),
        };
        Self {
            inner: Arc::new(Inner {
                schema,
                params,
                backend,
            }),
        }
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

impl Inner {
    async fn run(&self, args: Value, run: ToolRunContext) -> Result<ToolOutput, BoxError> {
        let text = |k: &str| {
            args.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let (file_path, old, new) = (text("file_path"), text("old_string"), text("new_string"));
        let replace_all = args
            .get("replace_all")
            .and_then(Value::as_bool)
            .unwrap_or(false);
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
        let policy = resolve_policy(&self.backend, &args, &run).await?;
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
        run.set_value(serde_json::json!({
            "path": target.display,
            "before": outcome.before,
            "after": outcome.after,
        }));
        Ok(ToolOutput {
            meta: Some(meta),
            ..ToolOutput::text(message)
        })
    }
}

impl Tool for EditTool {
    fn schema(&self) -> &ToolSchema {
        &self.inner.schema
    }

    fn output_schema(&self) -> Option<&Value> {
        Some(crate::outputs::edit())
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        self.inner.params.validate(args)
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.run(args, ctx).await })
    }
}
