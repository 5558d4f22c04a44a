//! `dsh serve`: a stateless HTTP gateway to the team store. Any number of them may run; they
//! share nothing but PostgreSQL.
//!
//! Every request carries `Authorization: Bearer <token>` of an account: its standing token
//! (`dsh team user add`), or a sign-in token from `POST /v1/login {"user","password"}` (for
//! accounts given a password; it lasts 12 hours, `POST /v1/logout` ends it early), or with
//! `--oidc-issuer` a JWT of that OpenID Connect provider naming an account ([`crate::oidc`]).
//! An account sees only its own sessions, an admin account every session; a session the
//! caller may not see answers 404, exactly like one that does not exist.
//!
//! * `GET  /`: the team page (sign in, sessions, a session's log followed live, input and
//!   cancel), a static client of this API; no account needed to load it.
//! * `GET  /v1/sessions`: the caller's sessions, newest first, with title, turns, whether a
//!   turn is open, and when each was created and last prompted (ms). `?brief=1` lists only
//!   each session's id, head seq and open turn (no work on the events: for polling).
//! * `POST /v1/sessions` `{"text", "sessionId"?, "messageId"?, "images"?}`: a new session
//!   with its first input queued (201; 409 when a chosen id exists); `text` may be left out
//!   when `images` are given. `images` are
//!   `{"mediaType", "data" (base64), "name"?}`, checked as the store will keep them (PNG,
//!   JPEG, WebP, GIF; 20 per input; 64 MiB per body, `text` 1 MiB); the turn sends them after
//!   the text and the session keeps them in PostgreSQL for whichever worker runs it next. A chosen `messageId` becomes the id of
//!   the turn's user message (the SDK runtime's receipt).
//! * `GET  /v1/sessions/{id}`: head seq, lease and pending input.
//! * `POST /v1/sessions/{id}/messages` `{"text", "messageId"?}`: queues the next input (202).
//! * `DELETE /v1/sessions/{id}/messages/{messageId}`: withdraws queued input that no turn has
//!   taken (204). 409 `{"state": "held"}` while a worker holds the session (the input may be
//!   starting: ask again), `{"state": "recorded"}` once a turn recorded it (cancel that turn
//!   instead); 404 when the session has no input with that message id.
//! * `POST /v1/sessions/{id}/approvals/{approvalId}` `{"outcome": "allowed-once" |
//!   "rejected"}`: answers an approval the running turn asked for (its `approval/asked`
//!   event); 202, or 409 `{"state": "answered" | "decided"}` when another answer came first
//!   or the turn stopped waiting; 404 for an approval the log never asked. Only input queued
//!   with `"answersApprovals": true` makes a turn wait for such answers; otherwise a call
//!   that needs approval is refused at once, as in `dsh headless`.
//! * `POST /v1/sessions/{id}/cancel`: stops the running turn as Ctrl-C would (202; 409 when
//!   no turn runs).
//! * `GET  /v1/sessions/{id}/events`: server-sent events, one per stored event: `id:` is its
//!   seq, `data:` its record. Replayed from PostgreSQL after `Last-Event-ID` (or `?after=`),
//!   then followed by polling; each event is sent once, in seq order, with no gap, whatever
//!   the gateway or the connection did in between.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use dsh_store_pg::{Store, StoreError, User};

use crate::auth::{self, Throttle, token_hash};
use crate::oidc::{Oidc, OidcOptions};
use crate::transport::Transport;

/// Largest request body (`{"text": …}`).
mod clients;
mod input;
mod page;

use input::input;
use page::page;

const MAX_BODY_BYTES: usize = 1 << 20;
/// Largest input body (`text` is still held to [`MAX_BODY_BYTES`]; the rest is images).
const MAX_INPUT_BYTES: usize = 64 << 20;

/// A comment line on an idle event stream, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How a gateway runs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub url: String,
    pub listen: SocketAddr,
    /// The pool new input is queued on.
    pub pool: String,
    /// How often a followed event stream looks in PostgreSQL for new events (with a
    /// transport: for events whose live copy was lost).
    pub poll: Duration,
    /// NATS: live events for streams, wake-ups for workers.
    pub transport: Option<String>,
    /// Sign-in with an OpenID Connect provider's tokens.
    pub oidc: Option<OidcOptions>,
}

type Body = BoxBody<Bytes, Infallible>;

/// The store connection, replaced when it closes (the database restarted).
struct Db {
    url: String,
    store: Mutex<Arc<Store>>,
}

impl Db {
    fn get(&self) -> Arc<Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reconnects after `error` when it means the connection is gone.
    async fn recover(&self, error: &StoreError) {
        if matches!(error, StoreError::Db(e) if e.is_closed())
            && let Ok(fresh) = Store::connect(&self.url).await
        {
            *self.store.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(fresh);
        }
    }
}

struct Gateway {
    db: Db,
    /// Failed password sign-ins per account.
    throttle: Throttle,
    /// Password verifications running at once.
    hashing: tokio::sync::Semaphore,
    oidc: Option<Oidc>,
    options: ServeOptions,
    transport: Option<Transport>,
}

/// Binds, prints `listening on http://<addr>` on stdout and serves until the process ends.
pub async fn run(options: ServeOptions) -> Result<(), String> {
    let mut store = Store::connect(&options.url)
        .await
        .map_err(|e| e.to_string())?;
    store.migrate().await.map_err(|e| e.to_string())?;
    let listener = TcpListener::bind(options.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", options.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let transport = match &options.transport {
        Some(url) => match Transport::connect(url).await {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("dsh serve: {e}; streams follow PostgreSQL only");
                None
            }
        },
        None => None,
    };
    println!("listening on http://{addr}");
    let oidc = options.oidc.clone().map(Oidc::new).transpose()?;
    let gateway = Arc::new(Gateway {
        transport,
        oidc,
        throttle: Throttle::default(),
        hashing: tokio::sync::Semaphore::new(4),
        db: Db {
            url: options.url.clone(),
            store: Mutex::new(Arc::new(store)),
        },
        options,
    });
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("serve: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let gateway = gateway.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let gateway = gateway.clone();
                async move { Ok::<_, Infallible>(gateway.handle(req).await) }
            });
            let served = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30))
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!("serve: connection ended: {e}");
            }
        });
    }
}

fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut resp = Response::new(Full::new(body.into()).boxed());
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    full(status, "application/json", value.to_string())
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    json_response(status, &json!({"error": message}))
}

fn not_found() -> Response<Body> {
    error(StatusCode::NOT_FOUND, "no such session")
}

impl Gateway {
    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        if req.method() == Method::GET
            && let Some(resp) = page(req.uri().path())
        {
            return resp;
        }
        if req.method() == Method::POST && req.uri().path() == "/v1/login" {
            return match self.login(req).await {
                Ok(resp) => resp,
                Err(e) => self.store_error(e).await,
            };
        }
        let user = match self.authenticate(&req).await {
            Ok(Ok(u)) => u,
            Ok(Err(why)) => {
                let mut resp = error(StatusCode::UNAUTHORIZED, &why);
                resp.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return resp;
            }
            Err(e) => return self.store_error(e).await,
        };
        let path = req.uri().path().to_string();
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let result = match (req.method(), parts.as_slice()) {
            (&Method::POST, ["v1", "logout"]) => self.logout(&req).await,
            (&Method::GET, ["v1", "sessions"]) => {
                let brief = req
                    .uri()
                    .query()
                    .is_some_and(|q| q.split('&').any(|p| p == "brief=1" || p == "brief=true"));
                self.list(&user, brief).await
            }
            (&Method::POST, ["v1", "sessions"]) => self.create(&user, req).await,
            (&Method::GET, ["v1", "sessions", id]) => {
                let id = (*id).to_string();
                self.show(&user, &id).await
            }
            (&Method::POST, ["v1", "sessions", id, "messages"]) => {
                let id = (*id).to_string();
                self.message(&user, &id, req).await
            }
            (&Method::DELETE, ["v1", "sessions", id, "messages", message]) => {
                let (id, message) = ((*id).to_string(), (*message).to_string());
                self.withdraw(&user, &id, &message).await
            }
            (&Method::POST, ["v1", "sessions", id, "approvals", approval]) => {
                let (id, approval) = ((*id).to_string(), (*approval).to_string());
                self.answer(&user, &id, &approval, req).await
            }
            (&Method::POST, ["v1", "sessions", id, "cancel"]) => {
                let id = (*id).to_string();
                self.cancel(&user, &id).await
            }
            (&Method::GET, ["v1", "sessions", id, "events"]) => {
                let id = (*id).to_string();
                self.events(&user, &id, &req).await
            }
            _ => Ok(error(StatusCode::NOT_FOUND, "no such route")),
        };
        match result {
            Ok(resp) => resp,
            Err(e) => self.store_error(e).await,
        }
    }

    async fn store_error(&self, e: StoreError) -> Response<Body> {
        if matches!(e, StoreError::NoSession(_)) {
            return not_found();
        }
        self.db.recover(&e).await;
        tracing::warn!("serve: {e}");
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the team store is unavailable",
        )
    }

    /// The account a request's bearer token belongs to, or why there is none.
    async fn authenticate(
        &self,
        req: &Request<Incoming>,
    ) -> Result<Result<User, String>, StoreError> {
        const REQUIRED: &str = "a valid bearer token is required";
        let Some(token) = bearer(req) else {
            return Ok(Err(REQUIRED.into()));
        };
        if let Some(oidc) = &self.oidc
            && crate::oidc::looks_like_jwt(token)
        {
            let name = match oidc.account(token).await {
                Ok(name) => name,
                Err(refusal) => {
                    tracing::info!("serve: provider token refused: {}", refusal.detail);
                    return Ok(Err(format!("provider token refused: {}", refusal.public)));
                }
            };
            return Ok(self
                .db
                .get()
                .user(&name)
                .await?
                .ok_or_else(|| format!("no account {name:?} for this provider identity")));
        }
        Ok(self
            .db
            .get()
            .user_by_token(&token_hash(token))
            .await?
            .ok_or_else(|| REQUIRED.to_string()))
    }

    /// `POST /v1/login {"user","password"}`: a sign-in token for an account with a password
    /// (`dsh team user password`), valid for [`auth::LOGIN_TTL`]. A wrong name and a wrong
    /// password answer alike, after the same work.
    async fn login(&self, req: Request<Incoming>) -> Result<Response<Body>, StoreError> {
        let body = match body_json(req).await {
            Ok(v) => v,
            Err(resp) => return Ok(resp),
        };
        let (Some(name), Some(password)) = (
            body.get("user").and_then(Value::as_str),
            body.get("password").and_then(Value::as_str),
        ) else {
            return Ok(error(
                StatusCode::BAD_REQUEST,
                "the body needs strings \"user\" and \"password\"",
            ));
        };
        if name.len() > auth::MAX_NAME_BYTES || name.contains('\0') || password.contains('\0') {
            return Ok(error(
                StatusCode::UNAUTHORIZED,
                "wrong account name or password",
            ));
        }
        if !self.throttle.attempt(name) {
            return Ok(error(
                StatusCode::TOO_MANY_REQUESTS,
                "too many failed sign-ins for this account; try again in a minute",
            ));
        }
        // A few hashes at a time: sign-ins must not starve the gateway's other work.
        let Ok(_permit) = self.hashing.try_acquire() else {
            return Ok(error(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many sign-ins at once; try again shortly",
            ));
        };
        let hash = self.db.get().password_hash(name).await?;
        let password = password.to_string();
        let matched = tokio::task::spawn_blocking(move || match hash {
            Some(h) => auth::verify_password(&password, &h),
            None => {
                auth::verify_nothing(&password);
                false
            }
        })
        .await
        .unwrap_or(false);
        if !matched {
            return Ok(error(
                StatusCode::UNAUTHORIZED,
                "wrong account name or password",
            ));
        }
        self.throttle.succeeded(name);
        let token = match auth::new_token() {
            Ok(t) => t,
            Err(e) => return Ok(error(StatusCode::INTERNAL_SERVER_ERROR, &e)),
        };
        let hash = token_hash(&token);
        let db = self.db.get();
        db.add_login_token(name, &hash, auth::LOGIN_TTL).await?;
        let admin = db.user_by_token(&hash).await?.is_some_and(|u| u.admin);
        Ok(json_response(
            StatusCode::OK,
            &json!({
                "token": token,
                "user": name,
                "admin": admin,
                "expiresInSeconds": auth::LOGIN_TTL.as_secs(),
            }),
        ))
    }

    /// `POST /v1/logout`: ends the sign-in token the request carries (a standing token
    /// stays; 409).
    async fn logout(&self, req: &Request<Incoming>) -> Result<Response<Body>, StoreError> {
        let token = bearer(req).unwrap_or_default();
        if self.db.get().revoke_login_token(&token_hash(token)).await? {
            Ok(json_response(StatusCode::OK, &json!({"signedOut": true})))
        } else {
            Ok(error(
                StatusCode::CONFLICT,
                "only a sign-in token from POST /v1/login can be signed out",
            ))
        }
    }

    /// Whether `user` may see session `id` (one that does not exist: no).
    async fn visible(&self, user: &User, id: &str) -> Result<bool, StoreError> {
        match self.db.get().session(id).await {
            Ok(row) => Ok(user.admin || row.owner_user.as_deref() == Some(user.name.as_str())),
            Err(StoreError::NoSession(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn list(&self, user: &User, brief: bool) -> Result<Response<Body>, StoreError> {
        let owner = (!user.admin).then_some(user.name.as_str());
        if brief {
            // Only what the session rows hold: cheap enough to poll.
            let rows = self.db.get().sessions(owner, 1000).await?;
            let list: Vec<Value> = rows
                .iter()
                .map(|r| json!({"sessionId": r.id, "headSeq": r.head_seq, "turnOpen": r.turn_open}))
                .collect();
            return Ok(json_response(StatusCode::OK, &json!({"sessions": list})));
        }
        let rows = self.db.get().overviews(owner, 1000).await?;
        let list: Vec<Value> = rows
            .iter()
            .map(|o| {
                json!({
                    "sessionId": o.row.id,
                    "headSeq": o.row.head_seq,
                    "owner": o.row.owner_user,
                    "title": o.title,
                    "turns": o.turns,
                    "turnOpen": o.row.turn_open,
                    "createdAt": o.created_ms,
                    "updatedAt": o.last_prompt_ms.unwrap_or(o.created_ms),
                })
            })
            .collect();
        Ok(json_response(StatusCode::OK, &json!({"sessions": list})))
    }

    async fn create(
        &self,
        user: &User,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, StoreError> {
        let input = match input(req).await {
            Ok(i) => i,
            Err(resp) => return Ok(resp),
        };
        let store = self.db.get();
        let id = input
            .session_id
            .clone()
            .unwrap_or_else(|| format!("session-{}", uuid::Uuid::new_v4()));
        if !store.create_owned_session(&id, &user.name).await? {
            return Ok(error(
                StatusCode::CONFLICT,
                &format!("session {id} already exists"),
            ));
        }
        let inbox = store
            .enqueue(&id, &self.options.pool, &input.body())
            .await?;
        self.wake().await;
        Ok(json_response(
            StatusCode::CREATED,
            &json!({"sessionId": id, "inboxId": inbox}),
        ))
    }

    async fn show(&self, user: &User, id: &str) -> Result<Response<Body>, StoreError> {
        if !self.visible(user, id).await? {
            return Ok(not_found());
        }
        let store = self.db.get();
        let row = store.session(id).await?;
        let pending = store.pending(id).await?;
        let cwd = store.working_directory(id).await?;
        Ok(json_response(
            StatusCode::OK,
            &json!({
                "sessionId": row.id,
                "headSeq": row.head_seq,
                "leased": row.leased,
                "leaseEpoch": row.lease_epoch,
                "pendingInput": pending.len(),
                "turnOpen": row.turn_open,
                "owner": row.owner_user,
                "cwd": cwd,
                "failedTurns": row.failed_turns,
                "retryInMs": row.retry_in_ms,
            }),
        ))
    }

    async fn message(
        &self,
        user: &User,
        id: &str,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, StoreError> {
        if !self.visible(user, id).await? {
            return Ok(not_found());
        }
        let input = match input(req).await {
            Ok(i) => i,
            Err(resp) => return Ok(resp),
        };
        let inbox = self
            .db
            .get()
            .enqueue(id, &self.options.pool, &input.body())
            .await?;
        self.wake().await;
        Ok(json_response(
            StatusCode::ACCEPTED,
            &json!({"inboxId": inbox}),
        ))
    }

    async fn cancel(&self, user: &User, id: &str) -> Result<Response<Body>, StoreError> {
        if !self.visible(user, id).await? {
            return Ok(not_found());
        }
        let Some(epoch) = self.db.get().request_cancel(id).await? else {
            return Ok(error(
                StatusCode::CONFLICT,
                "no turn of this session is running",
            ));
        };
        if let Some(t) = self.transport.clone() {
            let id = id.to_string();
            tokio::spawn(async move {
                if let Err(e) = t.cancel(&id, epoch).await {
                    tracing::warn!("serve: {e}");
                }
            });
        }
        Ok(json_response(
            StatusCode::ACCEPTED,
            &json!({"epoch": epoch}),
        ))
    }

    async fn events(
        self: &Arc<Self>,
        user: &User,
        id: &str,
        req: &Request<Incoming>,
    ) -> Result<Response<Body>, StoreError> {
        if !self.visible(user, id).await? {
            return Ok(not_found());
        }
        let after = match resume_point(req) {
            Ok(a) => a,
            Err(message) => return Ok(error(StatusCode::BAD_REQUEST, &message)),
        };
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        let gateway = self.clone();
        let id = id.to_string();
        tokio::spawn(async move { gateway.follow(&id, after, tx).await });
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|chunk| (Ok::<_, Infallible>(Frame::data(chunk)), rx))
        });
        let mut resp = Response::new(StreamBody::new(stream).boxed());
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        Ok(resp)
    }

    /// Wakes the pool's workers in the background (best effort: they also look on their
    /// own); the answer to the client never waits for NATS.
    async fn wake(&self) {
        if let Some(t) = self.transport.clone() {
            let pool = self.options.pool.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(Duration::from_secs(5), t.wake(&pool)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!("serve: {e}"),
                    Err(_) => tracing::warn!("serve: NATS did not acknowledge a wake-up"),
                }
            });
        }
    }

    /// Sends the events of `id` after seq `after` to `tx`, then each new one, until the client
    /// goes away. Live events come from the transport when there is one; PostgreSQL fills
    /// every gap and is read every `poll` besides. Nothing is sent twice and nothing skipped:
    /// an event is sent only when its seq is the next one.
    async fn follow(&self, id: &str, after: i64, tx: tokio::sync::mpsc::Sender<Bytes>) {
        let mut stream = Follow {
            id,
            after,
            tx,
            idle_since: tokio::time::Instant::now(),
        };
        // Subscribe before the replay: an event committed in between arrives live too.
        let mut live = match &self.transport {
            Some(t) => t.subscribe_events(id).await.ok(),
            None => None,
        };
        if !self.catch_up(&mut stream).await {
            return;
        }
        loop {
            let Some(events) = live.as_mut() else {
                if !stream.wait(self.options.poll).await || !self.catch_up(&mut stream).await {
                    return;
                }
                continue;
            };
            let event = tokio::select! {
                event = events.next() => event,
                keep = stream.wait(self.options.poll) => {
                    if !keep || !self.catch_up(&mut stream).await {
                        return;
                    }
                    continue;
                }
            };
            let Some(event) = event else {
                // NATS is gone for good: PostgreSQL alone from here.
                live = None;
                continue;
            };
            if event.seq > stream.after + 1 && !self.catch_up(&mut stream).await {
                return;
            }
            // The next one is sent; one sent already (by the catch-up, or a duplicate) is not.
            if event.seq == stream.after + 1 {
                if !stream
                    .send(sse(event.seq, &event.kind, &event.record))
                    .await
                {
                    return;
                }
                stream.after = event.seq;
            }
        }
    }

    /// Sends what PostgreSQL has after the stream's last seq; `false` when the client left.
    async fn catch_up(&self, stream: &mut Follow<'_>) -> bool {
        loop {
            let page = match self.db.get().read(stream.id, stream.after, 500).await {
                Ok(p) => p,
                Err(e) => {
                    self.db.recover(&e).await;
                    return stream
                        .wait(self.options.poll.max(Duration::from_millis(200)))
                        .await;
                }
            };
            let Some(last) = page.last() else {
                return true;
            };
            let last = last.seq;
            let chunk: String = page.iter().map(|e| sse(e.seq, &e.kind, &e.data)).collect();
            if !stream.send(chunk).await {
                return false;
            }
            stream.after = last;
        }
    }
}

/// One followed event stream.
struct Follow<'a> {
    id: &'a str,
    /// The last seq sent.
    after: i64,
    tx: tokio::sync::mpsc::Sender<Bytes>,
    idle_since: tokio::time::Instant,
}

impl Follow<'_> {
    async fn send(&mut self, chunk: String) -> bool {
        self.idle_since = tokio::time::Instant::now();
        self.tx.send(Bytes::from(chunk)).await.is_ok()
    }

    /// Waits `poll` (a keep-alive comment when the stream was quiet long enough); `false`
    /// when the client left.
    async fn wait(&mut self, poll: Duration) -> bool {
        if self.idle_since.elapsed() >= KEEP_ALIVE {
            if self
                .tx
                .send(Bytes::from_static(b": keep-alive\n\n"))
                .await
                .is_err()
            {
                return false;
            }
            self.idle_since = tokio::time::Instant::now();
        }
        tokio::select! {
            () = tokio::time::sleep(poll) => true,
            () = self.tx.closed() => false,
        }
    }
}

/// One event in the event-stream format.
fn sse(seq: i64, kind: &str, record: &str) -> String {
    format!("id: {seq}\nevent: {kind}\ndata: {record}\n\n")
}

/// Where a stream resumes: `Last-Event-ID`, else `?after=`, else the start.
fn resume_point(req: &Request<Incoming>) -> Result<i64, String> {
    let header = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let query = req.uri().query().and_then(|q| {
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == "after")
            .map(|(_, v)| v.to_string())
    });
    match header.or(query) {
        None => Ok(0),
        Some(v) => v
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| format!("the resume point must be an event seq, not {v:?}")),
    }
}

/// The bearer token of a request.
fn bearer(req: &Request<Incoming>) -> Option<&str> {
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// A JSON request body, or the response refusing it.
async fn body_json(req: Request<Incoming>) -> Result<Value, Response<Body>> {
    body_json_within(req, MAX_BODY_BYTES).await
}

async fn body_json_within(req: Request<Incoming>, limit: usize) -> Result<Value, Response<Body>> {
    let bytes = Limited::new(req.into_body(), limit)
        .collect()
        .await
        .map_err(|_| {
            error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("the request body is over {} MiB or was cut", limit >> 20),
            )
        })?
        .to_bytes();
    serde_json::from_slice(&bytes).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            &format!("the body is not JSON: {e}"),
        )
    })
}
