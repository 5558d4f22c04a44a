//! One streamed chat-completions attempt: HTTP (reqwest) → SSE framing → translation.
//!
//! Every wait on the network — the response head, an error body, each body read — is
//! bounded by the idle timeout and raced against the caller's cancellation. The timer
//! covers only the wait inside a poll, never the consumer's time between reads. Nothing is
//! spawned: dropping the stream drops the response, which closes the connection.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

use dsh_llm::{AdapterStream, LlmError, StreamChunk, codes};
use futures::StreamExt;
use reqwest::header::HeaderMap;
use tokio_util::sync::CancellationToken;

use crate::http_error::{HttpFailure, classify};
use crate::sse::{DONE, SseDecoder};
use crate::translate::{ReasoningField, Translator};

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
    pub cancel: CancellationToken,
    /// The product name in messages (`DeepSeek` → `DeepSeek stream idle timeout after …`).
    pub vendor: String,
    pub reasoning_field: ReasoningField,
}

enum Phase {
    Connect,
    Body(Box<BodyPhase>),
    Finished,
}

struct BodyPhase {
    response: reqwest::Response,
    decoder: SseDecoder,
    translator: Translator,
}

struct Attempt {
    call: HttpCall,
    phase: Phase,
    queue: VecDeque<Result<StreamChunk, LlmError>>,
}

enum Waited<T> {
    Ready(T),
    TimedOut,
    Cancelled,
}

/// Streams one attempt; failures arrive as a final `Err` item.
pub(crate) fn stream_call(call: HttpCall) -> AdapterStream {
    let attempt = Attempt {
        call,
        phase: Phase::Connect,
        queue: VecDeque::new(),
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
                    Ok(false) => {}
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

    async fn wait<F: Future>(&self, future: F) -> Waited<F::Output> {
        let timeout = Duration::from_millis(self.call.idle_timeout_ms);
        tokio::select! {
            biased;
            () = self.call.cancel.cancelled() => Waited::Cancelled,
            result = tokio::time::timeout(timeout, future) => match result {
                Ok(value) => Waited::Ready(value),
                Err(_) => Waited::TimedOut,
            },
        }
    }

    /// Sends the request; on success moves to the body phase.
    async fn connect(&mut self) -> Result<(), LlmError> {
        let request = self
            .call
            .client
            .post(&self.call.url)
            .headers(self.call.headers.clone())
            .body(std::mem::take(&mut self.call.body));
        let response = match self.wait(request.send()).await {
            Waited::Cancelled => return Err(self.aborted()),
            Waited::TimedOut => return Err(self.timed_out()),
            Waited::Ready(Err(error)) => {
                tracing::debug!(error = %error_chain(&error), "chat-completions request failed");
                return Err(LlmError::new(
                    codes::TRANSPORT,
                    format!(
                        "{} API request to {} failed",
                        self.call.vendor, self.call.base_url
                    ),
                ));
            }
            Waited::Ready(Ok(response)) => response,
        };
        let status = response.status();
        if !status.is_success() {
            return Err(self.http_failure(response).await);
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
            translator: Translator::new(self.call.reasoning_field),
        }));
        Ok(())
    }

    async fn http_failure(&self, response: reqwest::Response) -> LlmError {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = match self.wait(response.text()).await {
            Waited::Cancelled => return self.aborted(),
            Waited::TimedOut => return self.timed_out(),
            Waited::Ready(Err(error)) => {
                tracing::debug!(error = %error_chain(&error), "reading the error body failed");
                return self.stream_failed();
            }
            Waited::Ready(Ok(body)) => body,
        };
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let error = classify(
            &self.call.vendor,
            &HttpFailure {
                status,
                retry_after: header("retry-after"),
                x_request_id: header("x-request-id"),
                x_deepseek_request_id: header("x-deepseek-request-id"),
                body: &body,
            },
        );
        tracing::debug!(status, code = %error.code(), body = %body, "chat-completions request rejected");
        error
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
        } = body;
        let bytes = match self.wait(response.chunk()).await {
            Waited::Cancelled => return Err(self.aborted()),
            Waited::TimedOut => return Err(self.timed_out()),
            Waited::Ready(Err(error)) => {
                tracing::debug!(error = %error_chain(&error), "chat-completions stream failed");
                return Err(self.stream_failed());
            }
            Waited::Ready(Ok(None)) => {
                return Err(LlmError::new(
                    codes::STREAM_CLOSED,
                    "SSE stream ended without [DONE]",
                ));
            }
            Waited::Ready(Ok(Some(bytes))) => bytes,
        };
        for payload in decoder.feed(&bytes) {
            if payload == DONE {
                self.queue.extend(translator.done().into_iter().map(Ok));
                return Ok(false);
            }
            match translator.payload(&payload) {
                Ok(chunks) => self.queue.extend(chunks.into_iter().map(Ok)),
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
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
