//! [`SessionFiles`]: the session logs under one root — create, append, load (with durable
//! crash repair), inspect, list, find and raw reads. Every method blocks on file IO; async
//! code calls them through `tokio::task::spawn_blocking`.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::collections::HashMap;
use std::sync::Mutex;

use dsh_session::v4::{V4Encoder, header_line_v4};
use dsh_session::{
    Event, SESSION_FORMAT_V4, SessionHeader, encode_batch, header_line, interrupted_turn_closers,
};

use crate::error::PersistenceError;
use crate::frames::{self, InflateLimits};
use crate::fsio::{self, Durability};
use crate::layout::{self, Compression};
use crate::lock::HeldLocks;
use crate::scan::{self, ScannedLog};

/// Whether runs of ≥ 3 stream deltas are written as packed chunk rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChunkPacking {
    /// Pack delta runs into `text-chunks` / `reasoning-chunks` / `tool-call-chunks` rows
    /// (upstream's default).
    Packed,
    /// One line per event.
    Unpacked,
}

/// A stored session read back.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    /// The log file.
    pub path: PathBuf,
    pub header: SessionHeader,
    /// The balanced event log: stored events, then any repair events.
    pub events: Vec<Arc<Event>>,
    /// How many leading `events` are durably stored. After [`SessionFiles::load`] that is
    /// all of them; after an inspection the in-memory repair events are not.
    pub stored_len: u64,
    /// The repair that was made ([`SessionFiles::load`]) or that a load would make
    /// (inspections); `None` for a clean log.
    pub repair: Option<Repair>,
}

/// A crash repair of a log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    /// The file length before the repair.
    pub file_len: u64,
    /// The length a torn or damaged tail was cut to.
    pub truncated_to: Option<u64>,
    /// Why the cut tail was not accepted (a merely torn tail has no issue).
    pub tail_issue: Option<String>,
    /// Complete records salvaged from a torn zstd frame (re-appended after the cut).
    pub recovered: usize,
    /// Synthetic closers (tool results, `step/end`, `turn/end {interrupted}`).
    pub closers: usize,
}

impl dsh_session::SessionArtifacts for SessionFiles {
    /// The session's own directory (beside its log).
    fn artifact_dir(&self, header: &SessionHeader) -> Option<PathBuf> {
        self.path_for(header)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
    }
}

/// How a log is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RepairMode {
    /// Cut the tail and append closers durably, then re-read the repaired file.
    Durable,
    /// Keep the file untouched; closers exist only in the returned events.
    InMemory,
}

/// How a live session's log is written.
#[derive(Clone, Debug)]
enum Encoding {
    V0,
    V4(V4Encoder),
}

/// A log this process appends to: where it is and how its next rows are encoded.
#[derive(Clone, Debug)]
struct OpenLog {
    path: PathBuf,
    encoding: Encoding,
}

/// The session logs under one root, in one encoding.
#[derive(Clone, Debug)]
pub struct SessionFiles {
    pub(crate) root: PathBuf,
    pub(crate) compression: Compression,
    packing: ChunkPacking,
    /// Writer locks this process holds (shared by clones).
    locks: HeldLocks,
    durability: Durability,
    /// The format new logs are written in (and v0 logs migrate to when appended): 0 or 4.
    format: u64,
    /// Logs this process appends to, by session id (shared by clones).
    open_logs: Arc<Mutex<HashMap<String, OpenLog>>>,
    /// How far a compressed log may inflate when read (from the environment, unless set;
    /// an invalid setting fails every read with its message).
    inflate: Result<InflateLimits, String>,
}

impl SessionFiles {
    /// A store rooted at `root` (made absolute against the current directory once, so a
    /// later directory change cannot split sessions across roots).
    pub fn new(root: impl AsRef<Path>, compression: Compression, packing: ChunkPacking) -> Self {
        let root = root.as_ref();
        let root = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        Self {
            root,
            compression,
            packing,
            locks: HeldLocks::default(),
            durability: Durability::Fsync,
            format: SESSION_FORMAT_V4,
            open_logs: Arc::new(Mutex::new(HashMap::new())),
            inflate: InflateLimits::from_env(),
        }
    }

    /// The same store reading compressed logs within `limits` (instead of the limits the
    /// environment sets).
    pub fn with_inflate_limits(mut self, limits: InflateLimits) -> Self {
        self.inflate = Ok(limits);
        self
    }

    /// How far a compressed log may inflate when read; an invalid setting is an error.
    pub fn inflate_limits(&self) -> Result<InflateLimits, PersistenceError> {
        self.inflate.clone().map_err(PersistenceError::Setting)
    }

    /// [`scan::scan`] of `bytes` (read from `path`) within this store's limits.
    pub(crate) fn scan(
        &self,
        path: &Path,
        bytes: &[u8],
        compression: Compression,
    ) -> Result<ScannedLog, PersistenceError> {
        scan::scan(bytes, compression, self.inflate_limits()?)
            .map_err(|e| PersistenceError::from_storage(path, e))
    }

    /// The same store writing new logs in format `version` (0 or 4).
    pub fn with_format(mut self, version: u64) -> Self {
        self.format = version;
        self
    }

    /// The format new logs are written in.
    pub fn format(&self) -> u64 {
        self.format
    }

    fn open_logs(&self) -> std::sync::MutexGuard<'_, HashMap<String, OpenLog>> {
        self.open_logs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn remember(&self, id: &str, path: &Path, encoding: Encoding) {
        self.open_logs().insert(
            id.to_string(),
            OpenLog {
                path: path.to_path_buf(),
                encoding,
            },
        );
    }

    /// The same store with another durability policy for appends.
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// fsyncs a session's log (a no-op without one). Under [`Durability::Os`] this is what
    /// makes a closed session power-loss safe.
    pub fn sync(&self, header: &SessionHeader) -> Result<(), PersistenceError> {
        let path = self.path_for(header)?;
        match fsio::exists(&path)? {
            true => fsio::sync_file(&path),
            false => Ok(()),
        }
    }

    /// Releases the writer lock of session `id` (its writer retired).
    pub fn release(&self, id: &str) {
        self.open_logs().remove(id);
        self.locks.release(id);
    }

    /// Whether this process holds the writer lock of session `id`.
    pub fn holds_lock(&self, id: &str) -> bool {
        self.locks.holds(id)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn compression(&self) -> Compression {
        self.compression
    }

    pub fn packing(&self) -> ChunkPacking {
        self.packing
    }

    /// The log path of a session: the log this process has open for it, else where a new
    /// log of it goes (no IO).
    pub fn path_for(&self, header: &SessionHeader) -> Result<PathBuf, PersistenceError> {
        let dir = layout::session_dir(&self.root, header.cwd.as_deref(), &header.id)?;
        if let Some(open) = self.open_logs().get(&header.id)
            && open.path.parent() == Some(dir.as_path())
        {
            return Ok(open.path.clone());
        }
        layout::log_path(
            &self.root,
            header.cwd.as_deref(),
            &header.id,
            self.format,
            self.compression,
        )
    }

    // ------------------------------------------------------------------ writing

    /// Starts the log of a new session. Refuses an id that already has a log anywhere under
    /// the root. With no events nothing is written (logs materialize lazily); otherwise the
    /// header and `events` are published atomically as the new file.
    pub fn create(
        &self,
        header: &SessionHeader,
        events: &[Arc<Event>],
    ) -> Result<PathBuf, PersistenceError> {
        let path = layout::log_path(
            &self.root,
            header.cwd.as_deref(),
            &header.id,
            self.format,
            self.compression,
        )?;
        if let Some(existing) = self.find(&header.id)? {
            return Err(PersistenceError::AlreadyPersisted {
                id: header.id.clone(),
                path: existing,
            });
        }
        if !events.is_empty() {
            self.materialize(header, &path, events)?;
        }
        Ok(path)
    }

    /// Appends one durable batch to an existing log (one zstd frame, or lines + fsync).
    /// A failed append is rolled back to the previous length.
    pub fn append(
        &self,
        header: &SessionHeader,
        events: &[Arc<Event>],
    ) -> Result<(), PersistenceError> {
        if events.is_empty() {
            return Ok(());
        }
        let open = self.open_log(header)?;
        let mut encoding = open.encoding;
        let result = self.append_encoded(&open.path, self.compression, events, &mut encoding);
        // A failed append rolled the encoder back with the file; keep it either way.
        self.remember(&header.id, &open.path, encoding);
        result
    }

    /// The open log of a session, found (and its v4 state rebuilt) on first use.
    fn open_log(&self, header: &SessionHeader) -> Result<OpenLog, PersistenceError> {
        if let Some(open) = self.open_logs().get(&header.id) {
            return Ok(open.clone());
        }
        let path = match self.find(&header.id)? {
            Some(p) => p,
            None => self.path_for(header)?,
        };
        let encoding = self.encoding_of_file(&path)?;
        Ok(OpenLog { path, encoding })
    }

    /// How to continue the stored log at `path`: a v4 log's state is rebuilt by reading it.
    fn encoding_of_file(&self, path: &Path) -> Result<Encoding, PersistenceError> {
        let bytes = fsio::read_stable(path)?;
        let scanned = self.scan(path, &bytes, detect(path, &bytes))?;
        Ok(match scanned.v4 {
            Some(resume) => Encoding::V4(resume.encoder),
            None => Encoding::V0,
        })
    }

    fn materialize(
        &self,
        header: &SessionHeader,
        path: &Path,
        events: &[Arc<Event>],
    ) -> Result<(), PersistenceError> {
        let session_dir = path.parent().unwrap_or(&self.root);
        if let Some((_, opposite)) =
            layout::generations(session_dir, self.compression.opposite()).pop()
        {
            return Err(self.encoding_mismatch(opposite));
        }
        let project_dir = session_dir.parent().unwrap_or(&self.root);
        fsio::ensure_private_dir(&self.root)?;
        fsio::ensure_private_dir(project_dir)?;
        fsio::ensure_private_dir(session_dir)?;
        self.locks.acquire(&header.id, session_dir)?;
        crate::lock::remove_temp_files_locked(session_dir);
        if fsio::exists(path)? {
            return Err(PersistenceError::AlreadyPersisted {
                id: header.id.clone(),
                path: path.to_path_buf(),
            });
        }
        let (head, body, encoding) = if self.format == SESSION_FORMAT_V4 {
            let mut encoder = V4Encoder::new(&header.id, header.seed_length);
            let mut body = String::new();
            encoder
                .encode(events, &mut body)
                .map_err(|e| PersistenceError::corrupt(path, e.to_string()))?;
            (header_line_v4(header), body, Encoding::V4(encoder))
        } else {
            (header_line(header), self.encode_text(events), Encoding::V0)
        };
        self.publish(&header.id, path, &head, &body)?;
        self.remember(&header.id, path, encoding);
        Ok(())
    }

    /// Publishes a new log file: the header (alone in its zstd frame) and the first batch.
    fn publish(
        &self,
        id: &str,
        path: &Path,
        head: &str,
        body: &str,
    ) -> Result<(), PersistenceError> {
        let content = match self.compression {
            Compression::None => [head.as_bytes(), body.as_bytes()].concat(),
            Compression::Zstd => {
                let compress = |text: &str| {
                    frames::compress_frame(text.as_bytes())
                        .map_err(|e| PersistenceError::io("cannot compress batch for", path, e))
                };
                let mut content = compress(head)?;
                if !body.is_empty() {
                    content.extend(compress(body)?);
                }
                content
            }
        };
        fsio::publish_new_file(id, path, &content)
    }

    fn encode_text(&self, events: &[Arc<Event>]) -> String {
        encode_batch(events, self.packing == ChunkPacking::Packed)
    }

    /// Appends `events` to the log at `path` in its encoding (one zstd frame, or lines),
    /// durably. A v4 batch of stream chunks alone writes nothing yet (they belong to the
    /// message that follows); a failed write rolls the encoder back.
    fn append_encoded(
        &self,
        path: &Path,
        compression: Compression,
        events: &[Arc<Event>],
        encoding: &mut Encoding,
    ) -> Result<(), PersistenceError> {
        let (text, checkpoint) = match encoding {
            Encoding::V0 => (self.encode_text(events), None),
            Encoding::V4(encoder) => {
                let checkpoint = encoder.checkpoint();
                let mut text = String::new();
                encoder
                    .encode(events, &mut text)
                    .map_err(|e| PersistenceError::corrupt(path, e.to_string()))?;
                (text, Some(checkpoint))
            }
        };
        if text.is_empty() {
            return Ok(());
        }
        let content = match compression {
            Compression::None => Ok(text.into_bytes()),
            Compression::Zstd => frames::compress_frame(text.as_bytes())
                .map_err(|e| PersistenceError::io("cannot compress batch for", path, e)),
        };
        let written = content.and_then(|c| fsio::append_durably(path, &c, self.durability));
        if written.is_err()
            && let (Encoding::V4(encoder), Some(cp)) = (encoding, checkpoint)
        {
            encoder.rollback(cp);
        }
        written
    }

    // ------------------------------------------------------------------ reading

    /// Loads a stored session for resuming: a torn or damaged tail (after the last
    /// committed `turn/end`) is cut, whole records salvaged from a torn zstd frame are
    /// re-appended, and an interrupted turn is closed — all durably, before returning.
    ///
    /// The session's writer lock is taken first (and kept: the caller is about to append):
    /// a session another process has live is refused with [`PersistenceError::Locked`].
    pub fn load(&self, id: &str) -> Result<Loaded, PersistenceError> {
        let path = self.require(id)?;
        let dir = path.parent().unwrap_or(&self.root);
        self.locks.acquire(id, dir)?;
        crate::lock::remove_temp_files_locked(dir);
        let loaded = self.open(&path, Some(self.compression), Some(id), RepairMode::Durable);
        if loaded.is_err() {
            self.locks.release(id);
        }
        loaded
    }

    /// Like [`SessionFiles::load`], but the repair happens only in the returned events; the
    /// file is not touched.
    pub fn inspect(&self, id: &str) -> Result<Loaded, PersistenceError> {
        let path = self.require(id)?;
        self.open(
            &path,
            Some(self.compression),
            Some(id),
            RepairMode::InMemory,
        )
    }

    /// Inspects any log file by path, plain or zstd whatever this store's encoding, with
    /// the repair in memory only. No identity check: the file may live anywhere.
    pub fn inspect_file(&self, path: &Path) -> Result<Loaded, PersistenceError> {
        self.open(path, None, None, RepairMode::InMemory)
    }

    /// The decompressed JSONL text of a session's log, as stored. A torn zstd frame is
    /// omitted; a plain log is returned whole (a torn fragment included).
    pub fn read_raw(&self, id: &str) -> Result<String, PersistenceError> {
        let path = self.require(id)?;
        let text = self.read_raw_as(&path, Some(self.compression))?;
        let first = text.split('\n').next().unwrap_or_default();
        match scan::header_of(first.as_bytes()) {
            Ok(header) if header.id == id => Ok(text),
            _ => Err(PersistenceError::corrupt(&path, "invalid header line")),
        }
    }

    /// [`SessionFiles::read_raw`] of any log file (plain or zstd, detected).
    pub fn read_raw_file(&self, path: &Path) -> Result<String, PersistenceError> {
        self.read_raw_as(path, None)
    }

    fn read_raw_as(
        &self,
        path: &Path,
        compression: Option<Compression>,
    ) -> Result<String, PersistenceError> {
        let bytes = fsio::read_stable(path)?;
        match compression.unwrap_or_else(|| detect(path, &bytes)) {
            Compression::None => Ok(String::from_utf8_lossy(&bytes).into_owned()),
            Compression::Zstd => {
                let mut budget = frames::Budget::for_log(bytes.len(), self.inflate_limits()?);
                let message = |e: frames::DecodeError| match e {
                    frames::DecodeError::Invalid { message, .. }
                    | frames::DecodeError::TooLarge { message } => message,
                };
                let scan = match frames::scan_frames(&bytes, usize::MAX) {
                    Ok(scan) => scan.frames,
                    Err(d) => {
                        match frames::valid_frame_follows(
                            &bytes[d.frame_start..],
                            d.frame_start,
                            &mut budget,
                        ) {
                            Ok(None) => d.frames,
                            Ok(Some(_)) => return Err(PersistenceError::corrupt(path, d.message)),
                            Err(e) => return Err(PersistenceError::corrupt(path, message(e))),
                        }
                    }
                };
                if scan.is_empty() {
                    return Err(PersistenceError::corrupt(
                        path,
                        "empty or header-less Zstandard session log",
                    ));
                }
                let mut plain = Vec::new();
                frames::decode_bounded(&bytes, &scan, &mut plain, &mut budget)
                    .map_err(|e| PersistenceError::corrupt(path, message(e)))?;
                Ok(String::from_utf8_lossy(&plain).into_owned())
            }
        }
    }

    fn require(&self, id: &str) -> Result<PathBuf, PersistenceError> {
        self.find(id)?.ok_or_else(|| PersistenceError::NotFound {
            id: id.to_string(),
            root: self.root.clone(),
        })
    }

    fn open(
        &self,
        path: &Path,
        compression: Option<Compression>,
        expected_id: Option<&str>,
        mode: RepairMode,
    ) -> Result<Loaded, PersistenceError> {
        let bytes = fsio::read_stable(path)?;
        let compression = compression.unwrap_or_else(|| detect(path, &bytes));
        let file_len = bytes.len() as u64;
        let scanned = self.scan(path, &bytes, compression)?;
        drop(bytes);
        crate::discovery::check_generation(path, &scanned.header, compression)?;
        if let Some(id) = expected_id {
            self.check_identity(path, &scanned.header, id)?;
        }
        let closers: Vec<Arc<Event>> = interrupted_turn_closers(&scanned.events)
            .into_iter()
            .map(Arc::new)
            .collect();
        let repair = (scanned.truncate_to.is_some() || !closers.is_empty()).then(|| Repair {
            file_len,
            truncated_to: scanned.truncate_to,
            tail_issue: scanned.tail_issue.clone(),
            recovered: scanned.recovered().len(),
            closers: closers.len(),
        });
        if mode == RepairMode::Durable && scanned.v4.is_none() && self.format == SESSION_FORMAT_V4 {
            return self.migrate(path, scanned, closers, repair);
        }
        let Some(repair) = repair else {
            let stored_len = scanned.events.len() as u64;
            if mode == RepairMode::Durable {
                let encoding = match scanned.v4 {
                    Some(resume) => Encoding::V4(resume.encoder),
                    None => Encoding::V0,
                };
                self.remember(&scanned.header.id, path, encoding);
            }
            return Ok(Loaded {
                path: path.to_path_buf(),
                header: scanned.header,
                events: scanned.events,
                stored_len,
                repair: None,
            });
        };
        match mode {
            RepairMode::InMemory => {
                let ScannedLog {
                    header,
                    mut events,
                    intact,
                    ..
                } = scanned;
                events.extend(closers);
                Ok(Loaded {
                    path: path.to_path_buf(),
                    header,
                    events,
                    stored_len: intact as u64,
                    repair: Some(repair),
                })
            }
            RepairMode::Durable => {
                if let Some(len) = scanned.truncate_to {
                    fsio::truncate_durably(path, len)?;
                }
                let batch: Vec<Arc<Event>> =
                    scanned.recovered().iter().cloned().chain(closers).collect();
                if !batch.is_empty() {
                    // A v4 log continues from what is stored now (after the cut).
                    let mut encoding = match scanned.v4 {
                        Some(_) => self.encoding_of_file(path)?,
                        None => Encoding::V0,
                    };
                    self.append_encoded(path, compression, &batch, &mut encoding)?;
                }
                tracing::warn!(
                    path = %path.display(),
                    cut_to = ?repair.truncated_to,
                    issue = repair.tail_issue.as_deref().unwrap_or("torn tail"),
                    recovered = repair.recovered,
                    closers = repair.closers,
                    "repaired session log after an interrupted write"
                );
                // Read the repaired file back: what we return is exactly what is stored.
                let again = self.scan(path, &fsio::read_stable(path)?, compression)?;
                if again.truncate_to.is_some()
                    || !interrupted_turn_closers(&again.events).is_empty()
                {
                    return Err(PersistenceError::corrupt(
                        path,
                        "the log is still unbalanced after its crash repair",
                    ));
                }
                let encoding = match again.v4 {
                    Some(resume) => Encoding::V4(resume.encoder),
                    None => Encoding::V0,
                };
                self.remember(&again.header.id, path, encoding);
                let stored_len = again.events.len() as u64;
                Ok(Loaded {
                    path: path.to_path_buf(),
                    header: again.header,
                    events: again.events,
                    stored_len,
                    repair: Some(repair),
                })
            }
        }
    }

    /// Opens a v0 log for appending when new logs are v4 (upstream 0.2's migration): the
    /// repaired history is written as a new `session.v4` log beside it, which is appended
    /// to from now on. The v0 file is never modified (its repair happens in memory).
    fn migrate(
        &self,
        v0_path: &Path,
        scanned: ScannedLog,
        closers: Vec<Arc<Event>>,
        repair: Option<Repair>,
    ) -> Result<Loaded, PersistenceError> {
        let ScannedLog {
            mut header,
            mut events,
            ..
        } = scanned;
        events.extend(closers);
        header.version = SESSION_FORMAT_V4;
        let path = layout::log_path(
            &self.root,
            header.cwd.as_deref(),
            &header.id,
            SESSION_FORMAT_V4,
            self.compression,
        )?;
        let mut encoder = V4Encoder::new(&header.id, header.seed_length);
        let mut body = String::new();
        encoder.encode(&events, &mut body).map_err(|e| {
            PersistenceError::corrupt(v0_path, format!("cannot migrate to format v4: {e}"))
        })?;
        self.publish(&header.id, &path, &header_line_v4(&header), &body)?;
        tracing::info!(
            from = %v0_path.display(),
            to = %path.display(),
            "migrated a format v0 session log to v4 (the v0 file is kept unchanged)"
        );
        self.remember(&header.id, &path, Encoding::V4(encoder));
        let stored_len = events.len() as u64;
        Ok(Loaded {
            path,
            header,
            events,
            stored_len,
            repair,
        })
    }

    /// The header must name the file it was read from: its id is the one asked for, and
    /// its id and cwd map back to this path.
    pub(crate) fn check_identity(
        &self,
        path: &Path,
        header: &SessionHeader,
        id: &str,
    ) -> Result<(), PersistenceError> {
        if header.id != id {
            return Err(PersistenceError::corrupt(
                path,
                format!(
                    "requested id \"{id}\" does not match header id \"{}\"",
                    header.id
                ),
            ));
        }
        let expected = layout::log_path(
            &self.root,
            header.cwd.as_deref(),
            &header.id,
            header.version,
            self.compression,
        )
        .map_err(|_| PersistenceError::corrupt(path, "header id cannot name a storage path"))?;
        if expected != path && !same_file(&expected, path) {
            return Err(PersistenceError::corrupt(
                path,
                format!(
                    "header id \"{}\" and cwd identify \"{}\"",
                    header.id,
                    expected.display()
                ),
            ));
        }
        Ok(())
    }
}

/// The encoding of a file opened by path: by suffix, else by content.
fn detect(path: &Path, bytes: &[u8]) -> Compression {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.ends_with(".zstd") || frames::has_magic(bytes) {
        Compression::Zstd
    } else {
        Compression::None
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
