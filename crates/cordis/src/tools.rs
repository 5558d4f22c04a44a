//! The model-facing tools (upstream `tool-cordis`): `cordis_inspect_list`,
//! `cordis_inspect_query`, `cordis_inspect_self`, `cordis_define`, `cordis_run`,
//! `cordis_stop`, `cordis_undefine`. Names and parameter schemas are upstream's; the
//! descriptions are ours.

use std::sync::Arc;

use dsh_kernel::{BoxError, BoxFuture};
use dsh_llm::ToolSchema;
use dsh_tools::{Tool, ToolOutput, ToolRegistry, ToolRunContext};
use serde_json::{Value, json};

use crate::inspect;
use crate::json::pretty;
use crate::runner::{DefineRequest, DynamicPackages, PluginChoice, RunMode};

/// Which verb a [`CordisTool`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    InspectList,
    InspectQuery,
    InspectSelf,
    Define,
    Run,
    Stop,
    Undefine,
}

impl Verb {
    pub const ALL: [Verb; 7] = [
        Verb::InspectList,
        Verb::InspectQuery,
        Verb::InspectSelf,
        Verb::Define,
        Verb::Run,
        Verb::Stop,
        Verb::Undefine,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Verb::InspectList => "cordis_inspect_list",
            Verb::InspectQuery => "cordis_inspect_query",
            Verb::InspectSelf => "cordis_inspect_self",
            Verb::Define => "cordis_define",
            Verb::Run => "cordis_run",
            Verb::Stop => "cordis_stop",
            Verb::Undefine => "cordis_undefine",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Verb::InspectList => {
                "List the read-only inspect providers of this dsh process (services, events, sandbox builtins, \
                 tools), each with its methods and their input and output schemas. Start here before writing a \
                 package, then pick a provider and method for cordis_inspect_query. Inspect methods describe the \
                 runtime; package code cannot call them."
            }
            Verb::InspectQuery => {
                "Run one read-only inspect method named by cordis_inspect_list (platform, provider, method; input \
                 must fit the method's schema). Use it to learn what a package can reach before cordis_define: \
                 the services and their methods, the events and their dispatch modes, the sandbox builtins, and \
                 the tools this agent sees. Service.listService and Event.listEvents without input give a short \
                 directory; name one service or event to get its full entry. Nothing here changes the runtime."
            }
            Verb::InspectSelf => {
                "Look at the dynamic plugins this session owns. Without ids: one summary per plugin. With \
                 pluginId: its version pointers, active run and package list. With pluginId and packageId: that \
                 package's source plus its runtime state (registered tools, console lines, last error). \
                 packageId needs pluginId. Read-only."
            }
            Verb::Define => {
                "Record a new immutable package of a dynamic plugin. kind:\"new\" with an idPrefix of 3-6 \
                 lowercase letters creates a plugin (the host picks the final pluginId); kind:\"existing\" with a \
                 pluginId adds a new version to that plugin, keeping the older ones. code.host is plain \
                 JavaScript, the body of an async function that returns a plugin such as `return { apply(ctx) { \
                 ctx.tools.register({ name, description, parameters, execute(args) { ... } }) } }`. Defining only \
                 checks the syntax and stores the source; nothing runs until cordis_run is called with the \
                 returned ids."
            }
            Verb::Run => {
                "Start one exact package of a dynamic plugin: its host half is evaluated and its apply(ctx) runs \
                 in a sandboxed engine with time and memory limits. mode:\"run\" for the first start, a restart \
                 of the current package, or a rollback to it; mode:\"update\" to switch from the current package \
                 to another one. Tools the package registers become callable from the next step. The current \
                 package changes only when the start succeeds; on failure read the error (or cordis_inspect_self) \
                 and define a fixed package on the same plugin."
            }
            Verb::Stop => {
                "Stop the running package of a dynamic plugin and remove everything it registered. The plugin, \
                 its packages and its current pointer stay, so it can be run again later. Stopping a stopped \
                 plugin is fine. Use cordis_undefine to delete it for good."
            }
            Verb::Undefine => {
                "Delete a dynamic plugin of this session for good: stop it if it runs, then forget every package \
                 and version pointer. Its ids are invalid afterwards. Use cordis_stop instead when the versions \
                 should stay available."
            }
        }
    }

    fn parameters(self) -> Value {
        let plugin_id = |d: &str| json!({"type": "string", "description": d});
        match self {
            Verb::InspectList => json!({"type": "object", "properties": {}}),
            Verb::InspectQuery => json!({
                "type": "object",
                "properties": {
                    "platform": {
                        "type": "string",
                        "description": "Where the provider runs: host (this process) or client (a browser page).",
                        "enum": ["host", "client"]
                    },
                    "provider": {"type": "string", "description": "A provider id from cordis_inspect_list."},
                    "method": {"type": "string", "description": "A method that provider declares."},
                    "input": {"description": "Optional input; it must fit the method's input schema."}
                },
                "required": ["platform", "provider", "method"]
            }),
            Verb::InspectSelf => json!({
                "type": "object",
                "properties": {
                    "pluginId": plugin_id("A pluginId from cordis_define; leave it out to list every plugin of this session."),
                    "packageId": plugin_id("A packageId of that plugin; with it, the package source and runtime state are returned.")
                }
            }),
            Verb::Define => json!({
                "type": "object",
                "properties": {
                    "plugin": {
                        "oneOf": [
                            {
                                "type": "object",
                                "additionalProperties": false,
                                "properties": {
                                    "kind": {"type": "string", "const": "new"},
                                    "idPrefix": {
                                        "type": "string",
                                        "description": "A meaningful prefix of 3-6 lowercase letters; the host appends a number."
                                    }
                                },
                                "required": ["kind", "idPrefix"]
                            },
                            {
                                "type": "object",
                                "additionalProperties": false,
                                "properties": {
                                    "kind": {"type": "string", "const": "existing"},
                                    "pluginId": {
                                        "type": "string",
                                        "description": "The exact id of a plugin of this session; the package is added to it."
                                    }
                                },
                                "required": ["kind", "pluginId"]
                            }
                        ]
                    },
                    "name": {"type": "string", "description": "A short readable name for the package."},
                    "purpose": {"type": "string", "description": "One sentence telling the user what the package is for."},
                    "code": {
                        "type": "object",
                        "additionalProperties": false,
                        "properties": {
                            "host": {"type": "string", "description": "Plain JavaScript: the body of a function returning the host-side plugin."},
                            "client": {"type": "string", "description": "Plain JavaScript: the body of a function returning the browser-side plugin."}
                        }
                    }
                },
                "required": ["plugin", "name", "purpose", "code"]
            }),
            Verb::Run => json!({
                "type": "object",
                "properties": {
                    "pluginId": plugin_id("The pluginId returned by cordis_define."),
                    "packageId": plugin_id("The exact package of that plugin to start."),
                    "mode": {
                        "type": "string",
                        "description": "run: first start, restart or rollback to the current package; update: switch to another package.",
                        "enum": ["run", "update"]
                    }
                },
                "required": ["pluginId", "packageId", "mode"]
            }),
            Verb::Stop => json!({
                "type": "object",
                "properties": {"pluginId": plugin_id("The dynamic plugin to stop.")},
                "required": ["pluginId"]
            }),
            Verb::Undefine => json!({
                "type": "object",
                "properties": {"pluginId": plugin_id("The dynamic plugin to delete.")},
                "required": ["pluginId"]
            }),
        }
    }
}

/// One cordis verb as a tool.
pub struct CordisTool {
    verb: Verb,
    schema: ToolSchema,
    runner: Arc<DynamicPackages>,
    tools: Arc<ToolRegistry>,
}

impl CordisTool {
    pub fn new(verb: Verb, runner: Arc<DynamicPackages>, tools: Arc<ToolRegistry>) -> Self {
        Self {
            verb,
            schema: ToolSchema {
                name: verb.name().into(),
                description: verb.description().into(),
                parameters: Arc::new(verb.parameters()),
            },
            runner,
            tools,
        }
    }
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// Checks `keys` are strings when present and `required` ones are there.
fn check_strings(args: &Value, keys: &[&str], required: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    if !args.is_object() {
        out.push("\"arguments\" must be an object".to_string());
        return out;
    }
    for key in required {
        if args.get(key).is_none() {
            out.push(format!("missing required property \"{key}\""));
        }
    }
    for key in keys {
        if let Some(v) = args.get(key)
            && !v.is_string()
        {
            out.push(format!("\"{key}\" must be a string"));
        }
    }
    out
}

fn validate_define(args: &Value) -> Vec<String> {
    let mut out = check_strings(
        args,
        &["name", "purpose"],
        &["plugin", "name", "purpose", "code"],
    );
    if let Some(plugin) = args.get("plugin") {
        match plugin.get("kind").and_then(Value::as_str) {
            Some("new") => {
                if !plugin.get("idPrefix").is_some_and(Value::is_string) {
                    out.push("\"plugin.idPrefix\" must be a string".into());
                }
                if let Some(map) = plugin.as_object()
                    && map.keys().any(|k| k != "kind" && k != "idPrefix")
                {
                    out.push("\"plugin\" of kind \"new\" takes only kind and idPrefix".into());
                }
            }
            Some("existing") => {
                if !plugin.get("pluginId").is_some_and(Value::is_string) {
                    out.push("\"plugin.pluginId\" must be a string".into());
                }
                if let Some(map) = plugin.as_object()
                    && map.keys().any(|k| k != "kind" && k != "pluginId")
                {
                    out.push("\"plugin\" of kind \"existing\" takes only kind and pluginId".into());
                }
            }
            _ => out.push(
                "\"plugin\" must be {kind: \"new\", idPrefix} or {kind: \"existing\", pluginId}"
                    .into(),
            ),
        }
    }
    if let Some(code) = args.get("code") {
        match code.as_object() {
            None => out.push("\"code\" must be an object".into()),
            Some(map) => {
                for (k, v) in map {
                    if k != "host" && k != "client" {
                        out.push(format!(
                            "\"code.{k}\" is not a declared property (additionalProperties: false)"
                        ));
                    } else if !v.is_string() {
                        out.push(format!("\"code.{k}\" must be a string"));
                    }
                }
            }
        }
    }
    out
}

/// The declared output schemas: `cordis_define`, `cordis_stop` and `cordis_undefine` return
/// typed handles; the inspection tools and `cordis_run` declare none (any JSON), as upstream.
fn output_schema(verb: Verb) -> Option<&'static Value> {
    use std::sync::LazyLock;
    fn object(properties: &[(&str, &str)]) -> Value {
        let required: Vec<&str> = properties.iter().map(|(k, _)| *k).collect();
        let props: serde_json::Map<String, Value> = properties
            .iter()
            .map(|(k, t)| (k.to_string(), json!({ "type": t })))
            .collect();
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": required,
            "properties": props,
        })
    }
    static DEFINE: LazyLock<Value> = LazyLock::new(|| {
        object(&[
            ("pluginId", "string"),
            ("packageId", "string"),
            ("name", "string"),
            ("purpose", "string"),
            ("hasHostHalf", "boolean"),
            ("hasClientHalf", "boolean"),
        ])
    });
    static STOP: LazyLock<Value> = LazyLock::new(|| object(&[("pluginId", "string")]));
    static UNDEFINE: LazyLock<Value> =
        LazyLock::new(|| object(&[("pluginId", "string"), ("wasRunning", "boolean")]));
    match verb {
        Verb::Define => Some(&DEFINE),
        Verb::Stop => Some(&STOP),
        Verb::Undefine => Some(&UNDEFINE),
        Verb::InspectList | Verb::InspectQuery | Verb::InspectSelf | Verb::Run => None,
    }
}

impl Tool for CordisTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn output_schema(&self) -> Option<&Value> {
        output_schema(self.verb)
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        let problems = match self.verb {
            Verb::InspectList => check_strings(args, &[], &[]),
            Verb::InspectQuery => {
                let mut out = check_strings(
                    args,
                    &["platform", "provider", "method"],
                    &["platform", "provider", "method"],
                );
                if let Some(p) = str_arg(args, "platform")
                    && p != "host"
                    && p != "client"
                {
                    out.push("\"platform\" must be one of: host, client".into());
                }
                out
            }
            Verb::InspectSelf => check_strings(args, &["pluginId", "packageId"], &[]),
            Verb::Define => validate_define(args),
            Verb::Run => {
                let mut out = check_strings(
                    args,
                    &["pluginId", "packageId", "mode"],
                    &["pluginId", "packageId", "mode"],
                );
                if let Some(m) = str_arg(args, "mode")
                    && m != "run"
                    && m != "update"
                {
                    out.push("\"mode\" must be one of: run, update".into());
                }
                out
            }
            Verb::Stop | Verb::Undefine => check_strings(args, &["pluginId"], &["pluginId"]),
        };
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("invalid arguments: {}", problems.join("; ")))
        }
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let verb = self.verb;
        let runner = self.runner.clone();
        let tools = self.tools.clone();
        Box::pin(async move {
            let Some(session_id) = ctx.session.as_ref().map(|s| s.id()) else {
                return Err("the cordis tools need a session-backed agent".into());
            };
            execute(verb, &runner, &tools, &session_id, args, &ctx).await
        })
    }
}

/// A JSON-valued result: pretty JSON text, the value for Code Mode.
fn json_output(ctx: &ToolRunContext, value: Value) -> ToolOutput {
    let text = pretty(&value);
    ctx.set_value(value);
    ToolOutput::text(text)
}

async fn execute(
    verb: Verb,
    runner: &DynamicPackages,
    tools: &ToolRegistry,
    session_id: &str,
    args: Value,
    ctx: &ToolRunContext,
) -> Result<ToolOutput, BoxError> {
    let arg = |key: &str| str_arg(&args, key).unwrap_or_default().to_string();
    match verb {
        Verb::InspectList => Ok(json_output(
            ctx,
            json!({ "providers": inspect::manifests() }),
        )),
        Verb::InspectQuery => {
            let (platform, provider, method) = (arg("platform"), arg("provider"), arg("method"));
            let data = inspect::query(
                &inspect::QueryScope {
                    runner,
                    tools,
                    ctx: &ctx.ctx,
                    session_id,
                },
                &platform,
                &provider,
                &method,
                args.get("input"),
            )?;
            Ok(json_output(
                ctx,
                json!({ "platform": platform, "provider": provider, "method": method, "data": data }),
            ))
        }
        Verb::InspectSelf => {
            let plugin_id = str_arg(&args, "pluginId");
            let package_id = str_arg(&args, "packageId");
            let value = match (plugin_id, package_id) {
                (None, Some(_)) => {
                    return Err("cordis_inspect_self: packageId needs pluginId".into());
                }
                (None, None) => json!({ "mode": "plugins", "plugins": runner.list(session_id) }),
                (Some(plugin), None) => runner.inspect_plugin(session_id, plugin)?,
                (Some(plugin), Some(package)) => {
                    runner.inspect_package(session_id, plugin, package)?
                }
            };
            Ok(json_output(ctx, value))
        }
        Verb::Define => {
            let plugin = &args["plugin"];
            let choice = if plugin["kind"] == "new" {
                PluginChoice::New {
                    id_prefix: str_arg(plugin, "idPrefix").unwrap_or_default().into(),
                }
            } else {
                PluginChoice::Existing {
                    plugin_id: str_arg(plugin, "pluginId").unwrap_or_default().into(),
                }
            };
            let code = &args["code"];
            let receipt = runner.define(DefineRequest {
                session_id: session_id.to_string(),
                plugin: choice,
                name: arg("name"),
                purpose: arg("purpose"),
                host: str_arg(code, "host").map(str::to_owned),
                client: str_arg(code, "client").map(str::to_owned),
            })?;
            ctx.set_value(json!({
                "pluginId": receipt.plugin_id,
                "packageId": receipt.package_id,
                "name": receipt.name,
                "purpose": receipt.purpose,
                "hasHostHalf": receipt.has_host_half,
                "hasClientHalf": receipt.has_client_half,
            }));
            let mut out = ToolOutput::text(format!(
                "Defined {}/{} ({}); it is not running yet. Use cordis_run to activate this Package.",
                receipt.plugin_id, receipt.package_id, receipt.name
            ));
            out.meta =
                Some(json!({ "pluginId": receipt.plugin_id, "packageId": receipt.package_id }));
            Ok(out)
        }
        Verb::Run => {
            let mode = if arg("mode") == "update" {
                RunMode::Update
            } else {
                RunMode::Run
            };
            let plugin_id = arg("pluginId");
            let package_id = arg("packageId");
            let receipt = runner
                .run(session_id, &plugin_id, &package_id, mode)
                .await?;
            ctx.set_value(json!({
                "status": "running",
                "pluginId": receipt.plugin_id,
                "packageId": receipt.package_id,
                "pluginRunId": receipt.plugin_run_id,
                "currentPackageId": receipt.package_id,
                "host": {
                    "status": if receipt.has_host_half { "running" } else { "absent" },
                    "provides": [],
                    "waitingFor": [],
                },
                "client": { "status": "absent", "waitingFor": [] },
            }));
            let mut text = format!(
                "{}/{} is running ({}).",
                receipt.plugin_id, receipt.package_id, receipt.plugin_run_id
            );
            if !receipt.tools.is_empty() {
                text.push_str(&format!(
                    " It registered these tools, callable from the next step: {}.",
                    receipt.tools.join(", ")
                ));
            }
            let mut out = ToolOutput::text(text);
            out.meta = Some(json!({
                "pluginId": receipt.plugin_id,
                "packageId": receipt.package_id,
                "pluginRunId": receipt.plugin_run_id,
            }));
            Ok(out)
        }
        Verb::Stop => {
            let plugin_id = arg("pluginId");
            runner.stop(session_id, &plugin_id).await?;
            ctx.set_value(json!({ "pluginId": plugin_id }));
            Ok(ToolOutput::text(format!(
                "Dynamic Plugin {plugin_id} is stopped; its definition and versions remain."
            )))
        }
        Verb::Undefine => {
            let plugin_id = arg("pluginId");
            let was_running = runner.undefine(session_id, &plugin_id).await?;
            ctx.set_value(json!({ "pluginId": plugin_id, "wasRunning": was_running }));
            Ok(ToolOutput::text(format!(
                "Removed dynamic Plugin {plugin_id} and all of its Packages."
            )))
        }
    }
}
