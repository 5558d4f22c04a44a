//! The host inspect providers behind `cordis_inspect_list` / `cordis_inspect_query`: what
//! this process's runtime offers a dynamic package, described by us and read live where the
//! runtime can tell (which services are provided, which tools the agent sees, which
//! dynamic plugins run).

use dsh_kernel::Context;
use dsh_kernel::events::{EmitEvent, WaterfallEvent};
use dsh_prompt::SystemPrompt;
use dsh_tools::{PostExecute, PreExecute, ToolOutputEvent, ToolRegistry, ToolResultEvent};
use serde_json::{Value, json};

use crate::runner::DynamicPackages;

/// What a query may read.
pub struct QueryScope<'a> {
    pub runner: &'a DynamicPackages,
    pub tools: &'a ToolRegistry,
    /// The calling agent's context (scoped): whose tools and services are reported.
    pub ctx: &'a Context,
    pub session_id: &'a str,
}

fn exact_input(field: &str, description: &str) -> Value {
    json!({
        "type": "object",
        "properties": { field: { "type": "string", "description": description } },
        "additionalProperties": false
    })
}

fn empty_input() -> Value {
    json!({ "type": "object", "properties": {}, "additionalProperties": false })
}

fn manifest(id: &str, description: &str, method: &str, input: Value) -> Value {
    json!({
        "platform": "host",
        "id": id,
        "description": description,
        "methods": [{
            "name": method,
            "description": description,
            "inputSchema": input,
            "outputSchema": { "description": "JSON data described by this provider." }
        }]
    })
}

/// Every host provider's manifest (`cordis_inspect_list`). No client providers: this
/// build has no browser half.
pub fn manifests() -> Vec<Value> {
    vec![
        manifest(
            "Service",
            "Services of this process: a short directory, or one service with what a package can call on it.",
            "listService",
            exact_input(
                "service",
                "One service key; leave it out for the directory.",
            ),
        ),
        manifest(
            "Event",
            "Events of this process with their dispatch modes: a short directory, or one event.",
            "listEvents",
            exact_input("event", "One event name; leave it out for the directory."),
        ),
        manifest(
            "Builtin",
            "The globals a dynamic package's host half sees, with their signatures.",
            "listBuiltins",
            empty_input(),
        ),
        manifest(
            "Tool",
            "The tool schemas the calling agent sees right now, dynamic ones included.",
            "listTools",
            empty_input(),
        ),
        manifest(
            "Dynamic",
            "The dynamic plugins of this session that are running, with the tools each registered.",
            "listRunning",
            empty_input(),
        ),
    ]
}

struct ServiceEntry {
    key: &'static str,
    description: &'static str,
    running: bool,
    methods: Vec<(&'static str, &'static str)>,
}

fn services(scope: &QueryScope<'_>) -> Vec<ServiceEntry> {
    vec![
        ServiceEntry {
            key: "tools",
            description: "The tool registry. A package reaches it as ctx.tools (or ctx.get('tools')); a tool it \
                          registers is visible to every agent of this process until the package stops.",
            running: scope.ctx.get::<ToolRegistry>().is_some(),
            methods: vec![
                (
                    "register(definition: { name: string, description?: string, parameters?: JsonSchema, execute(args, call): unknown }): () => void",
                    "Registers a model-visible tool. execute may return a string (the result text), any JSON \
                     value (shown as JSON) or a promise of one; a throw becomes a tool error. Returns the \
                     disposer; stopping the package disposes it too.",
                ),
                (
                    "list(): string[]",
                    "The names of the tools this package registered.",
                ),
            ],
        },
        ServiceEntry {
            key: "systemPrompt",
            description: "System-prompt sections and runtime-context snapshots. Provided by the runtime; not \
                          reachable from a dynamic package in this build.",
            running: scope.ctx.get::<SystemPrompt>().is_some(),
            methods: Vec::new(),
        },
        ServiceEntry {
            key: "dynamicCordisRunner",
            description: "The registry of dynamic plugins, driven by the cordis_* tools. Not reachable from a \
                          dynamic package.",
            running: scope.ctx.get::<DynamicPackages>().is_some(),
            methods: Vec::new(),
        },
    ]
}

fn query_service(scope: &QueryScope<'_>, wanted: Option<&str>) -> Result<Value, String> {
    let all = services(scope);
    let Some(key) = wanted else {
        let rows: Vec<Value> = all
            .iter()
            .map(|s| {
                json!({
                    "key": s.key,
                    "running": s.running,
                    "injectable": !s.methods.is_empty(),
                    "methods": s.methods.iter().map(|(sig, _)| *sig).collect::<Vec<_>>(),
                })
            })
            .collect();
        return Ok(json!({ "mode": "directory", "services": rows }));
    };
    let s = all.iter().find(|s| s.key == key).ok_or_else(|| {
        format!(
            "no service \"{key}\" is described here; known: {}",
            all.iter().map(|s| s.key).collect::<Vec<_>>().join(", ")
        )
    })?;
    Ok(json!({
        "mode": "service",
        "service": {
            "key": s.key,
            "description": s.description,
            "running": s.running,
            "injectable": !s.methods.is_empty(),
            "access": if s.methods.is_empty() { Value::Null } else {
                json!({ "expression": format!("ctx.{}", s.key), "inject": [s.key] })
            },
            "methods": s.methods.iter().map(|(sig, d)| json!({ "signature": sig, "description": d })).collect::<Vec<_>>(),
        }
    }))
}

fn events() -> Vec<(&'static str, &'static str, &'static str)> {
    fn waterfall<E: WaterfallEvent>(d: &'static str) -> (&'static str, &'static str, &'static str) {
        (E::NAME, "waterfall", d)
    }
    fn emit<E: EmitEvent>(d: &'static str) -> (&'static str, &'static str, &'static str) {
        (E::NAME, "emit", d)
    }
    vec![
        waterfall::<PreExecute>(
            "Before a tool body runs: allow, deny or ask. Listeners scoped to an agent see only its calls.",
        ),
        waterfall::<dsh_tools::Execute>("Wraps a tool body; the innermost step runs the tool."),
        waterfall::<PostExecute>("After a tool body: accept, rewrite or block its result."),
        emit::<ToolResultEvent>("A call's final result (notification)."),
        emit::<ToolOutputEvent>("Streamed output of a running tool (notification)."),
    ]
}

fn query_event(wanted: Option<&str>) -> Result<Value, String> {
    let all = events();
    let note = "Dynamic packages cannot listen to events in this build; this is a description of the runtime.";
    let Some(name) = wanted else {
        let rows: Vec<Value> = all
            .iter()
            .map(|(n, m, _)| json!({ "name": n, "mode": m }))
            .collect();
        return Ok(json!({ "mode": "directory", "events": rows, "note": note }));
    };
    let (n, m, d) = all.iter().find(|(n, _, _)| *n == name).ok_or_else(|| {
        format!(
            "no event \"{name}\" is described here; known: {}",
            all.iter()
                .map(|(n, _, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    Ok(
        json!({ "mode": "event", "event": { "name": n, "mode": m, "description": d }, "note": note }),
    )
}

fn builtins() -> Value {
    json!({
        "builtins": [
            {
                "name": "ctx",
                "description": "The façade apply(ctx) receives.",
                "signatures": [
                    "ctx.tools.register(definition): () => void",
                    "ctx.tools.list(): string[]",
                    "ctx.get(name: string): unknown | undefined",
                    "ctx.effect(execute: () => (() => void) | void): () => void"
                ]
            },
            {
                "name": "harness",
                "description": "Registration helpers kept for packages written against upstream.",
                "signatures": [
                    "harness.defineTool(definition): definition",
                    "harness.registerTool(ctx, definition): () => void"
                ]
            },
            {
                "name": "console",
                "description": "Lines go to the dsh log and to cordis_inspect_self (last 50 of the run).",
                "signatures": ["console.log(...values): void", "console.error(...values): void"]
            }
        ],
        "absent": "No timers, modules, filesystem, network or process access: only the language and these globals."
    })
}

fn check_empty(input: Option<&Value>) -> Result<(), String> {
    match input {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(m)) if m.is_empty() => Ok(()),
        Some(_) => Err("this method takes no input".into()),
    }
}

fn exact(input: Option<&Value>, field: &str) -> Result<Option<String>, String> {
    match input {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => {
            if let Some(k) = m.keys().find(|k| k.as_str() != field) {
                return Err(format!(
                    "input field \"{k}\" is not accepted (only \"{field}\")"
                ));
            }
            match m.get(field) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("input field \"{field}\" must be a string")),
            }
        }
        Some(_) => Err("input must be an object".into()),
    }
}

/// Runs one query (`cordis_inspect_query`).
pub fn query(
    scope: &QueryScope<'_>,
    platform: &str,
    provider: &str,
    method: &str,
    input: Option<&Value>,
) -> Result<Value, String> {
    if platform == "client" {
        return Err(
            "no client inspect providers: this dsh has no browser page connected to dynamic packages".into(),
        );
    }
    let wrong_method = || format!("provider \"{provider}\" has no method \"{method}\"");
    match provider {
        "Service" if method == "listService" => {
            query_service(scope, exact(input, "service")?.as_deref())
        }
        "Event" if method == "listEvents" => query_event(exact(input, "event")?.as_deref()),
        "Builtin" if method == "listBuiltins" => {
            check_empty(input)?;
            Ok(builtins())
        }
        "Tool" if method == "listTools" => {
            check_empty(input)?;
            let tools: Vec<Value> = scope
                .tools
                .schemas(scope.ctx)
                .iter()
                .map(|s| {
                    json!({ "name": s.name, "description": s.description, "parameters": *s.parameters })
                })
                .collect();
            Ok(json!({ "tools": tools }))
        }
        "Dynamic" if method == "listRunning" => {
            check_empty(input)?;
            let rows: Vec<Value> = scope
                .runner
                .running()
                .into_iter()
                .filter(|(_, session, _)| session == scope.session_id)
                .map(|(plugin, _, tools)| json!({ "pluginId": plugin, "tools": tools }))
                .collect();
            Ok(json!({ "running": rows }))
        }
        "Service" | "Event" | "Builtin" | "Tool" | "Dynamic" => Err(wrong_method()),
        other => Err(format!(
            "no host inspect provider \"{other}\"; cordis_inspect_list names them"
        )),
    }
}
