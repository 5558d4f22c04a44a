//! `GET /api/events[?session=<id>]`: the server-sent event stream a page is driven by.
//!
//! Frames (`event:` name, one JSON `data:` line):
//! * `hello` `{instance, version}` first; `host` `{type: "lists"}` when lists changed;
//! * `snapshot` `{sessionId, header, next, events, readOnly, reset, elided}`: the whole
//!   session (stream deltas of committed steps elided — their message carries the content);
//! * `events` `[event…]`: committed events, seq-contiguous, the first one is the previous
//!   frame's `next`;
//! * `live` (baseline) / `status` / `queue` / `approvals` / `questions` / `output` / `agent-error`:
//!   live state that is not in the log;
//! * `shutdown` before the server stops; `: keepalive` comments every 15 s.
//!
//! `snapshot` and `events` carry `id: <instance>:<next>`; the browser's automatic reconnect
//! sends it back as `Last-Event-ID`, and the stream resumes with exactly the events after
//! it (no gap, no duplicate). A cursor of another launch, or beyond the log, gets a
//! snapshot with `reset: true`. The in-memory log is the replay buffer: a slow client
//! never makes the server buffer; it reads a bigger batch next time.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dsh_session::{Event, RecordFormat, types, write_event};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::hosting::{Hosted, queue_items};
use crate::hub::Signal;
use crate::state::WebState;

/// Largest `events` frame (a bigger backlog is sent in several frames).
const MAX_BATCH_BYTES: usize = 512 * 1024;
const KEEPALIVE: Duration = Duration::from_secs(15);

/// Where a reconnecting client stands: `Last-Event-ID` (or `since`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resume {
    pub instance: String,
    pub next: u64,
}

impl Resume {
    /// Parses `<instance>:<next>`; anything else is no cursor (a fresh snapshot).
    pub fn parse(text: &str) -> Option<Self> {
        let (instance, next) = text.trim().rsplit_once(':')?;
        if instance.is_empty() || instance.len() > 64 {
            return None;
        }
        Some(Self {
            instance: instance.to_string(),
            next: next.parse().ok()?,
        })
    }
}

/// One SSE message.
pub fn frame(event: &str, id: Option<&str>, data: &str) -> Bytes {
    let mut s = String::with_capacity(data.len() + 48);
    s.push_str("event: ");
    s.push_str(event);
    s.push('\n');
    if let Some(id) = id {
        s.push_str("id: ");
        s.push_str(id);
        s.push('\n');
    }
    // JSON text never holds a raw line break, so one data line carries it.
    s.push_str("data: ");
    s.push_str(data);
    s.push_str("\n\n");
    Bytes::from(s)
}

pub(crate) fn event_json(e: &Event) -> String {
    let mut line = String::new();
    write_event(&mut line, e, RecordFormat::Full);
    line
}

/// The events a snapshot carries: everything except stream deltas of steps whose
/// `assistant/message` is already in the log.
pub fn elide_committed_chunks(events: &[Arc<Event>]) -> (Vec<&Arc<Event>>, usize) {
    let committed: HashSet<(u64, u64)> = events
        .iter()
        .filter(|e| e.is(types::ASSISTANT_MESSAGE))
        .filter_map(|e| Some((e.turn()?, e.data.get("step")?.as_u64()?)))
        .collect();
    let mut elided = 0;
    let kept = events
        .iter()
        .filter(|e| {
            let drop = e.is(types::ASSISTANT_CHUNK)
                && e.turn()
                    .zip(e.data.get("step").and_then(Value::as_u64))
                    .is_some_and(|k| committed.contains(&k));
            elided += usize::from(drop);
            !drop
        })
        .collect();
    (kept, elided)
}

/// One page's event stream: the frames it is sent, with cursors of this launch. The local
/// sessions' stream and the one in front of a team gateway (`remote`) both write through it.
pub(crate) struct Stream {
    pub(crate) state: Arc<WebState>,
    pub(crate) tx: mpsc::Sender<Bytes>,
}

/// The client went away.
pub(crate) struct Gone;

impl Stream {
    pub(crate) async fn send(&self, bytes: Bytes) -> Result<(), Gone> {
        self.tx.send(bytes).await.map_err(|_| Gone)
    }

    pub(crate) async fn send_json(&self, event: &str, value: &Value) -> Result<(), Gone> {
        self.send(frame(event, None, &value.to_string())).await
    }

    fn cursor(&self, next: u64) -> String {
        format!("{}:{next}", self.state.instance)
    }

    /// The first frames of every stream: the reconnect delay and `hello`.
    pub(crate) async fn hello(&self) -> Result<(), Gone> {
        self.send(Bytes::from_static(b"retry: 1000\n\n")).await?;
        self.send_json(
            "hello",
            &json!({"instance": self.state.instance, "version": env!("CARGO_PKG_VERSION")}),
        )
        .await
    }

    /// Sends `events` (a whole log) as a `snapshot` of session `id`; returns its cursor.
    pub(crate) async fn send_snapshot(
        &self,
        id: &str,
        header: &Value,
        events: &[Arc<Event>],
        read_only: bool,
        reset: bool,
    ) -> Result<u64, Gone> {
        let next = events.last().map_or(0, |e| e.seq + 1);
        let (kept, elided) = elide_committed_chunks(events);
        let mut body = String::with_capacity(kept.len() * 256 + 256);
        body.push_str("{\"sessionId\":");
        body.push_str(&Value::from(id).to_string());
        body.push_str(",\"header\":");
        body.push_str(&header.to_string());
        body.push_str(&format!(
            ",\"next\":{next},\"readOnly\":{read_only},\"reset\":{reset},\"elided\":{elided},\"events\":["
        ));
        for (i, e) in kept.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            body.push_str(&event_json(e));
        }
        body.push_str("]}");
        self.send(frame("snapshot", Some(&self.cursor(next)), &body))
            .await?;
        Ok(next)
    }

    /// Sends the events of `list` from `*next` on as contiguous `events` frames, advancing
    /// `*next`; earlier ones are skipped, and a hole stops the sending (it would be a bug).
    pub(crate) async fn send_events(
        &self,
        session: &str,
        list: &[Arc<Event>],
        next: &mut u64,
    ) -> Result<(), Gone> {
        let mut batch = String::new();
        for e in list {
            if e.seq < *next {
                continue;
            }
            if e.seq != *next {
                // The logs handed over are dense; a hole would be a bug — never paper over it.
                tracing::error!(session = %session, expected = *next, got = e.seq, "web: non-contiguous session log");
                break;
            }
            batch.push(if batch.is_empty() { '[' } else { ',' });
            batch.push_str(&event_json(e));
            *next += 1;
            if batch.len() >= MAX_BATCH_BYTES {
                batch.push(']');
                self.send(frame("events", Some(&self.cursor(*next)), &batch))
                    .await?;
                batch.clear();
            }
        }
        if !batch.is_empty() {
            batch.push(']');
            self.send(frame("events", Some(&self.cursor(*next)), &batch))
                .await?;
        }
        Ok(())
    }

    pub(crate) async fn fail(&self, id: &str, code: &str, message: &str) -> Result<(), Gone> {
        self.send_json(
            "session-error",
            &json!({"sessionId": id, "code": code, "message": message}),
        )
        .await
    }

    /// A snapshot of the session; returns the cursor (`next`) it establishes.
    async fn snapshot(&self, hosted: &Hosted, reset: bool) -> Result<Option<u64>, Gone> {
        let id = hosted.id.clone();
        let (header, events, read_only) = match hosted.agent() {
            Some(agent) => (agent.session().header(), agent.session().events(), false),
            None => {
                let Some(files) = self.state.files.clone() else {
                    return self
                        .fail(&id, "session-not-found", "session persistence is disabled")
                        .await
                        .map(|()| None);
                };
                let owned = id.clone();
                match tokio::task::spawn_blocking(move || files.inspect(&owned)).await {
                    Ok(Ok(loaded)) => (loaded.header, loaded.events, true),
                    Ok(Err(e)) => {
                        tracing::warn!(session = %id, "web: cannot open session: {e}");
                        let e = crate::hosting::persistence_error(&id, e);
                        return self
                            .fail(&id, e.code.as_str(), &e.message)
                            .await
                            .map(|()| None);
                    }
                    Err(e) => {
                        return self
                            .fail(&id, "internal", &e.to_string())
                            .await
                            .map(|()| None);
                    }
                }
            }
        };
        self.send_snapshot(&id, &header.to_value(), &events, read_only, reset)
            .await
            .map(Some)
    }

    /// Committed events from `next` on; returns the new cursor.
    async fn catch_up(&self, hosted: &Hosted, mut next: u64) -> Result<u64, Gone> {
        let Some(agent) = hosted.agent() else {
            return Ok(next);
        };
        let events = agent.session().events_from(next);
        self.send_events(&hosted.id, &events, &mut next).await?;
        Ok(next)
    }

    /// Live state that is not in the log.
    async fn baseline(&self, hosted: &Hosted) -> Result<(), Gone> {
        let agent = hosted.agent();
        let value = json!({
            "sessionId": hosted.id,
            "live": agent.is_some(),
            "running": agent.as_ref().is_some_and(|a| a.status() == dsh_agent::AgentStatus::Running),
            "queue": agent.as_ref().map_or(json!([]), queue_items),
            "approvals": self.state.approvals.of_session(&hosted.id),
            "questions": self.state.questions.of_session(&hosted.id),
            "outputs": hosted.outputs(),
            "error": hosted.last_error(),
        });
        self.send_json("live", &value).await
    }

    async fn signal(&self, hosted: Option<&Hosted>, signal: Signal) -> Result<(), Gone> {
        if let Signal::Lists = signal {
            return self.send_json("host", &json!({"type": "lists"})).await;
        }
        let Some(hosted) = hosted.filter(|h| signal.session() == Some(h.id.as_str())) else {
            return Ok(());
        };
        match signal {
            Signal::Lists => Ok(()),
            Signal::Status { session, running } => {
                self.send_json("status", &json!({"sessionId": session, "running": running}))
                    .await
            }
            Signal::Queue(id) => {
                let items = hosted.agent().map_or(json!([]), |a| queue_items(&a));
                self.send_json("queue", &json!({"sessionId": id, "items": items}))
                    .await
            }
            Signal::Approvals(id) => {
                let items = self.state.approvals.of_session(&id);
                self.send_json("approvals", &json!({"sessionId": id, "items": items}))
                    .await
            }
            Signal::Questions(id) => {
                let items = self.state.questions.of_session(&id);
                self.send_json("questions", &json!({"sessionId": id, "items": items}))
                    .await
            }
            Signal::Output {
                session,
                call,
                stream,
                text,
            } => {
                self.send_json(
                    "output",
                    &json!({"sessionId": session, "callId": call, "stream": stream, "text": text}),
                )
                .await
            }
            Signal::AgentError { session, message } => {
                self.send_json(
                    "agent-error",
                    &json!({"sessionId": session, "message": message}),
                )
                .await
            }
        }
    }
}

/// Starts one stream, which runs until the client leaves or the server shuts down.
///
/// The stream subscribes to live signals here, before the response goes out: a client that
/// sees the response and then prompts cannot outrun the subscription (it would miss the
/// turn's `status` frames).
pub fn spawn(
    state: Arc<WebState>,
    session: Option<String>,
    resume: Option<Resume>,
    tx: mpsc::Sender<Bytes>,
) {
    let signals = state.hub.subscribe();
    tokio::spawn(async move {
        let stream = Stream { state, tx };
        let _ = serve(&stream, session, resume, signals).await;
    });
}

async fn serve(
    s: &Stream,
    session: Option<String>,
    resume: Option<Resume>,
    mut signals: broadcast::Receiver<Signal>,
) -> Result<(), Gone> {
    let state = s.state.clone();
    // Subscribed before reading anything: nothing that happens from here on is missed.
    let hosted = session.as_deref().map(|id| state.hosting.entry(id));
    let mut rev = hosted.as_ref().map(|h| h.subscribe());
    s.hello().await?;
    let mut generation = rev.as_mut().map_or(0, |r| r.borrow_and_update().generation);
    let mut next = None;
    if let Some(h) = &hosted {
        let live = h.agent().is_some();
        next = match resume {
            Some(r)
                if live
                    && r.instance == state.instance
                    && r.next <= h.agent().map_or(0, |a| a.session().next_seq()) =>
            {
                Some(s.catch_up(h, r.next).await?)
            }
            Some(_) => s.snapshot(h, true).await?,
            None => s.snapshot(h, false).await?,
        };
        s.baseline(h).await?;
    }
    let mut keepalive =
        tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
    loop {
        tokio::select! {
            () = state.shutdown.cancelled() => {
                let _ = s.send_json("shutdown", &json!({"reason": "dsh web is shutting down"})).await;
                return Ok(());
            }
            changed = async {
                match rev.as_mut() {
                    Some(r) => r.changed().await.map(|()| *r.borrow_and_update()),
                    None => std::future::pending().await,
                }
            } => {
                let Ok(now) = changed else { return Ok(()) };
                let Some(h) = &hosted else { continue };
                if now.generation != generation {
                    generation = now.generation;
                    next = s.snapshot(h, true).await?;
                    s.baseline(h).await?;
                } else if let Some(n) = next && h.agent().is_some() {
                    next = Some(s.catch_up(h, n).await?);
                }
            }
            signal = signals.recv() => match signal {
                Ok(sig) => s.signal(hosted.as_deref(), sig).await?,
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    s.signal(None, Signal::Lists).await?;
                    if let Some(h) = &hosted {
                        s.baseline(h).await?;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
            _ = keepalive.tick() => s.send(Bytes::from_static(b": keepalive\n\n")).await?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_parse_strictly() {
        assert_eq!(
            Resume::parse("abc:12"),
            Some(Resume {
                instance: "abc".into(),
                next: 12
            })
        );
        assert_eq!(Resume::parse("abc"), None);
        assert_eq!(Resume::parse(":1"), None);
        assert_eq!(Resume::parse("a:-1"), None);
        assert_eq!(Resume::parse("a:1x"), None);
    }

    #[test]
    fn frames_are_single_data_lines() {
        assert_eq!(
            frame("events", Some("i:3"), "[1]"),
            Bytes::from_static(b"event: events\nid: i:3\ndata: [1]\n\n")
        );
    }
}
