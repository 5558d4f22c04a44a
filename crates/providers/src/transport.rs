//! One streamed chat-completions attempt: HTTP (reqwest) → SSE framing → translation.
//!
//! Every wait on the network — the response head, an error body, each body read — is
//! bounded twice and raced against the caller's cancellation:
//! * the idle timeout: time spent waiting since the last bytes arrived (keep-alive comments
//!   count, as upstream); it covers only the waits inside polls, never the consumer's time
//!   between reads;
//! * the request deadline: wall time since the attempt started, which nothing resets, so a
//!   provider that keeps a stream open with comments alone cannot hold a turn forever.
//!
//! Bodies are bounded too: an error body is read up to [`MAX_ERROR_BODY_BYTES`], SSE lines
//! and events up to the decoder's limits, and a whole response up to the route's
//! `maxResponseBytes` (see `response_limit`). Nothing is spawned: dropping the stream drops
//! the response, which closes the connection.

use std::collections::VecDeque;
use std::future::Future;
use std::time::{Duration, Instant};

use dsh_llm::{AdapterStream, LlmError, StreamChunk, codes};
use futures::StreamExt;
use reqwest::header::HeaderMap;
use tokio_util::sync::CancellationToken;

use crate::anthropic::translate::MessagesTranslator;
use crate::http_error::{HttpFailure, classify};
use crate::response_limit::ResponseLimit;
use crate::responses::translate::ResponsesTranslator;
use crate::sse::{DONE, SseDecoder};
use crate::translate::{ReasoningField, Translator};

/// The wire protocol of an attempt's response stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// OpenAI-style chat completions, ending with `[DONE]`.
    ChatCompletions(ReasoningField),
    /// One OpenAI-style chat completion as a JSON body (`stream: false`).
    ChatCompletion(ReasoningField),
    /// Anthropic Messages events, ending with `message_stop`.
    AnthropicMessages,
    /// OpenAI Responses events, ending with `response.completed`.
    OpenAiResponses,
}

enum StreamTranslator {
    Chat(Translator),
    Messages(MessagesTranslator),
    Responses(ResponsesTranslator),
}

/// Everything one attempt needs, fixed before the first byte is sent.
pub(crate) struct HttpCall {
    pub client: reqwest::Client,
    /// `<baseURL>/chat/completions`.
    pub url: String,
    /// The configured base URL, as it appears in transport error messages.
    pub base_url: String,
    pub headers: HeaderMap,
    pub body: String,
    pub idle_timeout_ms: u64,
    /// Overall deadline of the attempt (nothing resets it).
    pub request_timeout_ms: u64,
    pub cancel: CancellationToken,
    /// The product name in messages (`DeepSeek` → `DeepSeek stream idle timeout after …`).
    pub vendor: String,
    pub protocol: Protocol,
    /// The most body bytes one response may carry.
    pub limit: ResponseLimit,
    /// What to change in the configuration when the endpoint rejects the request, appended
    /// to the error's message (routes a user configures themselves have one).
    pub rejection_hint: Option<RejectionHint>,
    /// Request extension fields the body carries: told once the endpoint answered 2xx.
    pub extensions: Option<dsh_llm::PreparedExtensions>,
}

/// See [`HttpCall::rejection_hint`].
pub(crate) type RejectionHint =
    std::sync::Arc<dyn Fn(&dsh_llm::LlmFailure) -> Option<String> + Send + Sync>;

enum Phase {
    Connect,
    Body(Box<BodyPhase>),
    Finished,
}

struct BodyPhase {
    response: reqwest::Response,
    decoder: SseDecoder,
    translator: StreamTranslator,
    /// The body read so far when the reply is one JSON document instead of a stream.
    whole: Option<Vec<u8>>,
    /// Whether any event payload has arrived (comments and pings are not payloads).
    any_payload: bool,
}

/// Largest error body read from a failed response; the rest is ignored.
pub(crate) const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

struct Attempt {
    call: HttpCall,
    phase: Phase,
    queue: VecDeque<Result<StreamChunk, LlmError>>,
    /// When the attempt started (the request deadline counts from here).
    started: Instant,
    /// Waiting time since bytes last arrived (or since the start).
    idle_spent: Duration,
    /// Body bytes received so far.
    received: u64,
}

enum Waited<T> {
    Ready(T),
    TimedOut,
    PastDeadline,
    Cancelled,
}

/// Streams one attempt; failures arrive as a final `Err` item.
pub(crate) fn stream_call(call: HttpCall) -> AdapterStream {
    let attempt = Attempt {
        call,
        phase: Phase::Connect,
        queue: VecDeque::new(),
        started: Instant::now(),
        idle_spent: Duration::ZERO,
        received: 0,
    };
    futures::stream::unfold(attempt, |mut attempt| async move {
        let item = attempt.next_item().await?;
        Some((item, attempt))
    })
    .boxed()
}

impl Attempt {
    async fn next_item(&mut self) -> Option<Result<StreamChunk, LlmError>> {
        loop {
            if !matches!(self.phase, Phase::Finished) || !self.queue.is_empty() {
                // Once cancelled, nothing more is delivered, not even chunks already decoded.
                if self.call.cancel.is_cancelled() {
                    return Some(Err(self.finish_with(self.aborted())));
                }
            }
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            match std::mem::replace(&mut self.phase, Phase::Finished) {
                Phase::Finished => return None,
                Phase::Connect => {
                    if let Err(error) = self.connect().await {
                        self.queue.push_back(Err(error));
                    }
                }
                Phase::Body(mut body) => match self.read(&mut body).await {
                    Ok(true) => self.phase = Phase::Body(body),
                    Ok(false) => tracing::trace!(target: "dsh_step", "response end"),
                    Err(error) => self.queue.push_back(Err(error)),
                },
            }
        }
    }

    fn finish_with(&mut self, error: LlmError) -> LlmError {
        self.phase = Phase::Finished;
        self.queue.clear();
        error
    }

    fn aborted(&self) -> LlmError {
        LlmError::new(
            codes::ABORTED,
            format!("{} request aborted by caller", self.call.vendor),
        )
    }

    fn timed_out(&self) -> LlmError {
        LlmError::new(
            codes::TIMEOUT,
            format!(
                "{} stream idle timeout after {}ms",
                self.call.vendor, self.call.idle_timeout_ms
            ),
        )
    }

    fn past_deadline(&self) -> LlmError {
        LlmError::new(
            codes::TIMEOUT,
            format!(
                "{} request exceeded its {}ms deadline",
                self.call.vendor, self.call.request_timeout_ms
            ),
        )
    }

    /// The error for a wait that did not complete.
    fn unfinished<T>(&self, waited: &Waited<T>) -> Option<LlmError> {
        match waited {
            Waited::Ready(_) => None,
            Waited::Cancelled => Some(self.aborted()),
            Waited::TimedOut => Some(self.timed_out()),
            Waited::PastDeadline => Some(self.past_deadline()),
        }
    }

    /// Awaits `future` within what is left of the idle timeout and of the request deadline.
    /// The time waited counts as idle until [`Attempt::progressed`] resets it.
    async fn wait<F: Future>(&mut self, future: F) -> Waited<F::Output> {
        let idle_left =
            Duration::from_millis(self.call.idle_timeout_ms).saturating_sub(self.idle_spent);
        let deadline_left = Duration::from_millis(self.call.request_timeout_ms)
            .saturating_sub(self.started.elapsed());
        let (limit, on_expiry) = if deadline_left < idle_left {
            (deadline_left, Waited::PastDeadline)
        } else {
            (idle_left, Waited::TimedOut)
        };
        let began = Instant::now();
        let waited = tokio::select! {
            biased;
            () = self.call.cancel.cancelled() => Waited::Cancelled,
            result = tokio::time::timeout(limit, future) => match result {
                Ok(value) => Waited::Ready(value),
                Err(_) => on_expiry,
            },
        };
        self.idle_spent += began.elapsed();
        waited
    }

    /// Bytes arrived: the idle clock starts over.
    fn progressed(&mut self) {
        self.idle_spent = Duration::ZERO;
    }

    /// Sends the request; on success moves to the body phase.
    async fn connect(&mut self) -> Result<(), LlmError> {
        let request = self
            .call
            .client
            .post(&self.call.url)
            .headers(self.call.headers.clone())
            .body(std::mem::take(&mut self.call.body));
        tracing::trace!(target: "dsh_step", "request sent");
        let waited = self.wait(request.send()).await;
        tracing::trace!(target: "dsh_step", "response head");
        if let Some(error) = self.unfinished(&waited) {
            return Err(error);
        }
        let response = match waited {
            Waited::Cancelled | Waited::TimedOut | Waited::PastDeadline => {
                return Err(self.aborted());
            }
            Waited::Ready(Err(error)) => {
                tracing::debug!(error = %dsh_kernel::error_chain(&error), "chat-completions request failed");
                return Err(LlmError::new(
                    codes::TRANSPORT,
                    format!(
                        "{} API request to {} failed: {}",
                        self.call.vendor,
                        self.call.base_url,
                        transport_cause(&error)
                    ),
                ));
            }
            Waited::Ready(Ok(response)) => response,
        };
        // The response head is progress: the body gets a fresh idle allowance.
        self.progressed();
        let status = response.status();
        if !status.is_success() {
            return Err(self.http_failure(response).await);
        }
        if let Some(extensions) = self.call.extensions.take() {
            extensions.accept();
        }
        if matches!(status.as_u16(), 204 | 205) {
            return Err(LlmError::new(
                codes::EMPTY_RESPONSE,
                format!("{} API returned no response body", self.call.vendor),
            ));
        }
        self.phase = Phase::Body(Box::new(BodyPhase {
            response,
            decoder: SseDecoder::new(),
            whole: matches!(self.call.protocol, Protocol::ChatCompletion(_)).then(Vec::new),
            any_payload: false,
            translator: match self.call.protocol {
                Protocol::ChatCompletions(field) | Protocol::ChatCompletion(field) => {
                    StreamTranslator::Chat(Translator::new(field))
                }
                Protocol::AnthropicMessages => {
                    StreamTranslator::Messages(MessagesTranslator::new())
                }
                Protocol::OpenAiResponses => {
                    StreamTranslator::Responses(ResponsesTranslator::new())
                }
            },
        }));
        Ok(())
    }

    async fn http_failure(&mut self, mut response: reqwest::Response) -> LlmError {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let mut raw = Vec::new();
        loop {
            let waited = self.wait(response.chunk()).await;
            if let Some(error) = self.unfinished(&waited) {
                return error;
            }
            match waited {
                Waited::Ready(Ok(Some(bytes))) => {
                    let room = MAX_ERROR_BODY_BYTES - raw.len();
                    raw.extend_from_slice(&bytes[..bytes.len().min(room)]);
                    if raw.len() >= MAX_ERROR_BODY_BYTES {
                        break;
                    }
                }
                Waited::Ready(Ok(None)) => break,
                Waited::Ready(Err(error)) => {
                    tracing::debug!(error = %dsh_kernel::error_chain(&error), "reading the error body failed");
                    return self.stream_failed();
                }
                Waited::Cancelled | Waited::TimedOut | Waited::PastDeadline => {
                    return self.aborted();
                }
            }
        }
        let body = String::from_utf8_lossy(&raw).into_owned();
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let classify = match self.call.protocol {
            Protocol::ChatCompletions(_)
            | Protocol::ChatCompletion(_)
            | Protocol::OpenAiResponses => classify,
            Protocol::AnthropicMessages => crate::anthropic::classify_http,
        };
        let mut error = classify(
            &self.call.vendor,
            &HttpFailure {
                status,
                retry_after: header("retry-after"),
                x_request_id: header("x-request-id"),
                x_deepseek_request_id: header("x-deepseek-request-id"),
                body: &body,
            },
        );
        self.add_hint(&mut error);
        tracing::debug!(status, code = %error.code(), body = %body, "chat-completions request rejected");
        error
    }

    /// Appends the route's rejection hint, when it has one for `error`.
    fn add_hint(&self, error: &mut LlmError) {
        if let Some(hint) = self
            .call
            .rejection_hint
            .as_ref()
            .and_then(|h| h(&error.failure))
        {
            error.failure.message = format!("{}; {hint}", error.failure.message);
        }
    }

    fn stream_failed(&self) -> LlmError {
        LlmError::new(
            codes::TRANSPORT,
            format!(
                "{} API stream from {} failed",
                self.call.vendor, self.call.base_url
            ),
        )
    }

    /// Reads once and queues what it completes. `Ok(true)` keeps the body phase.
    async fn read(&mut self, body: &mut BodyPhase) -> Result<bool, LlmError> {
        let BodyPhase {
            response,
            decoder,
            translator,
            whole,
            any_payload,
        } = body;
        let waited = self.wait(response.chunk()).await;
        if let Some(error) = self.unfinished(&waited) {
            return Err(error);
        }
        let bytes = match waited {
            Waited::Cancelled | Waited::TimedOut | Waited::PastDeadline => {
                return Err(self.aborted());
            }
            Waited::Ready(Err(error)) => {
                tracing::debug!(error = %dsh_kernel::error_chain(&error), "chat-completions stream failed");
                return Err(self.stream_failed());
            }
            Waited::Ready(Ok(None)) => {
                if let (Some(whole), StreamTranslator::Chat(translator)) = (whole, translator) {
                    match translator.completion(whole) {
                        Ok(chunks) => self.queue.extend(chunks.into_iter().map(Ok)),
                        Err(error) => self.queue.push_back(Err(error)),
                    }
                    return Ok(false);
                }
                let marker = match self.call.protocol {
                    Protocol::ChatCompletions(_) | Protocol::ChatCompletion(_) => "[DONE]",
                    Protocol::AnthropicMessages => "message_stop",
                    Protocol::OpenAiResponses => "response.completed",
                };
                let mut error = LlmError::new(
                    codes::STREAM_CLOSED,
                    format!("SSE stream ended without {marker}"),
                );
                // A stream that ends before its first event is the endpoint failing after
                // its 200: the route's hint may know why.
                if !*any_payload {
                    self.add_hint(&mut error);
                }
                return Err(error);
            }
            Waited::Ready(Ok(Some(bytes))) => bytes,
        };
        self.progressed();
        self.received = self.received.saturating_add(bytes.len() as u64);
        if self.received > self.call.limit.bytes {
            return Err(self.call.limit.exceeded(&self.call.vendor));
        }
        if let Some(whole) = whole {
            whole.extend_from_slice(&bytes);
            return Ok(true);
        }
        let payloads = decoder.feed(&bytes).map_err(|overflow| {
            LlmError::new(
                codes::MALFORMED_RESPONSE,
                format!("{} stream: {overflow}", self.call.vendor),
            )
        })?;
        for payload in payloads {
            *any_payload = true;
            let translated = match translator {
                StreamTranslator::Chat(translator) => {
                    if payload == DONE {
                        self.queue.extend(translator.done().into_iter().map(Ok));
                        return Ok(false);
                    }
                    translator.payload(&payload).map(|chunks| (chunks, false))
                }
                StreamTranslator::Messages(translator) => translator.event(&payload),
                StreamTranslator::Responses(translator) => translator.event(&payload),
            };
            match translated {
                Ok((chunks, finished)) => {
                    self.queue.extend(chunks.into_iter().map(Ok));
                    if finished {
                        return Ok(false);
                    }
                }
                Err(error) => {
                    self.queue.push_back(Err(error));
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

/// An error with its source chain, for logs.
/// Why a request never got a response, in a few words a user can act on (the message
/// names it; the whole chain goes to the debug log).
fn transport_cause(error: &reqwest::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            return match io.kind() {
                K::ConnectionRefused => "connection refused (is the server running?)".into(),
                K::ConnectionReset | K::ConnectionAborted => "the connection was reset".into(),
                K::TimedOut => "the connection timed out".into(),
                K::NetworkUnreachable | K::HostUnreachable => "the network is unreachable".into(),
                K::PermissionDenied => "the connection was not permitted".into(),
                _ => io.to_string(),
            };
        }
        source = e.source();
    }
    let chain = dsh_kernel::error_chain(error);
    if chain.contains("dns error") {
        "the host name could not be resolved".into()
    } else if error.is_connect() {
        "could not connect".into()
    } else if error.is_timeout() {
        "the request timed out".into()
    } else {
        "the connection failed before a response arrived".into()
    }
}
