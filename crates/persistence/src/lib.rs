//! The JSONL session store (upstream `session-persistence-jsonl`).
//!
//! * [`layout`] — where logs live: `<root>/--<project key>--/<escaped id>/session.jsonl[.zstd]`.
//! * [`SessionFiles`] — create/append, load with durable crash repair, inspect, list, find,
//!   raw reads. Blocking; async callers use `spawn_blocking`.
//! * [`SessionWriter`] — the write-behind queue of one live session (batching timer,
//!   flush barrier, failed writes keep their events).
//! * [`JsonlPersistencePlugin`] — wires writers to the session store's events and provides
//!   [`SessionFiles`] and [`SessionWriters`] as services.
//!
//! Invariants: nothing is on disk before a session's first event; a log is published once
//! (temp file + fsync + `link()`, never replacing a file) and only ever appended to after
//! that; every append is fsynced or rolled back; a load never drops anything before the
//! last committed `turn/end`.

mod discovery;
mod error;
mod files;
mod frames;
mod fsio;
pub mod layout;
mod lock;
mod manage;
mod plugin;
mod scan;
mod upload;
mod writer;

pub use error::PersistenceError;
pub use files::{ChunkPacking, Loaded, Repair, SessionFiles};
pub use frames::{DEFAULT_MAX_FRAME_BYTES, InflateLimits, MAX_FRAME_BYTES_ENV, MAX_LOG_BYTES_ENV};
pub use fsio::Durability;
pub use layout::{Compression, encode_segment, project_key};
pub use lock::LOCK_FILE;
pub use manage::{SessionSummary, fork_cut};
pub use plugin::{
    DEFAULT_WRITE_BATCH_MAX_DELAY_MS, JsonlPersistencePlugin, MAX_WRITE_BATCH_DELAY_MS,
    PLUGIN_NAME, PersistenceConfig, SessionWriters,
};
pub use upload::{DELIVERY_ACCEPTED, SessionLogUploadPlugin, UPLOAD_PLUGIN_NAME};
pub use writer::{SessionWriter, WriteTiming, WriterStart};

/// Entry points for the fuzz targets (`fuzz/`): the byte-level readers without any IO.
#[doc(hidden)]
pub mod fuzzing {
    use crate::frames::{Budget, InflateLimits};
    use crate::layout::Compression;

    /// Small limits, so a fuzzed bomb is refused after little work.
    const LIMITS: InflateLimits = InflateLimits {
        frame: 1 << 20,
        log: Some(4 << 20),
    };

    /// Scans a log's bytes as the loader does; returns the number of events it kept.
    pub fn scan_log(bytes: &[u8], zstd: bool) -> Result<usize, String> {
        let compression = if zstd {
            Compression::Zstd
        } else {
            Compression::None
        };
        crate::scan::scan(bytes, compression, LIMITS)
            .map(|s| s.events.len())
            .map_err(|e| e.to_string())
    }

    /// Scans Zstandard frame boundaries, decodes them within the plaintext budget, and
    /// probes for a valid frame after damage and salvages a torn tail as the loader does.
    pub fn frames(bytes: &[u8]) -> Result<usize, String> {
        let mut budget = Budget::for_log(bytes.len(), LIMITS);
        let (frames, torn) = match crate::frames::scan_frames(bytes, usize::MAX) {
            Ok(scan) => (scan.frames, scan.torn_start),
            Err(damage) => (damage.frames, Some(damage.frame_start)),
        };
        let mut out = Vec::new();
        crate::frames::decode_bounded(bytes, &frames, &mut out, &mut budget)
            .map_err(|e| format!("{e:?}"))?;
        if let Some(at) = torn {
            let _ = crate::frames::valid_frame_follows(&bytes[at..], at, &mut budget);
            let _ = crate::frames::salvage_torn(&bytes[at..], at, &mut budget);
        }
        Ok(out.len())
    }
}
