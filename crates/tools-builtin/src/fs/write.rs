//! `write`: create or fully replace a UTF-8 text file (atomic, guarded by the write intent).

use std::sync::Arc;

use dsh_kernel::{BoxError, BoxFuture};
use dsh_llm::ToolSchema;
use dsh_tools::{ObjectSchema, Prop, Tool, ToolOutput, ToolRunContext};
use serde_json::Value;

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
    inner: Arc<Inner>,
}

struct Inner {
    schema: ToolSchema,
    params: ObjectSchema,
    backend: Arc<FsBackend>,
}

impl WriteTool {
    pub fn new(backend: Arc<FsBackend>) -> Self {
        let mut params = ObjectSchema::new()
            .required(
                "file_path",
                Prop::string("The file to write; relative paths start at the session workspace."),
            )
            .required(
                "content",
                Prop::string("The complete new contents of the file, as UTF-8 text."),
            );
        if backend.sandbox.is_some() {
            params = with_escalation_fields(params);
        }
        let schema = ToolSchema {
            name: "write".into(),
            description: "Writes a whole UTF-8 text file: makes it if it is missing, otherwise overwrites all of it."
                .into(),
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

    /// The `tool:write` prompt section.
    pub fn prompt_section(&self) -> PromptSection {
        PromptSection::new(
            "tool:write",
            101,
            "write produces a complete file, either new or replacing an old one wholesale. Before overwriting a file that already exists, read it (the read-before-edit policy enforces this); for small changes edit is the better choice.",
        )
    }
}

impl Inner {
    async fn run(&self, args: Value, run: ToolRunContext) -> Result<ToolOutput, BoxError> {
        let file_path = args
            .get("file_path")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let content = args
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if file_path.trim().is_empty() {
            return Err(errors::plain("file_path must be a non-empty string"));
        }
        let policy = resolve_policy(&self.backend, &args, &run).await?;
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
        run.set_value(serde_json::json!({
            "path": target.display,
            "operation": if outcome.created { "create" } else { "update" },
            "before": outcome.before,
            "after": outcome.after,
        }));
        Ok(ToolOutput {
            meta: Some(diffs_meta(diffs)),
            ..ToolOutput::text(text)
        })
    }
}

impl Tool for WriteTool {
    fn schema(&self) -> &ToolSchema {
        &self.inner.schema
    }

    fn output_schema(&self) -> Option<&Value> {
        Some(crate::outputs::write())
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
