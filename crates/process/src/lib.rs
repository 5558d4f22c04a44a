//! Process-group mechanics shared by everything that runs a shell command for the agent
//! (the `bash` tool, hook commands): resolving the program on the child's `PATH`, a guard
//! that owns the group (SIGTERM, then SIGKILL after a grace period; a guard dropped while
//! armed terminates), pipe readers that stop when the run is dropped, and the reaper: a
//! watchdog process that kills every group still registered when this process dies, even
//! by SIGKILL (nothing in a killed process can clean up after it).

use std::collections::BTreeSet;
use std::io::{BufRead as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group, test_kill_process_group};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

/// The program to execute: a bare name is looked up on the child's `PATH` here, so the
/// standard library can use `posix_spawn` (a child `PATH` that differs from ours makes it
/// fall back to `fork`, which copies our page tables on every call). A name that is not
/// found, or no `PATH` at all, is returned unchanged and the spawn reports its usual error.
/// Pair it with `arg0(program)` so the child still sees the name it was asked for.
pub fn resolve_program(program: &str, env: &[(String, String)], cwd: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return PathBuf::from(program);
    }
    let Some((_, path)) = env.iter().rev().find(|(k, _)| k == "PATH") else {
        return PathBuf::from(program);
    };
    for dir in path.split(':') {
        // An empty entry means the working directory (of the child).
        let dir = if dir.is_empty() { cwd } else { Path::new(dir) };
        let candidate = dir.join(program);
        let executable = std::fs::metadata(&candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if executable {
            return candidate;
        }
    }
    PathBuf::from(program)
}

/// The program that runs the reaper (`<program> <arg>`), set once by the binary.
static REAPER_COMMAND: OnceLock<(PathBuf, String)> = OnceLock::new();
/// The running reaper's stdin, started on first use.
static REAPER: OnceLock<Option<Mutex<std::process::ChildStdin>>> = OnceLock::new();

/// Names the program that runs [`run_reaper`] (the binary itself, with a hidden argument).
/// Without it no reaper runs and groups are cleaned up by their guards only.
pub fn set_reaper_command(program: PathBuf, arg: &str) {
    let _ = REAPER_COMMAND.set((program, arg.to_string()));
}

/// Starts the reaper on a background thread now, so that it already runs when the first
/// process group is spawned: started lazily at that moment, a dsh killed while the reaper
/// itself was still starting would leave that first group unregistered (and running).
/// Called by plugins that will spawn groups (the bash tool); cheap after the first call.
pub fn start_reaper_soon() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    if REAPER_COMMAND.get().is_none() {
        return;
    }
    STARTED.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("dsh-reaper-start".into())
            .spawn(|| {
                reaper();
            });
    });
}

fn reaper() -> Option<&'static Mutex<std::process::ChildStdin>> {
    REAPER
        .get_or_init(|| {
            let (program, arg) = REAPER_COMMAND.get()?;
            let spawned = std::process::Command::new(program)
                .arg(arg)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                // Its own group: a Ctrl-C for the terminal's group does not reach it.
                .process_group(0)
                .spawn();
            match spawned {
                Ok(mut child) => child.stdin.take().map(Mutex::new),
                Err(e) => {
                    tracing::warn!(
                        "cannot start the process reaper ({}): {e}",
                        program.display()
                    );
                    None
                }
            }
        })
        .as_ref()
}

/// The groups registered with the reaper now (what [`kill_every_group`] kills).
static REGISTERED: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn registered() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    REGISTERED.lock().unwrap_or_else(|p| p.into_inner())
}

/// SIGKILLs every process group this process registered and still holds (and the sandbox
/// namespaces below them), at once: for a process that must stop everything it started
/// before it exits (a team worker whose lease was taken over).
pub fn kill_every_group() {
    let groups: Vec<i32> = registered().iter().copied().collect();
    for raw in groups {
        if let Some(pgid) = Pid::from_raw(raw)
            && test_kill_process_group(pgid).is_ok()
        {
            kill_nested_sandboxes(pgid);
            let _ = kill_process_group(pgid, Signal::KILL);
        }
    }
}

fn tell_reaper(line: String) {
    if let Some(stdin) = reaper() {
        let mut stdin = stdin.lock().unwrap_or_else(|p| p.into_inner());
        let _ = stdin.write_all(line.as_bytes());
    }
}

/// The reaper's main loop: reads `+<pgid>` / `-<pgid>` lines on stdin; at end of input
/// (its parent exited or died) it terminates every group still registered: SIGTERM, then
/// SIGKILL for members alive after a second.
pub fn run_reaper() {
    let mut groups: BTreeSet<i32> = BTreeSet::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let (sign, id) = line.split_at(line.len().min(1));
        let Ok(id) = id.trim().parse::<i32>() else {
            continue;
        };
        match sign {
            "+" => {
                groups.insert(id);
            }
            "-" => {
                groups.remove(&id);
            }
            _ => {}
        }
    }
    let alive: Vec<Pid> = groups
        .into_iter()
        .filter_map(Pid::from_raw)
        .filter(|g| test_kill_process_group(*g).is_ok())
        .collect();
    for g in &alive {
        kill_nested_sandboxes(*g);
        let _ = kill_process_group(*g, Signal::TERM);
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline && alive.iter().any(|g| test_kill_process_group(*g).is_ok()) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for g in &alive {
        let _ = kill_process_group(*g, Signal::KILL);
    }
}

/// SIGKILL to every descendant of `leader` that runs in another PID namespace than the
/// leader: the init of a sandbox's namespace (bwrap with `--unshare-pid`), whose death ends
/// everything inside it. Such an init ignores the group's SIGTERM (a namespace init only
/// takes signals it handles) and starts its own session, so the group signal never reaches
/// it; it normally dies with its parent (`--die-with-parent`), but a parent killed before
/// the sandbox armed that would leave it running. Read from `/proc` before the group is
/// signalled, while the parent links still lead to it.
fn kill_nested_sandboxes(leader: Pid) {
    kill_all(&nested_sandboxes(leader));
}

/// The descendants of `leader` that run in another PID namespace than it (see
/// [`kill_nested_sandboxes`]).
fn nested_sandboxes(leader: Pid) -> Vec<Pid> {
    let pid_ns = |pid: i32| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let leader = leader.as_raw_nonzero().get();
    let Some(own) = pid_ns(leader) else {
        return Vec::new();
    };
    descendants(leader)
        .into_iter()
        .filter(|pid| pid_ns(*pid).is_some_and(|ns| ns != own))
        .filter_map(Pid::from_raw)
        .collect()
}

fn kill_all(pids: &[Pid]) {
    for p in pids {
        let _ = rustix::process::kill_process(*p, Signal::KILL);
    }
}

/// The live descendants of `root` (parent links read from `/proc/<pid>/stat`).
fn descendants(root: i32) -> Vec<i32> {
    let mut children: std::collections::HashMap<i32, Vec<i32>> = Default::default();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: the command may hold spaces and parentheses.
        let ppid = stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if let Some(ppid) = ppid {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).map_or(&[][..], Vec::as_slice) {
            if !found.contains(&child) {
                found.push(child);
                queue.push(child);
            }
        }
    }
    found
}

/// Owns a process group (spawned with `process_group(0)`, so its id is the child's pid).
/// Terminating is idempotent; dropping the guard while armed (a run future dropped before
/// it settled) terminates the group.
pub struct ProcessGroup {
    pgid: Option<Pid>,
    grace: Duration,
    terminated: bool,
    armed: bool,
}

impl ProcessGroup {
    /// `pid` is the group leader's pid (`Child::id()`); `None` leaves nothing to signal.
    /// The group is registered with the reaper until it is gone.
    pub fn new(pid: Option<u32>, grace: Duration) -> Self {
        let pgid = pid
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw);
        if let Some(g) = pgid {
            registered().insert(g.as_raw_nonzero().get());
            tell_reaper(format!("+{}\n", g.as_raw_nonzero()));
        }
        Self {
            pgid,
            grace,
            terminated: false,
            armed: true,
        }
    }

    /// SIGTERM to the whole group now; SIGKILL after the grace period if any member is
    /// still alive. The escalation runs on its own thread so it outlives the run (a
    /// TERM-trapping survivor is still killed) and polls liveness so it never signals a
    /// group id that has gone away.
    pub fn terminate(&mut self) {
        if std::mem::replace(&mut self.terminated, true) {
            return;
        }
        let Some(pgid) = self.pgid else { return };
        if test_kill_process_group(pgid).is_err() {
            return;
        }
        // The group gets its SIGTERM before the sandbox namespaces below it die: a runner
        // (bubblewrap) then ends by that signal, as the command did, rather than by noticing
        // its namespace die first and exiting with a status of its own.
        let nested = nested_sandboxes(pgid);
        let _ = kill_process_group(pgid, Signal::TERM);
        kill_all(&nested);
        let grace = self.grace;
        let spawned = std::thread::Builder::new()
            .name("dsh-group-kill".into())
            .spawn(move || {
                let deadline = Instant::now() + grace;
                loop {
                    if test_kill_process_group(pgid).is_err() {
                        return;
                    }
                    if Instant::now() >= deadline {
                        let _ = kill_process_group(pgid, Signal::KILL);
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(15));
                }
            });
        if spawned.is_err() {
            let _ = kill_process_group(pgid, Signal::KILL);
        }
    }

    /// SIGKILL to the whole group now (and to a sandbox namespace below it).
    pub fn kill_now(&mut self) {
        self.terminated = true;
        let Some(pgid) = self.pgid else { return };
        if test_kill_process_group(pgid).is_ok() {
            kill_nested_sandboxes(pgid);
            let _ = kill_process_group(pgid, Signal::KILL);
        }
    }

    /// Whether any member of the group is still alive.
    pub fn is_alive(&self) -> bool {
        self.pgid
            .is_some_and(|g| test_kill_process_group(g).is_ok())
    }

    /// The run settled: dropping the guard no longer terminates the group.
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.armed {
            self.terminate();
        }
        // A group with members left (a background server the command started) stays
        // registered, so it still dies with this process.
        if let Some(g) = self.pgid
            && test_kill_process_group(g).is_err()
        {
            registered().remove(&g.as_raw_nonzero().get());
            tell_reaper(format!("-{}\n", g.as_raw_nonzero()));
        }
    }
}

/// A task that is aborted when its handle is dropped.
pub struct AbortOnDrop<T>(pub JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where a pipe reader puts what it reads.
pub trait OutputSink: Send + 'static {
    fn push(&mut self, chunk: &[u8]);
}

/// Reads `stream` to its end into `sink`.
pub fn spawn_reader<R, S>(mut stream: R, sink: Arc<Mutex<S>>) -> AbortOnDrop<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    S: OutputSink,
{
    AbortOnDrop(tokio::spawn(async move {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => sink
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(&buf[..n]),
            }
        }
    }))
}

/// After the child exited, waits at most `grace` for the readers to reach the end of their
/// pipes (a descendant that inherited a pipe must not hold the result open). False when
/// the wait ran out.
pub async fn drain(readers: &mut [AbortOnDrop<()>], grace: Duration) -> bool {
    let all = async {
        for reader in readers.iter_mut() {
            let _ = (&mut reader.0).await;
        }
    };
    tokio::time::timeout(grace, all).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_resolve_on_the_child_path() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("dsh-resolve-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let tool = dir.join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::write(dir.join("plain"), "").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let env = |path: &str| vec![("PATH".to_string(), path.to_string())];
        let path = format!("/nonexistent:{}", dir.display());
        let cwd = Path::new("/");
        assert_eq!(resolve_program("tool", &env(&path), cwd), tool);
        // Not executable, absent, no PATH at all, or already a path: left to the spawn.
        assert_eq!(
            resolve_program("plain", &env(&path), cwd),
            PathBuf::from("plain")
        );
        assert_eq!(
            resolve_program("absent", &env(&path), cwd),
            PathBuf::from("absent")
        );
        assert_eq!(resolve_program("tool", &[], cwd), PathBuf::from("tool"));
        assert_eq!(
            resolve_program("./tool", &env(&path), cwd),
            PathBuf::from("./tool")
        );
        // An empty entry means the child's working directory.
        assert_eq!(resolve_program("tool", &env("/nonexistent:"), &dir), tool);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
