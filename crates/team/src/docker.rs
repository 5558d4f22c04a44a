//! `dsh worker --sandbox docker`: the commands of each claimed session run in a container of
//! its own, on the worker that holds its lease.
//!
//! * **One container per lease.** At claim the worker removes every container of the session
//!   left by an older lease (labels `dsh.session` and `dsh.epoch`: whatever a fenced or dead
//!   worker's commands still run is killed with it), then starts
//!   `dsh-<session>-e<epoch>`: the workspace bound read-write at its own path, a private
//!   `/tmp`, no capabilities, no new privileges, a process limit, `--network none` unless
//!   `--docker-network` names another. The container ends with the turn, and with its
//!   worker: its first process waits on a FIFO only the worker holds open (its lifeline), so
//!   a worker killed with nobody left on its host to clean up still takes its container,
//!   and every command running in it, along (`--rm` removes it).
//! * **Images.** Without `--docker-image` the worker imports an empty image once
//!   (`dsh-host-root:1`) and binds the host's `/usr`, `/bin`, `/lib*` and `/etc`
//!   read-only into it, so the worker's own tools are there and no registry is needed. A
//!   named image is used as it is (it needs `/bin/sh` and `setsid`).
//! * **Commands.** The turn's sandbox row gets `runnerCommand` [`EXEC_ARG`]: each confined
//!   command becomes `docker exec` in the container, in the caller's working directory, with
//!   the caller's environment passed by name (values never appear on a command line). Under
//!   `read-only` mode the command runs as an unprivileged user (65534), so files only the
//!   worker's account may write stay unwritable. The command leads a process group of its
//!   own inside; SIGTERM, SIGINT and SIGHUP to the runner are sent to that group, so a
//!   timeout or a cancel stops it. Whatever a killed runner leaves dies with the container.

use std::ffi::OsString;
use std::process::{ExitCode, Stdio};

use tokio::process::Command;

/// The hidden argument that runs `dsh` as the command runner of a container.
pub const EXEC_ARG: &str = "__dsh-docker-exec";

/// The image made on first use when none is named.
pub const HOST_ROOT_IMAGE: &str = "dsh-host-root:1";

/// The host directories bound read-only into [`HOST_ROOT_IMAGE`] containers.
// Not /sbin: `--init` places its init there.
const HOST_DIRS: &[&str] = &["/usr", "/bin", "/lib", "/lib32", "/lib64", "/etc"];

/// What a refused or failed runner prints first (the sandbox's runner-failure signature).
pub const FAILURE_PREFIX: &str = "dsh-docker-exec:";

/// How the worker runs containers.
#[derive(Clone, Debug)]
pub struct DockerOptions {
    /// The image; `None`: [`HOST_ROOT_IMAGE`] with the host's system directories.
    pub image: Option<String>,
    /// `docker run --network` (default `none`).
    pub network: String,
    /// `docker run --memory` (and the same `--memory-swap`: no swap beyond it), as docker
    /// spells sizes (`512m`, `2g`); `None`: no limit.
    pub memory: Option<String>,
    /// `docker run --cpus` (`1.5`); `None`: no limit.
    pub cpus: Option<String>,
}

/// `value` as a `--docker-memory` size: a whole number with an optional unit b, k, m or g,
/// at least 6 MiB (docker's own floor).
pub fn check_memory(value: &str) -> Result<(), String> {
    let v = value.to_ascii_lowercase();
    let (digits, unit) = match v.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&v[..i], Some(c)),
        _ => (v.as_str(), None),
    };
    let scale: u64 = match unit {
        None | Some('b') => 1,
        Some('k') => 1 << 10,
        Some('m') => 1 << 20,
        Some('g') => 1 << 30,
        Some(_) => 0,
    };
    let bytes = match digits.parse::<u64>() {
        Ok(n) if scale > 0 && !digits.starts_with('+') => n.checked_mul(scale),
        _ => None,
    };
    match bytes {
        Some(b) if b >= 6 << 20 => Ok(()),
        Some(_) => Err(format!(
            "--docker-memory {value:?} is below docker's least, 6m"
        )),
        None => Err(format!(
            "--docker-memory takes a size such as 512m or 2g, not {value:?}"
        )),
    }
}

/// `value` as a `--docker-cpus` count: a positive decimal number.
pub fn check_cpus(value: &str) -> Result<(), String> {
    match value.parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 && !value.starts_with('+') => Ok(()),
        _ => Err(format!(
            "--docker-cpus takes a positive number such as 1 or 0.5, not {value:?}"
        )),
    }
}

/// How often a docker worker looks for containers of ended leases on its host.
pub const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// A `docker` client call may take this long (an image import, a slow daemon).
const DOCKER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

async fn docker(args: &[&str]) -> Result<String, String> {
    let run = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(DOCKER_TIMEOUT, run)
        .await
        .map_err(|_| {
            format!(
                "docker {} did not answer within a minute",
                args.first().copied().unwrap_or("")
            )
        })?
        .map_err(|e| format!("cannot run docker: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "docker {}: {}",
            args.first().copied().unwrap_or(""),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Checks that docker answers and the image exists (importing [`HOST_ROOT_IMAGE`] when it is
/// the one and it is missing).
pub async fn prepare(options: &DockerOptions) -> Result<(), String> {
    docker(&["version", "--format", "{{.Server.Version}}"])
        .await
        .map_err(|e| format!("the docker sandbox needs a running Docker daemon: {e}"))?;
    let image = options.image.as_deref().unwrap_or(HOST_ROOT_IMAGE);
    if docker(&["image", "inspect", image]).await.is_ok() {
        return Ok(());
    }
    if options.image.is_some() {
        return Err(format!("docker image {image} is not on this machine"));
    }
    // An empty image: a tar archive of nothing is two zero blocks.
    let mut child = Command::new("docker")
        .args(["import", "-", HOST_ROOT_IMAGE])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run docker: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        tokio::io::AsyncWriteExt::write_all(&mut stdin, &[0u8; 1024])
            .await
            .map_err(|e| format!("docker import: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| format!("docker import: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "docker import: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// The container name of `session` under lease `epoch`.
pub fn container_name(session: &str, epoch: i64) -> String {
    let safe = crate::safe_segment(session);
    format!("dsh-{safe}-e{epoch}")
}

/// Removes the containers of `session` that leases older than `epoch` left (their commands
/// die with them), and one of this very lease left by an earlier attempt. A newer lease's
/// container is never touched.
pub async fn remove_older_containers(
    store_id: &str,
    session: &str,
    epoch: i64,
) -> Result<(), String> {
    let filter = format!("label=dsh.session={session}");
    let of_store = format!("label=dsh.store={store_id}");
    let listed = docker(&[
        "ps",
        "-a",
        "--filter",
        &filter,
        "--filter",
        &of_store,
        "--format",
        "{{.ID}} {{.Label \"dsh.epoch\"}}",
    ])
    .await?;
    let ids: Vec<&str> = listed
        .lines()
        .filter_map(|line| {
            let (id, e) = line.split_once(' ')?;
            // A container without a readable epoch is not one this code made: left alone.
            (e.trim().parse::<i64>().ok()? <= epoch).then_some(id)
        })
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    let mut args = vec!["rm", "-f"];
    args.extend(ids);
    docker(&args).await.map(|_| ())
}

/// Whether a container of lease `epoch` outlived its lease, given what the store says of its
/// session now: `None` (no such session), a newer epoch, or no live lease. A container of the
/// current, live lease belongs to the worker running the turn and is kept.
fn outlived(epoch: i64, now: Option<(i64, bool)>) -> bool {
    match now {
        None => true,
        Some((current, leased)) => current > epoch || !leased,
    }
}

/// Removes the containers on this Docker host whose lease is over: the session's lease has a
/// newer epoch, or nobody holds it (a worker died here and the session was claimed on another
/// host, or not yet). Run by every docker worker at start and while idle, so a dead worker's
/// container does not live until a worker of this host happens to claim its session. Returns
/// how many were removed; a container that went meanwhile is not an error. Only containers
/// of this store (label `dsh.store`) are looked at: another store's workers may share the host.
pub async fn sweep(store: &dsh_store_pg::Store, store_id: &str) -> Result<usize, String> {
    let of_store = format!("label=dsh.store={store_id}");
    let listed = docker(&[
        "ps",
        "-a",
        "--filter",
        "label=dsh.session",
        "--filter",
        &of_store,
        "--format",
        "{{.ID}} {{.Label \"dsh.epoch\"}} {{.Label \"dsh.session\"}}",
    ])
    .await?;
    let mut removed = 0;
    for line in listed.lines() {
        let mut parts = line.splitn(3, ' ');
        let (Some(id), Some(epoch), Some(session)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        // A container without a readable epoch is not one this code made: left alone.
        let Ok(epoch) = epoch.trim().parse::<i64>() else {
            continue;
        };
        let now = match store.session(session.trim()).await {
            Ok(row) => Some((row.lease_epoch, row.leased)),
            Err(dsh_store_pg::StoreError::NoSession(_)) => None,
            Err(e) => return Err(e.to_string()),
        };
        if outlived(epoch, now) && docker(&["rm", "-f", id]).await.is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

/// Files and directories of the host's `/etc` a container never sees (hashes, host keys,
/// private TLS keys): the directory is bound whole otherwise.
const ETC_MASKED_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
];
const ETC_MASKED_DIRS: &[&str] = &["/etc/ssh", "/etc/ssl/private"];

/// Paths inside the workspace the sandbox keeps read-only (its default protected paths).
const PROTECTED_IN_WORKSPACE: &[&str] = &[".git/hooks", ".git/config"];

/// A started container: its name, the runner command the turn's sandbox row uses, and its
/// lifeline.
pub struct Started {
    pub name: String,
    pub runner: Vec<String>,
    /// The worker's end of the container's lifeline: the container ends once no process
    /// holds it (this worker exited or was killed), whether or not any worker is left on the
    /// host to remove it.
    pub lifeline: std::os::fd::OwnedFd,
}

/// Where a container's lifeline is mounted inside it.
const LIFELINE_MOUNT: &str = "/run/dsh-lifeline";

/// A FIFO at `<dir>/lifeline/fifo`, opened read-write and close-on-exec by this process only.
/// The container's first process reads it: a read returns end-of-file once no writer is
/// left, that is once this process is gone, and the container ends with that process.
fn lifeline(dir: &std::path::Path) -> Result<(std::path::PathBuf, std::os::fd::OwnedFd), String> {
    use rustix::fs::{CWD, FileType, Mode, OFlags};
    let at = dir.join("lifeline");
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&at)
        .map_err(|e| format!("cannot create {}: {e}", at.display()))?;
    let fifo = at.join("fifo");
    rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::RUSR | Mode::WUSR, 0)
        .map_err(|e| format!("cannot create the FIFO {}: {e}", fifo.display()))?;
    // Read-write: opening never waits for a reader, and the container's read open finds a
    // writer at once.
    let fd = rustix::fs::open(&fifo, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| format!("cannot open the FIFO {}: {e}", fifo.display()))?;
    Ok((at, fd))
}

/// Starts the container of `session` under lease `epoch`, with `workspace` bound at its own
/// path; `scratch` is the turn's private directory, where its lifeline is made.
pub async fn start(
    options: &DockerOptions,
    store_id: &str,
    session: &str,
    epoch: i64,
    workspace: &std::path::Path,
    dsh: &std::path::Path,
    scratch: &std::path::Path,
) -> Result<Started, String> {
    remove_older_containers(store_id, session, epoch).await?;
    let (lifeline_dir, lifeline_fd) = lifeline(scratch)?;
    let lifeline_bind = format!("{}:{LIFELINE_MOUNT}:ro", lifeline_dir.display());
    let name = container_name(session, epoch);
    let ws = workspace.display().to_string();
    // Commands run as the worker's own account, as they would on the host.
    let user = format!(
        "{}:{}",
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw()
    );
    let label_session = format!("dsh.session={session}");
    let label_epoch = format!("dsh.epoch={epoch}");
    let label_store = format!("dsh.store={store_id}");
    let bind = format!("{ws}:{ws}");
    let mut args: Vec<String> = [
        "run",
        "-d",
        "--name",
        &name,
        "--label",
        &label_session,
        "--label",
        &label_epoch,
        "--label",
        &label_store,
        "--network",
        &options.network,
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--pids-limit",
        "4096",
        "--init",
        "--rm",
        "--user",
        &user,
        "--tmpfs",
        "/tmp:mode=1777",
        "-v",
        &bind,
        "-v",
        &lifeline_bind,
        "-w",
        &ws,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(memory) = &options.memory {
        for flag in ["--memory", "--memory-swap"] {
            args.push(flag.into());
            args.push(memory.clone());
        }
    }
    if let Some(cpus) = &options.cpus {
        args.push("--cpus".into());
        args.push(cpus.clone());
    }
    // The sandbox's protected paths stay read-only inside the writable workspace.
    let mut runner = vec![
        dsh.display().to_string(),
        EXEC_ARG.to_string(),
        name.clone(),
        "--net".into(),
        options.network.clone(),
        "--ws".into(),
        ws.clone(),
    ];
    for rel in PROTECTED_IN_WORKSPACE {
        let path = workspace.join(rel);
        if path.exists() {
            let p = path.display().to_string();
            args.push("-v".into());
            args.push(format!("{p}:{p}:ro"));
            runner.push("--ro".into());
            runner.push(p);
        }
    }
    if options.image.is_none() {
        // Docker resolves a symbolic link (`/bin` → `usr/bin`) on the host side.
        for dir in HOST_DIRS {
            if std::path::Path::new(dir).is_dir() {
                args.push("-v".into());
                args.push(format!("{dir}:{dir}:ro"));
            }
        }
        for file in ETC_MASKED_FILES {
            if std::path::Path::new(file).exists() {
                args.push("-v".into());
                args.push(format!("/dev/null:{file}:ro"));
            }
        }
        for dir in ETC_MASKED_DIRS {
            if std::path::Path::new(dir).is_dir() {
                args.push("--tmpfs".into());
                args.push(format!("{dir}:ro"));
            }
        }
    }
    args.push(
        options
            .image
            .clone()
            .unwrap_or_else(|| HOST_ROOT_IMAGE.into()),
    );
    // The first process waits on the lifeline: the container lives as long as this worker.
    args.push("/bin/sh".into());
    args.push("-c".into());
    args.push(format!("read -r _ < {LIFELINE_MOUNT}/fifo"));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    docker(&refs).await?;
    Ok(Started {
        name,
        runner,
        lifeline: lifeline_fd,
    })
}

/// Removes a container (its processes die with it).
pub async fn remove(name: &str) -> Result<(), String> {
    docker(&["rm", "-f", name]).await.map(|_| ())
}

fn fail(message: &str) -> ExitCode {
    eprintln!("{FAILURE_PREFIX} {message}");
    ExitCode::from(125)
}

/// What the runner was told at container start, and the sandbox profile of one command.
struct ExecRequest {
    container: String,
    /// The container's network (`none`: no network).
    net: String,
    workspace: std::path::PathBuf,
    /// Paths the container mounts read-only inside the workspace.
    read_only: Vec<std::path::PathBuf>,
    profile: Vec<OsString>,
    argv: Vec<OsString>,
}

fn parse_exec(args: &[OsString]) -> Result<ExecRequest, String> {
    let container = args
        .first()
        .and_then(|c| c.to_str())
        .filter(|c| !c.is_empty() && !c.starts_with('-'))
        .ok_or("usage: __dsh-docker-exec <container> [--net N] [--ws DIR] [--ro PATH]… [profile…] -- <command…>")?
        .to_string();
    let mut req = ExecRequest {
        container,
        net: "none".into(),
        workspace: std::path::PathBuf::from("/"),
        read_only: Vec::new(),
        profile: Vec::new(),
        argv: Vec::new(),
    };
    let mut i = 1;
    while i < args.len() {
        let value = || {
            args.get(i + 1)
                .cloned()
                .ok_or("an option without its value")
        };
        match args[i].to_str() {
            Some("--net") => req.net = value()?.to_string_lossy().into_owned(),
            Some("--ws") => req.workspace = value()?.into(),
            Some("--ro") => req.read_only.push(value()?.into()),
            _ => break,
        }
        i += 2;
    }
    let split = args[i..]
        .iter()
        .position(|a| a == "--")
        .ok_or("no command after --")?
        + i;
    req.profile = args[i..split].to_vec();
    req.argv = args[split + 1..].to_vec();
    if req.argv.is_empty() {
        return Err("no command after --".into());
    }
    Ok(req)
}

/// Why the container cannot honour the command's sandbox profile, if it cannot: the
/// network denied while the container has one, or a protected or hidden path inside the
/// writable workspace that the container does not keep read-only.
fn unmet_rule(req: &ExecRequest) -> Option<String> {
    let p = &req.profile;
    if p.iter().any(|a| a == "--unshare-net") && req.net != "none" {
        return Some(format!(
            "the session's policy denies the network, but its container has network {:?}",
            req.net
        ));
    }
    let mut i = 0;
    while i < p.len() {
        if p[i] == "--ro-bind" && i + 2 < p.len() {
            let (from, to) = (
                std::path::Path::new(&p[i + 1]),
                std::path::Path::new(&p[i + 2]),
            );
            let inside = to.starts_with(&req.workspace);
            let covered = req.read_only.iter().any(|r| to.starts_with(r));
            if from != std::path::Path::new("/") && inside && !covered {
                let what = if from == std::path::Path::new("/dev/null") {
                    "hide"
                } else {
                    "keep read-only"
                };
                return Some(format!(
                    "the container cannot {what} {} as the session's policy asks (a container \
                     keeps read-only what existed when its turn started; the next turn's \
                     container will)",
                    to.display()
                ));
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    None
}

/// `dsh __dsh-docker-exec <container> [--net N] [--ws DIR] [--ro PATH]… <sandbox profile…> --
/// <argv…>`: runs argv in the container (see the module documentation); exits with its
/// status, or 125 (with [`FAILURE_PREFIX`]) when it cannot run it as the profile asks.
pub fn exec_main(args: &[OsString]) -> ExitCode {
    let req = match parse_exec(args) {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    if let Some(why) = unmet_rule(&req) {
        return fail(&why);
    }
    // The profile binds the workspace read-write only in workspace-write mode.
    let read_only = !req.profile.iter().any(|a| a == "--bind");
    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => return fail(&format!("no working directory: {e}")),
    };
    let mut tag = [0u8; 8];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut tag).is_err() {
        return fail("the system random source failed");
    }
    let pidfile = format!(
        "/tmp/.dsh-exec-{}",
        tag.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let mut command = std::process::Command::new("docker");
    command.arg("exec").arg("-i").arg("-w").arg(&cwd);
    if read_only {
        command.args(["-u", "65534:65534"]);
    }
    // By name only: the client reads each value from its own environment. The host's
    // temporary directories do not exist in the container (its /tmp is private).
    for (name, _) in std::env::vars_os() {
        if let Some(n) = name.to_str()
            && !n.is_empty()
            && !n.contains('=')
            && !matches!(n, "TMPDIR" | "TMP" | "TEMP")
        {
            command.arg("-e").arg(n);
        }
    }
    command
        .arg(&req.container)
        .args(["setsid", "-w", "/bin/sh", "-c"])
        .arg(format!("echo $$ > {pidfile}; exec \"$@\""))
        .arg("sh")
        .args(&req.argv);
    // The client in a group of its own: a signal to the runner's group reaches this process,
    // which forwards it inside; the client dies with this process whatever happens.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    // SAFETY: between fork and exec the closure makes one system call (prctl), which is
    // async-signal-safe, and allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&format!("cannot start the async runtime: {e}")),
    };
    runtime.block_on(run_exec(command, req.container, pidfile))
}

/// Sends `sig` to the command's process group inside `container`.
async fn signal_inside(container: &str, pidfile: &str, sig: &str) {
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        Command::new("docker")
            .args(["exec", container, "/bin/sh", "-c"])
            .arg(format!("kill -s {sig} -- -$(cat {pidfile}) 2>/dev/null"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .status(),
    )
    .await;
}

async fn run_exec(command: std::process::Command, container: String, pidfile: String) -> ExitCode {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        return fail("cannot watch signals");
    };
    let mut child = match Command::from(command).spawn() {
        Ok(c) => c,
        Err(e) => return fail(&format!("cannot run docker: {e}")),
    };
    // After a forwarded signal, what still runs a second later is killed.
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        let kill_at = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let sig = tokio::select! {
            biased;
            _ = term.recv() => "TERM",
            _ = int.recv() => "INT",
            _ = hup.recv() => "HUP",
            () = kill_at => "KILL",
            status = child.wait() => {
                return match status {
                    Ok(s) => ExitCode::from(match (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)) {
                        (Some(c), _) => u8::try_from(c).unwrap_or(1),
                        (None, Some(n)) => u8::try_from(128 + n).unwrap_or(255),
                        (None, None) => 1,
                    }),
                    Err(e) => fail(&format!("docker exec: {e}")),
                };
            }
        };
        signal_inside(&container, &pidfile, sig).await;
        deadline = match sig {
            "KILL" => None,
            _ => Some(tokio::time::Instant::now() + std::time::Duration::from_secs(1)),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_runner_refuses_rules_the_container_cannot_keep() {
        let base = ["c1", "--net", "none", "--ws", "/w", "--ro", "/w/.git/hooks"];
        let with = |profile: &[&str]| {
            let mut a: Vec<&str> = base.to_vec();
            a.extend_from_slice(profile);
            a.extend_from_slice(&["--", "true"]);
            parse_exec(&os(&a)).unwrap()
        };
        // Read-only roots, binds outside the workspace and the protected hooks: kept.
        let ok = with(&[
            "--ro-bind",
            "/",
            "/",
            "--bind",
            "/w",
            "/w",
            "--unshare-net",
            "--ro-bind",
            "/w/.git/hooks",
            "/w/.git/hooks",
            "--ro-bind",
            "/dev/null",
            "/home/u/.netrc",
        ]);
        assert_eq!(unmet_rule(&ok), None);
        assert_eq!(ok.argv, os(&["true"]));
        // A protected path or a hidden file inside the workspace the container lacks: refused.
        let protected = with(&["--ro-bind", "/w/.git/config", "/w/.git/config"]);
        assert!(
            unmet_rule(&protected)
                .unwrap()
                .contains("keep read-only /w/.git/config")
        );
        let masked = with(&["--ro-bind", "/dev/null", "/w/.env"]);
        assert!(unmet_rule(&masked).unwrap().contains("hide /w/.env"));
        // The network denied while the container has one: refused.
        let mut req = parse_exec(&os(&[
            "c1",
            "--net",
            "bridge",
            "--unshare-net",
            "--",
            "true",
        ]))
        .unwrap();
        assert!(unmet_rule(&req).unwrap().contains("denies the network"));
        req.net = "none".into();
        assert_eq!(unmet_rule(&req), None);
        // Malformed calls are refused, never a panic.
        assert!(parse_exec(&os(&["--", "true"])).is_err());
        assert!(parse_exec(&os(&["c1", "--net"])).is_err());
        assert!(parse_exec(&os(&["c1", "true"])).is_err());
        assert!(parse_exec(&os(&["c1", "--"])).is_err());
    }

    #[test]
    fn a_container_outlives_its_lease_when_the_store_moved_on() {
        assert!(outlived(3, None), "the session is gone");
        assert!(outlived(3, Some((4, true))), "a newer lease holds it");
        assert!(outlived(3, Some((3, false))), "nobody holds it");
        assert!(!outlived(3, Some((3, true))), "its own lease, live");
        assert!(
            !outlived(5, Some((4, true))),
            "newer than the store knows: a claim in flight"
        );
    }

    #[test]
    fn container_names_are_docker_names() {
        assert_eq!(container_name("session-1a", 3), "dsh-session-1a-e3");
        assert_eq!(container_name("a b/c", 1), "dsh-a_b_c-e1");
    }

    #[test]
    fn limits_are_checked_before_any_container_starts() {
        for ok in ["6m", "512m", "2g", "2G", "1073741824", "7000k"] {
            assert_eq!(check_memory(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "m",
            "lots",
            "2t",
            "-1g",
            "+2g",
            "1.5g",
            "99999999999999g",
        ] {
            assert!(
                check_memory(bad).unwrap_err().contains("takes a size"),
                "{bad}"
            );
        }
        assert!(check_memory("1m").unwrap_err().contains("least"));
        for ok in ["1", "0.5", "2.25"] {
            assert_eq!(check_cpus(ok), Ok(()), "{ok}");
        }
        for bad in ["0", "-1", "", "NaN", "inf", "one", "+1"] {
            assert!(check_cpus(bad).is_err(), "{bad}");
        }
    }
}
