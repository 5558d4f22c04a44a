//! The ACP bridge: sessions, prompts, cancellation, permission requests, and the
//! `session/update` projection. The rich projection (the default) streams text and
//! reasoning, announces every tool call and its result, plans and titles, and offers
//! `session/load|resume|list|close` and `session/set_mode`; the committed projection
//! (upstream 0.1's, which the recorded conformance scenarios pin) sends one
//! `agent_message_chunk` per non-empty text block of each committed `assistant/message`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use dsh_agent::{AgentOptions, AgentRef, AgentSource, Agents, CreateAgent, InboxClaimed};
use dsh_kernel::{BoxFuture, Context, ListenOptions};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_persistence::{PersistenceError, SessionFiles};
use dsh_policies::presets::PermissionPresets;
use dsh_policies::{ApprovalAnswerer, Approvals};
use dsh_session::{CancelCause, SessionAppended, TurnEndReason, types};
use dsh_tools::{ApprovalOutcome, ApprovalRequest, Execute, ToolOutputEvent};
use serde_json::{Map, Value, json};

use crate::project::{Live, Projector, describe_call};
use crate::protocol::{
    self, AgentCapabilities, AvailableCommand, CommandInput, Implementation, InitializeResponse,
    PromptCapabilities, PromptResponse, SessionNotification, SessionUpdate, StopReason,
};
use crate::rpc::{Peer, RpcError};

mod config;
mod content;
mod mcp;
pub(crate) mod permission;
mod sessions;

pub(crate) use content::prompt_content;
use mcp::{attach_mcp, follow_mcp};
use permission::Answerer;

/// Route of the sessions this server creates.
#[derive(Clone, Debug)]
pub struct AcpConfig {
    pub provider: String,
    pub model: String,
    pub projection: Projection,
}

/// How much of the agent's work the client sees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Projection {
    /// What editors expect: permission requests carry the whole tool call.
    #[default]
    Rich,
    /// Upstream 0.1's projection: committed assistant text, bare permission requests.
    Committed,
}

struct Prompt {
    cancel_requested: Arc<AtomicBool>,
}

struct AcpSession {
    agent: AgentRef,
    prompt: Mutex<Option<Prompt>>,
    projector: Mutex<Projector>,
    /// Tools the user allowed for the rest of the session ("Always allow").
    always_allowed: Mutex<Vec<String>>,
    /// What the user should know before the next answer (an MCP server that did not
    /// start), shown as agent text at the start of the next prompt.
    notices: Mutex<Vec<String>>,
}

impl AcpSession {
    fn new(agent: AgentRef, cwd: PathBuf) -> Arc<Self> {
        Arc::new(Self {
            agent,
            prompt: Mutex::new(None),
            projector: Mutex::new(Projector::new(cwd)),
            always_allowed: Mutex::new(Vec::new()),
            notices: Mutex::new(Vec::new()),
        })
    }

    fn with_notices(self: Arc<Self>, notices: Vec<String>) -> Arc<Self> {
        self.notices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(notices);
        self
    }

    fn projector(&self) -> std::sync::MutexGuard<'_, Projector> {
        self.projector.lock().unwrap_or_else(|e| e.into_inner())
    }
}

type Sessions = Arc<Mutex<HashMap<String, Arc<AcpSession>>>>;

fn owned(sessions: &Sessions, id: &str) -> Option<Arc<AcpSession>> {
    sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(id)
        .cloned()
}

pub(crate) fn update(peer: &Peer, session_id: &str, update: SessionUpdate) {
    peer.notify(
        "session/update",
        protocol::to_value(&SessionNotification { session_id, update }),
    );
}

/// The `cwd` of a request's params, which must be an absolute path (on the client's
/// machine).
pub(crate) fn absolute_cwd(p: &Map<String, Value>) -> Result<PathBuf, RpcError> {
    let cwd = p.get("cwd").and_then(Value::as_str).unwrap_or("");
    if !Path::new(cwd).is_absolute() {
        return Err(RpcError::invalid_params(format!(
            "cwd must be an absolute path: {cwd}"
        )));
    }
    Ok(PathBuf::from(cwd))
}

/// The session a `session/cancel` notification names (`None` for any other notification).
pub(crate) fn cancelled_session<'a>(method: &str, params: Option<&'a Value>) -> Option<&'a str> {
    if method != "session/cancel" {
        return None;
    }
    params?.get("sessionId")?.as_str()
}

/// A `session/prompt` answer.
pub(crate) fn stopped(stop_reason: StopReason) -> Result<Value, RpcError> {
    Ok(protocol::to_value(&PromptResponse { stop_reason }))
}

/// One server connection.
pub struct Bridge {
    root: Context,
    pub(crate) peer: Peer,
    config: AcpConfig,
    sessions: Sessions,
    /// Message id → the turn that claimed it.
    claims: Arc<Mutex<HashMap<String, u64>>>,
    closed: AtomicBool,
    /// What the client said it can do with files (`fs.readTextFile`, `fs.writeTextFile`).
    client_fs: Mutex<(bool, bool)>,
    /// The client offers terminals (`clientCapabilities.terminal`).
    client_terminal: std::sync::atomic::AtomicBool,
    /// Model and reasoning effort chosen per session (`session/set_config_option`).
    choices: Choices,
    /// Whether `initialize` advertised inline image prompts.
    image_prompts: AtomicBool,
}

/// Per-session route choices: `(model, reasoning effort)`.
type Choices = Arc<Mutex<HashMap<String, (Option<String>, Option<String>)>>>;

fn kind_of(v: Option<&Value>) -> &'static str {
    match v {
        None => "undefined",
        Some(Value::Null) => "null",
        Some(Value::Bool(_)) => "boolean",
        Some(Value::Number(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Array(_)) => "array",
        Some(Value::Object(_)) => "object",
    }
}

/// zod-style parameter checks: `(field, expected type)`.
pub(crate) fn check_params(
    params: Option<&Value>,
    fields: &[(&str, &str)],
) -> Result<Map<String, Value>, RpcError> {
    let Some(Value::Object(map)) = params else {
        return Err(RpcError::schema(
            json!({"_errors": [format!("Invalid input: expected object, received {}", kind_of(params))]}),
        ));
    };
    let mut tree = Map::new();
    tree.insert("_errors".into(), json!([]));
    for (field, expected) in fields {
        let got = kind_of(map.get(*field));
        let ok = match *expected {
            "string" | "array" | "object" => got == *expected,
            "number" => map
                .get(*field)
                .and_then(Value::as_f64)
                .is_some_and(|f| f.fract() == 0.0),
            _ => true,
        };
        if !ok {
            tree.insert(
                field.to_string(),
                json!({"_errors": [format!("Invalid input: expected {expected}, received {got}")]}),
            );
        }
    }
    if tree.len() > 1 {
        return Err(RpcError::schema(Value::Object(tree)));
    }
    Ok(map.clone())
}

impl Bridge {
    pub fn new(root: Context, peer: Peer, config: AcpConfig) -> Result<Arc<Self>, String> {
        let bridge = Arc::new(Self {
            root: root.clone(),
            peer: peer.clone(),
            config,
            sessions: Arc::new(Mutex::new(HashMap::new())),
            claims: Arc::new(Mutex::new(HashMap::new())),
            closed: AtomicBool::new(false),
            client_fs: Mutex::new((false, false)),
            client_terminal: std::sync::atomic::AtomicBool::new(false),
            choices: Arc::new(Mutex::new(HashMap::new())),
            image_prompts: AtomicBool::new(false),
        });
        match bridge.config.projection {
            Projection::Committed => Self::project_committed(&root, &bridge.sessions, &peer)?,
            Projection::Rich => {
                Self::project_rich(&root, &bridge.sessions, &peer)?;
                Self::apply_choices(&root, &bridge.choices)?;
            }
        }
        let claims = bridge.claims.clone();
        root.on_emit::<InboxClaimed>(ListenOptions::GLOBAL, move |p| {
            if let Some(turn) = p.turn {
                claims
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(p.message.id.clone(), turn);
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        if let Some(approvals) = root.get::<Approvals>() {
            let answerer = Arc::new(Answerer {
                peer: peer.clone(),
                sessions: bridge.sessions.clone(),
                projection: bridge.config.projection,
            });
            approvals
                .register_answerer(&root, answerer)
                .map_err(|e| e.to_string())?;
        }
        Ok(bridge)
    }

    /// Committed assistant text, one notification per block.
    fn project_committed(root: &Context, sessions: &Sessions, peer: &Peer) -> Result<(), String> {
        let sessions = sessions.clone();
        let projector = peer.clone();
        root.on_emit::<SessionAppended>(ListenOptions::GLOBAL, move |p| {
            if !p.event.is(types::ASSISTANT_MESSAGE) {
                return Ok(());
            }
            let id = p.session.id();
            if owned(&sessions, &id).is_none() {
                return Ok(());
            }
            let Some(Value::Array(content)) = p.event.data.pointer("/message/content") else {
                return Ok(());
            };
            for block in content {
                if block.get("type").and_then(Value::as_str) == Some("text")
                    && let Some(text) = block
                        .get("text")
                        .and_then(Value::as_str)
                        .filter(|t| !t.is_empty())
                {
                    update(&projector, &id, SessionUpdate::agent_text(text));
                }
            }
            Ok(())
        })
        .map(|_| ())
        .map_err(|e| e.to_string())
    }

    /// Streams, tool calls, plans and titles (see [`Projector`]); tool calls are marked
    /// running when their body starts, and their output shows while they run.
    fn project_rich(root: &Context, sessions: &Sessions, peer: &Peer) -> Result<(), String> {
        let (s, out) = (sessions.clone(), peer.clone());
        let llm = root.get::<dsh_llm::LlmRuntime>();
        root.on_emit::<SessionAppended>(ListenOptions::GLOBAL, move |p| {
            let id = p.session.id();
            if let Some(session) = owned(&s, &id) {
                // Projected under the lock so updates leave in log order.
                let mut projector = session.projector();
                for u in projector.live(&p.event) {
                    update(&out, &id, u);
                }
                if let Some(u) = llm.as_deref().and_then(|llm| usage_update(llm, &p.event)) {
                    update(&out, &id, u);
                }
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        let (s, out) = (sessions.clone(), peer.clone());
        root.on_waterfall::<Execute>(ListenOptions::GLOBAL, move |exec, next| {
            if exec.parent.is_none()
                && let Some(session) = exec.session.as_ref().map(|l| l.id())
                && owned(&s, &session).is_some()
            {
                update(&out, &session, Projector::started(&exec.call_id));
            }
            next.run()
        })
        .map_err(|e| e.to_string())?;
        let (s, out) = (sessions.clone(), peer.clone());
        root.on_emit::<ToolOutputEvent>(ListenOptions::GLOBAL, move |p| {
            let Some(session) = owned(&s, &p.session_id) else {
                return Ok(());
            };
            let live = session.projector().output(&p.call_id, &p.text);
            match live {
                Live::Send(u) => update(&out, &p.session_id, u),
                Live::FlushAfter(wait) => {
                    // The last output of a burst is sent once the interval is over.
                    let (out, id, call) = (out.clone(), p.session_id.clone(), p.call_id.clone());
                    if let Ok(rt) = tokio::runtime::Handle::try_current() {
                        rt.spawn(async move {
                            tokio::time::sleep(wait).await;
                            if let Some(u) = session.projector().flush(&call) {
                                update(&out, &id, u);
                            }
                        });
                    }
                }
                Live::Held => {}
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Every request of a session runs on the model and effort chosen for it.
    fn apply_choices(root: &Context, choices: &Choices) -> Result<(), String> {
        let choices = choices.clone();
        root.on_waterfall::<dsh_agent::Request>(ListenOptions::GLOBAL, move |payload, next| {
            let chosen = choices
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&payload.agent.session().id())
                .cloned();
            Box::pin(async move {
                let mut config = next.run().await?;
                if let Some((model, effort)) = chosen {
                    if let Some(model) = model {
                        config.model = model;
                    }
                    if effort.is_some() {
                        config.reasoning_effort = effort;
                    }
                }
                Ok(config)
            })
        })
        .map(|_| ())
        .map_err(|e| e.to_string())
    }

    fn session(&self, id: &str) -> Option<Arc<AcpSession>> {
        owned(&self.sessions, id)
    }

    /// A fresh agent on this server's route for session `id` in `cwd`.
    fn agent_request(&self, id: &str, cwd: PathBuf) -> CreateAgent {
        let mut request = CreateAgent::fresh(AgentOptions {
            provider: Some(self.config.provider.clone()),
            model: Some(self.config.model.clone()),
            max_tokens: None,
            reasoning_effort: None,
        });
        request.session_id = Some(id.to_string());
        request.cwd = Some(cwd);
        request
    }

    /// Adds a session to this connection; in the rich projection its file I/O goes through
    /// the editor when the client advertised `fs` methods.
    fn adopt(&self, id: &str, session: Arc<AcpSession>) {
        let (reads, writes) = *self.client_fs.lock().unwrap_or_else(|e| e.into_inner());
        if self.rich()
            && (reads || writes)
            && let Some(routes) = self.root.get::<dsh_tools::ClientFileRoutes>()
        {
            routes.route(
                id,
                Arc::new(crate::client_fs::EditorFiles {
                    peer: self.peer.clone(),
                    session_id: id.to_string(),
                    reads,
                    writes,
                }),
            );
        }
        // An editor asks its user: a change the mode forbids asks at once.
        if self.rich()
            && let Some(ask) = self.root.get::<dsh_tools::AskAtOnce>()
        {
            ask.mark(id);
        }
        // Unconfined shell commands run in the editor's terminals when it offers them.
        if self.rich()
            && self.client_terminal.load(Ordering::Acquire)
            && let Some(routes) = self.root.get::<dsh_tools::ClientTerminalRoutes>()
        {
            routes.route(
                id,
                Arc::new(crate::client_terminal::EditorTerminals {
                    peer: self.peer.clone(),
                    session_id: id.to_string(),
                }),
            );
        }
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), session);
    }

    fn unroute(&self, id: &str) {
        if let Some(routes) = self.root.get::<dsh_tools::ClientFileRoutes>() {
            routes.unroute(id);
        }
        if let Some(routes) = self.root.get::<dsh_tools::ClientTerminalRoutes>() {
            routes.unroute(id);
        }
        if let Some(ask) = self.root.get::<dsh_tools::AskAtOnce>() {
            ask.unmark(id);
        }
        self.choices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    fn rich(&self) -> bool {
        self.config.projection == Projection::Rich
    }

    /// ACP `mcpServers`: refused in the committed projection (upstream 0.1's answer), else
    /// parsed for [`attach_mcp`].
    fn mcp_servers(&self, p: &Map<String, Value>) -> Result<Vec<dsh_mcp::ServerConfig>, RpcError> {
        let servers = match p.get("mcpServers").and_then(Value::as_array) {
            Some(a) if !a.is_empty() => a,
            _ => return Ok(Vec::new()),
        };
        if !self.rich() {
            return Err(RpcError::invalid_params("mcpServers is not supported"));
        }
        dsh_mcp::acp::parse_servers(servers).map_err(RpcError::invalid_params)
    }

    /// Answers one request.
    pub async fn handle(
        self: &Arc<Self>,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, RpcError> {
        match method {
            "initialize" => {
                let p = check_params(params.as_ref(), &[("protocolVersion", "number")])?;
                let fs = p.get("clientCapabilities").and_then(|c| c.get("fs"));
                let flag =
                    |k: &str| fs.and_then(|f| f.get(k)).and_then(Value::as_bool) == Some(true);
                *self.client_fs.lock().unwrap_or_else(|e| e.into_inner()) =
                    (flag("readTextFile"), flag("writeTextFile"));
                let terminal = p
                    .get("clientCapabilities")
                    .and_then(|c| c.get("terminal"))
                    .and_then(Value::as_bool)
                    == Some(true);
                self.client_terminal.store(terminal, Ordering::Release);
                let image =
                    crate::images::supported(&self.root, &self.config.provider, &self.config.model);
                self.image_prompts.store(image, Ordering::Release);
                let rich = self.rich();
                let capabilities = AgentCapabilities {
                    load_session: rich.then_some(true),
                    prompt_capabilities: PromptCapabilities {
                        image,
                        audio: false,
                        embedded_context: rich,
                    },
                    mcp_capabilities: rich.then(dsh_mcp::acp::capabilities),
                    session_capabilities: rich
                        .then(|| json!({"list": {}, "resume": {}, "close": {}})),
                };
                Ok(protocol::to_value(&InitializeResponse {
                    protocol_version: 1,
                    // The name and version upstream's recorded answers carry.
                    agent_info: Implementation {
                        name: "deepseek-harness-acp",
                        version: "0.0.1",
                    },
                    agent_capabilities: capabilities,
                    auth_methods: Vec::new(),
                }))
            }
            "authenticate" => Ok(json!({})),
            "session/new" => self.new_session(params).await,
            "session/prompt" => self.prompt(params).await,
            "session/load" if self.rich() => self.load_session(params, true).await,
            "session/resume" if self.rich() => self.load_session(params, false).await,
            "session/list" if self.rich() => self.list_sessions(params).await,
            "session/close" if self.rich() => self.close_session(params).await,
            "session/set_mode" if self.rich() => self.set_mode(params),
            "session/set_config_option" if self.rich() => self.set_config_option(params),
            other => Err(RpcError::method_not_found(other)),
        }
    }

    /// Notifications that follow a response: a session's available commands.
    pub fn after_response(
        &self,
        method: &str,
        params: Option<&Value>,
        result: &Result<Value, RpcError>,
    ) {
        if !self.rich() || !matches!(method, "session/new" | "session/load" | "session/resume") {
            return;
        }
        let Ok(result) = result else { return };
        let Some(id) = result
            .get("sessionId")
            .or_else(|| params.and_then(|p| p.get("sessionId")))
            .and_then(Value::as_str)
        else {
            return;
        };
        let commands: Vec<AvailableCommand> = self
            .root
            .get::<dsh_commands::CommandRegistry>()
            .map(|r| r.list())
            .unwrap_or_default()
            .into_iter()
            .map(|c| AvailableCommand {
                name: c.name,
                description: c.description,
                input: c.hint.map(|hint| CommandInput { hint }),
            })
            .collect();
        update(
            &self.peer,
            id,
            SessionUpdate::AvailableCommandsUpdate {
                available_commands: commands,
            },
        );
    }

    async fn prompt(self: &Arc<Self>, params: Option<Value>) -> Result<Value, RpcError> {
        let p = check_params(
            params.as_ref(),
            &[("sessionId", "string"), ("prompt", "array")],
        )?;
        let id = p.get("sessionId").and_then(Value::as_str).unwrap_or("");
        if self.closed.load(Ordering::Acquire) {
            return Err(RpcError::internal("the ACP bridge has been disposed"));
        }
        let Some(session) = self.session(id) else {
            return Err(RpcError::invalid_params(format!("unknown session: {id}")));
        };
        let cancel_requested = Arc::new(AtomicBool::new(false));
        {
            let mut slot = session.prompt.lock().unwrap_or_else(|e| e.into_inner());
            if slot.is_some() {
                return Err(RpcError::invalid_params(
                    "a prompt is already in flight for this session",
                ));
            }
            *slot = Some(Prompt {
                cancel_requested: cancel_requested.clone(),
            });
        }
        let result = self.run_prompt(&session, &p, &cancel_requested).await;
        *session.prompt.lock().unwrap_or_else(|e| e.into_inner()) = None;
        result
    }

    async fn run_prompt(
        &self,
        session: &AcpSession,
        p: &Map<String, Value>,
        cancel_requested: &AtomicBool,
    ) -> Result<Value, RpcError> {
        let blocks = p
            .get("prompt")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let (mut content, images) = prompt_content(
            &blocks,
            self.rich(),
            self.image_prompts.load(Ordering::Acquire),
        )?;
        if self.rich() {
            let notices =
                std::mem::take(&mut *session.notices.lock().unwrap_or_else(|e| e.into_inner()));
            let id = session.agent.session().id();
            for notice in notices {
                update(
                    &self.peer,
                    &id,
                    SessionUpdate::agent_text(format!("{notice}\n\n")),
                );
            }
        }
        if !images.is_empty() {
            let refs = crate::images::admit(
                &self.root,
                &session.agent,
                (&self.config.provider, &self.config.model),
                images,
            )
            .await?;
            let mut refs = refs.into_iter();
            for block in &mut content {
                if block.block_type() == "image"
                    && let Some(r) = refs.next()
                {
                    *block = ContentBlock::image(r.to_store_value());
                }
            }
        }
        // A `/command` line runs the command instead of reaching the model.
        if let (Some(commands), [ContentBlock::Text { text }]) = (
            self.root.get::<dsh_commands::CommandRegistry>(),
            content.as_slice(),
        ) {
            let idle_before = session.agent.status() == dsh_agent::AgentStatus::Idle;
            let outcome = commands
                .dispatch_line(
                    &session.agent,
                    text,
                    tokio_util::sync::CancellationToken::new(),
                )
                .await;
            if !matches!(outcome, dsh_commands::LineOutcome::NotACommand) {
                let id = session.agent.session().id();
                update(&self.peer, &id, SessionUpdate::agent_text(outcome.reply()));
                // A command that sent the model a message (`/plan <message>`) started a
                // turn: the prompt lasts until that turn ends, like any prompt.
                if idle_before && session.agent.status() == dsh_agent::AgentStatus::Running {
                    session.agent.when_idle().await;
                    if cancel_requested.load(Ordering::Acquire) {
                        return stopped(StopReason::Cancelled);
                    }
                }
                return stopped(StopReason::EndTurn);
            }
        }
        let message = Message::user(content, MessageSource::User);
        let message_id = message.id.clone();
        let agent = session.agent.clone();
        if let Err(e) = agent.followup(message) {
            return Err(RpcError::internal(format!("prompt was not queued: {e}")));
        }
        agent.when_idle().await;
        if cancel_requested.load(Ordering::Acquire) {
            return stopped(StopReason::Cancelled);
        }
        let turn = self
            .claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&message_id);
        let Some(turn) = turn else {
            return stopped(StopReason::Cancelled);
        };
        let reason = agent.session().read(|s| {
            s.events()
                .iter()
                .rev()
                .find(|e| e.is(types::TURN_END) && e.turn() == Some(turn))
                .and_then(|e| TurnEndReason::from_value(&e.data["reason"]))
        });
        match reason {
            None => stopped(StopReason::Cancelled),
            Some(TurnEndReason::Error(f)) => {
                Err(RpcError::internal(format!("turn failed: {}", f.message)))
            }
            Some(TurnEndReason::Interrupted) => stopped(StopReason::Cancelled),
            Some(_) => stopped(StopReason::EndTurn),
        }
    }

    /// Handles a notification.
    pub fn notification(&self, method: &str, params: Option<Value>) {
        let Some(id) = cancelled_session(method, params.as_ref()) else {
            return;
        };
        let Some(session) = self.session(id) else {
            return;
        };
        if let Some(prompt) = session
            .prompt
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            prompt.cancel_requested.store(true, Ordering::Release);
        }
        session.agent.cancel(CancelCause::User, false);
    }

    /// Stdin closed: cancel running turns, wait for quiescence, flush and dispose.
    pub async fn quiesce(&self) {
        self.closed.store(true, Ordering::Release);
        let sessions: Vec<Arc<AcpSession>> = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(id, s)| {
                self.unroute(&id);
                s
            })
            .collect();
        for s in &sessions {
            if let Some(prompt) = s.prompt.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                prompt.cancel_requested.store(true, Ordering::Release);
            }
            s.agent.cancel(CancelCause::User, false);
        }
        for s in &sessions {
            s.agent.when_idle().await;
            if let Err(e) = s.agent.session().flush().await {
                tracing::warn!("acp: flushing session {} failed: {e}", s.agent.id());
            }
            s.agent.dispose().await;
        }
    }
}

/// `usage_update` after a model answer: the tokens its request and answer occupy in the
/// context window of the model that answered (when the model's window is known).
fn usage_update(llm: &dsh_llm::LlmRuntime, e: &dsh_session::Event) -> Option<SessionUpdate> {
    if !e.is(types::ASSISTANT_MESSAGE) {
        return None;
    }
    let data = e.data.as_value();
    let usage = data.get("usage")?;
    let used = usage["inputTokens"].as_u64()? + usage["outputTokens"].as_u64().unwrap_or(0);
    let source = data.pointer("/message/source")?;
    let size = llm
        .model_info(source["provider"].as_str()?, source["model"].as_str()?)
        .ok()?
        .context_window?;
    Some(SessionUpdate::UsageUpdate { used, size })
}
