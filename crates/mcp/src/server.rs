//! Supervises the connection to one server. It holds each client generation, keeps the tool
//! registry matched to the current one, and reconnects after a loss, waiting twice as long
//! after each failure (from `initialDelayMs`, capped at `maxDelayMs`).
//!
//! Attempts are counted per outage: after `maxAttempts` failures in a row the server's tools
//! are unregistered and the supervisor gives up until its owner (row or session) is
//! unloaded. A connection that lasted at least `maxDelayMs` resets the count, so a later
//! loss gets the full number of attempts, while a server that keeps crashing at once still
//! runs out.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use dsh_kernel::{Context, EffectHandle, ScopeId};
use dsh_process::ProcessGroup;
use dsh_tools::ToolRegistry;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{ServerConfig, StartupFailure};
use crate::tools::{Link, McpTool, ToolDef, fetch_tools};
use crate::transport::{Generation, open};

/// Upstream inherits the MCP SDK's 60 s default for `initialize` and each `tools/list` page.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a server stands, for callers that report or wait on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerState {
    /// The first attempt is running.
    Starting,
    /// Connected; `tools` are registered under these public names (sorted).
    Connected { tools: Vec<String>, connects: u64 },
    /// Between attempts (the last good generation stays registered).
    Reconnecting { attempt: u64 },
    /// Gave up, or lost with reconnect disabled; the message says which.
    Stopped { reason: String },
}

/// Connecting failed in a way the owner must see.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConnectError {
    /// Another live server in the same scope already uses this `serverName`.
    #[error(
        "mcp-client: another mcp-client row already uses serverName \"{0}\"; give each row its own serverName"
    )]
    DuplicateName(String),
    /// `failOnStartupError` and the first attempt failed.
    #[error("{label}: initial connection or tool synchronization failed: {cause}")]
    Startup { label: String, cause: String },
    /// The owner has no tool registry, or is already unloaded, or the runtime is missing.
    #[error("{0}")]
    Unavailable(String),
}

/// A connected (or connecting) server. Dropping the handle does not disconnect: the owner's
/// unload does.
#[derive(Clone)]
pub struct ServerHandle {
    shared: Arc<Shared>,
}

impl ServerHandle {
    pub fn server_name(&self) -> &str {
        &self.shared.config.server_name
    }

    /// The current state.
    pub fn state(&self) -> ServerState {
        self.shared.state.borrow().clone()
    }

    /// Waits until `predicate` holds for the state (or the supervisor is gone).
    pub async fn wait_for(&self, predicate: impl Fn(&ServerState) -> bool) -> ServerState {
        let mut rx = self.shared.state.subscribe();
        loop {
            if predicate(&rx.borrow_and_update()) {
                return rx.borrow().clone();
            }
            if rx.changed().await.is_err() {
                return rx.borrow().clone();
            }
        }
    }

    /// The state, and each change from now on.
    pub fn subscribe(&self) -> watch::Receiver<ServerState> {
        self.shared.state.subscribe()
    }

    /// The pid of the live stdio server process, if any.
    pub fn process_id(&self) -> Option<u32> {
        *self.shared.pid.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The first attempt's error when it failed and the failure was contained.
    pub fn startup_error(&self) -> Option<String> {
        self.shared
            .startup_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

struct Shared {
    config: ServerConfig,
    label: String,
    request_timeout: Duration,
    owner: Context,
    registry: Arc<ToolRegistry>,
    link: Arc<Link>,
    /// Live tool registrations of the current generation.
    registered: Mutex<Vec<EffectHandle>>,
    process: Mutex<Option<ProcessGroup>>,
    pid: Mutex<Option<u32>>,
    state: watch::Sender<ServerState>,
    startup_error: Mutex<Option<String>>,
    /// What the server told its clients in `initialize` (`instructions`), bounded.
    instructions: Mutex<Option<String>>,
    /// Whether the server's resources and prompts were offered (once, at its first connect).
    resources_added: std::sync::atomic::AtomicBool,
    stop: CancellationToken,
}

/// Where server instructions sit in the system prompt: after the built-in tool guidance.
const MCP_INSTRUCTIONS_ORDER: f64 = 150.0;

/// The most of one server's instructions that goes into the system prompt.
const MAX_INSTRUCTION_BYTES: usize = 8 * 1024;

/// `text` cut to at most `max` bytes on a character boundary, saying that it was cut.
fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[instructions cut at {max} bytes]", &text[..end])
}

impl Shared {
    fn set_state(&self, s: ServerState) {
        self.state.send_replace(s);
    }

    fn unregister(&self) {
        let old = std::mem::take(&mut *self.registered.lock().unwrap_or_else(|p| p.into_inner()));
        for handle in old {
            handle.dispose();
        }
    }

    /// Ends the live generation's process (SIGTERM, SIGKILL after a grace period).
    fn end_process(&self) {
        drop(
            self.process
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
        *self.pid.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Swaps the registered generation for `defs`: all or nothing. A registration conflict
    /// (a foreign tool squatting on this server's names) leaves no tool from this server.
    fn swap(&self, defs: Vec<ToolDef>) -> Result<Vec<String>, String> {
        self.unregister();
        let mut handles = Vec::with_capacity(defs.len());
        let mut names = Vec::with_capacity(defs.len());
        for def in defs {
            names.push(def.public_name.clone());
            let tool = McpTool::new(def, self.link.clone(), self.config.tool_call_timeout);
            match self.registry.register(&self.owner, Arc::new(tool)) {
                Ok(h) => handles.push(h),
                Err(e) => {
                    for h in handles {
                        h.dispose();
                    }
                    let message = format!(
                        "{}: tool registration failed, no tools registered: {e}",
                        self.label
                    );
                    tracing::error!("{message}");
                    return Err(message);
                }
            }
        }
        *self.registered.lock().unwrap_or_else(|p| p.into_inner()) = handles;
        names.sort();
        Ok(names)
    }
}

/// `serverName`s in use, per tool registry and scope (tests run several trees in one
/// process; sessions may each connect a server of the same name).
type NameKey = (usize, Option<ScopeId>, String);
type Reservations = Mutex<Vec<(Weak<ToolRegistry>, NameKey)>>;
fn reservations() -> &'static Reservations {
    static NAMES: OnceLock<Reservations> = OnceLock::new();
    NAMES.get_or_init(|| Mutex::new(Vec::new()))
}

fn reserve(
    registry: &Arc<ToolRegistry>,
    owner: &Context,
    name: &str,
) -> Result<NameKey, ConnectError> {
    let key: NameKey = (
        Arc::as_ptr(registry) as usize,
        owner.scope().map(|s| s.id()),
        name.to_string(),
    );
    let chain: HashSet<Option<ScopeId>> = std::iter::once(None)
        .chain(
            owner
                .scope()
                .into_iter()
                .flat_map(|s| s.chain().iter().copied().map(Some)),
        )
        .collect();
    let mut names = reservations().lock().unwrap_or_else(|p| p.into_inner());
    names.retain(|(w, _)| w.strong_count() > 0);
    // A name in use in this scope, an enclosing one, or (for a global row) any session.
    let clash = names.iter().any(|(_, (reg, scope, n))| {
        *reg == key.0 && n == name && (chain.contains(scope) || key.1.is_none())
    });
    if clash {
        return Err(ConnectError::DuplicateName(name.to_string()));
    }
    names.push((Arc::downgrade(registry), key.clone()));
    Ok(key)
}

fn release(key: &NameKey) {
    let mut names = reservations().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = names.iter().position(|(_, k)| k == key) {
        names.remove(i);
    }
}

/// Starts the supervisor of `config` for `owner`: its tools register in `owner`'s scope and
/// everything (tools, connection, server process, name) is undone when `owner` unloads.
/// Resolves once the first attempt settled; its failure is an error only with
/// `failOnStartupError` (the supervisor then stops too).
pub async fn connect(
    owner: &Context,
    config: ServerConfig,
    request_timeout: Duration,
) -> Result<ServerHandle, ConnectError> {
    let (handle, ready) = start(owner, config, request_timeout)?;
    let outcome = ready
        .await
        .unwrap_or_else(|_| Err("the MCP supervisor stopped".into()));
    settle(handle, outcome)
}

/// [`connect`] for a synchronous caller (a plugin's `apply`): blocks this thread while the
/// supervisor works on the MCP runtime.
pub fn connect_blocking(
    owner: &Context,
    config: ServerConfig,
    request_timeout: Duration,
) -> Result<ServerHandle, ConnectError> {
    let (handle, ready) = start(owner, config, request_timeout)?;
    let outcome = futures::executor::block_on(ready)
        .unwrap_or_else(|_| Err("the MCP supervisor stopped".into()));
    settle(handle, outcome)
}

fn settle(handle: ServerHandle, outcome: Result<(), String>) -> Result<ServerHandle, ConnectError> {
    match outcome {
        Ok(()) => Ok(handle),
        Err(cause) => {
            *handle
                .shared
                .startup_error
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(cause.clone());
            match handle.shared.config.startup_failure {
                StartupFailure::Contain => Ok(handle),
                StartupFailure::Fail => {
                    handle.shared.stop.cancel();
                    Err(ConnectError::Startup {
                        label: handle.shared.label.clone(),
                        cause,
                    })
                }
            }
        }
    }
}

type Ready = oneshot::Receiver<Result<(), String>>;

fn start(
    owner: &Context,
    config: ServerConfig,
    request_timeout: Duration,
) -> Result<(ServerHandle, Ready), ConnectError> {
    let registry = owner
        .require::<ToolRegistry>()
        .map_err(|e| ConnectError::Unavailable(e.to_string()))?;
    let runtime = crate::runtime::handle().map_err(ConnectError::Unavailable)?;
    let key = reserve(&registry, owner, &config.server_name)?;
    let shared = Arc::new(Shared {
        label: config.label(),
        config,
        request_timeout,
        owner: owner.clone(),
        registry,
        link: Arc::new(Link::default()),
        registered: Mutex::new(Vec::new()),
        process: Mutex::new(None),
        pid: Mutex::new(None),
        state: watch::channel(ServerState::Starting).0,
        startup_error: Mutex::new(None),
        instructions: Mutex::new(None),
        resources_added: std::sync::atomic::AtomicBool::new(false),
        stop: CancellationToken::new(),
    });
    // The server's instructions (once it has connected) are a section of the prompt of
    // every agent this row serves.
    if let Some(prompt) = owner.get::<dsh_prompt::SystemPrompt>() {
        let weak = Arc::downgrade(&shared);
        let name = shared.config.server_name.clone();
        let section = prompt.section(
            owner,
            &format!("mcp:{name}"),
            MCP_INSTRUCTIONS_ORDER,
            Arc::new(move |_| {
                let Some(shared) = weak.upgrade() else {
                    return String::new();
                };
                let text = shared
                    .instructions
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                match text {
                    Some(text) => format!(
                        "Instructions from the MCP server \"{name}\" (its tools are named mcp__{name}__*):\n{text}"
                    ),
                    None => String::new(),
                }
            }),
        );
        if let Err(e) = section {
            release(&key);
            return Err(ConnectError::Unavailable(e.to_string()));
        }
    }
    // Unloading the owner stops the supervisor, kills the server and frees the name; the
    // tool registrations are effects of the owner and unwind with it.
    let weak = Arc::downgrade(&shared);
    let stop = shared.stop.clone();
    let undo = move || {
        stop.cancel();
        release(&key);
        if let Some(shared) = weak.upgrade() {
            shared.link.set(None);
            shared.end_process();
            shared.unregister();
        }
    };
    if owner.effect("mcp-client.connection", undo).is_err() {
        return Err(ConnectError::Unavailable(
            "the owner of this MCP server is already unloaded".into(),
        ));
    }
    let (tx, rx) = oneshot::channel();
    runtime.spawn(supervise(shared.clone(), tx));
    Ok((ServerHandle { shared }, rx))
}

/// What ended a connected generation.
enum Ended {
    Lost,
    Stopped,
}

async fn supervise(shared: Arc<Shared>, ready: oneshot::Sender<Result<(), String>>) {
    let mut ready = Some(ready);
    let policy = shared.config.reconnect;
    let mut failed_attempts: u64 = 0;
    let mut connects: u64 = 0;
    loop {
        let attempt = tokio::select! {
            a = attempt(&shared) => a,
            _ = shared.stop.cancelled() => return,
        };
        let mut connected_at = None;
        match attempt {
            Ok((generation, tools)) => {
                connects += 1;
                if failed_attempts > 0 {
                    tracing::info!(
                        "{}: reconnected and re-synced tools (attempt {failed_attempts}/{})",
                        shared.label,
                        policy.max_attempts
                    );
                }
                shared.set_state(ServerState::Connected { tools, connects });
                if let Some(r) = ready.take() {
                    let _ = r.send(Ok(()));
                }
                connected_at = Some(Instant::now());
                match serve(&shared, generation, connects).await {
                    Ended::Stopped => return,
                    Ended::Lost => {}
                }
            }
            Err(e) => {
                if ready.is_some() {
                    tracing::error!("{}: connection attempt failed: {e}", shared.label);
                } else {
                    tracing::warn!("{}: connection attempt failed: {e}", shared.label);
                }
                if let Some(r) = ready.take() {
                    let _ = r.send(Err(e));
                }
            }
        }
        if shared.stop.is_cancelled() {
            return;
        }
        let lost_established = connected_at.is_some();
        if !policy.enabled {
            let reason = if lost_established {
                "the connection dropped and reconnect is off: its tools fail until the row is reloaded or dsh restarts"
            } else {
                "the first connection failed and reconnect is off, so no tools were registered; reload the row or restart dsh to try again"
            };
            tracing::error!("{}: {reason}", shared.label);
            shared.set_state(ServerState::Stopped {
                reason: reason.into(),
            });
            return;
        }
        if connected_at.is_some_and(|t: Instant| t.elapsed() >= policy.max_delay) {
            failed_attempts = 0;
        }
        failed_attempts += 1;
        if failed_attempts > policy.max_attempts {
            shared.unregister();
            let reason = format!(
                "giving up after {} consecutive failed reconnect attempts — tools unregistered; reload the row or restart dsh to reconnect",
                policy.max_attempts
            );
            tracing::error!("{}: {reason}", shared.label);
            shared.set_state(ServerState::Stopped { reason });
            return;
        }
        let delay = policy.delay(failed_attempts);
        let action = if lost_established {
            "connection lost; reconnecting"
        } else {
            "connection failed; retrying"
        };
        tracing::warn!(
            "{}: {action} in {}ms (attempt {failed_attempts}/{})",
            shared.label,
            delay.as_millis(),
            policy.max_attempts
        );
        shared.set_state(ServerState::Reconnecting {
            attempt: failed_attempts,
        });
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shared.stop.cancelled() => return,
        }
    }
}

/// One attempt: a fresh generation, then the initial tool sync. Never leaves a process
/// behind on failure.
async fn attempt(shared: &Arc<Shared>) -> Result<(Generation, Vec<String>), String> {
    let generation = open(&shared.config, shared.request_timeout, shared.link.clone()).await?;
    let peer = generation.service.peer().clone();
    let defs = fetch_tools(&peer, &shared.config.server_name, shared.request_timeout).await?;
    if shared.stop.is_cancelled() {
        return Err("stopped".into());
    }
    let instructions = peer
        .peer_info()
        .and_then(|info| info.instructions.clone())
        .map(|text| text.trim().to_string())
        .filter(|text| !text.is_empty())
        .map(|text| bounded(&text, MAX_INSTRUCTION_BYTES));
    *shared
        .instructions
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = instructions;
    let offers_resources = peer
        .peer_info()
        .is_some_and(|info| info.capabilities.resources.is_some());
    let offers_prompts = peer
        .peer_info()
        .is_some_and(|info| info.capabilities.prompts.is_some());
    let names = shared.swap(defs)?;
    shared.link.set(Some(peer));
    // Resources and prompts are offered from the first connection on.
    let first = !shared
        .resources_added
        .swap(true, std::sync::atomic::Ordering::AcqRel);
    if first && offers_prompts {
        crate::prompts::register(
            &shared.owner,
            &shared.config.server_name,
            &shared.label,
            shared.link.clone(),
            shared.request_timeout,
        )
        .await;
    }
    if first
        && offers_resources
        && let Some(resources) = shared.owner.get::<crate::resources::McpResources>()
        && let Err(e) = resources.add(
            &shared.owner,
            &shared.config.server_name,
            shared.link.clone(),
            shared.request_timeout,
        )
    {
        tracing::warn!("{}: its resources are not offered: {e}", shared.label);
    }
    *shared.pid.lock().unwrap_or_else(|p| p.into_inner()) = generation.pid;
    Ok((generation, names))
}

/// Serves a connected generation until it closes or the owner stops it; re-syncs the tool
/// list whenever the server says it changed (a failed re-sync keeps the last good list).
async fn serve(shared: &Arc<Shared>, mut generation: Generation, connects: u64) -> Ended {
    *shared.process.lock().unwrap_or_else(|p| p.into_inner()) = generation.process.take();
    let peer = generation.service.peer().clone();
    let closed = generation.service.cancellation_token();
    // Resolves when the transport closed (the server exited or hung up).
    let mut waiting = Box::pin(generation.service.waiting());
    let ended = loop {
        tokio::select! {
            _ = shared.stop.cancelled() => break Ended::Stopped,
            _ = &mut waiting => break Ended::Lost,
            _ = shared.link.lost.notified() => {
                tracing::warn!(
                    "{}: a call found the connection closed (the server restarted or dropped the session); reconnecting",
                    shared.label
                );
                break Ended::Lost;
            }
            changed = generation.list_changed.recv() => {
                if changed.is_none() {
                    continue;
                }
                tracing::info!("{}: tool list changed, re-syncing", shared.label);
                match fetch_tools(&peer, &shared.config.server_name, shared.request_timeout).await {
                    Ok(defs) => {
                        let tools = shared.swap(defs).unwrap_or_default();
                        shared.set_state(ServerState::Connected { tools, connects });
                    }
                    Err(e) => tracing::error!("{}: tool re-sync failed: {e}", shared.label),
                }
            }
        }
    };
    closed.cancel();
    shared.link.set(None);
    shared.end_process();
    ended
}
