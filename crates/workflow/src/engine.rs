//! The engine service (`@deepseek-ai/dsh-workflow-worker-thread`): validates a start
//! request, runs the script on its own thread and serves its `agent()` calls as one-shot
//! children of the calling agent through the delegation service, at most
//! `max_concurrent_agents` at a time, all sharing the run's cancellation.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_agent::{AgentOptions, AgentRef};
use dsh_kernel::{BoxError, BoxFuture, HarnessError};
use dsh_llm::ContentBlock;
use dsh_subagent::{StartRequest, StopReason, Subagents, text_of};
use futures::FutureExt;
use futures::future::Shared;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::events::{Narrator, WorkflowRunInfo};
use crate::js::{AgentCall, AgentReply, ScriptEnd, ScriptInit, ToEngine, ToHost, run_script};
use crate::meta::{Meta, declares_meta_statement, validate_meta};

/// The engine's settings (the row's config, resolved).
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The subagent provider children start on unless a request names another.
    pub provider: String,
    /// How many children of one run may be live at once.
    pub max_concurrent_agents: usize,
    /// The ceiling of children per run (a request may ask for less).
    pub max_total_agents: u64,
    /// The most items one `parallel()` / `pipeline()` call takes.
    pub max_items_per_call: usize,
    /// The longest one synchronous slice of script may run.
    pub sync_timeout: Duration,
    /// How long a cancelled run waits for its children before it settles anyway.
    pub dispose_grace: Duration,
    /// The script heap limit.
    pub memory_bytes: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            provider: "spawn".into(),
            max_concurrent_agents: default_concurrency(),
            max_total_agents: 1000,
            max_items_per_call: 4096,
            sync_timeout: Duration::from_millis(5000),
            dispose_grace: Duration::from_millis(5000),
            memory_bytes: 256 * 1024 * 1024,
        }
    }
}

/// `maxConcurrentAgents: 0`: `min(16, max(1, cpus - 2))`.
pub fn default_concurrency() -> usize {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    cpus.saturating_sub(2).clamp(1, 16)
}

/// `WorkflowError` with one of upstream's codes.
pub fn workflow_error(code: &'static str, message: impl Into<String>) -> BoxError {
    Box::new(HarnessError::new("WorkflowError", code, message))
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStop {
    Completed,
    Cancelled,
    Error,
}

impl RunStop {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStop::Completed => "completed",
            RunStop::Cancelled => "cancelled",
            RunStop::Error => "error",
        }
    }
}

/// The settled outcome of a run (it never fails: every failure is a variant).
#[derive(Clone, Debug, PartialEq)]
pub struct WorkflowResult {
    /// The script's return value (`null` for `undefined` and for failed runs).
    pub value: Value,
    pub stop_reason: RunStop,
    pub error: Option<String>,
    pub agents_started: u64,
}

/// One child as the run reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentStartInfo {
    pub seq: u64,
    pub label: String,
    pub phase: Option<String>,
    pub child_id: String,
}

/// How one child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentOutcome {
    Completed,
    Failed,
    Cancelled,
}

impl AgentOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentOutcome::Completed => "completed",
            AgentOutcome::Failed => "failed",
            AgentOutcome::Cancelled => "cancelled",
        }
    }
}

/// Narration of a run (upstream's `workflow/*` events). Called from the host task.
pub trait WorkflowObserver: Send + Sync {
    /// The run passed validation and is about to execute.
    fn run_start(&self, _run_id: &str, _meta: &Meta) {}
    fn phase(&self, _title: &str) {}
    fn log(&self, _message: &str) {}
    fn agent_start(&self, _info: &AgentStartInfo) {}
    fn agent_end(&self, _seq: u64, _outcome: AgentOutcome) {}
}

/// A request to run one script.
pub struct StartSpec {
    pub script: String,
    pub meta: Value,
    pub args: Option<Value>,
    /// Overrides the engine's provider.
    pub subagent_provider: Option<String>,
    /// A per-run cap below the engine's ceiling.
    pub max_total_agents: Option<u64>,
    pub parent: AgentRef,
    pub observer: Option<Arc<dyn WorkflowObserver>>,
}

/// The first cancellation of a run, shared by the run handle, the host task and every
/// child.
struct Cancel {
    reason: Mutex<Option<String>>,
    abort: Arc<AtomicBool>,
    token: CancellationToken,
    to_engine: Mutex<std::sync::mpsc::Sender<ToEngine>>,
}

impl Cancel {
    fn cancel(&self, reason: &str) -> bool {
        {
            let mut r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
            if r.is_some() {
                return false;
            }
            *r = Some(reason.to_string());
        }
        self.abort.store(true, Ordering::SeqCst);
        let _ = self
            .to_engine
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(ToEngine::Abort);
        self.token.cancel();
        true
    }

    fn reason(&self) -> Option<String> {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// One started run.
pub struct WorkflowRun {
    pub id: String,
    pub meta: Meta,
    result: Shared<BoxFuture<'static, WorkflowResult>>,
    cancel: Arc<Cancel>,
}

impl WorkflowRun {
    /// The run's outcome once it settled and its children are gone.
    pub async fn result(&self) -> WorkflowResult {
        self.result.clone().await
    }

    /// Cancels the run (the first reason wins): the script stops and every child is
    /// cancelled.
    pub fn cancel(&self, reason: &str) {
        self.cancel.cancel(reason);
    }

    /// Ends the run if it still runs and waits until it settled.
    pub async fn dispose(&self) {
        if self.result.peek().is_none() {
            self.cancel.cancel("workflow run disposed");
        }
        let _ = self.result.clone().await;
    }
}

/// The engine service.
pub struct WorkflowEngine {
    subagents: Arc<Subagents>,
    config: EngineConfig,
}

impl WorkflowEngine {
    pub fn new(subagents: Arc<Subagents>, config: EngineConfig) -> Arc<Self> {
        Arc::new(Self { subagents, config })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn subagents(&self) -> &Arc<Subagents> {
        &self.subagents
    }

    /// Validates `spec` (meta, script syntax, provider, cap) and starts the run. Errors are
    /// `WorkflowError`s; once this returns, the run's result never fails.
    pub async fn start(&self, spec: StartSpec) -> Result<WorkflowRun, BoxError> {
        let meta = validate_meta(&spec.meta).map_err(|m| workflow_error("META_INVALID", m))?;
        if declares_meta_statement(&spec.script) {
            return Err(workflow_error(
                "SCRIPT_PARSE",
                "the script must not declare its meta: pass it in the `meta` argument and delete the `export const meta = {...}` statement from the script",
            ));
        }
        let provider = spec
            .subagent_provider
            .clone()
            .unwrap_or_else(|| self.config.provider.clone());
        let max_total = match spec.max_total_agents {
            None => self.config.max_total_agents,
            Some(0) => {
                return Err(workflow_error(
                    "INVALID_ARGUMENT",
                    "workflow maxTotalAgents must be a positive safe integer",
                ));
            }
            Some(n) if n > self.config.max_total_agents => {
                return Err(workflow_error(
                    "INVALID_ARGUMENT",
                    format!(
                        "workflow maxTotalAgents {n} exceeds the engine ceiling {}",
                        self.config.max_total_agents
                    ),
                ));
            }
            Some(n) => n,
        };

        let (to_host_tx, to_host_rx) = tokio::sync::mpsc::unbounded_channel::<ToHost>();
        let (to_engine_tx, to_engine_rx) = std::sync::mpsc::channel::<ToEngine>();
        let (parsed_tx, parsed_rx) = tokio::sync::oneshot::channel();
        let (end_tx, end_rx) = tokio::sync::oneshot::channel::<ScriptEnd>();
        let abort = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicU64::new(0));
        let init = ScriptInit {
            body: spec.script.clone(),
            args: spec.args.clone(),
            max_items: self.config.max_items_per_call,
            max_total,
            sync_timeout: self.config.sync_timeout,
            memory_bytes: self.config.memory_bytes,
        };
        {
            let (abort, started) = (abort.clone(), started.clone());
            std::thread::Builder::new()
                .name("dsh-workflow".into())
                .stack_size(16 * 1024 * 1024)
                .spawn(move || {
                    let end = run_script(init, to_host_tx, to_engine_rx, abort, started, parsed_tx);
                    let _ = end_tx.send(end);
                })
                .map_err(|e| {
                    workflow_error(
                        "SCRIPT_PARSE",
                        format!("workflow script thread could not start: {e}"),
                    )
                })?;
        }
        match parsed_rx.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(workflow_error(
                    "SCRIPT_PARSE",
                    format!("workflow script does not parse: {e}"),
                ));
            }
            Err(_) => {
                return Err(workflow_error(
                    "SCRIPT_PARSE",
                    "workflow script does not parse: the script thread ended",
                ));
            }
        }
        if self.subagents.provider(&provider).is_none() {
            let _ = to_engine_tx.send(ToEngine::Abort);
            return Err(workflow_error(
                "AGENT_START",
                format!("no subagent provider registered for \"{provider}\""),
            ));
        }

        let id = uuid::Uuid::new_v4().to_string();
        let cancel = Arc::new(Cancel {
            reason: Mutex::new(None),
            abort,
            token: CancellationToken::new(),
            to_engine: Mutex::new(to_engine_tx.clone()),
        });
        let narrator = Arc::new(Narrator {
            ctx: spec.parent.ctx().clone(),
            info: WorkflowRunInfo {
                run_id: id.clone(),
                meta: meta.clone(),
            },
            inner: spec.observer,
        });
        narrator.run_start(&id, &meta);
        let host = Host {
            subagents: self.subagents.clone(),
            provider,
            parent: spec.parent,
            observer: Some(narrator.clone()),
            narrator,
            slots: Arc::new(Semaphore::new(self.config.max_concurrent_agents.max(1))),
            cancel: cancel.clone(),
            to_engine: to_engine_tx.clone(),
            dispose_grace: self.config.dispose_grace,
            open: Arc::new(Mutex::new(Vec::new())),
        };
        let _ = to_engine_tx.send(ToEngine::Go);
        let driven = tokio::spawn(host.drive(to_host_rx, end_rx, started));
        let result: BoxFuture<'static, WorkflowResult> = Box::pin(async move {
            driven.await.unwrap_or_else(|e| WorkflowResult {
                value: Value::Null,
                stop_reason: RunStop::Error,
                error: Some(format!("workflow host task failed: {e}")),
                agents_started: 0,
            })
        });
        Ok(WorkflowRun {
            id,
            meta,
            result: result.shared(),
            cancel,
        })
    }
}

/// The host side of one run.
struct Host {
    subagents: Arc<Subagents>,
    provider: String,
    parent: AgentRef,
    observer: Option<Arc<dyn WorkflowObserver>>,
    narrator: Arc<Narrator>,
    slots: Arc<Semaphore>,
    cancel: Arc<Cancel>,
    to_engine: std::sync::mpsc::Sender<ToEngine>,
    dispose_grace: Duration,
    /// Children whose start was reported and whose end was not yet.
    open: Arc<Mutex<Vec<u64>>>,
}

impl Host {
    async fn drive(
        self,
        mut calls: tokio::sync::mpsc::UnboundedReceiver<ToHost>,
        mut end: tokio::sync::oneshot::Receiver<ScriptEnd>,
        started: Arc<AtomicU64>,
    ) -> WorkflowResult {
        let this = Arc::new(self);
        let mut children = tokio::task::JoinSet::new();
        let mut open = true;
        let script_end = loop {
            tokio::select! {
                biased;
                call = calls.recv(), if open => match call {
                    Some(ToHost::Agent(call)) => {
                        let this = this.clone();
                        children.spawn(async move { this.serve(call).await });
                    }
                    Some(ToHost::Phase(t)) => {
                        if let Some(o) = &this.observer { o.phase(&t) }
                    }
                    Some(ToHost::Log(m)) => {
                        if let Some(o) = &this.observer { o.log(&m) }
                    }
                    None => open = false,
                },
                e = &mut end => break e.unwrap_or(ScriptEnd::Failed("the workflow script thread ended without a result".into())),
                Some(_) = children.join_next(), if !children.is_empty() => {}
            }
        };
        // Drain narration posted just before the end.
        while let Ok(call) = calls.try_recv() {
            match call {
                ToHost::Phase(t) => {
                    if let Some(o) = &this.observer {
                        o.phase(&t)
                    }
                }
                ToHost::Log(m) => {
                    if let Some(o) = &this.observer {
                        o.log(&m)
                    }
                }
                ToHost::Agent(_) => {}
            }
        }
        let reason = this.cancel.reason();
        // The script is over: children it left running are cancelled with the run.
        this.cancel.abort.store(true, Ordering::SeqCst);
        this.cancel.token.cancel();
        let drained = tokio::time::timeout(this.dispose_grace, async {
            while children.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            // Stragglers keep their tasks, which dispose them once they stop; their late ends
            // are not reported (the ledger is emptied here).
            children.detach_all();
            let stranded: Vec<u64> =
                std::mem::take(&mut *this.open.lock().unwrap_or_else(|p| p.into_inner()));
            if let Some(o) = &this.observer {
                for seq in stranded {
                    o.agent_end(seq, AgentOutcome::Cancelled);
                }
            }
        }
        let agents_started = started.load(Ordering::SeqCst);
        let (value, stop_reason, error) = match (reason, script_end) {
            (Some(r), _) => (
                Value::Null,
                RunStop::Cancelled,
                Some(format!("workflow run cancelled: {r}")),
            ),
            (None, ScriptEnd::Completed(v)) => (v, RunStop::Completed, None),
            (None, ScriptEnd::Failed(e)) => (Value::Null, RunStop::Error, Some(e)),
            (None, ScriptEnd::Aborted) => (
                Value::Null,
                RunStop::Cancelled,
                Some("workflow run cancelled".into()),
            ),
        };
        this.narrator
            .end(stop_reason, error.clone(), agents_started);
        WorkflowResult {
            value,
            stop_reason,
            error,
            agents_started,
        }
    }

    fn reply(&self, seq: u64, reply: AgentReply) {
        let _ = self.to_engine.send(ToEngine::Settle { seq, reply });
    }

    fn cancelled_reply(&self) -> AgentReply {
        AgentReply::Fatal {
            code: "CANCELLED".into(),
            message: format!(
                "workflow run cancelled: {}",
                self.cancel.reason().unwrap_or_default()
            ),
        }
    }

    fn end(&self, seq: u64, outcome: AgentOutcome) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = open.iter().position(|s| *s == seq) {
            open.remove(i);
            drop(open);
            if let Some(o) = &self.observer {
                o.agent_end(seq, outcome);
            }
        }
    }

    /// One `agent()` call: a slot, the child, its narration and its value.
    async fn serve(self: Arc<Self>, call: AgentCall) {
        let seq = call.seq;
        let token = self.cancel.token.clone();
        let permit = tokio::select! {
            p = self.slots.clone().acquire_owned() => p.ok(),
            () = token.cancelled() => None,
        };
        let Some(_permit) = permit else {
            self.reply(seq, self.cancelled_reply());
            return;
        };
        if token.is_cancelled() {
            self.reply(seq, self.cancelled_reply());
            return;
        }
        let mut request = StartRequest::new(
            self.parent.clone(),
            vec![ContentBlock::text(call.prompt.clone())],
            token.child_token(),
        );
        request.output_schema = call.schema.clone();
        if call.provider.is_some() || call.model.is_some() {
            request.agent_options = Some(AgentOptions {
                provider: call.provider.clone(),
                model: call.model.clone(),
                max_tokens: None,
                reasoning_effort: None,
            });
        }
        let run = match self.subagents.start(&self.provider, request).await {
            Ok(run) => run,
            Err(e) => {
                let reply = if self.cancel.reason().is_some() {
                    self.cancelled_reply()
                } else {
                    AgentReply::Fatal {
                        code: "AGENT_START".into(),
                        message: format!("agent() could not start a child: {e}"),
                    }
                };
                self.reply(seq, reply);
                return;
            }
        };
        if self.cancel.reason().is_some() {
            let _ = run.dispose().await;
            self.reply(seq, self.cancelled_reply());
            return;
        }
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(seq);
        if let Some(o) = &self.observer {
            o.agent_start(&AgentStartInfo {
                seq,
                label: call.label.clone(),
                phase: call.phase.clone(),
                child_id: run.id.clone(),
            });
        }
        let settled = run.result.clone().await;
        let (outcome, reply) = match settled {
            Err(fault) => {
                if self.cancel.reason().is_some() {
                    (AgentOutcome::Cancelled, self.cancelled_reply())
                } else {
                    (
                        AgentOutcome::Failed,
                        AgentReply::Fatal {
                            code: "AGENT_RESULT".into(),
                            message: format!("child agent run failed: {}", fault.js()),
                        },
                    )
                }
            }
            Ok(result) if result.stop_reason == StopReason::Completed => {
                if call.schema.is_some() {
                    match result.structured {
                        Some(v) => (AgentOutcome::Completed, AgentReply::Value(v)),
                        None => (AgentOutcome::Failed, AgentReply::Value(Value::Null)),
                    }
                } else {
                    (
                        AgentOutcome::Completed,
                        AgentReply::Value(Value::String(text_of(&result.output))),
                    )
                }
            }
            Ok(_) if self.cancel.reason().is_some() || token.is_cancelled() => {
                (AgentOutcome::Cancelled, self.cancelled_reply())
            }
            Ok(_) => (AgentOutcome::Failed, AgentReply::Value(Value::Null)),
        };
        self.end(seq, outcome);
        if let Err(e) = run.dispose().await {
            tracing::warn!("workflow: disposing child {} failed: {e}", run.id);
        }
        self.reply(seq, reply);
    }
}
