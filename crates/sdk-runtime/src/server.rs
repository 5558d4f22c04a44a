//! The SDK server: requests onto agents, session activity onto notifications.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use dsh_acp::{Peer, RpcError};
use dsh_agent::{
    AgentOptions, AgentRef, AgentSource, AgentStatusChanged, Agents, CreateAgent, Request,
    SubagentEnd,
};
use dsh_kernel::{Context, ListenOptions};
use dsh_llm::{ContentBlock, LlmRuntime, Message, MessageSource, codes};
use dsh_persistence::{PersistenceError, SessionFiles};
use dsh_session::{CancelCause, InboxTarget, SessionAppended, SessionCreated};
use serde_json::{Value, json};

use crate::rpc::{content_blocks, fail, session_id, str_param, unsupported_block};

/// What `initialize` set.
#[derive(Clone, Debug)]
struct Route {
    cwd: PathBuf,
    provider: String,
    model: String,
    max_tokens: Option<u64>,
    reasoning_effort: Option<String>,
}

type Efforts = Arc<Mutex<HashMap<String, String>>>;

pub struct Server {
    root: Context,
    route: Mutex<Option<Route>>,
    shutting_down: AtomicBool,
    sessions: Mutex<HashMap<String, AgentRef>>,
    opening: Mutex<HashSet<String>>,
    /// Reasoning effort per session, applied to each of its requests.
    efforts: Efforts,
}

impl Server {
    pub fn new(root: Context, peer: Peer) -> Result<Arc<Self>, String> {
        let server = Arc::new(Self {
            root: root.clone(),
            route: Mutex::new(None),
            shutting_down: AtomicBool::new(false),
            sessions: Mutex::new(HashMap::new()),
            opening: Mutex::new(HashSet::new()),
            efforts: Arc::new(Mutex::new(HashMap::new())),
        });
        let out = peer.clone();
        let format = root
            .get::<SessionFiles>()
            .map_or(dsh_session::SESSION_FORMAT_V4, |f| f.format());
        let stream = Mutex::new(crate::stream::EventStream::new(format));
        root.on_emit::<SessionAppended>(ListenOptions::GLOBAL, move |p| {
            let rows = stream
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(&p.session, &p.event);
            for row in rows {
                let mut params = String::from("{\"sessionId\":");
                dsh_kernel::json::write_string(&mut params, &p.session.id());
                params.push_str(",\"event\":");
                params.push_str(&row);
                params.push('}');
                out.notify_raw("session.event", &params);
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        let out = peer.clone();
        root.on_emit::<AgentStatusChanged>(ListenOptions::GLOBAL, move |p| {
            out.notify(
                "session.status",
                json!({"sessionId": p.agent.session().id(), "status": p.status.as_str()}),
            );
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        let out = peer.clone();
        root.on_emit::<SessionCreated>(ListenOptions::GLOBAL, move |session| {
            if let Some(parent) = session.header().parent_session.clone() {
                out.notify(
                    "subagent.started",
                    json!({"parentSessionId": parent, "childSessionId": session.id()}),
                );
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        // Only children that run in this process are reported (a product child in another
        // program has no session here); the status is the deployment's reading of the
        // stop reason.
        let out = peer.clone();
        let max_tokens_ok = root
            .get::<crate::SdkServerConfig>()
            .is_some_and(|c| c.max_tokens_as_success);
        root.on_emit::<SubagentEnd>(ListenOptions::GLOBAL, move |end| {
            if !end.info.local() {
                return Ok(());
            }
            let reason = end.stop_reason.as_str();
            let ok = reason == "completed" || (reason == "max-tokens" && max_tokens_ok);
            let mut params = json!({
                "provider": end.info.provider,
                "agentId": end.info.id,
                "parentSessionId": end.info.parent.session().id(),
                "childSessionId": end.info.id,
                "status": if ok { "ok" } else { "error" },
                "stopReason": reason,
            });
            if let Some(blocks) = &end.last_assistant_message {
                params["lastAssistantMessage"] = json!(blocks);
            }
            out.notify("subagent.finished", params);
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        let efforts = server.efforts.clone();
        root.on_waterfall::<Request>(ListenOptions::GLOBAL, move |payload, next| {
            let effort = efforts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&payload.agent.session().id())
                .cloned();
            Box::pin(async move {
                let mut config = next.run().await?;
                if effort.is_some() {
                    config.reasoning_effort = effort;
                }
                Ok(config)
            })
        })
        .map_err(|e| e.to_string())?;
        Ok(server)
    }

    fn route(&self) -> Result<Route, RpcError> {
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(fail("SDK server is shutting down"));
        }
        self.route
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| fail("SDK server is not initialized"))
    }

    fn open(&self, id: &str) -> Option<AgentRef> {
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
            "initialize" => self.initialize(params),
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
                self.shutdown().await;
                Ok(json!({}))
            }
            other => Err(fail(format!(
                "unknown DeepSeek Harness SDK runtime method: {other}"
            ))),
        }
    }

    fn initialize(&self, params: Option<Value>) -> Result<Value, RpcError> {
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(fail("SDK server is shutting down"));
        }
        let (Some(provider), Some(model)) =
            (str_param(&params, "provider"), str_param(&params, "model"))
        else {
            return Err(fail("initialize requires provider and model strings"));
        };
        let base = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let cwd = str_param(&params, "cwd")
            .map(|c| dsh_working_directory::resolve(&base, c))
            .unwrap_or(base);
        let max_tokens = crate::rpc::max_tokens(&params)?;
        let reasoning_effort = str_param(&params, "reasoningEffort").map(str::to_owned);
        let llm = self.root.require::<LlmRuntime>().map_err(fail)?;
        match llm.model_info(provider, model) {
            Err(e) if e.code() == codes::NO_ADAPTER => {
                return Err(fail(format!(
                    "no adapter registered for provider \"{provider}\""
                )));
            }
            Ok(info) => {
                if let Some(effort) = &reasoning_effort {
                    let supported = info
                        .reasoning
                        .as_ref()
                        .is_some_and(|r| r.efforts.iter().any(|e| e == effort));
                    if !supported {
                        return Err(fail(format!(
                            "provider \"{provider}\" model \"{model}\" does not support reasoning effort \"{effort}\""
                        )));
                    }
                }
            }
            // An unknown model is the provider's to refuse, at the first request.
            Err(_) => {}
        }
        *self.route.lock().unwrap_or_else(|e| e.into_inner()) = Some(Route {
            cwd,
            provider: provider.to_string(),
            model: model.to_string(),
            max_tokens,
            reasoning_effort,
        });
        Ok(json!({"serverInfo": {"name": "deepseek-harness-sdk-runtime", "version": "0.0.1"}}))
    }

    fn files(&self) -> Option<Arc<SessionFiles>> {
        self.root.get::<SessionFiles>()
    }

    /// Claims `id` for opening; the guard releases it.
    fn claim(self: &Arc<Self>, id: &str) -> Result<OpenGuard, RpcError> {
        if self.open(id).is_some()
            || !self
                .opening
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id.to_string())
        {
            return Err(fail(format!(
                "SDK session is already open or opening: {id}"
            )));
        }
        Ok(OpenGuard {
            server: self.clone(),
            id: id.to_string(),
        })
    }

    fn adopt(&self, id: &str, agent: AgentRef, route: &Route) {
        if let Some(effort) = &route.reasoning_effort {
            self.efforts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id.to_string(), effort.clone());
        }
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), agent);
    }

    fn request(route: &Route, id: &str) -> CreateAgent {
        let mut request = CreateAgent::fresh(AgentOptions {
            provider: Some(route.provider.clone()),
            model: Some(route.model.clone()),
            max_tokens: route.max_tokens,
            reasoning_effort: None,
        });
        request.session_id = Some(id.to_string());
        request.cwd = Some(route.cwd.clone());
        request
    }

    /// The open session `id`, or a new one (never one that exists on disk: that is
    /// `session/resume`'s to open).
    async fn session(self: &Arc<Self>, id: &str) -> Result<AgentRef, RpcError> {
        let route = self.route()?;
        if let Some(agent) = self.open(id) {
            return Ok(agent);
        }
        let _guard = self.claim(id)?;
        if let Some(files) = self.files() {
            let wanted = id.to_string();
            let found = tokio::task::spawn_blocking(move || files.find(&wanted))
                .await
                .map_err(fail)?
                .map_err(fail)?;
            if found.is_some() {
                return Err(fail(format!("session \"{id}\" already exists")));
            }
        }
        let agents = self.root.require::<Agents>().map_err(fail)?;
        let agent = agents
            .create(&self.root, Self::request(&route, id))
            .map_err(fail)?;
        self.adopt(id, agent.clone(), &route);
        Ok(agent)
    }

    async fn prompt(self: &Arc<Self>, params: Option<Value>) -> Result<Value, RpcError> {
        // Initialized and not shutting down.
        self.route()?;
        let id = session_id(&params, "session/prompt")?;
        let mut content = Vec::new();
        let mut images = Vec::new();
        for block in content_blocks(&params) {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => content.push(ContentBlock::text(
                    block
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                )),
                Some("image") => {
                    // Decoded now, stored below once the session is found; a placeholder
                    // keeps the block's place in the message.
                    let image = dsh_attachments::decode_prompt_image(
                        block
                            .get("mimeType")
                            .and_then(Value::as_str)
                            .unwrap_or_default(),
                        block
                            .get("data")
                            .and_then(Value::as_str)
                            .unwrap_or_default(),
                        None,
                    )
                    .map_err(|e| fail(e.message()))?;
                    images.push(image);
                    content.push(ContentBlock::image(Value::Null));
                }
                other => return Err(unsupported_block(other)),
            }
        }
        let agent = self.session(&id).await?;
        if !images.is_empty() {
            // The whole batch is stored before anything is queued; a refusal queues nothing.
            // Any route takes it: a text-only model sees a placeholder per image.
            let root = self.root.clone();
            let refs = tokio::task::spawn_blocking(move || {
                dsh_attachments::store_prompt_images(&root, &images)
            })
            .await
            .map_err(fail)?
            .map_err(|e| fail(e.message()))?;
            let mut refs = refs.into_iter();
            for block in &mut content {
                if block.block_type() == "image"
                    && let Some(r) = refs.next()
                {
                    *block = ContentBlock::image(r.to_store_value());
                }
            }
        }
        let message = Message::user(content, MessageSource::User);
        let message_id = message.id.clone();
        agent.followup(message).map_err(fail)?;
        Ok(json!({"messageId": message_id}))
    }

    async fn resume(self: &Arc<Self>, params: Option<Value>) -> Result<Value, RpcError> {
        let route = self.route()?;
        let id = session_id(&params, "session/resume")?;
        let _guard = self.claim(&id)?;
        let files = self
            .files()
            .ok_or_else(|| fail("sessions are not persisted in this composition"))?;
        let wanted = id.clone();
        let loaded = match tokio::task::spawn_blocking(move || files.load(&wanted))
            .await
            .map_err(fail)?
        {
            Ok(l) => l,
            Err(PersistenceError::NotFound { .. }) => {
                return Err(fail(format!("session \"{id}\" not found")));
            }
            Err(e) => return Err(fail(e)),
        };
        let mut request = Self::request(&route, &id);
        if let Some(cwd) = &loaded.header.cwd {
            request.cwd = Some(PathBuf::from(cwd));
        }
        request.source = AgentSource::Resume {
            header: loaded.header,
            events: loaded.events,
            stored_len: loaded.stored_len,
        };
        let agents = self.root.require::<Agents>().map_err(fail)?;
        let agent = agents.create(&self.root, request).map_err(fail)?;
        self.adopt(&id, agent, &route);
        Ok(json!({}))
    }

    async fn wait(&self, params: Option<Value>) -> Result<Value, RpcError> {
        self.route()?;
        let id = session_id(&params, "session/wait")?;
        let agent = self
            .open(&id)
            .ok_or_else(|| fail(format!("unknown SDK session: {id}")))?;
        agent.when_idle().await;
        Ok(json!({}))
    }

    /// `get` (`path` None) and `set`: the session's effective working directory. A change
    /// is logged (`working-directory/change`) and told to the model before its next step.
    async fn working_directory(
        self: &Arc<Self>,
        params: Option<Value>,
        path: Option<String>,
    ) -> Result<Value, RpcError> {
        self.route()?;
        let id = match str_param(&params, "sessionId") {
            Some(id) if !id.is_empty() => id.to_string(),
            _ => {
                return Err(fail(
                    "working-directory requests require a non-empty sessionId",
                ));
            }
        };
        let agent = self.session(&id).await?;
        let origin = agent
            .session()
            .header()
            .cwd
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/"));
        let current = agent.cwd().unwrap_or_else(|| origin.clone());
        let settled =
            dsh_working_directory::settle(agent.session(), &current, &origin, path.as_deref())
                .map_err(fail)?;
        if let Some(message) = settled.notice {
            agent
                .send(message, InboxTarget::NextStep, false)
                .map_err(fail)?;
        }
        Ok(json!({"cwd": settled.cwd.display().to_string()}))
    }

    /// Cancels running turns, flushes every log and disposes every agent.
    pub async fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
        let agents: Vec<(String, AgentRef)> = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        for (_, agent) in &agents {
            agent.cancel(CancelCause::User, false);
        }
        for (id, agent) in &agents {
            let _ =
                tokio::time::timeout(std::time::Duration::from_secs(5), agent.when_idle()).await;
            if let Err(e) = agent.session().flush().await {
                tracing::warn!("sdk: flushing session {id} failed: {e}");
            }
            agent.dispose().await;
        }
    }
}

/// Releases an `opening` claim.
struct OpenGuard {
    server: Arc<Server>,
    id: String,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.server
            .opening
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}
