//! Reading the store as `dsh sessions` reads a directory of logs: one line per session with
//! its turns, title and last prompt, and forks written whole.

use crate::{NewEvent, SESSION_COLUMNS, SessionRow, Store, StoreError, session_row, turn_state};

/// A session's row with what a listing shows of its log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionOverview {
    pub row: SessionRow,
    /// `turn/start` events.
    pub turns: i64,
    /// The last `session/title`.
    pub title: Option<String>,
    /// The time (ms) of the last prompt a person typed (`user/message` from a user).
    pub last_prompt_ms: Option<i64>,
    /// When the row was created (ms, database clock).
    pub created_ms: i64,
}

impl Store {
    /// [`Store::sessions`] with each session's turns, title and last prompt, computed by the
    /// database from the stored records.
    pub async fn overviews(
        &self,
        user: Option<&str>,
        limit: i64,
    ) -> Result<Vec<SessionOverview>, StoreError> {
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {SESSION_COLUMNS},
                        (SELECT count(*) FROM dsh_events e
                          WHERE e.session_id = dsh_sessions.id AND e.type = 'turn/start'),
                        (SELECT e.data->'data'->>'title' FROM dsh_events e
                          WHERE e.session_id = dsh_sessions.id AND e.type = 'session/title'
                          ORDER BY e.seq DESC LIMIT 1),
                        (SELECT max((e.data->>'time')::bigint) FROM dsh_events e
                          WHERE e.session_id = dsh_sessions.id AND e.type = 'user/message'
                            AND e.data->'data'->'source'->>'kind' = 'user'),
                        (extract(epoch FROM created_at) * 1000)::bigint
                       FROM dsh_sessions
                      WHERE $1::text IS NULL OR owner_user = $1
                      ORDER BY created_at DESC, id LIMIT $2"
                ),
                &[&user, &limit],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| SessionOverview {
                row: session_row(r),
                turns: r.get(10),
                title: r.get(11),
                last_prompt_ms: r.get(12),
                created_ms: r.get(13),
            })
            .collect())
    }

    /// Writes a whole new session in one transaction: its row (a fork of `parent` at its seq
    /// when given, belonging to `owner_user`), its header and its events as seqs 1…n under
    /// epoch 0 (no lease: nobody can run it before the transaction commits, and the first
    /// worker's lease is epoch 1). `false`, with nothing written, when the id exists.
    pub async fn import_session(
        &mut self,
        id: &str,
        parent: Option<(&str, i64)>,
        owner_user: Option<&str>,
        header: &str,
        events: &[NewEvent],
    ) -> Result<bool, StoreError> {
        let (parent_id, fork_seq) = match parent {
            Some((p, s)) => (Some(p), Some(s)),
            None => (None, None),
        };
        let head = i64::try_from(events.len()).unwrap_or(i64::MAX);
        let tx = self.client.transaction().await?;
        let n = tx
            .execute(
                "INSERT INTO dsh_sessions
                        (id, parent_id, fork_seq, owner_user, header, head_seq, turn_open)
                 VALUES ($1, $2, $3, $4, $5::text::json, $6, $7)
                 ON CONFLICT (id) DO NOTHING",
                &[
                    &id,
                    &parent_id,
                    &fork_seq,
                    &owner_user,
                    &header,
                    &head,
                    &turn_state(events).unwrap_or(false),
                ],
            )
            .await?;
        if n != 1 {
            return Ok(false);
        }
        let insert = tx
            .prepare(
                "INSERT INTO dsh_events (session_id, seq, epoch, type, data)
                 VALUES ($1, $2, 0, $3, $4::text::json)",
            )
            .await?;
        for (seq, event) in (1i64..).zip(events) {
            tx.execute(&insert, &[&id, &seq, &event.kind, &event.data])
                .await?;
        }
        // A fork's history refers to its parent's images: it gets their bytes too.
        if let Some(parent) = parent_id {
            tx.execute(
                "INSERT INTO dsh_objects (session_id, sha256, media_type, data)
                 SELECT $1, sha256, media_type, data FROM dsh_objects WHERE session_id = $2",
                &[&id, &parent],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(true)
    }
}
