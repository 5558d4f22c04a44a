//! `@deepseek-ai/dsh-sandbox-local`: the sandbox provider of this host. On Linux it tries
//! bubblewrap, then Landlock, probing each at most once (lazily, on the first confined
//! command) and caching the verdict; with no usable runner every confined command is
//! refused. A configured `runnerCommand` replaces the chain (it is trusted unprobed).
//!
//! A passed bubblewrap probe (several milliseconds: two processes and new namespaces) is
//! also recorded in dsh's home, keyed by what it depends on: the `bwrap` and launcher
//! files, the boot and the user. A later process with the same key takes bubblewrap
//! without probing. Only that verdict is recorded, so a forged or stale record can make
//! commands fail but never chooses a weaker runner; a runner failure of bubblewrap removes
//! the record, and the next process probes again.

use std::ffi::OsString;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use dsh_kernel::{BoxError, BoxFuture, Context, Plugin, PluginConfig};
use serde::Deserialize;

use crate::policy::ExecutionPolicy;
use crate::runner::{Confined, Enforcement, RunnerFailureRule, SandboxUnavailable};
use crate::{bwrap, landlock};

/// Turns a command into its confined form, or refuses it.
pub trait SandboxProvider: Send + Sync + 'static {
    /// `argv` confined under `policy` (whose mode is confined). May probe runners (blocking
    /// work runs off the async threads).
    fn confine(
        &self,
        argv: Vec<OsString>,
        policy: ExecutionPolicy,
    ) -> BoxFuture<'static, Result<Confined, SandboxUnavailable>>;
}

/// The `ctx.sandbox` service.
#[derive(Clone)]
pub struct Sandbox(pub Arc<dyn SandboxProvider>);

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sandbox")
    }
}

/// A runner of the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunnerKind {
    Bwrap,
    Landlock,
}

/// The provider of this host.
pub struct LocalSandbox {
    chain: Vec<RunnerKind>,
    probe_timeout: Duration,
    /// A trusted runner prefix and its failure signatures (replaces the chain).
    runner_command: Option<(Vec<String>, Vec<String>)>,
    verdict: OnceLock<Result<(RunnerKind, Enforcement), String>>,
    /// Where a passed bubblewrap probe is recorded between processes.
    probe_record: Option<PathBuf>,
}

/// What a finished probe printed: (stdout, exit code, stderr).
pub(crate) type ProbeOutput = (Vec<u8>, Option<i32>, Vec<u8>);

/// Waits for `child` at most `timeout` (then kills it).
pub(crate) fn wait_with_timeout(
    child: &mut std::process::Child,
    timeout: Duration,
) -> Result<ProbeOutput, String> {
    let deadline = Instant::now() + timeout;
    // Woken by the exit itself where the kernel offers process descriptors; else polled.
    let pidfd =
        rustix::process::Pid::from_raw(child.id().try_into().unwrap_or(0)).and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        });
    let mut pause = Duration::from_micros(100);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut out = Vec::new();
                let mut err = Vec::new();
                if let Some(s) = child.stdout.as_mut() {
                    let _ = s.take(64 * 1024).read_to_end(&mut out);
                }
                if let Some(s) = child.stderr.as_mut() {
                    let _ = s.take(64 * 1024).read_to_end(&mut err);
                }
                return Ok((out, status.code(), err));
            }
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the probe did not finish within {}ms",
                    timeout.as_millis()
                ));
            }
            Ok(None) => match &pidfd {
                Some(fd) => {
                    use std::os::fd::AsRawFd as _;
                    let left = deadline.saturating_duration_since(Instant::now());
                    let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(1_000);
                    let mut poll = libc::pollfd {
                        fd: fd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd for the duration of the call.
                    #[allow(unsafe_code)]
                    let _ = unsafe { libc::poll(&mut poll, 1, ms) };
                }
                None => {
                    // A probe takes a few milliseconds: look again soon at first, then
                    // every 2 ms.
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(2));
                }
            },
            Err(e) => return Err(format!("cannot wait for the probe: {e}")),
        }
    }
}

/// Records of passed bubblewrap probes this process knows (removed on a runner failure).
static PROBE_RECORDS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes the recorded bubblewrap verdicts: bubblewrap failed as a runner, so the next
/// process probes again (this one keeps its verdict, as it would without a record).
pub fn forget_bwrap_verdict() {
    for path in PROBE_RECORDS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
    {
        let _ = std::fs::remove_file(path);
    }
}

/// The `bwrap` that `exec` would find on `path_var` (absolute entries only).
fn find_bwrap(path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path_var?)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(crate::bwrap::PROGRAM))
        .find(|p| rustix::fs::access(p, rustix::fs::Access::EXEC_OK).is_ok() && p.is_file())
}

/// What a bubblewrap probe's verdict depends on, as the text of its record: the `bwrap`
/// program and the launcher (path, size, change time, inode), this boot and this user.
/// `None` when any of it cannot be read (then the probe runs).
fn probe_key(bwrap: &Path, launcher: Option<&Path>) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let file = |p: &Path| -> Option<String> {
        let m = std::fs::metadata(p).ok()?;
        Some(format!(
            "{} {} {}.{} {}",
            p.display(),
            m.len(),
            m.ctime(),
            m.ctime_nsec(),
            m.ino()
        ))
    };
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let launcher = match launcher {
        Some(l) => file(l)?,
        None => "none".into(),
    };
    Some(format!(
        "dsh bubblewrap probe passed (v1)\nbwrap {}\nlauncher {launcher}\nboot {}\nuid {}\n",
        file(bwrap)?,
        boot.trim(),
        rustix::process::getuid().as_raw()
    ))
}

/// Probes bubblewrap (`program`: where it was found, else its bare name).
fn probe_bwrap(program: &Path, timeout: Duration) -> Result<Enforcement, String> {
    let policy = ExecutionPolicy {
        mode: crate::SandboxMode::ReadOnly,
        workspace_root: PathBuf::from("/"),
        temp_roots: Vec::new(),
        extra_roots: Vec::new(),
        network: crate::Network::Deny,
        masked: Vec::new(),
        protected: Vec::new(),
    };
    let confined = bwrap::confine(&["true".into()], &policy, Enforcement::Full);
    let mut child = std::process::Command::new(program)
        .args(&confined.args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start bwrap: {e}"))?;
    let (_, code, err) = wait_with_timeout(&mut child, timeout)?;
    match code {
        Some(0) => Ok(Enforcement::Full),
        _ => Err(format!(
            "bwrap probe failed: {}",
            String::from_utf8_lossy(&err).trim()
        )),
    }
}

impl LocalSandbox {
    pub fn new(chain: Vec<RunnerKind>, probe_timeout: Duration) -> Self {
        Self {
            chain,
            probe_timeout,
            runner_command: None,
            verdict: OnceLock::new(),
            probe_record: None,
        }
    }

    /// Uses `command` (program and leading arguments) in front of the bwrap profile,
    /// trusted without probing; `signatures` mark its own failures.
    pub fn with_runner_command(mut self, command: Vec<String>, signatures: Vec<String>) -> Self {
        self.runner_command = Some((command, signatures));
        self
    }

    /// Records a passed bubblewrap probe at `path`, and trusts a record found there.
    pub fn with_probe_record(mut self, path: PathBuf) -> Self {
        let mut records = PROBE_RECORDS.lock().unwrap_or_else(|p| p.into_inner());
        if !records.contains(&path) {
            records.push(path.clone());
        }
        drop(records);
        self.probe_record = Some(path);
        self
    }

    /// The bubblewrap verdict: from the record when its key matches, else probed (and a
    /// pass recorded).
    fn bwrap_verdict(&self, path_var: Option<&std::ffi::OsStr>) -> Result<Enforcement, String> {
        let program = find_bwrap(path_var);
        let key = match (&self.probe_record, &program) {
            (Some(record), Some(program)) => {
                probe_key(program, landlock::launcher().map(PathBuf::as_path))
                    .map(|key| (record, key))
            }
            _ => None,
        };
        if let Some((record, key)) = &key
            && std::fs::read(record).is_ok_and(|text| text == key.as_bytes())
        {
            return Ok(Enforcement::Full);
        }
        let program = program.unwrap_or_else(|| PathBuf::from(crate::bwrap::PROGRAM));
        let verdict = probe_bwrap(&program, self.probe_timeout);
        if let (Ok(Enforcement::Full), Some((record, key))) = (&verdict, &key)
            && let Err(e) = dsh_host::fs::write_atomic(record, key.as_bytes())
        {
            tracing::debug!(
                "cannot record the bubblewrap probe at {}: {e}",
                record.display()
            );
        }
        verdict
    }

    /// The first usable runner of the chain (probed once).
    fn select(&self) -> &Result<(RunnerKind, Enforcement), String> {
        self.verdict.get_or_init(|| {
            let mut reasons = Vec::new();
            for kind in &self.chain {
                let verdict = match kind {
                    RunnerKind::Bwrap => self.bwrap_verdict(std::env::var_os("PATH").as_deref()),
                    RunnerKind::Landlock => match landlock::launcher() {
                        Some(l) => landlock::probe(l, self.probe_timeout),
                        None => Err("no Landlock launcher in this process".to_string()),
                    },
                };
                match verdict {
                    Ok(e) => {
                        tracing::info!("sandbox: confining commands with {kind:?} ({e:?})");
                        return Ok((*kind, e));
                    }
                    Err(reason) => reasons.push(format!("{kind:?}: {reason}")),
                }
            }
            let all = reasons.join("; ");
            tracing::warn!("sandbox: no runner is usable, confined commands are refused ({all})");
            Err(all)
        })
    }

    /// Confines synchronously (may probe).
    pub fn confine_blocking(
        &self,
        argv: &[OsString],
        policy: &ExecutionPolicy,
    ) -> Result<Confined, SandboxUnavailable> {
        if let Some((command, signatures)) = &self.runner_command {
            let mut args: Vec<OsString> = command[1..].iter().map(OsString::from).collect();
            args.extend(bwrap::profile_args(policy));
            args.push("--".into());
            args.extend(argv.iter().cloned());
            return Ok(Confined {
                program: PathBuf::from(&command[0]),
                args,
                serve_args: None,
                enforcement: Enforcement::Full,
                denial_signatures: vec!["read-only file system".into(), "permission denied".into()],
                runner_failure_rules: vec![RunnerFailureRule {
                    allowed_exit_codes: Vec::new(),
                    fatal_signatures: signatures.clone(),
                    informational_lines: Vec::new(),
                }],
                runner: "runner-command",
            });
        }
        match self.select() {
            Ok((RunnerKind::Bwrap, e)) => Ok(bwrap::confine(argv, policy, *e)),
            // Landlock has no rule for permission bits, times or a read-only subtree inside a
            // writable one: whatever the ABI, the wrap is partial (see `enforcement_note`).
            Ok((RunnerKind::Landlock, _)) => match landlock::launcher() {
                Some(l) => Ok(landlock::confine(l, argv, policy, Enforcement::Partial)),
                None => Err(SandboxUnavailable::new(policy.mode, None)),
            },
            Err(_) => Err(SandboxUnavailable::new(policy.mode, None)),
        }
    }
}

impl SandboxProvider for Arc<LocalSandbox> {
    fn confine(
        &self,
        argv: Vec<OsString>,
        policy: ExecutionPolicy,
    ) -> BoxFuture<'static, Result<Confined, SandboxUnavailable>> {
        let this = self.clone();
        Box::pin(async move {
            if this.verdict.get().is_some() || this.runner_command.is_some() {
                return this.confine_blocking(&argv, &policy);
            }
            let mode = policy.mode;
            // The first call probes runners: off the async threads.
            match tokio::task::spawn_blocking(move || this.confine_blocking(&argv, &policy)).await {
                Ok(result) => result,
                Err(e) => Err(SandboxUnavailable::new(
                    mode,
                    Some(format!("the runner probe failed: {e}")),
                )),
            }
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LocalConfig {
    #[serde(default)]
    runner_command: Vec<String>,
    #[serde(default)]
    runner_failure_signatures: Vec<String>,
    probe_timeout_ms: Option<f64>,
    /// Our extension: the runner chain (default bwrap, then Landlock).
    runners: Option<Vec<RunnerKind>>,
}

/// What the model is told about the confinement of this host once a runner was chosen: empty
/// while nothing was probed, in `danger-full-access`, or when the runner confines fully.
fn enforcement_note(local: &LocalSandbox, mode: crate::SandboxMode) -> String {
    if !mode.is_confined() || local.runner_command.is_some() {
        return String::new();
    }
    match local.verdict.get() {
        Some(Ok((RunnerKind::Landlock, _))) => "Sandbox enforcement: partial (Landlock). Commands cannot write outside the writable roots, read the credential files or reach the network, but they can still change permission bits and timestamps of files outside those roots, and protected paths inside the workspace (such as .git/hooks) are writable to commands; the file tools still refuse them.".to_string(),
        Some(Ok((RunnerKind::Bwrap, Enforcement::Partial))) => "Sandbox enforcement: partial (bubblewrap without its system-call filter): Unix sockets of the host stay reachable from commands.".to_string(),
        Some(Ok((RunnerKind::Bwrap, Enforcement::Full))) | Some(Err(_)) | None => String::new(),
    }
}

/// `@deepseek-ai/dsh-sandbox-local` (config `{runnerCommand?, runnerFailureSignatures?,
/// probeTimeoutMs?, runners?}`): provides [`Sandbox`].
pub struct LocalSandboxPlugin;

impl Plugin for LocalSandboxPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-sandbox-local"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: LocalConfig = config.parse()?;
        if !c.runner_command.is_empty() && c.runner_failure_signatures.is_empty() {
            return Err(
                "sandbox-local: runnerCommand requires at least one runnerFailureSignatures entry"
                    .into(),
            );
        }
        if c.runner_command.is_empty() && !c.runner_failure_signatures.is_empty() {
            return Err("sandbox-local: runnerFailureSignatures requires runnerCommand".into());
        }
        if c.runner_failure_signatures
            .iter()
            .any(|s| s.trim().is_empty() || s.contains('\n'))
        {
            return Err("sandbox-local: runnerFailureSignatures entries must be non-empty single-line strings".into());
        }
        let timeout = match c.probe_timeout_ms {
            None => 5000.0,
            Some(t) if t.is_finite() && t > 0.0 => t,
            Some(_) => {
                return Err(
                    "sandbox-local: probeTimeoutMs must be a positive finite number".into(),
                );
            }
        };
        let chain = c
            .runners
            .unwrap_or_else(|| vec![RunnerKind::Bwrap, RunnerKind::Landlock]);
        let mut local = LocalSandbox::new(chain, Duration::from_secs_f64(timeout / 1000.0))
            .with_probe_record(
                dsh_host::config::dsh_home()
                    .join("cache")
                    .join("sandbox-probe"),
            );
        if !c.runner_command.is_empty() {
            local = local.with_runner_command(c.runner_command, c.runner_failure_signatures);
        }
        let local = Arc::new(local);
        ctx.provide(Arc::new(Sandbox(Arc::new(local.clone()))))?;
        // The honest level of confinement, in the runtime context (logged with the request
        // that shows it): only once a runner was chosen, so rendering never probes.
        if let (Some(prompt), Some(policy)) = (
            ctx.get::<dsh_prompt::SystemPrompt>(),
            ctx.get::<crate::SandboxPolicy>(),
        ) {
            prompt.context(
                ctx,
                "sandbox:enforcement",
                111.0,
                Arc::new(move |a| {
                    let mode = policy.resolve(a.session.as_deref()).mode;
                    enforcement_note(&local, mode)
                }),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    /// A `bwrap` that counts its runs and exits with `code`.
    fn fake_bwrap(dir: &Path, code: i32) {
        let path = dir.join("bwrap");
        let _ = std::fs::remove_file(&path);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho run >> '{}/runs'\nexit {code}\n",
                dir.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn runs(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("runs")).map_or(0, |t| t.lines().count())
    }

    /// A passed probe is recorded and trusted by the next provider with the same key; a
    /// changed `bwrap`, a forged or forgotten record means probing again; a failed probe
    /// records nothing.
    #[test]
    fn a_recorded_bubblewrap_verdict_is_trusted_only_for_its_key() {
        let bin = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let record = home.path().join("cache").join("sandbox-probe");
        let path_var = std::ffi::OsString::from(format!("relative:{}", bin.path().display()));
        let verdict = || {
            LocalSandbox::new(vec![RunnerKind::Bwrap], Duration::from_secs(10))
                .with_probe_record(record.clone())
                .bwrap_verdict(Some(&path_var))
        };
        fake_bwrap(bin.path(), 0);
        assert_eq!(verdict(), Ok(Enforcement::Full));
        assert_eq!(runs(bin.path()), 1);
        let text = std::fs::read_to_string(&record).unwrap();
        assert!(
            text.contains(&bin.path().join("bwrap").display().to_string()),
            "{text}"
        );
        assert_eq!(verdict(), Ok(Enforcement::Full));
        assert_eq!(runs(bin.path()), 1, "the record was trusted");
        // Another bwrap (a new file at the same path) is probed again.
        fake_bwrap(bin.path(), 0);
        assert_eq!(verdict(), Ok(Enforcement::Full));
        assert_eq!(runs(bin.path()), 2);
        assert_eq!(verdict(), Ok(Enforcement::Full));
        assert_eq!(runs(bin.path()), 2);
        // A record that is not this key's is no verdict.
        std::fs::write(
            &record,
            "dsh bubblewrap probe passed (v1)\nbwrap /elsewhere\n",
        )
        .unwrap();
        assert_eq!(verdict(), Ok(Enforcement::Full));
        assert_eq!(runs(bin.path()), 3);
        // A runner failure forgets it.
        forget_bwrap_verdict();
        assert!(!record.exists());
        assert_eq!(verdict(), Ok(Enforcement::Full));
        assert_eq!(runs(bin.path()), 4);
        // A failing bwrap is probed every time and leaves no record.
        std::fs::remove_file(&record).unwrap();
        fake_bwrap(bin.path(), 1);
        assert!(verdict().is_err());
        assert!(verdict().is_err());
        assert_eq!(runs(bin.path()), 6);
        assert!(!record.exists());
    }

    #[test]
    fn the_probe_wait_ends_with_the_child_or_its_deadline() {
        let mut quick = std::process::Command::new("sh")
            .args(["-c", "echo out; exit 3"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (out, code, _) = wait_with_timeout(&mut quick, Duration::from_secs(10)).unwrap();
        assert_eq!((out, code), (b"out\n".to_vec(), Some(3)));
        let mut slow = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let started = Instant::now();
        let e = wait_with_timeout(&mut slow, Duration::from_millis(200)).unwrap_err();
        assert!(e.contains("did not finish within 200ms"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(20));
    }
}
