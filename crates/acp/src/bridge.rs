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

use crate::project::{Projector, describe_call};
use crate::rpc::{Peer, RpcError};

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

fn update(peer: &Peer, session_id: &str, update: Value) {
    peer.notify(
        "session/update",
        json!({"sessionId": session_id, "update": update}),
    );
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
fn check_params(
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

/// Builds the user message content from ACP prompt blocks (embedded text resources only
/// when the connection advertised them, i.e. in the rich projection). Images (only when
/// the connection advertised them) are decoded and returned beside the content, which
/// holds an `image` placeholder at each one's position until the store admits them.
fn prompt_content(
    blocks: &[Value],
    embedded: bool,
    images_enabled: bool,
) -> Result<(Vec<ContentBlock>, Vec<dsh_attachments::SaveImage>), RpcError> {
    let mut content = Vec::new();
    let mut images = Vec::new();
    let mut run = String::new();
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => run.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("resource_link") => {
                let name = b.get("name").and_then(Value::as_str).unwrap_or("");
                let uri = b.get("uri").and_then(Value::as_str).unwrap_or("");
                run.push_str(&format!(
                    "\n[resource_link name={} uri={}]\n",
                    serde_json::to_string(name).unwrap_or_default(),
                    serde_json::to_string(uri).unwrap_or_default()
                ));
            }
            Some("image") if images_enabled => {
                images.push(crate::images::decode(b)?);
                if !run.is_empty() {
                    content.push(ContentBlock::text(std::mem::take(&mut run)));
                }
                content.push(ContentBlock::image(Value::Null));
            }
            Some("image") => {
                return Err(RpcError::invalid_params(
                    "inline image prompts were not advertised by this connection",
                ));
            }
            Some("audio") => {
                return Err(RpcError::invalid_params(
                    "audio prompt content is not supported",
                ));
            }
            Some("resource") if embedded => {
                let resource = &b["resource"];
                let uri = resource["uri"].as_str().unwrap_or("");
                let Some(text) = resource["text"].as_str() else {
                    return Err(RpcError::invalid_params(
                        "binary embedded resources are not supported",
                    ));
                };
                run.push_str(&format!(
                    "\n<resource uri={}>\n{text}\n</resource>\n",
                    serde_json::to_string(uri).unwrap_or_default()
                ));
            }
            Some("resource") => {
                return Err(RpcError::invalid_params(
                    "embedded resource prompt content is not supported",
                ));
            }
            _ => {
                return Err(RpcError::schema(
                    json!({"_errors": [], "prompt": {"_errors": ["Invalid input"]}}),
                ));
            }
        }
    }
    let has_text = content
        .iter()
        .chain(std::iter::once(&ContentBlock::text(run.clone())))
        .any(|b| b.as_text().is_some_and(|t| !t.trim().is_empty()));
    if images.is_empty() && !has_text {
        return Err(RpcError::invalid_params("empty prompt"));
    }
    if !run.is_empty() || content.is_empty() {
        content.push(ContentBlock::text(run));
    }
    Ok((content, images))
}

/// Connects a session's ACP `mcpServers` in its agent scope (their tools are that
/// session's; they stop when it is disposed). A server that fails is logged; the session
/// opens without it.
/// Connects the editor's MCP servers for `agent`; returns what to tell the user about the
/// ones that did not connect (also logged), and the connected ones, to follow.
async fn attach_mcp(
    agent: &AgentRef,
    servers: Vec<dsh_mcp::ServerConfig>,
) -> (Vec<String>, Vec<dsh_mcp::ServerHandle>) {
    let mut notices = Vec::new();
    let mut handles = Vec::new();
    for outcome in dsh_mcp::acp::attach(agent.ctx(), servers).await {
        match outcome {
            Ok(server) => {
                if let Some(e) = server.startup_error() {
                    tracing::error!(
                        "acp: MCP server \"{}\" did not connect: {e}",
                        server.server_name()
                    );
                    notices.push(format!(
                        "MCP server \"{}\" did not start ({e}); its tools are not available in this session for now.",
                        server.server_name()
                    ));
                }
                handles.push(server);
            }
            Err(e) => {
                tracing::error!("acp: {e}");
                notices.push(format!("An MCP server could not be attached: {e}."));
            }
        }
    }
    (notices, handles)
}

/// Tells the user when an editor's MCP server loses its connection, comes back, or is
/// given up on: at once during a prompt, else at the start of the next one.
fn follow_mcp(peer: &Peer, session: &Arc<AcpSession>, servers: Vec<dsh_mcp::ServerHandle>) {
    for server in servers {
        let mut states = server.subscribe();
        let owner = session.agent.ctx().clone();
        let (peer, session) = (peer.clone(), Arc::downgrade(session));
        let name = server.server_name().to_string();
        let follow = async move {
            let mut was_connected = matches!(
                *states.borrow_and_update(),
                dsh_mcp::ServerState::Connected { .. }
            );
            let mut lost = false;
            while states.changed().await.is_ok() {
                let state = states.borrow_and_update().clone();
                let connected = matches!(state, dsh_mcp::ServerState::Connected { .. });
                let notice = match state {
                    dsh_mcp::ServerState::Reconnecting { .. } if was_connected && !lost => {
                        lost = true;
                        Some(format!(
                            "MCP server \"{name}\" lost its connection; reconnecting (its tools fail until it is back)."
                        ))
                    }
                    dsh_mcp::ServerState::Connected { .. } if lost => {
                        lost = false;
                        Some(format!("MCP server \"{name}\" is connected again."))
                    }
                    dsh_mcp::ServerState::Stopped { reason } => {
                        Some(format!("MCP server \"{name}\" stopped: {reason}."))
                    }
                    _ => None,
                };
                was_connected |= connected;
                let (Some(notice), Some(session)) = (notice, session.upgrade()) else {
                    if session.strong_count() == 0 {
                        return;
                    }
                    continue;
                };
                let in_prompt = session
                    .prompt
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_some();
                if in_prompt {
                    update(
                        &peer,
                        &session.agent.session().id(),
                        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": format!("{notice}\n\n")}}),
                    );
                } else {
                    session
                        .notices
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(notice);
                }
            }
        };
        if let Err(e) = owner.spawn(follow) {
            tracing::warn!(
                "acp: MCP server \"{}\" is not followed: {e}",
                server.server_name()
            );
        }
    }
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
            let Some(Value::Array(content)) = p.event.data.pointer("/message/content") else { return Ok(()) };
            for block in content {
                if block.get("type").and_then(Value::as_str) == Some("text")
                    && let Some(text) = block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty())
                {
                    update(&projector, &id, json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}));
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
            if let Some(session) = owned(&s, &p.session_id)
                && let Some(u) = session.projector().output(&p.call_id, &p.text)
            {
                update(&out, &p.session_id, u);
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
                let capabilities = if self.rich() {
                    json!({
                        "loadSession": true,
                        "promptCapabilities": {"image": image, "audio": false, "embeddedContext": true},
                        "mcpCapabilities": dsh_mcp::acp::capabilities(),
                        "sessionCapabilities": {"list": {}, "resume": {}, "close": {}}
                    })
                } else {
                    json!({"promptCapabilities": {"image": image, "audio": false, "embeddedContext": false}})
                };
                Ok(json!({
                    "protocolVersion": 1,
                    "agentInfo": {"name": "deepseek-harness-acp", "version": "0.0.1"},
                    "agentCapabilities": capabilities,
                    "authMethods": []
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
        let commands: Vec<Value> = self
            .root
            .get::<dsh_commands::CommandRegistry>()
            .map(|r| r.list())
            .unwrap_or_default()
            .into_iter()
            .map(|c| {
                let mut m = Map::new();
                m.insert("name".into(), json!(c.name));
                m.insert("description".into(), json!(c.description));
                if let Some(hint) = c.hint {
                    m.insert("input".into(), json!({"hint": hint}));
                }
                Value::Object(m)
            })
            .collect();
        update(
            &self.peer,
            id,
            json!({"sessionUpdate": "available_commands_update", "availableCommands": commands}),
        );
    }

    /// The permission presets as ACP session modes, with the session's current one.
    fn modes(&self, agent: &AgentRef) -> Option<Value> {
        let presets = self.root.get::<PermissionPresets>()?;
        let available: Vec<Value> = presets
            .list()
            .into_iter()
            .map(|(id, description)| {
                let name = id
                    .split('-')
                    .enumerate()
                    .map(|(i, w)| {
                        let mut w = w.to_string();
                        if i == 0
                            && let Some(first) = w.get_mut(..1)
                        {
                            first.make_ascii_uppercase();
                        }
                        w
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                json!({"id": id, "name": name, "description": description})
            })
            .collect();
        Some(
            json!({"currentModeId": presets.current(agent.session()), "availableModes": available}),
        )
    }

    /// The answer to `session/new|load|resume` in the rich projection.
    fn session_answer(&self, agent: &AgentRef, mut answer: Map<String, Value>) -> Value {
        if let Some(modes) = self.modes(agent) {
            answer.insert("modes".into(), modes);
        }
        answer.insert(
            "configOptions".into(),
            Value::Array(self.config_options(&agent.session().id())),
        );
        Value::Object(answer)
    }

    /// The session's model choice (the route's catalog) and, when the model reasons, its
    /// reasoning effort.
    fn config_options(&self, session_id: &str) -> Vec<Value> {
        let (model, effort) = self
            .choices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(session_id)
            .cloned()
            .unwrap_or_default();
        let model = model.unwrap_or_else(|| self.config.model.clone());
        let Some(llm) = self.root.get::<dsh_llm::LlmRuntime>() else {
            return Vec::new();
        };
        let provider = &self.config.provider;
        let mut models: Vec<Value> = llm
            .models(provider)
            .into_iter()
            .map(|m| json!({"value": m.id, "name": m.name.unwrap_or_else(|| m.id.clone())}))
            .collect();
        if !models.iter().any(|m| m["value"] == model.as_str()) {
            models.insert(0, json!({"value": model, "name": model}));
        }
        let mut options = vec![json!({
            "id": "model", "name": "Model", "category": "model", "type": "select",
            "currentValue": model, "options": models,
        })];
        if let Some(reasoning) = llm
            .model_info(provider, &model)
            .ok()
            .and_then(|i| i.reasoning)
            .filter(|r| !r.efforts.is_empty())
        {
            let current = effort
                .or(reasoning.default_effort)
                .unwrap_or_else(|| reasoning.efforts[0].clone());
            let values: Vec<Value> = reasoning
                .efforts
                .iter()
                .map(|e| json!({"value": e, "name": e}))
                .collect();
            options.push(json!({
                "id": "reasoning_effort", "name": "Reasoning effort", "category": "thought_level",
                "type": "select", "currentValue": current, "options": values,
            }));
        }
        options
    }

    fn set_config_option(&self, params: Option<Value>) -> Result<Value, RpcError> {
        let p = check_params(
            params.as_ref(),
            &[
                ("sessionId", "string"),
                ("configId", "string"),
                ("value", "string"),
            ],
        )?;
        let id = p.get("sessionId").and_then(Value::as_str).unwrap_or("");
        let config_id = p.get("configId").and_then(Value::as_str).unwrap_or("");
        let value = p.get("value").and_then(Value::as_str).unwrap_or("");
        if self.session(id).is_none() {
            return Err(RpcError::invalid_params(format!("unknown session: {id}")));
        }
        let offered = self
            .config_options(id)
            .into_iter()
            .find(|o| o["id"] == config_id)
            .ok_or_else(|| {
                RpcError::invalid_params(format!("unknown config option {config_id}"))
            })?;
        let valid = offered["options"]
            .as_array()
            .is_some_and(|o| o.iter().any(|v| v["value"] == value));
        if !valid {
            return Err(RpcError::invalid_params(format!(
                "{value} is not a value of {config_id}"
            )));
        }
        {
            let mut choices = self.choices.lock().unwrap_or_else(|e| e.into_inner());
            let entry = choices.entry(id.to_string()).or_default();
            match config_id {
                "model" => {
                    entry.0 = Some(value.to_string());
                    // An effort of the old model may not exist on the new one.
                    entry.1 = None;
                }
                _ => entry.1 = Some(value.to_string()),
            }
        }
        Ok(json!({"configOptions": self.config_options(id)}))
    }

    fn set_mode(&self, params: Option<Value>) -> Result<Value, RpcError> {
        let p = check_params(
            params.as_ref(),
            &[("sessionId", "string"), ("modeId", "string")],
        )?;
        let id = p.get("sessionId").and_then(Value::as_str).unwrap_or("");
        let mode = p.get("modeId").and_then(Value::as_str).unwrap_or("");
        let Some(session) = self.session(id) else {
            return Err(RpcError::invalid_params(format!("unknown session: {id}")));
        };
        let presets = self
            .root
            .get::<PermissionPresets>()
            .ok_or_else(|| RpcError::invalid_params("this agent offers no session modes"))?;
        if !presets.list().iter().any(|(name, _)| name == mode) {
            return Err(RpcError::invalid_params(format!("unknown mode {mode}")));
        }
        presets
            .apply(&session.agent, mode)
            .map_err(RpcError::internal)?;
        update(
            &self.peer,
            id,
            json!({"sessionUpdate": "current_mode_update", "currentModeId": mode}),
        );
        Ok(json!({}))
    }

    /// `session/load` (replays the history as updates before answering) and
    /// `session/resume` (no replay): the agent is rebuilt from the stored log.
    async fn load_session(
        self: &Arc<Self>,
        params: Option<Value>,
        replay: bool,
    ) -> Result<Value, RpcError> {
        let p = check_params(
            params.as_ref(),
            &[("sessionId", "string"), ("cwd", "string")],
        )?;
        let id = p
            .get("sessionId")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let cwd = p
            .get("cwd")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if !Path::new(&cwd).is_absolute() {
            return Err(RpcError::invalid_params(format!(
                "cwd must be an absolute path: {cwd}"
            )));
        }
        let mcp = self.mcp_servers(&p)?;
        if self.closed.load(Ordering::Acquire) {
            return Err(RpcError::internal("the ACP bridge has been disposed"));
        }
        if let Some(session) = self.session(&id) {
            // Open in this connection already: replay the live log.
            if replay {
                let events = session.agent.session().events();
                let updates =
                    Projector::new(session.projector().cwd().to_path_buf()).replay(&events);
                for u in updates {
                    update(&self.peer, &id, u);
                }
            }
            return Ok(self.session_answer(&session.agent, Map::new()));
        }
        let files = self
            .root
            .get::<SessionFiles>()
            .ok_or_else(|| RpcError::internal("sessions are not persisted in this composition"))?;
        let wanted = id.clone();
        let loaded = tokio::task::spawn_blocking(move || files.load(&wanted))
            .await
            .map_err(RpcError::internal)?;
        let loaded = match loaded {
            Ok(l) => l,
            Err(PersistenceError::NotFound { .. }) => return Err(RpcError::not_found(&id)),
            Err(e @ PersistenceError::Locked { .. }) => {
                return Err(RpcError::internal(format!("session {id} is in use: {e}")));
            }
            Err(e) => {
                return Err(RpcError::internal(format!("cannot load session {id}: {e}")));
            }
        };
        let agents = self.root.require::<Agents>().map_err(RpcError::internal)?;
        let session_cwd = loaded
            .header
            .cwd
            .as_ref()
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(&cwd));
        let mut request = self.agent_request(&id, session_cwd.clone());
        let events = loaded.events.clone();
        request.source = AgentSource::Resume {
            header: loaded.header,
            events: loaded.events,
            stored_len: loaded.stored_len,
        };
        let agent = agents
            .create(&self.root, request)
            .map_err(RpcError::internal)?;
        let (notices, servers) = attach_mcp(&agent, mcp).await;
        self.restore_choices(&id, &agent);
        let session = AcpSession::new(agent.clone(), session_cwd.clone()).with_notices(notices);
        follow_mcp(&self.peer, &session, servers);
        if replay {
            let updates = session.projector().replay(&events);
            for u in updates {
                update(&self.peer, &id, u);
            }
        }
        self.adopt(&id, session);
        Ok(self.session_answer(&agent, Map::new()))
    }

    /// The model and reasoning effort the session last asked for (its latest request
    /// header) become its choices again, as upstream 0.2.1 restores them: an effort the
    /// adapter filled in by default is not a choice. A header of another route is ignored.
    fn restore_choices(&self, id: &str, agent: &AgentRef) {
        let Some(header) = agent.session().read(|s| s.request_header().cloned()) else {
            return;
        };
        if header.config.provider != self.config.provider {
            return;
        }
        let defaulted = header
            .adapter_defaults
            .as_ref()
            .is_some_and(|d| d.reasoning_effort);
        let effort = header.config.reasoning_effort.filter(|_| !defaulted);
        self.choices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), (Some(header.config.model), effort));
    }

    async fn list_sessions(&self, params: Option<Value>) -> Result<Value, RpcError> {
        let cwd = params
            .as_ref()
            .and_then(|p| p.get("cwd"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let Some(files) = self.root.get::<SessionFiles>() else {
            return Ok(json!({"sessions": []}));
        };
        let summaries = tokio::task::spawn_blocking(move || {
            files
                .log_paths()
                .into_iter()
                .filter_map(|path| match files.summarize_file(&path) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        tracing::warn!("acp: session/list skips {}: {e}", path.display());
                        None
                    }
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(RpcError::internal)?;
        let mut rows: Vec<_> = summaries
            .into_iter()
            .filter(|s| !s.blank)
            .filter(|s| cwd.is_none() || s.header.cwd == cwd)
            .collect();
        rows.sort_by_key(|s| std::cmp::Reverse(s.updated_at));
        let sessions: Vec<Value> = rows
            .into_iter()
            .map(|s| {
                let mut m = Map::new();
                m.insert("sessionId".into(), json!(s.header.id));
                m.insert("cwd".into(), json!(s.header.cwd.unwrap_or_default()));
                if !s.title.is_empty() {
                    m.insert("title".into(), json!(s.title));
                }
                m.insert(
                    "updatedAt".into(),
                    json!(crate::project::iso_time(s.updated_at)),
                );
                Value::Object(m)
            })
            .collect();
        Ok(json!({"sessions": sessions}))
    }

    async fn close_session(&self, params: Option<Value>) -> Result<Value, RpcError> {
        let p = check_params(params.as_ref(), &[("sessionId", "string")])?;
        let id = p.get("sessionId").and_then(Value::as_str).unwrap_or("");
        let Some(session) = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
        else {
            return Err(RpcError::not_found(id));
        };
        self.unroute(id);
        session.agent.cancel(CancelCause::User, false);
        session.agent.when_idle().await;
        if let Err(e) = session.agent.session().flush().await {
            tracing::warn!("acp: flushing session {id} failed: {e}");
        }
        session.agent.dispose().await;
        Ok(json!({}))
    }

    async fn new_session(self: &Arc<Self>, params: Option<Value>) -> Result<Value, RpcError> {
        let p = check_params(
            params.as_ref(),
            &[("cwd", "string"), ("mcpServers", "array")],
        )?;
        let cwd = p
            .get("cwd")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if !Path::new(&cwd).is_absolute() {
            return Err(RpcError::invalid_params(format!(
                "cwd must be an absolute path: {cwd}"
            )));
        }
        if p.get("additionalDirectories")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        {
            return Err(RpcError::invalid_params(
                "additionalDirectories is not supported",
            ));
        }
        let mcp = self.mcp_servers(&p)?;
        if self.closed.load(Ordering::Acquire) {
            return Err(RpcError::internal("the ACP bridge has been disposed"));
        }
        let agents = self.root.require::<Agents>().map_err(RpcError::internal)?;
        let id = uuid::Uuid::new_v4().to_string();
        let request = self.agent_request(&id, PathBuf::from(&cwd));
        let agent = agents
            .create(&self.root, request)
            .map_err(RpcError::internal)?;
        let (notices, servers) = attach_mcp(&agent, mcp).await;
        let session = AcpSession::new(agent.clone(), PathBuf::from(&cwd)).with_notices(notices);
        follow_mcp(&self.peer, &session, servers);
        self.adopt(&id, session);
        if !self.rich() {
            return Ok(json!({"sessionId": id}));
        }
        let mut answer = Map::new();
        answer.insert("sessionId".into(), json!(id));
        Ok(self.session_answer(&agent, answer))
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
                    json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": format!("{notice}\n\n")}}),
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
                self.peer.notify(
                    "session/update",
                    json!({"sessionId": id, "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": outcome.reply()}}}),
                );
                // A command that sent the model a message (`/plan <message>`) started a
                // turn: the prompt lasts until that turn ends, like any prompt.
                if idle_before && session.agent.status() == dsh_agent::AgentStatus::Running {
                    session.agent.when_idle().await;
                    if cancel_requested.load(Ordering::Acquire) {
                        return Ok(json!({"stopReason": "cancelled"}));
                    }
                }
                return Ok(json!({"stopReason": "end_turn"}));
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
            return Ok(json!({"stopReason": "cancelled"}));
        }
        let turn = self
            .claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&message_id);
        let Some(turn) = turn else {
            return Ok(json!({"stopReason": "cancelled"}));
        };
        let reason = agent.session().read(|s| {
            s.events()
                .iter()
                .rev()
                .find(|e| e.is(types::TURN_END) && e.turn() == Some(turn))
                .and_then(|e| TurnEndReason::from_value(&e.data["reason"]))
        });
        match reason {
            None => Ok(json!({"stopReason": "cancelled"})),
            Some(TurnEndReason::Error(f)) => {
                Err(RpcError::internal(format!("turn failed: {}", f.message)))
            }
            Some(TurnEndReason::Interrupted) => Ok(json!({"stopReason": "cancelled"})),
            Some(_) => Ok(json!({"stopReason": "end_turn"})),
        }
    }

    /// Handles a notification.
    pub fn notification(&self, method: &str, params: Option<Value>) {
        if method != "session/cancel" {
            return;
        }
        let Some(id) = params
            .as_ref()
            .and_then(|p| p.get("sessionId"))
            .and_then(Value::as_str)
        else {
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

struct Answerer {
    peer: Peer,
    sessions: Sessions,
    projection: Projection,
}

/// `usage_update` after a model answer: the tokens its request and answer occupy in the
/// context window of the model that answered (when the model's window is known).
fn usage_update(llm: &dsh_llm::LlmRuntime, e: &dsh_session::Event) -> Option<Value> {
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
    Some(json!({"sessionUpdate": "usage_update", "used": used, "size": size}))
}

/// The tool call a permission request is about, as editors render it: the call as
/// announced, plus the reason approval is needed.
fn permission_tool_call(request: &ApprovalRequest, cwd: &Path) -> Value {
    let mut call = describe_call(
        &request.call_id,
        &request.tool_name,
        &request.arguments,
        cwd,
    );
    call.insert("status".into(), json!("pending"));
    if let Some(reason) = &request.reason {
        call.insert(
            "content".into(),
            json!([{"type": "content", "content": {"type": "text", "text": reason}}]),
        );
    }
    Value::Object(call)
}

impl ApprovalAnswerer for Answerer {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalOutcome> {
        let peer = self.peer.clone();
        let projection = self.projection;
        let session_id = request.session.as_ref().map(|s| s.id());
        let session = session_id
            .as_deref()
            .and_then(|id| owned(&self.sessions, id));
        Box::pin(async move {
            let (Some(session_id), Some(session)) = (session_id, session) else {
                return ApprovalOutcome::Unavailable;
            };
            if request.call_id.is_empty() {
                return ApprovalOutcome::Unavailable;
            }
            let rich = projection == Projection::Rich;
            let always = session
                .always_allowed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&request.tool_name);
            if rich && always {
                return ApprovalOutcome::AllowedOnce;
            }
            let (tool_call, options) = if rich {
                let call = {
                    let mut projector = session.projector();
                    let call = permission_tool_call(&request, projector.cwd());
                    // Editors refuse a permission request about a call they never saw.
                    if projector.announce(&request.call_id) {
                        let mut announced = call.clone();
                        announced["sessionUpdate"] = json!("tool_call");
                        update(&peer, &session_id, announced);
                    }
                    call
                };
                (
                    call,
                    json!([
                        {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
                        {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
                        {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"}
                    ]),
                )
            } else {
                (
                    json!({"toolCallId": request.call_id}),
                    json!([
                        {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
                        {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"}
                    ]),
                )
            };
            let params =
                json!({"sessionId": session_id, "toolCall": tool_call, "options": options});
            let answer = tokio::select! {
                a = peer.request("session/request_permission", params) => a,
                _ = request.cancel.cancelled() => return ApprovalOutcome::Cancelled,
            };
            match answer {
                Ok(v) => match (
                    v.pointer("/outcome/outcome").and_then(Value::as_str),
                    v.pointer("/outcome/optionId").and_then(Value::as_str),
                ) {
                    (Some("cancelled"), _) => ApprovalOutcome::Cancelled,
                    (Some("selected"), Some("allow-once")) => ApprovalOutcome::AllowedOnce,
                    (Some("selected"), Some("allow-always")) if rich => {
                        session
                            .always_allowed
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(request.tool_name.clone());
                        ApprovalOutcome::AllowedOnce
                    }
                    (Some("selected"), _) => ApprovalOutcome::Rejected,
                    _ => ApprovalOutcome::Unavailable,
                },
                Err(_) => ApprovalOutcome::Unavailable,
            }
        })
    }
}
