//! The ACP bridge: sessions, prompts, cancellation, permission requests, and the
//! `session/update` projection (one `agent_message_chunk` per non-empty text block of each
//! committed `assistant/message`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use dsh_agent::{AgentOptions, AgentRef, Agents, CreateAgent, InboxClaimed};
use dsh_kernel::{BoxFuture, Context, ListenOptions};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_policies::{ApprovalAnswerer, Approvals};
use dsh_session::{CancelCause, SessionAppended, TurnEndReason, types};
use dsh_tools::{ApprovalOutcome, ApprovalRequest};
use serde_json::{Map, Value, json};

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
}

/// One server connection.
pub struct Bridge {
    root: Context,
    pub(crate) peer: Peer,
    config: AcpConfig,
    sessions: Arc<Mutex<HashMap<String, Arc<AcpSession>>>>,
    /// Message id → the turn that claimed it.
    claims: Arc<Mutex<HashMap<String, u64>>>,
    closed: AtomicBool,
}

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

/// Builds the user message content from ACP prompt blocks.
fn prompt_content(blocks: &[Value]) -> Result<Vec<ContentBlock>, RpcError> {
    let mut content = Vec::new();
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
    if run.trim().is_empty() {
        return Err(RpcError::invalid_params("empty prompt"));
    }
    content.push(ContentBlock::text(run));
    Ok(content)
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
        });
        // The projection: committed assistant text, one notification per block.
        let sessions = bridge.sessions.clone();
        let projector = peer.clone();
        root.on_emit::<SessionAppended>(ListenOptions::GLOBAL, move |p| {
            if !p.event.is(types::ASSISTANT_MESSAGE) {
                return Ok(());
            }
            let id = p.session.id();
            if !sessions.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&id) {
                return Ok(());
            }
            let Some(Value::Array(content)) = p.event.data.pointer("/message/content") else { return Ok(()) };
            for block in content {
                if block.get("type").and_then(Value::as_str) == Some("text")
                    && let Some(text) = block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty())
                {
                    projector.notify(
                        "session/update",
                        json!({"sessionId": id, "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}),
                    );
                }
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
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

    fn session(&self, id: &str) -> Option<Arc<AcpSession>> {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }

    /// Answers one request.
    pub async fn handle(
        self: &Arc<Self>,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, RpcError> {
        match method {
            "initialize" => {
                check_params(params.as_ref(), &[("protocolVersion", "number")])?;
                Ok(json!({
                    "protocolVersion": 1,
                    "agentInfo": {"name": "deepseek-harness-acp", "version": "0.0.1"},
                    "agentCapabilities": {"promptCapabilities": {"image": false, "audio": false, "embeddedContext": false}},
                    "authMethods": []
                }))
            }
            "authenticate" => Ok(json!({})),
            "session/new" => self.new_session(params).await,
            "session/prompt" => self.prompt(params).await,
            other => Err(RpcError::method_not_found(other)),
        }
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
        if p.get("mcpServers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        {
            return Err(RpcError::invalid_params("mcpServers is not supported"));
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(RpcError::internal("the ACP bridge has been disposed"));
        }
        let agents = self.root.require::<Agents>().map_err(RpcError::internal)?;
        let id = uuid::Uuid::new_v4().to_string();
        let mut request = CreateAgent::fresh(AgentOptions {
            provider: Some(self.config.provider.clone()),
            model: Some(self.config.model.clone()),
            max_tokens: None,
        });
        request.session_id = Some(id.clone());
        request.cwd = Some(PathBuf::from(&cwd));
        let agent = agents
            .create(&self.root, request)
            .map_err(RpcError::internal)?;
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                id.clone(),
                Arc::new(AcpSession {
                    agent,
                    prompt: Mutex::new(None),
                }),
            );
        Ok(json!({"sessionId": id}))
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
        let content = prompt_content(&blocks)?;
        // A `/command` line runs the command instead of reaching the model.
        if let (Some(commands), [ContentBlock::Text { text }]) = (
            self.root.get::<dsh_commands::CommandRegistry>(),
            content.as_slice(),
        ) {
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
            .map(|(_, s)| s)
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
    sessions: Arc<Mutex<HashMap<String, Arc<AcpSession>>>>,
    projection: Projection,
}

/// The ACP tool kind of a tool.
fn tool_kind(name: &str) -> &'static str {
    match name {
        "bash" => "execute",
        "write" | "edit" | "str_replace_editor" => "edit",
        "read" => "read",
        "grep" | "glob" => "search",
        _ => "other",
    }
}

/// The tool call a permission request is about, as editors render it.
fn permission_tool_call(request: &ApprovalRequest) -> Value {
    let args = &request.arguments;
    let title = match request.tool_name.as_str() {
        "bash" => args
            .get("command")
            .and_then(Value::as_str)
            .map(|c| format!("bash: {c}")),
        "write" | "edit" => args
            .get("file_path")
            .and_then(Value::as_str)
            .map(|p| format!("{}: {p}", request.tool_name)),
        _ => None,
    }
    .unwrap_or_else(|| request.tool_name.clone());
    let mut call = json!({
        "toolCallId": request.call_id,
        "title": title,
        "kind": tool_kind(&request.tool_name),
        "status": "pending",
        "rawInput": args,
    });
    if let Some(reason) = &request.reason {
        call["content"] = json!([{"type": "content", "content": {"type": "text", "text": reason}}]);
    }
    if let Some(path) = args.get("file_path").and_then(Value::as_str) {
        call["locations"] = json!([{"path": path}]);
    }
    call
}

impl ApprovalAnswerer for Answerer {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalOutcome> {
        let peer = self.peer.clone();
        let projection = self.projection;
        let session_id = request.session.as_ref().map(|s| s.id());
        let owned = session_id.as_ref().is_some_and(|id| {
            self.sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(id)
        });
        Box::pin(async move {
            let Some(session_id) = session_id.filter(|_| owned && !request.call_id.is_empty())
            else {
                return ApprovalOutcome::Unavailable;
            };
            let tool_call = match projection {
                Projection::Rich => permission_tool_call(&request),
                Projection::Committed => json!({"toolCallId": request.call_id}),
            };
            let params = json!({
                "sessionId": session_id,
                "toolCall": tool_call,
                "options": [
                    {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
                    {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"}
                ]
            });
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
                    (Some("selected"), _) => ApprovalOutcome::Rejected,
                    _ => ApprovalOutcome::Unavailable,
                },
                Err(_) => ApprovalOutcome::Unavailable,
            }
        })
    }
}
