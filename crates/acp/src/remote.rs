//! The ACP server in front of a team gateway (`dsh serve`): with `DSH_GATEWAY` set, `dsh acp`
//! hosts no agent. An editor's prompts are queued on the gateway as a session's input, a
//! `dsh worker` of the team runs each turn, and the session's stored events come back as the
//! same `session/update`s the rich projection sends: the user's messages, answers and
//! reasoning as their chunks are stored (whole messages for the history a load replays),
//! every tool call (marked running, then its result with a diff for edits), plans and
//! titles.
//!
//! * `session/new` chooses the session's id; the gateway creates the session with its first
//!   prompt. `session/load` replays the stored session, then follows it; `session/resume`
//!   only follows. Each followed session has one event stream, resumed by `Last-Event-ID`
//!   after a broken connection, so no update is sent twice or skipped.
//! * `session/prompt` answers once the turn that recorded the prompt has ended: `end_turn`,
//!   `cancelled` when it was interrupted or the editor cancelled it, an error when it failed.
//!   The prompt itself is not echoed; input other clients queue is shown as the user's.
//! * `session/cancel` withdraws the prompt while no worker has taken it, and otherwise
//!   cancels the turn that runs it.
//! * Permission requests reach the editor: prompts are queued saying this client answers
//!   approvals, so a call the workers' policy asks about waits; its `approval/asked` event
//!   becomes `session/request_permission` (the call as announced, the reason as its content,
//!   allow once or reject), and the answer goes back through the gateway. An approval
//!   decided meanwhile (another client answered, the turn was cancelled) is not asked again.
//! * Image blocks go with the prompt (after its text); the gateway checks them and the team
//!   keeps them for the session's later turns on any worker.
//! * What stays on the editor's machine: its MCP servers (the editor is told at the next
//!   prompt) and its working directory (the turn runs in the worker's workspace). Slash
//!   commands reach the model as text, as every team input does.
//! * At end of input the server stops following; the turns go on in the team.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_gateway_client::{Gateway, Records, Withdrawal};
use dsh_session::{Event, TurnEndReason, types};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::bridge::permission::{ALLOW_ONCE, REJECT_ONCE};
use crate::bridge::{
    absolute_cwd, cancelled_session, check_params, prompt_content, stopped, update,
};
use crate::project::{Projector, describe_call, parse_arguments};
use crate::protocol::{
    self, AgentCapabilities, Implementation, InitializeResponse, PermissionToolCall,
    PromptCapabilities, RequestPermission, SessionUpdate, StopReason, ToolCallContent,
};
use crate::rpc::{Peer, RpcError};

/// How long a broken event stream waits before it connects again.
const RECONNECT: Duration = Duration::from_millis(250);
/// How often a cancel asks again while a worker holds the session but has not recorded
/// the prompt yet.
const CANCEL_RETRY: Duration = Duration::from_millis(100);
/// How many times a cancel asks about input the gateway does not know (the prompt's own
/// queueing may still be on its way) before it gives up.
const UNKNOWN_TRIES: u32 = 100;

/// What became of one prompt this connection queued.
#[derive(Clone)]
enum Outcome {
    /// Waiting in the session's inbox.
    Queued,
    /// Recorded by a turn at this stored seq.
    Recorded(i64),
    /// That turn ended (for this reason, when the log gives one).
    Ended(Option<TurnEndReason>),
    /// Withdrawn before any turn took it.
    Withdrawn,
}

/// One session this connection opened.
struct Followed {
    id: String,
    cwd: Mutex<PathBuf>,
    /// The gateway has the session (it was loaded, or a prompt created it).
    created: AtomicBool,
    /// This connection's prompts, by message id.
    ours: Mutex<HashMap<String, Outcome>>,
    /// The last stored seq the stream delivered.
    last: Mutex<i64>,
    /// Bumped after each delivered record (and at shutdown).
    changed: watch::Sender<u64>,
    follower: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The prompt in flight: its message id and whether the editor cancelled it.
    prompt: Mutex<Option<(String, Arc<AtomicBool>)>>,
    /// Shown as agent text at the start of the next prompt.
    notices: Mutex<Vec<String>>,
}

/// What the stream of one followed session keeps to ask the editor about approvals.
struct Asking {
    /// Each call's tool name and arguments, by call id (the asked event names only the id).
    calls: HashMap<String, (String, Value)>,
    /// Approvals being asked, by approval id (the task is stopped once it is decided).
    open: HashMap<String, tokio::task::JoinHandle<()>>,
    /// Asked in the history before `live_from`, not decided there: asked once the stream
    /// reaches it.
    held: Vec<Arc<Event>>,
    live_from: i64,
}

impl Followed {
    fn new(id: String, cwd: PathBuf) -> Arc<Self> {
        Arc::new(Self {
            id,
            cwd: Mutex::new(cwd),
            created: AtomicBool::new(false),
            ours: Mutex::new(HashMap::new()),
            last: Mutex::new(0),
            changed: watch::channel(0).0,
            follower: Mutex::new(None),
            prompt: Mutex::new(None),
            notices: Mutex::new(Vec::new()),
        })
    }

    fn ours(&self) -> std::sync::MutexGuard<'_, HashMap<String, Outcome>> {
        self.ours.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn outcome(&self, message_id: &str) -> Option<Outcome> {
        self.ours().get(message_id).cloned()
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn stop_following(&self) {
        if let Some(task) = self
            .follower
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }

    /// Notes what `e` (stored at `seq`) means for this connection's prompts; returns false
    /// for the record of one of them (not echoed to the editor that sent it).
    fn observe(&self, e: &Event, seq: i64) -> bool {
        let data = e.data.as_value();
        let mut ours = self.ours();
        if e.is(types::USER_MESSAGE)
            && let Some(outcome) = data["id"].as_str().and_then(|id| ours.get_mut(id))
        {
            *outcome = Outcome::Recorded(seq);
            return false;
        }
        if e.is(types::TURN_END) {
            let reason = TurnEndReason::from_value(&data["reason"]);
            for outcome in ours.values_mut() {
                if matches!(outcome, Outcome::Recorded(at) if *at < seq) {
                    *outcome = Outcome::Ended(reason.clone());
                }
            }
        }
        true
    }
}

/// The ACP server when a team gateway runs the sessions.
pub(crate) struct Remote {
    gateway: Gateway,
    peer: Peer,
    sessions: Mutex<HashMap<String, Arc<Followed>>>,
    closed: AtomicBool,
}

impl Remote {
    pub(crate) fn new(gateway: Gateway, peer: Peer) -> Arc<Self> {
        Arc::new(Self {
            gateway,
            peer,
            sessions: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        })
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Followed>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn session(&self, id: &str) -> Option<Arc<Followed>> {
        self.sessions().get(id).cloned()
    }

    fn open(&self) -> Result<(), RpcError> {
        if self.closed.load(Ordering::Acquire) {
            Err(RpcError::internal("the ACP server is shutting down"))
        } else {
            Ok(())
        }
    }

    /// Answers one request.
    pub(crate) async fn handle(
        self: &Arc<Self>,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, RpcError> {
        match method {
            "initialize" => {
                check_params(params.as_ref(), &[("protocolVersion", "number")])?;
                Ok(protocol::to_value(&InitializeResponse {
                    protocol_version: 1,
                    agent_info: Implementation {
                        name: "deepseek-harness-acp",
                        version: "0.0.1",
                    },
                    agent_capabilities: AgentCapabilities {
                        load_session: Some(true),
                        prompt_capabilities: PromptCapabilities {
                            image: true,
                            audio: false,
                            embedded_context: true,
                        },
                        mcp_capabilities: None,
                        session_capabilities: Some(json!({"resume": {}, "close": {}})),
                    },
                    auth_methods: Vec::new(),
                }))
            }
            "authenticate" => Ok(json!({})),
            "session/new" => self.new_session(params),
            "session/load" => self.load(params, true).await,
            "session/resume" => self.load(params, false).await,
            "session/prompt" => self.prompt(params).await,
            "session/close" => {
                let p = check_params(params.as_ref(), &[("sessionId", "string")])?;
                let id = p.get("sessionId").and_then(Value::as_str).unwrap_or("");
                let Some(session) = self.sessions().remove(id) else {
                    return Err(crate::rpc::not_found(id));
                };
                self.cancel(&session);
                session.stop_following();
                Ok(json!({}))
            }
            other => Err(RpcError::method_not_found(other)),
        }
    }

    /// What the editor should know about the MCP servers it asked for.
    fn mcp_notice(p: &Map<String, Value>) -> Option<String> {
        let servers = p.get("mcpServers").and_then(Value::as_array)?;
        if servers.is_empty() {
            return None;
        }
        let names: Vec<&str> = servers
            .iter()
            .map(|s| s.get("name").and_then(Value::as_str).unwrap_or("?"))
            .collect();
        Some(format!(
            "This session runs on a team's workers (DSH_GATEWAY), which cannot reach this editor's MCP servers ({}); it has the workers' tools only.",
            names.join(", ")
        ))
    }

    fn new_session(&self, params: Option<Value>) -> Result<Value, RpcError> {
        let p = check_params(
            params.as_ref(),
            &[("cwd", "string"), ("mcpServers", "array")],
        )?;
        let cwd = absolute_cwd(&p)?;
        self.open()?;
        let id = uuid::Uuid::new_v4().to_string();
        let session = Followed::new(id.clone(), cwd);
        session
            .notices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(Self::mcp_notice(&p));
        self.sessions().insert(id.clone(), session);
        Ok(json!({"sessionId": id}))
    }

    /// `session/load` (`replay`: the history is sent first) and `session/resume`.
    async fn load(&self, params: Option<Value>, replay: bool) -> Result<Value, RpcError> {
        let p = check_params(
            params.as_ref(),
            &[("sessionId", "string"), ("cwd", "string")],
        )?;
        let id = p
            .get("sessionId")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let cwd = absolute_cwd(&p)?;
        self.open()?;
        if !dsh_session::is_plain_id(&id) {
            return Err(crate::rpc::not_found(&id));
        }
        let state = self
            .gateway
            .session(&id)
            .await
            .map_err(RpcError::internal)?
            .ok_or_else(|| crate::rpc::not_found(&id))?;
        let head = state.get("headSeq").and_then(Value::as_i64).unwrap_or(0);
        let cwd = state
            .get("cwd")
            .and_then(Value::as_str)
            .map_or(cwd, PathBuf::from);
        if let Some(open) = self.session(&id) {
            if replay {
                let cwd = open.cwd.lock().unwrap_or_else(|e| e.into_inner()).clone();
                self.replay(&id, head, cwd).await?;
            }
            return Ok(json!({}));
        }
        let session = Followed::new(id.clone(), cwd);
        session.created.store(true, Ordering::Release);
        session
            .notices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(Self::mcp_notice(&p));
        self.sessions().insert(id.clone(), session.clone());
        let mut changed = session.changed.subscribe();
        self.follow(&session, if replay { 0 } else { head }, head);
        // The history is sent before the answer, as a local load sends it.
        while *session.last.lock().unwrap_or_else(|e| e.into_inner()) < head {
            if self.closed.load(Ordering::Acquire) || changed.changed().await.is_err() {
                return Err(RpcError::internal("the ACP server is shutting down"));
            }
        }
        Ok(json!({}))
    }

    /// Sends session `id`'s stored history through seq `head` as updates (a session this
    /// connection follows already).
    async fn replay(&self, id: &str, head: i64, cwd: PathBuf) -> Result<(), RpcError> {
        const DONE: &str = "replayed";
        let mut records = Records::new(id);
        let mut projector = Projector::new(cwd);
        let mut title = None;
        let mut out = Vec::new();
        let read = self
            .gateway
            .stream(id, 0, |seq, record| {
                for e in records.decode(seq, record)? {
                    if e.is("session/title") {
                        title = Some(e);
                    } else {
                        out.extend(projector.committed(&e));
                    }
                }
                if seq >= head {
                    Err(DONE.into())
                } else {
                    Ok(())
                }
            })
            .await;
        match read {
            Err(e) if e == DONE => {}
            Err(e) => return Err(RpcError::internal(e)),
            Ok(()) if records.last() < head => {
                return Err(RpcError::internal(format!(
                    "the gateway's stream of session {id} ended before its head"
                )));
            }
            Ok(()) => {}
        }
        if let Some(e) = title {
            out.extend(projector.committed(&e));
        }
        for u in out {
            update(&self.peer, id, u);
        }
        Ok(())
    }

    /// Starts following `session` (once): every stored record is read, those after seq
    /// `quiet_through` are sent as updates, and approvals still waiting from seq `live_from`
    /// on are asked.
    fn follow(&self, session: &Arc<Followed>, quiet_through: i64, live_from: i64) {
        let mut slot = session.follower.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return;
        }
        let (gateway, peer, session_ref) =
            (self.gateway.clone(), self.peer.clone(), session.clone());
        *slot = Some(tokio::spawn(async move {
            follow(gateway, peer, session_ref, quiet_through, live_from).await;
        }));
    }

    async fn prompt(self: &Arc<Self>, params: Option<Value>) -> Result<Value, RpcError> {
        let p = check_params(
            params.as_ref(),
            &[("sessionId", "string"), ("prompt", "array")],
        )?;
        let id = p.get("sessionId").and_then(Value::as_str).unwrap_or("");
        self.open()?;
        let Some(session) = self.session(id) else {
            return Err(RpcError::invalid_params(format!("unknown session: {id}")));
        };
        let blocks = p
            .get("prompt")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let (content, images) = prompt_content(&blocks, true, true)?;
        let images: Vec<Value> = images
            .iter()
            .map(|i| {
                json!({"mediaType": i.media_type, "data": dsh_attachments::encode_base64(&i.data)})
            })
            .collect();
        let text: Vec<&str> = content
            .iter()
            .filter_map(|b| match b {
                dsh_llm::ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let text = text.join("\n\n");
        if text.trim().is_empty() && images.is_empty() {
            return Err(RpcError::invalid_params(
                "the prompt has no text and no image",
            ));
        }
        let message_id = uuid::Uuid::new_v4().to_string();
        let cancelled = Arc::new(AtomicBool::new(false));
        {
            let mut slot = session.prompt.lock().unwrap_or_else(|e| e.into_inner());
            if slot.is_some() {
                return Err(RpcError::invalid_params(
                    "a prompt is already in flight for this session",
                ));
            }
            *slot = Some((message_id.clone(), cancelled.clone()));
        }
        let result = self
            .run_prompt(&session, text, images, &message_id, &cancelled)
            .await;
        session.ours().remove(&message_id);
        *session.prompt.lock().unwrap_or_else(|e| e.into_inner()) = None;
        result
    }

    async fn run_prompt(
        &self,
        session: &Arc<Followed>,
        text: String,
        images: Vec<Value>,
        message_id: &str,
        cancelled: &AtomicBool,
    ) -> Result<Value, RpcError> {
        let notices =
            std::mem::take(&mut *session.notices.lock().unwrap_or_else(|e| e.into_inner()));
        for notice in notices {
            update(
                &self.peer,
                &session.id,
                SessionUpdate::agent_text(format!("{notice}\n\n")),
            );
        }
        let mut changed = session.changed.subscribe();
        // Known before it is queued, so the stream never sees its record unclaimed.
        session
            .ours()
            .insert(message_id.to_string(), Outcome::Queued);
        let mut body = json!({"text": text, "messageId": message_id, "answersApprovals": true});
        if !images.is_empty() {
            body["images"] = Value::Array(images);
        }
        let queued = if session.created.load(Ordering::Acquire) {
            self.gateway
                .post(&format!("/v1/sessions/{}/messages", session.id), &body)
                .await
        } else {
            body["sessionId"] = json!(session.id);
            self.gateway.post("/v1/sessions", &body).await
        };
        queued.map_err(|e| RpcError::internal(format!("the prompt was not queued: {e}")))?;
        session.created.store(true, Ordering::Release);
        self.follow(session, 0, 0);
        let reason = loop {
            match session.outcome(message_id) {
                Some(Outcome::Ended(reason)) => break reason,
                Some(Outcome::Withdrawn) | None => return stopped(StopReason::Cancelled),
                Some(Outcome::Queued | Outcome::Recorded(_)) => {}
            }
            if self.closed.load(Ordering::Acquire) || changed.changed().await.is_err() {
                // The connection ended: the turn goes on in the team.
                return stopped(StopReason::Cancelled);
            }
        };
        if cancelled.load(Ordering::Acquire) {
            return stopped(StopReason::Cancelled);
        }
        match reason {
            Some(TurnEndReason::Error(f)) => {
                Err(RpcError::internal(format!("turn failed: {}", f.message)))
            }
            Some(TurnEndReason::Interrupted | TurnEndReason::Aborted(_)) | None => {
                stopped(StopReason::Cancelled)
            }
            Some(_) => stopped(StopReason::EndTurn),
        }
    }

    /// Handles a notification (`session/cancel`).
    pub(crate) fn notification(&self, method: &str, params: Option<Value>) {
        let Some(session) =
            cancelled_session(method, params.as_ref()).and_then(|id| self.session(id))
        else {
            return;
        };
        self.cancel(&session);
    }

    /// Cancels `session`'s prompt in flight, if any: withdrawn while no worker has taken it,
    /// else its turn is cancelled.
    fn cancel(&self, session: &Arc<Followed>) {
        let Some((message_id, cancelled)) = session
            .prompt
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        else {
            return;
        };
        if cancelled.swap(true, Ordering::AcqRel) {
            return;
        }
        let (gateway, session) = (self.gateway.clone(), session.clone());
        tokio::spawn(async move {
            if let Err(e) = cancel(&gateway, &session, &message_id).await {
                tracing::warn!("acp: cancelling a prompt of session {}: {e}", session.id);
            }
        });
    }

    /// End of input: stop following; prompts still waiting answer `cancelled` (their turns
    /// go on in the team).
    pub(crate) fn quiesce(&self) {
        self.closed.store(true, Ordering::Release);
        for session in self.sessions().values() {
            session.stop_following();
            session.bump();
        }
    }
}

/// Withdraws or cancels the prompt `message_id` of `session`.
async fn cancel(gateway: &Gateway, session: &Followed, message_id: &str) -> Result<(), String> {
    let mut unknown = 0;
    loop {
        match session.outcome(message_id) {
            None | Some(Outcome::Ended(_) | Outcome::Withdrawn) => return Ok(()),
            Some(Outcome::Recorded(_)) => return gateway.cancel(&session.id).await.map(drop),
            Some(Outcome::Queued) => {}
        }
        match gateway.withdraw(&session.id, message_id).await? {
            Withdrawal::Withdrawn => {
                if let Some(o) = session.ours().get_mut(message_id) {
                    *o = Outcome::Withdrawn;
                }
                session.bump();
                return Ok(());
            }
            Withdrawal::Recorded => return gateway.cancel(&session.id).await.map(drop),
            Withdrawal::Held => {}
            Withdrawal::Unknown => {
                unknown += 1;
                if unknown >= UNKNOWN_TRIES {
                    return Err(format!(
                        "the gateway does not know the prompt {message_id}; it was not cancelled"
                    ));
                }
            }
        }
        tokio::time::sleep(CANCEL_RETRY).await;
    }
}

/// Follows `session` until the task is aborted, reconnecting after `Last-Event-ID`.
async fn follow(
    gateway: Gateway,
    peer: Peer,
    session: Arc<Followed>,
    quiet_through: i64,
    live_from: i64,
) {
    let mut records = Records::new(&session.id);
    let cwd = session
        .cwd
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut projector = Projector::new(cwd);
    // Chunks of the answer being formed were sent.
    let mut streamed = false;
    let mut asking = Asking {
        calls: HashMap::new(),
        open: HashMap::new(),
        held: Vec::new(),
        live_from,
    };
    loop {
        let after = records.last();
        let read = gateway
            .stream(&session.id, after, |seq, record| {
                for e in records.decode(seq, record)? {
                    asking.observe(&gateway, &peer, &session, projector.cwd(), &e, seq);
                    let shown = session.observe(&e, seq);
                    if !shown || seq <= quiet_through {
                        continue;
                    }
                    // Past the history, answers stream as their chunks are stored, and the
                    // message they form then adds nothing; the history shows messages whole.
                    let updates = if seq <= live_from {
                        projector.committed(&e)
                    } else if e.is(types::ASSISTANT_CHUNK) {
                        let chunks = projector.live(&e);
                        streamed |= !chunks.is_empty();
                        chunks
                    } else if e.is(types::ASSISTANT_MESSAGE) && std::mem::take(&mut streamed) {
                        Vec::new()
                    } else {
                        projector.committed(&e)
                    };
                    for u in updates {
                        let running = match &u {
                            SessionUpdate::ToolCall(call) => Some(call.tool_call_id.clone()),
                            _ => None,
                        };
                        update(&peer, &session.id, u);
                        // The call is committed before its tool runs: it runs now.
                        if let Some(call_id) = running {
                            update(&peer, &session.id, Projector::started(&call_id));
                        }
                    }
                }
                if seq >= asking.live_from {
                    asking.release(&gateway, &peer, &session, projector.cwd());
                }
                *session.last.lock().unwrap_or_else(|e| e.into_inner()) = seq;
                session.bump();
                Ok(())
            })
            .await;
        if let Err(e) = read {
            tracing::debug!(
                "acp: following session {} through the gateway: {e}",
                session.id
            );
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

impl Asking {
    /// Notes what `e` (stored at `seq`) means for approvals: a call's arguments, an approval
    /// to ask about, one decided.
    fn observe(
        &mut self,
        gateway: &Gateway,
        peer: &Peer,
        session: &Arc<Followed>,
        cwd: &Path,
        e: &Arc<Event>,
        seq: i64,
    ) {
        let data = e.data.as_value();
        match e.event_type.as_str() {
            types::TOOL_CALL => {
                if let (Some(id), Some(name)) = (data["callId"].as_str(), data["name"].as_str()) {
                    if self.calls.len() >= 1024 {
                        self.calls.clear();
                    }
                    self.calls.insert(
                        id.to_string(),
                        (name.to_string(), parse_arguments(&data["arguments"])),
                    );
                }
            }
            "approval/asked" if seq < self.live_from => self.held.push(e.clone()),
            "approval/asked" => self.ask(gateway, peer, session, cwd, e),
            "approval/decided" => {
                let id = data["id"].as_str().unwrap_or_default();
                self.held.retain(|h| h.data.as_value()["id"] != id);
                if let Some(task) = self.open.remove(id) {
                    task.abort();
                }
            }
            _ => {}
        }
    }

    /// Asks about the approvals the history left waiting.
    fn release(&mut self, gateway: &Gateway, peer: &Peer, session: &Arc<Followed>, cwd: &Path) {
        for e in std::mem::take(&mut self.held) {
            self.ask(gateway, peer, session, cwd, &e);
        }
    }

    /// Asks the editor about approval `asked` and sends its answer to the gateway.
    fn ask(
        &mut self,
        gateway: &Gateway,
        peer: &Peer,
        session: &Arc<Followed>,
        cwd: &Path,
        asked: &Event,
    ) {
        let data = asked.data.as_value();
        let (Some(id), Some(call_id)) = (data["id"].as_str(), data["callId"].as_str()) else {
            return;
        };
        let tool = data["toolName"].as_str().unwrap_or_default();
        let (name, args) = self
            .calls
            .get(call_id)
            .cloned()
            .unwrap_or_else(|| (tool.to_string(), json!({})));
        let mut call = describe_call(call_id, &name, &args, cwd);
        call.content = data["reason"]
            .as_str()
            .map(|reason| vec![ToolCallContent::text(reason.to_string())]);
        let params = protocol::to_value(&RequestPermission {
            session_id: &session.id,
            tool_call: PermissionToolCall::Described(call),
            options: vec![ALLOW_ONCE, REJECT_ONCE],
        });
        let (gateway, peer, session_id, approval) = (
            gateway.clone(),
            peer.clone(),
            session.id.clone(),
            id.to_string(),
        );
        let task = tokio::spawn(async move {
            let answer = peer.request("session/request_permission", params).await;
            let outcome = match answer {
                Ok(v)
                    if v.pointer("/outcome/optionId").and_then(Value::as_str)
                        == Some(ALLOW_ONCE.option_id)
                        && v.pointer("/outcome/outcome").and_then(Value::as_str)
                            == Some("selected") =>
                {
                    "allowed-once"
                }
                Ok(_) => "rejected",
                // No answer from the editor: the turn keeps waiting for another client.
                Err(e) => {
                    tracing::debug!("acp: permission request for {approval}: {e:?}");
                    return;
                }
            };
            if let Err(e) = gateway
                .answer_approval(&session_id, &approval, outcome)
                .await
            {
                tracing::warn!("acp: answering approval {approval} of session {session_id}: {e}");
            }
        });
        self.open.insert(id.to_string(), task);
    }
}
