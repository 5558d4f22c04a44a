//! A confined command (the runner argv wrapping the real one), the refusal when nothing can
//! confine it, and the classification of how a confined run ended: a runner failure (the
//! command never ran) outranks a sandbox denial, which outranks an ordinary exit.

use std::ffi::OsString;
use std::path::PathBuf;

use dsh_kernel::HarnessError;

use crate::mode::SandboxMode;

/// How completely a runner enforces the mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enforcement {
    Full,
    /// Some accesses the mode forbids are not confined (an older Landlock ABI, or what
    /// Landlock cannot express at all: permission bits and times outside the roots).
    Partial,
}

impl Enforcement {
    /// The name results carry (`full`, `partial`).
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Full => "full",
            Enforcement::Partial => "partial",
        }
    }
}

/// Recognises a run whose runner failed (the command did not run): with an exit code in
/// `allowed_exit_codes` (any non-zero code when empty), the first stderr line that is not an
/// informational line and contains a fatal signature (case-insensitive).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerFailureRule {
    pub allowed_exit_codes: Vec<i32>,
    pub fatal_signatures: Vec<String>,
    pub informational_lines: Vec<String>,
}

/// The argv that runs a command confined, with the runner's dialect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Confined {
    /// The runner program (a path or a name to look up on `PATH`).
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The arguments that start a resident of this policy instead (`--serve` in place of
    /// `-- ARGV`, see [`crate::resident`]); `None` when the runner cannot host one (a
    /// configured `runnerCommand`, bubblewrap without the launcher).
    pub serve_args: Option<Vec<OsString>>,
    pub enforcement: Enforcement,
    /// Stderr fragments (case-insensitive) that mean the sandbox refused an access.
    pub denial_signatures: Vec<String>,
    pub runner_failure_rules: Vec<RunnerFailureRule>,
    /// Which runner (`bwrap`, `landlock`, `runner-command`, …), for logs.
    pub runner: &'static str,
}

/// The error code of a refused confined command.
pub const SANDBOX_UNAVAILABLE: &str = "SANDBOX_UNAVAILABLE";

/// No runner can confine the command, or the runner failed: the command is refused, never
/// run unconfined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxUnavailable {
    pub mode: SandboxMode,
    pub detail: Option<String>,
}

impl SandboxUnavailable {
    pub fn new(mode: SandboxMode, detail: Option<String>) -> Self {
        Self { mode, detail }
    }

    /// The refusal text. Recorded behaviour: the `missing-sandbox-runner` conformance scenario
    /// compares the tool result that carries it byte for byte.
    pub fn message(&self) -> String {
        let mut m = format!(
            "sandbox mode \"{}\" is requested but no sandbox backend is usable on this host; refusing to run the command unconfined. Install bubblewrap or run a Landlock-enforcing kernel (Linux), ensure sandbox-exec is usable (macOS), or ensure the ACL restricted-token runner can start (Windows) — otherwise switch the consumer to danger-full-access.",
            self.mode.as_str()
        );
        if let Some(d) = &self.detail {
            m.push_str(" Runner failure: ");
            m.push_str(d);
        }
        m
    }

    /// As a tool error (`SandboxUnavailableError` / `SANDBOX_UNAVAILABLE`).
    pub fn into_error(self) -> HarnessError {
        HarnessError::new(
            "SandboxUnavailableError",
            SANDBOX_UNAVAILABLE,
            self.message(),
        )
    }
}

impl std::fmt::Display for SandboxUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for SandboxUnavailable {}

/// The detail upstream records when the runner program cannot be spawned
/// (`Error: spawn <program> ENOENT`).
pub fn spawn_detail(program: &std::path::Path, error: &std::io::Error) -> String {
    let code = match error.kind() {
        std::io::ErrorKind::NotFound => "ENOENT".to_string(),
        std::io::ErrorKind::PermissionDenied => "EACCES".to_string(),
        _ => error.to_string(),
    };
    format!("Error: spawn {} {code}", program.display())
}

/// Whether a spawn error means the runner itself is missing or not executable (as opposed
/// to an unusable working directory, which fails the same way).
pub fn is_runner_spawn_failure(error: &std::io::Error, workdir: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let workdir_ok =
        std::fs::metadata(workdir).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o111 != 0);
    workdir_ok
        && matches!(
            error.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
        )
}

/// The runner-failure line of a finished run, if a rule matches.
pub fn runner_failure(
    exit_code: Option<i32>,
    stderr: &str,
    rules: &[RunnerFailureRule],
) -> Option<String> {
    let code = exit_code?;
    if code == 0 {
        return None;
    }
    for rule in rules {
        if !rule.allowed_exit_codes.is_empty() && !rule.allowed_exit_codes.contains(&code) {
            continue;
        }
        for line in stderr.lines() {
            let lower = line.trim().to_lowercase();
            if rule
                .informational_lines
                .iter()
                .any(|i| i.to_lowercase() == lower)
            {
                continue;
            }
            if rule
                .fatal_signatures
                .iter()
                .any(|s| !s.trim().is_empty() && lower.contains(&s.to_lowercase()))
            {
                return Some(line.trim().to_string());
            }
        }
    }
    None
}

/// Whether a finished run was refused by the sandbox: non-zero exit and a denial signature
/// in stderr.
pub fn denied(exit_code: Option<i32>, stderr: &str, signatures: &[String]) -> bool {
    if exit_code == Some(0) {
        return false;
    }
    let lower = stderr.to_lowercase();
    signatures.iter().any(|s| lower.contains(&s.to_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn runner_failures_outrank_denials_and_respect_exit_gates() {
        let rules = vec![RunnerFailureRule {
            allowed_exit_codes: vec![125],
            fatal_signatures: vec!["landlock-run: ".into()],
            informational_lines: vec![
                "landlock-run: partial enforcement (older Landlock ABI)".into(),
            ],
        }];
        assert_eq!(
            runner_failure(Some(125), "landlock-run: exec failed: nope\n", &rules),
            Some("landlock-run: exec failed: nope".into())
        );
        assert_eq!(
            runner_failure(Some(1), "landlock-run: exec failed: nope\n", &rules),
            None,
            "exit gate"
        );
        assert_eq!(
            runner_failure(
                Some(125),
                "landlock-run: partial enforcement (older Landlock ABI)\n",
                &rules
            ),
            None,
            "informational"
        );
        assert_eq!(runner_failure(Some(0), "landlock-run: x", &rules), None);
        assert!(denied(
            Some(1),
            "touch: cannot touch 'x': Read-only file system",
            &["read-only file system".into()]
        ));
        assert!(!denied(
            Some(0),
            "Read-only file system",
            &["read-only file system".into()]
        ));
    }

    #[test]
    fn the_refusal_reads_like_upstream() {
        let e =
            SandboxUnavailable::new(SandboxMode::ReadOnly, Some("Error: spawn /x ENOENT".into()));
        assert!(e.message().starts_with("sandbox mode \"read-only\" is requested but no sandbox backend is usable on this host; refusing to run the command unconfined."));
        assert!(
            e.message()
                .ends_with(" Runner failure: Error: spawn /x ENOENT")
        );
        let h = e.into_error();
        assert_eq!(
            (h.name.as_ref(), h.code.as_ref()),
            ("SandboxUnavailableError", "SANDBOX_UNAVAILABLE")
        );
    }
}
