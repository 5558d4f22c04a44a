//! The sandbox policy shared by bash and the filesystem tools: modes, the per-call policy
//! (mode + workspace root), writable roots, and the escalation choreography that asks the
//! user before one call runs under a wider mode.

use std::path::{Path, PathBuf};

use dsh_kernel::BoxError;
use dsh_session::LiveSession;
use dsh_tools::{Approval, ApprovalOutcome, ApprovalRequest, ToolRunContext};
use serde::Deserialize;
use serde_json::Value;

use crate::errors;
use crate::paths::{canonical_path, resolve_lexical};

/// A file-effect sandbox mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    ReadOnly,
    WorkspaceWrite,
    DangerFullAccess,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::DangerFullAccess => "danger-full-access",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "read-only" => Some(SandboxMode::ReadOnly),
            "workspace-write" => Some(SandboxMode::WorkspaceWrite),
            "danger-full-access" => Some(SandboxMode::DangerFullAccess),
            _ => None,
        }
    }

    /// The modes a call in `self` may escalate to (strictly wider).
    fn wider(self) -> &'static [SandboxMode] {
        match self {
            SandboxMode::ReadOnly => &[SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess],
            SandboxMode::WorkspaceWrite => &[SandboxMode::DangerFullAccess],
            SandboxMode::DangerFullAccess => &[],
        }
    }

    /// The deployment default when nothing configures one: `$DSH_PERMISSION_MODE`, else
    /// `workspace-write`.
    pub fn from_env_or_default() -> Self {
        std::env::var("DSH_PERMISSION_MODE")
            .ok()
            .as_deref()
            .and_then(Self::parse)
            .unwrap_or(SandboxMode::WorkspaceWrite)
    }
}

/// The escalation-target vocabulary advertised in tool schemas.
pub(crate) const ESCALATION_TARGETS: [&str; 2] = ["workspace-write", "danger-full-access"];

/// The resolved policy of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutionPolicy {
    pub mode: SandboxMode,
    /// Absolute, canonical workspace root.
    pub workspace_root: PathBuf,
    /// Temporary areas writable under `workspace-write` besides the workspace.
    pub temp_roots: Vec<PathBuf>,
}

impl ExecutionPolicy {
    /// The canonical roots a call may write under: none for `read-only`, the workspace plus
    /// the temp areas for `workspace-write`; `danger-full-access` is not fenced at all.
    pub fn writable_roots(&self) -> Vec<PathBuf> {
        if self.mode != SandboxMode::WorkspaceWrite {
            return Vec::new();
        }
        let mut roots: Vec<PathBuf> = Vec::new();
        for root in
            std::iter::once(self.workspace_root.clone()).chain(self.temp_roots.iter().cloned())
        {
            let root = canonical_path(&root);
            if !roots.contains(&root) {
                roots.push(root);
            }
        }
        roots
    }
}

/// The `sandboxPolicy` service: the deployment default mode and fallback workspace root,
/// resolved per call against the calling session (its last `sandbox/mode` event and cwd).
#[derive(Clone, Debug)]
pub struct SandboxPolicy {
    default_mode: SandboxMode,
    workspace_root: PathBuf,
    temp_roots: Vec<PathBuf>,
}

/// The platform's temporary areas (`/tmp` and the process temp dir).
pub fn default_temp_roots() -> Vec<PathBuf> {
    vec![PathBuf::from("/tmp"), std::env::temp_dir()]
}

impl SandboxPolicy {
    pub fn new(default_mode: SandboxMode, workspace_root: &Path) -> Self {
        Self {
            default_mode,
            workspace_root: workspace_root_of(workspace_root),
            temp_roots: default_temp_roots(),
        }
    }

    /// Replaces the writable temporary areas (e.g. none, for a strict workspace fence).
    pub fn with_temp_roots(mut self, roots: Vec<PathBuf>) -> Self {
        self.temp_roots = roots;
        self
    }

    pub fn default_mode(&self) -> SandboxMode {
        self.default_mode
    }

    /// The session's override (its last `sandbox/mode` event), else the default; the
    /// session cwd as workspace root, else the configured root.
    pub fn resolve(&self, session: Option<&LiveSession>) -> ExecutionPolicy {
        let (override_mode, cwd) = match session {
            Some(s) => s.read(|log| {
                let mode = log
                    .events()
                    .iter()
                    .rev()
                    .find(|e| e.event_type == "sandbox/mode")
                    .and_then(|e| {
                        e.data
                            .get("mode")
                            .and_then(Value::as_str)
                            .and_then(SandboxMode::parse)
                    });
                (mode, log.header().cwd.clone())
            }),
            None => (None, None),
        };
        ExecutionPolicy {
            mode: override_mode.unwrap_or(self.default_mode),
            workspace_root: cwd
                .map(|c| workspace_root_of(Path::new(&c)))
                .unwrap_or_else(|| self.workspace_root.clone()),
            temp_roots: self.temp_roots.clone(),
        }
    }
}

fn workspace_root_of(path: &Path) -> PathBuf {
    resolve_lexical(Path::new("/"), &canonical_path(path).to_string_lossy())
}

/// `[sandbox: file access denied under <mode> mode]`.
pub(crate) fn denial_marker(mode: SandboxMode) -> String {
    format!("[sandbox: file access denied under {} mode]", mode.as_str())
}

/// The same-turn escalation hint that rides a denial.
pub(crate) fn escalation_hint(subject: &str) -> String {
    format!(
        "[sandbox: escalation available — retry this exact {subject} once with sandbox_permissions (the narrowest wider mode that suffices) + justification; the approval prompt asks the user]"
    )
}

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
                "invalid escalation: sandbox_permissions requires a justification",
            )),
            (None, Some(_)) => Err(errors::plain(
                "invalid escalation: justification is only valid together with sandbox_permissions",
            )),
            (_, Some(j)) if j.trim().is_empty() => Err(errors::plain(
                "invalid justification: expected a non-empty sentence",
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
            "sandbox escalation to \"{requested}\" requires approval, but the call has no agent to route it through"
        )));
    }
    let outcome = approval
        .0
        .request(ApprovalRequest {
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
