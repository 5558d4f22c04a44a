//! Follow-up messages to a child: delivered to a resident child, or a cold resume from its
//! stored log.

use super::*;

impl Continuations {
    /// Delivers a later message to a continuable child as its next turn: queued on a
    /// resident child, or cold-resuming it from its log. Returns the message id.
    pub async fn followup(
        &self,
        parent: &AgentRef,
        child_id: &str,
        content: Vec<ContentBlock>,
        source: MessageSource,
    ) -> Result<String, BoxError> {
        self.assert_admitting(parent)?;
        let hooks = self.ctx.get::<ContinuationHooks>();
        let mapped = hooks.as_ref().map(|h| (h.remap)(child_id));
        let child_id = mapped.as_deref().unwrap_or(child_id);
        loop {
            let child_lock = self.child_lock(child_id);
            let held = child_lock.lock().await;
            match self.activation(child_id) {
                Some(a) => {
                    let pending = lock(&a.disposal).clone();
                    if let Some(d) = pending {
                        // Lost the race with the final disposal: wait, then cold-resume.
                        drop(held);
                        let _ = d.await;
                        self.assert_admitting(parent)?;
                        continue;
                    }
                    return self.submit(&a, content, source, parent);
                }
                None => return self.cold_resume(parent, child_id, content, source).await,
            }
        }
    }

    pub(super) async fn cold_resume(
        &self,
        parent: &AgentRef,
        child_id: &str,
        content: Vec<ContentBlock>,
        source: MessageSource,
    ) -> Result<String, BoxError> {
        let files = self.files()?;
        let unavailable = |cause: String| -> BoxError {
            Box::new(
                dsh_kernel::HarnessError::new(
                    "SubagentError",
                    "NOT_RESUMABLE",
                    format!("subagent \"{child_id}\" is unavailable"),
                )
                .with_source(cause.into()),
            )
        };
        if self.agents.get(child_id).is_some() {
            // Live, but not a continuable child this manager holds (a one-shot run).
            return Err(unavailable(
                "the session is live and not continuable".into(),
            ));
        }
        if let Some(hooks) = self.ctx.get::<ContinuationHooks>() {
            (hooks.before_lookup)(child_id).await;
        }
        let id = child_id.to_string();
        let inspecting = files.clone();
        let inspected = tokio::task::spawn_blocking(move || inspecting.inspect(&id))
            .await
            .map_err(|e| unavailable(e.to_string()))?
            .map_err(|e| unavailable(e.to_string()))?;
        self.assert_admitting(parent)?;
        self.authorize_lineage(parent, child_id, inspected.header.parent_session.as_deref())?;
        let seed = inspected.header.seed_length.unwrap_or(0) as usize;
        let own = inspected.events.get(seed..).unwrap_or_default();
        let descriptor = match fold_first(own) {
            Ok(Some(d @ Descriptor::Continuable { .. })) => d,
            _ => {
                return Err(subagent_error(
                    "NOT_RESUMABLE",
                    format!(
                        "subagent \"{child_id}\" cannot be resumed: it was not started as a continuable subagent, so there is no state to continue from; do not call send_message with this id again"
                    ),
                ));
            }
        };
        let Descriptor::Continuable {
            provider,
            agent_provider,
            agent_model,
            persona,
            ..
        } = &descriptor
        else {
            return Err(unavailable("descriptor changed".into()));
        };
        let id = child_id.to_string();
        let loading = files.clone();
        let loaded = tokio::task::spawn_blocking(move || loading.load(&id))
            .await
            .map_err(|e| unavailable(e.to_string()))?
            .map_err(|e| unavailable(e.to_string()))?;
        let options = child_options(
            parent,
            Some(&AgentOptions {
                provider: agent_provider.clone(),
                model: agent_model.clone(),
                max_tokens: None,
                reasoning_effort: None,
            }),
        );
        let create = CreateAgent {
            session_id: Some(child_id.to_string()),
            cwd: loaded.header.cwd.clone().map(std::path::PathBuf::from),
            options,
            source: AgentSource::Resume {
                header: loaded.header,
                events: loaded.events,
                stored_len: loaded.stored_len,
            },
            meta: Default::default(),
            owner: Some(parent.id().to_string()),
            setup: None,
        };
        let activation = self
            .materialize(parent, provider, create, None, persona.as_deref())
            .map_err(|e| match dsh_kernel::HarnessError::find(e.as_ref()) {
                Some(h) if h.name == "SubagentError" => e,
                _ => unavailable(error_chain(e.as_ref())),
            })?;
        match self.submit(&activation, content, source, parent) {
            Ok(id) => Ok(id),
            Err(e) => {
                let _ = self.dispose(activation).await;
                Err(e)
            }
        }
    }
}
