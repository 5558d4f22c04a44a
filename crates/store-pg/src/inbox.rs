//! The inbox: input queued for sessions under a pool, the claims that hand a session with
//! input to a worker together with its lease, and what a pool has left to run.

use std::time::Duration;

use serde_json::Value;

use crate::{InboxMessage, Lease, Store, StoreError, ttl_seconds};

impl Store {
    /// Queues `body` as input for `session` on `pool`; returns its inbox id.
    pub async fn enqueue(
        &self,
        session: &str,
        pool: &str,
        body: &Value,
    ) -> Result<i64, StoreError> {
        let row = self
            .client
            .query_one(
                "INSERT INTO dsh_inbox (session_id, pool, body) VALUES ($1, $2, $3) RETURNING id",
                &[&session, &pool, body],
            )
            .await?;
        Ok(row.get(0))
    }

    /// Claims, for `owner`, a session of `pool` whose lease is free or expired, taking its
    /// lease (next epoch, `ttl` by the database clock). First come sessions whose last turn a
    /// lost writer left open (their last input was queued on `pool`), then the session with
    /// the oldest pending input. `None`: nothing is runnable. Concurrent claims never return
    /// the same session.
    pub async fn claim(
        &self,
        pool: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let row = self
            .client
            .query_opt(
                "WITH candidate AS (
                    SELECT s.id FROM dsh_sessions s
                     WHERE (s.lease_owner IS NULL OR s.lease_expires IS NULL OR s.lease_expires <= now())
                       AND (s.retry_after IS NULL OR s.retry_after <= now())
                       AND (EXISTS (SELECT 1 FROM dsh_inbox i
                                     WHERE i.session_id = s.id AND i.pool = $1 AND i.consumed_seq IS NULL)
                            OR (s.turn_open AND (SELECT i.pool FROM dsh_inbox i WHERE i.session_id = s.id
                                                  ORDER BY i.id DESC LIMIT 1) = $1))
                     ORDER BY s.turn_open DESC,
                              (SELECT min(i.id) FROM dsh_inbox i
                                WHERE i.session_id = s.id AND i.pool = $1 AND i.consumed_seq IS NULL)
                     LIMIT 1
                     FOR UPDATE SKIP LOCKED
                 )
                 UPDATE dsh_sessions s
                    SET lease_owner = $2, lease_epoch = s.lease_epoch + 1,
                        lease_expires = now() + make_interval(secs => $3)
                   FROM candidate WHERE s.id = candidate.id
              RETURNING s.id, s.lease_epoch",
                &[&pool, &owner, &ttl_seconds(ttl)],
            )
            .await?;
        Ok(row.map(|r| Lease {
            session: r.get(0),
            owner: owner.to_string(),
            epoch: r.get(1),
        }))
    }

    /// How much of `pool`'s work is not done: inputs not recorded yet (held by a lease or
    /// not), and sessions whose last input came through `pool` with a turn still open (being
    /// run, or left open by a lost writer).
    pub async fn backlog(&self, pool: &str) -> Result<i64, StoreError> {
        self.backlog_within(pool, i32::MAX).await
    }

    /// [`Store::backlog`] without the input of sessions whose turns failed `failed_turns` or
    /// more times in a row before recording it (see [`Store::stalled`]).
    pub async fn backlog_within(&self, pool: &str, failed_turns: i32) -> Result<i64, StoreError> {
        let row = self
            .client
            .query_one(
                "SELECT (SELECT count(*) FROM dsh_inbox i JOIN dsh_sessions s ON s.id = i.session_id
                          WHERE i.pool = $1 AND i.consumed_seq IS NULL AND s.failed_turns < $2)
                      + (SELECT count(*) FROM dsh_sessions s
                          WHERE s.turn_open
                            AND (SELECT i.pool FROM dsh_inbox i WHERE i.session_id = s.id
                                  ORDER BY i.id DESC LIMIT 1) = $1)",
                &[&pool, &failed_turns],
            )
            .await?;
        Ok(row.get(0))
    }

    /// The sessions with input waiting on `pool` whose turns failed at least `failed_turns`
    /// times in a row before recording it, with that count, oldest input first.
    pub async fn stalled(
        &self,
        pool: &str,
        failed_turns: i32,
    ) -> Result<Vec<(String, i32)>, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT s.id, s.failed_turns FROM dsh_sessions s
                  WHERE s.failed_turns >= $2
                    AND EXISTS (SELECT 1 FROM dsh_inbox i WHERE i.session_id = s.id
                                   AND i.pool = $1 AND i.consumed_seq IS NULL)
                  ORDER BY (SELECT min(i.id) FROM dsh_inbox i WHERE i.session_id = s.id
                              AND i.consumed_seq IS NULL)",
                &[&pool, &failed_turns],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// The pending input of `session`, oldest first.
    pub async fn pending(&self, session: &str) -> Result<Vec<InboxMessage>, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT id, body FROM dsh_inbox
                  WHERE session_id = $1 AND consumed_seq IS NULL ORDER BY id",
                &[&session],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| InboxMessage {
                id: r.get(0),
                body: r.get(1),
            })
            .collect())
    }

    /// The value under `key` in the body of `session`'s latest input queued before inbox row
    /// `before` that has one (consumed or not), if any.
    pub async fn latest_input_field(
        &self,
        session: &str,
        before: i64,
        key: &str,
    ) -> Result<Option<Value>, StoreError> {
        let row = self
            .client
            .query_opt(
                "SELECT body -> $3::text FROM dsh_inbox
                  WHERE session_id = $1 AND id < $2
                    AND json_typeof(body -> $3::text) IS DISTINCT FROM 'null'
                    AND body -> $3::text IS NOT NULL
                  ORDER BY id DESC LIMIT 1",
                &[&session, &before, &key],
            )
            .await?;
        Ok(row.map(|r| r.get(0)))
    }
}
