//! Running dsh for a team (`dsh-team`): sessions kept in PostgreSQL ([`dsh_store_pg`]), run
//! by any number of `dsh worker` processes, each turn under a fenced lease.
//!
//! * [`store_row`]: the `dsh-team-session-store` row a worker adds to each turn it runs. It
//!   records the session's events in the store as they are appended, makes every tool wait
//!   until the store has what came before it, and ends the process the moment the lease may
//!   be lost.
//! * [`worker`]: the claim loop. It materializes a claimed session as a local log (where the
//!   usual crash repair closes a turn a dead worker left open), runs one turn of it in a child
//!   `dsh headless`, and releases the lease.
//! * [`serve`]: `dsh serve`, a stateless HTTP gateway: accounts by bearer token, sessions
//!   and input, and each session's events as server-sent events resumed by `Last-Event-ID`.
//! * [`transport`]: NATS JetStream: wake-ups for a pool's workers and each session's live
//!   events, both hints next to PostgreSQL, which stays the only record.
//! * [`cli`]: `dsh worker`, `dsh serve` and `dsh team` (migrate, submit, events, show, user).
//!
//! Invariants: a session's stored seqs are contiguous from 1 and are the local log's seqs
//! plus one; a turn's events reach the store only under the lease its worker claimed (one
//! transaction per batch, checked against owner, epoch, expiry and head); queued input is
//! marked consumed in the same transaction that records it, so it is run exactly once; no
//! tool body starts before the events preceding it are committed.

#![allow(clippy::print_stdout, clippy::print_stderr)]

pub mod auth;
pub mod cli;
pub mod docker;
pub mod oidc;
pub mod route;
pub mod serve;
pub mod store_row;
pub mod transport;
pub mod worker;

pub use store_row::{FENCED_EXIT, PLUGIN_NAME, TeamSessionStorePlugin};

/// `name` as one path segment: characters other than ASCII letters, digits, `-`, `_` and
/// `.` become `_`, and `.`/`..` are not left alone.
pub(crate) fn safe_segment(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s == "." || s == ".." {
        format!("_{s}")
    } else {
        s
    }
}
