//! The SDK runtime in front of a team gateway (`dsh serve`): with `DSH_GATEWAY` set, the
//! runtime hosts no agent. Each prompt is queued on the gateway as the session's next input,
//! a `dsh worker` of the team runs the turn, and the session's stored events come back as the
//! same `session.event` and `session.status` notifications an in-process session sends, so an
//! SDK program drives team sessions unchanged.
//!
//! * `session/prompt` creates the session on the gateway under the SDK's id (or queues its
//!   next input), with a message id of the runtime's choosing: the worker's turn gives its
//!   task message that id, which is the receipt the SDK waits for.
//! * A session is followed from its head when the runtime first touches it: one event
//!   stream per session (`GET /v1/sessions/{id}/events`), resumed by `Last-Event-ID` after a
//!   broken connection, so no event is sent twice or skipped. Events before that head are
//!   read only to keep the v4 rows' numbering; they are not notified.
//! * `session.status running` precedes a turn's `turn/start`, `idle` follows its `turn/end`.
//! * `session/wait` returns once the session has no open turn and no queued input.
//! * `initialize`'s route (`provider`, `model`, `reasoningEffort`, `maxTokens`) travels with
//!   every prompt: the worker runs the turn on it (a provider the worker's settings do not
//!   configure fails the turn, recorded in its log). Image blocks go with the prompt's text
//!   (after it, whatever their place among the blocks); the gateway checks them, the turn
//!   stores them, and the team keeps them for the session's later turns on any worker.
//! * The working directory is the worker's: `initialize`'s `cwd` (a path on the client's
//!   machine) does not travel. `session/working-directory/get` answers the session's
//!   directory as its log records it; `set` resolves the path against that (a path on the
//!   workers' machines), answers it, and sends it with the session's next prompt: the worker
//!   moves the session there before the turn if it is an existing directory inside its
//!   workspace, and otherwise tells the model it stays.
//! * `shutdown` stops following; the turns themselves go on in the team.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_acp::{Peer, RpcError};
use dsh_gateway_client::{Gateway, Records};
use dsh_process::AbortOnDrop;
use dsh_session::types;
use serde_json::{Value, json};

use crate::rpc::{content_blocks, fail, session_id, str_param, unsupported_block};
use crate::stream::EventStream;

/// How long a broken event stream waits before it connects again.
const RECONNECT: Duration = Duration::from_millis(250);
/// How often `session/wait` asks whether the session is at rest.
const WAIT_POLL: Duration = Duration::from_millis(100);

/// The SDK server when a gateway runs the sessions.
pub(crate) struct Remote {
    gateway: Gateway,
    peer: Peer,
    format: u64,
    /// `initialize`'s route, as the gateway takes it beside a prompt's text; `None` until
    /// initialized.
    route: Mutex<Option<serde_json::Map<String, Value>>>,
    shutting_down: AtomicBool,
    /// Each followed session's stream task (stopped when dropped).
    followed: Mutex<HashMap<String, AbortOnDrop<()>>>,
    /// The directories sessions were moved to, sent with their next prompt.
    moves: Mutex<HashMap<String, String>>,
}

/// `id` when the gateway can take it as a path segment and a chosen session id (1 to 128
/// ASCII letters, digits, `.`, `_` or `-`): anything else could name another route.
fn plain(id: String) -> Result<String, RpcError> {
    if dsh_session::is_plain_id(&id) {
        Ok(id)
    } else {
        Err(fail(format!(
            "a team session id is 1 to 128 letters, digits, '.', '_' or '-', not {id:?}"
        )))
    }
}

impl Remote {
    pub(crate) fn new(gateway: Gateway, peer: Peer, format: u64) -> Arc<Self> {
        Arc::new(Self {
            gateway,
            peer,
            format,
            route: Mutex::new(None),
            shutting_down: AtomicBool::new(false),
            followed: Mutex::new(HashMap::new()),
            moves: Mutex::new(HashMap::new()),
        })
    }

    /// `initialize`'s route, once initialized and while not shutting down.
    fn ready(&self) -> Result<serde_json::Map<String, Value>, RpcError> {
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(fail("SDK server is shutting down"));
        }
        self.route
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| fail("SDK server is not initialized"))
    }

    /// Answers one request.
    pub(crate) async fn handle(
        self: &Arc<Self>,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, RpcError> {
        match method {
            "initialize" => {
                if self.shutting_down.load(Ordering::Acquire) {
                    return Err(fail("SDK server is shutting down"));
                }
                let (Some(provider), Some(model)) =
                    (str_param(&params, "provider"), str_param(&params, "model"))
                else {
                    return Err(fail("initialize requires provider and model strings"));
                };
                let mut route = serde_json::Map::new();
                route.insert("provider".into(), json!(provider));
                route.insert("model".into(), json!(model));
                if let Some(effort) = str_param(&params, "reasoningEffort") {
                    route.insert("reasoningEffort".into(), json!(effort));
                }
                if let Some(n) = crate::rpc::max_tokens(&params)? {
                    route.insert("maxTokens".into(), json!(n));
                }
                *self.route.lock().unwrap_or_else(|e| e.into_inner()) = Some(route);
                Ok(
                    json!({"serverInfo": {"name": "deepseek-harness-sdk-runtime", "version": "0.0.1"}}),
                )
            }
            "session/prompt" => self.prompt(params).await,
            "session/resume" => self.resume(params).await,
            "session/wait" => self.wait(params).await,
            "session/working-directory/get" => self.working_directory(params, None).await,
            "session/working-directory/set" => {
                let Some(path) = str_param(&params, "path").map(str::to_owned) else {
                    return Err(fail("working-directory set requires a path string"));
                };
                self.working_directory(params, Some(path)).await
            }
            "shutdown" => {
                self.shutdown();
                Ok(json!({}))
            }
            other => Err(fail(format!(
                "unknown DeepSeek Harness SDK runtime method: {other}"
            ))),
        }
    }

    async fn prompt(self: &Arc<Self>, params: Option<Value>) -> Result<Value, RpcError> {
        let route = self.ready()?;
        let id = plain(session_id(&params, "session/prompt")?)?;
        let mut texts = Vec::new();
        let mut images = Vec::new();
        for block in content_blocks(&params) {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => texts.push(
                    block
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                ),
                // Checked by the gateway, stored by the turn: sent after the text.
                Some("image") => images.push(json!({
                    "mediaType": block.get("mimeType").and_then(Value::as_str).unwrap_or_default(),
                    "data": block.get("data").and_then(Value::as_str).unwrap_or_default(),
                })),
                other => return Err(unsupported_block(other)),
            }
        }
        let text = texts.join("\n\n");
        if text.trim().is_empty() && images.is_empty() {
            return Err(fail("session/prompt needs some text or an image"));
        }
        let message_id = uuid::Uuid::new_v4().to_string();
        let state = self.gateway.session(&id).await.map_err(fail)?;
        // The stream replays everything after `head`, so following once the input is queued
        // misses nothing of its turn.
        let head = state
            .as_ref()
            .and_then(|s| s.get("headSeq"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let mut body = route;
        body.insert("text".into(), json!(text));
        body.insert("messageId".into(), json!(message_id));
        if !images.is_empty() {
            body.insert("images".into(), Value::Array(images));
        }
        let moved = self.moves().get(&id).cloned();
        if let Some(cwd) = &moved {
            body.insert("cwd".into(), json!(cwd));
        }
        let queued = match state {
            None => {
                body.insert("sessionId".into(), json!(id));
                self.gateway
                    .post("/v1/sessions", &Value::Object(body))
                    .await
            }
            Some(_) => {
                self.gateway
                    .post(&format!("/v1/sessions/{id}/messages"), &Value::Object(body))
                    .await
            }
        };
        queued.map_err(fail)?;
        // Queued with this input: the worker moves the session before its turn.
        if let Some(cwd) = moved {
            let mut moves = self.moves();
            if moves.get(&id) == Some(&cwd) {
                moves.remove(&id);
            }
        }
        self.follow(&id, head);
        Ok(json!({"messageId": message_id}))
    }

    fn moves(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.moves.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `session/working-directory/get` (`path` `None`) and `set`.
    async fn working_directory(
        &self,
        params: Option<Value>,
        path: Option<String>,
    ) -> Result<Value, RpcError> {
        self.ready()?;
        let id = match str_param(&params, "sessionId") {
            Some(id) if !id.is_empty() => plain(id.to_string())?,
            _ => {
                return Err(fail(
                    "working-directory requests require a non-empty sessionId",
                ));
            }
        };
        let pending = self.moves().get(&id).cloned();
        let current = match pending {
            Some(cwd) => Some(cwd),
            None => self
                .gateway
                .session(&id)
                .await
                .map_err(fail)?
                .and_then(|s| s.get("cwd").and_then(Value::as_str).map(str::to_owned)),
        };
        let Some(path) = path else {
            return current.map(|cwd| json!({"cwd": cwd})).ok_or_else(|| {
                fail(format!(
                    "session \"{id}\" has no working directory yet: its first turn takes the workspace of the worker that runs it"
                ))
            });
        };
        if path.is_empty() {
            return Err(fail("working-directory: cd must not be empty"));
        }
        // Against the directory the log records; before the first turn a relative path stays
        // relative, to the worker's workspace.
        let moved = match &current {
            Some(base) => dsh_working_directory::resolve(std::path::Path::new(base), &path)
                .display()
                .to_string(),
            None => path,
        };
        self.moves().insert(id, moved.clone());
        Ok(json!({"cwd": moved}))
    }

    async fn resume(self: &Arc<Self>, params: Option<Value>) -> Result<Value, RpcError> {
        self.ready()?;
        let id = plain(session_id(&params, "session/resume")?)?;
        if self.is_followed(&id) {
            return Err(fail(format!(
                "SDK session is already open or opening: {id}"
            )));
        }
        let Some(state) = self.gateway.session(&id).await.map_err(fail)? else {
            return Err(fail(format!("session \"{id}\" not found")));
        };
        let head = state.get("headSeq").and_then(Value::as_i64).unwrap_or(0);
        self.follow(&id, head);
        Ok(json!({}))
    }

    async fn wait(&self, params: Option<Value>) -> Result<Value, RpcError> {
        self.ready()?;
        let id = plain(session_id(&params, "session/wait")?)?;
        if !self.is_followed(&id) {
            return Err(fail(format!("unknown SDK session: {id}")));
        }
        loop {
            let Some(state) = self.gateway.session(&id).await.map_err(fail)? else {
                return Err(fail(format!("session \"{id}\" not found")));
            };
            let open = state
                .get("turnOpen")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let pending = state
                .get("pendingInput")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            if !open && pending == 0 {
                return Ok(json!({}));
            }
            tokio::time::sleep(WAIT_POLL).await;
        }
    }

    fn is_followed(&self, id: &str) -> bool {
        self.followed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(id)
    }

    /// Starts following session `id` (once): its events after seq `head` are notified.
    fn follow(&self, id: &str, head: i64) {
        let mut followed = self.followed.lock().unwrap_or_else(|e| e.into_inner());
        if followed.contains_key(id) || self.shutting_down.load(Ordering::Acquire) {
            return;
        }
        let task = tokio::spawn(follow(
            self.gateway.clone(),
            self.peer.clone(),
            self.format,
            id.to_string(),
            head,
        ));
        followed.insert(id.to_string(), AbortOnDrop(task));
    }

    /// Stops following every session; their turns go on in the team.
    pub(crate) fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
        self.followed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// What a followed session's stream has seen so far.
struct Cursor {
    session: String,
    /// Stored seqs up to this one are history: read, not notified.
    quiet_through: i64,
    records: Records,
    stream: EventStream,
}

/// Follows session `id` until the task is aborted, reconnecting after `Last-Event-ID`.
async fn follow(gateway: Gateway, peer: Peer, format: u64, id: String, head: i64) {
    let mut cursor = Cursor {
        session: id.clone(),
        quiet_through: head,
        records: Records::new(&id),
        stream: EventStream::new(format),
    };
    loop {
        let after = cursor.records.last();
        if let Err(e) = gateway
            .stream(&id, after, |seq, record| {
                deliver(&peer, &mut cursor, seq, record)
            })
            .await
        {
            tracing::debug!("sdk: following session {id} through the gateway: {e}");
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

/// Turns stored record `seq` into notifications (none while it is history).
fn deliver(peer: &Peer, cursor: &mut Cursor, seq: i64, record: &str) -> Result<(), String> {
    let events = cursor.records.decode(seq, record)?;
    let quiet = seq <= cursor.quiet_through;
    for event in events {
        if !quiet && event.is(types::TURN_START) {
            status(peer, &cursor.session, "running");
        }
        for row in cursor.stream.push_ordered(&cursor.session, &event) {
            if quiet {
                continue;
            }
            let mut params = String::from("{\"sessionId\":");
            dsh_kernel::json::write_string(&mut params, &cursor.session);
            params.push_str(",\"event\":");
            params.push_str(&row);
            params.push('}');
            peer.notify_raw("session.event", &params);
        }
        if !quiet && event.is(types::TURN_END) {
            status(peer, &cursor.session, "idle");
        }
    }
    Ok(())
}

fn status(peer: &Peer, session: &str, status: &str) {
    peer.notify(
        "session.status",
        json!({"sessionId": session, "status": status}),
    );
}
