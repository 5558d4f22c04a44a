//! `write`: create or fully replace a UTF-8 text file (atomic, guarded by the write intent).

use std::sync::Arc;

use dsh_kernel::BoxError;
use dsh_tools::{ObjectSchema, Reply, ToolRunContext, TypedTool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::FsBackend;
use super::diff::{diffs_meta, hunk_diffs};
use super::events::{IntentRequest, Observation, observed, write_intent};
use super::io::write_text;
use super::mutate::{DenialText, mutation_base, remediate, resolve_policy, with_escalation_fields};
use crate::errors;
use crate::guidance::PromptSection;
use crate::paths::resolve_target;

/// The `write` tool.
#[derive(Clone)]
pub struct WriteTool {
    backend: Arc<FsBackend>,
}

// The arguments (no doc: upstream's parameter object carries no description). Under a
// confining backend the escalation pair is declared too (`tune`) and read from the call's
// arguments as sent.
#[derive(Deserialize, JsonSchema)]
pub struct WriteArgs {
    /// The file to write; relative paths start at the session workspace.
    file_path: String,
    /// The complete new contents of the file, as UTF-8 text.
    content: String,
}

/// What a Code Mode binding of `write` resolves to.
#[derive(Serialize, JsonSchema)]
pub struct WriteValue {
    path: String,
    operation: WriteOperation,
    before: Option<String>,
    after: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WriteOperation {
    Create,
    Update,
}

impl WriteTool {
    pub fn new(backend: Arc<FsBackend>) -> Self {
        Self { backend }
    }

    /// The `tool:write` prompt section.
    pub fn prompt_section(&self) -> PromptSection {
        PromptSection::new(
            "tool:write",
            101,
            "write produces a complete file, either new or replacing an old one wholesale. Before overwriting a file that already exists, read it (the read-before-edit policy enforces this); for small changes edit is the better choice.",
        )
    }
}

impl TypedTool for WriteTool {
    type Args = WriteArgs;
    type Value = WriteValue;

    fn name(&self) -> String {
        "write".into()
    }

    fn description(&self) -> String {
        "Writes a whole UTF-8 text file: makes it if it is missing, otherwise overwrites all of it."
            .into()
    }

    fn tune(&self, params: &mut ObjectSchema) {
        if self.backend.sandbox.is_some() {
            *params = with_escalation_fields(std::mem::take(params));
        }
    }

    async fn run(
        self: Arc<Self>,
        args: WriteArgs,
        run: ToolRunContext,
    ) -> Result<Reply<WriteValue>, BoxError> {
        let WriteArgs { file_path, content } = args;
        if file_path.trim().is_empty() {
            return Err(errors::plain("file_path must be a non-empty string"));
        }
        let policy = resolve_policy(&self.backend, run.arguments(), &run).await?;
        let base = mutation_base(&self.backend, &run, &file_path, policy.as_ref());
        let target = resolve_target(&base, &file_path)?;
        let request = IntentRequest {
            target: target.clone(),
            session: run.session.clone(),
        };
        let intent = write_intent(&run.ctx, &request).await?;
        let outcome = write_text(
            &target,
            content,
            intent,
            policy.as_ref(),
            self.backend.diff_basis_max_bytes,
            dsh_tools::client_files(&run),
        )
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
        let verb = if outcome.created {
            "Created"
        } else {
            "Updated"
        };
        let text = format!(
            "<path>{}</path>\n<type>file</type>\n<content>\n{verb} file\n</content>",
            target.display
        );
        let diffs = match &outcome.before {
            Some(before) => hunk_diffs(&file_path, before, &outcome.after),
            None => Vec::new(),
        };
        Ok(Reply::text(text)
            .with_meta(diffs_meta(diffs))
            .with_value(WriteValue {
                path: target.display,
                operation: if outcome.created {
                    WriteOperation::Create
                } else {
                    WriteOperation::Update
                },
                before: outcome.before,
                after: outcome.after,
            }))
    }
}
