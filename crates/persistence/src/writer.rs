//! [`SessionWriter`]: the write-behind queue of one live session.
//!
//! Events are queued in seq order. In batched mode the first event queued while the queue
//! is idle arms a fixed timer (later events do not push it back); when it fires, everything
//! pending is written as one durable batch. [`SessionWriter::flush`] is a barrier: it cancels
//! the wait and drains until the queue is empty, including events queued meanwhile, and
//! returns the failure of its own writes. A failed write puts its events back at the front
//! of the queue and pauses automatic writes until the next event or flush.
//!
//! File IO never runs on an async worker: writes run on the blocking pool, serialized by an
//! IO lock; the batch is taken from the queue only once that lock is held, so batches reach
//! the file in queue order. A write that started always completes (and on failure requeues
//! its events), even when the future that started it is dropped.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use dsh_session::{Event, SessionHeader};
use tokio::runtime::Handle;
use tokio::sync::watch;

use crate::error::PersistenceError;
use crate::files::SessionFiles;

/// What is on disk when a writer starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriterStart {
    /// Nothing: the first write materializes the log (and refuses an id that already has
    /// one).
    Fresh,
    /// The log exists and holds events `[0, stored_len)`.
    Stored { stored_len: u64 },
}

/// When queued events are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteTiming {
    /// Batch events; the first pending event arms a timer of this length.
    Batched(Duration),
    /// Write and fsync every event before [`SessionWriter::enqueue`] returns (blocking the
    /// caller). For harnesses that watch the files while the agent runs.
    EveryEvent,
}

/// Called with every failed write (background, inline or flush), after the batch was put
/// back in the queue.
pub type FailureHook = Arc<dyn Fn(&PersistenceError) + Send + Sync>;

/// The write-behind queue of one session. Cheap to clone (a handle).
#[derive(Clone)]
pub struct SessionWriter {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SessionWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWriter")
            .field("id", &self.shared.header.id)
            .finish_non_exhaustive()
    }
}

struct Shared {
    files: Arc<SessionFiles>,
    header: SessionHeader,
    timing: WriteTiming,
    runtime: Handle,
    queue: Mutex<Queue>,
    /// Held for the whole of a write; the batch is taken while holding it.
    io: Mutex<Io>,
    /// Number of leading events that are durable.
    durable: watch::Sender<u64>,
    /// Writes that ended (written or failed, their events queued again): a barrier waits
    /// on it for a write in progress, without a thread of its own.
    ended: watch::Sender<u64>,
    /// A retiring writer of the same id whose queue must reach the file first.
    predecessor: Mutex<Option<SessionWriter>>,
    on_failure: Mutex<Option<FailureHook>>,
}

struct Queue {
    pending: Vec<Arc<Event>>,
    /// Events with a lower seq are queued or durable already.
    cursor: u64,
    /// Generation of the armed timer, if any.
    timer: Option<u64>,
    timers_armed: u64,
    /// Automatic writes stopped after a failure (until the next event or flush).
    paused: bool,
    /// Flush barriers in progress (they drain the queue; no timer is needed meanwhile).
    flushing: usize,
}

struct Io {
    materialized: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trigger {
    Timer(u64),
    Flush,
    Inline,
    /// A write-ahead: only [`ahead_len`] leading events.
    Ahead,
}

/// How many leading events of `pending` a write-ahead takes: through the last one that
/// changes what the model is shown, and never a step's start. A step's start goes out with
/// its request header, as a format-v4 log writes the first step's system prompt from it.
fn ahead_len(pending: &[Arc<Event>]) -> usize {
    let stop = pending
        .iter()
        .position(|e| e.is(dsh_session::types::STEP_START))
        .unwrap_or(pending.len());
    pending[..stop]
        .iter()
        .rposition(|e| e.surface_op.is_some())
        .map_or(0, |i| i + 1)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Wrote,
    Idle,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SessionWriter {
    /// A writer for `header`'s log. `runtime` runs its timers and blocking writes.
    pub fn new(
        files: Arc<SessionFiles>,
        header: SessionHeader,
        start: WriterStart,
        timing: WriteTiming,
        runtime: Handle,
    ) -> Self {
        let (materialized, stored) = match start {
            WriterStart::Fresh => (false, 0),
            WriterStart::Stored { stored_len } => (true, stored_len),
        };
        Self {
            shared: Arc::new(Shared {
                files,
                header,
                timing,
                runtime,
                queue: Mutex::new(Queue {
                    pending: Vec::new(),
                    cursor: stored,
                    timer: None,
                    timers_armed: 0,
                    paused: false,
                    flushing: 0,
                }),
                io: Mutex::new(Io { materialized }),
                durable: watch::Sender::new(stored),
                ended: watch::Sender::new(0),
                predecessor: Mutex::new(None),
                on_failure: Mutex::new(None),
            }),
        }
    }

    /// Installs the hook told about every failed write.
    pub fn on_failure(&self, hook: FailureHook) {
        *lock(&self.shared.on_failure) = Some(hook);
    }

    /// Whether both handles are the same writer.
    pub fn same_as(&self, other: &SessionWriter) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    pub fn header(&self) -> &SessionHeader {
        &self.shared.header
    }

    pub fn timing(&self) -> WriteTiming {
        self.shared.timing
    }

    /// The log file this writer appends to.
    pub fn path(&self) -> Result<PathBuf, PersistenceError> {
        self.shared.files.path_for(&self.shared.header)
    }

    /// The seq the next queued event must have (events below it are ignored).
    pub fn cursor(&self) -> u64 {
        lock(&self.shared.queue).cursor
    }

    /// Number of queued (not yet durable) events.
    pub fn pending_len(&self) -> usize {
        lock(&self.shared.queue).pending.len()
    }

    /// Whether nothing is queued and no write is in progress. A write takes the queue
    /// under the IO lock, so an empty queue alone does not mean its events are on disk.
    pub fn is_idle(&self) -> bool {
        // IO before queue, the order `write_once` takes them (try_lock never waits).
        let Ok(_io) = self.shared.io.try_lock() else {
            return false;
        };
        lock(&self.shared.queue).pending.is_empty()
    }

    /// Number of leading events known to be durable.
    pub fn durable_len(&self) -> u64 {
        *self.shared.durable.borrow()
    }

    /// Resolves once at least `len` leading events are durable.
    pub async fn wait_durable(&self, len: u64) {
        let mut rx = self.shared.durable.subscribe();
        let _ = rx.wait_for(|d| *d >= len).await;
    }

    /// Makes this writer wait for `previous` (a retiring writer of the same log) to drain
    /// before its own first write.
    pub fn follow(&self, previous: SessionWriter) {
        *lock(&self.shared.predecessor) = Some(previous);
    }

    /// Queues events in seq order. Events below the cursor are dropped (already queued or
    /// stored). With [`WriteTiming::EveryEvent`] the queue is written before returning; a
    /// failure is logged and the events stay queued for the next write or flush.
    pub fn enqueue(&self, events: impl IntoIterator<Item = Arc<Event>>) {
        {
            let mut q = lock(&self.shared.queue);
            let mut added = false;
            let was_empty = q.pending.is_empty();
            for event in events {
                if event.seq < q.cursor {
                    continue;
                }
                if event.seq > q.cursor {
                    tracing::error!(
                        session = %self.shared.header.id,
                        expected = q.cursor,
                        got = event.seq,
                        "session persistence skipped events; the log will be cut at the gap on load"
                    );
                }
                q.cursor = event.seq + 1;
                q.pending.push(event);
                added = true;
            }
            if !added {
                return;
            }
            if let WriteTiming::Batched(delay) = self.shared.timing
                && q.flushing == 0
            {
                if q.paused {
                    q.paused = false;
                    self.arm_timer(&mut q, delay);
                } else if was_empty && q.timer.is_none() {
                    self.arm_timer(&mut q, delay);
                }
            }
        }
        if self.shared.timing == WriteTiming::EveryEvent {
            if let Some(previous) = lock(&self.shared.predecessor).take()
                && let Err(e) = previous.drain_blocking()
            {
                tracing::warn!(session = %self.shared.header.id, error = %e, "retiring writer failed to drain");
            }
            if let Err(e) = write_once(&self.shared, Trigger::Inline) {
                report_failure(&self.shared.header.id, &e);
            }
        }
    }

    fn arm_timer(&self, q: &mut Queue, delay: Duration) {
        q.timers_armed += 1;
        let generation = q.timers_armed;
        q.timer = Some(generation);
        let writer = self.clone();
        self.shared.runtime.spawn(async move {
            tokio::time::sleep(delay).await;
            if let Err(e) = writer.write_in_background(Trigger::Timer(generation)).await {
                report_failure(&writer.shared.header.id, &e);
            }
        });
    }

    async fn drain_predecessor(&self) -> Result<(), PersistenceError> {
        let previous = lock(&self.shared.predecessor).take();
        if let Some(previous) = previous
            && let Err(e) = Box::pin(previous.flush()).await
        {
            *lock(&self.shared.predecessor) = Some(previous);
            return Err(e);
        }
        Ok(())
    }

    /// Writes on the blocking pool: one write for a timer, or, for a barrier, writes until
    /// the queue is empty (events queued meanwhile included) in the same task, so draining
    /// costs one hand-off to the pool rather than one per write and one more to find the
    /// queue empty.
    async fn write_in_background(&self, trigger: Trigger) -> Result<Outcome, PersistenceError> {
        self.drain_predecessor().await?;
        let shared = self.shared.clone();
        let task = move || {
            if trigger != Trigger::Flush {
                return write_once(&shared, trigger);
            }
            while write_once(&shared, trigger)? == Outcome::Wrote {}
            Ok(Outcome::Idle)
        };
        match tokio::task::spawn_blocking(task).await {
            Ok(result) => result,
            Err(join) => Err(PersistenceError::io(
                "session write task failed for",
                &self.path().unwrap_or_default(),
                std::io::Error::other(join.to_string()),
            )),
        }
    }

    /// Starts writing what is queued now, on the blocking pool, and returns at once: a
    /// barrier that follows soon finds the write done or in progress instead of starting
    /// it. A failure is reported like a timer's; its events stay queued for the barrier.
    pub fn write_ahead(&self) {
        if self.shared.timing == WriteTiming::EveryEvent {
            return;
        }
        {
            let q = lock(&self.shared.queue);
            // Nothing to write ahead, or a barrier is draining the queue already.
            if ahead_len(&q.pending) == 0 || q.flushing > 0 {
                return;
            }
        }
        if lock(&self.shared.predecessor).is_some() {
            return; // the barrier drains the retiring writer first
        }
        let shared = self.shared.clone();
        self.shared.runtime.spawn_blocking(move || {
            if let Err(e) = write_once(&shared, Trigger::Ahead) {
                report_failure(&shared.header.id, &e);
            }
        });
    }

    /// The durability barrier: cancels the batching wait, waits for a write in progress,
    /// and writes until the queue is empty (events queued meanwhile included). Returns the
    /// failure of its own writes; the events of a failed write stay queued.
    pub async fn flush(&self) -> Result<(), PersistenceError> {
        if self.is_idle() && lock(&self.shared.predecessor).is_none() {
            return Ok(()); // everything queued is on disk already
        }
        let _barrier = Barrier::enter(self);
        self.write_in_background(Trigger::Flush).await.map(|_| ())
    }

    /// Whether the event `seq` (or one before it) waits in the queue.
    fn queued_through(&self, seq: u64) -> bool {
        lock(&self.shared.queue)
            .pending
            .first()
            .is_some_and(|e| e.seq <= seq)
    }

    /// The barrier for the events up to `seq`: resolves once they are durable, leaving what
    /// was queued after them for a later write. A write in progress that holds `seq` is
    /// waited for rather than followed by another.
    pub async fn flush_through(&self, seq: u64) -> Result<(), PersistenceError> {
        if self.durable_len() > seq {
            return Ok(());
        }
        if !self.queued_through(seq) && lock(&self.shared.predecessor).is_none() {
            // Taken by a write in progress: wait for it to end. Subscribed first, so a write
            // that ends from here on is seen; one that ended before left its events durable
            // or queued again, which the checks below find.
            let mut ended = self.shared.ended.subscribe();
            if self.durable_len() > seq {
                return Ok(());
            }
            if !self.queued_through(seq) {
                let _ = ended.changed().await;
            }
            if self.durable_len() > seq {
                return Ok(());
            }
        }
        // Queued, or the write failed (its events are queued again): write them now.
        self.flush().await
    }

    /// [`SessionWriter::flush`] on the calling thread (which it blocks).
    pub fn drain_blocking(&self) -> Result<(), PersistenceError> {
        if let Some(previous) = lock(&self.shared.predecessor).take() {
            previous.drain_blocking()?;
        }
        let _barrier = Barrier::enter(self);
        while write_once(&self.shared, Trigger::Flush)? == Outcome::Wrote {}
        Ok(())
    }
}

/// A flush in progress: timers are cancelled and not armed while it drains. On exit, work
/// queued after the drain's last look gets a timer of its own.
struct Barrier<'a> {
    writer: &'a SessionWriter,
}

impl<'a> Barrier<'a> {
    fn enter(writer: &'a SessionWriter) -> Self {
        let mut q = lock(&writer.shared.queue);
        q.flushing += 1;
        q.timer = None;
        q.paused = false;
        Self { writer }
    }
}

impl Drop for Barrier<'_> {
    fn drop(&mut self) {
        let mut q = lock(&self.writer.shared.queue);
        q.flushing -= 1;
        if let WriteTiming::Batched(delay) = self.writer.shared.timing
            && q.flushing == 0
            && !q.paused
            && q.timer.is_none()
            && !q.pending.is_empty()
        {
            self.writer.arm_timer(&mut q, delay);
        }
    }
}

fn report_failure(id: &str, error: &PersistenceError) {
    tracing::warn!(
        "session-persistence-jsonl: background write for session \"{id}\" failed (buffered events retained): {error}"
    );
}

/// Takes everything pending (under the IO lock) and writes it as one durable batch.
fn write_once(shared: &Shared, trigger: Trigger) -> Result<Outcome, PersistenceError> {
    let io = lock(&shared.io);
    let outcome = write_locked(shared, trigger, io);
    shared.ended.send_modify(|n| *n = n.wrapping_add(1));
    outcome
}

/// [`write_once`] with the IO lock held.
fn write_locked(
    shared: &Shared,
    trigger: Trigger,
    mut io: MutexGuard<'_, Io>,
) -> Result<Outcome, PersistenceError> {
    let batch = {
        let mut q = lock(&shared.queue);
        if let Trigger::Timer(generation) = trigger
            && q.timer != Some(generation)
        {
            return Ok(Outcome::Idle); // cancelled, or superseded by a flush
        }
        if trigger == Trigger::Ahead {
            // The rest stays queued under its timer.
            let take = ahead_len(&q.pending);
            if take == 0 {
                return Ok(Outcome::Idle);
            }
            q.pending.drain(..take).collect()
        } else {
            q.timer = None;
            if q.pending.is_empty() {
                return Ok(Outcome::Idle);
            }
            std::mem::take(&mut q.pending)
        }
    };
    tracing::trace!(target: "dsh_step", events = batch.len(), "write");
    let result = if io.materialized {
        shared.files.append(&shared.header, &batch)
    } else {
        shared.files.create(&shared.header, &batch).map(|_| ())
    };
    tracing::trace!(target: "dsh_step", "write done");
    match result {
        Ok(()) => {
            io.materialized = true;
            if let Some(last) = batch.last() {
                shared.durable.send_replace(last.seq + 1);
            }
            Ok(Outcome::Wrote)
        }
        Err(e) => {
            {
                let mut q = lock(&shared.queue);
                let newer = std::mem::replace(&mut q.pending, batch);
                q.pending.extend(newer);
                q.timer = None;
                q.paused = true;
            }
            let hook = lock(&shared.on_failure).clone();
            if let Some(hook) = hook {
                hook(&e);
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{ChunkPacking, Compression};

    #[tokio::test]
    async fn a_write_in_progress_is_not_idle() {
        let dir = tempfile::tempdir().unwrap();
        let files = Arc::new(SessionFiles::new(
            dir.path(),
            Compression::None,
            ChunkPacking::Packed,
        ));
        let w = SessionWriter::new(
            files,
            SessionHeader::new("idle", 1_700_000_000_000),
            WriterStart::Fresh,
            WriteTiming::Batched(std::time::Duration::from_secs(3600)),
            tokio::runtime::Handle::current(),
        );
        assert!(w.is_idle());
        // A write holds the IO lock from before it takes the queue until its batch is on
        // disk: the queue is empty meanwhile, yet the writer is busy.
        let io = w.shared.io.lock().unwrap();
        assert_eq!(w.pending_len(), 0);
        assert!(!w.is_idle());
        drop(io);
        assert!(w.is_idle());
    }
}
