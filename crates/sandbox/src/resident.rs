//! Resident sandboxes: one confined process per session that starts the session's commands,
//! so a command pays for a fork and an exec instead of a new bubblewrap (namespaces, mounts)
//! or a new Landlock launcher (ruleset, filter) every time.
//!
//! The resident is the launcher started once with `--serve` in place of `-- ARGV`: under the
//! same runner, with the same arguments as a single command of that policy would get. It
//! restricts itself exactly as it would before running one command (bubblewrap's namespaces
//! and mounts around it, or its own Landlock domain; the system-call filter; no capabilities)
//! and then reads requests on descriptor 3, a Unix stream socket whose other end only dsh
//! holds. Every command inherits that confinement from it; nothing is granted per request.
//!
//! One request: a 4-byte body length sent with three descriptors (the command's stdout and
//! stderr pipes, and a per-command status socket), then the body: the working directory, the
//! argv and the environment, each string as a 4-byte length and its bytes. For each request
//! a supervisor forked from the resident ahead of time (a spare, which reads the request
//! itself, so the fork is not paid between a request and its command) starts a new session,
//! becomes the child subreaper of everything the command starts, runs the command in its
//! own process group and answers on the status socket: `S` once the command runs, then `x`
//! or `s` with a 4-byte exit code or signal once it and every process it left are gone. dsh
//! writes `T` (terminate: SIGTERM to the group, SIGKILL to what left it) or `K` (kill
//! everything) on that socket; closing it kills everything too, so a dropped run never
//! leaves its command running.
//!
//! The resident is keyed by session and by its exact argument list: a policy change (mode,
//! roots, a protected path or masked file that appeared) gives the next command a new
//! resident, as a new runner would have been started before. A resident that cannot start
//! or dies is never trusted again for that key; the caller then runs the command the
//! classic way (a runner per command), which reports any runner failure as before.
//!
//! The resident is non-dumpable (no process of the sandbox can trace it or open its
//! descriptors), reaps its supervisors between requests and exits when dsh closes its end
//! of the socket; dsh's reaper kills it if dsh dies.

// Claiming descriptor 3, `fork` and `pre_exec` have no safe spelling.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use rustix::process::{Pid, Signal, WaitOptions};

/// The descriptor the resident reads requests on.
const CONTROL_FD: i32 = 3;
/// The longest request body accepted (argv and environment together).
const MAX_BODY: usize = 16 << 20;
/// A resident idle this long is stopped when another one is looked up.
const IDLE: Duration = Duration::from_secs(300);

/// How long a resident may take to accept a request, and to start its command (a resident
/// a command stopped is replaced after this).
const SEND_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a supervisor that was told to kill may take to answer before the whole
/// resident is killed from outside.
const KILL_ANSWER: Duration = Duration::from_secs(2);

/// The largest request sent without leaving the async thread (see [`Resident::send`]).
const QUICK_SEND: usize = 64 << 10;

/// The flag that turns the launcher into a resident.
pub const SERVE_ARG: &str = "--serve";

// ---------------------------------------------------------------------------------------
// The wire format.

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(bytes);
}

struct Request {
    cwd: PathBuf,
    argv: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
}

fn encode(cwd: &Path, argv: &[OsString], env: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    put(&mut out, cwd.as_os_str().as_bytes());
    put(
        &mut out,
        &u32::try_from(argv.len()).unwrap_or(0).to_le_bytes(),
    );
    for a in argv {
        put(&mut out, a.as_bytes());
    }
    put(
        &mut out,
        &u32::try_from(env.len()).unwrap_or(0).to_le_bytes(),
    );
    for (k, v) in env {
        put(&mut out, k.as_bytes());
        put(&mut out, v.as_bytes());
    }
    out
}

fn decode(body: &[u8]) -> Option<Request> {
    let mut at = 0usize;
    let mut next = || -> Option<&[u8]> {
        let len = u32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?) as usize;
        let item = body.get(at + 4..at + 4 + len)?;
        at += 4 + len;
        Some(item)
    };
    let count =
        |b: &[u8]| -> Option<usize> { Some(u32::from_le_bytes(b.try_into().ok()?) as usize) };
    let cwd = PathBuf::from(OsString::from_vec(next()?.to_vec()));
    let argc = count(next()?)?;
    let mut argv = Vec::new();
    for _ in 0..argc {
        argv.push(OsString::from_vec(next()?.to_vec()));
    }
    let envc = count(next()?)?;
    let mut env = Vec::new();
    for _ in 0..envc {
        let k = OsString::from_vec(next()?.to_vec());
        let v = OsString::from_vec(next()?.to_vec());
        env.push((k, v));
    }
    (!argv.is_empty()).then_some(Request { cwd, argv, env })
}

// ---------------------------------------------------------------------------------------
// The resident (inside the sandbox).

/// How a spare supervisor that took no request ended: dsh closed the request socket.
const SPARE_END: i32 = 0;
/// How a spare supervisor that took no request ended: the request stream failed.
const SPARE_BROKEN: i32 = 1;

/// The resident's main loop, after the launcher restricted itself: keeps one spare
/// supervisor forked ahead of the next request until dsh closes descriptor 3.
///
/// The spare, not the resident, reads the next request. Once it has the whole request it
/// lets go of the request socket, starts the command and then tells the resident (one byte
/// on a pipe), which forks the next spare while the command runs. So the fork happens while
/// a command runs or the model thinks, not between a request and its command (on two cores
/// a fork right after the request took the CPU the spare was starting the command on, as
/// the scheduler tends to run a woken process where its waker ran); and only one
/// process reads the socket at a time. A spare that ends without taking a request means
/// dsh is gone (or the request stream broke, or something in the sandbox killed the
/// spare): the resident ends too, and dsh starts another one for the next command.
pub(crate) fn serve() -> ExitCode {
    // Descriptor 3 must be the socket dsh handed over; anything else is a usage error.
    // SAFETY: borrowed only for the check; a closed descriptor makes it fail.
    let fd3 = unsafe { rustix::fd::BorrowedFd::borrow_raw(CONTROL_FD) };
    if rustix::net::sockopt::socket_type(fd3).is_err() {
        return crate::landlock::fail(
            "usage error: --serve needs the request socket on descriptor 3",
        );
    }
    // SAFETY: descriptor 3 is open (checked above) and nothing else in this process owns it.
    let control = unsafe { UnixStream::from_raw_fd(CONTROL_FD) };
    let _ = rustix::io::fcntl_setfd(&control, rustix::io::FdFlags::CLOEXEC);
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        return crate::landlock::fail(format!("cannot make the resident non-dumpable: {e}"));
    }
    loop {
        // Supervisors that finished since the last request.
        while let Ok(Some(_)) = rustix::process::wait(WaitOptions::NOHANG) {}
        let (taken_read, taken_write) =
            match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
                Ok(p) => p,
                Err(e) => return crate::landlock::fail(format!("cannot make a pipe: {e}")),
            };
        let resident = rustix::process::getpid();
        // SAFETY: this process is single-threaded; the child only runs `spare` and exits.
        let spare = match unsafe { libc::fork() } {
            0 => {
                drop(taken_read);
                std::process::exit(spare(resident, control, taken_write));
            }
            -1 => {
                let e = io::Error::last_os_error();
                return crate::landlock::fail(format!("cannot fork a supervisor: {e}"));
            }
            pid => pid,
        };
        drop(taken_write);
        let mut byte = [0u8; 1];
        let taken = loop {
            match rustix::io::read(&taken_read, &mut byte) {
                Err(rustix::io::Errno::INTR) => continue,
                other => break matches!(other, Ok(1)),
            }
        };
        if taken {
            continue;
        }
        // The spare ended without a request: find out why.
        let ended = Pid::from_raw(spare).and_then(|pid| {
            loop {
                match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
                    Err(rustix::io::Errno::INTR) => continue,
                    other => break other.ok().flatten(),
                }
            }
        });
        return match ended.and_then(|(_, s)| s.exit_status()) {
            Some(SPARE_END) => ExitCode::SUCCESS,
            _ => crate::landlock::fail("the request stream broke"),
        };
    }
}

/// What a supervisor sets up before its request comes: the subreaper role, and `SIGCHLD`
/// blocked and read from a descriptor (blocked before the spawn, so no child's end can slip
/// by; the command starts with an empty signal mask, which the standard library sets). A
/// failure is reported to the request. (Its own session comes with the request: an idle
/// spare stays in the resident's process group, which dsh can kill whole.)
struct Ready {
    subreaper: rustix::io::Result<()>,
    children: io::Result<OwnedFd>,
}

impl Ready {
    fn now() -> Self {
        Self {
            subreaper: rustix::process::set_child_subreaper(Some(rustix::process::getpid())),
            children: child_signals(),
        }
    }
}

/// A spare supervisor (a fork of the resident): gets ready, reads requests until one is
/// whole, and supervises it, telling the resident on `taken` once its command started (or
/// could not start). Returns how it ended when it took none.
///
/// An idle spare dies with its resident (a command that killed the resident must not find
/// its next command served by the resident's orphan: the next one starts a new resident).
/// Once it took a request it outlives the resident, as the command it supervises does.
fn spare(resident: Pid, control: UnixStream, taken: OwnedFd) -> i32 {
    if rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).is_err()
        || rustix::process::getppid() != Some(resident)
    {
        return SPARE_BROKEN;
    }
    let ready = Ready::now();
    let request = loop {
        let (len, fds) = match receive_header(&control) {
            Ok(Some(h)) => h,
            Ok(None) => return SPARE_END,
            Err(_) => return SPARE_BROKEN,
        };
        if len > MAX_BODY {
            return SPARE_BROKEN;
        }
        let mut body = vec![0u8; len];
        if (&control).read_exact(&mut body).is_err() {
            return SPARE_BROKEN;
        }
        // A request without its descriptors cannot be answered; the next may be fine.
        let Ok(fds) = <[OwnedFd; 3]>::try_from(fds) else {
            continue;
        };
        if let Some(request) = decode(&body) {
            break (request, fds);
        }
    };
    // Taken: from here the request is this process's to finish, whatever the resident does.
    let _ = rustix::process::set_parent_process_death_signal(None);
    // The next spare reads the socket from here on.
    drop(control);
    let (request, [out, err, status]) = request;
    supervise_request(ready, request, out, err, status, Taken(Some(taken)))
}

/// The spare's word to the resident that it took its request, so the resident forks the next
/// spare. Said once: when the command started, or on whichever path ends the supervisor
/// before that (dropped), so the resident never waits for a spare that is gone.
struct Taken(Option<OwnedFd>);

impl Taken {
    fn tell(&mut self) {
        if let Some(pipe) = self.0.take() {
            while let Err(rustix::io::Errno::INTR) = rustix::io::write(&pipe, &[1]) {}
        }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.tell();
    }
}

/// The 4-byte body length and the descriptors sent with it; `None` at end of input.
fn receive_header(control: &UnixStream) -> io::Result<Option<(usize, Vec<OwnedFd>)>> {
    let mut len = [0u8; 4];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let mut got = 0usize;
    let mut fds = Vec::new();
    while got < len.len() {
        let msg = loop {
            match rustix::net::recvmsg(
                control,
                &mut [io::IoSliceMut::new(&mut len[got..])],
                &mut ancillary,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Err(rustix::io::Errno::INTR) => continue,
                other => break other?,
            }
        };
        for m in ancillary.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = m {
                fds.extend(received);
            }
        }
        if msg.bytes == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        got += msg.bytes;
    }
    Ok(Some((u32::from_le_bytes(len) as usize, fds)))
}

fn answer_exit(status: &impl AsFd, code: Option<i32>, signal: Option<i32>) -> io::Result<()> {
    let (kind, value) = match (code, signal) {
        (_, Some(s)) => (b's', s),
        (Some(c), None) => (b'x', c),
        (None, None) => (b'x', 1),
    };
    let mut msg = [0u8; 5];
    msg[0] = kind;
    msg[1..].copy_from_slice(&value.to_le_bytes());
    rustix::io::write(status, &msg)
        .map(|_| ())
        .map_err(Into::into)
}

fn signal_group(pgid: i32, signal: Signal) {
    if let Some(g) = Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(g, signal);
    }
}

/// Where `exec` would find `program` on the `PATH` of `env`: the first absolute entry that
/// holds an executable regular file of that name. Execed by that path, the command starts
/// without a failed `execve` for every entry before it. `None` (the exec searches as usual)
/// when `program` names a path, `PATH` is unset, or a relative entry comes first (it would
/// be resolved in the command's working directory).
fn find_on_path(program: &OsStr, env: &[(OsString, OsString)]) -> Option<PathBuf> {
    let name = program.as_bytes();
    if name.is_empty() || name.contains(&b'/') {
        return None;
    }
    let (_, path) = env.iter().rev().find(|(k, _)| k == "PATH")?;
    for dir in path.as_bytes().split(|b| *b == b':') {
        if dir.first() != Some(&b'/') {
            return None;
        }
        let candidate = Path::new(OsStr::from_bytes(dir)).join(program);
        let executable = rustix::fs::access(&candidate, rustix::fs::Access::EXEC_OK).is_ok();
        if executable && std::fs::metadata(&candidate).is_ok_and(|m| m.is_file()) {
            return Some(candidate);
        }
    }
    None
}

/// Blocks `SIGCHLD` and returns a descriptor that reads it (a `signalfd`).
fn child_signals() -> io::Result<OwnedFd> {
    // SAFETY: plain calls on a local signal set; the descriptor is new and owned here.
    unsafe {
        let mut set = MaybeUninit::<libc::sigset_t>::zeroed();
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), libc::SIGCHLD);
        if libc::sigprocmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, set.as_ptr(), libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Waits for the command `main`, reaping every other child (adopted orphans) as it ends,
/// and obeys dsh on `status` meanwhile: `T` terminates the command's group (and kills what
/// left it); `K`, end of input or an error kills everything. One thread: `poll` on the
/// status socket and on `children` (the `SIGCHLD` descriptor). `None` when the command
/// was lost track of.
fn watch(main: i32, status: &OwnedFd, children: &OwnedFd) -> Option<rustix::process::WaitStatus> {
    let mut listening = true;
    loop {
        loop {
            match rustix::process::wait(WaitOptions::NOHANG) {
                Ok(Some((pid, s))) if pid.as_raw_nonzero().get() == main => return Some(s),
                Ok(Some(_)) | Err(rustix::io::Errno::INTR) => continue,
                Ok(None) => break,
                Err(_) => return None,
            }
        }
        let mut fds = [
            libc::pollfd {
                fd: children.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: status.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let count: libc::nfds_t = if listening { 2 } else { 1 };
        // SAFETY: `fds` holds `count` initialised entries that outlive the call.
        if unsafe { libc::poll(fds.as_mut_ptr(), count, -1) } < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                _ => return None,
            }
        }
        if fds[0].revents != 0 {
            let mut drain = [0u8; 512];
            while matches!(rustix::io::read(children, &mut drain), Ok(n) if n > 0) {}
        }
        if listening && fds[1].revents != 0 {
            let mut byte = [0u8; 1];
            match rustix::io::read(status, &mut byte) {
                Ok(1) if byte[0] == b'T' => {
                    signal_group(main, Signal::TERM);
                    crate::supervise::kill_outside_group(main);
                }
                Err(rustix::io::Errno::INTR) | Err(rustix::io::Errno::AGAIN) => {}
                // `K`, end of input or an error: dsh wants it gone, or is gone.
                _ => {
                    signal_group(main, Signal::KILL);
                    crate::supervise::kill_descendants();
                    listening = false;
                }
            }
        }
    }
}

/// The supervisor of one command (a fork of the resident): runs it and answers on `status`.
fn supervise_request(
    ready: Ready,
    request: Request,
    out: OwnedFd,
    err: OwnedFd,
    status: OwnedFd,
    mut taken: Taken,
) -> i32 {
    use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
    let _ = rustix::process::setsid();
    let err_copy = err.try_clone().ok().map(std::fs::File::from);
    let report_failure = |message: String| {
        if let Some(mut e) = err_copy.as_ref() {
            let _ = writeln!(e, "landlock-run: {message}");
        }
        let _ = answer_exit(
            &status,
            Some(i32::from(crate::landlock::LAUNCHER_FAILURE)),
            None,
        );
        1
    };
    if let Err(e) = ready.subreaper {
        return report_failure(format!("cannot become the command's subreaper: {e}"));
    }
    let children = match ready.children {
        Ok(fd) => fd,
        Err(e) => return report_failure(format!("cannot watch the command: {e}")),
    };
    let Some((program, args)) = request.argv.split_first() else {
        return report_failure("usage error: a request without a command".into());
    };
    let mut command = match find_on_path(program, &request.env) {
        Some(path) => {
            let mut c = std::process::Command::new(path);
            c.arg0(program);
            c
        }
        None => std::process::Command::new(program),
    };
    command
        .args(args)
        .env_clear()
        .envs(request.env)
        .current_dir(&request.cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(out))
        .stderr(std::process::Stdio::from(err))
        .process_group(0);
    let child = match command.spawn() {
        Ok(c) => c,
        Err(e) => return report_failure(format!("exec failed: {e}")),
    };
    drop(command);
    let main = i32::try_from(child.id()).unwrap_or(i32::MAX);
    if rustix::io::write(&status, b"S").is_err() {
        // dsh is gone: nothing may run for it.
        signal_group(main, Signal::KILL);
    }
    taken.tell();
    let outcome = watch(main, &status, &children);
    crate::supervise::kill_all();
    let (code, signal) = match outcome {
        Some(s) => {
            let raw = std::process::ExitStatus::from_raw(s.as_raw());
            (raw.code(), raw.signal())
        }
        None => (Some(i32::from(crate::landlock::LAUNCHER_FAILURE)), None),
    };
    let _ = answer_exit(&status, code, signal);
    0
}

// ---------------------------------------------------------------------------------------
// The host side.

/// A running resident.
pub struct Resident {
    control: Mutex<UnixStream>,
    /// Its process group, registered with dsh's reaper; terminated when the resident goes.
    group: Mutex<dsh_process::ProcessGroup>,
    /// Kept so the runtime reaps it.
    _child: tokio::process::Child,
    args: Vec<OsString>,
    program: PathBuf,
    last_used: Mutex<Instant>,
}

impl Drop for Resident {
    fn drop(&mut self) {
        // Closing the socket ends the resident; the group guard makes sure.
        let control = self.control.get_mut().unwrap_or_else(|p| p.into_inner());
        let _ = control.shutdown(std::net::Shutdown::Both);
    }
}

impl Resident {
    /// Kills the resident and everything in it now.
    fn kill(&self) {
        let control = self.control.lock().unwrap_or_else(|p| p.into_inner());
        let _ = control.shutdown(std::net::Shutdown::Both);
        self.group
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .kill_now();
    }

    /// Starts `program args…` with its request socket on descriptor 3. `path` is the `PATH`
    /// the runner program is looked up on.
    fn start(program: &Path, args: &[OsString], path: Option<&str>) -> io::Result<Self> {
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0);
        if let Some(p) = path {
            command.env("PATH", p);
        }
        let raw = theirs.as_raw_fd();
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if raw == CONTROL_FD {
                    let flags = libc::fcntl(raw, libc::F_GETFD);
                    if flags < 0 || libc::fcntl(raw, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                } else if libc::dup2(raw, CONTROL_FD) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn()?;
        drop(theirs);
        let ours = UnixStream::from(ours);
        ours.set_write_timeout(Some(SEND_TIMEOUT))?;
        let group = dsh_process::ProcessGroup::new(child.id(), Duration::from_millis(200));
        Ok(Self {
            control: Mutex::new(ours),
            group: Mutex::new(group),
            _child: child,
            args: args.to_vec(),
            program: program.to_path_buf(),
            last_used: Mutex::new(Instant::now()),
        })
    }

    /// Sends one command; the run answers once it started (or the resident is gone).
    /// With `wait`, blocking: a resident that stopped reading fails it after
    /// [`SEND_TIMEOUT`]. Without, `None` when the socket cannot take the request now, or
    /// another sender holds it (nothing was sent); a request the socket took only in part is
    /// finished blocking. A request that fails half sent closes the socket (the resident
    /// ends, and the next command starts another).
    fn send(self: &Arc<Self>, body: &[u8], wait: bool) -> io::Result<Option<Run>> {
        let (out_read, out_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let (err_read, err_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let (status, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        {
            // From the async thread, a socket another sender holds (a blocking one, waiting on
            // a resident that stopped reading) is not waited for either.
            let mut control = if wait {
                self.control.lock().unwrap_or_else(|p| p.into_inner())
            } else {
                match self.control.try_lock() {
                    Ok(c) => c,
                    Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) => return Ok(None),
                }
            };
            let fds = [out_write.as_fd(), err_write.as_fd(), theirs.as_fd()];
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
            let mut ancillary = SendAncillaryBuffer::new(&mut space);
            ancillary.push(SendAncillaryMessage::ScmRights(&fds));
            let len = u32::try_from(body.len())
                .map_err(|_| io::Error::other("the command is too large for the resident"))?
                .to_le_bytes();
            let flags = if wait {
                SendFlags::NOSIGNAL
            } else {
                SendFlags::NOSIGNAL | SendFlags::DONTWAIT
            };
            let sent = loop {
                match rustix::net::sendmsg(
                    &*control,
                    &[io::IoSlice::new(&len), io::IoSlice::new(body)],
                    &mut ancillary,
                    flags,
                ) {
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(rustix::io::Errno::AGAIN) if !wait => return Ok(None),
                    other => break other?,
                }
            };
            let rest = if sent < len.len() {
                control
                    .write_all(&len[sent..])
                    .and_then(|()| control.write_all(body))
            } else {
                control.write_all(&body[sent - len.len()..])
            };
            if let Err(e) = rest {
                // Half a request is on the stream: nothing after it could be read right.
                let _ = control.shutdown(std::net::Shutdown::Both);
                return Err(e);
            }
        }
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        let status = UnixStream::from(status);
        status.set_nonblocking(true)?;
        Ok(Some(Run {
            resident: self.clone(),
            status: tokio::net::UnixStream::from_std(status)?,
            answer: [0; 5],
            got: 0,
            stdout: Some(tokio::net::unix::pipe::Receiver::from_owned_fd(out_read)?),
            stderr: Some(tokio::net::unix::pipe::Receiver::from_owned_fd(err_read)?),
        }))
    }
}

/// One command running in a resident.
pub struct Run {
    status: tokio::net::UnixStream,
    resident: Arc<Resident>,
    /// The status answer as far as it was read.
    answer: [u8; 5],
    got: usize,
    pub stdout: Option<tokio::net::unix::pipe::Receiver>,
    pub stderr: Option<tokio::net::unix::pipe::Receiver>,
}

/// How a command in a resident ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunStatus {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl Run {
    /// Reads the answer to its end; `true` once the whole 5-byte status is in.
    async fn read_answer(&mut self, upto: usize) -> io::Result<bool> {
        use tokio::io::AsyncReadExt as _;
        while self.got < upto {
            let n = self.status.read(&mut self.answer[self.got..upto]).await?;
            if n == 0 {
                return Ok(false);
            }
            self.got += n;
        }
        Ok(true)
    }

    async fn started(&mut self) -> io::Result<()> {
        let lost = || {
            io::Error::new(
                io::ErrorKind::NotConnected,
                "the resident sandbox ended before it started the command",
            )
        };
        if !self.read_answer(1).await? {
            return Err(lost());
        }
        match self.answer[0] {
            b'S' => {
                self.got = 0;
                Ok(())
            }
            // A launcher failure answers with its status at once.
            b'x' | b's' => Ok(()),
            _ => Err(lost()),
        }
    }

    /// Waits until the command and everything it started are gone. Cancel-safe: a partial
    /// answer is kept for the next call.
    pub async fn wait(&mut self) -> io::Result<RunStatus> {
        let answered = self.read_answer(self.answer.len()).await?;
        tracing::trace!(target: "dsh_step", "resident exited");
        if !answered {
            // The supervisor died without answering (the resident was killed, from inside
            // or out): everything it supervised died with it.
            evict(&self.resident);
            return Ok(RunStatus {
                code: None,
                signal: Some(libc::SIGKILL),
            });
        }
        let a = self.answer;
        let value = i32::from_le_bytes([a[1], a[2], a[3], a[4]]);
        Ok(match a[0] {
            b's' => RunStatus {
                code: None,
                signal: Some(value),
            },
            _ => RunStatus {
                code: Some(value),
                signal: None,
            },
        })
    }

    /// SIGTERM to the command's group (and SIGKILL to what left it).
    pub fn terminate(&self) {
        let _ = self.status.try_write(b"T");
    }

    /// SIGKILL to everything the command started, and the status. A supervisor that does
    /// not answer (a command stopped it) costs the whole resident: it is killed from outside
    /// (its namespace or its group with it) and the command reported killed.
    pub async fn kill(&mut self) -> io::Result<RunStatus> {
        let _ = self.status.try_write(b"K");
        if let Ok(done) = tokio::time::timeout(KILL_ANSWER, self.wait()).await {
            return done;
        }
        evict(&self.resident);
        self.resident.kill();
        Ok(RunStatus {
            code: None,
            signal: Some(libc::SIGKILL),
        })
    }
}

// ---------------------------------------------------------------------------------------
// The residents of this process.

#[derive(Default)]
struct Pool {
    /// The live resident of each session.
    live: HashMap<String, Arc<Resident>>,
    /// (session, program, args) whose resident failed: those run the classic way.
    failed: Vec<(String, PathBuf, Vec<OsString>)>,
}

fn pool() -> &'static Mutex<Pool> {
    static POOL: OnceLock<Mutex<Pool>> = OnceLock::new();
    POOL.get_or_init(Default::default)
}

/// What starts the resident of a session: the runner program and its `--serve` arguments
/// ([`crate::Confined::serve_args`]).
#[derive(Clone, Debug)]
pub struct ResidentSpec {
    pub session: String,
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

/// The session's resident for `spec`, started when there is none (or its arguments
/// changed); `None` when a resident for `spec` failed before.
fn acquire(spec: &ResidentSpec, path: Option<&str>) -> io::Result<Option<Arc<Resident>>> {
    let mut pool = pool().lock().unwrap_or_else(|p| p.into_inner());
    if pool
        .failed
        .iter()
        .any(|(s, p, a)| *s == spec.session && *p == spec.program && *a == spec.args)
    {
        return Ok(None);
    }
    // Residents nobody used for a while go (a long-lived server outlives its sessions).
    pool.live.retain(|session, r| {
        session == &spec.session
            || Arc::strong_count(r) > 1
            || r.last_used
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .elapsed()
                < IDLE
    });
    if let Some(r) = pool.live.get(&spec.session)
        && r.program == spec.program
        && r.args == spec.args
    {
        return Ok(Some(r.clone()));
    }
    let resident = Arc::new(Resident::start(&spec.program, &spec.args, path)?);
    pool.live.insert(spec.session.clone(), resident.clone());
    Ok(Some(resident))
}

/// Takes `resident` out of the pool (the next command of its session starts another).
fn evict(resident: &Arc<Resident>) {
    let mut pool = pool().lock().unwrap_or_else(|p| p.into_inner());
    pool.live.retain(|_, r| !Arc::ptr_eq(r, resident));
}

fn mark_failed(spec: &ResidentSpec) {
    let mut pool = pool().lock().unwrap_or_else(|p| p.into_inner());
    pool.failed.push((
        spec.session.clone(),
        spec.program.clone(),
        spec.args.clone(),
    ));
}

/// Runs `argv` in the session's resident. `None`: no resident can run it (none could start,
/// or it died or stalled before starting the command): the caller runs the command the
/// classic way; nothing of it ran. A resident that fails is replaced once; a second failure
/// marks `spec` as failed for the rest of the process.
pub async fn run(
    spec: &ResidentSpec,
    argv: &[OsString],
    env: &[(String, String)],
    cwd: &Path,
) -> Option<Run> {
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    let body = encode(cwd, argv, env);
    for attempt in 0..2 {
        let resident = match acquire(spec, path) {
            Ok(Some(r)) => r,
            Ok(None) => return None,
            Err(e) => {
                tracing::debug!("cannot start a resident sandbox: {e}");
                mark_failed(spec);
                return None;
            }
        };
        tracing::trace!(target: "dsh_step", "resident request");
        let started = async {
            // A request that fits goes out from here; only a socket that is full (a
            // resident that stopped reading) is waited on, off the async threads.
            let sent = if body.len() <= QUICK_SEND {
                resident.send(&body, false)?
            } else {
                None
            };
            let mut run = match sent {
                Some(run) => run,
                None => {
                    let sender = resident.clone();
                    let body = body.clone();
                    tokio::task::spawn_blocking(move || sender.send(&body, true))
                        .await
                        .map_err(io::Error::other)??
                        .ok_or_else(|| io::Error::other("the resident refused the request"))?
                }
            };
            let started = run.started().await.map(|()| run);
            tracing::trace!(target: "dsh_step", "resident started");
            started
        };
        let started = match tokio::time::timeout(SEND_TIMEOUT, started).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the resident sandbox did not start the command in time",
            )),
        };
        match started {
            Ok(run) => return Some(run),
            Err(e) => {
                tracing::debug!("resident sandbox failed (attempt {attempt}): {e}");
                evict(&resident);
                resident.kill();
                if attempt == 1 {
                    mark_failed(spec);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_where_exec_would_find_it() {
        use std::os::unix::fs::PermissionsExt as _;
        let root = tempfile::tempdir().unwrap();
        let dir = |name: &str| {
            let d = root.path().join(name);
            std::fs::create_dir(&d).unwrap();
            d
        };
        let (empty, plain, first, second) =
            (dir("empty"), dir("plain"), dir("first"), dir("second"));
        let file = |d: &Path, mode: u32| {
            let f = d.join("tool");
            std::fs::write(&f, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        file(&plain, 0o644); // not executable: exec skips it
        file(&first, 0o755);
        file(&second, 0o755);
        std::fs::create_dir(empty.join("sub")).unwrap();
        let path_of = |dirs: &[&Path]| {
            let joined = dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>();
            vec![(OsString::from("PATH"), OsString::from(joined.join(":")))]
        };
        let env = path_of(&[&empty, &plain, &first, &second]);
        assert_eq!(
            find_on_path(OsStr::new("tool"), &env),
            Some(first.join("tool"))
        );
        // A directory of that name is not a program.
        assert_eq!(find_on_path(OsStr::new("sub"), &env), None);
        assert_eq!(find_on_path(OsStr::new("missing"), &env), None);
        // A path is execed as given; no PATH, or a relative entry first, leaves the search
        // to exec.
        assert_eq!(find_on_path(OsStr::new("./tool"), &env), None);
        assert_eq!(find_on_path(OsStr::new("tool"), &[]), None);
        let relative = vec![(
            OsString::from("PATH"),
            OsString::from(format!("bin:{}", first.display())),
        )];
        assert_eq!(find_on_path(OsStr::new("tool"), &relative), None);
        // The last PATH of the environment is the one the command gets.
        let mut both = path_of(&[&empty]);
        both.extend(path_of(&[&second]));
        assert_eq!(
            find_on_path(OsStr::new("tool"), &both),
            Some(second.join("tool"))
        );
    }

    #[test]
    fn requests_round_trip_and_reject_truncation() {
        let argv: Vec<OsString> = vec!["bash".into(), "-c".into(), "echo hi".into()];
        let env = vec![("PATH".to_string(), "/usr/bin".to_string())];
        let body = encode(Path::new("/w"), &argv, &env);
        let r = decode(&body).unwrap();
        assert_eq!(r.cwd, PathBuf::from("/w"));
        assert_eq!(r.argv, argv);
        assert_eq!(
            r.env,
            vec![(OsString::from("PATH"), OsString::from("/usr/bin"))]
        );
        for cut in 0..body.len() {
            assert!(decode(&body[..cut]).is_none(), "cut at {cut}");
        }
        assert!(decode(&encode(Path::new("/w"), &[], &env)).is_none());
    }
}
