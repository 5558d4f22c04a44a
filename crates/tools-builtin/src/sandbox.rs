//! Sandbox escalation for the tools: the pairing rule of `sandbox_permissions` +
//! `justification`, and the choreography that asks the user before one call runs under a
//! wider mode. The policy itself (modes, roots, runners) lives in `dsh-sandbox`.

use dsh_kernel::BoxError;
use dsh_tools::{Approval, ApprovalOutcome, ApprovalRequest, ToolRunContext};
use serde_json::Value;

pub use dsh_sandbox::{
    ESCALATION_TARGETS, ExecutionPolicy, SandboxMode, SandboxPolicy, denial_marker, escalation_hint,
};

use crate::errors;

/// The escalation pair of a call, as given.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct EscalationArgs {
    pub sandbox_permissions: Option<String>,
    pub justification: Option<String>,
}

impl EscalationArgs {
    /// Reads the pair from raw arguments (undeclared keys still reach execute).
    pub fn from_args(args: &Value) -> Self {
        let text = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
        Self {
            sandbox_permissions: text("sandbox_permissions"),
            justification: text("justification"),
        }
    }

    /// The pairing rule: both or neither, and a non-empty justification.
    pub fn validate(&self) -> Result<(), BoxError> {
        match (&self.sandbox_permissions, &self.justification) {
            (Some(_), None) => Err(errors::plain(
                "sandbox_permissions was given without a justification: add one sentence saying why the call needs wider access",
            )),
            (None, Some(_)) => Err(errors::plain(
                "justification was given without sandbox_permissions: set both to ask for wider access, or leave both out",
            )),
            (_, Some(j)) if j.trim().is_empty() => Err(errors::plain(
                "justification is empty: write one sentence saying why the call needs wider access",
            )),
            _ => Ok(()),
        }
    }

    pub fn requested(&self) -> Option<(&str, &str)> {
        match (&self.sandbox_permissions, &self.justification) {
            (Some(m), Some(j)) => Some((m.as_str(), j.as_str())),
            _ => None,
        }
    }
}

/// Resolves an escalation request through the approval service before anything runs:
/// strict widening, then the approval channel, then the user's answer. Returns the granted
/// mode for this one call.
pub(crate) async fn approve_escalation(
    requested: &str,
    justification: &str,
    effective: SandboxMode,
    subject: &str,
    run: &ToolRunContext,
    arguments: &Value,
) -> Result<SandboxMode, BoxError> {
    let Some(mode) = SandboxMode::parse(requested).filter(|m| effective.wider().contains(m)) else {
        return Err(errors::plain(format!(
            "sandbox escalation to \"{requested}\" is not strictly wider than this call's current \"{}\" mode",
            effective.as_str()
        )));
    };
    let Some(approval) = run.ctx.get::<Approval>() else {
        return Err(errors::plain(format!(
            "sandbox escalation to \"{requested}\" requires approval, but no approval service is composed"
        )));
    };
    if run.session.is_none() {
        return Err(errors::plain(format!(
            "sandbox escalation to \"{requested}\" needs the user's approval, and this call has no agent session to ask through; call again without sandbox_permissions"
        )));
    }
    let outcome = approval
        .0
        .request(ApprovalRequest {
            approval_id: String::new(),
            ctx: run.ctx.clone(),
            session: run.session.clone(),
            tool_name: run.name.clone(),
            call_id: run.call_id.clone(),
            arguments: arguments.clone(),
            reason: Some(format!("escalate sandbox to {requested}: {justification}")),
            cancel: run.cancel.clone(),
        })
        .await;
    match outcome {
        ApprovalOutcome::AllowedOnce => Ok(mode),
        ApprovalOutcome::Rejected => Err(errors::plain(format!(
            "the user rejected escalating this {subject} to \"{requested}\""
        ))),
        ApprovalOutcome::Cancelled => Err(errors::plain(format!(
            "approval for escalating to \"{requested}\" was cancelled"
        ))),
        ApprovalOutcome::Unavailable => Err(errors::plain(format!(
            "sandbox escalation to \"{requested}\" requires approval, but no approval channel is available"
        ))),
    }
}
