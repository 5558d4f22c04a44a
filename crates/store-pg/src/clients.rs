//! What a team's clients keep beside a session's input: withdrawals of input no turn has
//! taken, answers to the approvals a running turn asked for, and the image bytes the
//! session's log refers to.

use crate::{Store, StoreError};

/// What [`Store::withdraw`] did with a client's queued input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Withdrawal {
    /// Removed: no turn will run it.
    Withdrawn,
    /// Still waiting, but a lease holds the session, so a turn may be taking it.
    Held,
    /// A turn recorded it already.
    Recorded,
    /// The session has no input with that message id.
    Unknown,
}

/// What [`Store::answer_approval`] did with a client's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalAnswer {
    /// Kept: the turn waiting for it reads it.
    Accepted,
    /// Another answer came first.
    Answered,
    /// The turn already decided it (answered, cancelled or given up).
    Decided,
    /// The session's log asks no approval of that id.
    Unknown,
}

/// The answers an approval takes.
pub const APPROVAL_OUTCOMES: &[&str] = &["allowed-once", "rejected"];

impl Store {
    /// Withdraws `session`'s input whose body carries `messageId` = `message_id`, but only
    /// while no live lease holds the session: a worker reads its input after its claim, so
    /// input under a lease may already be running. The session row is locked for the check,
    /// so a claim either comes first (and the answer is [`Withdrawal::Held`]) or finds the
    /// input gone.
    pub async fn withdraw(
        &self,
        session: &str,
        message_id: &str,
    ) -> Result<Withdrawal, StoreError> {
        // Every sub-select sees the inbox as it was before the DELETE, so `waiting` still
        // counts the row the DELETE removes.
        let row = self
            .client
            .query_one(
                "WITH free AS (
                    SELECT id FROM dsh_sessions
                     WHERE id = $1
                       AND (lease_owner IS NULL OR lease_expires IS NULL OR lease_expires <= now())
                       FOR UPDATE
                 ), gone AS (
                    DELETE FROM dsh_inbox i USING free
                     WHERE i.session_id = free.id AND i.consumed_seq IS NULL
                       AND i.body ->> 'messageId' = $2
                 RETURNING i.id
                 )
                 SELECT (SELECT count(*) FROM gone),
                        (SELECT count(*) FROM dsh_inbox WHERE session_id = $1
                            AND body ->> 'messageId' = $2 AND consumed_seq IS NULL),
                        (SELECT count(*) FROM dsh_inbox WHERE session_id = $1
                            AND body ->> 'messageId' = $2 AND consumed_seq IS NOT NULL)",
                &[&session, &message_id],
            )
            .await?;
        let (gone, waiting, recorded): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        Ok(if gone > 0 {
            Withdrawal::Withdrawn
        } else if waiting > 0 {
            Withdrawal::Held
        } else if recorded > 0 {
            Withdrawal::Recorded
        } else {
            Withdrawal::Unknown
        })
    }

    /// Keeps `outcome` (one of [`APPROVAL_OUTCOMES`]) as the answer to approval `approval_id`
    /// of `session`, given by account `by`, when the session's log asked for it
    /// (`approval/asked`) and has not decided it yet; the first answer wins.
    pub async fn answer_approval(
        &self,
        session: &str,
        approval_id: &str,
        outcome: &str,
        by: Option<&str>,
    ) -> Result<ApprovalAnswer, StoreError> {
        let logged = |kind: &'static str| {
            format!(
                "EXISTS (SELECT 1 FROM dsh_events e WHERE e.session_id = $1 AND e.type = '{kind}'
                           AND e.data -> 'data' ->> 'id' = $2)"
            )
        };
        let row = self
            .client
            .query_one(
                &format!(
                    "SELECT {}, {}",
                    logged("approval/asked"),
                    logged("approval/decided")
                ),
                &[&session, &approval_id],
            )
            .await?;
        let (asked, decided): (bool, bool) = (row.get(0), row.get(1));
        if !asked {
            return Ok(ApprovalAnswer::Unknown);
        }
        if decided {
            return Ok(ApprovalAnswer::Decided);
        }
        let n = self
            .client
            .execute(
                "INSERT INTO dsh_approvals (session_id, approval_id, outcome, answered_by)
                 VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                &[&session, &approval_id, &outcome, &by],
            )
            .await?;
        Ok(if n == 1 {
            ApprovalAnswer::Accepted
        } else {
            ApprovalAnswer::Answered
        })
    }

    /// The answer a client gave to approval `approval_id` of `session`, if any yet.
    pub async fn approval_answer(
        &self,
        session: &str,
        approval_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let row = self
            .client
            .query_opt(
                "SELECT outcome FROM dsh_approvals WHERE session_id = $1 AND approval_id = $2",
                &[&session, &approval_id],
            )
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Keeps `data` (of `media_type`, digest `sha256` hex) among `session`'s objects; an
    /// object it has already is left as it is.
    pub async fn put_object(
        &self,
        session: &str,
        sha256: &str,
        media_type: &str,
        data: &[u8],
    ) -> Result<(), StoreError> {
        self.client
            .execute(
                "INSERT INTO dsh_objects (session_id, sha256, media_type, data)
                 VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                &[&session, &sha256, &media_type, &data],
            )
            .await?;
        Ok(())
    }

    /// The digests of `session`'s objects.
    pub async fn object_ids(&self, session: &str) -> Result<Vec<String>, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT sha256 FROM dsh_objects WHERE session_id = $1 ORDER BY sha256",
                &[&session],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// The bytes of `session`'s object `sha256`, if it has it.
    pub async fn object(&self, session: &str, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let row = self
            .client
            .query_opt(
                "SELECT data FROM dsh_objects WHERE session_id = $1 AND sha256 = $2",
                &[&session, &sha256],
            )
            .await?;
        Ok(row.map(|r| r.get(0)))
    }
}
