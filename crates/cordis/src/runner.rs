//! The `dynamicCordisRunner` service (upstream `cordis-host-runner`): the process-local
//! registry of dynamic plugins, their immutable packages and their runs.
//!
//! A plugin belongs to the session that defined it; every verb checks ownership, so one
//! session never sees or controls another's plugins. A run evaluates the package's host half
//! on its own engine thread under a child fiber of the runner's row: every tool the package
//! registers is an effect of that fiber, so stopping the run (or undefining the plugin, or
//! unloading the row) removes them all.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use dsh_kernel::{Context, EffectHandle};
use dsh_tools::ToolRegistry;
use serde_json::{Map, Value, json};

use crate::dynamic_tool::DynamicTool;
use crate::engine::{self, Limits, PackageHost, ToolSpec, Worker, WorkerLink};

/// How many console lines of a run are kept for `cordis_inspect_self`.
const CONSOLE_LINES: usize = 50;
/// Longer console lines are cut to this many characters.
const CONSOLE_LINE_CHARS: usize = 2000;

/// `cordis_run`'s `mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunMode {
    Run,
    Update,
}

impl RunMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RunMode::Run => "run",
            RunMode::Update => "update",
        }
    }
}

/// Which plugin `define` adds a package to.
#[derive(Clone, Debug)]
pub enum PluginChoice {
    New { id_prefix: String },
    Existing { plugin_id: String },
}

/// A `define` request.
#[derive(Clone, Debug)]
pub struct DefineRequest {
    pub session_id: String,
    pub plugin: PluginChoice,
    pub name: String,
    pub purpose: String,
    pub host: Option<String>,
    pub client: Option<String>,
}

/// What `define` recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct DefineReceipt {
    pub plugin_id: String,
    pub package_id: String,
    pub name: String,
    pub purpose: String,
    pub has_host_half: bool,
    pub has_client_half: bool,
}

/// A successful `run`.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReceipt {
    pub plugin_id: String,
    pub package_id: String,
    pub plugin_run_id: String,
    pub has_host_half: bool,
    /// Names of the tools the package registered while starting.
    pub tools: Vec<String>,
}

struct Package {
    package_id: String,
    name: String,
    purpose: String,
    host: Option<String>,
    client: Option<String>,
}

struct Attempt {
    plugin_run_id: String,
    package_id: String,
    failed: Option<String>,
}

struct ActiveRun {
    plugin_run_id: String,
    package_id: String,
    worker: Option<Worker>,
    fiber: Context,
    host: Arc<RunHost>,
}

struct PluginRecord {
    plugin_id: String,
    session_id: String,
    packages: Vec<Package>,
    current: Option<String>,
    next: Option<String>,
    run: Option<ActiveRun>,
    latest: Option<Attempt>,
    starting: bool,
}

#[derive(Default)]
struct State {
    plugins: Vec<PluginRecord>,
    next_plugin: u64,
    next_package: u64,
    next_run: u64,
}

/// The runner service. Cheap to share; all state sits behind one lock that is never held
/// across an `.await`.
pub struct DynamicPackages {
    ctx: Context,
    tools: Arc<ToolRegistry>,
    limits: Limits,
    state: Mutex<State>,
}

fn missing_plugin(plugin_id: &str) -> String {
    format!(
        "no dynamic plugin \"{plugin_id}\" in this session (it may have been removed, or lost when dsh restarted)"
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A parse failure of one half, with the hint a model needs to fix it.
fn parse_error(half: &str, message: &str) -> String {
    format!(
        "dynamic package `{half}` does not parse:\n{message}\n\
         The code is plain JavaScript (no TypeScript, JSX or import) and runs as the body of an async \
         function, so line numbers count one wrapper line; end it with `return {{ apply(ctx) {{ ... }} }}`."
    )
}

impl DynamicPackages {
    pub fn new(ctx: Context, tools: Arc<ToolRegistry>, limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            ctx,
            tools,
            limits,
            state: Mutex::new(State::default()),
        })
    }

    /// Records a new immutable package after syntax-checking its halves. Runs nothing.
    pub fn define(&self, request: DefineRequest) -> Result<DefineReceipt, String> {
        let name = request.name.trim().to_string();
        let purpose = request.purpose.trim().to_string();
        if name.is_empty() {
            return Err("cordis_define needs a non-empty `name`".into());
        }
        if purpose.is_empty() {
            return Err("cordis_define needs a non-empty `purpose`".into());
        }
        if request.host.is_none() && request.client.is_none() {
            return Err("cordis_define needs `code.host`, `code.client`, or both".into());
        }
        if let Some(code) = &request.host {
            engine::precheck(code).map_err(|m| parse_error("code.host", &m))?;
        }
        if let Some(code) = &request.client {
            engine::precheck(code).map_err(|m| parse_error("code.client", &m))?;
        }
        let mut state = lock(&self.state);
        let index = match &request.plugin {
            PluginChoice::New { id_prefix } => {
                let prefix = id_prefix.trim();
                if !(3..=6).contains(&prefix.len())
                    || !prefix.chars().all(|c| c.is_ascii_lowercase())
                {
                    return Err(
                        "cordis_define `plugin.idPrefix` must be 3-6 lowercase English letters"
                            .into(),
                    );
                }
                let plugin_id = loop {
                    state.next_plugin += 1;
                    let id = format!("{prefix}-{}", state.next_plugin);
                    if !state.plugins.iter().any(|p| p.plugin_id == id) {
                        break id;
                    }
                };
                state.plugins.push(PluginRecord {
                    plugin_id,
                    session_id: request.session_id.clone(),
                    packages: Vec::new(),
                    current: None,
                    next: None,
                    run: None,
                    latest: None,
                    starting: false,
                });
                state.plugins.len() - 1
            }
            PluginChoice::Existing { plugin_id } => state
                .plugins
                .iter()
                .position(|p| &p.plugin_id == plugin_id && p.session_id == request.session_id)
                .ok_or_else(|| missing_plugin(plugin_id))?,
        };
        state.next_package += 1;
        let package_id = format!("pkg-{}", state.next_package);
        let receipt = DefineReceipt {
            plugin_id: state.plugins[index].plugin_id.clone(),
            package_id: package_id.clone(),
            name: name.clone(),
            purpose: purpose.clone(),
            has_host_half: request.host.is_some(),
            has_client_half: request.client.is_some(),
        };
        state.plugins[index].packages.push(Package {
            package_id,
            name,
            purpose,
            host: request.host,
            client: request.client,
        });
        Ok(receipt)
    }

    /// Activates one exact package: stops the plugin's current run, evaluates the host half
    /// and runs its `apply`. The current version changes only when that succeeded.
    pub async fn run(
        &self,
        session_id: &str,
        plugin_id: &str,
        package_id: &str,
        mode: RunMode,
    ) -> Result<RunReceipt, String> {
        let (plugin_run_id, host_code, old) = {
            let mut state = lock(&self.state);
            state.next_run += 1;
            let plugin_run_id = format!("run-{}", state.next_run);
            let plugin = owned_mut(&mut state, session_id, plugin_id)?;
            let package = plugin
                .packages
                .iter()
                .find(|p| p.package_id == package_id)
                .ok_or_else(|| format!("plugin \"{plugin_id}\" has no package \"{package_id}\""))?;
            if package.client.is_some() {
                return Err(format!(
                    "package \"{package_id}\" has a client half, and this dsh has no browser client to run it; \
                     define a host-only package (code.host) instead"
                ));
            }
            let host_code = package.host.clone();
            match (mode, plugin.current.as_deref()) {
                (RunMode::Update, None) => {
                    return Err(format!(
                        "plugin \"{plugin_id}\" has no successful version yet; start \"{package_id}\" with mode \"run\""
                    ));
                }
                (RunMode::Update, Some(current)) if current == package_id => {
                    return Err(format!(
                        "package \"{package_id}\" is already current; use mode \"run\""
                    ));
                }
                (RunMode::Run, Some(current)) if current != package_id => {
                    return Err(format!(
                        "package \"{package_id}\" differs from current \"{current}\"; use mode \"update\""
                    ));
                }
                _ => {}
            }
            if plugin.starting {
                return Err(format!("plugin \"{plugin_id}\" is already starting"));
            }
            plugin.starting = true;
            plugin.next = Some(package_id.to_string());
            plugin.latest = Some(Attempt {
                plugin_run_id: plugin_run_id.clone(),
                package_id: package_id.to_string(),
                failed: None,
            });
            (plugin_run_id, host_code, plugin.run.take())
        };
        if let Some(old) = old {
            retract(old).await;
        }
        let fiber = self.ctx.child(format!("cordis-dynamic:{plugin_id}"));
        let host = Arc::new(RunHost {
            label: plugin_id.to_string(),
            fiber: fiber.clone(),
            tools: self.tools.clone(),
            registered: Mutex::new(Vec::new()),
            console: Mutex::new(VecDeque::new()),
        });
        let started = match &host_code {
            Some(code) => Worker::start(plugin_id, code, self.limits.clone(), host.clone())
                .await
                .map(Some),
            None => Ok(None),
        };
        let run = ActiveRun {
            plugin_run_id: plugin_run_id.clone(),
            package_id: package_id.to_string(),
            worker: None,
            fiber,
            host,
        };
        let orphan = {
            let mut state = lock(&self.state);
            match state.plugins.iter_mut().find(|p| p.plugin_id == plugin_id) {
                None => Some((run, started.ok().flatten())),
                Some(plugin) => {
                    plugin.starting = false;
                    return match started {
                        Ok(worker) => {
                            let tools = run.host.names();
                            plugin.current = Some(package_id.to_string());
                            plugin.next = None;
                            plugin.run = Some(ActiveRun { worker, ..run });
                            Ok(RunReceipt {
                                plugin_id: plugin_id.to_string(),
                                package_id: package_id.to_string(),
                                plugin_run_id,
                                has_host_half: host_code.is_some(),
                                tools,
                            })
                        }
                        Err(message) => {
                            run.fiber.dispose();
                            let message =
                                format!("{plugin_id}/{package_id} failed to start: {message}");
                            if let Some(latest) = &mut plugin.latest {
                                latest.failed = Some(message.clone());
                            }
                            Err(message)
                        }
                    };
                }
            }
        };
        // Undefined while starting: wind the new run down again.
        if let Some((run, worker)) = orphan {
            retract(ActiveRun { worker, ..run }).await;
        }
        Err("the dynamic plugin was removed while it was starting".into())
    }

    /// Stops the current run; the plugin and its packages stay. Stopping a stopped plugin
    /// succeeds.
    pub async fn stop(&self, session_id: &str, plugin_id: &str) -> Result<(), String> {
        let run = {
            let mut state = lock(&self.state);
            owned_mut(&mut state, session_id, plugin_id)?.run.take()
        };
        if let Some(run) = run {
            retract(run).await;
        }
        Ok(())
    }

    /// Stops the plugin if it runs and forgets it with every package. Returns whether it
    /// was running.
    pub async fn undefine(&self, session_id: &str, plugin_id: &str) -> Result<bool, String> {
        let record = {
            let mut state = lock(&self.state);
            let index = state
                .plugins
                .iter()
                .position(|p| p.plugin_id == plugin_id && p.session_id == session_id)
                .ok_or_else(|| missing_plugin(plugin_id))?;
            state.plugins.remove(index)
        };
        let was_running = record.run.is_some();
        if let Some(run) = record.run {
            retract(run).await;
        }
        Ok(was_running)
    }

    /// Every plugin of the session, summarized (`cordis_inspect_self` without ids).
    pub fn list(&self, session_id: &str) -> Vec<Value> {
        let state = lock(&self.state);
        state
            .plugins
            .iter()
            .filter(|p| p.session_id == session_id)
            .map(summary)
            .collect()
    }

    /// One plugin with its package summaries.
    pub fn inspect_plugin(&self, session_id: &str, plugin_id: &str) -> Result<Value, String> {
        let state = lock(&self.state);
        let plugin = owned(&state, session_id, plugin_id)?;
        let mut out = Map::new();
        out.insert("mode".into(), json!("plugin"));
        if let Value::Object(s) = summary(plugin) {
            out.extend(s);
        }
        let packages: Vec<Value> = plugin
            .packages
            .iter()
            .map(|p| {
                json!({
                    "packageId": p.package_id,
                    "name": p.name,
                    "purpose": p.purpose,
                    "hasHostHalf": p.host.is_some(),
                    "hasClientHalf": p.client.is_some(),
                    "isCurrent": plugin.current.as_deref() == Some(p.package_id.as_str()),
                    "isNext": plugin.next.as_deref() == Some(p.package_id.as_str()),
                })
            })
            .collect();
        out.insert("packages".into(), Value::Array(packages));
        Ok(Value::Object(out))
    }

    /// One exact package: its source and what its run did.
    pub fn inspect_package(
        &self,
        session_id: &str,
        plugin_id: &str,
        package_id: &str,
    ) -> Result<Value, String> {
        let state = lock(&self.state);
        let plugin = owned(&state, session_id, plugin_id)?;
        let package = plugin
            .packages
            .iter()
            .find(|p| p.package_id == package_id)
            .ok_or_else(|| {
                format!("dynamic package \"{package_id}\" does not exist on plugin \"{plugin_id}\"")
            })?;
        let active = plugin.run.as_ref().filter(|r| r.package_id == package_id);
        let failure = plugin
            .latest
            .as_ref()
            .filter(|a| a.package_id == package_id && active.is_none())
            .and_then(|a| a.failed.clone().map(|m| (a.plugin_run_id.clone(), m)));
        let mut code = Map::new();
        if let Some(h) = &package.host {
            code.insert("host".into(), json!(h));
        }
        if let Some(c) = &package.client {
            code.insert("client".into(), json!(c));
        }
        let host_status = match (&package.host, active, &failure) {
            (None, _, _) => "absent",
            (Some(_), Some(_), _) => "running",
            (Some(_), None, Some(_)) => "failed",
            (Some(_), None, None) => "stopped",
        };
        let mut host = Map::new();
        host.insert("status".into(), json!(host_status));
        host.insert("provides".into(), json!([]));
        host.insert("waitingFor".into(), json!([]));
        host.insert(
            "tools".into(),
            json!(active.map(|r| r.host.names()).unwrap_or_default()),
        );
        host.insert(
            "console".into(),
            json!(active.map(|r| r.host.console_lines()).unwrap_or_default()),
        );
        if let Some((run_id, message)) = &failure {
            host.insert(
                "error".into(),
                json!({ "pluginRunId": run_id, "message": message }),
            );
        }
        let client_status = if package.client.is_some() {
            "stopped"
        } else {
            "absent"
        };
        Ok(json!({
            "mode": "package",
            "plugin": summary(plugin),
            "packageId": package.package_id,
            "name": package.name,
            "purpose": package.purpose,
            "code": code,
            "runtime": {
                "state": state_of(plugin),
                "host": host,
                "client": { "status": client_status, "waitingFor": [] },
            },
        }))
    }

    /// A source-free reference to one plugin of the session (`@pluginId`): the base
    /// package (the current one, else the latest), its name and purpose, and the summary.
    pub fn reference(&self, session_id: &str, plugin_id: &str) -> Option<Value> {
        let state = lock(&self.state);
        let plugin = owned(&state, session_id, plugin_id).ok()?;
        let base = plugin
            .packages
            .iter()
            .find(|p| Some(p.package_id.as_str()) == plugin.current.as_deref())
            .or(plugin.packages.last())?;
        let mut out = Map::new();
        out.insert("pluginId".into(), json!(plugin.plugin_id));
        out.insert("packageId".into(), json!(base.package_id));
        out.insert("name".into(), json!(base.name));
        out.insert("purpose".into(), json!(base.purpose));
        if let Value::Object(s) = summary(plugin) {
            for (k, v) in s {
                if !out.contains_key(&k) {
                    out.insert(k, v);
                }
            }
        }
        Some(Value::Object(out))
    }

    /// Every running plugin of every session: `(pluginId, sessionId, tool names)`.
    pub fn running(&self) -> Vec<(String, String, Vec<String>)> {
        let state = lock(&self.state);
        state
            .plugins
            .iter()
            .filter_map(|p| {
                p.run
                    .as_ref()
                    .map(|r| (p.plugin_id.clone(), p.session_id.clone(), r.host.names()))
            })
            .collect()
    }

    /// Stops every run (the row unloads).
    pub fn shutdown(&self) {
        let runs: Vec<ActiveRun> = lock(&self.state)
            .plugins
            .iter_mut()
            .filter_map(|p| p.run.take())
            .collect();
        for run in runs {
            run.fiber.dispose();
            // Dropping the worker tells its thread to stop.
            drop(run.worker);
        }
    }
}

fn owned<'a>(
    state: &'a State,
    session_id: &str,
    plugin_id: &str,
) -> Result<&'a PluginRecord, String> {
    state
        .plugins
        .iter()
        .find(|p| p.plugin_id == plugin_id && p.session_id == session_id)
        .ok_or_else(|| missing_plugin(plugin_id))
}

fn owned_mut<'a>(
    state: &'a mut State,
    session_id: &str,
    plugin_id: &str,
) -> Result<&'a mut PluginRecord, String> {
    state
        .plugins
        .iter_mut()
        .find(|p| p.plugin_id == plugin_id && p.session_id == session_id)
        .ok_or_else(|| missing_plugin(plugin_id))
}

fn state_of(plugin: &PluginRecord) -> &'static str {
    if plugin.starting {
        return "starting";
    }
    if plugin.run.is_some() {
        return "running";
    }
    if plugin.latest.as_ref().is_some_and(|a| a.failed.is_some()) {
        return "failed";
    }
    if plugin.current.is_some() {
        "stopped"
    } else {
        "defined"
    }
}

/// The plugin summary every inspect mode shares (key order as upstream's).
fn summary(plugin: &PluginRecord) -> Value {
    let mut out = Map::new();
    out.insert("pluginId".into(), json!(plugin.plugin_id));
    let name = plugin
        .packages
        .iter()
        .find(|p| Some(p.package_id.as_str()) == plugin.current.as_deref())
        .or(plugin.packages.last())
        .map(|p| p.name.clone())
        .unwrap_or_default();
    out.insert("name".into(), json!(name));
    out.insert("packageCount".into(), json!(plugin.packages.len()));
    out.insert("state".into(), json!(state_of(plugin)));
    if let Some(current) = &plugin.current {
        out.insert("currentPackageId".into(), json!(current));
    }
    if let Some(next) = &plugin.next {
        out.insert("nextPackageId".into(), json!(next));
    }
    if let Some(run) = &plugin.run {
        out.insert(
            "activeRun".into(),
            json!({ "pluginRunId": run.plugin_run_id, "packageId": run.package_id }),
        );
    }
    Value::Object(out)
}

/// Winds one run down: the package's own disposers first, then every registration.
async fn retract(run: ActiveRun) {
    if let Some(worker) = run.worker {
        for error in worker.stop().await {
            tracing::warn!(target: "cordis", plugin = %run.host.label, "a disposer threw: {error}");
        }
    }
    run.fiber.dispose();
}

/// The runner side of one run: registers the package's tools under the run's fiber.
pub(crate) struct RunHost {
    label: String,
    fiber: Context,
    tools: Arc<ToolRegistry>,
    registered: Mutex<Vec<(String, EffectHandle)>>,
    console: Mutex<VecDeque<String>>,
}

impl RunHost {
    fn names(&self) -> Vec<String> {
        lock(&self.registered)
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn console_lines(&self) -> Vec<String> {
        lock(&self.console).iter().cloned().collect()
    }
}

impl PackageHost for RunHost {
    fn register(&self, spec: ToolSpec, link: Arc<WorkerLink>) -> Result<(), String> {
        let name = spec.name.clone();
        let tool = DynamicTool::new(spec, link, &self.label);
        let handle = self
            .tools
            .register(&self.fiber, Arc::new(tool))
            .map_err(|e| format!("cannot register tool \"{name}\": {e}"))?;
        lock(&self.registered).push((name, handle));
        Ok(())
    }

    fn unregister(&self, name: &str) {
        let found = {
            let mut registered = lock(&self.registered);
            registered
                .iter()
                .position(|(n, _)| n == name)
                .map(|i| registered.remove(i))
        };
        if let Some((_, handle)) = found {
            handle.dispose();
        }
    }

    fn log(&self, line: &str) {
        tracing::info!(target: "cordis", plugin = %self.label, "{line}");
        let mut console = lock(&self.console);
        if console.len() == CONSOLE_LINES {
            console.pop_front();
        }
        let line = match line.char_indices().nth(CONSOLE_LINE_CHARS) {
            Some((cut, _)) => format!("{}…", &line[..cut]),
            None => line.to_string(),
        };
        console.push_back(line);
    }
}
