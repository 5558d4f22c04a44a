//! Live sessions and the session store (`ctx.sessions`): appends are validated, committed,
//! then published on `session/event`; flushes are a durability barrier on `session/flush`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use dsh_kernel::{BoxError, Context, EmitEvent, Event as KernelEvent, ParallelEvent};
use dsh_llm::Message;
use serde_json::Value;

use crate::event::Event;
use crate::header::SessionHeader;
use crate::log::{AppendError, ForkError, Session, SurfaceIntent};

/// Wall-clock milliseconds (injectable for tests).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    })
}

thread_local! {
    static PUBLISHING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// A session that is live in this process. Appends are serialized; each committed event
/// is published to `session/event` observers (contained) before the next append commits.
pub struct LiveSession {
    state: Mutex<Session>,
    publish: Mutex<()>,
    ctx: Context,
    clock: Clock,
    /// Number of leading events that already are in durable storage (restored logs).
    stored_len: u64,
    /// Whether the session came from a stored log, which exists even when it holds no
    /// events yet (a log cut to its header).
    restored: bool,
}

impl std::fmt::Debug for LiveSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSession")
            .field("id", &self.id())
            .finish_non_exhaustive()
    }
}

/// `session/created` (emit): a session became live. Payload: the session.
pub struct SessionCreated;
impl KernelEvent for SessionCreated {
    const NAME: &'static str = "session/created";
    type Payload = Arc<LiveSession>;
}
impl EmitEvent for SessionCreated {}

/// `session/event` (emit, contained): an event was committed. Observers must not append
/// to the same session synchronously (that append is refused).
pub struct SessionAppended;
/// Payload of [`SessionAppended`].
pub struct AppendedEvent {
    pub session: Arc<LiveSession>,
    pub event: Arc<Event>,
}
impl KernelEvent for SessionAppended {
    const NAME: &'static str = "session/event";
    type Payload = AppendedEvent;
}
impl EmitEvent for SessionAppended {}

/// `session/flush` (parallel): make what was appended so far durable (everything, or the
/// events up to a bound). The first failure is returned after all participants settled.
pub struct SessionFlush;
/// Payload of [`SessionFlush`].
pub struct FlushRequest {
    pub session: Arc<LiveSession>,
    /// The last seq that must be durable; later events may stay queued. `None`: every event
    /// appended so far.
    pub through: Option<u64>,
}
impl KernelEvent for SessionFlush {
    const NAME: &'static str = "session/flush";
    type Payload = FlushRequest;
}
impl ParallelEvent for SessionFlush {}

/// `session/write-failed` (emit, contained): a persistence backend could not store events of
/// a session (disk full, IO error, permissions). The events stay queued in the backend; the
/// next durability barrier fails too. Listeners stop work that would outrun the log.
pub struct SessionWriteFailed;
/// Payload of [`SessionWriteFailed`].
pub struct WriteFailure {
    pub session: Arc<LiveSession>,
    /// What failed, naming the file.
    pub message: String,
}
impl KernelEvent for SessionWriteFailed {
    const NAME: &'static str = "session/write-failed";
    type Payload = WriteFailure;
}
impl EmitEvent for SessionWriteFailed {}

/// `session/disposed` (emit): a session left the store.
pub struct SessionDisposed;
impl KernelEvent for SessionDisposed {
    const NAME: &'static str = "session/disposed";
    type Payload = Arc<LiveSession>;
}
impl EmitEvent for SessionDisposed {}

impl LiveSession {
    fn lock(&self) -> MutexGuard<'_, Session> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn key(&self) -> usize {
        self as *const Self as usize
    }

    pub fn id(&self) -> String {
        self.lock().id().to_string()
    }

    pub fn header(&self) -> SessionHeader {
        self.lock().header().clone()
    }

    /// Events `[0, stored_len)` came from durable storage.
    pub fn stored_len(&self) -> u64 {
        self.stored_len
    }

    /// Whether the session was restored from a stored log ([`SessionSource::Restored`]):
    /// its log exists, even when [`LiveSession::stored_len`] is 0, so persistence appends
    /// to it instead of creating one.
    pub fn is_restored(&self) -> bool {
        self.restored
    }

    /// The context events of this session are dispatched through (its owner's scope).
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Reads the session under its lock. Do not append from inside `f`.
    pub fn read<R>(&self, f: impl FnOnce(&Session) -> R) -> R {
        f(&self.lock())
    }

    pub fn next_seq(&self) -> u64 {
        self.lock().next_seq()
    }

    pub fn events(&self) -> Vec<Arc<Event>> {
        self.lock().events().to_vec()
    }

    pub fn events_from(&self, from: u64) -> Vec<Arc<Event>> {
        let s = self.lock();
        s.events()
            .get(from as usize..)
            .map(<[_]>::to_vec)
            .unwrap_or_default()
    }

    pub fn derive_messages(&self) -> Vec<Arc<Message>> {
        self.lock().derive_messages()
    }

    /// [`Session::request_header_matches`] under the session's lock.
    pub fn request_header_matches(&self, header: &crate::EpochHeader) -> bool {
        self.lock().request_header_matches(header)
    }

    /// Validates and commits one event, then publishes it. Refused (log unchanged) when the
    /// event is invalid or when called from a `session/event` observer of this session.
    pub fn append(
        self: &Arc<Self>,
        event_type: &str,
        data: Value,
        surface: Option<SurfaceIntent>,
    ) -> Result<Arc<Event>, AppendError> {
        let key = self.key();
        if PUBLISHING.with(|p| p.borrow().contains(&key)) {
            return Err(AppendError(
                "session append cannot reenter while another append is being published".into(),
            ));
        }
        let _order = self.publish.lock().unwrap_or_else(|p| p.into_inner());
        let event = {
            let mut s = self.lock();
            s.append_at(event_type, data, surface, (self.clock)())?
        };
        PUBLISHING.with(|p| p.borrow_mut().push(key));
        self.ctx.emit::<SessionAppended>(&AppendedEvent {
            session: self.clone(),
            event: event.clone(),
        });
        PUBLISHING.with(|p| {
            let mut p = p.borrow_mut();
            if let Some(i) = p.iter().rposition(|k| *k == key) {
                p.remove(i);
            }
        });
        Ok(event)
    }

    /// Appends the events `build` returns, in order, with nothing from any other appender
    /// in between (one hold of the publish order); `build` gets the seq the first of them
    /// will have, so later ones can cite earlier ones. Each is validated, committed and
    /// published like [`LiveSession::append`]. Stops at the first refused event: the ones
    /// before it stay committed, the refusal is returned.
    pub fn append_group(
        self: &Arc<Self>,
        build: impl FnOnce(u64) -> Vec<(String, Value, Option<SurfaceIntent>)>,
    ) -> Result<Vec<Arc<Event>>, AppendError> {
        let key = self.key();
        if PUBLISHING.with(|p| p.borrow().contains(&key)) {
            return Err(AppendError(
                "session append cannot reenter while another append is being published".into(),
            ));
        }
        let _order = self.publish.lock().unwrap_or_else(|p| p.into_inner());
        let events = build(self.next_seq());
        let mut out = Vec::with_capacity(events.len());
        for (event_type, data, surface) in events {
            let event = {
                let mut s = self.lock();
                s.append_at(&event_type, data, surface, (self.clock)())?
            };
            self.publish_committed(key, &event);
            out.push(event);
        }
        Ok(out)
    }

    fn publish_committed(self: &Arc<Self>, key: usize, event: &Arc<Event>) {
        PUBLISHING.with(|p| p.borrow_mut().push(key));
        self.ctx.emit::<SessionAppended>(&AppendedEvent {
            session: self.clone(),
            event: event.clone(),
        });
        PUBLISHING.with(|p| {
            let mut p = p.borrow_mut();
            if let Some(i) = p.iter().rposition(|k| *k == key) {
                p.remove(i);
            }
        });
    }

    /// The durability barrier: resolves once every participant persisted what was appended
    /// so far. Returns whether any participant took part.
    pub async fn flush(self: &Arc<Self>) -> Result<bool, BoxError> {
        self.flush_request(None).await
    }

    /// [`LiveSession::flush`] for the events up to `seq` only: what was appended after it
    /// may still be queued when this resolves.
    pub async fn flush_through(self: &Arc<Self>, seq: u64) -> Result<bool, BoxError> {
        self.flush_request(Some(seq)).await
    }

    async fn flush_request(self: &Arc<Self>, through: Option<u64>) -> Result<bool, BoxError> {
        let request = FlushRequest {
            session: self.clone(),
            through,
        };
        self.ctx.parallel::<SessionFlush>(&request).await
    }

    /// The seq of the last event that changed what the model is shown (a surface
    /// operation), if any.
    pub fn last_surface_seq(&self) -> Option<u64> {
        self.lock()
            .events()
            .iter()
            .rev()
            .find(|e| e.surface_op.is_some())
            .map(|e| e.seq)
    }
}

/// Why the store refused an operation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    #[error("session \"{0}\" is already live")]
    AlreadyExists(String),
    #[error("session \"{0}\" is not live")]
    NotFound(String),
    #[error(transparent)]
    Fork(#[from] ForkError),
    #[error(transparent)]
    Invalid(#[from] AppendError),
}

/// The id a run's fresh top-level session takes when a plugin names it (`ctx` service).
/// The team worker provides it: the sessions it runs were named by whoever queued their
/// first input, before any process of the session existed. Without it a fresh id is minted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssignedSessionId(pub String);

/// Whether a client may choose `id` for a team session or message: 1 to 128 ASCII letters,
/// digits, `.`, `_` or `-`, so it is safe as a URL path segment.
pub fn is_plain_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The id a run's task message takes when a plugin names it (`ctx` service): the team worker
/// provides the one its client chose when queueing the input, so the client can find its
/// message (the SDK runtime's receipt) in the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssignedMessageId(pub String);

/// The directory a run's session moves to before its task, when a plugin names one (`ctx`
/// service): the team worker provides the one its client queued with the input. `path`
/// resolves against the session's current directory and must name an existing directory
/// inside `root` (the worker's workspace); otherwise the session stays where it is and the
/// model is told why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssignedWorkingDirectory {
    pub path: String,
    pub root: std::path::PathBuf,
}

/// The run's task is a message for the model even when it starts with `/` (`ctx` service).
/// The team worker provides it: its clients queue messages (the SDK sends a prompt's text
/// as it is), a command's reply would have no way back to them, and a command that records
/// no message would leave the queued input unconsumed, to be run again and again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskIsMessage;

/// Images that go with the run's task (`ctx` service): the team worker provides those its
/// client queued with the input, as files in the turn's private directory. The run stores
/// them and sends them after the task's text in one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskImages(pub Vec<TaskImage>);

/// One image of [`TaskImages`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskImage {
    pub path: std::path::PathBuf,
    pub media_type: String,
    pub name: Option<String>,
}

/// The model a run's session takes when a plugin names it (`ctx` service), in place of the
/// profile's default model: the team worker provides the one its client chose when queueing
/// the input (the SDK's `initialize` route, or `provider`/`model` on the gateway's API).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssignedRoute {
    pub provider: String,
    pub model: String,
    pub reasoning_effort: Option<String>,
    pub max_tokens: Option<u64>,
}

/// How a session comes to life.
pub enum SessionSource {
    /// A brand-new session with no events.
    Fresh,
    /// A child seeded with a prefix (fork, seeded subagent); gets `session/end-seed`.
    Seeded(Vec<Arc<Event>>),
    /// A restored log (already durable, repair closers included); gets `session/end-seed`
    /// unless it already ends with one.
    Restored {
        events: Vec<Arc<Event>>,
        stored_len: u64,
    },
}

/// The `ctx.sessions` service.
pub struct SessionStore {
    clock: Clock,
    live: RwLock<HashMap<String, Arc<LiveSession>>>,
}

impl SessionStore {
    pub fn new(clock: Clock) -> Arc<Self> {
        Arc::new(Self {
            clock,
            live: RwLock::new(HashMap::new()),
        })
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    pub fn now(&self) -> i64 {
        (self.clock)()
    }

    /// Makes a session live. `ctx` is the context its events are dispatched through (an
    /// agent's scoped context for agent sessions). Announces `session/created`.
    pub fn create(
        &self,
        ctx: &Context,
        header: SessionHeader,
        source: SessionSource,
    ) -> Result<Arc<LiveSession>, StoreError> {
        let id = header.id.clone();
        if self.get(&id).is_some() {
            return Err(StoreError::AlreadyExists(id));
        }
        let now = self.now();
        let (session, stored_len, restored) = match source {
            SessionSource::Fresh => (Session::new(header), 0, false),
            SessionSource::Seeded(seed) => (Session::with_seed(header, seed, now)?, 0, false),
            SessionSource::Restored { events, stored_len } => {
                (Session::with_seed(header, events, now)?, stored_len, true)
            }
        };
        let live = Arc::new(LiveSession {
            state: Mutex::new(session),
            publish: Mutex::new(()),
            ctx: ctx.clone(),
            clock: self.clock.clone(),
            stored_len,
            restored,
        });
        {
            let mut map = self.live.write().unwrap_or_else(|p| p.into_inner());
            if map.contains_key(&id) {
                return Err(StoreError::AlreadyExists(id));
            }
            map.insert(id, live.clone());
        }
        ctx.emit::<SessionCreated>(&live);
        Ok(live)
    }

    pub fn get(&self, id: &str) -> Option<Arc<LiveSession>> {
        self.live
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    pub fn list(&self) -> Vec<Arc<LiveSession>> {
        self.live
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Forks a live session at `boundary` (default: its last event) into a new live child.
    pub fn fork(
        &self,
        ctx: &Context,
        source: &LiveSession,
        boundary: Option<u64>,
        child_id: String,
    ) -> Result<Arc<LiveSession>, StoreError> {
        let (prefix, parent) = source.read(|s| (s.fork_prefix(boundary), s.header().clone()));
        let prefix = prefix?;
        let mut header = SessionHeader::new(child_id, self.now().max(0) as u64);
        header.cwd = parent.cwd.clone();
        header.parent_session = Some(parent.id.clone());
        header.seed_length = Some(prefix.len() as u64);
        self.create(ctx, header, SessionSource::Seeded(prefix))
    }

    /// Removes a session from the store and announces `session/disposed`.
    pub fn dispose(&self, id: &str) {
        let removed = self
            .live
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        if let Some(s) = removed {
            s.ctx.emit::<SessionDisposed>(&s);
        }
    }
}
