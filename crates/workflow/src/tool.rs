//! `@deepseek-ai/dsh-tool-workflow`: the model-facing `workflow` tool. A root call (not
//! one made from inside a Code Mode program) records the run in the caller's log between
//! its `tool/call` and `tool/result`: `tool-workflow/run-start`, one
//! `tool-workflow/agent-start` / `agent-end` pair per child, `tool-workflow/run-end`.

pub(crate) use dsh_tools::text::{utf16_len, utf16_prefix};
use std::sync::{Arc, Mutex};

use dsh_agent::Agents;
use dsh_kernel::{BoxError, BoxFuture, Context};
use dsh_llm::ToolSchema;
use dsh_session::LiveSession;
use dsh_tools::{ObjectSchema, Prop, Tool, ToolOutput, ToolRunContext};
use serde_json::{Map, Value, json};

use crate::engine::{
    AgentOutcome, AgentStartInfo, RunStop, StartSpec, WorkflowEngine, WorkflowObserver,
    WorkflowResult,
};
use crate::meta::Meta;

const DESCRIPTION: &str = "Run a workflow: a JavaScript script that coordinates many subagents. \
Reach for it when the work splits into many independent pieces (a review of many files, a \
migration, research from several angles, cross-checking findings) and the coordination is \
easier to write as code than to delegate call by call.\n\n\
Arguments: `meta` is plain JSON naming the workflow: `name` (short, kebab-case) and \
`description` are required; `whenToUse` (string) and `phases` (a list of `{title, detail?, \
provider?, model?}`) are optional. `script` is only the body of an async JavaScript \
function (plain JavaScript, not TypeScript; do not declare meta in it). Top-level `await` \
works; finish with `return <value>`, and that value, which must be plain JSON, is the \
tool's result. `args` (optional JSON object) is handed to the script as the global `args`.\n\n\
Available in the script:\n\
- `agent(prompt, opts?)` runs one subagent to the end and resolves to its final text, or, \
with `opts.schema` (an object JSON Schema limited to type, properties, required, \
additionalProperties, items, enum, const and oneOf), to the validated object. It resolves \
to `null` if the child fails, so filter results with `.filter(Boolean)`. Further options: \
`label` (display name), `phase` (progress group), `provider` and `model` (route overrides, \
each usable alone). Any other option, such as `effort`, `isolation` or `agentType`, is an \
error.\n\
- `pipeline(items, ...stages)` sends every item through the stages on its own, without \
waiting for the other items between stages; a stage is called with `(prev, item, index)`. \
If a stage throws, that item becomes `null` and skips its later stages. Prefer it for \
multi-step work.\n\
- `parallel(thunks)` runs functions without arguments at the same time and waits for all \
of them; a thunk that throws gives `null`. Use it only when a step needs every earlier \
result at once.\n\
- `phase(title)` opens a progress phase; `log(message)` reports progress.\n\n\
Misusing a hook (wrong arguments, an unknown option, an unsupported schema, a cap reached) \
always ends the whole script; it is never turned into a `null` item.\n\n\
Limits: the number of subagents running at once and in total is capped. The script has no \
filesystem, network, timers or Node.js APIs: the subagents do the work, the script only \
coordinates. The call runs in the foreground and returns when the script has finished.";

/// The tool's settings.
#[derive(Clone, Debug)]
pub struct WorkflowToolConfig {
    pub tool_name: String,
    pub max_result_chars: usize,
    /// Whether the tool offers `run_in_background` (upstream 0.2's `enableRunInBackground`).
    pub enable_run_in_background: bool,
}

impl Default for WorkflowToolConfig {
    fn default() -> Self {
        Self {
            tool_name: "workflow".into(),
            max_result_chars: 50_000,
            enable_run_in_background: true,
        }
    }
}

fn s(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

/// The parameter schema (upstream's shape; our descriptions); `run_in_background` only
/// when the row offers it.
fn parameters(background: bool) -> Value {
    let mut schema = json!({
        "type": "object",
        "properties": {
            "script": s("The body of the workflow's async function, in plain JavaScript (top-level await works; no meta declaration; end with `return <json-value>`)."),
            "meta": {
                "type": "object",
                "description": "The workflow's identity, as plain JSON (not code).",
                "additionalProperties": true,
                "properties": {
                    "name": s("A short kebab-case name for the workflow."),
                    "description": s("One line saying what the workflow does."),
                    "whenToUse": s("Optional: when this workflow is the right tool."),
                    "phases": {
                        "type": "array",
                        "description": "Optional: the phases the script opens with phase().",
                        "items": {
                            "type": "object",
                            "additionalProperties": true,
                            "properties": {
                                "title": s("The title phase() is called with."),
                                "detail": s("Optional: one line about the phase."),
                                "provider": s("Optional: which provider the phase's agents are planned to use (a note only; agent() takes its own `provider` option)."),
                                "model": s("Optional: which model the phase's agents are planned to use (a note only; agent() takes its own `model` option).")
                            },
                            "required": ["title"]
                        }
                    }
                },
                "required": ["name", "description"]
            },
            "args": {
                "type": "object",
                "description": "Optional JSON input, available to the script as the global `args` (put a list inside a field, e.g. {\"items\": [...]}).",
                "additionalProperties": true
            },
            "run_in_background": {
                "type": "boolean",
                "description": "Start the workflow as a background job and get its job id at once; its return value comes with the notice that it finished (job_output reads it, job_kill stops it)."
            }
        },
        "required": ["script", "meta"]
    });
    if !background && let Some(props) = schema["properties"].as_object_mut() {
        props.remove("run_in_background");
    }
    schema
}

/// Argument checks as the schema states them (open objects); the engine then checks `meta`
/// by name (unknown keys, empty strings) with its own texts.
fn validator(background: bool) -> ObjectSchema {
    let phase = ObjectSchema::new()
        .required("title", Prop::string(""))
        .optional("detail", Prop::string(""))
        .optional("provider", Prop::string(""))
        .optional("model", Prop::string(""));
    let meta = ObjectSchema::new()
        .required("name", Prop::string(""))
        .required("description", Prop::string(""))
        .optional("whenToUse", Prop::string(""))
        .optional("phases", Prop::array("", Prop::Object(phase)));
    let schema = ObjectSchema::new()
        .required("script", Prop::string(""))
        .required("meta", Prop::Object(meta))
        .optional("args", Prop::Object(ObjectSchema::new()));
    if background {
        schema.optional("run_in_background", Prop::boolean(""))
    } else {
        schema
    }
}

/// `JSON.stringify(value, null, 2)`.
pub(crate) fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".into())
}

/// The success text: headline, then the return value (clipped to `max` UTF-16 units).
pub fn render_result(name: &str, agents: u64, value: &Value, max: usize) -> String {
    let rendered = pretty(value);
    let len = utf16_len(&rendered);
    let clipped = if len > max {
        format!(
            "{}\n\u{2026} [truncated: {} more characters]",
            utf16_prefix(&rendered, max),
            len - max
        )
    } else {
        rendered
    };
    format!(
        "workflow \"{name}\" completed ({agents} agent{}).\nReturn value:\n{clipped}",
        if agents == 1 { "" } else { "s" }
    )
}

/// The error text of a run that did not complete.
pub fn stop_reason_error(result: &WorkflowResult) -> Option<String> {
    match result.stop_reason {
        RunStop::Completed => None,
        RunStop::Cancelled => Some(match &result.error {
            Some(e) => format!("workflow run was cancelled ({e})"),
            None => "workflow run was cancelled".into(),
        }),
        RunStop::Error => Some(format!(
            "workflow run failed: {}",
            result.error.as_deref().unwrap_or("unknown error")
        )),
    }
}

/// Appends the `tool-workflow/*` records to the caller's log. A failed append stops the
/// records of that run (with a warning).
struct Recorder {
    session: Arc<LiveSession>,
    run_id: Mutex<Option<String>>,
}

impl Recorder {
    fn append(&self, kind: &str, data: Value) {
        if let Err(e) = self.session.append(kind, data, None) {
            tracing::warn!(
                "tool-workflow: disabled durable record after {kind} append failed: {e}"
            );
            *self.run_id.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
    }

    fn run_id(&self) -> Option<String> {
        self.run_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn finish(&self, run_id: &str, stop: RunStop) {
        if self.run_id().as_deref() == Some(run_id) {
            self.append(
                "tool-workflow/run-end",
                json!({"runId": run_id, "stopReason": stop.as_str()}),
            );
        }
        *self.run_id.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

impl WorkflowObserver for Recorder {
    fn run_start(&self, run_id: &str, meta: &Meta) {
        *self.run_id.lock().unwrap_or_else(|p| p.into_inner()) = Some(run_id.to_string());
        self.append(
            "tool-workflow/run-start",
            json!({"runId": run_id, "name": meta.name}),
        );
    }

    fn phase(&self, title: &str) {
        tracing::debug!("workflow phase: {title}");
    }

    fn log(&self, message: &str) {
        tracing::debug!("workflow log: {message}");
    }

    fn agent_start(&self, info: &AgentStartInfo) {
        let Some(run_id) = self.run_id() else { return };
        let mut data = Map::new();
        data.insert("runId".into(), run_id.into());
        data.insert("seq".into(), info.seq.into());
        data.insert("label".into(), info.label.clone().into());
        if let Some(p) = &info.phase {
            data.insert("phase".into(), p.clone().into());
        }
        data.insert("childId".into(), info.child_id.clone().into());
        self.append("tool-workflow/agent-start", Value::Object(data));
    }

    fn agent_end(&self, seq: u64, outcome: AgentOutcome) {
        let Some(run_id) = self.run_id() else { return };
        self.append(
            "tool-workflow/agent-end",
            json!({"runId": run_id, "seq": seq, "outcome": outcome.as_str()}),
        );
    }
}

/// Narration of a nested call (not recorded).
struct Quiet;
impl WorkflowObserver for Quiet {}

/// The `workflow` tool.
pub struct WorkflowTool {
    schema: ToolSchema,
    params: ObjectSchema,
    config: WorkflowToolConfig,
    engine: Arc<WorkflowEngine>,
    ctx: Context,
}

impl WorkflowTool {
    pub fn new(config: WorkflowToolConfig, engine: Arc<WorkflowEngine>, ctx: Context) -> Self {
        Self {
            schema: ToolSchema {
                name: config.tool_name.clone(),
                description: DESCRIPTION.into(),
                parameters: parameters(config.enable_run_in_background).into(),
            },
            params: validator(config.enable_run_in_background),
            config,
            engine,
            ctx,
        }
    }
}

/// Whether a call is a root call (not made from inside a Code Mode program, whose
/// sub-calls are named `<root>:code:<n>`).
fn is_root_call(call_id: &str) -> bool {
    !call_id.contains(":code:")
}

impl Tool for WorkflowTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    /// `{runId, agentsStarted, result}`, `result` any JSON.
    fn output_schema(&self) -> Option<&Value> {
        static S: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
            json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["runId", "agentsStarted", "result"],
                "properties": {
                    "runId": {"type": "string"},
                    "agentsStarted": {"type": "integer"},
                    "result": {},
                },
            })
        });
        Some(&S)
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        self.params.validate(args)
    }

    fn execute(
        &self,
        args: Value,
        run: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let (engine, ctx, max, background_allowed) = (
            self.engine.clone(),
            self.ctx.clone(),
            self.config.max_result_chars,
            self.config.enable_run_in_background,
        );
        Box::pin(async move {
            let parent = run
                .session
                .as_ref()
                .and_then(|s| ctx.get::<Agents>()?.get(&s.id()))
                .ok_or("workflow tool requires a calling agent (exec.agent was undefined)")?;
            let recorder = is_root_call(&run.call_id).then(|| {
                Arc::new(Recorder {
                    session: parent.session().clone(),
                    run_id: Mutex::new(None),
                })
            });
            let observer: Arc<dyn WorkflowObserver> = match &recorder {
                Some(r) => r.clone(),
                None => Arc::new(Quiet),
            };
            let spec = StartSpec {
                script: args
                    .get("script")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                meta: args.get("meta").cloned().unwrap_or(Value::Null),
                args: args.get("args").cloned(),
                subagent_provider: None,
                max_total_agents: None,
                parent,
                observer: Some(observer),
            };
            let background = args.get("run_in_background").and_then(Value::as_bool) == Some(true);
            if background && !background_allowed {
                return Err("run_in_background is switched off in this setup (tool-workflow enableRunInBackground: false); run the workflow in the foreground instead".into());
            }
            let jobs = if background {
                let jobs = ctx.get::<dsh_jobs::JobRegistry>().ok_or(
                    "run_in_background needs the job plugins, which are not loaded: add @deepseek-ai/dsh-jobs and @deepseek-ai/dsh-tool-jobs to the composition, or run the workflow in the foreground",
                )?;
                jobs.preflight(Some(&spec.parent))?;
                Some(jobs)
            } else {
                None
            };
            let owner = spec.parent.clone();
            let workflow = engine.start(spec).await?;
            if let Some(jobs) = jobs {
                return start_job(&jobs, owner, workflow, recorder, &run, max);
            }
            let result = tokio::select! {
                r = workflow.result() => r,
                () = run.cancel.cancelled() => {
                    workflow.cancel("parent step aborted");
                    workflow.result().await
                }
            };
            workflow.dispose().await;
            if let Some(r) = &recorder {
                r.finish(&workflow.id, result.stop_reason);
            }
            if let Some(error) = stop_reason_error(&result) {
                return Err(error.into());
            }
            run.set_value(json!({
                "runId": workflow.id,
                "agentsStarted": result.agents_started,
                "result": result.value,
            }));
            Ok(ToolOutput::text(render_result(
                &workflow.meta.name,
                result.agents_started,
                &result.value,
                max,
            )))
        })
    }
}

/// `run_in_background: true`: the started run becomes a job of the caller; its settlement
/// (the rendered return value, or why it failed) arrives as the job's notice.
fn start_job(
    jobs: &dsh_jobs::JobRegistry,
    owner: dsh_agent::AgentRef,
    workflow: crate::engine::WorkflowRun,
    recorder: Option<Arc<Recorder>>,
    run: &ToolRunContext,
    max: usize,
) -> Result<ToolOutput, BoxError> {
    use dsh_jobs::{Announce, JobHooks, JobOutcome, JobStart, Terminal};
    let workflow = Arc::new(workflow);
    let spec = JobStart {
        kind: "workflow".into(),
        label: workflow.meta.name.clone(),
        owner: Some(owner),
        output_limit_bytes: None,
        announce: Announce::AtSettlement,
        tool_call: Some(run.call_id.clone()),
    };
    let running = workflow.clone();
    let stopping = workflow.clone();
    let registered = jobs.start(spec, move |settler| {
        let task = tokio::spawn(async move {
            let result = running.result().await;
            running.dispose().await;
            if let Some(r) = &recorder {
                r.finish(&running.id, result.stop_reason);
            }
            let outcome = match (&result.stop_reason, stop_reason_error(&result)) {
                (RunStop::Cancelled, _) => JobOutcome {
                    status: Terminal::Killed,
                    detail: None,
                    output: None,
                },
                (_, Some(error)) => JobOutcome::new(Terminal::Failed, error),
                (_, None) => JobOutcome {
                    status: Terminal::Completed,
                    detail: None,
                    output: Some(render_result(
                        &running.meta.name,
                        result.agents_started,
                        &result.value,
                        max,
                    )),
                },
            };
            settler.settle(outcome);
        });
        Ok(JobHooks {
            cancel: Box::new(move |_reason| {
                stopping.cancel("the job was killed");
                Ok(())
            }),
            read_output: None,
            keep_alive: Some(Box::new(AbortOnDrop(task))),
        })
    });
    match registered {
        Ok(id) => {
            run.set_value(json!({"kind": "background", "jobId": id, "runId": workflow.id}));
            Ok(ToolOutput::text(format!(
                "started workflow \"{}\" as background job {id}",
                workflow.meta.name
            )))
        }
        Err(e) => {
            workflow.cancel("the job could not be registered");
            Err(e)
        }
    }
}

/// Aborts the waiting task when the job is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_render_like_upstream() {
        assert_eq!(
            render_result("f", 1, &json!({"reply": "OK"}), 50_000),
            "workflow \"f\" completed (1 agent).\nReturn value:\n{\n  \"reply\": \"OK\"\n}"
        );
        assert_eq!(
            render_result("f", 2, &json!("abcdef"), 3),
            "workflow \"f\" completed (2 agents).\nReturn value:\n\"ab\n\u{2026} [truncated: 5 more characters]"
        );
    }
}
