//! `dsh worker`: claims runnable sessions of a pool from PostgreSQL and runs one turn of each
//! in a child `dsh headless` process.
//!
//! For each claim (the lease is taken in the claiming statement):
//! 1. the session's header and events are read from the store and written as a local log in a
//!    private scratch directory; loading it there repairs a turn a dead worker left open (the
//!    closers then reach the store as this turn's first events);
//! 2. the oldest pending input becomes the turn's task; a patch points the child's session
//!    persistence at the scratch directory and adds the [`crate::store_row`] row with the
//!    lease, so the child records everything in the store and fences itself;
//! 3. when the child ends the lease is released (a no-op when it was lost) and the scratch
//!    directory removed. A child that dies with its parent (`PR_SET_PDEATHSIG`) leaves the
//!    lease to expire; the next claim repairs the session.
//!
//! A claim also takes a session whose last turn a lost writer left open when no input is
//! waiting for it (once that writer's lease is over): the worker then only closes the turn
//! ([`close_open_turn`]), without a child and without asking the model anything.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use dsh_persistence::{ChunkPacking, Compression, SessionFiles};
use dsh_session::{Event, decode_line, parse_header_line};
use dsh_store_pg::{Batch, Lease, Store, StoreError};
use serde_json::{Value, json};

use crate::store_row::{FENCED_EXIT, PLUGIN_NAME, TaskImageConfig};

/// Exit status of a turn stopped on request (as `dsh headless` after Ctrl-C).
const CANCELLED_EXIT: i32 = 130;
use crate::docker::DockerOptions;
use crate::transport::{LiveEvent, Transport, WorkQueue};

/// How a worker runs.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    pub url: String,
    pub pool: String,
    pub owner: String,
    pub lease_ttl: Duration,
    /// How often an idle worker looks for input.
    pub poll: Duration,
    /// Where turns keep their local copy of a session's log (one directory per turn).
    pub scratch: PathBuf,
    /// Stop once the pool has no input left (none waiting, none being run) instead of
    /// waiting for more.
    pub until_idle: bool,
    /// The `dsh` executable a turn runs.
    pub dsh: PathBuf,
    /// NATS: wake-ups instead of waiting `poll`, live events from each turn.
    pub transport: Option<String>,
    /// Run each session's commands in a container of its own ([`crate::docker`]).
    pub docker: Option<DockerOptions>,
}

/// Why a worker stopped.
#[derive(Debug)]
pub struct WorkerError(pub String);

impl std::fmt::Display for WorkerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn db(e: StoreError) -> WorkerError {
    WorkerError(format!("team store: {e}"))
}

/// How many failed turns in a row make `--until-idle` stop waiting for a session's input
/// (the waits between them come to 3.5 s).
const UNTIL_IDLE_GIVES_UP_AFTER: i32 = 3;

/// The end of an `--until-idle` run with nothing left it can run: an error naming the
/// sessions whose input never ran, if any.
async fn until_idle_end(store: &Store, pool: &str) -> Result<(), WorkerError> {
    let stalled = store
        .stalled(pool, UNTIL_IDLE_GIVES_UP_AFTER)
        .await
        .map_err(db)?;
    if stalled.is_empty() {
        return Ok(());
    }
    let named: Vec<String> = stalled
        .iter()
        .map(|(id, n)| format!("{id} ({n} failed turns)"))
        .collect();
    Err(WorkerError(format!(
        "input of {} session(s) could not run and is still waiting: {}; the errors above say why, and a worker without --until-idle keeps retrying it",
        stalled.len(),
        named.join(", ")
    )))
}

/// Runs the worker loop until input runs out (`until_idle`) or forever.
pub async fn run(options: &WorkerOptions) -> Result<(), WorkerError> {
    if let Some(docker) = &options.docker {
        crate::docker::prepare(docker).await.map_err(WorkerError)?;
    }
    let mut store = Store::connect(&options.url).await.map_err(db)?;
    store.migrate().await.map_err(db)?;
    std::fs::create_dir_all(&options.scratch).map_err(|e| {
        WorkerError(format!(
            "cannot create the scratch directory {}: {e}",
            options.scratch.display()
        ))
    })?;
    // With a transport, an idle worker sleeps until a wake-up (or `poll` as a fallback);
    // without one, or when NATS cannot be reached, it looks every `poll`.
    let transport = match &options.transport {
        Some(url) => match Transport::connect(url).await {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("dsh worker: {e}; looking for work in PostgreSQL only");
                None
            }
        },
        None => None,
    };
    let queue = match &transport {
        Some(t) => match t.work_queue(&options.pool).await {
            Ok(q) => Some(q),
            Err(e) => {
                eprintln!("dsh worker: {e}; looking for work in PostgreSQL only");
                None
            }
        },
        None => None,
    };
    let store_id = store.store_id().await.map_err(db)?;
    let mut last_sweep: Option<std::time::Instant> = None;
    loop {
        if options.docker.is_some()
            && last_sweep.is_none_or(|t| t.elapsed() >= crate::docker::SWEEP_EVERY)
        {
            last_sweep = Some(std::time::Instant::now());
            // A store or daemon that stopped answering must not hold the worker here.
            let swept = tokio::time::timeout(
                crate::docker::SWEEP_EVERY,
                crate::docker::sweep(&store, &store_id),
            )
            .await
            .unwrap_or_else(|_| Err("the sweep did not finish in time".into()));
            if let Err(e) = swept {
                eprintln!("dsh worker: cannot remove containers of ended leases: {e}");
            }
        }
        let claimed = tokio::time::timeout(
            options.lease_ttl,
            store.claim(&options.pool, &options.owner, options.lease_ttl),
        )
        .await;
        let Ok(claimed) = claimed else {
            eprintln!("dsh worker: the team store did not answer a claim; reconnecting");
            if let Ok(Ok(s)) =
                tokio::time::timeout(options.lease_ttl, Store::connect(&options.url)).await
            {
                store = s;
            }
            continue;
        };
        let lease = match claimed {
            Ok(Some(lease)) => lease,
            Ok(None)
                if options.until_idle
                    && store
                        .backlog_within(&options.pool, UNTIL_IDLE_GIVES_UP_AFTER)
                        .await
                        .map_err(db)?
                        == 0 =>
            {
                return until_idle_end(&store, &options.pool).await;
            }
            Ok(None) => {
                idle(queue.as_ref(), options.poll).await;
                continue;
            }
            // The database restarted or the network failed: connect again and go on.
            Err(e @ StoreError::Db(_)) => {
                eprintln!("dsh worker: {}; reconnecting", db(e));
                tokio::time::sleep(options.poll).await;
                if let Ok(s) = Store::connect(&options.url).await {
                    store = s;
                }
                continue;
            }
            Err(e) => return Err(db(e)),
        };
        let mut tried = None;
        let outcome = turn(
            &mut store,
            options,
            &lease,
            &store_id,
            transport.as_ref(),
            &mut tried,
        )
        .await;
        // A turn that failed before recording its input makes the session wait before its
        // next claim, longer each time, so the pool's other sessions go on.
        let failed = match &outcome {
            Ok(Some(status)) => {
                !status.success()
                    && !matches!(status.code(), Some(CANCELLED_EXIT) | Some(FENCED_EXIT))
            }
            Ok(None) => false,
            Err(_) => true,
        };
        // A store that stopped answering must not hold the worker: the lease then expires.
        let release = store.release_after(&lease, tried.filter(|_| failed));
        match tokio::time::timeout(options.lease_ttl, release).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("dsh worker: cannot release session {}: {e}", lease.session),
            Err(_) => eprintln!(
                "dsh worker: releasing session {} timed out; its lease will expire",
                lease.session
            ),
        }
        match outcome {
            Ok(None) => {}
            Ok(Some(status)) if status.success() => {}
            Ok(Some(status)) if status.code() == Some(CANCELLED_EXIT) => {
                eprintln!(
                    "dsh worker: the turn of session {} was cancelled",
                    lease.session
                );
            }
            Ok(Some(status)) if status.code() == Some(FENCED_EXIT) => {
                eprintln!(
                    "dsh worker: session {} was taken over (epoch {} fenced)",
                    lease.session, lease.epoch
                );
            }
            Ok(Some(status)) => {
                eprintln!(
                    "dsh worker: the turn of session {} ended with {status}",
                    lease.session
                );
                // The same input would fail the same way at once: give it a moment.
                tokio::time::sleep(options.poll.max(Duration::from_millis(500))).await;
            }
            Err(e) => {
                eprintln!("dsh worker: session {}: {e}", lease.session);
                tokio::time::sleep(options.poll.max(Duration::from_millis(500))).await;
            }
        }
    }
}

/// Waits for a wake-up of the pool, or `poll` at most.
async fn idle(queue: Option<&WorkQueue>, poll: Duration) {
    let Some(queue) = queue else {
        tokio::time::sleep(poll).await;
        return;
    };
    let started = tokio::time::Instant::now();
    // A stalled connection must not hold the worker past its own clock.
    let waited = tokio::time::timeout(poll + Duration::from_secs(1), queue.wait(poll))
        .await
        .unwrap_or_else(|_| Err("NATS did not answer a fetch".into()));
    if let Err(e) = waited {
        tracing::warn!("worker: {e}");
        // Do not spin on a failing transport, nor sleep past a second on it.
        tokio::time::sleep(
            poll.min(Duration::from_secs(1))
                .saturating_sub(started.elapsed()),
        )
        .await;
    }
}

/// Runs one turn of the claimed session (`tried`: the inbox row it took); `Ok(Some)` is the
/// child's exit status, `Ok(None)` says the claim had no input and only closed a turn a lost
/// writer left open.
async fn turn(
    store: &mut Store,
    options: &WorkerOptions,
    lease: &Lease,
    store_id: &str,
    transport: Option<&Transport>,
    tried: &mut Option<i64>,
) -> Result<Option<ExitStatus>, WorkerError> {
    let pending = store.pending(&lease.session).await.map_err(db)?;
    let Some(input) = pending.first() else {
        close_open_turn(store, lease, transport).await?;
        return Ok(None);
    };
    *tried = Some(input.id);
    let task = input_text(&input.body)?;
    // Input that names no model runs on the one the session's last input named, if any.
    let route = match crate::route::Route::from_input(&input.body).map_err(WorkerError)? {
        Some(route) => Some(route),
        None => match store
            .latest_input_field(&lease.session, input.id, "route")
            .await
            .map_err(db)?
        {
            Some(kept) => {
                crate::route::Route::from_input(&json!({ "route": kept })).map_err(WorkerError)?
            }
            None => None,
        },
    };
    let dir = options
        .scratch
        .join(format!("turn-{}", uuid::Uuid::new_v4().simple()));
    let sessions = dir.join("sessions");
    // Private: the patch names the store, password included when the URL has one.
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&dir)
        .map_err(|e| WorkerError(format!("cannot create {}: {e}", dir.display())))?;
    let resume = materialize(store, &lease.session, &sessions).await?;
    // The turn's image store: the session's images from the team store, and the images
    // queued with this input as files for the turn to store.
    let home = dir.join("home");
    let prepared = match copy_objects(store, &lease.session, &home).await {
        Ok(()) => task_images(&input.body, &dir),
        Err(e) => Err(e),
    };
    let task_images = prepared.inspect_err(|_| {
        let _ = std::fs::remove_dir_all(&dir);
    })?;
    let workspace =
        std::env::current_dir().map_err(|e| WorkerError(format!("no working directory: {e}")))?;
    let container = match &options.docker {
        Some(docker) => Some(
            crate::docker::start(
                docker,
                store_id,
                &lease.session,
                lease.epoch,
                &workspace,
                &options.dsh,
                &dir,
            )
            .await
            .map_err(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                WorkerError(format!("cannot start the session's container: {e}"))
            })?,
        ),
        None => None,
    };
    let patch = dir.join("team.patch.yml");
    let mut row = json!([
        {"id": "session-persistence-jsonl", "config": {
            "root": sessions.display().to_string(),
            "compression": "none",
        }},
        {"insert": [{
            "id": "team-session-store",
            "name": PLUGIN_NAME,
            "config": {
                "url": options.url,
                "session": lease.session,
                "owner": lease.owner,
                "epoch": lease.epoch,
                "leaseTtlMs": u64::try_from(options.lease_ttl.as_millis()).unwrap_or(u64::MAX),
                "consumes": [input.id],
                "messageId": input.body.get("messageId").and_then(Value::as_str),
                "transport": options.transport,
                "route": route,
                "cwd": input.body.get("cwd").and_then(Value::as_str),
                "workspace": workspace.display().to_string(),
                "answersApprovals": input.body.get("answersApprovals") == Some(&Value::Bool(true)),
                "taskImages": task_images,
            },
        }]},
        {"id": "attachment-local", "config": {"dshHome": home.display().to_string()}},
    ]);
    if let (Some(started), Some(rows)) = (&container, row.as_array_mut()) {
        rows.push(json!({"id": "sandbox", "config": {
            "runnerCommand": started.runner,
            "runnerFailureSignatures": [crate::docker::FAILURE_PREFIX, "Error response from daemon"],
        }}));
    }
    std::fs::write(&patch, row.to_string())
        .map_err(|e| WorkerError(format!("cannot write {}: {e}", patch.display())))?;
    let mut command = tokio::process::Command::new(&options.dsh);
    command.arg("headless").arg("--patch").arg(&patch);
    if resume {
        command.arg("--session-id").arg(&lease.session);
    }
    // The turn starts from the worker's launching environment, credentials included (this
    // process moved them out of its own environment at start).
    command.envs(dsh_host::environ::captured_secrets());
    // The task goes in on standard input (`-`), from a file in the private directory: as an
    // argument, a task over the kernel's 128 KiB per argument could never start, and the
    // input would be claimed again and again.
    let task_file = dir.join("task.txt");
    let stdin = std::fs::write(&task_file, task.as_bytes())
        .and_then(|()| std::fs::File::open(&task_file))
        .map_err(|e| {
            let _ = std::fs::remove_dir_all(&dir);
            WorkerError(format!("cannot write {}: {e}", task_file.display()))
        })?;
    command
        .arg("-")
        .stdin(stdin)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    // SAFETY: between fork and exec the closure makes one system call (prctl), which is
    // async-signal-safe, and allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
    let status = command
        .status()
        .await
        .map(Some)
        .map_err(|e| WorkerError(format!("cannot start {}: {e}", options.dsh.display())));
    let _ = std::fs::remove_dir_all(&dir);
    // The lifeline is let go only after the removal: the container does not end on its own
    // while the worker still runs.
    if let Some(crate::docker::Started { name, lifeline, .. }) = container {
        let removed =
            tokio::time::timeout(Duration::from_secs(30), crate::docker::remove(&name)).await;
        drop(lifeline);
        if !matches!(removed, Ok(Ok(()))) {
            eprintln!(
                "dsh worker: container {name} was not removed; the next claim of the session removes it"
            );
        }
    }
    status
}

/// Closes the turn a lost writer (killed, frozen past its lease, cut off from the store) left
/// open on a session with no input waiting, as loading its log would: a result for every
/// call left unanswered (its outcome unknown when the call was recorded as started), the
/// open step's end, then `turn/end` as interrupted. The turn is not run on: the model's
/// work may have had effects nobody recorded, so the next input decides what follows.
async fn close_open_turn(
    store: &mut Store,
    lease: &Lease,
    transport: Option<&Transport>,
) -> Result<(), WorkerError> {
    let events = read_events(store, &lease.session).await?;
    let closers = dsh_session::interrupted_turn_closers(&events);
    if closers.is_empty() {
        // The kept flag said open, the log says closed: believe the log.
        return store.settle_turn(lease).await.map_err(db);
    }
    let head = i64::try_from(events.len()).unwrap_or(i64::MAX);
    let batch = Batch {
        events: closers.iter().map(crate::store_row::record).collect(),
        ..Batch::default()
    };
    store.append_batch(lease, head, &batch).await.map_err(db)?;
    eprintln!(
        "dsh worker: session {}: closed the turn a lost worker left open ({} events)",
        lease.session,
        batch.events.len()
    );
    if let Some(transport) = transport {
        let live: Vec<LiveEvent> = batch
            .events
            .into_iter()
            .zip(head + 1..)
            .map(|(e, seq)| LiveEvent {
                seq,
                kind: e.kind,
                record: e.data,
            })
            .collect();
        transport.publish_events(&lease.session, &live).await;
    }
    Ok(())
}

/// The text a queued input carries.
fn input_text(body: &Value) -> Result<String, WorkerError> {
    body.get("text")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| WorkerError(format!("queued input has no `text`: {body}")))
}

/// Writes the stored session as a local log under `root`; `false` when it has no events
/// yet (the turn starts it fresh under its assigned id).
/// Writes session `session` of the store as a local log under `root` (plain, unpacked), as
/// a turn or `dsh sessions` reads it; `false` when it has no header yet (no turn ever ran).
pub async fn materialize(store: &Store, session: &str, root: &Path) -> Result<bool, WorkerError> {
    let row = store.session(session).await.map_err(db)?;
    let Some(header_text) = row.header else {
        if row.head_seq == 0 {
            return Ok(false);
        }
        return Err(WorkerError(format!(
            "session {session} has {} events but no header in the team store",
            row.head_seq
        )));
    };
    let header = parse_header_line(&header_text)
        .map_err(|e| WorkerError(format!("session {session}: stored header: {e}")))?;
    let events = read_events(store, session).await?;
    let root = root.to_path_buf();
    let id = session.to_string();
    tokio::task::spawn_blocking(move || {
        let files = SessionFiles::new(&root, Compression::None, ChunkPacking::Unpacked);
        let created = files.create(&header, &events).map(|_| ());
        files.release(&id);
        created
    })
    .await
    .map_err(|e| WorkerError(format!("materializing session {session}: {e}")))?
    .map_err(|e| WorkerError(format!("materializing session {session}: {e}")))?;
    Ok(true)
}

/// Copies `session`'s images from the team store into the image store under `home` that
/// its turn reads.
async fn copy_objects(store: &Store, session: &str, home: &Path) -> Result<(), WorkerError> {
    let ids = store.object_ids(session).await.map_err(db)?;
    if ids.is_empty() {
        return Ok(());
    }
    let local = Arc::new(dsh_attachments::AttachmentStore::new(
        home.join("attachments").join("v1"),
        dsh_attachments::ImageLimits::default(),
    ));
    for sha in ids {
        let Some(data) = store.object(session, &sha).await.map_err(db)? else {
            continue;
        };
        let local = local.clone();
        let what = format!("session {session}: stored image {sha}");
        tokio::task::spawn_blocking(move || local.put_object(&sha, &data))
            .await
            .map_err(|e| WorkerError(format!("{what}: {e}")))?
            .map_err(|e| WorkerError(format!("{what}: {}", e.message)))?;
    }
    Ok(())
}

/// The images queued with an input (`images`: `{mediaType, data, name?}`, data in base64),
/// written as files under `dir` for the turn, which stores them itself.
fn task_images(body: &Value, dir: &Path) -> Result<Vec<TaskImageConfig>, WorkerError> {
    let Some(images) = body.get("images").and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    let folder = dir.join("images");
    std::fs::create_dir_all(&folder)
        .map_err(|e| WorkerError(format!("cannot create {}: {e}", folder.display())))?;
    let mut out = Vec::new();
    for (i, image) in images.iter().enumerate() {
        let field = |key: &str| image.get(key).and_then(Value::as_str);
        let (Some(media_type), Some(data)) = (field("mediaType"), field("data")) else {
            return Err(WorkerError(format!(
                "queued image {i} has no mediaType or data string"
            )));
        };
        let bytes = dsh_attachments::decode_canonical_base64(data)
            .map_err(|e| WorkerError(format!("queued image {i}: {}", e.message)))?;
        let path = folder.join(i.to_string());
        std::fs::write(&path, bytes)
            .map_err(|e| WorkerError(format!("cannot write {}: {e}", path.display())))?;
        out.push(TaskImageConfig {
            path: path.display().to_string(),
            media_type: media_type.to_string(),
            name: field("name").map(str::to_owned),
        });
    }
    Ok(out)
}

/// Every stored event of `session`, decoded, in seq order.
pub async fn read_events(store: &Store, session: &str) -> Result<Vec<Arc<Event>>, WorkerError> {
    let mut events: Vec<Arc<Event>> = Vec::new();
    let mut after = 0;
    loop {
        let page = store.read(session, after, 1000).await.map_err(db)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for stored in &page {
            let next = events.len() as u64;
            let (record, _) = decode_line(&stored.data, next).map_err(|e| {
                WorkerError(format!(
                    "session {session}: stored event {}: {e}",
                    stored.seq
                ))
            })?;
            match record {
                dsh_session::Record::Event(e) => events.push(e),
                dsh_session::Record::Row(row) => row.expand_into(&mut events),
            }
        }
    }
    Ok(events)
}
