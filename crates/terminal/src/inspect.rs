//! `/proc` facts about the processes of a terminal (Linux; elsewhere nothing is found and
//! readiness falls back to the prompt and idle rules).

/// `(pid, pgrp, session)` of every process, from `/proc/<pid>/stat`.
fn processes() -> Vec<(i32, i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let (pgrp, sid, state) = parse_stat(&stat)?;
            // Zombies are gone for our purposes.
            (state != 'Z').then_some((pid, pgrp, sid))
        })
        .collect()
}

/// `(pgrp, session, state)` from a stat line (the command name may hold spaces and
/// parentheses; fields resume after the last `)`).
pub fn parse_stat(stat: &str) -> Option<(i32, i32, char)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let _ppid = f.next()?;
    let pgrp = f.next()?.parse().ok()?;
    let sid = f.next()?.parse().ok()?;
    Some((pgrp, sid, state))
}

/// Live processes of session `sid`.
pub fn session_members(sid: i32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|(_, _, s)| *s == sid)
        .map(|(p, _, _)| p)
        .collect()
}

pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| parse_stat(&s))
        .is_some_and(|(_, _, state)| state != 'Z')
}

/// The `read` system call number of this architecture.
const READ_NR: &str = if cfg!(target_arch = "aarch64") {
    "63"
} else {
    "0"
};

/// Whether a `/proc/<pid>/task/<tid>/syscall` line is a blocked `read(0, …)`.
pub fn is_stdin_read(syscall: &str) -> bool {
    let mut f = syscall.split_whitespace();
    f.next() == Some(READ_NR) && f.next() == Some("0x0")
}

/// Whether some thread of process group `pgid` is blocked reading its standard input.
pub fn group_waits_on_stdin(pgid: i32) -> bool {
    processes()
        .into_iter()
        .filter(|(_, g, _)| *g == pgid)
        .any(|(pid, _, _)| {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                return false;
            };
            tasks.flatten().any(|t| {
                std::fs::read_to_string(t.path().join("syscall")).is_ok_and(|s| is_stdin_read(&s))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_syscall_lines_parse() {
        assert_eq!(
            parse_stat("42 (we ird) name)) S 1 42 40 34816 42 4194560"),
            Some((42, 40, 'S'))
        );
        assert_eq!(parse_stat("garbage"), None);
        let read = if cfg!(target_arch = "aarch64") {
            "63"
        } else {
            "0"
        };
        assert!(is_stdin_read(&format!(
            "{read} 0x0 0x7ffd 0x1 0x0 0x0 0x0 0x7ffd 0x7f"
        )));
        assert!(!is_stdin_read(&format!(
            "{read} 0x3 0x7ffd 0x1 0x0 0x0 0x0 0x7ffd 0x7f"
        )));
        assert!(!is_stdin_read("running"));
    }
}
