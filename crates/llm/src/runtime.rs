//! The adapter registry (`ctx.llm`), call preparation and the `llm/stream` waterfall.

use std::sync::{Arc, RwLock};

use dsh_kernel::{BoxError, BoxFuture, Context, EffectHandle, Event, WaterfallEvent};
use futures::StreamExt;
use futures::stream::BoxStream;

use crate::chunk::{FinishReason, LlmFailure, StreamChunk};
use crate::error::{LlmError, codes};
use crate::request::{AdapterDefaults, GenerateOptions, LlmCallConfig, ModelInfo, RetryPolicy};

/// What consumers read: chunks, or an error raised by middleware (never by an adapter —
/// adapter failures arrive as a terminal `finish {error|aborted}` chunk).
pub type ChunkStream = BoxStream<'static, Result<StreamChunk, BoxError>>;

/// What adapters produce: one provider attempt. An `Err` item ends the attempt; the runtime
/// turns it into the terminal finish chunk.
pub type AdapterStream = BoxStream<'static, Result<StreamChunk, LlmError>>;

/// A model provider. Implementations must honour `options.cancel` promptly, perform exactly
/// one provider attempt per `stream` call (no internal retries), follow the stream grammar
/// (blocks opened before deltas, one `usage` at most, `finish` last) and report an empty
/// successful completion as an `EMPTY_RESPONSE` error.
pub trait LlmAdapter: Send + Sync + 'static {
    /// Exact model information for `model` on route `provider`.
    fn model_info(&self, provider: &str, model: &str) -> Result<ModelInfo, LlmError>;
    /// The models the route offers, in catalog order (empty when it has no catalog).
    fn models(&self, _provider: &str) -> Vec<ModelInfo> {
        Vec::new()
    }
    /// The route's retry policy.
    fn retry_policy(&self, _provider: &str) -> RetryPolicy {
        RetryPolicy::default()
    }
    /// Streams one attempt.
    fn stream(&self, options: Arc<GenerateOptions>) -> AdapterStream;
    /// What the route's endpoint says it serves (`GET …/models`), for routes whose API has
    /// such a list; `None` when the route cannot ask.
    fn served_models(
        &self,
        _provider: &str,
    ) -> Option<BoxFuture<'static, Result<Vec<String>, LlmError>>> {
        None
    }
}

/// `llm/stream` (waterfall): every model request flows through it. Listeners may observe,
/// wrap the stream, or short-circuit with their own chunks. Default: the routed adapter's
/// normalized stream. A throwing listener fails the request outright (it is not converted
/// into a finish chunk). Dispatched without a scope carrier: every listener sees it.
pub struct LlmStreamEvent;

/// The payload of [`LlmStreamEvent`].
pub struct LlmStreamRequest {
    pub options: Arc<GenerateOptions>,
}

impl Event for LlmStreamEvent {
    const NAME: &'static str = "llm/stream";
    type Payload = LlmStreamRequest;
}

impl WaterfallEvent for LlmStreamEvent {
    type Output = ChunkStream;
}

struct Registration {
    id: u64,
    routes: Vec<String>,
    adapter: Arc<dyn LlmAdapter>,
}

/// A call resolved against its adapter: the effective config and what the adapter filled in.
#[derive(Clone)]
pub struct PreparedCall {
    pub config: LlmCallConfig,
    pub adapter_defaults: AdapterDefaults,
    pub retry_policy: RetryPolicy,
    pub context_window: Option<u64>,
    pub input_modalities: Vec<String>,
    adapter: Arc<dyn LlmAdapter>,
}

impl std::fmt::Debug for PreparedCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedCall")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The `ctx.llm` service.
pub struct LlmRuntime {
    ctx: Context,
    registrations: RwLock<Vec<Registration>>,
    next_id: std::sync::atomic::AtomicU64,
    /// Context windows set for one route/model (`DSH_CONTEXT_WINDOW`), over the adapter's.
    context_windows: RwLock<Vec<(String, String, u64)>>,
}

impl LlmRuntime {
    /// A runtime dispatching `llm/stream` through `ctx`.
    pub fn new(ctx: Context) -> Arc<Self> {
        Arc::new(Self {
            ctx,
            registrations: RwLock::new(Vec::new()),
            next_id: 1.into(),
            context_windows: RwLock::new(Vec::new()),
        })
    }

    /// Sets the context window of `model` on route `provider`, over what its adapter's
    /// catalog says (upstream's SDK runtime does this for the default model from
    /// `DSH_CONTEXT_WINDOW`).
    pub fn set_context_window(&self, provider: &str, model: &str, window: u64) {
        let mut windows = self
            .context_windows
            .write()
            .unwrap_or_else(|p| p.into_inner());
        windows.retain(|(p, m, _)| p != provider || m != model);
        windows.push((provider.to_string(), model.to_string(), window));
    }

    fn context_window_override(&self, provider: &str, model: &str) -> Option<u64> {
        self.context_windows
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(p, m, _)| p == provider && m == model)
            .map(|(_, _, w)| *w)
    }

    /// Registers `adapter` for `routes` as an effect of `owner`. Routes are unique.
    pub fn register_adapter(
        self: &Arc<Self>,
        owner: &Context,
        routes: Vec<String>,
        adapter: Arc<dyn LlmAdapter>,
    ) -> Result<EffectHandle, BoxError> {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        {
            let mut regs = self
                .registrations
                .write()
                .unwrap_or_else(|p| p.into_inner());
            for route in &routes {
                if regs.iter().any(|r| r.routes.contains(route)) {
                    return Err(format!("LLM route \"{route}\" is already registered").into());
                }
            }
            regs.push(Registration {
                id,
                routes,
                adapter,
            });
        }
        let this = Arc::downgrade(self);
        Ok(owner.effect("llm adapter", move || {
            if let Some(this) = this.upgrade() {
                this.registrations
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|r| r.id != id);
            }
        })?)
    }

    fn adapter_for(&self, provider: &str) -> Option<Arc<dyn LlmAdapter>> {
        let regs = self.registrations.read().unwrap_or_else(|p| p.into_inner());
        regs.iter()
            .find(|r| r.routes.iter().any(|x| x == provider))
            .map(|r| r.adapter.clone())
    }

    /// The registered routes.
    pub fn routes(&self) -> Vec<String> {
        let regs = self.registrations.read().unwrap_or_else(|p| p.into_inner());
        regs.iter().flat_map(|r| r.routes.iter().cloned()).collect()
    }

    /// The models a route offers (empty for an unknown route or one without a catalog).
    pub fn models(&self, provider: &str) -> Vec<ModelInfo> {
        self.adapter_for(provider)
            .map(|a| a.models(provider))
            .unwrap_or_default()
    }

    /// Asks the route's endpoint which models it serves (see [`LlmAdapter::served_models`]).
    pub fn served_models(
        &self,
        provider: &str,
    ) -> Option<BoxFuture<'static, Result<Vec<String>, LlmError>>> {
        self.adapter_for(provider)?.served_models(provider)
    }

    /// Model information for a route.
    pub fn model_info(&self, provider: &str, model: &str) -> Result<ModelInfo, LlmError> {
        let adapter = self
            .adapter_for(provider)
            .ok_or_else(|| no_adapter(provider))?;
        let mut info = adapter.model_info(provider, model)?;
        if let Some(window) = self.context_window_override(provider, model) {
            info.context_window = Some(window);
        }
        Ok(info)
    }

    /// Resolves `config` against the routed adapter: fills in the model's default
    /// `maxTokens` and reasoning effort (marking them as adapter defaults) and validates an
    /// explicit effort. Fails with `NO_ADAPTER` when nothing serves the route.
    pub fn prepare_call(&self, config: &LlmCallConfig) -> Result<PreparedCall, LlmError> {
        let adapter = self
            .adapter_for(&config.provider)
            .ok_or_else(|| no_adapter(&config.provider))?;
        let mut info = adapter.model_info(&config.provider, &config.model)?;
        if let Some(window) = self.context_window_override(&config.provider, &config.model) {
            info.context_window = Some(window);
        }
        let mut resolved = config.clone();
        if resolved.max_tokens.is_none() {
            resolved.max_tokens = info.default_max_tokens;
        }
        match &info.reasoning {
            None => {
                if let Some(requested) = &config.reasoning_effort {
                    return Err(unsupported_effort(config, requested));
                }
            }
            Some(reasoning) => {
                let effective = config
                    .reasoning_effort
                    .clone()
                    .or_else(|| reasoning.default_effort.clone());
                if let Some(effective) = effective {
                    if !reasoning.efforts.contains(&effective) {
                        return Err(unsupported_effort(config, &effective));
                    }
                    resolved.reasoning_effort = Some(effective);
                }
            }
        }
        let adapter_defaults = AdapterDefaults {
            reasoning_effort: config.reasoning_effort.is_none()
                && resolved.reasoning_effort.is_some(),
            max_tokens: config.max_tokens.is_none() && resolved.max_tokens.is_some(),
        };
        Ok(PreparedCall {
            config: resolved,
            adapter_defaults,
            retry_policy: adapter.retry_policy(&config.provider),
            context_window: info.context_window,
            input_modalities: info.input_modalities,
            adapter,
        })
    }

    /// Streams a request through the `llm/stream` waterfall. With `prepared`, its adapter
    /// serves the default; otherwise the route is looked up now (a missing adapter becomes a
    /// `NO_ADAPTER` error finish).
    pub async fn stream(
        &self,
        options: Arc<GenerateOptions>,
        prepared: Option<&PreparedCall>,
    ) -> Result<ChunkStream, BoxError> {
        let adapter = match prepared {
            Some(p) => Some(p.adapter.clone()),
            None => self.adapter_for(&options.config.provider),
        };
        let text_only = self.text_only(&options, prepared);
        let request = LlmStreamRequest { options };
        let images = self.ctx.get::<crate::image::RequestImageReader>();
        // Listeners see the session's history as is; the adapter path alone projects it
        // (images as text for a text-only model, image bytes inlined otherwise).
        let default =
            move |req: &LlmStreamRequest| -> BoxFuture<'_, Result<ChunkStream, BoxError>> {
                let options = project_images(req.options.clone(), text_only);
                let adapter = adapter.clone();
                let images = images.clone();
                Box::pin(async move {
                    // Image bytes reach the adapter on a request copy only.
                    let options = match images.as_deref().map(|reader| {
                        crate::image::inline_request_images(
                            &options.messages,
                            reader,
                            crate::image::DEFAULT_MAX_INLINE_REQUEST_IMAGE_BYTES,
                        )
                    }) {
                        Some(Ok(Some(messages))) => Arc::new(GenerateOptions {
                            messages,
                            ..(*options).clone()
                        }),
                        Some(Err(e)) => {
                            let chunk = failure_chunk(&options, e.failure);
                            return Ok(futures::stream::iter([Ok(chunk)]).boxed());
                        }
                        _ => options,
                    };
                    Ok(adapter_stream(adapter, options))
                })
            };
        self.ctx
            .waterfall::<LlmStreamEvent, _>(&request, &default)
            .await
    }
}

impl LlmRuntime {
    /// Whether the routed model declares input modalities without `image`.
    fn text_only(&self, options: &GenerateOptions, prepared: Option<&PreparedCall>) -> bool {
        let modalities = match prepared {
            Some(p) => p.input_modalities.clone(),
            None => self
                .model_info(&options.config.provider, &options.config.model)
                .map(|i| i.input_modalities)
                .unwrap_or_default(),
        };
        !modalities.is_empty() && !modalities.iter().any(|m| m == "image")
    }
}

/// A text-only model sees every image of the history as a fixed text placeholder (the
/// durable log keeps the image).
fn project_images(options: Arc<GenerateOptions>, text_only: bool) -> Arc<GenerateOptions> {
    if !text_only {
        return options;
    }
    match crate::image::project_images_for_text_model(&options.messages) {
        Some(messages) => Arc::new(GenerateOptions {
            messages,
            ..(*options).clone()
        }),
        None => options,
    }
}

fn no_adapter(provider: &str) -> LlmError {
    LlmError::new(
        codes::NO_ADAPTER,
        format!("no LLM adapter is registered for provider \"{provider}\""),
    )
}

fn unsupported_effort(config: &LlmCallConfig, effort: &str) -> LlmError {
    LlmError::new(
        codes::UNSUPPORTED_REASONING_EFFORT,
        format!(
            "provider \"{}\" model \"{}\" does not support reasoning effort \"{}\"",
            config.provider, config.model, effort
        ),
    )
}

/// The final adapter boundary: adapter failures (and a missing adapter) become exactly one
/// terminal `finish {error|aborted}` chunk; nothing is yielded after a finish.
pub fn adapter_stream(
    adapter: Option<Arc<dyn LlmAdapter>>,
    options: Arc<GenerateOptions>,
) -> ChunkStream {
    let Some(adapter) = adapter else {
        let chunk = failure_chunk(&options, no_adapter(&options.config.provider).failure);
        return futures::stream::iter([Ok(chunk)]).boxed();
    };
    let inner = adapter.stream(options.clone());
    let state = (inner, options, false);
    futures::stream::unfold(state, |(mut inner, options, done)| async move {
        if done {
            return None;
        }
        match inner.next().await {
            None => None,
            Some(Ok(chunk)) => {
                let finished = matches!(chunk, StreamChunk::Finish { .. });
                Some((Ok(chunk), (inner, options, finished)))
            }
            Some(Err(error)) => {
                let chunk = failure_chunk(&options, error.failure);
                Some((Ok(chunk), (inner, options, true)))
            }
        }
    })
    .boxed()
}

fn failure_chunk(options: &GenerateOptions, failure: LlmFailure) -> StreamChunk {
    if options.cancel.is_cancelled() || failure.code == codes::ABORTED {
        StreamChunk::finish(FinishReason::Aborted(failure))
    } else {
        StreamChunk::finish(FinishReason::Error(failure))
    }
}
