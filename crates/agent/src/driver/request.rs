//! Building one model request and logging its header (`request/header`, `request/context`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use dsh_kernel::{BoxError, BoxFuture};
use dsh_llm::{
    CallPurpose, GenerateOptions, LlmCallConfig, Message, PreparedCall, ToolSchema, codes,
};
use dsh_session::{EpochHeader, HeaderReason, RequestContext, RequestHeaderData, types};
use tokio_util::sync::CancellationToken;

use super::LoopAgent;
use super::turn::Fail;
use crate::events::{Request, RequestPayload};
use crate::handle::Agent;

/// A request ready to stream.
pub(crate) struct BuiltRequest {
    pub options: Arc<GenerateOptions>,
    pub prepared: Option<PreparedCall>,
}

impl LoopAgent {
    /// The config a request starts from: the latest header's proposal once this loop
    /// instance logged one; otherwise the route, a same-route explicit effort (else the
    /// selection's effort), and max tokens.
    fn seed_config(&self) -> LlmCallConfig {
        let logged = self.header_logged.load(Ordering::Acquire);
        let options = self.options();
        let route = LlmCallConfig::route(
            options.provider.unwrap_or_default(),
            options.model.unwrap_or_default(),
        );
        // Decided under the read lock: the persisted header (with its tool schemas) is
        // never cloned on this per-step path.
        self.session().read(|s| {
            let persisted = s.request_header();
            if logged && let Some(h) = persisted {
                return h.proposal();
            }
            let mut config = route;
            config.reasoning_effort = options.reasoning_effort.clone();
            if let Some(h) = persisted
                && h.config.provider == config.provider
                && h.config.model == config.model
                && !h
                    .adapter_defaults
                    .as_ref()
                    .is_some_and(|d| d.reasoning_effort)
            {
                config.reasoning_effort = h.config.reasoning_effort.clone();
            }
            config.max_tokens = options.max_tokens;
            config
        })
    }

    pub(crate) async fn build_request(
        &self,
        turn: u64,
        step: u64,
        tools: &[ToolSchema],
        system: &str,
        messages: Vec<Arc<Message>>,
        token: &CancellationToken,
    ) -> Result<BuiltRequest, Fail> {
        let Some(agent) = self.agent_ref() else {
            return Err(Fail::Aborted);
        };
        let seed = self.seed_config();
        let payload = RequestPayload {
            agent,
            turn,
            step,
            cancel: token.clone(),
        };
        let default = move |_: &RequestPayload| -> BoxFuture<'_, Result<LlmCallConfig, BoxError>> {
            let seed = seed.clone();
            Box::pin(async move { Ok(seed) })
        };
        let proposed = self
            .ctx()
            .waterfall::<Request, _>(&payload, &default)
            .await?;
        check(token)?;
        if proposed.provider.is_empty() || proposed.model.is_empty() {
            return Err(Fail::Error(
                format!(
                    "agent \"{}\" has no provider/model configured for its requests",
                    self.id()
                )
                .into(),
            ));
        }
        let (config, prepared) = match self.services.llm.prepare_call(&proposed) {
            Ok(p) => (p.config.clone(), Some(p)),
            Err(e) if e.code() == codes::NO_ADAPTER => (proposed, None),
            Err(e) => return Err(Fail::Error(Box::new(e))),
        };
        check(token)?;
        let header = EpochHeader {
            config: config.clone(),
            adapter_defaults: prepared.as_ref().map(|p| p.adapter_defaults.clone()),
            system: Some(system.to_string()),
            tools: Some(tools.to_vec()),
        }
        .canonical();
        let logged = self.header_logged.load(Ordering::Acquire);
        let reason = if !logged {
            Some(self.session().read(|s| match s.request_header() {
                None => HeaderReason::Initial,
                Some(_) => HeaderReason::Resume,
            }))
        } else if !self.session().request_header_matches(&header) {
            Some(HeaderReason::Change)
        } else {
            None
        };
        if let Some(reason) = reason {
            let data = dsh_session::to_data(&RequestHeaderData {
                header: header.clone(),
                reason,
            });
            self.session()
                .append(types::REQUEST_HEADER, data, None)
                .map_err(|e| Fail::Error(Box::new(e)))?;
            self.header_logged.store(true, Ordering::Release);
        }
        let context = RequestContext {
            provider: config.provider.clone(),
            model: config.model.clone(),
            context_window: prepared.as_ref().and_then(|p| p.context_window),
        };
        if self.session().read(|s| s.request_context().cloned()) != Some(context.clone()) {
            self.session()
                .append(types::REQUEST_CONTEXT, dsh_session::to_data(&context), None)
                .map_err(|e| Fail::Error(Box::new(e)))?;
        }
        check(token)?;
        let options = GenerateOptions {
            config,
            messages,
            system: header.system,
            tools: header.tools,
            session_id: Some(self.id().to_string()),
            purpose: CallPurpose::Conversation,
            cancel: token.clone(),
            agent_loop_request: true,
        };
        Ok(BuiltRequest {
            options: Arc::new(options),
            prepared,
        })
    }
}

pub(crate) fn check(token: &CancellationToken) -> Result<(), Fail> {
    if token.is_cancelled() {
        Err(Fail::Aborted)
    } else {
        Ok(())
    }
}
