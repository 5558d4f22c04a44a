//! Scripted replies: what the mock server does with one chat-completions request.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;

use super::RecordedRequest;
use super::completion::{Completion, Protocol, ToolCall, Usage};

/// One action on the response connection.
#[derive(Clone, Debug)]
pub enum Step {
    /// The status line and headers. Bodies always use chunked transfer encoding and the
    /// connection closes after each response.
    Head {
        status: u16,
        headers: Vec<(String, String)>,
    },
    /// Body bytes, written as one HTTP chunk (and so usually one client read).
    Bytes(Vec<u8>),
    /// The same body bytes `times` times over, one HTTP chunk each, produced while they are
    /// written: a response of any size without the server holding it.
    Repeat { bytes: Vec<u8>, times: usize },
    /// Send nothing for a while (the client hanging up meanwhile ends the reply).
    Sleep(Duration),
    /// Send nothing until the gate opens (the client hanging up meanwhile ends the reply).
    Wait(Gate),
    /// Terminate the body properly and close. Implied at the end of every script.
    End,
    /// Close the socket abruptly, leaving the chunked body unterminated.
    Drop,
}

/// A latch a test opens to release a [`Step::Wait`], for deterministic interleaving.
#[derive(Clone, Debug, Default)]
pub struct Gate {
    inner: Arc<GateInner>,
}

#[derive(Debug, Default)]
struct GateInner {
    open: AtomicBool,
    notify: tokio::sync::Notify,
}

impl Gate {
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens the gate for every current and future waiter.
    pub fn open(&self) {
        self.inner.open.store(true, Ordering::SeqCst);
        self.inner.notify.notify_waiters();
    }

    pub fn is_open(&self) -> bool {
        self.inner.open.load(Ordering::SeqCst)
    }

    pub(crate) async fn wait(&self) {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_open() {
                return;
            }
            notified.await;
        }
    }
}

type DynamicReply = Arc<dyn Fn(&RecordedRequest) -> Reply + Send + Sync>;

#[derive(Clone)]
enum Body {
    Steps(Vec<Step>),
    Dynamic(DynamicReply),
    /// Rendered in the protocol of the request it answers (chat completions or Messages).
    Completion(Box<Completion>),
}

/// What the server does with one chat-completions request.
#[derive(Clone)]
pub struct Reply {
    body: Body,
    /// Extra headers added to the first [`Step::Head`].
    extra_headers: Vec<(String, String)>,
    /// Steps inserted after the n-th [`Step::Bytes`] (0 = before the first).
    inserts: Vec<(usize, Step)>,
    /// Built by [`Reply::completion`]: a well-formed stream by construction (raw and
    /// deliberately broken replies are not), which the wire check holds to the SDK types.
    generated: bool,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.body {
            Body::Steps(steps) => f.debug_tuple("Reply").field(steps).finish(),
            Body::Dynamic(_) => f.write_str("Reply(dynamic)"),
            Body::Completion(c) => f.debug_tuple("Reply").field(c).finish(),
        }
    }
}

/// The head of a 200 `text/event-stream` response.
pub fn sse_head() -> Step {
    Step::Head {
        status: 200,
        headers: vec![
            (
                "content-type".into(),
                "text/event-stream; charset=utf-8".into(),
            ),
            ("cache-control".into(), "no-cache".into()),
        ],
    }
}

/// `data: <payload>\n\n` as one body chunk.
pub fn sse_event(payload: &str) -> Step {
    Step::Bytes(format!("data: {payload}\n\n").into_bytes())
}

impl Reply {
    /// A reply from explicit steps.
    pub fn steps(steps: Vec<Step>) -> Self {
        Self {
            body: Body::Steps(steps),
            extra_headers: Vec::new(),
            inserts: Vec::new(),
            generated: false,
        }
    }

    /// A stream that sends only SSE keep-alive comments, one every `every`, for `total`
    /// (then ends without `[DONE]`): a provider that holds the connection but never answers.
    pub fn keep_alive_only(every: Duration, total: Duration) -> Self {
        let mut steps = vec![sse_head()];
        let mut elapsed = Duration::ZERO;
        while elapsed < total {
            steps.push(Step::Bytes(b": keep-alive\n\n".to_vec()));
            steps.push(Step::Sleep(every));
            elapsed += every;
        }
        Self::steps(steps)
    }

    /// A text answer whose body is at least `bytes` long: the opening events, then the same
    /// 1 KiB text delta over and over, then a normal finish — a provider that does not stop
    /// talking (in the request's protocol).
    pub fn oversized_text(bytes: usize) -> Self {
        Self::dynamic(move |request| {
            let chunk = "x".repeat(1000);
            let events = Completion::text(chunk.clone())
                .delta_chars(1000)
                .events(Protocol::of_path(&request.path), &request_model(request));
            let at = events
                .iter()
                .position(|e| e.contains(&chunk))
                .unwrap_or(events.len().saturating_sub(1));
            let delta = events[at].clone().into_bytes();
            let times = bytes.div_ceil(delta.len().max(1));
            let mut steps = vec![sse_head()];
            steps.extend(
                events[..at]
                    .iter()
                    .map(|e| Step::Bytes(e.clone().into_bytes())),
            );
            steps.push(Step::Repeat {
                bytes: delta,
                times,
            });
            steps.extend(
                events[at + 1..]
                    .iter()
                    .map(|e| Step::Bytes(e.clone().into_bytes())),
            );
            Self::steps(steps)
        })
    }

    /// A reply computed from the recorded request when it arrives.
    pub fn dynamic(f: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static) -> Self {
        Self {
            body: Body::Dynamic(Arc::new(f)),
            extra_headers: Vec::new(),
            inserts: Vec::new(),
            generated: false,
        }
    }

    /// A 200 SSE response carrying these payloads, each as its own event.
    pub fn sse_payloads<S: AsRef<str>>(payloads: impl IntoIterator<Item = S>) -> Self {
        let mut steps = vec![sse_head()];
        steps.extend(payloads.into_iter().map(|p| sse_event(p.as_ref())));
        Self::steps(steps)
    }

    /// A 200 SSE response writing these raw byte chunks.
    pub fn sse_bytes(chunks: impl IntoIterator<Item = Vec<u8>>) -> Self {
        let mut steps = vec![sse_head()];
        steps.extend(chunks.into_iter().map(Step::Bytes));
        Self::steps(steps)
    }

    /// A streamed completion (see [`Completion`]), in the protocol of the request it
    /// answers: chat-completion chunks, or a Messages event stream on `…/messages`.
    pub fn completion(completion: Completion) -> Self {
        Self {
            body: Body::Completion(Box::new(completion)),
            extra_headers: Vec::new(),
            inserts: Vec::new(),
            generated: true,
        }
    }

    /// A plain text answer in small deltas.
    pub fn text(text: impl Into<String>) -> Self {
        Self::completion(Completion::text(text))
    }

    /// Thinking-mode reasoning followed by a text answer.
    pub fn reasoning_and_text(reasoning: impl Into<String>, text: impl Into<String>) -> Self {
        Self::completion(Completion::text(text).reasoning(reasoning))
    }

    /// One tool call (finish `tool_calls`).
    pub fn tool_call(id: &str, name: &str, arguments: &str) -> Self {
        Self::tool_calls(vec![ToolCall::new(id, name, arguments)])
    }

    /// Parallel tool calls (finish `tool_calls`).
    pub fn tool_calls(calls: Vec<ToolCall>) -> Self {
        Self::completion(Completion {
            tool_calls: calls,
            ..Completion::default()
        })
    }

    /// Text cut off by the output cap (finish `length`).
    pub fn max_tokens(text: impl Into<String>) -> Self {
        Self::completion(Completion::text(text).finish_reason("length"))
    }

    /// A successful completion without any content: role chunk, `stop` with zero usage,
    /// `[DONE]`.
    pub fn empty_completion() -> Self {
        Self::completion(Completion {
            usage: Some(Usage::new(0, 0)),
            ..Completion::default()
        })
    }

    /// An HTTP error with a raw body (`content-type: application/json`).
    pub fn http_error(status: u16, body: impl Into<String>) -> Self {
        Self::steps(vec![
            Step::Head {
                status,
                headers: vec![("content-type".into(), "application/json".into())],
            },
            Step::Bytes(body.into().into_bytes()),
        ])
    }

    /// An HTTP error with an OpenAI-style body `{"error":{message,type,param,code}}`.
    pub fn error_json(status: u16, message: &str, kind: &str, code: Option<&str>) -> Self {
        let body =
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
        Self::http_error(status, body.to_string())
    }

    /// `429` with `Retry-After: <seconds>`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self::error_json(
            429,
            "Rate limit reached for requests",
            "rate_limit_error",
            Some("rate_limit_exceeded"),
        )
        .with_header("retry-after", &retry_after_secs.to_string())
    }

    /// Headers, then the first (role) chunk, then silence for `pause`, then the rest of a
    /// short text answer.
    pub fn stall(pause: Duration) -> Self {
        Self::text("too late").pause_after_event(1, pause)
    }

    /// Silence for `pause` before even the response head, then a short text answer.
    pub fn stall_before_headers(pause: Duration) -> Self {
        Self::dynamic(move |request| {
            let mut steps = Self::text("too late").resolve_marked(request).0;
            steps.insert(0, Step::Sleep(pause));
            Self::steps(steps)
        })
    }

    /// The events of a short text answer up to and including its first text delta, then
    /// `then(events)` appended: the start of a stream that goes wrong afterwards.
    fn broken_after_first_delta(
        text: &'static str,
        then: impl Fn(Protocol, &[String]) -> Vec<Step> + Send + Sync + 'static,
    ) -> Self {
        Self::dynamic(move |request| {
            let protocol = Protocol::of_path(&request.path);
            let events = Completion::text(text)
                .delta_chars(3)
                .events(protocol, &request_model(request));
            let first_piece: String = text.chars().take(3).collect();
            let quoted = format!("\"{first_piece}\"");
            let first_delta = events.iter().position(|e| e.contains(&quoted)).unwrap_or(0);
            let mut steps = vec![sse_head()];
            steps.extend(
                events[..=first_delta]
                    .iter()
                    .map(|e| Step::Bytes(e.clone().into_bytes())),
            );
            steps.extend(then(protocol, &events[first_delta + 1..]));
            Self::steps(steps)
        })
    }

    fn partial_stream(last: Step) -> Self {
        Self::broken_after_first_delta("Hello", move |protocol, _| {
            // Half of the next text event.
            let half: &[u8] = match protocol {
                Protocol::ChatCompletions => b"data: {\"id\":\"chatcmpl-mock\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo",
                Protocol::Messages => b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"lo",
            };
            vec![Step::Bytes(half.to_vec()), last.clone()]
        })
    }

    /// A stream whose body ends cleanly in the middle of an event, without `[DONE]`.
    pub fn cut_mid_event() -> Self {
        Self::partial_stream(Step::End)
    }

    /// A stream whose connection is dropped in the middle of an event (the chunked body is
    /// left unterminated).
    pub fn reset_mid_event() -> Self {
        Self::partial_stream(Step::Drop)
    }

    /// The opening events and one text delta, then an event whose data is not JSON, then a
    /// normal end.
    pub fn malformed_chunk() -> Self {
        Self::broken_after_first_delta("Hi", |_, rest| {
            let mut steps = vec![sse_event("{\"choices\": [{\"delta\": oops}]}")];
            steps.extend(rest.iter().map(|e| Step::Bytes(e.clone().into_bytes())));
            steps
        })
    }

    /// Answers with the text of the request's last tool result (or `(no tool output)`).
    pub fn echo_tool_output() -> Self {
        Self::dynamic(|request| {
            Reply::text(
                request
                    .last_tool_output()
                    .unwrap_or_else(|| "(no tool output)".to_string()),
            )
        })
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.extra_headers
            .push((name.to_string(), value.to_string()));
        self
    }

    /// Sends nothing for `pause` after the `events`-th body chunk (counted as chat-completion
    /// events: on a Messages stream the first block's opening event is not counted).
    pub fn pause_after_event(mut self, events: usize, pause: Duration) -> Self {
        self.inserts.push((events, Step::Sleep(pause)));
        self
    }

    /// Holds after the `events`-th body chunk until `gate` opens.
    pub fn hold_after_event(mut self, events: usize, gate: &Gate) -> Self {
        self.inserts.push((events, Step::Wait(gate.clone())));
        self
    }

    /// The concrete steps for `request`.
    #[cfg(test)]
    pub(crate) fn resolve(self, request: &RecordedRequest) -> Vec<Step> {
        self.resolve_marked(request).0
    }

    /// The steps, and whether they came from [`Reply::completion`] unaltered.
    pub(crate) fn resolve_marked(self, request: &RecordedRequest) -> (Vec<Step>, bool) {
        let unaltered = self.inserts.is_empty();
        let mut inserts = self.inserts;
        // Insert positions count chat-completion events (the role chunk, then deltas); a
        // Messages stream opens its first content block before the first delta, so a
        // position past the opening event moves one further.
        if matches!(self.body, Body::Completion(_))
            && Protocol::of_path(&request.path) == Protocol::Messages
        {
            for (n, _) in &mut inserts {
                if *n >= 1 {
                    *n += 1;
                }
            }
        }
        let (mut steps, generated) = match self.body {
            Body::Steps(steps) => (steps, self.generated),
            Body::Dynamic(f) => f(request).resolve_marked(request),
            Body::Completion(completion) => {
                let events =
                    completion.events(Protocol::of_path(&request.path), &request_model(request));
                let mut steps = vec![sse_head()];
                steps.extend(events.into_iter().map(|e| Step::Bytes(e.into_bytes())));
                (steps, self.generated)
            }
        };
        let generated = generated && unaltered;
        if let Some(Step::Head { headers, .. }) =
            steps.iter_mut().find(|s| matches!(s, Step::Head { .. }))
        {
            headers.extend(self.extra_headers);
        }
        inserts.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
        for (events, step) in inserts {
            let mut seen = 0;
            let position = steps.iter().position(|s| {
                if matches!(s, Step::Bytes(_)) {
                    seen += 1;
                }
                seen > events
            });
            match position {
                Some(p) => steps.insert(p, step),
                None => steps.push(step),
            }
        }
        (steps, generated)
    }
}

/// The model a request names (a Messages stream reports it back).
fn request_model(request: &RecordedRequest) -> String {
    request
        .json
        .as_ref()
        .and_then(|j| j["model"].as_str())
        .unwrap_or("deepseek-v4-flash")
        .to_string()
}
