//! Session methods of the bridge: load, resume, list, close and new.

use super::*;
use crate::protocol::{NewSession, SessionInfo, SessionList};

impl Bridge {
    /// `session/load` (replays the history as updates before answering) and
    /// `session/resume` (no replay): the agent is rebuilt from the stored log.
    pub(super) async fn load_session(
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
        let cwd = absolute_cwd(&p)?;
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
            return Ok(self.session_answer(&session.agent, None));
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
            Err(PersistenceError::NotFound { .. }) => return Err(crate::rpc::not_found(&id)),
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
            .unwrap_or_else(|| cwd.clone());
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
        Ok(self.session_answer(&agent, None))
    }

    /// The model and reasoning effort the session last asked for (its latest request
    /// header) become its choices again, as upstream 0.2.1 restores them: an effort the
    /// adapter filled in by default is not a choice. A header of another route is ignored.
    pub(super) fn restore_choices(&self, id: &str, agent: &AgentRef) {
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

    pub(super) async fn list_sessions(&self, params: Option<Value>) -> Result<Value, RpcError> {
        let cwd = params
            .as_ref()
            .and_then(|p| p.get("cwd"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let Some(files) = self.root.get::<SessionFiles>() else {
            return Ok(protocol::to_value(&SessionList {
                sessions: Vec::new(),
            }));
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
        let sessions = rows
            .into_iter()
            .map(|s| SessionInfo {
                session_id: s.header.id,
                cwd: s.header.cwd.unwrap_or_default(),
                title: Some(s.title).filter(|t| !t.is_empty()),
                updated_at: crate::project::iso_time(s.updated_at),
            })
            .collect();
        Ok(protocol::to_value(&SessionList { sessions }))
    }

    pub(super) async fn close_session(&self, params: Option<Value>) -> Result<Value, RpcError> {
        let p = check_params(params.as_ref(), &[("sessionId", "string")])?;
        let id = p.get("sessionId").and_then(Value::as_str).unwrap_or("");
        let Some(session) = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
        else {
            return Err(crate::rpc::not_found(id));
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

    pub(super) async fn new_session(
        self: &Arc<Self>,
        params: Option<Value>,
    ) -> Result<Value, RpcError> {
        let p = check_params(
            params.as_ref(),
            &[("cwd", "string"), ("mcpServers", "array")],
        )?;
        let cwd = absolute_cwd(&p)?;
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
        let request = self.agent_request(&id, cwd.clone());
        let agent = agents
            .create(&self.root, request)
            .map_err(RpcError::internal)?;
        let (notices, servers) = attach_mcp(&agent, mcp).await;
        let session = AcpSession::new(agent.clone(), cwd).with_notices(notices);
        follow_mcp(&self.peer, &session, servers);
        self.adopt(&id, session);
        if !self.rich() {
            return Ok(protocol::to_value(&NewSession { session_id: id }));
        }
        Ok(self.session_answer(&agent, Some(id)))
    }
}
