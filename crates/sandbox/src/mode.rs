//! Sandbox modes and the texts every confining tool shares.

use serde::Deserialize;

/// A file-effect sandbox mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    ReadOnly,
    WorkspaceWrite,
    DangerFullAccess,
}

/// The escalation-target vocabulary advertised in tool schemas.
pub const ESCALATION_TARGETS: [&str; 2] = ["workspace-write", "danger-full-access"];

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
    pub fn wider(self) -> &'static [SandboxMode] {
        match self {
            SandboxMode::ReadOnly => &[SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess],
            SandboxMode::WorkspaceWrite => &[SandboxMode::DangerFullAccess],
            SandboxMode::DangerFullAccess => &[],
        }
    }

    /// Whether commands run in this mode go through a sandbox runner.
    pub fn is_confined(self) -> bool {
        self != SandboxMode::DangerFullAccess
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

/// `[sandbox: file access denied under <mode> mode]`.
pub fn denial_marker(mode: SandboxMode) -> String {
    format!("[sandbox: file access denied under {} mode]", mode.as_str())
}

/// The same-turn escalation hint that rides a denial (`subject`: `command` or `operation`).
pub fn escalation_hint(subject: &str) -> String {
    format!(
        "[sandbox: wider access can be requested — repeat this same {subject} once, with sandbox_permissions set to the smallest mode that is enough and a one-sentence justification; the user is asked to approve]"
    )
}

/// The notice of a background command whose runner failed (it never ran).
pub fn runner_failure_marker(mode: SandboxMode) -> String {
    format!(
        "[sandbox: the sandbox runner itself failed under {} mode — the command did not run; this is a sandbox problem, not a command failure]",
        mode.as_str()
    )
}
