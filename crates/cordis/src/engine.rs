//! The host half's engine: one embedded QuickJS runtime per running package, owned by a
//! dedicated thread (a QuickJS runtime never leaves the thread that made it).
//!
//! The package code is the body of an async function that returns a plugin. The thread
//! evaluates it, calls `apply(ctx)` with a small façade, and then serves calls to the tools
//! the package registered until it is told to stop. Every entry into JavaScript (start,
//! each tool call, stop) gets its own compute slice, enforced by the interrupt handler, and
//! the runtime has a heap limit; a package that loops or allocates forever is stopped with
//! an error, never a hang or a panic.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rquickjs::{Context, Ctx, Function, Runtime, Value as JsValue};
use serde_json::Value;
use tokio::sync::oneshot;

/// Bounds of one package's engine.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The compute time of one entry into JavaScript (start, one tool call, stop).
    pub slice: Duration,
    /// The runtime's heap limit in bytes.
    pub memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            slice: Duration::from_millis(5000),
            memory_bytes: 64 * 1024 * 1024,
        }
    }
}

/// A tool a package registered (`ctx.tools.register`).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// What the engine needs from the runner: making a package's tools model-visible.
/// Called on the engine's thread, while JavaScript is running; must not block on the
/// engine itself.
pub trait PackageHost: Send + Sync + 'static {
    /// Registers `spec`, backed by `link`; an error is thrown into the package code.
    fn register(&self, spec: ToolSpec, link: Arc<WorkerLink>) -> Result<(), String>;
    /// Removes a tool the package registered earlier.
    fn unregister(&self, name: &str);
    /// One line the package printed with `console.*`.
    fn log(&self, line: &str);
}

enum Command {
    Call {
        name: String,
        arguments: Value,
        abort: Arc<AtomicBool>,
        reply: oneshot::Sender<Result<Value, String>>,
    },
    Stop {
        done: oneshot::Sender<Vec<String>>,
    },
}

/// The sending end of a running package: what its tools hold to call back into it.
pub struct WorkerLink {
    tx: Mutex<mpsc::Sender<Command>>,
    stopping: Arc<AtomicBool>,
}

impl WorkerLink {
    /// Calls the package's tool `name`. `Ok(Value::Null)` stands for `undefined`.
    pub async fn call(
        &self,
        name: &str,
        arguments: Value,
        abort: Arc<AtomicBool>,
    ) -> Result<Value, String> {
        let (reply, answer) = oneshot::channel();
        let sent = lock(&self.tx).send(Command::Call {
            name: name.to_string(),
            arguments,
            abort,
            reply,
        });
        if sent.is_err() {
            return Err(format!(
                "the package that registered \"{name}\" is no longer running"
            ));
        }
        answer.await.unwrap_or_else(|_| {
            Err(format!(
                "the package that registered \"{name}\" stopped before answering"
            ))
        })
    }
}

/// A running package's engine thread.
pub struct Worker {
    link: Arc<WorkerLink>,
}

impl Worker {
    /// Evaluates `code` and runs the plugin's `apply` on a new thread. Returns once apply
    /// settled; on failure the thread has already wound down.
    pub async fn start(
        label: &str,
        code: &str,
        limits: Limits,
        host: Arc<dyn PackageHost>,
    ) -> Result<Worker, String> {
        let (tx, rx) = mpsc::channel();
        let stopping = Arc::new(AtomicBool::new(false));
        let link = Arc::new(WorkerLink {
            tx: Mutex::new(tx),
            stopping: stopping.clone(),
        });
        let (ready_tx, ready_rx) = oneshot::channel();
        let thread_link = link.clone();
        let code = code.to_string();
        let spawned = std::thread::Builder::new()
            .name(format!("cordis-{label}"))
            .spawn(move || {
                serve(ServeArgs {
                    code,
                    limits,
                    host,
                    link: thread_link,
                    rx,
                    ready: ready_tx,
                    stopping,
                });
            });
        if let Err(e) = spawned {
            return Err(format!("could not start the package thread: {e}"));
        }
        match ready_rx.await {
            Ok(Ok(())) => Ok(Worker { link }),
            Ok(Err(message)) => Err(message),
            Err(_) => Err("the package thread exited while starting".into()),
        }
    }

    /// Runs the package's `ctx.effect` disposers and ends the thread. Returns what the
    /// disposers threw, if anything.
    pub async fn stop(self) -> Vec<String> {
        // A call still running is interrupted at its next check.
        self.link.stopping.store(true, Ordering::Relaxed);
        let (done, finished) = oneshot::channel();
        if lock(&self.link.tx).send(Command::Stop { done }).is_err() {
            return Vec::new();
        }
        finished.await.unwrap_or_default()
    }
}

impl Drop for Worker {
    /// A worker dropped without [`Worker::stop`] still ends its thread.
    fn drop(&mut self) {
        self.link.stopping.store(true, Ordering::Relaxed);
        let (done, _) = oneshot::channel();
        let _ = lock(&self.link.tx).send(Command::Stop { done });
    }
}

/// Syntax-checks a function body without running any of it: the body is compiled into an
/// uncalled function. The error is the engine's parse message.
pub fn precheck(code: &str) -> Result<(), String> {
    let runtime = Runtime::new().map_err(|e| format!("runtime: {e}"))?;
    runtime.set_memory_limit(64 * 1024 * 1024);
    runtime.set_max_stack_size(1024 * 1024);
    let deadline = Instant::now() + Duration::from_secs(5);
    runtime.set_interrupt_handler(Some(Box::new(move || Instant::now() > deadline)));
    let context = Context::full(&runtime).map_err(|e| format!("context: {e}"))?;
    context.with(|ctx| {
        let source = format!("(function () {{ return async () => {{\n{code}\n}}; }})");
        ctx.eval::<JsValue, _>(source)
            .map(|_| ())
            .map_err(|e| describe(&ctx, e))
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The façade and the bridge (`prelude.js`). Host functions come in as arguments.
const PRELUDE: &str = include_str!("prelude.js");

/// The interrupt handler's view: the deadline of the current entry and why it tripped.
struct Clock {
    deadline: Option<Instant>,
    abort: Option<Arc<AtomicBool>>,
    stopping: Arc<AtomicBool>,
    tripped: Option<Trip>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trip {
    Slice,
    Cancelled,
    Stopping,
}

impl Clock {
    fn over(&mut self) -> bool {
        if self.stopping.load(Ordering::Relaxed) {
            self.tripped = Some(Trip::Stopping);
            return true;
        }
        if self
            .abort
            .as_ref()
            .is_some_and(|a| a.load(Ordering::Relaxed))
        {
            self.tripped = Some(Trip::Cancelled);
            return true;
        }
        if self.deadline.is_some_and(|d| Instant::now() > d) {
            self.tripped = Some(Trip::Slice);
            return true;
        }
        false
    }
}

#[derive(Default)]
struct Shared {
    started: Option<Result<(), String>>,
    settled: HashMap<u64, Result<String, String>>,
}

struct ServeArgs {
    code: String,
    limits: Limits,
    host: Arc<dyn PackageHost>,
    link: Arc<WorkerLink>,
    rx: mpsc::Receiver<Command>,
    ready: oneshot::Sender<Result<(), String>>,
    stopping: Arc<AtomicBool>,
}

/// The engine thread: start, serve calls, stop.
fn serve(args: ServeArgs) {
    let ServeArgs {
        code,
        limits,
        host,
        link,
        rx,
        ready,
        stopping,
    } = args;
    // A metered heap: a package holding more than its limit is stopped at an interrupt
    // point (QuickJS's own allocator limit sits higher, as a backstop).
    let (runtime, heap) = match dsh_code_mode::metered_runtime(limits.memory_bytes) {
        Ok(pair) => pair,
        Err(e) => {
            let _ = ready.send(Err(format!("runtime: {e}")));
            return;
        }
    };
    runtime.set_max_stack_size(1024 * 1024);
    let clock = Arc::new(Mutex::new(Clock {
        deadline: None,
        abort: None,
        stopping,
        tripped: None,
    }));
    {
        let clock = clock.clone();
        let heap = heap.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || heap.over() || lock(&clock).over())));
    }
    let context = match Context::full(&runtime) {
        Ok(c) => c,
        Err(e) => {
            let _ = ready.send(Err(format!("context: {e}")));
            return;
        }
    };
    let shared = Arc::new(Mutex::new(Shared::default()));
    let engine = Engine {
        runtime: &runtime,
        context: &context,
        clock: &clock,
        limits: &limits,
        heap: &heap,
    };

    let started = engine.enter(None, |ctx| {
        install(&ctx, &shared, &host, &link)?;
        let source = format!("(async () => {{\n{code}\n}})()");
        let promise: JsValue = ctx.eval(source)?;
        let start: Function = ctx.globals().get("__cordis_start")?;
        start.call::<_, ()>((promise,))
    });
    let started = started.and_then(|()| {
        lock(&shared)
            .started
            .clone()
            .unwrap_or_else(|| {
                Err(
                    "the host half's apply is waiting on a promise nothing can settle \
                 (packages have no timers or I/O of their own)"
                        .into(),
                )
            })
            .map_err(|m| engine.classify(m))
    });
    if let Err(message) = started {
        let _ = engine.enter(None, |ctx| {
            let stop: Function = ctx.globals().get("__cordis_stop")?;
            stop.call::<_, Vec<String>>(())
        });
        let _ = ready.send(Err(message));
        return;
    }
    if ready.send(Ok(())).is_err() {
        return;
    }

    let mut next_id = 0u64;
    while let Ok(command) = rx.recv() {
        match command {
            Command::Call {
                name,
                arguments,
                abort,
                reply,
            } => {
                next_id += 1;
                let id = next_id;
                let json = dsh_kernel::json::to_string(&arguments);
                let entered = engine.enter(Some(abort), |ctx| {
                    let invoke: Function = ctx.globals().get("__cordis_invoke")?;
                    invoke.call::<_, ()>((id, name.as_str(), json))
                });
                let settled = lock(&shared).settled.remove(&id);
                let answer = match (entered, settled) {
                    (Err(message), _) => Err(message),
                    (Ok(()), Some(Ok(payload))) if payload.is_empty() => Ok(Value::Null),
                    (Ok(()), Some(Ok(payload))) => serde_json::from_str(&payload).map_err(|_| {
                        format!("dynamic tool \"{name}\" returned a value that is not JSON")
                    }),
                    (Ok(()), Some(Err(message))) => Err(engine.classify(message)),
                    (Ok(()), None) => Err(format!(
                        "dynamic tool \"{name}\" returned a promise that never settled \
                         (packages have no timers or I/O of their own)"
                    )),
                };
                let _ = reply.send(answer);
            }
            Command::Stop { done } => {
                lock(&clock).stopping.store(false, Ordering::Relaxed);
                let errors = engine
                    .enter(None, |ctx| {
                        let stop: Function = ctx.globals().get("__cordis_stop")?;
                        stop.call::<_, Vec<String>>(())
                    })
                    .unwrap_or_else(|e| vec![e]);
                let _ = done.send(errors);
                return;
            }
        }
    }
}

struct Engine<'a> {
    runtime: &'a Runtime,
    context: &'a Context,
    clock: &'a Mutex<Clock>,
    limits: &'a Limits,
    heap: &'a dsh_code_mode::Heap,
}

impl Engine<'_> {
    /// One entry into JavaScript: run `f`, then every pending job, within one slice.
    fn enter<T>(
        &self,
        abort: Option<Arc<AtomicBool>>,
        f: impl for<'js> FnOnce(Ctx<'js>) -> rquickjs::Result<T>,
    ) -> Result<T, String> {
        {
            let mut c = lock(self.clock);
            c.deadline = Some(Instant::now() + self.limits.slice);
            c.abort = abort;
            c.tripped = None;
        }
        let result = self
            .context
            .with(|ctx| f(ctx.clone()).map_err(|e| describe(&ctx, e)));
        let job_error = if result.is_ok() {
            dsh_code_mode::run_pending_jobs(self.runtime, render_value)
        } else {
            None
        };
        let tripped = {
            let mut c = lock(self.clock);
            c.deadline = None;
            c.abort = None;
            c.tripped.take()
        };
        if let Some(trip) = tripped {
            return Err(match trip {
                Trip::Slice => format!(
                    "the package ran past its {}ms compute budget and was interrupted",
                    self.limits.slice.as_millis()
                ),
                Trip::Cancelled => "the call was cancelled".into(),
                Trip::Stopping => "the package is stopping".into(),
            });
        }
        match (result, job_error) {
            (Err(m), _) | (Ok(_), Some(m)) => Err(self.classify(m)),
            (Ok(v), None) => Ok(v),
        }
    }

    /// An exception text, with the heap limit named when that is what was hit.
    fn classify(&self, message: String) -> String {
        if message.contains("out of memory") || self.heap.over() {
            format!(
                "the package ran out of memory ({} MiB heap limit)",
                self.limits.memory_bytes / (1024 * 1024)
            )
        } else {
            message
        }
    }
}

/// The host functions handed to the prelude.
fn install<'js>(
    ctx: &Ctx<'js>,
    shared: &Arc<Mutex<Shared>>,
    host: &Arc<dyn PackageHost>,
    link: &Arc<WorkerLink>,
) -> rquickjs::Result<()> {
    let h = host.clone();
    let l = link.clone();
    let register = Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>,
              name: String,
              description: String,
              schema: String|
              -> rquickjs::Result<()> {
            let parameters: Value = serde_json::from_str(&schema).unwrap_or(Value::Null);
            h.register(
                ToolSpec {
                    name,
                    description,
                    parameters,
                },
                l.clone(),
            )
            .map_err(|message| rquickjs::Exception::throw_message(&ctx, &message))
        },
    )?;
    let h = host.clone();
    let unregister = Function::new(ctx.clone(), move |name: String| h.unregister(&name))?;
    let h = host.clone();
    let log = Function::new(ctx.clone(), move |line: String| h.log(&line))?;
    let s = shared.clone();
    let done = Function::new(ctx.clone(), move |ok: bool, message: String| {
        lock(&s).started = Some(if ok { Ok(()) } else { Err(message) });
    })?;
    let s = shared.clone();
    let settle = Function::new(ctx.clone(), move |id: u64, ok: bool, payload: String| {
        lock(&s)
            .settled
            .insert(id, if ok { Ok(payload) } else { Err(payload) });
    })?;
    let prelude: Function = ctx.eval(PRELUDE)?;
    prelude.call::<_, ()>((register, unregister, log, done, settle))
}

/// The message of a failed engine call: the pending exception, rendered.
fn describe(ctx: &Ctx<'_>, error: rquickjs::Error) -> String {
    match error {
        rquickjs::Error::Exception => render_value(&ctx.catch()),
        other => other.to_string(),
    }
}

fn render_value(value: &JsValue<'_>) -> String {
    dsh_code_mode::render_thrown(
        value,
        true,
        "the package threw a value that is not an Error",
    )
}
