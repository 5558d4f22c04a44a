//! `GET /api/events` in front of a gateway: the frames the page reads from a local session
//! ([`crate::stream`]), made from the gateway's event stream of the session.
//!
//! * The history through the session's head seq (read when the page connects) becomes one
//!   `snapshot`, or, for a page reconnecting with a cursor of this launch, the `events`
//!   after its cursor; each later stored record becomes an `events` frame.
//! * `live`, `status` and `approvals` come from the log itself: a `turn/start` without its
//!   `turn/end` is a running turn, an `approval/asked` without its `approval/decided` a
//!   pending approval.
//! * `host` (the lists changed) is sent when the account's session list on the gateway
//!   changes (polled) and when a turn ends or a title is set.
//!
//! A gateway connection that drops is reopened after the last record read, so the page
//! sees every event once, in order; a session that does not exist yet (chosen by
//! `session.create`, its first message not sent) is followed from its first record.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dsh_gateway_client::{Gateway, Records};
use dsh_session::{Event, types};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Remote;
use crate::state::WebState;
use crate::stream::{Gone, Resume, Stream};

const KEEPALIVE: Duration = Duration::from_secs(15);
/// How often an open page's stream asks the gateway whether the session list changed.
const LISTS_EVERY: Duration = Duration::from_secs(2);
/// The pause before a dropped gateway connection is reopened.
const RECONNECT: Duration = Duration::from_millis(500);

/// The events one stored record held.
struct Batch {
    stored: i64,
    events: Vec<Arc<Event>>,
}

/// Starts one page stream, which runs until the page leaves or `dsh web` stops.
pub fn spawn(
    state: Arc<WebState>,
    remote: Arc<Remote>,
    session: Option<String>,
    resume: Option<Resume>,
    tx: mpsc::Sender<Bytes>,
) {
    tokio::spawn(async move {
        let out = Out {
            page: Stream { state, tx },
            remote,
        };
        let _ = out.serve(session, resume).await;
    });
}

struct Out {
    page: Stream,
    remote: Arc<Remote>,
}

/// One session followed for the page.
struct Follow {
    id: String,
    rx: mpsc::UnboundedReceiver<Batch>,
    _reader: Aborting,
    /// The page's cursor: the seq of the next event it needs.
    next: u64,
    live: Live,
}

/// A task that ends when its owner drops it.
struct Aborting(tokio::task::JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Tells `changed` each time the account's session list on the gateway changes (ids, head
/// seqs, open turns), polling every [`LISTS_EVERY`]; a poll the gateway does not answer
/// changes nothing.
async fn poll_lists(gateway: Gateway, changed: mpsc::Sender<()>) {
    let mut last = None;
    let mut poll = tokio::time::interval(LISTS_EVERY);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        poll.tick().await;
        let Ok(listed) = gateway.get("/v1/sessions?brief=1").await else {
            continue;
        };
        let Some(rows) = listed["sessions"].as_array() else {
            continue;
        };
        let now: Vec<String> = rows
            .iter()
            .map(|r| format!("{}:{}:{}", r["sessionId"], r["headSeq"], r["turnOpen"]))
            .collect();
        if last.as_ref().is_some_and(|l| *l != now) && changed.send(()).await.is_err() {
            return;
        }
        last = Some(now);
    }
}

/// Reads session `id`'s records from the gateway into `tx`, reconnecting after the last one
/// read, until the receiving side is gone.
async fn read(gateway: Gateway, id: String, tx: mpsc::UnboundedSender<Batch>) {
    let mut records = Records::new(&id);
    let mut warned = false;
    while !tx.is_closed() {
        let after = records.last();
        let read = gateway
            .stream(&id, after, |stored, record| {
                let events = records.decode(stored, record)?;
                tx.send(Batch { stored, events })
                    .map_err(|_| "the page left".to_string())
            })
            .await;
        if let Err(e) = read
            && !tx.is_closed()
            && !std::mem::replace(&mut warned, true)
        {
            tracing::warn!("web: following session {id} through the gateway: {e}");
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

impl Out {
    async fn serve(&self, session: Option<String>, resume: Option<Resume>) -> Result<(), Gone> {
        self.page.hello().await?;
        let mut follow = match session {
            Some(id) => self.open(id, resume).await?,
            None => None,
        };
        // The list is polled by a task of its own: a gateway that does not answer never holds
        // up the session's events.
        let (changed_tx, mut lists_changed) = mpsc::channel(1);
        let _poller = Aborting(tokio::spawn(poll_lists(
            self.remote.gateway.clone(),
            changed_tx,
        )));
        let mut keepalive =
            tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
        loop {
            tokio::select! {
                () = self.page.state.shutdown.cancelled() => {
                    let _ = self.page.send_json("shutdown", &json!({"reason": "dsh web is shutting down"})).await;
                    return Ok(());
                }
                batch = async {
                    match follow.as_mut() {
                        Some(f) => f.rx.recv().await,
                        None => std::future::pending().await,
                    }
                } => match (batch, follow.as_mut()) {
                    (Some(batch), Some(f)) => self.apply(f, batch).await?,
                    _ => return Ok(()),
                },
                Some(()) = lists_changed.recv() => {
                    self.page.send_json("host", &json!({"type": "lists"})).await?;
                }
                _ = keepalive.tick() => self.page.send(Bytes::from_static(b": keepalive\n\n")).await?,
            }
        }
    }

    /// Sends the session's history and live state; `None` (with a `session-error` frame)
    /// when the gateway has no such session. A gateway that cannot be asked ends the
    /// stream (after a `session-error`), so the browser tries again.
    async fn open(&self, id: String, resume: Option<Resume>) -> Result<Option<Follow>, Gone> {
        let fresh = self.remote.fresh().contains(&id);
        let head = if !dsh_session::is_plain_id(&id) {
            None
        } else if fresh {
            Some(0)
        } else {
            match self.remote.gateway.session(&id).await {
                Ok(found) => found.map(|v| v["headSeq"].as_i64().unwrap_or(0)),
                Err(e) => {
                    // The stream ends after saying why: the browser reconnects (`retry`)
                    // and the page recovers once the gateway answers again.
                    let message = format!("the session cannot be shown: {e}");
                    self.page.fail(&id, "internal", &message).await?;
                    return Err(Gone);
                }
            }
        };
        let Some(head) = head else {
            self.page
                .fail(&id, "session-not-found", &format!("No session {id}"))
                .await?;
            return Ok(None);
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let reader = Aborting(tokio::spawn(read(
            self.remote.gateway.clone(),
            id.clone(),
            tx,
        )));
        let mut follow = Follow {
            id,
            rx,
            _reader: reader,
            next: 0,
            live: Live::default(),
        };
        let mut history: Vec<Arc<Event>> = Vec::new();
        let mut stored = 0;
        while stored < head {
            let batch = tokio::select! {
                b = follow.rx.recv() => b,
                () = self.page.tx.closed() => return Err(Gone),
            };
            let Some(batch) = batch else { return Ok(None) };
            stored = batch.stored;
            for e in &batch.events {
                follow.live.observe(&follow.id, e);
            }
            history.extend(batch.events);
        }
        let next = history.last().map_or(0, |e| e.seq + 1);
        match resume {
            Some(r) if r.instance == self.page.state.instance && r.next <= next => {
                follow.next = r.next;
                self.page
                    .send_events(&follow.id, &history, &mut follow.next)
                    .await?;
            }
            resume => {
                let header = json!({"id": follow.id});
                follow.next = self
                    .page
                    .send_snapshot(&follow.id, &header, &history, false, resume.is_some())
                    .await?;
            }
        }
        self.page
            .send_json("live", &follow.live.view(&follow.id))
            .await?;
        Ok(Some(follow))
    }

    /// One record read live: its events, then what they changed.
    async fn apply(&self, f: &mut Follow, batch: Batch) -> Result<(), Gone> {
        let mut changed = Changed::default();
        for e in &batch.events {
            changed.merge(f.live.observe(&f.id, e));
        }
        self.page
            .send_events(&f.id, &batch.events, &mut f.next)
            .await?;
        if changed.status {
            self.page
                .send_json(
                    "status",
                    &json!({"sessionId": f.id, "running": f.live.running}),
                )
                .await?;
        }
        if changed.approvals {
            self.page
                .send_json(
                    "approvals",
                    &json!({"sessionId": f.id, "items": f.live.approvals}),
                )
                .await?;
        }
        if changed.lists {
            self.page
                .send_json("host", &json!({"type": "lists"}))
                .await?;
        }
        Ok(())
    }
}

/// What the log says of the session now: a running turn, pending approvals.
#[derive(Default)]
struct Live {
    running: bool,
    /// Each call's tool and arguments, by call id (an approval names only the call).
    calls: HashMap<String, Value>,
    approvals: Vec<Value>,
}

/// What one event changed of what the page shows.
#[derive(Default)]
struct Changed {
    status: bool,
    approvals: bool,
    lists: bool,
}

impl Changed {
    fn merge(&mut self, other: Changed) {
        self.status |= other.status;
        self.approvals |= other.approvals;
        self.lists |= other.lists;
    }
}

impl Live {
    fn observe(&mut self, session: &str, e: &Event) -> Changed {
        let data = e.data.as_value();
        let mut changed = Changed::default();
        match e.event_type.as_str() {
            types::TURN_START => {
                changed.status = !self.running;
                self.running = true;
                self.calls.clear();
            }
            types::TURN_END => {
                changed.status = self.running;
                changed.lists = true;
                changed.approvals = !self.approvals.is_empty();
                self.running = false;
                self.approvals.clear();
            }
            types::SESSION_TITLE => changed.lists = true,
            types::TOOL_CALL => {
                if let Some(id) = data["callId"].as_str() {
                    let arguments = match &data["arguments"] {
                        Value::String(s) if s.trim().is_empty() => json!({}),
                        Value::String(s) => serde_json::from_str(s).unwrap_or(json!(s)),
                        other => other.clone(),
                    };
                    self.calls.insert(id.to_string(), arguments);
                }
            }
            "approval/asked" => {
                let call = data["callId"].as_str().unwrap_or_default();
                self.approvals.push(json!({
                    "approvalId": data["id"],
                    "sessionId": session,
                    "toolName": data["toolName"],
                    "callId": call,
                    "reason": data["reason"],
                    "arguments": self.calls.get(call).cloned().unwrap_or(json!({})),
                }));
                changed.approvals = true;
            }
            "approval/decided" => {
                let before = self.approvals.len();
                self.approvals.retain(|a| a["approvalId"] != data["id"]);
                changed.approvals = self.approvals.len() != before;
            }
            _ => {}
        }
        changed
    }

    /// The `live` frame.
    fn view(&self, session: &str) -> Value {
        json!({
            "sessionId": session,
            "live": true,
            "running": self.running,
            "queue": [],
            "approvals": self.approvals,
            "questions": [],
            "outputs": {},
            "error": Value::Null,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, kind: &str, data: Value) -> Event {
        Event {
            event_type: dsh_session::EventType::new(kind),
            seq,
            time: 0,
            data: data.into(),
            source_event_seqs: None,
            surface_op: None,
            ignorable: false,
            key_order: dsh_session::SurfaceKeyOrder::default(),
        }
    }

    #[test]
    fn the_log_says_when_a_turn_runs_and_which_approvals_wait() {
        let mut live = Live::default();
        let c = live.observe("s", &event(0, types::TURN_START, json!({})));
        assert!(c.status && live.running);
        live.observe(
            "s",
            &event(
                1,
                types::TOOL_CALL,
                json!({"callId": "c1", "name": "bash", "arguments": "{\"command\":\"ls\"}"}),
            ),
        );
        let c = live.observe(
            "s",
            &event(
                2,
                "approval/asked",
                json!({"id": "a1", "callId": "c1", "toolName": "bash", "reason": "why"}),
            ),
        );
        assert!(c.approvals);
        assert_eq!(live.approvals[0]["arguments"]["command"], "ls");
        assert_eq!(live.view("s")["approvals"][0]["approvalId"], "a1");
        let c = live.observe(
            "s",
            &event(
                3,
                "approval/decided",
                json!({"id": "a1", "outcome": "rejected"}),
            ),
        );
        assert!(c.approvals && live.approvals.is_empty());
        let c = live.observe("s", &event(4, types::TURN_END, json!({})));
        assert!(c.status && c.lists && !live.running);
    }
}
