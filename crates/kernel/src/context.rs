//! The context every plugin receives: typed services, event registration and dispatch,
//! effects and tasks, optionally tagged with a scope.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use futures::future::{BoxFuture, join_all};

use crate::effects::{EffectHandle, Fiber};
use crate::error::{BoxError, KernelError};
use crate::events::{
    AsyncFn, DefaultFn, EmitEvent, EmitFn, EventBus, Hook, ListenOptions, Next, ParallelEvent,
    SerialEvent, WaterfallEvent, WaterfallFn, run_emit,
};
use crate::scope::Scope;

static NEXT_HOOK: AtomicU64 = AtomicU64::new(1);

struct ServiceEntry {
    value: Arc<dyn Any + Send + Sync>,
    owner: String,
}

struct Runtime {
    bus: EventBus,
    services: RwLock<HashMap<TypeId, ServiceEntry>>,
    tasks: AtomicU64,
    /// The plugins of loaded rows, by a key of their own (see [`Context::active_plugins`]).
    plugins: RwLock<Vec<(u64, String)>>,
}

/// A handle on the shared runtime, bound to the fiber (plugin instance or scope) that
/// registrations made through it belong to. Cheap to clone.
#[derive(Clone)]
pub struct Context {
    rt: Arc<Runtime>,
    fiber: Arc<Fiber>,
    scope: Option<Scope>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("fiber", &self.fiber.name())
            .field("scope", &self.scope)
            .finish()
    }
}

impl Context {
    /// A fresh runtime with its root context.
    pub fn new_root() -> Self {
        Self {
            rt: Arc::new(Runtime {
                bus: EventBus::default(),
                services: RwLock::new(HashMap::new()),
                tasks: AtomicU64::new(0),
                plugins: RwLock::new(Vec::new()),
            }),
            fiber: Fiber::new("root"),
            scope: None,
        }
    }

    /// The fiber registrations made through this context belong to.
    pub fn fiber(&self) -> &Arc<Fiber> {
        &self.fiber
    }

    /// The name of the owning plugin (fiber).
    pub fn owner(&self) -> &str {
        self.fiber.name()
    }

    pub fn scope(&self) -> Option<&Scope> {
        self.scope.as_ref()
    }

    /// A child fiber (e.g. one loaded plugin). Disposing `self`'s fiber disposes the child.
    pub fn child(&self, name: impl Into<String>) -> Context {
        let fiber = Fiber::new(name);
        let child = fiber.clone();
        // If our fiber is already gone, the child is disposed immediately as well.
        let _ = self.fiber.add("fiber", Box::new(move || child.dispose()));
        Context {
            rt: self.rt.clone(),
            fiber,
            scope: self.scope.clone(),
        }
    }

    /// A child fiber tagged with a new scope below the current one (e.g. an agent scope).
    pub fn create_scope(&self, name: impl Into<String>) -> Context {
        let mut ctx = self.child(name);
        ctx.scope = Some(match &self.scope {
            Some(parent) => parent.child(),
            None => Scope::new_root(),
        });
        ctx
    }

    /// The same fiber with an explicit scope tag (for dispatching or registering on behalf
    /// of a scope owned elsewhere).
    pub fn with_scope(&self, scope: Option<Scope>) -> Context {
        Context {
            rt: self.rt.clone(),
            fiber: self.fiber.clone(),
            scope,
        }
    }

    /// Unloads this context's fiber: every registration it made, in reverse order.
    pub fn dispose(&self) {
        self.fiber.dispose();
    }

    fn disposed_error(&self, what: &'static str) -> KernelError {
        KernelError::Disposed {
            plugin: self.owner().to_string(),
            what,
        }
    }

    // ---------------------------------------------------------------- services

    /// Provides service `T` until this fiber unloads (or the handle is disposed).
    pub fn provide<T: Any + Send + Sync>(
        &self,
        service: Arc<T>,
    ) -> Result<EffectHandle, KernelError> {
        let key = TypeId::of::<T>();
        {
            let mut services = self.rt.services.write().unwrap_or_else(|p| p.into_inner());
            if let Some(existing) = services.get(&key) {
                return Err(KernelError::DuplicateService {
                    service: std::any::type_name::<T>(),
                    owner: existing.owner.clone(),
                    plugin: self.owner().to_string(),
                });
            }
            services.insert(
                key,
                ServiceEntry {
                    value: service,
                    owner: self.owner().to_string(),
                },
            );
        }
        let rt = Arc::downgrade(&self.rt);
        self.fiber
            .add(
                "service",
                Box::new(move || {
                    if let Some(rt) = rt.upgrade() {
                        rt.services
                            .write()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&key);
                    }
                }),
            )
            .ok_or_else(|| self.disposed_error("a service"))
    }

    /// The current provider of service `T`, if any.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let services = self.rt.services.read().unwrap_or_else(|p| p.into_inner());
        services
            .get(&TypeId::of::<T>())
            .and_then(|e| e.value.clone().downcast::<T>().ok())
    }

    /// Like [`Context::get`], but a missing service is an error naming this plugin and `T`.
    pub fn require<T: Any + Send + Sync>(&self) -> Result<Arc<T>, KernelError> {
        self.get::<T>().ok_or_else(|| KernelError::MissingService {
            plugin: self.owner().to_string(),
            service: std::any::type_name::<T>(),
        })
    }

    /// Number of services currently provided.
    pub fn service_count(&self) -> usize {
        self.rt
            .services
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    // ---------------------------------------------------------------- listeners

    fn listen<F: ?Sized + Send + Sync + 'static>(
        &self,
        key: TypeId,
        callback: Arc<F>,
        options: ListenOptions,
    ) -> Result<EffectHandle, KernelError> {
        if self.fiber.is_disposed() {
            return Err(self.disposed_error("a listener"));
        }
        let slot = self.rt.bus.slot::<F>(key);
        let id = NEXT_HOOK.fetch_add(1, Ordering::Relaxed);
        let scope = self.scope.as_ref().map(Scope::id);
        slot.insert(
            Hook {
                id,
                scope,
                global: options.global,
                callback,
            },
            options.prepend,
        );
        self.rt.bus.listeners.fetch_add(1, Ordering::Relaxed);
        let rt = Arc::downgrade(&self.rt);
        self.fiber
            .add(
                "listener",
                Box::new(move || {
                    slot.remove(id);
                    if let Some(rt) = rt.upgrade() {
                        rt.bus.listeners.fetch_sub(1, Ordering::Relaxed);
                    }
                }),
            )
            .ok_or_else(|| self.disposed_error("a listener"))
    }

    /// Registers a notification listener.
    pub fn on_emit<E: EmitEvent>(
        &self,
        options: ListenOptions,
        f: impl Fn(&E::Payload) -> Result<(), BoxError> + Send + Sync + 'static,
    ) -> Result<EffectHandle, KernelError> {
        let cb: Arc<EmitFn<E>> = Arc::new(f);
        self.listen(TypeId::of::<E>(), cb, options)
    }

    /// Registers a serial listener.
    pub fn on_serial<E: SerialEvent>(
        &self,
        options: ListenOptions,
        f: impl for<'a> Fn(&'a E::Payload) -> BoxFuture<'a, Result<(), BoxError>>
        + Send
        + Sync
        + 'static,
    ) -> Result<EffectHandle, KernelError> {
        let cb: Arc<AsyncFn<E>> = Arc::new(f);
        self.listen(TypeId::of::<E>(), cb, options)
    }

    /// Registers a parallel listener.
    pub fn on_parallel<E: ParallelEvent>(
        &self,
        options: ListenOptions,
        f: impl for<'a> Fn(&'a E::Payload) -> BoxFuture<'a, Result<(), BoxError>>
        + Send
        + Sync
        + 'static,
    ) -> Result<EffectHandle, KernelError> {
        let cb: Arc<AsyncFn<E>> = Arc::new(f);
        self.listen(TypeId::of::<E>(), cb, options)
    }

    /// Registers a waterfall listener. It must either call `next.run().await` (delegate,
    /// possibly transforming the result) or return its own decision (short-circuit).
    pub fn on_waterfall<E: WaterfallEvent>(
        &self,
        options: ListenOptions,
        f: impl for<'a> Fn(&'a E::Payload, Next<'a, E>) -> BoxFuture<'a, Result<E::Output, BoxError>>
        + Send
        + Sync
        + 'static,
    ) -> Result<EffectHandle, KernelError> {
        let cb: Arc<WaterfallFn<E>> = Arc::new(f);
        self.listen(TypeId::of::<E>(), cb, options)
    }

    /// Total number of listeners registered in this runtime.
    pub fn listener_count(&self) -> usize {
        self.rt.bus.total_listeners()
    }

    // ---------------------------------------------------------------- dispatch

    /// The carrier used for dispatches through this context: its scope.
    fn carrier(&self) -> Option<&Scope> {
        self.scope.as_ref()
    }

    /// Notifies the listeners of `E` admitted by this context's scope. Failures are
    /// logged and contained.
    pub fn emit<E: EmitEvent>(&self, payload: &E::Payload) {
        if let Some(slot) = self.rt.bus.existing::<EmitFn<E>>(TypeId::of::<E>()) {
            let hooks = slot.snapshot();
            run_emit::<E>(&hooks, self.carrier(), payload);
        }
    }

    /// Awaits the listeners of `E` in order; the first error stops the dispatch.
    pub async fn serial<E: SerialEvent>(&self, payload: &E::Payload) -> Result<(), BoxError> {
        let Some(slot) = self.rt.bus.existing::<AsyncFn<E>>(TypeId::of::<E>()) else {
            return Ok(());
        };
        for cb in slot.select(self.carrier()) {
            cb(payload).await?;
        }
        Ok(())
    }

    /// Runs all listeners of `E` concurrently and awaits them all; returns the first
    /// failure (in registration order) once everything settled. Returns whether any listener
    /// participated.
    pub async fn parallel<E: ParallelEvent>(&self, payload: &E::Payload) -> Result<bool, BoxError> {
        let Some(slot) = self.rt.bus.existing::<AsyncFn<E>>(TypeId::of::<E>()) else {
            return Ok(false);
        };
        let callbacks = slot.select(self.carrier());
        if callbacks.is_empty() {
            return Ok(false);
        }
        let results = join_all(callbacks.iter().map(|cb| cb(payload))).await;
        for r in results {
            r?;
        }
        Ok(true)
    }

    /// Runs the waterfall of `E` with `default` as the innermost `next`.
    pub async fn waterfall<'a, E, D>(
        &self,
        payload: &'a E::Payload,
        default: &'a D,
    ) -> Result<E::Output, BoxError>
    where
        E: WaterfallEvent,
        D: Fn(&'a E::Payload) -> BoxFuture<'a, Result<E::Output, BoxError>> + Send + Sync + 'a,
    {
        let default: &'a DefaultFn<'a, E> = default;
        let chain = match self.rt.bus.existing::<WaterfallFn<E>>(TypeId::of::<E>()) {
            Some(slot) => slot.snapshot(),
            None => return default(payload).await,
        };
        Next::new(chain, self.scope.clone(), payload, default)
            .run()
            .await
    }

    // ---------------------------------------------------------------- tasks

    /// Spawns `future` on the current tokio runtime as an effect of this fiber: unloading
    /// the plugin aborts the task.
    pub fn spawn<F>(&self, future: F) -> Result<EffectHandle, KernelError>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if self.fiber.is_disposed() {
            return Err(self.disposed_error("a task"));
        }
        let rt = self.rt.clone();
        rt.tasks.fetch_add(1, Ordering::Relaxed);
        let guard = TaskGuard(Arc::downgrade(&rt));
        let handle = tokio::spawn(async move {
            let _guard = guard;
            future.await;
        });
        let abort = handle.abort_handle();
        self.fiber
            .add("task", Box::new(move || abort.abort()))
            .ok_or_else(|| self.disposed_error("a task"))
    }

    /// Number of spawned tasks that have not finished (or been aborted) yet.
    pub fn live_tasks(&self) -> u64 {
        self.rt.tasks.load(Ordering::Relaxed)
    }

    /// Records that plugin `name` is applied on this fiber, until the fiber unloads.
    pub(crate) fn record_active_plugin(&self, name: &str) {
        let key = NEXT_HOOK.fetch_add(1, Ordering::Relaxed);
        self.rt
            .plugins
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push((key, name.to_string()));
        let rt = Arc::downgrade(&self.rt);
        let _ = self.fiber.add(
            "active-plugin",
            Box::new(move || {
                if let Some(rt) = rt.upgrade() {
                    rt.plugins
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .retain(|(k, _)| *k != key);
                }
            }),
        );
    }

    /// The names of the plugins applied by loaded rows of this runtime (every tree, groups
    /// excluded), in load order; a plugin loaded by several rows or trees appears as often.
    pub fn active_plugins(&self) -> Vec<String> {
        self.rt
            .plugins
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(_, name)| name.clone())
            .collect()
    }

    /// Registers an arbitrary undo action as an effect of this fiber.
    pub fn effect(
        &self,
        label: &'static str,
        undo: impl FnOnce() + Send + 'static,
    ) -> Result<EffectHandle, KernelError> {
        self.fiber
            .add(label, Box::new(undo))
            .ok_or_else(|| self.disposed_error("an effect"))
    }
}

struct TaskGuard(std::sync::Weak<Runtime>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        if let Some(rt) = self.0.upgrade() {
            rt.tasks.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Boxes an `async` block as a listener future. Sugar for `Box::pin(async move { … })`.
#[macro_export]
macro_rules! boxed {
    ($($body:tt)*) => { ::std::boxed::Box::pin(async move { $($body)* }) };
}
