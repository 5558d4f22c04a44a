//! A mock model server for tests: OpenAI-compatible chat completions and DeepSeek's
//! Messages API (a [`Reply::completion`] is rendered in the protocol of the request).
//!
//! [`MockServer::start`] binds `127.0.0.1` on an ephemeral port and serves from its own
//! thread and tokio runtime, so it works the same from sync tests, async tests and tests
//! that spawn the `dsh` binary. Every `POST …/chat/completions` (or Anthropic-style
//! `POST …/v1/messages`, or OpenAI Responses `POST …/responses`, both scripted with raw
//! SSE payloads) pops the next scripted
//! [`Reply`] (FIFO; an exhausted script answers 500 `mock server: no scripted reply left`);
//! other requests get 404. Every request is recorded (method, path, headers, body and its
//! parsed JSON) before its reply starts. Each response closes its connection.
//!
//! ```no_run
//! use dsh_test_support::mock_server::{MockServer, Reply};
//! let server = MockServer::start();
//! server.push(Reply::tool_call("call_1", "bash", r#"{"command":"echo hi"}"#));
//! server.push(Reply::echo_tool_output());
//! // … point the adapter at server.url() and run the turn …
//! let requests = server.requests();
//! assert_eq!(requests[0].header("authorization"), Some("Bearer sk-test"));
//! ```

mod completion;
mod reply;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub use completion::{Completion, Protocol, ToolCall, Usage, UsagePlacement};
pub use reply::{Gate, Reply, Step, sse_event, sse_head};

/// One request as received.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// The body parsed as JSON, when it is JSON.
    pub json: Option<Value>,
}

impl RecordedRequest {
    /// The first value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The request's `messages` array as sent (empty when absent).
    pub fn raw_messages(&self) -> &[Value] {
        self.json
            .as_ref()
            .and_then(|j| j.get("messages"))
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// The conversation in chat-completions shape, whatever the protocol: a chat request's
    /// `messages` as sent; a Messages request's `system` as a leading `role: system`
    /// message, `tool_result` blocks as `role: tool` messages (`tool_call_id`, text content),
    /// a user turn's text blocks joined into one string, an assistant turn's text as
    /// `content`, its `tool_use` blocks as `tool_calls` and its thinking as
    /// `reasoning_content`. For assertions about what reached the model; the wire shape
    /// itself is checked by `conformance/wire_check.py`.
    pub fn messages(&self) -> Vec<Value> {
        match self.protocol() {
            Protocol::ChatCompletions => self.raw_messages().to_vec(),
            Protocol::Messages => messages_as_chat(self.json.as_ref()),
        }
    }

    /// The body with its conversation as [`RecordedRequest::messages`] gives it (`system`
    /// folded into `messages`); other fields as sent. `Null` for a body that is not JSON.
    pub fn chat_body(&self) -> Value {
        let Some(json) = &self.json else {
            return Value::Null;
        };
        let mut body = json.clone();
        if let Some(map) = body.as_object_mut() {
            map.remove("system");
            map.insert("messages".into(), Value::Array(self.messages()));
        }
        body
    }

    /// The credential the request carries: `authorization: Bearer <key>` (chat completions)
    /// or `x-api-key: <key>` (Messages).
    pub fn api_key(&self) -> Option<&str> {
        self.header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .or_else(|| self.header("x-api-key"))
    }

    /// The system prompt: the leading `role: system` message (chat completions) or the
    /// `system` field (Messages), as text.
    pub fn system_text(&self) -> String {
        self.messages()
            .first()
            .filter(|m| m["role"] == "system")
            .map(|m| text_of(&m["content"]))
            .unwrap_or_default()
    }

    /// The tool named `name` in chat-completions' `function` shape
    /// (`{name, description, parameters}`; a Messages tool's `input_schema` is its
    /// `parameters`).
    pub fn tool(&self, name: &str) -> Option<Value> {
        let tools = self.json.as_ref()?["tools"].as_array()?;
        tools.iter().find_map(|t| {
            if t["function"]["name"] == name {
                Some(t["function"].clone())
            } else if t["name"] == name {
                let mut f = serde_json::json!({"name": name, "parameters": t["input_schema"]});
                if let Some(d) = t.get("description") {
                    f["description"] = d.clone();
                }
                Some(f)
            } else {
                None
            }
        })
    }

    /// The wire protocol the request speaks (from its path).
    pub fn protocol(&self) -> Protocol {
        Protocol::of_path(&self.path)
    }

    /// The text of the last tool result: the last `role: tool` message (chat completions)
    /// or the last `tool_result` block (Messages; its text blocks joined).
    pub fn last_tool_output(&self) -> Option<String> {
        self.tool_outputs().pop()
    }

    /// The text of every tool result in the request, in order (see
    /// [`RecordedRequest::last_tool_output`]).
    pub fn tool_outputs(&self) -> Vec<String> {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| text_of(&m["content"]))
            .collect()
    }

    /// The names of the tools the request offers (`tools[].function.name` for chat
    /// completions, `tools[].name` for Messages).
    pub fn tool_names(&self) -> Vec<String> {
        self.json
            .as_ref()
            .and_then(|j| j["tools"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|t| t["function"]["name"].as_str().or(t["name"].as_str()))
            .map(str::to_owned)
            .collect()
    }
}

/// A content value as text: a string as is, text blocks joined.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A Messages request body's conversation in chat-completions shape (see
/// [`RecordedRequest::messages`]).
fn messages_as_chat(body: Option<&Value>) -> Vec<Value> {
    use serde_json::json;
    let Some(body) = body else { return Vec::new() };
    let mut out = Vec::new();
    match &body["system"] {
        Value::Null => {}
        system => out.push(json!({"role": "system", "content": text_of(system)})),
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        let role = message["role"].as_str().unwrap_or("");
        let blocks: Vec<Value> = match &message["content"] {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(blocks) => blocks.clone(),
            _ => Vec::new(),
        };
        if role == "assistant" {
            let mut m = json!({"role": "assistant"});
            let text: String = blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect();
            m["content"] = if text.is_empty() {
                Value::Null
            } else {
                Value::String(text)
            };
            let reasoning: String = blocks
                .iter()
                .filter(|b| b["type"] == "thinking")
                .filter_map(|b| b["thinking"].as_str())
                .collect();
            if !reasoning.is_empty() {
                m["reasoning_content"] = Value::String(reasoning);
            }
            let calls: Vec<Value> = blocks
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| {
                    json!({"id": b["id"], "type": "function",
                        "function": {"name": b["name"], "arguments": b["input"].to_string()}})
                })
                .collect();
            if !calls.is_empty() {
                m["tool_calls"] = Value::Array(calls);
            }
            out.push(m);
            continue;
        }
        // A user (or mid-history system) turn: its tool results first, as the chat protocol
        // has them, then its other content.
        let mut tool_images = Vec::new();
        for b in blocks.iter().filter(|b| b["type"] == "tool_result") {
            out.push(json!({"role": "tool", "tool_call_id": b["tool_use_id"], "content": text_of(&b["content"])}));
            tool_images.extend(
                b["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|c| c["type"] == "image")
                    .map(image_as_chat),
            );
        }
        // Chat completions carries a tool's images in a user message after the results.
        if !tool_images.is_empty() {
            out.push(json!({"role": "user", "content": tool_images}));
        }
        let rest: Vec<Value> = blocks
            .iter()
            .filter(|b| b["type"] != "tool_result")
            .map(image_as_chat)
            .collect();
        if rest.is_empty() {
            continue;
        }
        // The Messages serializer merges consecutive user messages into one turn; chat
        // completions keeps them apart. A turn of text blocks is one message per block; a turn
        // with images stays one message with parts, as a chat user message with images is.
        if rest.iter().all(|b| b["type"] == "text") {
            for b in &rest {
                out.push(json!({"role": role, "content": b["text"]}));
            }
        } else {
            out.push(json!({"role": role, "content": Value::Array(rest)}));
        }
    }
    out
}

/// A Messages base64 image block as a chat `image_url` part with a data URL (other blocks
/// unchanged).
fn image_as_chat(block: &Value) -> Value {
    if block["type"] == "image" && block["source"]["type"] == "base64" {
        let url = format!(
            "data:{};base64,{}",
            block["source"]["media_type"].as_str().unwrap_or(""),
            block["source"]["data"].as_str().unwrap_or("")
        );
        return serde_json::json!({"type": "image_url", "image_url": {"url": url}});
    }
    block.clone()
}

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    requests: Vec<RecordedRequest>,
    /// Replies that ended because the client hung up before the script finished.
    early_disconnects: usize,
    /// Replies whose script ran to its end (or failed writing).
    finished: usize,
    /// Canned answer for requests without tools (auxiliary calls).
    aux_text: Option<String>,
    /// Computed answer for requests without tools (wins over `aux_text`).
    aux_responder: Option<Responder>,
    aux_requests: Vec<RecordedRequest>,
    /// Canned answer for compaction summary calls (`x-deepseek-harness-compact: 1`).
    compaction_text: Option<String>,
    compaction_requests: Vec<RecordedRequest>,
    /// Answers chat requests once the script is exhausted.
    responder: Option<Responder>,
}

/// A reply computed from the request (see [`MockServer::respond_with`]).
type Responder = Arc<dyn Fn(&RecordedRequest) -> Reply + Send + Sync>;

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    notify: tokio::sync::Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.lock());
        self.changed.notify_all();
        self.notify.notify_waiters();
    }
}

/// The running server; dropping it stops it (pending replies are abandoned).
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MockServer {
    /// Starts a server with an empty script. Panics if it cannot bind.
    pub fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .unwrap_or_else(|e| panic!("mock server: cannot bind 127.0.0.1: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("mock server: no local address: {e}"));
        let shared = Arc::new(Shared::default());
        let (shutdown, mut stop) = tokio::sync::oneshot::channel::<()>();
        let serving = shared.clone();
        let thread = std::thread::Builder::new()
            .name("mock-llm-server".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap_or_else(|e| panic!("mock server: no runtime: {e}"));
                runtime.block_on(async move {
                    let listener = TcpListener::from_std(listener)
                        .unwrap_or_else(|e| panic!("mock server: cannot listen: {e}"));
                    loop {
                        tokio::select! {
                            _ = &mut stop => break,
                            accepted = listener.accept() => {
                                if let Ok((stream, _)) = accepted {
                                    tokio::spawn(serve(stream, serving.clone()));
                                }
                            }
                        }
                    }
                });
            })
            .unwrap_or_else(|e| panic!("mock server: cannot spawn its thread: {e}"));
        Self {
            addr,
            shared,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    /// Answers requests that carry no `tools` (auxiliary calls such as session titles) with
    /// `text`, without consuming a scripted reply and without listing them in
    /// [`MockServer::requests`] (see [`MockServer::aux_requests`]).
    pub fn answer_untooled(self, text: &str) -> Self {
        let text = text.to_string();
        self.shared.update(move |s| s.aux_text = Some(text));
        self
    }

    /// [`MockServer::answer_untooled`] with a reply computed from the request: for routes
    /// whose protocol is not chat completions (Anthropic Messages, OpenAI Responses), whose
    /// auxiliary calls need an answer in their own framing.
    pub fn answer_untooled_with(
        self,
        f: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let f: Responder = Arc::new(f);
        self.shared.update(move |s| s.aux_responder = Some(f));
        self
    }

    /// Answers compaction summary calls (header `x-deepseek-harness-compact: 1`) with
    /// `text`, without consuming a scripted reply and without listing them in
    /// [`MockServer::requests`] (see [`MockServer::compaction_requests`]).
    pub fn answer_compaction(self, text: &str) -> Self {
        let text = text.to_string();
        self.shared.update(move |s| s.compaction_text = Some(text));
        self
    }

    /// Answers every chat request the script does not cover (its queue is empty) with
    /// `f(request)`: for clients whose requests arrive in no fixed order, such as parallel
    /// subagents, each of which can be answered from its own conversation.
    pub fn respond_with(
        self,
        f: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let f: Responder = Arc::new(f);
        self.shared.update(move |s| s.responder = Some(f));
        self
    }

    /// The summary requests answered by [`MockServer::answer_compaction`].
    pub fn compaction_requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().compaction_requests.clone()
    }

    /// The auxiliary (untooled) requests answered by [`MockServer::answer_untooled`].
    pub fn aux_requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().aux_requests.clone()
    }

    /// Starts a server with these replies queued.
    pub fn with_replies(replies: impl IntoIterator<Item = Reply>) -> Self {
        let server = Self::start();
        server.push_all(replies);
        server
    }

    /// `http://127.0.0.1:<port>` — the base URL to configure (requests go to
    /// `<url>/chat/completions`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a reply for the next unanswered chat-completions request.
    pub fn push(&self, reply: Reply) {
        self.shared.update(|s| s.replies.push_back(reply));
    }

    pub fn push_all(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.update(|s| s.replies.extend(replies));
    }

    /// Replies not yet used.
    pub fn pending_replies(&self) -> usize {
        self.shared.lock().replies.len()
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Replies cut short because the client hung up.
    pub fn early_disconnects(&self) -> usize {
        self.shared.lock().early_disconnects
    }

    /// Blocks until `n` requests arrived; panics after `timeout`.
    pub fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        self.wait_until(timeout, |s| s.requests.len() >= n, "requests");
        self.requests()
    }

    /// Blocks until `n` replies were cut short by the client; panics after `timeout`.
    pub fn wait_for_early_disconnects(&self, n: usize, timeout: Duration) {
        self.wait_until(timeout, |s| s.early_disconnects >= n, "early disconnects");
    }

    /// Async variant of [`MockServer::wait_for_requests`].
    pub async fn requests_eventually(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        self.wait_until_async(timeout, |s| s.requests.len() >= n, "requests")
            .await;
        self.requests()
    }

    /// Async variant of [`MockServer::wait_for_early_disconnects`].
    pub async fn early_disconnects_eventually(&self, n: usize, timeout: Duration) {
        self.wait_until_async(timeout, |s| s.early_disconnects >= n, "early disconnects")
            .await;
    }

    fn wait_until(&self, timeout: Duration, done: impl Fn(&State) -> bool, what: &str) {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        while !done(&state) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!("mock server: timed out after {timeout:?} waiting for {what}");
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    async fn wait_until_async(&self, timeout: Duration, done: impl Fn(&State) -> bool, what: &str) {
        let wait = async {
            loop {
                let notified = self.shared.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if done(&self.shared.lock()) {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(timeout, wait).await.is_err() {
            panic!("mock server: timed out after {timeout:?} waiting for {what}");
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for MockServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

enum Outcome {
    Finished,
    ClientGone,
}

async fn serve(mut stream: TcpStream, shared: Arc<Shared>) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    let path = request.path.trim_end_matches('/');
    let is_chat = request.method == "POST"
        && (path.ends_with("/chat/completions")
            || path.ends_with("/v1/messages")
            || path.ends_with("/responses"));
    let untooled = request
        .json
        .as_ref()
        .is_some_and(|j| j.get("tools").is_none());
    let mut reply = None;
    let compaction = request.header("x-deepseek-harness-compact") == Some("1");
    shared.update(|s| {
        if is_chat
            && compaction
            && let Some(text) = &s.compaction_text
        {
            reply = Some(Reply::text(text.clone()));
            s.compaction_requests.push(request.clone());
            return;
        }
        if is_chat
            && untooled
            && let Some(f) = &s.aux_responder
        {
            reply = Some(f(&request));
            s.aux_requests.push(request.clone());
            return;
        }
        if is_chat
            && untooled
            && let Some(text) = &s.aux_text
        {
            // Auxiliary calls (titles, summaries) are answered without consuming the script.
            reply = Some(Reply::text(text.clone()));
            s.aux_requests.push(request.clone());
            return;
        }
        s.requests.push(request.clone());
        if is_chat {
            reply = s.replies.pop_front();
            if reply.is_none()
                && let Some(f) = &s.responder
            {
                reply = Some(f(&request));
            }
        }
    });
    let reply = match (is_chat, reply) {
        (true, Some(reply)) => reply,
        (true, None) => Reply::error_json(
            500,
            "mock server: no scripted reply left",
            "server_error",
            None,
        ),
        (false, _) => Reply::error_json(
            404,
            "mock server: only POST /chat/completions is served",
            "not_found",
            None,
        ),
    };
    let (steps, generated) = reply.resolve_marked(&request);
    if is_chat && let Some(dir) = std::env::var_os(WIRE_RECORD_ENV) {
        record_wire(std::path::Path::new(&dir), &request, &steps, generated);
    }
    let outcome = play(&mut stream, steps).await;
    shared.update(|s| match outcome {
        Outcome::Finished => s.finished += 1,
        Outcome::ClientGone => s.early_disconnects += 1,
    });
}

/// When set, every model request the mock serves is written to this directory with the
/// reply it got, one JSON file each (`{test, path, request, status, response}`), for
/// `conformance/wire_check.py` to validate against the providers' official SDK types.
pub const WIRE_RECORD_ENV: &str = "DSH_WIRE_RECORD_DIR";

/// Largest response body kept in a wire record (bigger ones are recorded without it).
const WIRE_RESPONSE_LIMIT: usize = 1 << 20;

fn record_wire(dir: &std::path::Path, request: &RecordedRequest, steps: &[Step], generated: bool) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let Some(json) = &request.json else { return };
    let mut status = 200;
    let mut body: Vec<u8> = Vec::new();
    let mut complete = true;
    for step in steps {
        match step {
            Step::Head { status: s, .. } => status = *s,
            Step::Bytes(b) => body.extend_from_slice(b),
            Step::Repeat { bytes, times } => {
                if bytes.len().saturating_mul(*times) > WIRE_RESPONSE_LIMIT {
                    complete = false;
                } else {
                    for _ in 0..*times {
                        body.extend_from_slice(bytes);
                    }
                }
            }
            Step::Drop => complete = false,
            _ => {}
        }
        if body.len() > WIRE_RESPONSE_LIMIT {
            complete = false;
        }
    }
    let test = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let test = test
        .rsplit_once('-')
        .map_or(test.clone(), |(name, _)| name.to_string());
    let record = serde_json::json!({
        "test": test,
        "path": request.path,
        "request": json,
        "status": status,
        "generated": generated,
        "response": complete.then(|| String::from_utf8_lossy(&body).into_owned()),
    });
    let _ = std::fs::create_dir_all(dir);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = dir.join(format!("{}-{}-{n}.json", test, std::process::id()));
    let _ = std::fs::write(file, record.to_string());
}

async fn play(stream: &mut TcpStream, steps: Vec<Step>) -> Outcome {
    for step in steps {
        let written = match step {
            Step::Head { status, headers } => {
                let mut head = format!("HTTP/1.1 {status} {}\r\n", reason_phrase(status));
                for (name, value) in headers {
                    head.push_str(&format!("{name}: {value}\r\n"));
                }
                head.push_str("transfer-encoding: chunked\r\nconnection: close\r\n\r\n");
                stream.write_all(head.as_bytes()).await
            }
            Step::Bytes(bytes) if bytes.is_empty() => Ok(()),
            Step::Bytes(bytes) => write_chunk(stream, &bytes).await,
            Step::Repeat { bytes, .. } if bytes.is_empty() => Ok(()),
            Step::Repeat { bytes, times } => {
                let mut written = Ok(());
                for _ in 0..times {
                    written = write_chunk(stream, &bytes).await;
                    if written.is_err() {
                        break;
                    }
                }
                written
            }
            Step::Sleep(pause) => {
                tokio::select! {
                    () = tokio::time::sleep(pause) => Ok(()),
                    () = client_gone(stream) => return Outcome::ClientGone,
                }
            }
            Step::Wait(gate) => {
                tokio::select! {
                    () = gate.wait() => Ok(()),
                    () = client_gone(stream) => return Outcome::ClientGone,
                }
            }
            Step::End => break,
            Step::Drop => return Outcome::Finished,
        };
        if written.is_err() {
            return Outcome::ClientGone;
        }
    }
    if stream.write_all(b"0\r\n\r\n").await.is_err() {
        return Outcome::ClientGone;
    }
    let _ = stream.shutdown().await;
    Outcome::Finished
}

/// Writes one HTTP chunk of a chunked body.
async fn write_chunk(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    let mut chunk = format!("{:x}\r\n", bytes.len()).into_bytes();
    chunk.extend_from_slice(bytes);
    chunk.extend_from_slice(b"\r\n");
    stream.write_all(&chunk).await
}

/// Resolves once the client closed its side (or the socket failed).
async fn client_gone(stream: &mut TcpStream) {
    let mut buf = [0u8; 512];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<RecordedRequest> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(p) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if data.len() > 1 << 20 {
            return None;
        }
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_string();
    let path = request_line.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = data[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&buf[..n]);
    }
    body.truncate(length);
    let body = String::from_utf8_lossy(&body).into_owned();
    let json = serde_json::from_str(&body).ok();
    Some(RecordedRequest {
        method,
        path,
        headers,
        body,
        json,
    })
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests;
