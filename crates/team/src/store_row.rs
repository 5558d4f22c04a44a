//! The `dsh-team-session-store` row: a turn that a team worker runs records its session in
//! PostgreSQL, under the lease the worker claimed, and never runs a tool the database has not
//! seen asked for.
//!
//! * **Mirror.** Every event of the leased session (the repair closers and end-seed a resumed
//!   log gets at creation, then each appended event) is queued for the appender, which writes
//!   batches with [`Store::append_batch`]: one fenced transaction each, checking the lease's
//!   owner, epoch and expiry and the head seq. Event `seq` n is stored as seq n + 1. The
//!   first batch carries the session header; the batch holding the turn's `user/message`
//!   marks the inbox rows the worker handed over consumed, in the same transaction.
//! * **Tools wait for the log.** `tools/execute` (waterfall, global) first waits until every
//!   event appended so far is committed; the tool call the model asked for is then in the
//!   database under a live lease before its body starts. `session/flush` waits the same way.
//! * **Fenced means gone.** The lease is renewed every third of its TTL. A renewal refused,
//!   no successful renewal for a whole TTL, or an append refused as fenced or behind the head:
//!   every process group this process started is killed and the process exits with
//!   [`FENCED_EXIT`] at once. Nothing it does after that can reach the log or the workspace.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_kernel::BoxFuture;
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_session::{
    AppendedEvent, AssignedMessageId, AssignedRoute, AssignedSessionId, AssignedWorkingDirectory,
    Event, LiveSession, RecordFormat, SessionAppended, SessionCreated, SessionFlush, TaskImage,
    TaskImages, TaskIsMessage, types, write_event,
};
use dsh_store_pg::{Batch, Lease, LeaseKeeper, NewEvent, Store, StoreError};
use dsh_tools::{ApprovalOutcome, ApprovalRequest, ApprovalService, Execute, RemoteApprovals};

use crate::transport::{LiveEvent, Transport};
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

/// The row's plugin name.
pub const PLUGIN_NAME: &str = "dsh-team-session-store";

/// Exit status of a turn whose lease was lost (`EX_TEMPFAIL`): the worker stops, another
/// worker owns the session now.
pub const FENCED_EXIT: i32 = 75;

/// The row's config, written by the worker into the turn's patch.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoreRowConfig {
    /// The PostgreSQL connection string.
    pub url: String,
    /// The session this turn runs.
    pub session: String,
    /// The lease the worker claimed: its owner and epoch.
    pub owner: String,
    pub epoch: i64,
    /// The lease's time to live.
    pub lease_ttl_ms: u64,
    /// Inbox rows this turn records (as its `user/message`).
    #[serde(default)]
    pub consumes: Vec<i64>,
    /// The id the turn's task message takes (chosen by the client that queued it).
    #[serde(default)]
    pub message_id: Option<String>,
    /// The NATS server live events are published to, when the team has one.
    #[serde(default)]
    pub transport: Option<String>,
    /// The model the turn runs on, when its client chose one (else the profile's default).
    #[serde(default)]
    pub route: Option<crate::route::Route>,
    /// The directory the client asked the session to move to, and the workspace it must
    /// stay inside.
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub workspace: Option<String>,
    /// The client that queued the input answers approvals (through the gateway): the turn
    /// waits for its answer instead of finding no one to ask.
    #[serde(default)]
    pub answers_approvals: bool,
    /// Images queued with the input, as files the worker wrote into the turn's directory.
    #[serde(default)]
    pub task_images: Vec<TaskImageConfig>,
}

/// One image of [`StoreRowConfig::task_images`].
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskImageConfig {
    pub path: String,
    pub media_type: String,
    #[serde(default)]
    pub name: Option<String>,
}

/// The row.
#[derive(Clone, Copy, Debug, Default)]
pub struct TeamSessionStorePlugin;

enum Msg {
    Created(String, Vec<Arc<Event>>),
    Appended(Arc<Event>),
    Flush(oneshot::Sender<()>),
}

impl Plugin for TeamSessionStorePlugin {
    fn name(&self) -> &'static str {
        PLUGIN_NAME
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let config: StoreRowConfig = config.parse()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(format!("{PLUGIN_NAME} must be loaded inside a tokio runtime").into());
        }
        ctx.provide(Arc::new(AssignedSessionId(config.session.clone())))?;
        ctx.provide(Arc::new(TaskIsMessage))?;
        if let (Some(path), Some(root)) = (&config.cwd, &config.workspace) {
            ctx.provide(Arc::new(AssignedWorkingDirectory {
                path: path.clone(),
                root: root.into(),
            }))?;
        }
        if let Some(id) = &config.message_id {
            ctx.provide(Arc::new(AssignedMessageId(id.clone())))?;
        }
        if let Some(route) = &config.route {
            ctx.provide(Arc::new(AssignedRoute {
                provider: route.provider.clone(),
                model: route.model.clone(),
                reasoning_effort: route.reasoning_effort.clone(),
                max_tokens: route.max_tokens,
            }))?;
        }
        if !config.task_images.is_empty() {
            ctx.provide(Arc::new(TaskImages(
                config
                    .task_images
                    .iter()
                    .map(|i| TaskImage {
                        path: i.path.clone().into(),
                        media_type: i.media_type.clone(),
                        name: i.name.clone(),
                    })
                    .collect(),
            )))?;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let tx = Arc::new(Mutex::new(Some(tx)));
        ctx.spawn(appender(config.clone(), rx, ctx.clone()))?;
        if config.answers_approvals {
            ctx.provide(Arc::new(RemoteApprovals(Arc::new(GatewayApprovals {
                url: config.url.clone(),
                session: config.session.clone(),
                sender: tx.clone(),
            }))))?;
        }

        let id = config.session.clone();
        let sender = tx.clone();
        ctx.on_emit::<SessionCreated>(ListenOptions::GLOBAL, move |session: &Arc<LiveSession>| {
            if session.id() == id {
                let header = session.header().to_value().to_string();
                send(&sender, Msg::Created(header, session.events()));
            }
            Ok(())
        })?;
        let id = config.session.clone();
        let sender = tx.clone();
        ctx.on_emit::<SessionAppended>(ListenOptions::GLOBAL, move |a: &AppendedEvent| {
            if a.session.id() == id {
                send(&sender, Msg::Appended(a.event.clone()));
            }
            Ok(())
        })?;
        let id = config.session.clone();
        let sender = tx.clone();
        ctx.on_parallel::<SessionFlush>(ListenOptions::GLOBAL, move |request| {
            // Every barrier waits for all of this session's events, bounded or not.
            let mine = request.session.id() == id;
            let sender = sender.clone();
            Box::pin(async move {
                if mine {
                    committed(&sender).await?;
                }
                Ok(())
            })
        })?;
        ctx.on_waterfall::<Execute>(ListenOptions::GLOBAL, move |_exec, next| {
            let sender = tx.clone();
            Box::pin(async move {
                committed(&sender).await?;
                next.run().await
            })
        })?;
        Ok(())
    }
}

/// How often a turn waiting for an approval looks for its answer.
const APPROVAL_POLL: Duration = Duration::from_millis(200);
/// How long a turn waits for a client to answer an approval before it goes on without one
/// (the call is then refused as unanswered).
const APPROVAL_WAIT: Duration = Duration::from_secs(600);

/// Approvals answered by the gateway's clients: once the `approval/asked` event is
/// committed (clients see it in the session's stream), the turn waits for the first answer
/// a client gave (`Store::answer_approval`), the call's cancel, or [`APPROVAL_WAIT`].
struct GatewayApprovals {
    url: String,
    session: String,
    sender: Arc<Mutex<Option<mpsc::UnboundedSender<Msg>>>>,
}

impl ApprovalService for GatewayApprovals {
    fn request(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalOutcome> {
        let (url, session, sender) = (self.url.clone(), self.session.clone(), self.sender.clone());
        Box::pin(async move {
            let id = request.approval_id.clone();
            if committed(&sender).await.is_err() {
                return ApprovalOutcome::Unavailable;
            }
            let deadline = tokio::time::Instant::now() + APPROVAL_WAIT;
            let mut store: Option<Store> = None;
            loop {
                if store.is_none() {
                    store = Store::connect(&url).await.ok();
                }
                if let Some(s) = &store {
                    match s.approval_answer(&session, &id).await {
                        Ok(Some(outcome)) => {
                            return match outcome.as_str() {
                                "allowed-once" => ApprovalOutcome::AllowedOnce,
                                _ => ApprovalOutcome::Rejected,
                            };
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!("team: reading the answer to approval {id}: {e}");
                            store = None;
                        }
                    }
                }
                if tokio::time::Instant::now() >= deadline {
                    eprintln!(
                        "dsh: no client answered approval {id} of session {session} within {} s",
                        APPROVAL_WAIT.as_secs()
                    );
                    return ApprovalOutcome::Unavailable;
                }
                tokio::select! {
                    () = request.cancel.cancelled() => return ApprovalOutcome::Cancelled,
                    () = tokio::time::sleep(APPROVAL_POLL) => {}
                }
            }
        })
    }
}

fn send(sender: &Mutex<Option<mpsc::UnboundedSender<Msg>>>, msg: Msg) {
    let guard = sender.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(tx) = guard.as_ref() {
        let _ = tx.send(msg);
    }
}

/// Waits until everything queued so far is committed. The appender answers only after a
/// successful commit; when it cannot, the process is already on its way out.
async fn committed(sender: &Mutex<Option<mpsc::UnboundedSender<Msg>>>) -> Result<(), BoxError> {
    let (done, wait) = oneshot::channel();
    send(sender, Msg::Flush(done));
    wait.await.map_err(|_| {
        BoxError::from("the team session store stopped: this turn can record nothing more")
    })
}

/// Ends the process: the lease is lost or the log cannot be kept. Every process group
/// started for a tool dies first.
fn fenced(reason: &str) -> ! {
    dsh_process::kill_every_group();
    eprintln!("dsh: {reason}; stopping this turn and every process it started");
    std::process::exit(FENCED_EXIT);
}

/// An event's record, as the JSONL log writes it: what the store keeps of it.
pub fn record(event: &Event) -> NewEvent {
    let mut data = String::new();
    write_event(&mut data, event, RecordFormat::Full);
    NewEvent {
        kind: event.event_type.as_str().to_string(),
        data,
    }
}

async fn connect(config: &StoreRowConfig) -> Store {
    match Store::connect(&config.url).await {
        Ok(s) => s,
        Err(e) => fenced(&format!("cannot reach the team store: {e}")),
    }
}

/// Owns the lease for this turn and writes the session's events in order.
async fn appender(config: StoreRowConfig, mut rx: mpsc::UnboundedReceiver<Msg>, ctx: Context) {
    let ttl = Duration::from_millis(config.lease_ttl_ms);
    let lease = Lease {
        session: config.session.clone(),
        owner: config.owner.clone(),
        epoch: config.epoch,
    };
    let mut store = connect(&config).await;
    let keeper_store = connect(&config).await;
    // The worker took the lease a moment ago; renewing now starts this process's own count.
    let sent = tokio::time::Instant::now();
    match keeper_store.renew(&lease, ttl).await {
        Ok(true) => {}
        Ok(false) => fenced(&format!(
            "the lease of session {} (epoch {}) was already taken over",
            lease.session, lease.epoch
        )),
        Err(e) => fenced(&format!(
            "cannot renew the lease of session {}: {e}",
            lease.session
        )),
    }
    let keeper =
        LeaseKeeper::start_reconnecting(keeper_store, &config.url, lease.clone(), ttl, sent);
    let lost = keeper.fenced().clone();
    tokio::spawn(async move {
        lost.cancelled().await;
        fenced("the lease of this session was lost (taken over, or not renewed in time)");
    });
    watch_cancels(&config, keeper.cancel_requested().clone());
    // Live events go out after each commit when there is a transport; without one (or when
    // NATS is down) gateways read PostgreSQL.
    let live = config
        .transport
        .clone()
        .map(|url| publisher(url, lease.session.clone()));
    let row = match store.session(&lease.session).await {
        Ok(row) => row,
        Err(e) => fenced(&format!("cannot read session {}: {e}", lease.session)),
    };
    let mut head = row.head_seq;
    // The images the team store holds for this session; any other an event refers to is
    // copied there before the event is written.
    let mut objects = Objects::read(&store, &lease.session).await;
    // A session's first batch carries its header: until the session exists here, nothing
    // is written.
    let mut header_stored = row.header.is_some();
    let mut header: Option<String> = None;
    let mut consumes = config.consumes.clone();
    let mut queue: Vec<Arc<Event>> = Vec::new();
    let mut waiting: Vec<oneshot::Sender<()>> = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(msg) = next.take().or_else(|| rx.try_recv().ok()) {
            match msg {
                Msg::Created(h, events) => {
                    header = Some(h);
                    let stored = usize::try_from(head).unwrap_or(usize::MAX);
                    if events.len() < stored {
                        fenced(&format!(
                            "session {} has {} events here but {head} in the team store",
                            lease.session,
                            events.len()
                        ));
                    }
                    for e in events {
                        enqueue(&mut queue, head, e, &lease.session);
                    }
                }
                Msg::Appended(e) => enqueue(&mut queue, head, e, &lease.session),
                Msg::Flush(done) => waiting.push(done),
            }
        }
        if !header_stored && header.is_none() {
            continue;
        }
        if !queue.is_empty() {
            objects
                .store(&ctx, &config.url, &mut store, &lease, ttl, &queue)
                .await;
            let batch_header = if header_stored { None } else { header.clone() };
            let (new_head, records) = write(
                &config.url,
                &mut store,
                &lease,
                ttl,
                head,
                &queue,
                batch_header,
                &mut consumes,
            )
            .await;
            if let Some(live) = &live {
                let events: Vec<LiveEvent> = records
                    .into_iter()
                    .zip(head + 1..)
                    .map(|(r, seq)| LiveEvent {
                        seq,
                        kind: r.kind,
                        record: r.data,
                    })
                    .collect();
                // Never waits: a batch that does not fit is left to PostgreSQL.
                let _ = live.try_send(Live::Events(events));
            }
            head = new_head;
            header_stored = true;
            queue.clear();
        }
        if !waiting.is_empty()
            && let Some(live) = &live
        {
            live_sent(live).await;
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
    drop(keeper);
}

/// The session's images in the team store, as far as this turn knows.
struct Objects(std::collections::HashSet<String>);

impl Objects {
    async fn read(store: &Store, session: &str) -> Self {
        match store.object_ids(session).await {
            Ok(ids) => Self(ids.into_iter().collect()),
            Err(e) => fenced(&format!("cannot read the images of session {session}: {e}")),
        }
    }

    /// Copies the images `events` refer to that the team store lacks from the turn's local
    /// store, before the events that refer to them are written: a reference in the log
    /// always names bytes the store has.
    async fn store(
        &mut self,
        ctx: &Context,
        url: &str,
        store: &mut Store,
        lease: &Lease,
        ttl: Duration,
        events: &[Arc<Event>],
    ) {
        let mut refs = Vec::new();
        // Images live in messages and tool results only; stream chunks and the rest (most
        // of a turn's events) are not walked.
        for e in events.iter().filter(|e| {
            e.is(types::USER_MESSAGE) || e.is(types::ASSISTANT_MESSAGE) || e.is(types::TOOL_RESULT)
        }) {
            image_refs(e.data.as_value(), &mut refs);
        }
        refs.retain(|r| r.sha256_hex().is_some_and(|h| !self.0.contains(h)));
        if refs.is_empty() {
            return;
        }
        let Some(local) = ctx.get::<dsh_attachments::AttachmentStore>() else {
            fenced("this turn refers to images but has no attachment store");
        };
        for r in refs {
            let Some(sha) = r.sha256_hex().map(str::to_owned) else {
                continue;
            };
            if self.0.contains(&sha) {
                continue;
            }
            let data = match local.read_image(&r) {
                Ok(d) => d,
                Err(e) => fenced(&format!(
                    "image {} of session {} cannot be read for the team store: {}",
                    r.attachment_id, lease.session, e.message
                )),
            };
            let mut give_up: Option<tokio::time::Instant> = None;
            loop {
                match store
                    .put_object(&lease.session, &sha, &r.media_type, &data)
                    .await
                {
                    Ok(()) => break,
                    Err(e) => {
                        let now = tokio::time::Instant::now();
                        if *give_up.get_or_insert(now + ttl) <= now {
                            fenced(&format!(
                                "cannot store image {} of session {}: {e}",
                                r.attachment_id, lease.session
                            ));
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        if let Ok(s) = Store::connect(url).await {
                            *store = s;
                        }
                    }
                }
            }
            self.0.insert(sha);
        }
    }
}

/// Every image reference (`{"attachmentId": "sha256:…", "mediaType", …}`) inside `value`.
fn image_refs(value: &serde_json::Value, out: &mut Vec<dsh_llm::ImageAttachmentRef>) {
    match value {
        serde_json::Value::Object(map) => {
            if map
                .get("attachmentId")
                .and_then(serde_json::Value::as_str)
                .is_some_and(|id| id.starts_with("sha256:"))
            {
                if let Ok(r) = dsh_llm::ImageAttachmentRef::from_json(value) {
                    out.push(r);
                }
                return;
            }
            for v in map.values() {
                image_refs(v, out);
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                image_refs(v, out);
            }
        }
        _ => {}
    }
}

/// After a failed append of `count` events at `head`: the new head when that append was
/// committed after all (the head moved by `count`, every new event of this lease's epoch),
/// `None` when it was not or the store cannot tell yet. Anything else moved the head: fenced.
async fn landed(store: &Store, lease: &Lease, head: i64, count: i64) -> Option<i64> {
    let row = store.session(&lease.session).await.ok()?;
    if row.head_seq == head {
        return None;
    }
    let written = store.read(&lease.session, head, count).await.ok()?;
    if row.head_seq == head + count
        && written.len() == usize::try_from(count).unwrap_or(usize::MAX)
        && written.iter().all(|e| e.epoch == lease.epoch)
    {
        return Some(row.head_seq);
    }
    fenced(&format!(
        "session {}: the stored head moved from {head} to {} under another writer",
        lease.session, row.head_seq
    ))
}

/// Queues `event` when it is the next one not stored or queued yet (a resumed log's events
/// reach the row both with the session and one by one); a gap ends the turn.
fn enqueue(queue: &mut Vec<Arc<Event>>, head: i64, event: Arc<Event>, session: &str) {
    let next = head + i64::try_from(queue.len()).unwrap_or(i64::MAX);
    let seq = i64::try_from(event.seq).unwrap_or(i64::MAX);
    if seq == next {
        queue.push(event);
    } else if seq > next {
        fenced(&format!(
            "session {session}: event seq {seq} arrived before seq {next}; the log cannot be kept in order"
        ));
    }
}

/// Stops the turn when someone asks (`dsh team cancel`, the gateway's cancel): learnt at the
/// next lease renewal, or at once over NATS. The turn then ends as on a user's Ctrl-C: the
/// running call is cancelled and recorded, the turn closed, the process exits 130.
fn watch_cancels(config: &StoreRowConfig, renewal: tokio_util::sync::CancellationToken) {
    let epoch = config.epoch;
    let session = config.session.clone();
    let transport = config.transport.clone();
    tokio::spawn(async move {
        let over_nats = async {
            let Some(url) = transport else {
                return std::future::pending::<()>().await;
            };
            let mut cancels = match Transport::connect(&url).await {
                Ok(t) => match t.subscribe_cancels(&session).await {
                    Ok(c) => c,
                    Err(_) => return std::future::pending::<()>().await,
                },
                Err(_) => return std::future::pending::<()>().await,
            };
            while let Some(asked) = cancels.next().await {
                if asked == epoch {
                    return;
                }
            }
            std::future::pending::<()>().await
        };
        tokio::select! {
            () = renewal.cancelled() => {}
            () = over_nats => {}
        }
        eprintln!("dsh: this turn was asked to stop");
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::INT);
    });
}

/// Publishes committed events on their own task, so a slow or unreachable NATS never holds
/// the log (and the tools waiting on it): what cannot be sent is dropped, and gateways read
/// it from PostgreSQL.
fn publisher(url: String, session: String) -> mpsc::Sender<Live> {
    let (tx, mut rx) = mpsc::channel::<Live>(256);
    tokio::spawn(async move {
        let transport = match Transport::connect(&url).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("{e}; live events go through PostgreSQL only");
                return;
            }
        };
        while let Some(item) = rx.recv().await {
            match item {
                Live::Events(events) => transport.publish_events(&session, &events).await,
                Live::Sent(done) => {
                    transport.flush().await;
                    let _ = done.send(());
                }
            }
        }
    });
    tx
}

/// What the publisher task is given.
enum Live {
    Events(Vec<LiveEvent>),
    /// Answered once everything before it left this process.
    Sent(oneshot::Sender<()>),
}

/// Waits (briefly) until the live events so far have left: a flush marks a turn's end or a
/// tool about to run, and a process that exits right after must not take them along.
async fn live_sent(live: &mpsc::Sender<Live>) {
    let (done, sent) = oneshot::channel();
    if live.try_send(Live::Sent(done)).is_ok() {
        let _ = tokio::time::timeout(Duration::from_millis(250), sent).await;
    }
}

/// Writes `events` (seqs `head`, `head + 1`, …) in one fenced transaction; returns the new
/// head and the records written. A database error is retried for as long as the lease
/// lasts (`ttl` after the first failure): a restarting PostgreSQL is waited for, and a
/// store that stays away is left to the lease keeper, which fences this process when the
/// lease can no longer be renewed.
#[allow(clippy::too_many_arguments)]
async fn write(
    url: &str,
    store: &mut Store,
    lease: &Lease,
    ttl: Duration,
    head: i64,
    events: &[Arc<Event>],
    header: Option<String>,
    consumes: &mut Vec<i64>,
) -> (i64, Vec<NewEvent>) {
    let consumed = match events.iter().position(|e| e.is(types::USER_MESSAGE)) {
        Some(index) if !consumes.is_empty() => consumes.iter().map(|id| (*id, index)).collect(),
        _ => Vec::new(),
    };
    let batch = Batch {
        events: events.iter().map(|e| record(e)).collect(),
        consumed,
        header,
    };
    let count = i64::try_from(batch.events.len()).unwrap_or(i64::MAX);
    let mut give_up: Option<tokio::time::Instant> = None;
    let mut pause = Duration::from_millis(50);
    loop {
        match store.append_batch(lease, head, &batch).await {
            Ok(new_head) => {
                if !batch.consumed.is_empty() {
                    consumes.clear();
                }
                return (new_head, batch.events);
            }
            Err(e @ (StoreError::Fenced { .. } | StoreError::HeadMoved { .. })) => {
                fenced(&e.to_string())
            }
            Err(StoreError::Db(e)) => {
                let now = tokio::time::Instant::now();
                if *give_up.get_or_insert(now + ttl) <= now {
                    fenced(&format!("cannot record session {}: {e}", lease.session));
                }
                tracing::warn!("recording session {} failed ({e}); retrying", lease.session);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
                if e.is_closed()
                    && let Ok(s) = Store::connect(url).await
                {
                    *store = s;
                }
                // The commit may have landed before the connection went: then the head moved
                // by exactly this batch, written under this lease's epoch.
                if let Some(landed) = landed(store, lease, head, count).await {
                    if !batch.consumed.is_empty() {
                        consumes.clear();
                    }
                    return (landed, batch.events);
                }
            }
            Err(e) => fenced(&format!("cannot record session {}: {e}", lease.session)),
        }
    }
}
