//! The session log on PostgreSQL (`dsh-store-pg`): the system of record when dsh runs beyond
//! one machine (`../shared/design/scale-out.md`).
//!
//! * **Tables** ([`MIGRATIONS`]): `dsh_sessions` (head seq, lease owner, epoch and expiry,
//!   fork origin) and `dsh_events` (one row per event, primary key `(session_id, seq)`, the
//!   event's type and its JSON payload exactly as the JSONL log writes it, and the epoch of the
//!   lease that wrote it).
//! * **One writer per session.** [`Store::acquire`] takes the lease when nobody holds it or the
//!   holder's lease expired, timed by the database clock (workers' clocks never matter), and
//!   bumps the epoch: the fencing token. [`Store::renew`] extends it while it is still ours.
//! * **Fenced appends.** [`Store::append`] is one transaction that moves the head from the seq
//!   the writer last saw to the new one only while the writer's lease is current (same owner,
//!   same epoch, not expired), then inserts the events with contiguous seqs. A writer that was
//!   fenced out (another took the lease) or froze past its expiry gets [`StoreError::Fenced`]
//!   and must stop its tools; a writer whose view of the head is stale gets
//!   [`StoreError::HeadMoved`]. Nothing half-written is ever visible.
//!
//! * **Dispatch without a broker.** Input for a session goes to `dsh_inbox` under a pool
//!   ([`Store::enqueue`]). [`Store::claim`] hands a worker of that pool the session with the
//!   oldest pending input whose lease is free or expired, taking its lease in the same
//!   statement (`FOR UPDATE SKIP LOCKED`: concurrent workers never claim the same session).
//!   The holder records the input as events with [`Store::append_consuming`], which marks the
//!   inbox rows consumed in the append's own fenced transaction, so input is recorded exactly
//!   once even when its worker dies between reading and appending.
//! * **Keeping a lease.** [`LeaseKeeper`] renews a lease every third of its TTL on a
//!   connection of its own and cancels its token the moment the lease may be lost: a renewal
//!   refused (another writer took it) or no successful renewal for a whole TTL (the database
//!   unreachable). The deadline is counted from when the last successful renewal was *sent*,
//!   which is never later than the expiry the database set, so the writer stops before any
//!   other writer can take over.
//!
//! Invariants: seqs of a session are 1, 2, 3, … without gaps or duplicates; the epochs of a
//! session's events never decrease along its seqs; an append either lands whole or not at all.

use std::time::Duration;

use dsh_process::AbortOnDrop;
use serde_json::Value;
use tokio_postgres::{Client, NoTls};

/// The schema, one migration per entry; [`Store::migrate`] applies those not yet applied.
pub const MIGRATIONS: &[&str] = &[
    "
CREATE TABLE dsh_sessions (
    id            text PRIMARY KEY,
    parent_id     text REFERENCES dsh_sessions(id),
    fork_seq      bigint,
    head_seq      bigint NOT NULL DEFAULT 0,
    lease_owner   text,
    lease_epoch   bigint NOT NULL DEFAULT 0,
    lease_expires timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE dsh_events (
    session_id text   NOT NULL REFERENCES dsh_sessions(id),
    seq        bigint NOT NULL,
    epoch      bigint NOT NULL,
    type       text   NOT NULL,
    data       json   NOT NULL,
    PRIMARY KEY (session_id, seq)
);
",
    "
CREATE TABLE dsh_inbox (
    id           bigserial PRIMARY KEY,
    session_id   text NOT NULL REFERENCES dsh_sessions(id),
    pool         text NOT NULL,
    body         json NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    consumed_seq bigint
);
CREATE INDEX dsh_inbox_pending ON dsh_inbox (pool, session_id, id) WHERE consumed_seq IS NULL;
",
    "
ALTER TABLE dsh_sessions ADD COLUMN header json;
",
    "
CREATE TABLE dsh_users (
    name         text PRIMARY KEY,
    token_sha256 text NOT NULL UNIQUE,
    admin        boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE dsh_sessions ADD COLUMN owner_user text REFERENCES dsh_users(name);
",
    "
ALTER TABLE dsh_sessions ADD COLUMN cancel_epoch bigint;
",
    "
ALTER TABLE dsh_users ADD COLUMN password_hash text;
CREATE TABLE dsh_login_tokens (
    token_sha256 text PRIMARY KEY,
    user_name    text NOT NULL REFERENCES dsh_users(name),
    expires_at   timestamptz NOT NULL
);
",
    "
CREATE TABLE dsh_store (id text PRIMARY KEY);
INSERT INTO dsh_store (id) VALUES (md5(random()::text || clock_timestamp()::text));
",
    // Whether the session's last turn has started and not ended: kept by every append, so
    // a claim can find turns a lost worker left open without reading any event.
    "
ALTER TABLE dsh_sessions ADD COLUMN turn_open boolean NOT NULL DEFAULT false;
UPDATE dsh_sessions s SET turn_open = true
 WHERE (SELECT e.type FROM dsh_events e
         WHERE e.session_id = s.id AND e.type IN ('turn/start', 'turn/end')
         ORDER BY e.seq DESC LIMIT 1) = 'turn/start';
CREATE INDEX dsh_sessions_open_turns ON dsh_sessions (id) WHERE turn_open;
",
    // A session's inputs, newest first: a turn whose input names no model runs on the one
    // the session's last input named.
    "
CREATE INDEX dsh_inbox_session ON dsh_inbox (session_id, id);
",
    // Turns that failed before recording their input, one after the other, and when the
    // session may be claimed again: a failing input waits longer each time instead of
    // holding its pool.
    "
ALTER TABLE dsh_sessions ADD COLUMN failed_turns integer NOT NULL DEFAULT 0;
ALTER TABLE dsh_sessions ADD COLUMN retry_after timestamptz;
",
    // Clients' answers to the approvals a running turn asked for (`approval/asked`): the
    // first answer per approval is kept, and the turn that waits reads it.
    "
CREATE TABLE dsh_approvals (
    session_id  text NOT NULL REFERENCES dsh_sessions(id),
    approval_id text NOT NULL,
    outcome     text NOT NULL,
    answered_by text,
    answered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, approval_id)
);
",
    // The image bytes a session's log refers to (`sha256:<hex>` attachment ids), kept per
    // session: whichever worker runs its next turn copies them into its turn's store.
    "
CREATE TABLE dsh_objects (
    session_id text  NOT NULL REFERENCES dsh_sessions(id),
    sha256     text  NOT NULL,
    media_type text  NOT NULL,
    data       bytea NOT NULL,
    PRIMARY KEY (session_id, sha256)
);
",
];

/// Whether `events`, appended in order, leave a turn open (`Some(true)`: the last turn event
/// among them starts one), close it (`Some(false)`), or say nothing about turns (`None`).
pub fn turn_state(events: &[NewEvent]) -> Option<bool> {
    events.iter().rev().find_map(|e| match e.kind.as_str() {
        "turn/start" => Some(true),
        "turn/end" => Some(false),
        _ => None,
    })
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The writer's lease is gone: another writer took it, or it expired.
    #[error(
        "session {session}: the lease of epoch {epoch} is no longer held (now epoch {current}); this writer is fenced out and must stop"
    )]
    Fenced {
        session: String,
        epoch: i64,
        current: i64,
    },
    /// The writer's head is stale: events were appended since it last looked.
    #[error("session {session}: expected head seq {expected}, the log is at {actual}")]
    HeadMoved {
        session: String,
        expected: i64,
        actual: i64,
    },
    /// No such session.
    #[error("session {0} does not exist in the store")]
    NoSession(String),
    /// An append claimed inbox rows it cannot consume.
    #[error("{0}")]
    Inbox(String),
    /// The database refused or the connection failed.
    #[error("PostgreSQL: {0}")]
    Db(#[from] tokio_postgres::Error),
}

/// A held lease: the fencing token every append carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub session: String,
    pub owner: String,
    pub epoch: i64,
}

/// An event to append: its type and its record, the JSON text the JSONL log writes for it
/// (kept byte for byte: the column is `json`, which stores the text as given).
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    pub kind: String,
    pub data: String,
}

/// An event as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredEvent {
    pub seq: i64,
    pub epoch: i64,
    pub kind: String,
    /// The record's JSON text, as appended.
    pub data: String,
}

/// One fenced append: the events, the inbox rows they record (`(inbox id, index into
/// events)`), and the session's header when this append is the one that sets it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    pub events: Vec<NewEvent>,
    pub consumed: Vec<(i64, usize)>,
    /// The session header's JSON text; stored only while the session has none.
    pub header: Option<String>,
}

/// Input waiting in a session's inbox.
#[derive(Clone, Debug, PartialEq)]
pub struct InboxMessage {
    pub id: i64,
    pub body: Value,
}

/// A session's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRow {
    pub id: String,
    pub head_seq: i64,
    pub lease_owner: Option<String>,
    pub lease_epoch: i64,
    /// Whether the lease is held now (by the database clock).
    pub leased: bool,
    /// The header's JSON text, once the first writer stored it.
    pub header: Option<String>,
    /// The account the session belongs to (`None`: created outside any account).
    pub owner_user: Option<String>,
    /// Its last turn started and has not ended: running now, or left open by a lost writer
    /// until a worker closes it.
    pub turn_open: bool,
    /// Turns in a row that failed before recording the waiting input.
    pub failed_turns: i32,
    /// How long until a worker may claim the session again after such failures; `None`
    /// when no wait is set.
    pub retry_in_ms: Option<i64>,
}

/// An account of the team store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    /// Sees every session, not only its own.
    pub admin: bool,
}

/// One connection to the store.
pub struct Store {
    client: Client,
    _connection: AbortOnDrop<()>,
}

fn ttl_seconds(ttl: Duration) -> f64 {
    ttl.as_secs_f64()
}

impl Store {
    /// Connects with a libpq-style URL or key-value string (`postgres://user@host/db`).
    /// Only plain connections: the store is meant for loopback or a private network.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
        let connection = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!("PostgreSQL connection ended: {e}");
            }
        });
        Ok(Self {
            client,
            _connection: AbortOnDrop(connection),
        })
    }

    /// Runs `sql` once on this connection (setup such as `SET search_path`).
    pub async fn execute_batch(&self, sql: &str) -> Result<(), StoreError> {
        self.client.batch_execute(sql).await?;
        Ok(())
    }

    /// Applies the migrations not applied yet, one transaction each; concurrent callers wait
    /// for each other (a transaction-scoped advisory lock), so any number of workers may call
    /// it at start.
    pub async fn migrate(&mut self) -> Result<(), StoreError> {
        // Up to date already (the common case): nothing to lock. Every command and worker
        // migrates at start, and the lock is the database's, so a migrator stalled inside
        // its transaction must not hold them all up.
        let newest = i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX);
        if let Ok(Some(row)) = self
            .client
            .query_opt("SELECT max(version) FROM dsh_schema_versions", &[])
            .await
            && row.get::<_, Option<i32>>(0) >= Some(newest)
        {
            return Ok(());
        }
        for (index, sql) in MIGRATIONS.iter().enumerate() {
            let version = i32::try_from(index + 1).unwrap_or(i32::MAX);
            let tx = self.client.transaction().await?;
            // A migrator that stops talking mid-transaction (a partition, a frozen process)
            // is cut off by the server, which releases the lock for the others.
            tx.batch_execute(
                "SET LOCAL idle_in_transaction_session_timeout = '10s';
                 SELECT pg_advisory_xact_lock(7411203);
                 CREATE TABLE IF NOT EXISTS dsh_schema_versions (version int PRIMARY KEY);",
            )
            .await?;
            let applied = tx
                .query_opt(
                    "SELECT 1 FROM dsh_schema_versions WHERE version = $1",
                    &[&version],
                )
                .await?
                .is_some();
            if !applied {
                tx.batch_execute(sql).await?;
                tx.execute(
                    "INSERT INTO dsh_schema_versions (version) VALUES ($1)",
                    &[&version],
                )
                .await?;
            }
            tx.commit().await?;
        }
        Ok(())
    }

    /// This store's identity, made once by its migration: resources a worker leaves outside
    /// the database (containers) carry it, so that workers of another store sharing the
    /// host leave them alone.
    pub async fn store_id(&self) -> Result<String, StoreError> {
        let row = self
            .client
            .query_one("SELECT id FROM dsh_store LIMIT 1", &[])
            .await?;
        Ok(row.get(0))
    }

    /// Creates session `id` (a fork of `parent` at its seq when given); `false` when it exists.
    pub async fn create_session(
        &self,
        id: &str,
        parent: Option<(&str, i64)>,
    ) -> Result<bool, StoreError> {
        let (parent_id, fork_seq) = match parent {
            Some((p, s)) => (Some(p), Some(s)),
            None => (None, None),
        };
        let n = self
            .client
            .execute(
                "INSERT INTO dsh_sessions (id, parent_id, fork_seq) VALUES ($1, $2, $3)
                 ON CONFLICT (id) DO NOTHING",
                &[&id, &parent_id, &fork_seq],
            )
            .await?;
        Ok(n == 1)
    }

    /// Creates session `id` belonging to account `user`; `false` when the id exists.
    pub async fn create_owned_session(&self, id: &str, user: &str) -> Result<bool, StoreError> {
        let n = self
            .client
            .execute(
                "INSERT INTO dsh_sessions (id, owner_user) VALUES ($1, $2)
                 ON CONFLICT (id) DO NOTHING",
                &[&id, &user],
            )
            .await?;
        Ok(n == 1)
    }

    /// Sessions, newest first, at most `limit`: those of account `user`, or all with `None`.
    pub async fn sessions(
        &self,
        user: Option<&str>,
        limit: i64,
    ) -> Result<Vec<SessionRow>, StoreError> {
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM dsh_sessions
                      WHERE $1::text IS NULL OR owner_user = $1
                      ORDER BY created_at DESC, id LIMIT $2"
                ),
                &[&user, &limit],
            )
            .await?;
        Ok(rows.iter().map(session_row).collect())
    }

    /// Takes the lease of `session` for `owner` when it is free or expired, for `ttl` by the
    /// database clock, with the next epoch. `None`: another owner holds it.
    pub async fn acquire(
        &self,
        session: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let row = self
            .client
            .query_opt(
                "UPDATE dsh_sessions
                    SET lease_owner = $2, lease_epoch = lease_epoch + 1,
                        lease_expires = now() + make_interval(secs => $3)
                  WHERE id = $1
                    AND (lease_owner IS NULL OR lease_expires IS NULL OR lease_expires <= now())
              RETURNING lease_epoch",
                &[&session, &owner, &ttl_seconds(ttl)],
            )
            .await?;
        match row {
            Some(r) => Ok(Some(Lease {
                session: session.to_string(),
                owner: owner.to_string(),
                epoch: r.get(0),
            })),
            None => {
                self.session(session).await?;
                Ok(None)
            }
        }
    }

    /// Extends `lease` by `ttl` from now; `false` when it is no longer held (the holder must
    /// stop: it is fenced).
    pub async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool, StoreError> {
        Ok(self.renew_watching(lease, ttl).await?.is_some())
    }

    /// [`Store::renew`] that also tells whether the turn running under the lease was asked
    /// to stop ([`Store::request_cancel`]): `None` when the lease is no longer held.
    pub async fn renew_watching(
        &self,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<Option<bool>, StoreError> {
        let row = self
            .client
            .query_opt(
                "UPDATE dsh_sessions SET lease_expires = now() + make_interval(secs => $4)
                  WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3 AND lease_expires > now()
              RETURNING coalesce(cancel_epoch = lease_epoch, false)",
                &[
                    &lease.session,
                    &lease.owner,
                    &lease.epoch,
                    &ttl_seconds(ttl),
                ],
            )
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Asks the turn running on `session` now to stop: returns the epoch of the lease it runs
    /// under, or `None` when no turn holds the session.
    pub async fn request_cancel(&self, session: &str) -> Result<Option<i64>, StoreError> {
        let row = self
            .client
            .query_opt(
                "UPDATE dsh_sessions SET cancel_epoch = lease_epoch
                  WHERE id = $1 AND lease_owner IS NOT NULL AND lease_expires > now()
              RETURNING lease_epoch",
                &[&session],
            )
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Gives `lease` up (the next writer need not wait for it to expire); a no-op when it was
    /// already lost.
    pub async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.release_after(lease, None).await
    }

    /// [`Store::release`] after a turn that failed on inbox row `failed`. When that input is
    /// still waiting (the turn failed before recording it), the session is not claimed again
    /// for a while that doubles with each such failure in a row, from half a second up to a
    /// minute, so an input that cannot run does not hold its pool's workers; any other
    /// release clears the count.
    pub async fn release_after(
        &self,
        lease: &Lease,
        failed: Option<i64>,
    ) -> Result<(), StoreError> {
        self.client
            .execute(
                "WITH stuck AS (
                    SELECT EXISTS (SELECT 1 FROM dsh_inbox i
                                    WHERE i.id = $4 AND i.session_id = $1
                                      AND i.consumed_seq IS NULL) AS yes
                 )
                 UPDATE dsh_sessions s SET lease_owner = NULL, lease_expires = NULL,
                        failed_turns = CASE WHEN stuck.yes THEN s.failed_turns + 1 ELSE 0 END,
                        retry_after = CASE WHEN stuck.yes
                            THEN now() + make_interval(secs => least(60, 0.5 * power(2, least(s.failed_turns, 16))))
                            ELSE NULL END
                   FROM stuck
                  WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3",
                &[&lease.session, &lease.owner, &lease.epoch, &failed],
            )
            .await?;
        Ok(())
    }

    /// Appends `events` after seq `expected_head` under `lease`, in one transaction; returns
    /// the new head. Fails whole with [`StoreError::Fenced`] when the lease is no longer
    /// current and with [`StoreError::HeadMoved`] when the head is not `expected_head`.
    pub async fn append(
        &mut self,
        lease: &Lease,
        expected_head: i64,
        events: &[NewEvent],
    ) -> Result<i64, StoreError> {
        self.append_inner(lease, expected_head, events, &[], None)
            .await
    }

    /// [`Store::append`] of a whole [`Batch`]: its events, the inbox rows they consume and the
    /// header, all in the one fenced transaction.
    pub async fn append_batch(
        &mut self,
        lease: &Lease,
        expected_head: i64,
        batch: &Batch,
    ) -> Result<i64, StoreError> {
        self.append_inner(
            lease,
            expected_head,
            &batch.events,
            &batch.consumed,
            batch.header.as_deref(),
        )
        .await
    }

    async fn append_inner(
        &mut self,
        lease: &Lease,
        expected_head: i64,
        events: &[NewEvent],
        consumed: &[(i64, usize)],
        header: Option<&str>,
    ) -> Result<i64, StoreError> {
        let count = i64::try_from(events.len()).unwrap_or(i64::MAX);
        let tx = self.client.transaction().await?;
        let turn_open = turn_state(events);
        let moved = tx
            .query_opt(
                "UPDATE dsh_sessions
                    SET head_seq = head_seq + $5, turn_open = coalesce($6, turn_open)
                  WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3
                    AND lease_expires > now() AND head_seq = $4
              RETURNING head_seq",
                &[
                    &lease.session,
                    &lease.owner,
                    &lease.epoch,
                    &expected_head,
                    &count,
                    &turn_open,
                ],
            )
            .await?;
        let Some(moved) = moved else {
            drop(tx);
            return Err(self.why_refused(lease, expected_head).await);
        };
        let head: i64 = moved.get(0);
        if !events.is_empty() {
            let insert = tx
                .prepare(
                    "INSERT INTO dsh_events (session_id, seq, epoch, type, data)
                     VALUES ($1, $2, $3, $4, $5::text::json)",
                )
                .await?;
            for (offset, event) in events.iter().enumerate() {
                let seq = expected_head + 1 + i64::try_from(offset).unwrap_or(i64::MAX);
                tx.execute(
                    &insert,
                    &[&lease.session, &seq, &lease.epoch, &event.kind, &event.data],
                )
                .await?;
            }
        }
        for (inbox_id, index) in consumed {
            let seq = expected_head + 1 + i64::try_from(*index).unwrap_or(i64::MAX);
            if *index >= events.len() {
                return Err(StoreError::Inbox(format!(
                    "inbox row {inbox_id} is consumed by event {index}, but the append holds {} events",
                    events.len()
                )));
            }
            let n = tx
                .execute(
                    "UPDATE dsh_inbox SET consumed_seq = $3
                      WHERE id = $1 AND session_id = $2 AND consumed_seq IS NULL",
                    &[inbox_id, &lease.session, &seq],
                )
                .await?;
            if n != 1 {
                return Err(StoreError::Inbox(format!(
                    "inbox row {inbox_id} is not pending input of session {}",
                    lease.session
                )));
            }
        }
        if let Some(header) = header {
            tx.execute(
                "UPDATE dsh_sessions SET header = $2::text::json WHERE id = $1 AND header IS NULL",
                &[&lease.session, &header],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(head)
    }

    /// Records under `lease` that the session has no open turn, when its log says so but
    /// the kept flag does not (a store written before the flag, or by hand). Fenced like an
    /// append.
    pub async fn settle_turn(&self, lease: &Lease) -> Result<(), StoreError> {
        let n = self
            .client
            .execute(
                "UPDATE dsh_sessions SET turn_open = false
                  WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3 AND lease_expires > now()",
                &[&lease.session, &lease.owner, &lease.epoch],
            )
            .await?;
        if n == 1 {
            Ok(())
        } else {
            Err(self.why_refused(lease, -1).await)
        }
    }

    /// The working directory `session` is in: its latest `working-directory/change`, else the
    /// directory its header records; `None` before its first turn.
    pub async fn working_directory(&self, session: &str) -> Result<Option<String>, StoreError> {
        let row = self
            .client
            .query_one(
                "SELECT coalesce(
                    (SELECT e.data -> 'data' ->> 'cwd' FROM dsh_events e
                      WHERE e.session_id = $1 AND e.type = 'working-directory/change'
                      ORDER BY e.seq DESC LIMIT 1),
                    (SELECT s.header ->> 'cwd' FROM dsh_sessions s WHERE s.id = $1))",
                &[&session],
            )
            .await?;
        Ok(row.get(0))
    }

    /// [`Store::append`], and in the same transaction marks each inbox row of `consumed`
    /// (`(inbox id, index into events)`) consumed by that event's seq. An inbox row already
    /// consumed, or of another session, fails the whole append.
    pub async fn append_consuming(
        &mut self,
        lease: &Lease,
        expected_head: i64,
        events: &[NewEvent],
        consumed: &[(i64, usize)],
    ) -> Result<i64, StoreError> {
        self.append_inner(lease, expected_head, events, consumed, None)
            .await
    }

    /// Why an append under `lease` after `expected_head` moved nothing.
    async fn why_refused(&self, lease: &Lease, expected_head: i64) -> StoreError {
        let row = match self
            .client
            .query_opt(
                "SELECT head_seq, lease_owner, lease_epoch, lease_expires > now()
                   FROM dsh_sessions WHERE id = $1",
                &[&lease.session],
            )
            .await
        {
            Ok(Some(r)) => r,
            Ok(None) => return StoreError::NoSession(lease.session.clone()),
            Err(e) => return StoreError::Db(e),
        };
        let head: i64 = row.get(0);
        let owner: Option<String> = row.get(1);
        let epoch: i64 = row.get(2);
        let live: Option<bool> = row.get(3);
        if owner.as_deref() != Some(lease.owner.as_str())
            || epoch != lease.epoch
            || live != Some(true)
        {
            StoreError::Fenced {
                session: lease.session.clone(),
                epoch: lease.epoch,
                current: epoch,
            }
        } else {
            StoreError::HeadMoved {
                session: lease.session.clone(),
                expected: expected_head,
                actual: head,
            }
        }
    }

    /// The events of `session` after seq `after`, at most `limit`, in seq order.
    pub async fn read(
        &self,
        session: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT seq, epoch, type, data::text FROM dsh_events
                  WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                &[&session, &after, &limit],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| StoredEvent {
                seq: r.get(0),
                epoch: r.get(1),
                kind: r.get(2),
                data: r.get(3),
            })
            .collect())
    }

    /// The row of `session`.
    pub async fn session(&self, session: &str) -> Result<SessionRow, StoreError> {
        let row = self
            .client
            .query_opt(
                &format!("SELECT {SESSION_COLUMNS} FROM dsh_sessions WHERE id = $1"),
                &[&session],
            )
            .await?
            .ok_or_else(|| StoreError::NoSession(session.to_string()))?;
        Ok(session_row(&row))
    }
}

/// The columns [`session_row`] reads, in its order (`dsh_sessions` may be aliased `s`).
const SESSION_COLUMNS: &str = "id, head_seq, lease_owner, lease_epoch,
        coalesce(lease_expires > now(), false), header::text, owner_user, turn_open,
        failed_turns, (greatest(0, extract(epoch FROM retry_after - now())) * 1000)::bigint";

/// A [`SessionRow`] from the first ten columns, [`SESSION_COLUMNS`].
fn session_row(row: &tokio_postgres::Row) -> SessionRow {
    SessionRow {
        id: row.get(0),
        head_seq: row.get(1),
        lease_owner: row.get(2),
        lease_epoch: row.get(3),
        leased: row.get(4),
        header: row.get(5),
        owner_user: row.get(6),
        turn_open: row.get(7),
        failed_turns: row.get(8),
        retry_in_ms: row.get(9),
    }
}

mod accounts;
mod clients;
mod inbox;
mod lease;
mod listing;

pub use accounts::Account;
pub use clients::{APPROVAL_OUTCOMES, ApprovalAnswer, Withdrawal};
pub use lease::LeaseKeeper;
pub use listing::SessionOverview;

#[cfg(test)]
mod tests;
