//! The `@deepseek-ai/dsh-session-persistence-jsonl` plugin: provides [`SessionFiles`] and
//! [`SessionWriters`], and writes every live session to its own log.
//!
//! Listeners (all unscoped, so sessions of every agent scope are persisted):
//! * `session/created` (emit, contained): a seeded or restored session writes
//!   `events[stored_len..]` at once (a fork's header, copied prefix and end-seed; a
//!   resumed session's new end-seed); a fresh session writes nothing until its first event.
//! * `session/event` (emit, contained): queues the event on the session's writer.
//! * `session/flush` (parallel): drains the session's writer; a write failure fails the
//!   flush (fails closed).
//! * `session/disposed` (emit, contained): final drain in the background, then the writer
//!   retires. A failure is logged.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use dsh_kernel::{BoxError, ConfigFieldError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_session::{
    AppendedEvent, Artifacts, Event, LiveSession, SessionAppended, SessionCreated, SessionDisposed,
    SessionFlush, SessionWriteFailed, WriteFailure, types,
};
use serde::Deserialize;
use tokio::runtime::Handle;

use crate::files::{ChunkPacking, SessionFiles};
use crate::fsio::Durability;
use crate::layout::Compression;
use crate::writer::{SessionWriter, WriteTiming, WriterStart};

/// The plugin's package name.
pub const PLUGIN_NAME: &str = "@deepseek-ai/dsh-session-persistence-jsonl";

/// Default batching window of background writes.
pub const DEFAULT_WRITE_BATCH_MAX_DELAY_MS: u64 = 200;

/// Largest accepted batching window (a 32-bit signed millisecond timer, as upstream).
pub const MAX_WRITE_BATCH_DELAY_MS: u64 = 2_147_483_647;

/// The JSONL session persistence plugin.
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonlPersistencePlugin;

/// The validated plugin configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct PersistenceConfig {
    pub root: PathBuf,
    pub compression: Compression,
    pub packing: ChunkPacking,
    pub timing: WriteTiming,
    pub durability: Durability,
    /// The format of new logs (0 or 4; default 4, upstream 0.2's).
    pub format_version: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConfig {
    root: String,
    #[serde(default)]
    compression: CompressionSetting,
    #[serde(default = "default_pack_chunks")]
    pack_chunks: bool,
    #[serde(default = "default_delay")]
    write_batch_max_delay_ms: u64,
    /// `fsync` (default) or `os`: see [`Durability`].
    #[serde(default)]
    durability: DurabilitySetting,
    /// 4 (default) or 0.
    #[serde(default)]
    format_version: Option<u64>,
    /// Accepted for config compatibility; this implementation keeps no prepared cache.
    #[serde(default)]
    #[allow(dead_code)]
    prepared_session_cache_size: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "lowercase")]
enum DurabilitySetting {
    #[default]
    Fsync,
    Os,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "lowercase")]
enum CompressionSetting {
    #[default]
    Zstd,
    None,
}

fn default_pack_chunks() -> bool {
    true
}

fn default_delay() -> u64 {
    DEFAULT_WRITE_BATCH_MAX_DELAY_MS
}

impl PersistenceConfig {
    /// Parses and validates a plugin row's config; an unknown key is refused, naming it.
    /// `writeBatchMaxDelayMs: 0` selects [`WriteTiming::EveryEvent`].
    pub fn from_plugin_config(config: &PluginConfig) -> Result<Self, ConfigFieldError> {
        let raw: RawConfig = config.parse()?;
        let field_error = |field: &str, message: &str| ConfigFieldError {
            source_file: config.source.clone(),
            row_id: config.row_id.clone(),
            field: field.to_string(),
            message: message.to_string(),
        };
        if raw.root.is_empty() {
            return Err(field_error("root", "must be a non-empty path"));
        }
        if raw.prepared_session_cache_size == Some(0) {
            return Err(field_error(
                "preparedSessionCacheSize",
                "must be at least 1",
            ));
        }
        let timing = match raw.write_batch_max_delay_ms {
            0 => WriteTiming::EveryEvent,
            ms if ms > MAX_WRITE_BATCH_DELAY_MS => {
                return Err(field_error(
                    "writeBatchMaxDelayMs",
                    "must be at most 2147483647",
                ));
            }
            ms => WriteTiming::Batched(Duration::from_millis(ms)),
        };
        Ok(Self {
            root: PathBuf::from(raw.root),
            compression: match raw.compression {
                CompressionSetting::Zstd => Compression::Zstd,
                CompressionSetting::None => Compression::None,
            },
            packing: if raw.pack_chunks {
                ChunkPacking::Packed
            } else {
                ChunkPacking::Unpacked
            },
            timing,
            durability: match raw.durability {
                DurabilitySetting::Fsync => Durability::Fsync,
                DurabilitySetting::Os => Durability::Os,
            },
            format_version: match raw.format_version {
                None => dsh_session::SESSION_FORMAT_V4,
                Some(v @ (0 | 4)) => v,
                Some(_) => {
                    return Err(field_error(
                        "formatVersion",
                        "must be 4 (upstream 0.2's format, the default) or 0 (0.1's)",
                    ));
                }
            },
        })
    }
}

impl Plugin for JsonlPersistencePlugin {
    fn name(&self) -> &'static str {
        PLUGIN_NAME
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "listConcurrency",
            "session listings read the stored headers one after another here",
        )]
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["session-persistence-jsonl"]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let config = PersistenceConfig::from_plugin_config(config)?;
        let runtime = Handle::try_current()
            .map_err(|_| format!("{PLUGIN_NAME} must be loaded inside a tokio runtime (it runs timers and blocking writes)"))?;
        let files = Arc::new(
            SessionFiles::new(&config.root, config.compression, config.packing)
                .with_durability(config.durability)
                .with_format(config.format_version),
        );
        let writers = Arc::new(SessionWriters::new(files.clone(), config.timing, runtime));
        ctx.provide(Arc::new(Artifacts(files.clone())))?;
        ctx.provide(files)?;
        ctx.provide(writers.clone())?;

        let w = writers.clone();
        ctx.on_emit::<SessionCreated>(ListenOptions::GLOBAL, move |session| {
            w.on_created(session);
            Ok(())
        })?;
        let w = writers.clone();
        ctx.on_emit::<SessionAppended>(ListenOptions::GLOBAL, move |appended: &AppendedEvent| {
            w.on_appended(&appended.session, &appended.event);
            Ok(())
        })?;
        let w = writers.clone();
        ctx.on_parallel::<SessionFlush>(ListenOptions::GLOBAL, move |request| {
            let writer = w.writer_for(&request.session);
            let through = request.through;
            Box::pin(async move {
                match through {
                    Some(seq) => writer.flush_through(seq).await,
                    None => writer.flush().await,
                }
                .map_err(BoxError::from)
            })
        })?;
        let w = writers.clone();
        ctx.on_emit::<SessionDisposed>(ListenOptions::GLOBAL, move |session| {
            w.on_disposed(session);
            Ok(())
        })?;
        // Unloading the plugin still gets queued events to disk (best effort).
        let w = writers;
        ctx.effect("drain session writers", move || w.drain_all_in_background())?;
        Ok(())
    }
}

/// The live writers, one per session id (provided as a service so hosts can flush
/// everything before exiting).
pub struct SessionWriters {
    files: Arc<SessionFiles>,
    timing: WriteTiming,
    runtime: Handle,
    registry: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    live: HashMap<String, SessionWriter>,
    /// Durable lengths of retired writers, so a late append or flush of a disposed session
    /// continues its log instead of trying to create it again.
    retired: HashMap<String, u64>,
}

impl std::fmt::Debug for SessionWriters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWriters")
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

impl SessionWriters {
    pub fn new(files: Arc<SessionFiles>, timing: WriteTiming, runtime: Handle) -> Self {
        Self {
            files,
            timing,
            runtime,
            registry: Mutex::new(Registry::default()),
        }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn files(&self) -> &Arc<SessionFiles> {
        &self.files
    }

    /// The writer of a session id, if it has one.
    pub fn get(&self, id: &str) -> Option<SessionWriter> {
        self.registry().live.get(id).cloned()
    }

    /// Flushes every writer; returns the first failure after all settled.
    pub async fn flush_all(&self) -> Result<(), crate::PersistenceError> {
        let writers: Vec<SessionWriter> = self.registry().live.values().cloned().collect();
        let mut first = Ok(());
        for w in writers {
            if let Err(e) = w.flush().await
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    fn new_writer(
        &self,
        session: &Arc<LiveSession>,
        durable: u64,
    ) -> (SessionWriter, Vec<Arc<Event>>) {
        let stored_len = session.stored_len().max(durable);
        // A restored session has a log even when it holds no events (cut to its header):
        // it is appended to, never created again.
        let start = match stored_len {
            0 if !session.is_restored() => WriterStart::Fresh,
            n => WriterStart::Stored { stored_len: n },
        };
        let writer = SessionWriter::new(
            self.files.clone(),
            session.header(),
            start,
            self.timing,
            self.runtime.clone(),
        );
        let weak = Arc::downgrade(session);
        writer.on_failure(Arc::new(move |error| {
            if let Some(session) = weak.upgrade() {
                session.context().emit::<SessionWriteFailed>(&WriteFailure {
                    session: session.clone(),
                    message: error.to_string(),
                });
            }
        }));
        (writer, session.events_from(stored_len))
    }

    /// Installs a fresh writer for `session` (a previous writer of the id goes first).
    fn install(&self, session: &Arc<LiveSession>) -> (SessionWriter, Vec<Arc<Event>>) {
        let (writer, backlog) = self.new_writer(session, 0);
        let id = writer.header().id.clone();
        let previous = {
            let mut registry = self.registry();
            registry.retired.remove(&id);
            registry.live.insert(id, writer.clone())
        };
        if let Some(previous) = previous {
            writer.follow(previous);
        }
        (writer, backlog)
    }

    /// The writer of `session`, created on first use (a session that went live before the
    /// plugin loaded): then everything after its stored prefix is queued.
    pub fn writer_for(&self, session: &Arc<LiveSession>) -> SessionWriter {
        let id = session.id();
        let retired = {
            let registry = self.registry();
            if let Some(w) = registry.live.get(&id) {
                return w.clone();
            }
            registry.retired.get(&id).copied().unwrap_or(0)
        };
        let (writer, backlog) = self.new_writer(session, retired);
        let writer = self.registry().live.entry(id).or_insert(writer).clone();
        writer.enqueue(backlog);
        writer
    }

    fn on_created(&self, session: &Arc<LiveSession>) {
        let (writer, backlog) = self.install(session);
        if backlog.is_empty() {
            return;
        }
        writer.enqueue(backlog);
        if let WriteTiming::Batched(_) = self.timing {
            // Seeded and restored sessions are persisted at once, not after the window.
            self.runtime.spawn(async move {
                if let Err(e) = writer.flush().await {
                    tracing::warn!(session = %writer.header().id, "cannot persist the seed of a new session: {e}");
                }
            });
        }
    }

    fn on_appended(&self, session: &Arc<LiveSession>, event: &Arc<Event>) {
        let writer = self.writer_for(session);
        let cursor = writer.cursor();
        if event.seq > cursor {
            // Events this writer never saw (it was created late): queue them first.
            let missing = session
                .events_from(cursor)
                .into_iter()
                .filter(|e| e.seq < event.seq);
            writer.enqueue(missing);
        }
        writer.enqueue([event.clone()]);
        if event.surface_op.is_some() && !event.is(types::ASSISTANT_MESSAGE) {
            // What the model is shown next (a tool result, a user message) must be durable
            // before the request that carries it: writing it now overlaps the write with the
            // rest of the step. (An assistant message is followed by its calls, which the
            // tool barrier writes with it.)
            writer.write_ahead();
        }
    }

    fn on_disposed(self: &Arc<Self>, session: &Arc<LiveSession>) {
        let id = session.id();
        let Some(writer) = self.get(&id) else { return };
        if writer.is_idle() {
            // Nothing queued and nothing being written: retire now. A write in flight has
            // already taken the queue, so an empty queue alone is not enough: retiring then
            // would record a short durable length, fsync before the write lands and release
            // the log while it is still being appended to.
            self.retire(&id, &writer);
            return;
        }
        let writers = self.clone();
        self.runtime.spawn(async move {
            if let Err(e) = writer.flush().await {
                tracing::error!(
                    session = %writer.header().id,
                    pending = writer.pending_len(),
                    "final write of a disposed session failed; its pending events are lost: {e}"
                );
            }
            writers.retire(&id, &writer);
        });
    }

    /// Removes `writer` from the registry unless a newer writer of the id replaced it.
    fn retire(&self, id: &str, writer: &SessionWriter) {
        let mut registry = self.registry();
        if registry
            .live
            .get(id)
            .is_some_and(|current| current.same_as(writer))
        {
            registry.live.remove(id);
            registry
                .retired
                .insert(id.to_string(), writer.durable_len());
            drop(registry);
            if self.files.durability() == Durability::Os {
                // Appends only reached the kernel: make the closed log power-loss safe.
                if let Err(e) = self.files.sync(writer.header()) {
                    tracing::warn!(session = %id, "cannot fsync a closed session log: {e}");
                }
            }
            self.files.release(id);
        }
    }

    fn drain_all_in_background(&self) {
        let writers: Vec<SessionWriter> = self.registry().live.drain().map(|(_, w)| w).collect();
        if writers.is_empty() {
            return;
        }
        self.runtime.spawn(async move {
            for w in writers {
                if let Err(e) = w.flush().await {
                    tracing::error!(session = %w.header().id, "final write at plugin unload failed: {e}");
                }
            }
        });
    }
}
