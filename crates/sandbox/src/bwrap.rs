//! The bubblewrap runner: the profile for each mode, hardened beyond upstream's (all
//! capabilities dropped, so a root child cannot remount `/` writable; a private network
//! namespace unless the policy allows the network; a new session, so no `TIOCSTI` into the
//! user's terminal; credential files masked with `/dev/null`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::mode::SandboxMode;
use crate::policy::{ExecutionPolicy, Network};
use crate::runner::{Confined, Enforcement, RunnerFailureRule};

/// The runner program.
pub const PROGRAM: &str = "bwrap";

fn push(args: &mut Vec<OsString>, items: &[&str]) {
    args.extend(items.iter().map(OsString::from));
}

fn push_bind(args: &mut Vec<OsString>, flag: &str, path: &Path) {
    args.push(flag.into());
    args.push(path.into());
    args.push(path.into());
}

/// The profile arguments (everything before `--`) for `policy`.
pub fn profile_args(policy: &ExecutionPolicy) -> Vec<OsString> {
    let mut args = Vec::new();
    push(
        &mut args,
        &[
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--unshare-pid",
            "--proc",
            "/proc",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
        ],
    );
    if policy.network == Network::Deny {
        push(&mut args, &["--unshare-net"]);
    }
    if policy.mode == SandboxMode::WorkspaceWrite {
        // A private /tmp first, so a workspace under /tmp stays visible once bound.
        push(&mut args, &["--tmpfs", "/tmp"]);
        push_bind(&mut args, "--bind", &policy.workspace_root);
        let tmp = PathBuf::from("/tmp");
        for root in policy.temp_roots.iter().chain(&policy.extra_roots) {
            if *root != tmp && root.is_dir() {
                push_bind(&mut args, "--bind", root);
            }
        }
    }
    // Protected paths inside the writable roots stay read-only (hooks, git config).
    for path in &policy.protected {
        push_bind(&mut args, "--ro-bind", path);
    }
    // Masks go last: they cover credential files even inside a writable root.
    for file in &policy.masked {
        args.push("--ro-bind".into());
        args.push("/dev/null".into());
        args.push(file.into());
    }
    args
}

/// The confined form of `argv` under bubblewrap. Inside the namespaces the command runs
/// through the launcher's `--filter-only` mode (when the binary named one), which adds the
/// system-call filter mounts cannot express (Unix sockets on the host, io_uring, set-ID bits,
/// extended attributes); without a launcher the wrap reports partial enforcement.
pub fn confine(argv: &[OsString], policy: &ExecutionPolicy, enforcement: Enforcement) -> Confined {
    let mut args = profile_args(policy);
    let mut serve_args = None;
    let enforcement = match crate::landlock::launcher() {
        Some(launcher) => {
            // The launcher may live under a path the profile hides (a private /tmp).
            push_bind(&mut args, "--ro-bind", launcher);
            args.push("--".into());
            args.push(launcher.into());
            args.push(crate::landlock::LAUNCHER_ARG.into());
            args.push("--filter-only".into());
            args.push("--in-bwrap".into());
            args.push("--net".into());
            args.push(match policy.network {
                Network::Deny => "deny".into(),
                Network::Allow => "allow".into(),
            });
            let mut serve = args.clone();
            serve.push(crate::resident::SERVE_ARG.into());
            serve_args = Some(serve);
            enforcement
        }
        None => Enforcement::Partial,
    };
    args.push("--".into());
    args.extend(argv.iter().cloned());
    Confined {
        program: PathBuf::from(PROGRAM),
        args,
        serve_args,
        enforcement,
        denial_signatures: vec!["read-only file system".into()],
        runner_failure_rules: vec![
            RunnerFailureRule {
                allowed_exit_codes: Vec::new(),
                fatal_signatures: vec!["bwrap: ".into()],
                informational_lines: Vec::new(),
            },
            // The filter launcher inside the namespaces fails like the Landlock launcher.
            RunnerFailureRule {
                allowed_exit_codes: vec![i32::from(crate::landlock::LAUNCHER_FAILURE)],
                fatal_signatures: vec!["landlock-run: ".into()],
                informational_lines: Vec::new(),
            },
        ],
        runner: "bwrap",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn policy(mode: SandboxMode, network: Network) -> ExecutionPolicy {
        ExecutionPolicy {
            mode,
            workspace_root: PathBuf::from("/w"),
            temp_roots: vec![PathBuf::from("/tmp")],
            extra_roots: Vec::new(),
            network,
            masked: vec![PathBuf::from("/h/.credentials.yaml")],
            protected: Vec::new(),
        }
    }

    #[test]
    fn profiles_per_mode() {
        let text = |p: &ExecutionPolicy| {
            profile_args(p)
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let base = "--ro-bind / / --dev /dev --unshare-pid --proc /proc --die-with-parent --new-session --cap-drop ALL";
        assert_eq!(
            text(&policy(SandboxMode::ReadOnly, Network::Deny)),
            format!("{base} --unshare-net --ro-bind /dev/null /h/.credentials.yaml")
        );
        assert_eq!(
            text(&policy(SandboxMode::WorkspaceWrite, Network::Allow)),
            format!("{base} --tmpfs /tmp --bind /w /w --ro-bind /dev/null /h/.credentials.yaml")
        );
    }
}
