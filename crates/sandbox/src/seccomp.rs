//! The system-call filter that runs beside Landlock (and inside bubblewrap): it closes what
//! neither file rules nor a network namespace cover.
//!
//! * **Sockets** (only when the network is denied), see [`Sockets`]: under Landlock a
//!   confined process keeps only anonymous Unix stream pairs (no MPTCP, UDP, raw, netlink
//!   or SCTP, which Landlock's TCP rules do not see, and no pathname or abstract Unix socket
//!   of the host); inside bubblewrap's private network namespace it keeps Internet sockets
//!   (they reach nothing outside it, and a dev server on loopback still works) but no Unix
//!   socket, since a pathname socket of the host (a database, the Docker daemon, an SSH
//!   agent) is reachable through any mount.
//! * **io_uring** is refused outright: its operations (socket, connect, open) bypass this
//!   filter.
//! * **Metadata**: set-user-ID and set-group-ID bits cannot be set anywhere, and extended
//!   attributes (ACLs, capabilities, user attributes) cannot be written anywhere; programs
//!   see "not supported" and carry on. Permission bits and times of files outside the
//!   writable roots are not coverable by a filter that cannot read paths: under Landlock
//!   that gap is reported as partial enforcement (bubblewrap's read-only mounts close it).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Which sockets a confined process may create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sockets {
    /// Any (the policy allows the network).
    Any,
    /// Everything but Unix sockets: for bubblewrap's private network namespace, where
    /// Internet sockets reach nothing outside but a pathname Unix socket on the host
    /// (a database, the Docker daemon) would.
    NoUnix,
    /// Only anonymous Unix stream/seqpacket pairs: for Landlock, whose network rules see
    /// TCP only (MPTCP, UDP and every other family are closed here).
    PairsOnly,
}

/// What the filter covers for one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterSpec {
    pub sockets: Sockets,
}

// Numbers newer than some libc releases; identical on x86_64 and aarch64 (generic table).
const SYS_FCHMODAT2: i64 = 452;
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;

/// x32 system calls carry this bit and the x86_64 audit architecture: filter them too.
#[cfg(target_arch = "x86_64")]
const X32_BIT: i64 = 0x4000_0000;

fn target_arch() -> Result<TargetArch, String> {
    #[cfg(target_arch = "x86_64")]
    return Ok(TargetArch::x86_64);
    #[cfg(target_arch = "aarch64")]
    return Ok(TargetArch::aarch64);
    #[allow(unreachable_code)]
    Err(format!(
        "no system-call filter for the {} architecture",
        std::env::consts::ARCH
    ))
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
        .map_err(|e| format!("seccomp condition: {e}"))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conditions).map_err(|e| format!("seccomp rule: {e}"))
}

/// Adds `nr` (and its x32 alias) with `rules` (empty: always).
fn add(map: &mut BTreeMap<i64, Vec<SeccompRule>>, nr: i64, rules: Vec<SeccompRule>) {
    #[cfg(target_arch = "x86_64")]
    map.insert(nr | X32_BIT, rules.clone());
    map.insert(nr, rules);
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, String> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        target_arch()?,
    )
    .map_err(|e| format!("seccomp filter: {e}"))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| format!("seccomp filter: {e}"))
}

/// The filters of `spec`, one per answer the caller gets (each filter has one action).
pub fn programs(spec: FilterSpec) -> Result<Vec<BpfProgram>, String> {
    let mut out = Vec::new();

    // "Permission denied": the network and set-ID bits.
    let mut denied: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let unix = libc::AF_UNIX as u64;
    let dgram = libc::SOCK_DGRAM as u64;
    // A datagram Unix socket can address any pathname socket with each send, even as one
    // half of a pair.
    let unix_dgram = || -> Result<SeccompRule, String> {
        rule(vec![
            cond(0, SeccompCmpOp::Eq, unix)?,
            cond(1, SeccompCmpOp::MaskedEq(0xf), dgram)?,
        ])
    };
    match spec.sockets {
        Sockets::Any => {}
        Sockets::NoUnix => {
            add(
                &mut denied,
                libc::SYS_socket,
                vec![rule(vec![cond(0, SeccompCmpOp::Eq, unix)?])?],
            );
            add(&mut denied, libc::SYS_socketpair, vec![unix_dgram()?]);
        }
        Sockets::PairsOnly => {
            add(&mut denied, libc::SYS_socket, Vec::new());
            add(
                &mut denied,
                libc::SYS_socketpair,
                vec![rule(vec![cond(0, SeccompCmpOp::Ne, unix)?])?, unix_dgram()?],
            );
        }
    }
    // chmod family: a mode with the set-user-ID or the set-group-ID bit.
    let set_id_rule = |arg: u8| -> Result<Vec<SeccompRule>, String> {
        let bit = |b: libc::mode_t| -> Result<SeccompRule, String> {
            rule(vec![cond(
                arg,
                SeccompCmpOp::MaskedEq(u64::from(b)),
                u64::from(b),
            )?])
        };
        Ok(vec![bit(libc::S_ISUID)?, bit(libc::S_ISGID)?])
    };
    #[cfg(target_arch = "x86_64")]
    add(&mut denied, libc::SYS_chmod, set_id_rule(1)?);
    add(&mut denied, libc::SYS_fchmod, set_id_rule(1)?);
    add(&mut denied, libc::SYS_fchmodat, set_id_rule(2)?);
    add(&mut denied, SYS_FCHMODAT2, set_id_rule(2)?);
    out.push(compile(denied, libc::EACCES)?);

    // "Not supported": extended attribute writes (ACLs included).
    let mut unsupported: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in [
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
        SYS_SETXATTRAT,
        SYS_REMOVEXATTRAT,
    ] {
        add(&mut unsupported, nr, Vec::new());
    }
    out.push(compile(unsupported, libc::EOPNOTSUPP)?);

    // "Not implemented": io_uring, as on kernels built without it.
    let mut absent: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        add(&mut absent, nr, Vec::new());
    }
    out.push(compile(absent, libc::ENOSYS)?);
    Ok(out)
}

/// Installs the filters of `spec` on the calling thread (and what it execs). Sets
/// no-new-privileges, as a filter requires without `CAP_SYS_ADMIN`.
pub fn install(spec: FilterSpec) -> Result<(), String> {
    for program in programs(spec)? {
        seccompiler::apply_filter(&program)
            .map_err(|e| format!("cannot install the system-call filter: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_filters_compile_for_both_network_settings() {
        for sockets in [Sockets::Any, Sockets::NoUnix, Sockets::PairsOnly] {
            let programs = programs(FilterSpec { sockets }).unwrap();
            assert_eq!(programs.len(), 3);
            assert!(programs.iter().all(|p| !p.is_empty()));
        }
    }
}
