//! The script side of a run: one QuickJS runtime on a dedicated thread (QuickJS values are
//! not `Send`; the thread plays the part of upstream's worker thread).
//!
//! The body is compiled as an async function (so it cannot escape its wrapper), the hooks
//! `agent`, `parallel`, `pipeline`, `phase`, `log` and the `args` global are installed by a
//! small prelude, and the thread then waits for the host's go. `agent()` posts an
//! [`AgentCall`] to the host and parks a resolver; the host answers with the child's value
//! or a fatal error. There are no timers, modules, filesystem or network in the runtime.
//! Every synchronous slice of JavaScript is bounded by `sync_timeout` (an interrupt
//! handler), the heap by `memory_bytes`, and the abort flag stops a running slice at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rquickjs::{Context, Ctx, Function, Runtime, Value as JsValue};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;

/// What the script side needs to run.
#[derive(Clone, Debug)]
pub(crate) struct ScriptInit {
    pub body: String,
    pub args: Option<Value>,
    pub max_items: usize,
    pub max_total: u64,
    pub sync_timeout: Duration,
    pub memory_bytes: usize,
}

/// One `agent()` call that passed its checks.
#[derive(Clone, Debug)]
pub(crate) struct AgentCall {
    pub seq: u64,
    pub prompt: String,
    pub label: String,
    pub phase: Option<String>,
    pub schema: Option<Value>,
    pub provider: Option<String>,
    pub model: Option<String>,
}

/// Script → host.
#[derive(Debug)]
pub(crate) enum ToHost {
    Agent(AgentCall),
    Phase(String),
    Log(String),
}

/// How one `agent()` promise settles.
#[derive(Debug)]
pub(crate) enum AgentReply {
    Value(Value),
    Fatal { code: String, message: String },
}

/// Host → script.
#[derive(Debug)]
pub(crate) enum ToEngine {
    /// Run the body (sent once the run is recorded).
    Go,
    Settle {
        seq: u64,
        reply: AgentReply,
    },
    /// The run was cancelled: stop now.
    Abort,
}

/// How the script ended.
#[derive(Debug, PartialEq)]
pub(crate) enum ScriptEnd {
    Completed(Value),
    Failed(String),
    Aborted,
}

/// Our own prelude: the hooks, the plain-data check and the settle entry points. The host
/// functions `__start`, `__note` and `__done` are captured and removed from the globals.
const PRELUDE: &str = r#"
(function (argsJson, maxItems) {
  const start = globalThis.__start, note = globalThis.__note, done = globalThis.__done;
  delete globalThis.__start; delete globalThis.__note; delete globalThis.__done;
  class WorkflowError extends Error {
    constructor(message, code) { super(message); this.name = 'WorkflowError'; this.code = code; }
  }
  const fatalErrors = new WeakSet();
  const fatal = (message, code) => { const e = new WorkflowError(message, code); fatalErrors.add(e); return e; };
  const isFatal = (e) => typeof e === 'object' && e !== null && fatalErrors.has(e);
  class NotPlain { constructor(path, reason) { this.message = path + ': ' + reason; } }
  const checkPlain = (v, path, seen) => {
    switch (typeof v) {
      case 'boolean': case 'string': return;
      case 'number': if (!Number.isFinite(v)) throw new NotPlain(path, 'non-finite numbers are not JSON data'); return;
      case 'bigint': throw new NotPlain(path, 'bigints are not JSON data');
      case 'function': throw new NotPlain(path, 'functions are not plain JSON data');
      case 'symbol': throw new NotPlain(path, 'symbols are not plain JSON data');
      case 'undefined': throw new NotPlain(path, 'undefined is not JSON data');
    }
    if (v === null) return;
    if (seen.has(v)) throw new NotPlain(path, 'circular references are not JSON data');
    seen.add(v);
    if (Object.getOwnPropertySymbols(v).length > 0) throw new NotPlain(path, 'symbol-keyed properties are not plain JSON data');
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        if (!(i in v)) throw new NotPlain(path + '[' + i + ']', 'sparse arrays are not JSON data');
        checkPlain(v[i], path + '[' + i + ']', seen);
      }
      for (const k of Object.keys(v)) {
        const n = Number(k);
        if (!Number.isInteger(n) || n < 0 || n >= v.length) throw new NotPlain(path + '.' + k, 'arrays with non-index properties are not JSON data');
      }
    } else {
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) throw new NotPlain(path, 'only plain objects and arrays are JSON data (exotic prototype)');
      for (const k of Object.keys(v)) checkPlain(v[k], path + '.' + k, seen);
    }
    seen.delete(v);
  };
  const render = (e) => {
    try {
      if (isFatal(e)) return String(e.message);
      if (e instanceof Error) return String(e.name) + ': ' + String(e.message);
      if (typeof e === 'string') return e;
      return 'the script threw ' + String(e);
    } catch (_) { return 'the script threw an unrenderable value'; }
  };
  const SUPPORTED = ['label', 'phase', 'schema', 'provider', 'model'];
  const DEFERRED = ['effort', 'isolation', 'agentType'];
  const LIST = '(supported: label, phase, schema, provider, model)';
  const itemCap = (n, hook) => {
    if (n > maxItems) throw fatal(hook + ' got ' + n + ' items, more than one call may take (' + maxItems + '); split the work into smaller calls or raise maxItemsPerCall in the engine config', 'ITEM_CAP');
  };
  let currentPhase = null;
  const pending = new Map();
  const agent = (prompt, opts) => {
    try {
      if (typeof prompt !== 'string' || prompt.length === 0) throw fatal('agent() requires a non-empty prompt string', 'INVALID_ARGUMENT');
      let json = null;
      if (opts !== undefined) {
        try { checkPlain(opts, 'agent() options', new Set()); } catch (e) {
          if (e instanceof NotPlain) throw fatal('agent() options must be plain JSON data \u2014 ' + e.message, 'INVALID_ARGUMENT');
          throw e;
        }
        if (typeof opts !== 'object' || opts === null || Array.isArray(opts)) throw fatal('agent() options must be an object', 'INVALID_ARGUMENT');
        for (const k of Object.keys(opts)) {
          if (SUPPORTED.includes(k)) continue;
          if (DEFERRED.includes(k)) throw fatal('agent() option "' + k + '" is not supported yet ' + LIST, 'UNSUPPORTED_OPTION');
          throw fatal('agent() option "' + k + '" is not recognized ' + LIST, 'UNSUPPORTED_OPTION');
        }
        for (const k of ['label', 'phase', 'provider', 'model']) {
          if (opts[k] !== undefined && typeof opts[k] !== 'string') throw fatal('agent() option "' + k + '" must be a string', 'INVALID_ARGUMENT');
        }
        json = JSON.stringify(opts);
      }
      const r = JSON.parse(start(prompt, json, currentPhase));
      if (r.error !== undefined) throw fatal(r.error, r.code);
      return new Promise((resolve, reject) => { pending.set(r.id, { resolve, reject }); });
    } catch (e) { return Promise.reject(e); }
  };
  const parallel = (thunks) => {
    try {
      if (!Array.isArray(thunks)) throw fatal('parallel() requires an array of zero-argument functions', 'INVALID_ARGUMENT');
      itemCap(thunks.length, 'parallel()');
      thunks.forEach((t, i) => { if (typeof t !== 'function') throw fatal('parallel() item ' + i + ' is not a function', 'INVALID_ARGUMENT'); });
      return Promise.all(thunks.map(async (t) => {
        try { return await t(); } catch (e) { if (isFatal(e)) throw e; return null; }
      }));
    } catch (e) { return Promise.reject(e); }
  };
  const pipeline = (items, ...stages) => {
    try {
      if (!Array.isArray(items)) throw fatal('pipeline() requires an items array', 'INVALID_ARGUMENT');
      itemCap(items.length, 'pipeline()');
      if (stages.length === 0) throw fatal('pipeline() requires at least one stage function', 'INVALID_ARGUMENT');
      stages.forEach((s, i) => { if (typeof s !== 'function') throw fatal('pipeline() stage ' + i + ' is not a function', 'INVALID_ARGUMENT'); });
      return Promise.all(items.map(async (item, index) => {
        let prev = item;
        for (const stage of stages) {
          try { prev = await stage(prev, item, index); } catch (e) { if (isFatal(e)) throw e; return null; }
        }
        return prev;
      }));
    } catch (e) { return Promise.reject(e); }
  };
  const phase = (title) => {
    if (typeof title !== 'string' || title.length === 0) throw fatal('phase() requires a non-empty title string', 'INVALID_ARGUMENT');
    currentPhase = title;
    note('phase', title);
  };
  const log = (message) => {
    if (typeof message !== 'string') throw fatal('log() requires a message string', 'INVALID_ARGUMENT');
    note('log', message);
  };
  for (const [k, v] of Object.entries({ agent, parallel, pipeline, phase, log })) {
    Object.defineProperty(globalThis, k, { value: v, writable: false, enumerable: false, configurable: false });
  }
  globalThis.args = argsJson == null ? undefined : JSON.parse(argsJson);
  const AsyncFunction = (async function () {}).constructor;
  globalThis.__compile = (body) => new AsyncFunction(body);
  globalThis.__settle = (id, ok, payload) => {
    const p = pending.get(id);
    if (p === undefined) return;
    pending.delete(id);
    const data = JSON.parse(payload);
    if (ok) p.resolve(data); else p.reject(fatal(data.message, data.code));
  };
  globalThis.__finish = (promise) => promise.then(
    (v) => {
      if (v === undefined) { done(true, 'null'); return; }
      try { checkPlain(v, 'workflow result', new Set()); } catch (e) {
        if (e instanceof NotPlain) {
          done(false, "the workflow's return value is not plain JSON data \u2014 " + e.message + '. Return only JSON-serializable objects/arrays/scalars.');
        } else {
          done(false, "the workflow's return value is not plain JSON data \u2014 workflow result: reading the value threw: " + render(e));
        }
        return;
      }
      done(true, JSON.stringify(v));
    },
    (e) => { done(false, render(e)); });
})
"#;

/// Where the run stands, shared with the host functions and the interrupt handler.
#[derive(Default)]
struct Shared {
    /// `(ok, payload)` once the script settled.
    done: Option<(bool, String)>,
    outstanding: usize,
}

/// The slice budget the interrupt handler enforces.
struct Clock {
    slice_start: Option<Instant>,
    sync_timeout: Duration,
    abort: Arc<AtomicBool>,
    tripped: Option<Trip>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Trip {
    Slice,
    Abort,
}

impl Clock {
    fn over(&mut self) -> bool {
        if self.abort.load(Ordering::Relaxed) {
            self.tripped = Some(Trip::Abort);
            return true;
        }
        if self
            .slice_start
            .is_some_and(|t| t.elapsed() > self.sync_timeout)
        {
            self.tripped = Some(Trip::Slice);
            return true;
        }
        false
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The display label of a child without one: the prompt's first line, kept when it is at
/// most 48 UTF-16 units, else its first 47 and an ellipsis.
pub fn default_label(prompt: &str) -> String {
    let line = prompt.split('\n').next().unwrap_or_default();
    let units: Vec<u16> = line.encode_utf16().collect();
    if units.len() <= 48 {
        return line.to_string();
    }
    format!("{}\u{2026}", String::from_utf16_lossy(&units[..47]))
}

/// Runs one script to its end. `parsed` learns whether the body compiles before anything
/// runs; the body starts on [`ToEngine::Go`]. Never panics: every way out is a
/// [`ScriptEnd`].
pub(crate) fn run_script(
    init: ScriptInit,
    to_host: UnboundedSender<ToHost>,
    replies: Receiver<ToEngine>,
    abort: Arc<AtomicBool>,
    started: Arc<AtomicU64>,
    parsed: tokio::sync::oneshot::Sender<Result<(), String>>,
) -> ScriptEnd {
    let mut parsed = Some(parsed);
    let mut report = |r: Result<(), String>| {
        if let Some(p) = parsed.take() {
            let _ = p.send(r);
        }
    };
    let shared = Arc::new(Mutex::new(Shared::default()));
    let clock = Arc::new(Mutex::new(Clock {
        slice_start: None,
        sync_timeout: init.sync_timeout,
        abort: abort.clone(),
        tripped: None,
    }));
    // A metered heap: the script is stopped at an interrupt point once it holds more than
    // its limit (then `near_limit` classifies the failure as the memory limit's).
    let (runtime, heap) = match dsh_code_mode::metered_runtime(init.memory_bytes) {
        Ok(pair) => pair,
        Err(e) => {
            report(Err(format!("the script runtime could not start: {e}")));
            return ScriptEnd::Failed(format!("the script runtime could not start: {e}"));
        }
    };
    runtime.set_max_stack_size(1024 * 1024);
    {
        let clock = clock.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || heap.over() || lock(&clock).over())));
    }
    let context = match Context::full(&runtime) {
        Ok(c) => c,
        Err(e) => {
            report(Err(format!("the script context could not start: {e}")));
            return ScriptEnd::Failed(format!("the script context could not start: {e}"));
        }
    };
    let enter = |clock: &Mutex<Clock>| lock(clock).slice_start = Some(Instant::now());
    let leave = |clock: &Mutex<Clock>| lock(clock).slice_start = None;

    // Install the hooks and compile the body (nothing of it runs yet).
    let args_json = init.args.as_ref().map(dsh_kernel::json::to_string);
    enter(&clock);
    let compiled = compile_body(&context, &shared, &to_host, &init, &started, args_json);
    leave(&clock);
    match compiled {
        Err(e) => {
            report(Err(format!("the script runtime could not start: {e}")));
            return ScriptEnd::Failed(e);
        }
        Ok(Err(syntax)) => {
            report(Err(syntax.clone()));
            return ScriptEnd::Failed(syntax);
        }
        Ok(Ok(())) => report(Ok(())),
    }

    // Wait for the go (or the abort).
    loop {
        match replies.recv() {
            Ok(ToEngine::Go) => break,
            Ok(ToEngine::Settle { .. }) => {}
            Ok(ToEngine::Abort) | Err(_) => return ScriptEnd::Aborted,
        }
    }
    if abort.load(Ordering::Relaxed) {
        return ScriptEnd::Aborted;
    }

    enter(&clock);
    let began = context.with(|ctx| -> Result<(), String> {
        let body: Function = ctx.globals().get("__body").map_err(|e| describe(&ctx, e))?;
        let _ = ctx.globals().remove("__body");
        let _ = ctx.globals().remove("__compile");
        let promise: JsValue = body.call(()).map_err(|e| describe(&ctx, e))?;
        let finish: Function = ctx
            .globals()
            .get("__finish")
            .map_err(|e| describe(&ctx, e))?;
        finish
            .call::<_, ()>((promise,))
            .map_err(|e| describe(&ctx, e))
    });
    leave(&clock);
    if let Err(message) = began {
        return failed(&clock, &init, message, near_limit(&runtime, &init));
    }

    loop {
        enter(&clock);
        let job_error = dsh_code_mode::run_pending_jobs(&runtime, render_value);
        leave(&clock);
        if let Some(message) = job_error {
            return failed(&clock, &init, message, near_limit(&runtime, &init));
        }
        if let Some(trip) = lock(&clock).tripped {
            return tripped(trip, &init);
        }
        let (settled, outstanding) = {
            let s = lock(&shared);
            (s.done.clone(), s.outstanding)
        };
        if let Some((ok, payload)) = settled {
            if !ok {
                return ScriptEnd::Failed(classify(payload, near_limit(&runtime, &init), &init));
            }
            return match serde_json::from_str::<Value>(&payload) {
                Ok(v) => ScriptEnd::Completed(v),
                Err(_) => ScriptEnd::Failed(
                    "the workflow's return value is not plain JSON data \u{2014} workflow result: it could not be serialized. Return only JSON-serializable objects/arrays/scalars.".into(),
                ),
            };
        }
        if outstanding == 0 {
            return ScriptEnd::Failed(
                "the workflow script is waiting on a promise that nothing can settle (no agent() call is in flight)".into(),
            );
        }
        let (seq, reply) = match replies.recv() {
            Ok(ToEngine::Settle { seq, reply }) => (seq, reply),
            Ok(ToEngine::Go) => continue,
            Ok(ToEngine::Abort) | Err(_) => return ScriptEnd::Aborted,
        };
        {
            let mut st = lock(&shared);
            st.outstanding = st.outstanding.saturating_sub(1);
        }
        let (ok, payload) = match reply {
            AgentReply::Value(v) => (true, dsh_kernel::json::to_string(&v)),
            AgentReply::Fatal { code, message } => (
                false,
                dsh_kernel::json::to_string(&json!({"code": code, "message": message})),
            ),
        };
        enter(&clock);
        let settled = settle(&context, seq, ok, payload);
        leave(&clock);
        if let Err(message) = settled {
            return failed(&clock, &init, message, near_limit(&runtime, &init));
        }
    }
}

/// Installs the host functions, runs the prelude and compiles the body into `__body`
/// without running it. The outer error is the runtime's; the inner one the body's syntax.
fn compile_body(
    context: &Context,
    shared: &Arc<Mutex<Shared>>,
    to_host: &UnboundedSender<ToHost>,
    init: &ScriptInit,
    started: &Arc<AtomicU64>,
    args_json: Option<String>,
) -> Result<Result<(), String>, String> {
    context.with(|ctx| -> Result<Result<(), String>, String> {
        install(&ctx, shared, to_host, init, started).map_err(|e| describe(&ctx, e))?;
        let prelude: Function = ctx.eval(PRELUDE).map_err(|e| describe(&ctx, e))?;
        prelude
            .call::<_, ()>((args_json, init.max_items as f64))
            .map_err(|e| describe(&ctx, e))?;
        let compile: Function = ctx
            .globals()
            .get("__compile")
            .map_err(|e| describe(&ctx, e))?;
        match compile.call::<_, Function>((init.body.as_str(),)) {
            Ok(f) => {
                ctx.globals()
                    .set("__body", f)
                    .map_err(|e| describe(&ctx, e))?;
                Ok(Ok(()))
            }
            Err(e) => Ok(Err(describe_brief(&ctx, e))),
        }
    })
}

/// Settles the script's promise of agent call `seq` with its reply.
fn settle(context: &Context, seq: u64, ok: bool, payload: String) -> Result<(), String> {
    context.with(|ctx| -> Result<(), String> {
        let settle: Function = ctx
            .globals()
            .get("__settle")
            .map_err(|e| describe(&ctx, e))?;
        settle
            .call::<_, ()>((seq as f64, ok, payload))
            .map_err(|e| describe(&ctx, e))
    })
}

/// Host functions: `__start(prompt, optsJson, phase) -> json`, `__note(kind, text)`,
/// `__done(ok, payload)`.
fn install<'js>(
    ctx: &Ctx<'js>,
    shared: &Arc<Mutex<Shared>>,
    to_host: &UnboundedSender<ToHost>,
    init: &ScriptInit,
    started: &Arc<AtomicU64>,
) -> rquickjs::Result<()> {
    let globals = ctx.globals();
    let (s, tx, started, max_total) = (
        shared.clone(),
        to_host.clone(),
        started.clone(),
        init.max_total,
    );
    globals.set(
        "__start",
        Function::new(
            ctx.clone(),
            move |prompt: String, opts: Option<String>, phase: Option<String>| -> String {
                start_agent(&s, &tx, &started, max_total, prompt, opts, phase)
            },
        )?,
    )?;
    let tx = to_host.clone();
    globals.set(
        "__note",
        Function::new(ctx.clone(), move |kind: String, text: String| {
            let _ = tx.send(if kind == "phase" {
                ToHost::Phase(text)
            } else {
                ToHost::Log(text)
            });
        })?,
    )?;
    let s = shared.clone();
    globals.set(
        "__done",
        Function::new(ctx.clone(), move |ok: bool, payload: String| {
            lock(&s).done = Some((ok, payload));
        })?,
    )?;
    Ok(())
}

fn start_agent(
    shared: &Mutex<Shared>,
    to_host: &UnboundedSender<ToHost>,
    started: &AtomicU64,
    max_total: u64,
    prompt: String,
    opts: Option<String>,
    phase: Option<String>,
) -> String {
    let refuse = |code: &str, message: String| {
        dsh_kernel::json::to_string(&json!({"error": message, "code": code}))
    };
    let opts: Value = opts
        .and_then(|o| serde_json::from_str(&o).ok())
        .unwrap_or(Value::Null);
    let text = |k: &str| opts.get(k).and_then(Value::as_str).map(str::to_string);
    let schema = opts.get("schema").cloned();
    if let Some(schema) = &schema
        && let Err(violations) = dsh_subagent::check_object_schema(schema)
    {
        return refuse(
            "UNSUPPORTED_SCHEMA",
            format!(
                "agent() schema is outside the supported subset \u{2014} {}",
                violations.join("; ")
            ),
        );
    }
    if started.load(Ordering::SeqCst) >= max_total {
        return refuse(
            "AGENT_CAP",
            format!(
                "this run has used up its total agent limit ({max_total}), which guards against runaway loops; if the run really needs more agents, raise maxTotalAgents where it is set"
            ),
        );
    }
    let seq = started.fetch_add(1, Ordering::SeqCst) + 1;
    let call = AgentCall {
        seq,
        label: text("label").unwrap_or_else(|| default_label(&prompt)),
        phase: text("phase").or(phase),
        prompt,
        schema,
        provider: text("provider"),
        model: text("model"),
    };
    lock(shared).outstanding += 1;
    if to_host.send(ToHost::Agent(call)).is_err() {
        lock(shared).outstanding -= 1;
        return refuse(
            "AGENT_START",
            "agent() could not start a child: the run is over".into(),
        );
    }
    dsh_kernel::json::to_string(&json!({"id": seq}))
}

fn failed(clock: &Mutex<Clock>, init: &ScriptInit, message: String, near_limit: bool) -> ScriptEnd {
    if let Some(trip) = lock(clock).tripped {
        return tripped(trip, init);
    }
    ScriptEnd::Failed(classify(message, near_limit, init))
}

/// A failure's text: the memory limit's when the heap ran out. QuickJS throws `null` when
/// it cannot even allocate the out-of-memory error, and the heap is freed again by the time
/// the rejection is seen, so a bare `null` names both possibilities.
fn classify(message: String, near_limit: bool, init: &ScriptInit) -> String {
    if is_out_of_memory(&message) || near_limit {
        return memory_message(init);
    }
    if message == "null" || message == "the script threw null" {
        return format!(
            "the workflow script failed with a null error value: it threw null, or it ran out of its memory limit ({} MiB heap)",
            init.memory_bytes / (1024 * 1024)
        );
    }
    message
}

fn tripped(trip: Trip, init: &ScriptInit) -> ScriptEnd {
    match trip {
        Trip::Abort => ScriptEnd::Aborted,
        Trip::Slice => ScriptEnd::Failed(format!(
            "the workflow script ran for more than {}ms without yielding (syncTimeoutMs); it was stopped",
            init.sync_timeout.as_millis()
        )),
    }
}

/// Whether the heap is (still) nearly full: a failure then is the memory limit's even when
/// the error itself could not be allocated (QuickJS throws `null` then).
fn near_limit(runtime: &Runtime, init: &ScriptInit) -> bool {
    let used = usize::try_from(runtime.memory_usage().malloc_size).unwrap_or(0);
    used.saturating_mul(10) >= init.memory_bytes.saturating_mul(9)
}

fn is_out_of_memory(message: &str) -> bool {
    message.contains("out of memory")
}

fn memory_message(init: &ScriptInit) -> String {
    format!(
        "the workflow script exceeded its memory limit ({} MiB heap); it was stopped",
        init.memory_bytes / (1024 * 1024)
    )
}

/// The message of a failed engine call: the pending exception, rendered.
fn describe(ctx: &Ctx<'_>, error: rquickjs::Error) -> String {
    match error {
        rquickjs::Error::Exception => render_value(&ctx.catch()),
        other => other.to_string(),
    }
}

/// Like [`describe`], without the stack (compile errors).
fn describe_brief(ctx: &Ctx<'_>, error: rquickjs::Error) -> String {
    let full = describe(ctx, error);
    full.lines().next().unwrap_or_default().to_string()
}

fn render_value(value: &JsValue<'_>) -> String {
    dsh_code_mode::render_thrown(value, false, "the script threw an unrenderable value")
}

#[cfg(test)]
mod tests {
    use super::default_label;

    #[test]
    fn labels_are_bounded_in_utf16_units() {
        assert_eq!(default_label("short\nsecond"), "short");
        let long = "Reply with exactly the word WF_CHILD_OK and nothing else.";
        assert_eq!(
            default_label(long),
            "Reply with exactly the word WF_CHILD_OK and not\u{2026}"
        );
        assert_eq!(default_label(&"x".repeat(48)), "x".repeat(48));
    }
}
