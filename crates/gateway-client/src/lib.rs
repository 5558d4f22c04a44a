//! The client side of a team gateway (`dsh serve`), shared by the front ends that hand their
//! sessions to a team instead of running them: the SDK runtime and the ACP server, when
//! `DSH_GATEWAY` names a gateway (and `dsh web`, whose page then shows the team's sessions).
//!
//! * [`Gateway`]: the gateway's URL and an account's token (`DSH_GATEWAY_TOKEN`), and the
//!   calls those front ends make: a session's state, queued input, a cancel, withdrawing
//!   input no turn has taken yet, and one connection of a session's event stream.
//! * [`Records`]: turns the stream's stored records back into the session's events, in
//!   order, each once, across reconnects.
//!
//! Every failure is a message naming the gateway and what it answered; nothing here panics
//! on what a gateway sends.

use std::sync::Arc;
use std::time::Duration;

use dsh_session::{Event, Record, decode_line};
use serde_json::Value;

/// How long one request (other than the event stream) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The environment variable that sets how long an event stream may stay silent (ms) before
/// its connection is taken for dead and reopened.
pub const STREAM_IDLE_ENV: &str = "DSH_GATEWAY_STREAM_IDLE_MS";
/// A gateway sends a keep-alive comment after 15 s of quiet: a stream silent for this long
/// is cut off somewhere on the way (a partition leaves a TCP connection open for hours).
const DEFAULT_STREAM_IDLE: Duration = Duration::from_secs(40);

fn stream_idle() -> Duration {
    std::env::var(STREAM_IDLE_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(DEFAULT_STREAM_IDLE, Duration::from_millis)
}

/// A team gateway, from `DSH_GATEWAY` (its URL) and `DSH_GATEWAY_TOKEN` (an account's
/// token).
#[derive(Clone)]
pub struct Gateway {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

/// What became of a request to withdraw queued input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Withdrawal {
    /// The input is gone; no turn will run it.
    Withdrawn,
    /// A worker holds the session: the input may be about to run (ask again).
    Held,
    /// A turn already recorded it: cancel that turn instead.
    Recorded,
    /// The session has no input with that message id.
    Unknown,
}

impl Gateway {
    /// The gateway the environment names, or `None` (the front end hosts its sessions).
    pub fn from_env() -> Result<Option<Self>, String> {
        let Some(base) = dsh_host::environ::secret_var("DSH_GATEWAY").filter(|u| !u.is_empty())
        else {
            return Ok(None);
        };
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(format!(
                "DSH_GATEWAY must be an http:// or https:// URL of a `dsh serve` gateway, not {base:?}"
            ));
        }
        let token = dsh_host::environ::secret_var("DSH_GATEWAY_TOKEN").filter(|t| !t.is_empty());
        if let Some(t) = &token {
            dsh_host::secrets::remember_secret(t);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build the gateway client: {e}"))?;
        Ok(Some(Self {
            base: base.trim_end_matches('/').to_string(),
            token,
            http,
        }))
    }

    /// The gateway's URL (what `DSH_GATEWAY` named, without a trailing slash).
    pub fn base(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => request.bearer_auth(t),
            None => request,
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, String> {
        self.authorized(request)
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))
    }

    /// `GET /v1/sessions/{id}`: the session's state, or `None` when the gateway knows no
    /// such session (for this account).
    pub async fn session(&self, id: &str) -> Result<Option<Value>, String> {
        let resp = self
            .send(self.http.get(self.url(&format!("/v1/sessions/{id}"))))
            .await?;
        match resp.status() {
            reqwest::StatusCode::NOT_FOUND => Ok(None),
            s if s.is_success() => json(resp).await.map(Some),
            _ => Err(refusal(resp).await),
        }
    }

    /// `GET` of `path` (the session list, say); the gateway's JSON answer.
    pub async fn get(&self, path: &str) -> Result<Value, String> {
        let resp = self.send(self.http.get(self.url(path))).await?;
        if !resp.status().is_success() {
            return Err(refusal(resp).await);
        }
        json(resp).await
    }

    /// `POST` of `body` to `path` (input, a new session); the gateway's JSON answer.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, String> {
        let resp = self.send(self.http.post(self.url(path)).json(body)).await?;
        if !resp.status().is_success() {
            return Err(refusal(resp).await);
        }
        json(resp).await
    }

    /// `POST /v1/sessions/{id}/cancel`: true when a running turn was asked to stop, false
    /// when none ran.
    pub async fn cancel(&self, id: &str) -> Result<bool, String> {
        let resp = self
            .send(
                self.http
                    .post(self.url(&format!("/v1/sessions/{id}/cancel"))),
            )
            .await?;
        match resp.status() {
            reqwest::StatusCode::CONFLICT => Ok(false),
            s if s.is_success() => Ok(true),
            _ => Err(refusal(resp).await),
        }
    }

    /// `POST /v1/sessions/{id}/approvals/{approval_id}`: answers an approval the session's
    /// running turn asked for (`allowed-once` or `rejected`); false when another answer came
    /// first or the turn no longer waits.
    pub async fn answer_approval(
        &self,
        id: &str,
        approval_id: &str,
        outcome: &str,
    ) -> Result<bool, String> {
        let url = self.url(&format!("/v1/sessions/{id}/approvals/{approval_id}"));
        let body = serde_json::json!({ "outcome": outcome });
        let resp = self.send(self.http.post(url).json(&body)).await?;
        match resp.status() {
            reqwest::StatusCode::CONFLICT => Ok(false),
            s if s.is_success() => Ok(true),
            _ => Err(refusal(resp).await),
        }
    }

    /// `DELETE /v1/sessions/{id}/messages/{message_id}`: withdraws input no turn has taken.
    pub async fn withdraw(&self, id: &str, message_id: &str) -> Result<Withdrawal, String> {
        let resp = self
            .send(
                self.http
                    .delete(self.url(&format!("/v1/sessions/{id}/messages/{message_id}"))),
            )
            .await?;
        match resp.status() {
            reqwest::StatusCode::NOT_FOUND => Ok(Withdrawal::Unknown),
            reqwest::StatusCode::CONFLICT => {
                let body = json(resp).await.unwrap_or(Value::Null);
                Ok(match body.get("state").and_then(Value::as_str) {
                    Some("recorded") => Withdrawal::Recorded,
                    _ => Withdrawal::Held,
                })
            }
            s if s.is_success() => Ok(Withdrawal::Withdrawn),
            _ => Err(refusal(resp).await),
        }
    }

    /// Reads one connection of session `id`'s event stream, from after stored seq `after`,
    /// handing each event's seq and record to `on` until the connection ends or `on` fails.
    /// A connection that stays silent past the idle limit (keep-alives included) ends with
    /// an error, so the caller reconnects instead of waiting on a dead peer.
    pub async fn stream(
        &self,
        id: &str,
        after: i64,
        mut on: impl FnMut(i64, &str) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut request = self.authorized(
            self.http
                .get(self.url(&format!("/v1/sessions/{id}/events"))),
        );
        if after > 0 {
            request = request.header("Last-Event-ID", after.to_string());
        }
        let idle = stream_idle();
        let silent = || {
            format!(
                "the team gateway at {} sent nothing for {idle:?}",
                self.base
            )
        };
        // A gateway answers a stream's headers at once, then replays.
        let mut resp = tokio::time::timeout(idle, request.send())
            .await
            .map_err(|_| silent())?
            .map_err(|e| self.unreachable(&e))?;
        if !resp.status().is_success() {
            return Err(refusal(resp).await);
        }
        let mut pending = Vec::new();
        let mut event_id: Option<i64> = None;
        let mut data = String::new();
        while let Some(chunk) = tokio::time::timeout(idle, resp.chunk())
            .await
            .map_err(|_| silent())?
            .map_err(|e| e.to_string())?
        {
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line[..end]);
                let line = line.strip_suffix('\r').unwrap_or(&line);
                if line.is_empty() {
                    if let Some(seq) = event_id.take() {
                        on(seq, &data)?;
                    }
                    data.clear();
                } else if let Some(v) = line.strip_prefix("id:") {
                    event_id = v.trim().parse().ok();
                } else if let Some(v) = line.strip_prefix("data:") {
                    if !data.is_empty() {
                        data.push('\n');
                    }
                    data.push_str(v.strip_prefix(' ').unwrap_or(v));
                }
            }
        }
        Ok(())
    }

    fn unreachable(&self, e: &reqwest::Error) -> String {
        format!("cannot reach the team gateway at {}: {e}", self.base)
    }
}

async fn json(resp: reqwest::Response) -> Result<Value, String> {
    resp.json()
        .await
        .map_err(|e| format!("the team gateway's answer is not JSON: {e}"))
}

async fn refusal(resp: reqwest::Response) -> String {
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    let why = body
        .get("error")
        .and_then(Value::as_str)
        .map_or_else(String::new, |e| format!(": {e}"));
    format!("the team gateway answered {status}{why}")
}

/// A session's stored records read back as its events: each stored seq once, in order.
pub struct Records {
    session: String,
    /// The last stored seq read.
    last: i64,
    /// The next local event seq (stored seq − 1 for a whole log).
    next_local: u64,
}

impl Records {
    pub fn new(session: &str) -> Self {
        Self {
            session: session.to_string(),
            last: 0,
            next_local: 0,
        }
    }

    /// The last stored seq read (where a new connection resumes).
    pub fn last(&self) -> i64 {
        self.last
    }

    /// The events stored record `seq` holds (a v4 row may hold several); none when that seq
    /// was read already.
    pub fn decode(&mut self, seq: i64, record: &str) -> Result<Vec<Arc<Event>>, String> {
        if seq <= self.last {
            return Ok(Vec::new());
        }
        // Stored seqs are dense from 1 and a connection sends them in order: a skip means
        // the connection lost bytes (a partition that healed mid-frame, say). Reading on
        // would number the events wrongly; the caller reconnects after `last` instead.
        if seq != self.last + 1 {
            return Err(format!(
                "stored event {seq} of session {} came after {}: the stream skipped events",
                self.session, self.last
            ));
        }
        let (record, _) = decode_line(record, self.next_local)
            .map_err(|e| format!("stored event {seq} of session {}: {e}", self.session))?;
        let mut events: Vec<Arc<Event>> = Vec::new();
        match record {
            Record::Event(e) => events.push(e),
            Record::Row(row) => row.expand_into(&mut events),
        }
        self.last = seq;
        if let Some(e) = events.last() {
            self.next_local = e.seq + 1;
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_session::{EventType, RecordFormat, SurfaceKeyOrder, write_event};

    fn record(seq: u64) -> String {
        let e = Event {
            event_type: EventType::new("session/title"),
            seq,
            time: 0,
            data: serde_json::json!({"title": format!("t{seq}")}).into(),
            source_event_seqs: None,
            surface_op: None,
            ignorable: false,
            key_order: SurfaceKeyOrder::default(),
        };
        let mut line = String::new();
        write_event(&mut line, &e, RecordFormat::Full);
        line
    }

    #[test]
    fn records_are_read_once_in_order_and_a_skip_is_an_error() {
        let mut records = Records::new("s");
        assert_eq!(records.decode(1, &record(0)).unwrap()[0].seq, 0);
        assert_eq!(records.decode(2, &record(1)).unwrap()[0].seq, 1);
        // Read again after a reconnect: nothing new.
        assert!(records.decode(2, &record(1)).unwrap().is_empty());
        let skipped = records.decode(4, &record(3)).unwrap_err();
        assert!(skipped.contains("skipped"), "{skipped}");
        assert_eq!(
            records.last(),
            2,
            "a reconnect resumes after the last one read"
        );
        assert_eq!(records.decode(3, &record(2)).unwrap()[0].seq, 2);
    }
}
