//! The Landlock runner. Landlock restricts the calling process, so the restriction runs in a
//! launcher between dsh and the command: the small `dsh-landlock-run` binary beside `dsh`
//! when it was built, else the `dsh` binary itself started with a hidden argument (upstream
//! ships a small C launcher, `landlock-run`, with the same contract):
//!
//! ```text
//! dsh __dsh-landlock [--ro PATH]… [--rw PATH]… [--mask FILE]… [--net deny|allow] -- ARGV…
//! dsh __dsh-landlock --probe
//! dsh __dsh-landlock --filter-only [--in-bwrap] [--net deny|allow] -- ARGV…
//! ```
//!
//! Beside the Landlock rules the launcher installs the system-call filter of
//! [`crate::seccomp`] (sockets Landlock does not see, io_uring, set-ID bits, extended
//! attributes). `--filter-only` installs just that filter: bubblewrap runs the launcher this
//! way inside its namespaces, where mounts already confine the file system.
//!
//! The launcher grants read/execute on `--ro` trees and every right on `--rw` trees, never
//! on a masked file (grants above one are split into their siblings), denies TCP bind and
//! connect and scopes abstract sockets and signals when the network is denied, drops every
//! capability (a root child could otherwise read the parent's `/proc/<pid>/environ`), sets
//! no-new-privs, restricts itself and execs the command. Every launcher failure exits 125
//! with one `landlock-run: <reason>` line on stderr, which classification turns into a
//! refusal: the command never runs unconfined.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
    Scope, path_beneath_rules,
};

use crate::mode::SandboxMode;
use crate::policy::{ExecutionPolicy, Network};
use crate::runner::{Confined, Enforcement, RunnerFailureRule};

/// The hidden argument that turns the `dsh` binary into the launcher.
pub const LAUNCHER_ARG: &str = "__dsh-landlock";
/// Exit status of every launcher failure.
pub const LAUNCHER_FAILURE: u8 = 125;
/// The informational line of a kernel whose Landlock ABI lacks some handled rights.
pub const PARTIAL_LINE: &str = "landlock-run: partial enforcement (older Landlock ABI)";

/// The ABI whose rights we ask for (best effort on older kernels).
const TARGET_ABI: ABI = ABI::V6;

/// File name of the small launcher binary (`src/bin/dsh-landlock-run.rs`).
pub const SMALL_LAUNCHER: &str = "dsh-landlock-run";

static LAUNCHER: OnceLock<PathBuf> = OnceLock::new();

/// The launcher for the `dsh` executable `exe`: the small launcher when it sits beside
/// `exe` (same build), else `exe` itself with [`LAUNCHER_ARG`]. Both take the same command
/// line, and either one failing is a refusal, never an unconfined run.
pub fn launcher_for(exe: &Path) -> PathBuf {
    let small = exe.with_file_name(SMALL_LAUNCHER);
    if small.is_file() {
        small
    } else {
        exe.to_path_buf()
    }
}

/// Names the launcher program (the `dsh` binary). Without it the Landlock runner is
/// unavailable (library tests; nothing runs unconfined because of it).
pub fn set_launcher(program: PathBuf) {
    let _ = LAUNCHER.set(program);
}

pub(crate) fn launcher() -> Option<&'static PathBuf> {
    LAUNCHER.get()
}

/// The confined form of `argv` under the Landlock launcher.
pub fn confine(
    launcher: &Path,
    argv: &[OsString],
    policy: &ExecutionPolicy,
    enforcement: Enforcement,
) -> Confined {
    let mut args: Vec<OsString> = vec![LAUNCHER_ARG.into(), "--ro".into(), "/".into()];
    let mut rw = |p: &Path| {
        args.push("--rw".into());
        args.push(p.into());
    };
    rw(Path::new("/dev/null"));
    if policy.mode == SandboxMode::WorkspaceWrite {
        for root in policy.writable_roots() {
            rw(&root);
        }
    }
    for file in &policy.masked {
        args.push("--mask".into());
        args.push(file.into());
    }
    args.push("--net".into());
    args.push(match policy.network {
        Network::Deny => "deny".into(),
        Network::Allow => "allow".into(),
    });
    let mut serve_args = args.clone();
    serve_args.push(crate::resident::SERVE_ARG.into());
    args.push("--".into());
    args.extend(argv.iter().cloned());
    Confined {
        program: launcher.to_path_buf(),
        args,
        serve_args: Some(serve_args),
        enforcement,
        denial_signatures: vec!["permission denied".into()],
        runner_failure_rules: vec![RunnerFailureRule {
            allowed_exit_codes: vec![i32::from(LAUNCHER_FAILURE)],
            fatal_signatures: vec!["landlock-run: ".into()],
            informational_lines: vec![PARTIAL_LINE.into()],
        }],
        runner: "landlock",
    }
}

/// The launcher's parsed arguments.
#[derive(Debug, Default, PartialEq, Eq)]
struct Launch {
    ro: Vec<PathBuf>,
    rw: Vec<PathBuf>,
    masks: Vec<PathBuf>,
    deny_net: bool,
    probe: bool,
    filter_only: bool,
    in_bwrap: bool,
    /// Serve commands on descriptor 3 instead of running `argv` ([`crate::resident`]).
    serve: bool,
    argv: Vec<OsString>,
}

fn parse(args: &[OsString]) -> Result<Launch, String> {
    let mut l = Launch::default();
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].to_string_lossy().into_owned();
        let value = |i: usize| {
            args.get(i + 1)
                .cloned()
                .ok_or_else(|| format!("usage error: {flag} needs a value"))
        };
        match flag.as_str() {
            "--probe" => l.probe = true,
            "--filter-only" => l.filter_only = true,
            "--in-bwrap" => l.in_bwrap = true,
            crate::resident::SERVE_ARG => l.serve = true,
            "--ro" => {
                l.ro.push(value(i)?.into());
                i += 1;
            }
            "--rw" => {
                l.rw.push(value(i)?.into());
                i += 1;
            }
            "--mask" => {
                l.masks.push(value(i)?.into());
                i += 1;
            }
            "--net" => {
                l.deny_net = value(i)? == "deny";
                i += 1;
            }
            "--" => {
                l.argv = args[i + 1..].to_vec();
                break;
            }
            other => return Err(format!("usage error: unknown argument {other:?}")),
        }
        i += 1;
    }
    if l.serve && (l.probe || !l.argv.is_empty()) {
        return Err("usage error: --serve takes no command and no --probe".into());
    }
    if !l.probe && !l.serve && l.argv.is_empty() {
        return Err("usage error: no command after --".into());
    }
    Ok(l)
}

/// `grant` split so that it covers everything below it except the `masks`: a grant that
/// contains a masked file is replaced by grants on the siblings along the way to it.
fn split_around(grant: &Path, masks: &[PathBuf]) -> Vec<PathBuf> {
    let inside = masks
        .iter()
        .any(|m| m.starts_with(grant) && m.as_path() != grant);
    if !inside {
        return if masks.iter().any(|m| m == grant) {
            Vec::new()
        } else {
            vec![grant.to_path_buf()]
        };
    }
    let Ok(entries) = std::fs::read_dir(grant) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let child = entry.path();
        // Rules attach to what a path resolves to: compare real paths (masks are canonical),
        // so a symlinked directory leading to a masked file is split like the real one.
        let real = std::fs::canonicalize(&child).unwrap_or_else(|_| child.clone());
        let covers_mask = masks.iter().any(|m| m.starts_with(&real));
        if covers_mask {
            if real.is_dir() {
                out.extend(split_around(&real, masks));
            }
            // A masked file itself (or a link to one) gets no grant.
        } else {
            out.push(child);
        }
    }
    out
}

pub(crate) fn fail(message: impl std::fmt::Display) -> std::process::ExitCode {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "landlock-run: {message}");
    std::process::ExitCode::from(LAUNCHER_FAILURE)
}

/// Drops every capability (bounding, ambient, effective, permitted, inheritable), so a root
/// child cannot bypass Landlock's ptrace scoping with `CAP_SYS_PTRACE`.
fn drop_capabilities() -> Result<(), String> {
    use rustix::thread::{
        CapabilitySet, CapabilitySets, clear_ambient_capability_set,
        remove_capability_from_bounding_set, set_capabilities,
    };
    for cap in CapabilitySet::all().iter() {
        // Capabilities the kernel does not know are not in the bounding set: ignore EINVAL.
        let _ = remove_capability_from_bounding_set(cap);
    }
    let _ = clear_ambient_capability_set();
    set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(|e| format!("cannot drop capabilities: {e}"))
}

/// The launcher's main: restricts itself and execs the command (or probes). Returns only on
/// failure (exit 125) or after a probe.
pub fn launcher_main(args: &[OsString]) -> std::process::ExitCode {
    let launch = match parse(args) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    use crate::seccomp::{FilterSpec, Sockets};
    // `--filter-only` runs inside bubblewrap's private network namespace (`--in-bwrap`) or
    // below the Landlock launcher (Landlock's TCP rules see no other family).
    let filter = FilterSpec {
        sockets: match (launch.deny_net, launch.in_bwrap) {
            (false, _) => Sockets::Any,
            (true, true) => Sockets::NoUnix,
            (true, false) => Sockets::PairsOnly,
        },
    };
    if launch.filter_only {
        if let Err(e) = crate::seccomp::install(filter) {
            return fail(e);
        }
        if launch.serve {
            return crate::resident::serve();
        }
        return exec(&launch.argv);
    }
    let fs_all = AccessFs::from_all(TARGET_ABI);
    let mut ruleset = match Ruleset::default().handle_access(fs_all) {
        Ok(r) => r,
        Err(e) => return fail(format!("landlock ruleset error: {e}")),
    };
    if launch.deny_net {
        ruleset = match ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .and_then(|r| r.scope(Scope::AbstractUnixSocket | Scope::Signal))
        {
            Ok(r) => r,
            Err(e) => return fail(format!("landlock ruleset error: {e}")),
        };
    }
    let created = match ruleset.create() {
        Ok(c) => c,
        Err(e) => return fail(format!("landlock ruleset error: {e}")),
    };
    let ro: Vec<PathBuf> = launch
        .ro
        .iter()
        .flat_map(|g| split_around(g, &launch.masks))
        .collect();
    let rw: Vec<PathBuf> = launch
        .rw
        .iter()
        .flat_map(|g| split_around(g, &launch.masks))
        .collect();
    let created = match created
        .add_rules(path_beneath_rules(&ro, AccessFs::from_read(TARGET_ABI)))
        .and_then(|c| c.add_rules(path_beneath_rules(&rw, fs_all)))
    {
        Ok(c) => c,
        Err(e) => return fail(format!("landlock ruleset error: {e}")),
    };
    if let Err(e) = drop_capabilities() {
        return fail(e);
    }
    let status = match created.restrict_self() {
        Ok(s) => s,
        Err(e) => return fail(format!("landlock ruleset error: {e}")),
    };
    match status.ruleset {
        RulesetStatus::NotEnforced => {
            return fail("landlock is not enforced by this kernel (ABI unsupported or disabled)");
        }
        RulesetStatus::PartiallyEnforced if !launch.probe => {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "{PARTIAL_LINE}");
        }
        RulesetStatus::PartiallyEnforced | RulesetStatus::FullyEnforced => {}
    }
    if launch.probe {
        // The probe proves the filter installs too (the command gets it from the inner
        // launcher below).
        if let Err(e) = crate::seccomp::install(filter) {
            return fail(e);
        }
        use std::io::Write as _;
        let line = match status.ruleset {
            RulesetStatus::FullyEnforced => "landlock: fully enforced",
            _ => "landlock: partially enforced (older ABI)",
        };
        let _ = writeln!(std::io::stdout(), "{line}");
        return std::process::ExitCode::SUCCESS;
    }
    if launch.serve {
        // Every command the resident starts inherits the domain and the filter.
        if let Err(e) = crate::seccomp::install(filter) {
            return fail(e);
        }
        return crate::resident::serve();
    }
    // The command runs as our child (we stay its subreaper) through this launcher's
    // `--filter-only` mode, which installs the system-call filter and execs it.
    let program = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return fail(format!("cannot name the launcher: {e}")),
    };
    let mut inner = std::process::Command::new(program);
    inner
        .arg(LAUNCHER_ARG)
        .arg("--filter-only")
        .arg("--net")
        .arg(if launch.deny_net { "deny" } else { "allow" })
        .arg("--")
        .args(&launch.argv);
    crate::supervise::supervise(inner)
}

/// Replaces the launcher with `argv`; returns only on failure.
fn exec(argv: &[OsString]) -> std::process::ExitCode {
    use std::os::unix::process::CommandExt as _;
    let Some((program, args)) = argv.split_first() else {
        return fail("usage error: no command after --");
    };
    let error = std::process::Command::new(program).args(args).exec();
    fail(format!("exec failed: {error}"))
}

/// The verdict of `launcher --probe`: enforcement, or why it is unusable.
pub fn probe(launcher: &Path, timeout: std::time::Duration) -> Result<Enforcement, String> {
    let mut child = std::process::Command::new(launcher)
        .args([LAUNCHER_ARG, "--probe"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the Landlock launcher: {e}"))?;
    let output = crate::local::wait_with_timeout(&mut child, timeout)?;
    let stdout = String::from_utf8_lossy(&output.0);
    if output.1 != Some(0) {
        return Err(format!(
            "Landlock probe failed: {}",
            String::from_utf8_lossy(&output.2).trim()
        ));
    }
    match stdout.trim() {
        "landlock: fully enforced" => Ok(Enforcement::Full),
        "landlock: partially enforced (older ABI)" => Ok(Enforcement::Partial),
        other => Err(format!("unexpected Landlock probe answer {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn arguments_parse() {
        let args: Vec<OsString> = [
            "--ro", "/", "--rw", "/w", "--mask", "/h/c", "--net", "deny", "--", "bash", "-c", "x",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert_eq!(
            parse(&args).unwrap(),
            Launch {
                ro: vec!["/".into()],
                rw: vec!["/w".into()],
                masks: vec!["/h/c".into()],
                deny_net: true,
                probe: false,
                filter_only: false,
                in_bwrap: false,
                serve: false,
                argv: vec!["bash".into(), "-c".into(), "x".into()],
            }
        );
        let serve = |a: &[&str]| parse(&a.iter().map(OsString::from).collect::<Vec<_>>());
        assert!(serve(&["--ro", "/", "--serve"]).unwrap().serve);
        assert!(
            serve(&["--serve", "--", "bash"]).is_err(),
            "a command besides --serve"
        );
        assert!(serve(&["--serve", "--probe"]).is_err());
        assert!(parse(&[OsString::from("--ro")]).is_err());
        assert!(parse(&[OsString::from("--bogus")]).is_err());
    }

    #[test]
    fn grants_split_around_masked_files() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join("sub")).unwrap();
        std::fs::write(home.join(".credentials.yaml"), "k").unwrap();
        std::fs::write(home.join("settings.yaml"), "s").unwrap();
        std::fs::write(dir.path().join("other"), "o").unwrap();
        let mask = home.join(".credentials.yaml");
        let mut got = split_around(dir.path(), std::slice::from_ref(&mask));
        got.sort();
        assert_eq!(
            got,
            vec![
                dir.path().join("home/settings.yaml"),
                dir.path().join("home/sub"),
                dir.path().join("other")
            ]
        );
        assert_eq!(
            split_around(&home.join("sub"), &[mask]),
            vec![home.join("sub")]
        );
    }
}
