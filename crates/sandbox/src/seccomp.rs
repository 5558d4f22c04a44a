//! The system-call filter that runs beside Landlock (and inside bubblewrap): it closes what
//! neither file rules nor a network namespace cover.
//!
//! * **Sockets** (only when the network is denied): no socket of any family but `AF_UNIX`
//!   (so no MPTCP, UDP, raw, netlink or SCTP egress, which Landlock's TCP rules do not
//!   see), no datagram Unix sockets, and no `connect`/`bind` or addressed `sendto`: a
//!   confined process keeps only anonymous socket pairs, so no pathname or abstract Unix
//!   socket on the host (a database, the Docker daemon, an SSH agent) is reachable.
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

/// What the filter covers for one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterSpec {
    /// Deny every socket except anonymous `AF_UNIX` stream/seqpacket pairs.
    pub deny_network: bool,
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

fn qword(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value)
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
    if spec.deny_network {
        let unix = libc::AF_UNIX as u64;
        let dgram = libc::SOCK_DGRAM as u64;
        // socket(): any family but AF_UNIX, or an AF_UNIX datagram socket (it can send to
        // any pathname socket without connect).
        let socket_rules = vec![
            rule(vec![cond(0, SeccompCmpOp::Ne, unix)?])?,
            rule(vec![
                cond(0, SeccompCmpOp::Eq, unix)?,
                cond(1, SeccompCmpOp::MaskedEq(0xf), dgram)?,
            ])?,
        ];
        add(&mut denied, libc::SYS_socket, socket_rules.clone());
        // socketpair(): the same rule (a datagram pair can still address other sockets).
        add(&mut denied, libc::SYS_socketpair, socket_rules);
        add(&mut denied, libc::SYS_connect, Vec::new());
        add(&mut denied, libc::SYS_bind, Vec::new());
        // sendto() with a destination (plain send() passes a null address).
        add(
            &mut denied,
            libc::SYS_sendto,
            vec![rule(vec![qword(4, SeccompCmpOp::Ne, 0)?])?],
        );
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
        for deny_network in [true, false] {
            let programs = programs(FilterSpec { deny_network }).unwrap();
            assert_eq!(programs.len(), 3);
            assert!(programs.iter().all(|p| !p.is_empty()));
        }
    }
}
