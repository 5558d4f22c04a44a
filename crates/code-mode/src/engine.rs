//! The embedded engine: one QuickJS runtime per program run, on the caller's thread.
//!
//! The program is the body of an async function. Tool bindings are promises: calling one
//! posts a [`HostCall`] to the host and parks a resolver; the host answers on the reply
//! channel and the engine settles the promise. The engine has no filesystem, network,
//! timers or modules — only `console`, `tools` and the language itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rquickjs::{Context, Ctx, Function, Runtime, Value as JsValue};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

/// Budgets of one run.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Time spent executing JavaScript (waiting on tools does not count).
    pub compute: Duration,
    /// Wall-clock ceiling of the whole run, tool calls included.
    pub wall: Duration,
    /// The runtime's heap limit in bytes.
    pub memory_bytes: usize,
    /// Captured logs plus the completion value, in bytes.
    pub max_output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            compute: Duration::from_secs(60),
            wall: Duration::from_secs(600),
            memory_bytes: 512 * 1024 * 1024,
            max_output_bytes: 64 * 1024 * 1024,
        }
    }
}

/// A tool call the program made.
#[derive(Debug)]
pub struct HostCall {
    pub id: u64,
    pub name: String,
    pub arguments: Value,
}

/// The host's answer to one [`HostCall`], or the end of the run.
#[derive(Debug)]
pub enum HostReply {
    Resolved {
        id: u64,
        value: Value,
    },
    Rejected {
        id: u64,
        message: String,
    },
    /// The run was cancelled from outside.
    Abort {
        reason: String,
    },
}

/// Why a run failed (upstream's failure kinds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    Exception,
    Timeout,
    Abort,
    WorkerExit,
    InvalidOutput,
    OutputLimit,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Exception => "exception",
            FailureKind::Timeout => "timeout",
            FailureKind::Abort => "abort",
            FailureKind::WorkerExit => "worker-exit",
            FailureKind::InvalidOutput => "invalid-output",
            FailureKind::OutputLimit => "output-limit",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct RunFailure {
    pub kind: FailureKind,
    pub message: String,
}

/// What a run printed and returned.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunOutcome {
    pub logs: Vec<String>,
    /// The completion value; `None` when the program returned `undefined`.
    pub value: Option<Value>,
    pub error: Option<RunFailure>,
}

/// The JavaScript side of the bridge: console, ToolCallError, the `tools` namespace and
/// the settle entry point. `__dsh_call`, `__dsh_log` and `__dsh_done` are host functions.
const PRELUDE: &str = r#"
(function (names) {
  const call = globalThis.__dsh_call, log = globalThis.__dsh_log, done = globalThis.__dsh_done;
  delete globalThis.__dsh_call; delete globalThis.__dsh_log; delete globalThis.__dsh_done;
  const render = (e) => {
    try {
      if (e instanceof Error) {
        const head = String(e.name) + ': ' + String(e.message);
        const stack = typeof e.stack === 'string' ? e.stack.replace(/\s+$/, '') : '';
        return stack.length > 0 ? head + '\n' + stack : head;
      }
      return String(e);
    } catch (_) { return 'program threw an unrenderable value'; }
  };
  const show = (v) => {
    if (typeof v === 'string') return v;
    if (v instanceof Error) return render(v);
    if (v === undefined || typeof v === 'function' || typeof v === 'symbol' || typeof v === 'bigint') return String(v);
    try { const s = JSON.stringify(v); return s === undefined ? String(v) : s; } catch (_) { return String(v); }
  };
  const print = (...args) => { log(args.map(show).join(' ')); };
  globalThis.console = Object.freeze({ log: print, info: print, warn: print, error: print, debug: print });
  class ToolCallError extends Error {
    constructor(toolName, message) { super(message); this.name = 'ToolCallError'; this.toolName = toolName; }
  }
  globalThis.ToolCallError = ToolCallError;
  const pending = new Map();
  const tools = Object.create(null);
  for (const name of names) {
    Object.defineProperty(tools, name, { enumerable: true, value: (args) => {
      let json;
      try { json = JSON.stringify(args); } catch (e) {
        return Promise.reject(new ToolCallError(name, 'tool arguments must be lossless JSON: ' + show(e && e.message)));
      }
      if (json === undefined) {
        return Promise.reject(new ToolCallError(name, 'tool arguments are missing or have no JSON form; pass an arguments object, e.g. `{}`'));
      }
      const id = call(name, json);
      return new Promise((resolve, reject) => { pending.set(id, { name, resolve, reject }); });
    } });
  }
  globalThis.tools = Object.freeze(tools);
  globalThis.__dsh_settle = (id, ok, payload) => {
    const p = pending.get(id);
    if (p === undefined) return;
    pending.delete(id);
    if (ok) p.resolve(JSON.parse(payload)); else p.reject(new ToolCallError(p.name, payload));
  };
  globalThis.__dsh_finish = (promise) => promise.then(
    (v) => {
      if (v === undefined) { done(true, false, ''); return; }
      let s;
      try { s = JSON.stringify(v); } catch (_) { s = undefined; }
      if (s === undefined) done(false, false, '\u0000invalid'); else done(true, true, s);
    },
    (e) => { done(false, false, render(e)); });
})
"#;

/// Where the run stands, shared with the host functions and the interrupt handler.
#[derive(Default)]
struct Shared {
    logs: Vec<String>,
    log_bytes: usize,
    output_overflow: bool,
    /// `(ok, has_value, payload)` once the program settled.
    done: Option<(bool, bool, String)>,
    next_id: u64,
    outstanding: usize,
}

/// The compute budget the interrupt handler enforces.
struct Clock {
    /// Since when JavaScript has been running (None while waiting on the host).
    entered: Option<Instant>,
    spent: Duration,
    wall_deadline: Instant,
    compute: Duration,
    /// Set by the handler when it stopped the program, with why.
    tripped: Option<FailureKind>,
    abort: Arc<AtomicBool>,
    /// The runtime's metered heap (set once the runtime exists).
    heap: Option<crate::heap::Heap>,
}

impl Clock {
    fn over(&mut self) -> bool {
        if self.abort.load(Ordering::Relaxed) {
            self.tripped = Some(FailureKind::Abort);
            return true;
        }
        if self.heap.as_ref().is_some_and(crate::heap::Heap::over) {
            self.tripped = Some(FailureKind::WorkerExit);
            return true;
        }
        let now = Instant::now();
        let running = self.entered.map(|t| now - t).unwrap_or_default();
        if self.spent + running > self.compute || now > self.wall_deadline {
            self.tripped = Some(FailureKind::Timeout);
            return true;
        }
        false
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `program` (an async function body) with `bindings` as `tools.*`. Tool calls go
/// out on `calls`; their answers come back on `replies`. Never panics and never outlives
/// its budgets: every way out becomes a [`RunOutcome`].
pub fn run_program(
    program: &str,
    bindings: &[String],
    limits: &Limits,
    calls: UnboundedSender<HostCall>,
    replies: Receiver<HostReply>,
    abort: Arc<AtomicBool>,
) -> RunOutcome {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let clock = Arc::new(Mutex::new(Clock {
        entered: None,
        spent: Duration::ZERO,
        wall_deadline: Instant::now() + limits.wall,
        compute: limits.compute,
        tripped: None,
        abort,
        heap: None,
    }));
    let fail = |shared: &Mutex<Shared>, kind: FailureKind, message: String| {
        let logs = std::mem::take(&mut lock(shared).logs);
        RunOutcome {
            logs,
            value: None,
            error: Some(RunFailure { kind, message }),
        }
    };
    // TypeScript: type syntax is blanked out (positions kept) before QuickJS compiles.
    let stripped = match crate::strip::strip_types(program) {
        Ok(s) => s,
        Err(e) => return fail(&shared, FailureKind::Exception, format!("SyntaxError: {e}")),
    };
    let runtime = match crate::heap::metered_runtime(limits.memory_bytes) {
        Ok((rt, heap)) => {
            lock(&clock).heap = Some(heap);
            rt
        }
        Err(e) => return fail(&shared, FailureKind::WorkerExit, format!("runtime: {e}")),
    };
    runtime.set_max_stack_size(1024 * 1024);
    {
        let clock = clock.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || lock(&clock).over())));
    }
    let context = match Context::full(&runtime) {
        Ok(c) => c,
        Err(e) => return fail(&shared, FailureKind::WorkerExit, format!("context: {e}")),
    };
    let enter = |clock: &Mutex<Clock>| lock(clock).entered = Some(Instant::now());
    let leave = |clock: &Mutex<Clock>| {
        let mut c = lock(clock);
        if let Some(t) = c.entered.take() {
            c.spent += t.elapsed();
        }
    };

    // Install the bridge and start the program.
    enter(&clock);
    let started = start_program(
        &context, &shared, &calls, limits, bindings, program, &stripped,
    );
    leave(&clock);
    if let Err(message) = started {
        return classify(&shared, &clock, limits, message);
    }

    loop {
        enter(&clock);
        let job_error = run_pending_jobs(&runtime, render_value);
        leave(&clock);
        if let Some(message) = job_error {
            return classify(&shared, &clock, limits, message);
        }
        let trip = lock(&clock).tripped;
        if let Some(kind) = trip {
            return tripped(&shared, kind, limits, &clock);
        }
        let (settled, outstanding) = {
            let s = lock(&shared);
            (s.done.clone(), s.outstanding)
        };
        if let Some((ok, has_value, payload)) = settled {
            return finish(&shared, limits, ok, has_value, payload);
        }
        if lock(&shared).output_overflow {
            return fail(
                &shared,
                FailureKind::OutputLimit,
                format!("outer output exceeded {} bytes", limits.max_output_bytes),
            );
        }
        if outstanding == 0 {
            return fail(
                &shared,
                FailureKind::Exception,
                "the program is waiting on a promise nothing can settle".into(),
            );
        }
        let wait = lock(&clock)
            .wall_deadline
            .saturating_duration_since(Instant::now());
        let reply = match replies.recv_timeout(wait) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => {
                return tripped(&shared, FailureKind::Timeout, limits, &clock);
            }
            Err(RecvTimeoutError::Disconnected) => {
                return fail(&shared, FailureKind::Abort, "host went away".into());
            }
        };
        let (id, ok, payload) = match reply {
            HostReply::Resolved { id, value } => (id, true, dsh_kernel::json::to_string(&value)),
            HostReply::Rejected { id, message } => (id, false, message),
            HostReply::Abort { reason } => return fail(&shared, FailureKind::Abort, reason),
        };
        {
            let mut st = lock(&shared);
            st.outstanding = st.outstanding.saturating_sub(1);
        }
        enter(&clock);
        let settled = context.with(|ctx| -> Result<(), String> {
            let settle: Function = ctx
                .globals()
                .get("__dsh_settle")
                .map_err(|e| describe(&ctx, e))?;
            settle
                .call::<_, ()>((id, ok, payload))
                .map_err(|e| describe(&ctx, e))
        });
        leave(&clock);
        if let Err(message) = settled {
            return classify(&shared, &clock, limits, message);
        }
    }
}

/// Installs the bridge, binds `tools.*` and starts the program (its first synchronous part
/// runs here). Compiles `stripped`, or `program` as written when only the stripped form
/// fails to compile.
fn start_program(
    context: &Context,
    shared: &Arc<Mutex<Shared>>,
    calls: &UnboundedSender<HostCall>,
    limits: &Limits,
    bindings: &[String],
    program: &str,
    stripped: &str,
) -> Result<(), String> {
    context.with(|ctx| -> Result<(), String> {
        install(&ctx, shared, calls, limits.max_output_bytes).map_err(|e| describe(&ctx, e))?;
        let prelude: Function = ctx.eval(PRELUDE).map_err(|e| describe(&ctx, e))?;
        let names = rquickjs::Array::new(ctx.clone()).map_err(|e| describe(&ctx, e))?;
        for (i, name) in bindings.iter().enumerate() {
            names.set(i, name.as_str()).map_err(|e| describe(&ctx, e))?;
        }
        prelude
            .call::<_, ()>((names,))
            .map_err(|e| describe(&ctx, e))?;
        let wrap = |body: &str| format!("(async () => {{\n{body}\n}})()");
        let promise: JsValue = match ctx.eval::<JsValue, _>(wrap(stripped)) {
            Ok(p) => p,
            Err(e) => {
                let message = describe(&ctx, e);
                // A compile error the stripping may have caused: plain JavaScript that
                // compiles as written runs as written. (A SyntaxError out of `eval` is a
                // compile error: the async function turns whatever it throws into a
                // rejection, so nothing of the first attempt ran.)
                if stripped != program && message.starts_with("SyntaxError") {
                    ctx.eval::<JsValue, _>(wrap(program)).map_err(|_| message)?
                } else {
                    return Err(message);
                }
            }
        };
        let finish: Function = ctx
            .globals()
            .get("__dsh_finish")
            .map_err(|e| describe(&ctx, e))?;
        finish
            .call::<_, ()>((promise,))
            .map_err(|e| describe(&ctx, e))?;
        Ok(())
    })
}

/// Host functions: `__dsh_call(name, json) -> id`, `__dsh_log(text)`,
/// `__dsh_done(ok, hasValue, payload)`.
fn install<'js>(
    ctx: &Ctx<'js>,
    shared: &Arc<Mutex<Shared>>,
    calls: &UnboundedSender<HostCall>,
    max_output: usize,
) -> rquickjs::Result<()> {
    let globals = ctx.globals();
    let s = shared.clone();
    let calls = calls.clone();
    globals.set(
        "__dsh_call",
        Function::new(ctx.clone(), move |name: String, json: String| -> u64 {
            let mut st = lock(&s);
            st.next_id += 1;
            st.outstanding += 1;
            let id = st.next_id;
            let arguments = serde_json::from_str(&json).unwrap_or(Value::Null);
            // A closed host only happens while the run is being torn down; the program is
            // stopped by the abort then, so a lost call needs no answer.
            let _ = calls.send(HostCall {
                id,
                name,
                arguments,
            });
            id
        })?,
    )?;
    let s = shared.clone();
    globals.set(
        "__dsh_log",
        Function::new(ctx.clone(), move |text: String| {
            let mut st = lock(&s);
            // The ledger charges each line as a JSON string, as upstream's does.
            let cost = dsh_kernel::json::to_string(&Value::String(text.clone())).len() + 1;
            if st.log_bytes + cost > max_output {
                st.output_overflow = true;
                return;
            }
            st.log_bytes += cost;
            st.logs.push(text);
        })?,
    )?;
    let s = shared.clone();
    globals.set(
        "__dsh_done",
        Function::new(
            ctx.clone(),
            move |ok: bool, has_value: bool, payload: String| {
                lock(&s).done = Some((ok, has_value, payload));
            },
        )?,
    )?;
    Ok(())
}

fn finish(
    shared: &Mutex<Shared>,
    limits: &Limits,
    ok: bool,
    has_value: bool,
    payload: String,
) -> RunOutcome {
    let mut st = lock(shared);
    let logs = std::mem::take(&mut st.logs);
    let failure = |kind, message| RunOutcome {
        logs: logs.clone(),
        value: None,
        error: Some(RunFailure { kind, message }),
    };
    if !ok {
        if payload == "\u{0}invalid" {
            return failure(
                FailureKind::InvalidOutput,
                "program completion must be lossless JSON".into(),
            );
        }
        if payload.len() + st.log_bytes > limits.max_output_bytes {
            return failure(
                FailureKind::OutputLimit,
                format!("outer output exceeded {} bytes", limits.max_output_bytes),
            );
        }
        if is_out_of_memory(&payload) {
            return failure(FailureKind::WorkerExit, memory_message(limits));
        }
        return failure(FailureKind::Exception, payload);
    }
    if !has_value {
        return RunOutcome {
            logs,
            value: None,
            error: None,
        };
    }
    if payload.len() + st.log_bytes > limits.max_output_bytes {
        return failure(
            FailureKind::OutputLimit,
            format!("outer output exceeded {} bytes", limits.max_output_bytes),
        );
    }
    match serde_json::from_str::<Value>(&payload) {
        Ok(value) => RunOutcome {
            logs,
            value: Some(value),
            error: None,
        },
        Err(_) => failure(
            FailureKind::InvalidOutput,
            "program completion must be lossless JSON".into(),
        ),
    }
}

/// A failure raised while JavaScript ran: the interrupt handler's trip, the heap limit,
/// or the program's own exception.
fn classify(
    shared: &Mutex<Shared>,
    clock: &Mutex<Clock>,
    limits: &Limits,
    message: String,
) -> RunOutcome {
    let trip = lock(clock).tripped;
    if let Some(kind) = trip {
        return tripped(shared, kind, limits, clock);
    }
    if is_out_of_memory(&message) {
        return out_of_memory(shared, limits);
    }
    let kind = FailureKind::Exception;
    let logs = std::mem::take(&mut lock(shared).logs);
    RunOutcome {
        logs,
        value: None,
        error: Some(RunFailure { kind, message }),
    }
}

fn tripped(
    shared: &Mutex<Shared>,
    kind: FailureKind,
    limits: &Limits,
    clock: &Mutex<Clock>,
) -> RunOutcome {
    let wall_deadline = lock(clock).wall_deadline;
    let message = match kind {
        FailureKind::Abort => "run_code was cancelled".to_string(),
        FailureKind::WorkerExit => memory_message(limits),
        _ if Instant::now() > wall_deadline => {
            format!("wall-clock ceiling reached ({}ms)", limits.wall.as_millis())
        }
        _ => format!(
            "compute budget exhausted ({}ms busy)",
            limits.compute.as_millis()
        ),
    };
    let logs = std::mem::take(&mut lock(shared).logs);
    RunOutcome {
        logs,
        value: None,
        error: Some(RunFailure { kind, message }),
    }
}

fn is_out_of_memory(message: &str) -> bool {
    message.contains("out of memory")
}

fn memory_message(limits: &Limits) -> String {
    format!(
        "memory limit reached ({} MiB heap); the program was stopped",
        limits.memory_bytes / (1024 * 1024)
    )
}

fn out_of_memory(shared: &Mutex<Shared>, limits: &Limits) -> RunOutcome {
    let logs = std::mem::take(&mut lock(shared).logs);
    RunOutcome {
        logs,
        value: None,
        error: Some(RunFailure {
            kind: FailureKind::WorkerExit,
            message: memory_message(limits),
        }),
    }
}

/// The message of a failed engine call: the pending exception, rendered.
fn describe(ctx: &Ctx<'_>, error: rquickjs::Error) -> String {
    match error {
        rquickjs::Error::Exception => render_value(&ctx.catch()),
        other => other.to_string(),
    }
}

fn render_value(value: &JsValue<'_>) -> String {
    render_thrown(value, true, "program threw an unrenderable value")
}

/// What a JavaScript engine reports for a thrown value: `Name: message` (with its stack
/// when `with_stack`) for an error, the text of a string, `null`, `undefined`, a boolean or
/// a number as written, else `unrenderable`. Shared by every QuickJS engine of this build.
pub fn render_thrown(value: &JsValue<'_>, with_stack: bool, unrenderable: &str) -> String {
    if let Some(exception) = value.as_exception() {
        let head = match (
            exception.get::<_, Option<String>>("name").ok().flatten(),
            exception.message(),
        ) {
            (Some(name), Some(message)) => format!("{name}: {message}"),
            (None, Some(message)) => message,
            (Some(name), None) => name,
            (None, None) => "Error".into(),
        };
        return match exception.stack() {
            Some(stack) if with_stack && !stack.trim().is_empty() => {
                format!("{head}\n{}", stack.trim_end())
            }
            _ => head,
        };
    }
    if let Some(s) = value.as_string() {
        return s.to_string().unwrap_or_default();
    }
    if value.is_null() {
        return "null".into();
    }
    if value.is_undefined() {
        return "undefined".into();
    }
    if let Some(b) = value.as_bool() {
        return b.to_string();
    }
    if let Some(n) = value.as_number() {
        return n.to_string();
    }
    unrenderable.into()
}

/// Runs the promise jobs `runtime` has queued until none is left; the first job that
/// fails ends the run with its thrown value, rendered by `render`.
pub fn run_pending_jobs(runtime: &Runtime, render: fn(&JsValue<'_>) -> String) -> Option<String> {
    loop {
        match runtime.execute_pending_job() {
            Ok(true) => continue,
            Ok(false) => return None,
            Err(e) => {
                adopt_failed_job(&e.0);
                return Some(e.0.with(|ctx| render(&ctx.catch())));
            }
        }
    }
}

/// Takes the reference the context of a failed promise job (`JobException(context)` from
/// `Runtime::execute_pending_job`) lacks; call it before that context is used or dropped.
/// QuickJS hands the job's context back without a reference of its own, but rquickjs 0.9
/// wraps it in a `Context` that releases one when dropped: without this the context is
/// freed once too often and QuickJS aborts the whole process when the runtime is torn
/// down (`gc_decref_child` assertion). Every engine that runs promise jobs (code mode,
/// workflows, dynamic packages) goes through this.
#[allow(unsafe_code)]
pub fn adopt_failed_job(job_context: &rquickjs::Context) {
    // SAFETY: the context is live (the job just ran in it, and its runtime is held by
    // the wrapper); `JS_DupContext` only increments its reference count, which the
    // wrapper's drop releases again.
    unsafe {
        rquickjs::qjs::JS_DupContext(job_context.as_raw().as_ptr());
    }
}
