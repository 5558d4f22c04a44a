//! What `write` and `edit` share: the escalation fields, per-call policy resolution, the
//! resolution base, and the model-facing remedies for guarded-mutation failures.

use std::path::PathBuf;

use dsh_kernel::BoxError;
use dsh_tools::{ObjectSchema, Prop, ToolRunContext};
use serde_json::Value;

use super::FsBackend;
use crate::errors::{self, code_of};
use crate::paths::fs_base;
use crate::sandbox::{
    ESCALATION_TARGETS, EscalationArgs, ExecutionPolicy, approve_escalation, denial_marker,
    escalation_hint,
};

/// Adds the two escalation fields (only under a confining backend).
pub(crate) fn with_escalation_fields(params: ObjectSchema) -> ObjectSchema {
    params
        .optional(
            "sandbox_permissions",
            Prop::enumeration(
                "A wider sandbox mode for this one file operation. Only for retrying an operation the sandbox just refused; needs a justification and the user's approval.",
                &ESCALATION_TARGETS,
            ),
        )
        .optional(
            "justification",
            Prop::string("Goes with sandbox_permissions: one sentence telling the user why this file operation needs the wider access."),
        )
}

/// The policy this mutation runs under: an approved escalation (asked before anything
/// runs), else the session's standing policy; `None` without a confining backend.
pub(crate) async fn resolve_policy(
    backend: &FsBackend,
    args: &Value,
    run: &ToolRunContext,
) -> Result<Option<ExecutionPolicy>, BoxError> {
    let escalation = EscalationArgs::from_args(args);
    escalation.validate()?;
    let standing = backend
        .sandbox
        .as_ref()
        .map(|p| p.resolve(run.session.as_deref()));
    let Some((mode, justification)) = escalation.requested() else {
        // A client that asks its user before a forbidden change (an editor over ACP) gets
        // the question at once, instead of a refusal the model must turn into a retry.
        if let Some(standing) = &standing
            && standing.mode == dsh_sandbox::SandboxMode::ReadOnly
            && dsh_tools::asks_at_once(run)
        {
            let target = args
                .get("file_path")
                .and_then(Value::as_str)
                .unwrap_or("a file");
            let why = format!(
                "this session is read-only and {} changes {target}",
                run.name
            );
            let granted = approve_escalation(
                "workspace-write",
                &why,
                standing.mode,
                "operation",
                run,
                args,
            )
            .await?;
            return Ok(Some(ExecutionPolicy {
                mode: granted,
                ..standing.clone()
            }));
        }
        return Ok(standing);
    };
    let Some(standing) = standing else {
        return Err(errors::plain(
            "sandbox_permissions does not apply here: file tools in this setup are not sandboxed, so there is nothing to widen; call again without sandbox_permissions and justification",
        ));
    };
    let granted =
        approve_escalation(mode, justification, standing.mode, "operation", run, args).await?;
    Ok(Some(ExecutionPolicy {
        mode: granted,
        ..standing
    }))
}

/// Relative paths of a mutation resolve against the policy's workspace root when
/// confined, else like `read`.
pub(crate) fn mutation_base(
    backend: &FsBackend,
    run: &ToolRunContext,
    path: &str,
    policy: Option<&ExecutionPolicy>,
) -> PathBuf {
    match policy {
        Some(p) => p.workspace_root.clone(),
        None => fs_base(run, path, &backend.cwd),
    }
}

/// How a sandbox denial reads to the model.
#[derive(Clone, Copy)]
pub(crate) enum DenialText {
    /// The marker plus the escalation hint (`write`, `edit`).
    MarkerAndHint,
    /// The marker alone (`str_replace_editor`, which cannot escalate).
    Marker,
}

/// Turns a sandbox denial into the shared `[sandbox: …]` marker (keeping its code) and
/// appends the recovery to stale/not-observed failures; anything else passes through.
pub(crate) fn remediate(
    error: BoxError,
    policy: Option<&ExecutionPolicy>,
    denial: DenialText,
) -> BoxError {
    let message = error.to_string();
    match code_of(&error) {
        Some("FS_SANDBOX_DENIED") => match policy {
            Some(p) => {
                let text = match denial {
                    DenialText::MarkerAndHint => format!(
                        "{}\n{}",
                        denial_marker(p.mode),
                        escalation_hint("operation")
                    ),
                    DenialText::Marker => denial_marker(p.mode),
                };
                errors::fs("FS_SANDBOX_DENIED", text)
            }
            None => error,
        },
        Some("FS_STALE_VERSION") if matches!(denial, DenialText::MarkerAndHint) => errors::fs(
            "FS_STALE_VERSION",
            format!("{message} — read it again, then retry"),
        ),
        Some("FS_NOT_OBSERVED") if matches!(denial, DenialText::MarkerAndHint) => errors::fs(
            "FS_NOT_OBSERVED",
            format!("{message} — read the file, then retry"),
        ),
        _ => error,
    }
}
