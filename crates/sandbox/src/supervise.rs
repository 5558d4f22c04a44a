//! The Landlock launcher as the parent of its command: a child subreaper, so every process
//! the command starts stays its descendant — `setsid`, double forks and `nohup` included —
//! and none outlives the command. That matches bubblewrap, whose private PID namespace
//! ends with the command's last process. (dsh kills a command's process group when the
//! session ends or the call is cancelled; a process that left the group with `setsid` was
//! out of its reach before.)
//!
//! The launcher waits for the command, reaping adopted orphans on the way; when the command
//! ends it kills whatever is left and exits with the command's status (or dies by the same
//! signal). A termination signal sent to the launcher (dsh cancelling the call, or dsh's
//! reaper at exit) kills at once the descendants that left the process group — the group's
//! own members got the signal with the launcher.

use std::collections::BTreeSet;
use std::process::ExitCode;

use rustix::process::{Pid, Signal, WaitOptions, WaitStatus};

/// The direct children of this process (adopted orphans included).
fn children() -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    out
}

/// Every descendant of this process, with its process group (a walk of `/proc`).
fn descendants() -> Vec<(i32, i32)> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let mut parent_of: Vec<(i32, i32, i32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp …`: the command name may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if let (Some(ppid), Some(pgrp)) = (
            fields.get(1).and_then(|p| p.parse::<i32>().ok()),
            fields.get(2).and_then(|p| p.parse::<i32>().ok()),
        ) {
            parent_of.push((pid, ppid, pgrp));
        }
    }
    let mut tree: BTreeSet<i32> = BTreeSet::from([me]);
    let mut out = Vec::new();
    loop {
        let before = tree.len();
        for (pid, ppid, pgrp) in &parent_of {
            if tree.contains(ppid) && tree.insert(*pid) {
                out.push((*pid, *pgrp));
            }
        }
        if tree.len() == before {
            return out;
        }
    }
}

fn kill(pid: i32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// Kills every descendant outside this process's group (those the group signal missed).
pub(crate) fn kill_escaped() {
    kill_outside_group(rustix::process::getpgrp().as_raw_nonzero().get());
}

/// SIGKILL to every descendant outside process group `group`.
pub(crate) fn kill_outside_group(group: i32) {
    for (pid, pgrp) in descendants() {
        if pgrp != group {
            kill(pid, Signal::KILL);
        }
    }
}

/// SIGKILL to every descendant, without reaping (a thread beside the one that waits).
pub(crate) fn kill_descendants() {
    for (pid, _) in descendants() {
        kill(pid, Signal::KILL);
    }
}

/// Kills everything left below this process and reaps it: killed parents hand their
/// children to us (we are their subreaper), so the loop ends when no child is left.
pub(crate) fn kill_all() {
    // Usually the command left nothing behind: with no child at all there is nothing to
    // list in `/proc`.
    if let Err(rustix::io::Errno::CHILD) = rustix::process::wait(WaitOptions::NOHANG) {
        return;
    }
    loop {
        let kids = children();
        if kids.is_empty() {
            // Reap what died since the listing; stop when nothing is left to wait for.
            match rustix::process::wait(WaitOptions::NOHANG) {
                Ok(Some(_)) => continue,
                _ => return,
            }
        }
        for pid in &kids {
            kill(*pid, Signal::KILL);
        }
        while let Ok(Some(_)) = rustix::process::wait(WaitOptions::NOHANG) {}
        std::thread::yield_now();
    }
}

/// Spawns `command` as this process's child, supervises it as described in the module
/// documentation and returns (or dies) with its outcome.
pub fn supervise(mut command: std::process::Command) -> ExitCode {
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        return crate::landlock::fail(format!("cannot become the command's subreaper: {e}"));
    }
    let signals = match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGQUIT,
    ]) {
        Ok(s) => s,
        Err(e) => return crate::landlock::fail(format!("cannot watch signals: {e}")),
    };
    let child = match command.spawn() {
        Ok(c) => c,
        Err(e) => return crate::landlock::fail(format!("exec failed: {e}")),
    };
    let main = i32::try_from(child.id()).unwrap_or(i32::MAX);
    let mut signals = signals;
    let _watcher = std::thread::Builder::new()
        .name("launcher-signals".into())
        .spawn(move || {
            for _ in signals.forever() {
                kill_escaped();
            }
        });
    let status: Option<WaitStatus> = loop {
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some((pid, status))) if pid.as_raw_nonzero().get() == main => break Some(status),
            Ok(Some(_)) => continue,
            Err(rustix::io::Errno::INTR) => continue,
            Ok(None) | Err(_) => break None,
        }
    };
    kill_all();
    match status {
        Some(s) => {
            if let Some(code) = s.exit_status() {
                return ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1));
            }
            if let Some(sig) = s.terminating_signal() {
                // Die the way the command died, so dsh reports the same signal.
                let _ = signal_hook::low_level::emulate_default_handler(sig);
                return ExitCode::from(u8::try_from((128 + sig) & 0xff).unwrap_or(1));
            }
            ExitCode::from(1)
        }
        None => crate::landlock::fail("lost track of the command"),
    }
}
