//! NATS JetStream as the team's transport (`--transport nats://…` or `DSH_TRANSPORT`).
//! PostgreSQL stays the only record: everything sent here is a hint that something was
//! recorded, and every receiver can do without it.
//!
//! * `dsh.work.<pool>` (stream `DSH_WORK`, work-queue retention): a wake-up for the pool's
//!   workers once input is queued. A worker pulls on a durable consumer per pool
//!   (`dsh-work-<pool>`) and then claims in PostgreSQL; it still looks there on its own every
//!   `--poll-ms`, which also re-runs sessions whose worker died (their leases expire).
//! * `dsh.ev.<session>` (core NATS): each event right after its batch committed, as
//!   `<seq> <type>` on the first line and the record's JSON text, byte for byte, after it.
//!   Gateways send these to clients, de-duplicated by seq;
//!   a seq past the next expected one is a gap, filled from PostgreSQL first.
//!
//! Session ids and pool names go into subjects as one token: anything but ASCII letters,
//! digits, `-` and `_` is written `~xx` (hex), so `a.b` cannot become two tokens.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use futures::StreamExt as _;

/// The environment variable naming the transport when `--transport` is not given.
pub const TRANSPORT_ENV: &str = "DSH_TRANSPORT";

const WORK_STREAM: &str = "DSH_WORK";

/// A connection to NATS.
#[derive(Clone)]
pub struct Transport {
    client: async_nats::Client,
    /// One JetStream context for the connection's life: a context dropped while a publish
    /// waits for its acknowledgment takes the acknowledgment with it.
    js: jetstream::Context,
}

/// `name` as one subject token.
pub fn subject_token(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("~{b:02x}"));
        }
    }
    if out.is_empty() {
        out.push('~');
    }
    out
}

/// The subject control messages for the turn holding a session go to.
fn control_subject(session: &str) -> String {
    format!("dsh.ctl.{}", subject_token(session))
}

/// The subject a session's live events go to.
pub fn events_subject(session: &str) -> String {
    format!("dsh.ev.{}", subject_token(session))
}

fn work_subject(pool: &str) -> String {
    format!("dsh.work.{}", subject_token(pool))
}

/// A stored event as the transport carries it.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveEvent {
    pub seq: i64,
    pub kind: String,
    /// The record's JSON text.
    pub record: String,
}

impl Transport {
    /// Connects; fails within a couple of seconds when NATS is not there.
    pub async fn connect(url: &str) -> Result<Self, String> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(2))
            .connect(url)
            .await
            .map_err(|e| format!("cannot reach NATS at {url}: {e}"))?;
        let js = jetstream::new(client.clone());
        Ok(Self { client, js })
    }

    async fn work_stream(&self) -> Result<stream::Stream, String> {
        self.js
            .get_or_create_stream(stream::Config {
                name: WORK_STREAM.into(),
                subjects: vec!["dsh.work.>".into()],
                retention: stream::RetentionPolicy::WorkQueue,
                ..Default::default()
            })
            .await
            .map_err(|e| format!("NATS JetStream stream {WORK_STREAM}: {e}"))
    }

    /// Tells `pool`'s workers that input is waiting (acknowledged by JetStream).
    pub async fn wake(&self, pool: &str) -> Result<(), String> {
        self.work_stream().await?;
        let ack = self
            .js
            .publish(work_subject(pool), Bytes::new())
            .await
            .map_err(|e| format!("NATS: {e}"))?;
        ack.await.map_err(|e| format!("NATS: {e}"))?;
        Ok(())
    }

    /// The wake-ups of `pool`, for a worker.
    pub async fn work_queue(&self, pool: &str) -> Result<WorkQueue, String> {
        let stream = self.work_stream().await?;
        let name = format!("dsh-work-{}", subject_token(pool));
        let consumer = stream
            .get_or_create_consumer(
                &name,
                consumer::pull::Config {
                    durable_name: Some(name.clone()),
                    filter_subject: work_subject(pool),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| format!("NATS JetStream consumer {name}: {e}"))?;
        Ok(WorkQueue { consumer })
    }

    /// Sends `events` of `session` to its live subject (best effort: PostgreSQL has them).
    pub async fn publish_events(&self, session: &str, events: &[LiveEvent]) {
        let subject = events_subject(session);
        for e in events {
            let payload = format!("{} {}\n{}", e.seq, e.kind, e.record);
            if let Err(err) = self.client.publish(subject.clone(), payload.into()).await {
                tracing::debug!("NATS: live event of {session} not sent: {err}");
                return;
            }
        }
    }

    /// Asks the turn of `session` running under lease `epoch` to stop (best effort: the
    /// turn also learns it from PostgreSQL at its next lease renewal).
    pub async fn cancel(&self, session: &str, epoch: i64) -> Result<(), String> {
        self.client
            .publish(control_subject(session), format!("cancel {epoch}").into())
            .await
            .map_err(|e| format!("NATS: {e}"))?;
        self.flush().await;
        Ok(())
    }

    /// Control messages for `session`: yields the epoch each cancel names.
    pub async fn subscribe_cancels(&self, session: &str) -> Result<Cancels, String> {
        let subscriber = self
            .client
            .subscribe(control_subject(session))
            .await
            .map_err(|e| format!("NATS: {e}"))?;
        Ok(Cancels { subscriber })
    }

    /// Waits until everything published so far has been written to NATS (best effort).
    pub async fn flush(&self) {
        let _ = self.client.flush().await;
    }

    /// The live events of `session`, from now on.
    pub async fn subscribe_events(&self, session: &str) -> Result<LiveEvents, String> {
        let subscriber = self
            .client
            .subscribe(events_subject(session))
            .await
            .map_err(|e| format!("NATS: {e}"))?;
        Ok(LiveEvents { subscriber })
    }
}

/// A pool's wake-ups.
pub struct WorkQueue {
    consumer: consumer::PullConsumer,
}

impl WorkQueue {
    /// Waits up to `timeout` for a wake-up and acknowledges it; `Err` when NATS failed (the
    /// caller then waits on its own clock).
    pub async fn wait(&self, timeout: Duration) -> Result<bool, String> {
        // `batch` waits up to `expires` for a message (`fetch` would return at once).
        let mut batch = self
            .consumer
            .batch()
            .max_messages(1)
            .expires(timeout)
            .messages()
            .await
            .map_err(|e| format!("NATS: {e}"))?;
        match batch.next().await {
            Some(Ok(message)) => {
                let _ = message.ack().await;
                Ok(true)
            }
            Some(Err(e)) => Err(format!("NATS: {e}")),
            None => Ok(false),
        }
    }
}

/// Cancels sent to a session's turn.
pub struct Cancels {
    subscriber: async_nats::Subscriber,
}

impl Cancels {
    /// The epoch the next cancel names; `None` when the subscription ended.
    pub async fn next(&mut self) -> Option<i64> {
        loop {
            let message = self.subscriber.next().await?;
            let text = std::str::from_utf8(&message.payload).unwrap_or_default();
            if let Some(epoch) = text
                .strip_prefix("cancel ")
                .and_then(|e| e.trim().parse().ok())
            {
                return Some(epoch);
            }
        }
    }
}

/// A session's live events.
pub struct LiveEvents {
    subscriber: async_nats::Subscriber,
}

impl LiveEvents {
    /// The next live event; `None` when the subscription ended (NATS gone for good).
    /// Messages that do not parse are skipped.
    pub async fn next(&mut self) -> Option<LiveEvent> {
        loop {
            let message = self.subscriber.next().await?;
            if let Some(event) = parse_live(&message.payload) {
                return Some(event);
            }
        }
    }
}

/// A live event's payload: `<seq> <type>\n<record>`.
fn parse_live(payload: &[u8]) -> Option<LiveEvent> {
    let text = std::str::from_utf8(payload).ok()?;
    let (head, record) = text.split_once('\n')?;
    let (seq, kind) = head.split_once(' ')?;
    Some(LiveEvent {
        seq: seq.parse().ok()?,
        kind: kind.to_string(),
        record: record.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_one_subject_token() {
        assert_eq!(subject_token("session-ab_12"), "session-ab_12");
        assert_eq!(subject_token("a.b c*>"), "a~2eb~20c~2a~3e");
        assert_eq!(subject_token(""), "~");
        assert_ne!(subject_token("a.b"), subject_token("a~2eb"));
    }

    #[test]
    fn live_payloads_keep_the_record_text() {
        let record = r#"{"type":"x","data":{"t":"é\n"}}"#;
        let parsed = parse_live(format!("12 tool/call\n{record}").as_bytes()).unwrap();
        assert_eq!(
            parsed,
            LiveEvent {
                seq: 12,
                kind: "tool/call".into(),
                record: record.into()
            }
        );
        assert_eq!(parse_live(b"x y\n{}"), None);
        assert_eq!(parse_live(b"12 only-a-head"), None);
    }
}
