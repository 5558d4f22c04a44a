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
mod plugin;
mod scan;
mod writer;

pub use error::PersistenceError;
pub use files::{ChunkPacking, Loaded, Repair, SessionFiles};
pub use fsio::Durability;
pub use layout::{Compression, encode_segment, project_key};
pub use lock::LOCK_FILE;
pub use plugin::{
    DEFAULT_WRITE_BATCH_MAX_DELAY_MS, JsonlPersistencePlugin, MAX_WRITE_BATCH_DELAY_MS,
    PLUGIN_NAME, PersistenceConfig, SessionWriters,
};
pub use writer::{SessionWriter, WriteTiming, WriterStart};
