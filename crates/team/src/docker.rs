//! `dsh worker --sandbox docker`: the commands of each claimed session run in a container of
//! its own, on the worker that holds its lease.
//!
//! * **One container per lease.** At claim the worker removes every container of the session
//!   left by an older lease (labels `dsh.session` and `dsh.epoch`: whatever a fenced or dead
//!   worker's commands still run is killed with it), then starts
//!   `dsh-<session>-e<epoch>`: the workspace bound read-write at its own path, a private
//!   `/tmp`, no capabilities, no new privileges, a process limit, `--network none` unless
//!   `--docker-network` names another. The container ends with the turn.
//! * **Images.** Without `--docker-image` the worker imports an empty image once
//!   (`dsh-host-root:1`) and binds the host's `/usr`, `/bin`, `/lib*` and `/etc`
//!   read-only into it, so the worker's own tools are there and no registry is needed. A
//!   named image is used as it is (it needs `/bin/sh`, `setsid` and `sleep`).
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
}

async fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
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
    let safe: String = session
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("dsh-{safe}-e{epoch}")
}

/// Removes every container of `session` (those of older leases, and any left by this one).
pub async fn remove_session_containers(session: &str) -> Result<(), String> {
    let filter = format!("label=dsh.session={session}");
    let ids = docker(&["ps", "-aq", "--filter", &filter]).await?;
    let ids: Vec<&str> = ids.split_whitespace().collect();
    if ids.is_empty() {
        return Ok(());
    }
    let mut args = vec!["rm", "-f"];
    args.extend(ids);
    docker(&args).await.map(|_| ())
}

/// Starts the container of `session` under lease `epoch`, with `workspace` bound at its own
/// path; returns its name.
pub async fn start(
    options: &DockerOptions,
    session: &str,
    epoch: i64,
    workspace: &std::path::Path,
) -> Result<String, String> {
    remove_session_containers(session).await?;
    let name = container_name(session, epoch);
    let ws = workspace.display().to_string();
    let label_session = format!("dsh.session={session}");
    let label_epoch = format!("dsh.epoch={epoch}");
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
        "--network",
        &options.network,
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--pids-limit",
        "4096",
        "--init",
        "--tmpfs",
        "/tmp:mode=1777",
        "-v",
        &bind,
        "-w",
        &ws,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if options.image.is_none() {
        // Docker resolves a symbolic link (`/bin` → `usr/bin`) on the host side.
        for dir in HOST_DIRS {
            if std::path::Path::new(dir).is_dir() {
                args.push("-v".into());
                args.push(format!("{dir}:{dir}:ro"));
            }
        }
    }
    args.push(
        options
            .image
            .clone()
            .unwrap_or_else(|| HOST_ROOT_IMAGE.into()),
    );
    args.push("sleep".into());
    args.push("infinity".into());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    docker(&refs).await?;
    Ok(name)
}

/// Removes a container (its processes die with it).
pub async fn remove(name: &str) -> Result<(), String> {
    docker(&["rm", "-f", name]).await.map(|_| ())
}

fn fail(message: &str) -> ExitCode {
    eprintln!("{FAILURE_PREFIX} {message}");
    ExitCode::from(125)
}

/// `dsh __dsh-docker-exec <container> <sandbox profile…> -- <argv…>`: runs argv in the
/// container (see the module documentation); exits with its status.
pub fn exec_main(args: &[OsString]) -> ExitCode {
    let Some(container) = args.first().and_then(|c| c.to_str()).map(str::to_string) else {
        return fail("usage: __dsh-docker-exec <container> [profile…] -- <command…>");
    };
    let Some(split) = args.iter().position(|a| a == "--") else {
        return fail("no command after --");
    };
    let profile = &args[1..split];
    let argv = &args[split + 1..];
    if argv.is_empty() {
        return fail("no command after --");
    }
    // The profile binds the workspace read-write only in workspace-write mode.
    let read_only = !profile.iter().any(|a| a == "--bind");
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
    for (name, _) in std::env::vars_os() {
        if let Some(n) = name.to_str()
            && !n.is_empty()
            && !n.contains('=')
        {
            command.arg("-e").arg(n);
        }
    }
    command
        .arg(&container)
        .args(["setsid", "-w", "/bin/sh", "-c"])
        .arg(format!("echo $$ > {pidfile}; exec \"$@\""))
        .arg("sh")
        .args(argv);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&format!("cannot start the async runtime: {e}")),
    };
    runtime.block_on(async move {
        let mut child = match Command::from(command).spawn() {
            Ok(c) => c,
            Err(e) => return fail(&format!("cannot run docker: {e}")),
        };
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) else {
            return fail("cannot watch signals");
        };
        loop {
            let sig = tokio::select! {
                status = child.wait() => {
                    return match status {
                        Ok(s) => ExitCode::from(
                            s.code().map_or(128, |c| u8::try_from(c).unwrap_or(1)),
                        ),
                        Err(e) => fail(&format!("docker exec: {e}")),
                    };
                }
                _ = term.recv() => "TERM",
                _ = int.recv() => "INT",
                _ = hup.recv() => "HUP",
            };
            // To the command's process group inside the container.
            let _ = Command::new("docker")
                .args(["exec", &container, "/bin/sh", "-c"])
                .arg(format!(
                    "kill -s {sig} -- -$(cat {pidfile}) 2>/dev/null; rm -f {pidfile}"
                ))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_names_are_docker_names() {
        assert_eq!(container_name("session-1a", 3), "dsh-session-1a-e3");
        assert_eq!(container_name("a b/c", 1), "dsh-a_b_c-e1");
    }
}
