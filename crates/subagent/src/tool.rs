//! `@deepseek-ai/dsh-tool-subagent`: one model-facing delegation tool per row, bound to one
//! provider. Foreground calls wait for the child and always dispose it; background calls
//! either start a one-shot child as a background job or (continuable rows) start a durable
//! child and return its id.

use std::sync::{Arc, Mutex};

use dsh_agent::{AgentOptions, AgentRef, Agents};
use dsh_jobs::{Announce, JobHooks, JobOutcome, JobRegistry, JobStart, Terminal};
use dsh_kernel::{BoxError, Context, EffectHandle, ListenOptions, Plugin, PluginConfig};
use dsh_llm::ContentBlock;
use dsh_prompt::SystemPrompt;
use dsh_tools::{ObjectSchema, Reply, ToolRegistry, ToolRunContext, Typed, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::descriptor::ToolFilter;
use crate::service::{ProviderAdded, ProviderRemoved, Subagents};
use crate::types::{ProviderRef, RunFault, StartRequest, StopReason, SubagentResult, SubagentRun};

/// Where background calls go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
pub enum BackgroundMode {
    /// Default foreground; background = a job collected with `job_output`.
    #[serde(rename = "one-shot")]
    #[default]
    OneShot,
    /// Default background; a durable child continued with `send_message`.
    #[serde(rename = "continuable")]
    Continuable,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(untagged)]
enum MaxDepthRow {
    Number(f64),
    Named(String),
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AgentOptionsRow {
    provider: Option<String>,
    model: Option<String>,
    max_tokens: Option<f64>,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
struct ToolFilterRow {
    allow: Option<Vec<String>>,
    deny: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConfigRow {
    provider: String,
    tool_name: Option<String>,
    enable_run_in_background: Option<bool>,
    background_mode: Option<BackgroundMode>,
    agent_options: Option<AgentOptionsRow>,
    persona: Option<String>,
    tool_filter: Option<ToolFilterRow>,
    max_depth: Option<MaxDepthRow>,
}

/// A delegation tool's settings.
#[derive(Clone, Debug)]
pub struct SubagentToolConfig {
    pub provider: String,
    pub tool_name: String,
    pub background_enabled: bool,
    pub background_mode: BackgroundMode,
    pub agent_options: Option<AgentOptions>,
    pub persona: Option<String>,
    pub tool_filter: Option<ToolFilter>,
    /// `None`: `provider-managed` (no cap is sent).
    pub max_depth: Option<u64>,
}

impl SubagentToolConfig {
    fn from_row(row: ConfigRow) -> Result<Self, BoxError> {
        if row.provider.is_empty() {
            return Err("tool-subagent: `provider` must be a non-empty string".into());
        }
        let max_depth = match row.max_depth {
            None => Some(3),
            Some(MaxDepthRow::Named(n)) if n == "provider-managed" => None,
            Some(MaxDepthRow::Number(n))
                if n >= 0.0 && n.fract() == 0.0 && n <= 9_007_199_254_740_991.0 =>
            {
                Some(n as u64)
            }
            Some(_) => {
                return Err("tool-subagent: `maxDepth` must be a non-negative integer or 'provider-managed'".into());
            }
        };
        let tool_filter = match row.tool_filter {
            None => None,
            Some(ToolFilterRow {
                allow: None,
                deny: None,
            }) => {
                return Err("tool-subagent: `toolFilter` is set but has neither `allow` nor `deny` \u{2014} drop the key or give it one of them".into());
            }
            Some(f) => Some(ToolFilter {
                allow: f.allow,
                deny: f.deny,
            }),
        };
        let agent_options = match row.agent_options {
            None => None,
            Some(o) => {
                let max_tokens = match o.max_tokens {
                    None => None,
                    Some(n) if n >= 1.0 && n.fract() == 0.0 && n <= 9_007_199_254_740_991.0 => {
                        Some(n as u64)
                    }
                    Some(_) => {
                        return Err(
                            "tool-subagent: `agentOptions.maxTokens` must be a positive integer"
                                .into(),
                        );
                    }
                };
                Some(AgentOptions {
                    provider: o.provider,
                    model: o.model,
                    max_tokens,
                    reasoning_effort: None,
                })
            }
        };
        Ok(Self {
            provider: row.provider,
            tool_name: row.tool_name.unwrap_or_else(|| "subagent".into()),
            background_enabled: row.enable_run_in_background.unwrap_or(true),
            background_mode: row.background_mode.unwrap_or_default(),
            agent_options,
            persona: row.persona,
            tool_filter,
            max_depth,
        })
    }

    fn continuable(&self) -> bool {
        self.background_mode == BackgroundMode::Continuable
    }
}

const CWD_DESCRIPTION: &str = "Where the subagent starts: a directory inside your workspace, relative to your current directory or absolute. Without it the subagent starts where you started. Each side's later directory changes stay its own.";
const LABEL_DESCRIPTION: &str = "A short label for the task (3-5 words), shown to the user.";
const INHERITING_PROMPT_DESCRIPTION: &str = "What the subagent should do. It already sees the finished turns of this conversation, so say only what is new.";
const FRESH_PROMPT_DESCRIPTION: &str = "The whole task for the subagent, self-contained: it does not see this conversation, so include everything it needs.";
const CONTINUABLE_BACKGROUND_DESCRIPTION: &str = "Run in the background and get the subagent's durable id at once (the default: true). Pass false to wait for the result.";
const JOB_BACKGROUND_DESCRIPTION: &str = "Run as a background job and get its id (the default: false); collect it with job_output, stop it with job_kill.";

/// The tool description and the `prompt` parameter's, for a child that does or does not
/// see this conversation.
fn wording(inherits: bool, config: &SubagentToolConfig) -> (String, &'static str) {
    let base = if inherits {
        "Hand a task to a subagent that starts from this conversation: it is seeded with every turn that has already finished (not the one in progress) and works in its own context, so the work does not fill this one. Suited to follow-ups that build on what was said: a review, a deeper analysis, a continuation. You get back its result, not its steps."
    } else {
        "Hand a self-contained task to a subagent: a separate agent with its own, empty context, so focused work (research, a scoped change, an analysis) does not fill this conversation. It knows nothing of this conversation, so the prompt must stand on its own. You get back its result, not its steps."
    };
    let tail = match (config.background_enabled, config.continuable()) {
        (false, _) => " The call waits for the subagent and returns its result.",
        (true, true) => {
            " By default it runs in the background: the call returns the subagent's durable id at once, a notice with its outcome and final message arrives when it finishes, and `send_message` gives the same subagent another turn later. Pass `run_in_background: false` only when your next step needs the result."
        }
        (true, false) => {
            " By default the call waits for the result. With `run_in_background: true` it returns a job id instead; read the result with `job_output`, stop it with `job_kill`."
        }
    };
    let prompt = if inherits {
        INHERITING_PROMPT_DESCRIPTION
    } else {
        FRESH_PROMPT_DESCRIPTION
    };
    (format!("{base}{tail}"), prompt)
}

// The arguments (no doc: upstream's parameter object carries no description), in 0.2.1's
// order: `cwd`, `description`, `prompt`. Only providers that can start a child elsewhere
// offer `cwd` (product children run where their row says), and `run_in_background` is
// offered only when the row enables it; `tune` drops what is not offered and sets the
// descriptions that depend on the provider and the row. `cwd` and `run_in_background` are
// read leniently, as before: left out of the schema, a value of another type is ignored.
#[derive(Deserialize, JsonSchema)]
pub struct SubagentArgs {
    #[schemars(description = CWD_DESCRIPTION)]
    #[serde(default, deserialize_with = "dsh_tools::lenient::string")]
    cwd: Option<String>,
    #[schemars(description = LABEL_DESCRIPTION)]
    description: String,
    #[schemars(description = FRESH_PROMPT_DESCRIPTION)]
    prompt: String,
    #[schemars(description = JOB_BACKGROUND_DESCRIPTION)]
    #[serde(default, deserialize_with = "dsh_tools::lenient::bool")]
    run_in_background: Option<bool>,
}

/// Shapes the derived parameter schema for a provider that does or does not inherit the
/// conversation and can or cannot start a child elsewhere.
fn tune_params(
    params: &mut ObjectSchema,
    inherits: bool,
    takes_cwd: bool,
    config: &SubagentToolConfig,
) {
    if !takes_cwd {
        params.properties.retain(|(name, _, _)| name != "cwd");
    }
    params.describe_property("prompt", wording(inherits, config).1);
    if !config.background_enabled {
        params
            .properties
            .retain(|(name, _, _)| name != "run_in_background");
    } else if config.continuable() {
        params.describe_property("run_in_background", CONTINUABLE_BACKGROUND_DESCRIPTION);
    } else {
        params.describe_property("run_in_background", JOB_BACKGROUND_DESCRIPTION);
    }
}

/// The delegation tool itself.
pub struct SubagentTool {
    description: String,
    inherits: bool,
    takes_cwd: bool,
    config: SubagentToolConfig,
    subagents: Arc<Subagents>,
    ctx: Context,
}

impl SubagentTool {
    fn new(
        provider: &ProviderRef,
        config: SubagentToolConfig,
        subagents: Arc<Subagents>,
        ctx: Context,
    ) -> Self {
        let inherits = provider.inherits_parent_context();
        let (description, _) = wording(inherits, &config);
        Self {
            description,
            inherits,
            takes_cwd: provider.capabilities().cwd,
            config,
            subagents,
            ctx,
        }
    }
}

/// The headline of a run that did not complete.
fn stop_reason_error(reason: StopReason) -> Option<&'static str> {
    match reason {
        StopReason::Completed => None,
        StopReason::Aborted => Some("subagent run was cancelled"),
        StopReason::Error => Some("subagent run failed"),
        StopReason::MaxTokens => Some("subagent run hit its token limit before finishing"),
        StopReason::Refusal => Some("subagent declined the task"),
    }
}

/// The error text of a non-completed foreground run: headline, diagnostic, partial answer.
pub fn foreground_failure(headline: &str, result: &SubagentResult) -> String {
    let mut out = headline.to_string();
    if let Some(d) = &result.diagnostic {
        out.push_str("\nDiagnostic: ");
        out.push_str(d);
    }
    let text = result.text();
    if !text.is_empty() {
        out.push_str("\nPartial output before the run ended:\n");
        out.push_str(&text);
    }
    out
}

/// Collects a foreground run and always disposes it; a disposal failure never hides a
/// result failure (both are reported).
pub async fn settle_foreground(run: SubagentRun) -> Result<Vec<ContentBlock>, String> {
    let execution = run
        .result
        .clone()
        .await
        .and_then(|r| match stop_reason_error(r.stop_reason) {
            None => Ok(r.output),
            Some(h) => Err(RunFault(foreground_failure(h, &r))),
        });
    let disposal = run.dispose().await;
    match (execution, disposal) {
        (Err(e), Err(d)) => Err(format!(
            "subagent run failed: {}; dispose failed: {}",
            e.js(),
            d.js()
        )),
        (Err(e), Ok(())) | (Ok(_), Err(e)) => Err(e.0),
        (Ok(v), Ok(())) => Ok(v),
    }
}

/// A background job's outcome from its run.
pub async fn settle_job(run: Arc<SubagentRun>) -> JobOutcome {
    let mut outcome = match run.result.clone().await {
        Ok(r) => run_outcome(&r),
        Err(e) => JobOutcome::new(Terminal::Failed, e.js()),
    };
    if let Err(e) = run.dispose().await {
        let prefix = outcome
            .detail
            .as_ref()
            .map(|d| format!("{d}; "))
            .unwrap_or_default();
        outcome = JobOutcome::new(
            Terminal::Failed,
            format!("{prefix}dispose failed: {}", e.js()),
        );
    }
    outcome
}

fn run_outcome(r: &SubagentResult) -> JobOutcome {
    match r.stop_reason {
        StopReason::Completed => JobOutcome {
            status: Terminal::Completed,
            detail: None,
            output: Some(r.text()),
        },
        StopReason::Aborted => JobOutcome {
            status: Terminal::Killed,
            detail: None,
            output: None,
        },
        StopReason::Error | StopReason::MaxTokens | StopReason::Refusal => {
            let detail = match &r.diagnostic {
                Some(d) => format!("{}; diagnostic: {d}", r.stop_reason.as_str()),
                None => r.stop_reason.as_str().to_string(),
            };
            JobOutcome::new(Terminal::Failed, detail)
        }
    }
}

impl SubagentTool {
    /// The child's starting directory from the `cwd` argument: resolved against the
    /// caller's current directory, an existing directory, and inside the caller's workspace
    /// (the child's sandbox is rooted at its directory, so a child started outside would
    /// get a wider sandbox than its parent).
    fn child_cwd(
        &self,
        parent: &AgentRef,
        cwd: Option<&str>,
        run: &ToolRunContext,
    ) -> Result<Option<std::path::PathBuf>, BoxError> {
        let Some(raw) = cwd else {
            return Ok(None);
        };
        if raw.trim().is_empty() {
            return Err("cwd must not be empty; leave it out to start where you started".into());
        }
        let base = run
            .cwd
            .clone()
            .or_else(|| crate::child::parent_cwd(parent))
            .unwrap_or_else(|| std::path::PathBuf::from("/"));
        let target = if std::path::Path::new(raw).is_absolute() {
            std::path::PathBuf::from(raw)
        } else {
            base.join(raw)
        };
        let target = std::fs::canonicalize(&target)
            .ok()
            .filter(|p| p.is_dir())
            .ok_or_else(|| format!("cwd {raw:?} is not an existing directory"))?;
        if let Some(policy) = self.ctx.get::<dsh_sandbox::SandboxPolicy>() {
            let root = policy.resolve(Some(parent.session())).workspace_root;
            let root = std::fs::canonicalize(&root).unwrap_or(root);
            if !target.starts_with(&root) {
                return Err(format!(
                    "cwd {raw:?} is outside your workspace {}; a subagent starts inside it",
                    root.display()
                )
                .into());
            }
        }
        Ok(Some(target))
    }

    fn request(
        &self,
        parent: AgentRef,
        args: &SubagentArgs,
        cancel: CancellationToken,
    ) -> StartRequest {
        let mut request = StartRequest::new(
            parent,
            vec![ContentBlock::text(args.prompt.clone())],
            cancel,
        );
        request.label = Some(args.description.clone());
        request.agent_options = self.config.agent_options.clone();
        request.persona = self.config.persona.clone();
        request.tool_filter = self.config.tool_filter.clone();
        request.max_depth = self.config.max_depth;
        request
    }

    /// A one-shot child as a background job of the calling agent.
    async fn start_job(
        &self,
        parent: AgentRef,
        args: &SubagentArgs,
        run: &ToolRunContext,
        cwd: Option<std::path::PathBuf>,
    ) -> Result<Reply<Value>, BoxError> {
        let jobs = self.ctx.get::<JobRegistry>().ok_or(
            "run_in_background needs the job plugins, which are not loaded: add @deepseek-ai/dsh-jobs and @deepseek-ai/dsh-tool-jobs to the composition, or run the subagent in the foreground",
        )?;
        jobs.preflight(Some(&parent))?;
        let cancel = CancellationToken::new();
        let mut request = self.request(parent.clone(), args, cancel.clone());
        request.cwd = cwd;
        let label = request.label.clone().unwrap_or_default();
        let started = self
            .subagents
            .start(&self.config.provider, request)
            .await
            .map(Arc::new);
        let run_cell = started.as_ref().ok().cloned();
        let spec = JobStart {
            kind: "subagent".into(),
            label,
            owner: Some(parent),
            output_limit_bytes: None,
            announce: Announce::AtSettlement,
            tool_call: Some(run.call_id.clone()),
        };
        let job_cancel = cancel.clone();
        let registered = jobs.start(spec, move |settler| {
            let keep_alive: Option<Box<dyn Send + Sync>> = match started {
                Ok(r) => {
                    // Polled once here: a run that is already over (and disposes at once)
                    // settles the job at registration, so its notice precedes this call's
                    // result in the log.
                    let mut settle = Box::pin(settle_job(r));
                    match futures::FutureExt::now_or_never(&mut settle) {
                        Some(outcome) => {
                            settler.settle(outcome);
                            None
                        }
                        None => {
                            let task = tokio::spawn(async move { settler.settle(settle.await) });
                            Some(Box::new(AbortOnDrop(task)))
                        }
                    }
                }
                Err(e) => {
                    settler.settle(if job_cancel.is_cancelled() {
                        JobOutcome {
                            status: Terminal::Killed,
                            detail: None,
                            output: None,
                        }
                    } else {
                        JobOutcome::new(Terminal::Failed, format!("Error: {e}"))
                    });
                    None
                }
            };
            Ok(JobHooks {
                cancel: Box::new(move |_reason| {
                    job_cancel.cancel();
                    Ok(())
                }),
                read_output: None,
                keep_alive,
            })
        });
        match registered {
            Ok(id) => Ok(Reply::text(format!("started background subagent job {id}"))
                .with_value(json!({"kind": "background", "jobId": id}))),
            Err(e) => {
                if let Some(r) = run_cell {
                    cancel.cancel();
                    let _ = r.dispose().await;
                }
                Err(e)
            }
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl TypedTool for SubagentTool {
    type Args = SubagentArgs;
    type Value = Value;

    fn name(&self) -> String {
        self.config.tool_name.clone()
    }

    fn description(&self) -> String {
        self.description.clone()
    }

    fn tune(&self, params: &mut ObjectSchema) {
        tune_params(params, self.inherits, self.takes_cwd, &self.config);
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(crate::outputs::subagent().clone()))
    }

    fn concurrency_safe(&self) -> bool {
        // Children never write to the parent's session; siblings run side by side.
        true
    }

    async fn run(
        self: Arc<Self>,
        args: SubagentArgs,
        run: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let parent = run
            .session
            .as_ref()
            .and_then(|s| self.ctx.get::<Agents>()?.get(&s.id()))
            .ok_or("subagent tool requires a calling agent (exec.agent was undefined)")?;
        let requested = args.run_in_background;
        let background = if self.config.background_enabled {
            requested.unwrap_or(self.config.continuable())
        } else {
            if requested == Some(true) {
                return Err("run_in_background is switched off for this tool (enableRunInBackground: false); run the subagent in the foreground instead".into());
            }
            false
        };
        let cwd = self.child_cwd(&parent, args.cwd.as_deref(), &run)?;
        if background && self.config.continuable() {
            let mut request = self.request(parent, &args, run.cancel.clone());
            request.cwd = cwd;
            let label = request.label.clone().unwrap_or_default();
            let child = self
                .subagents
                .continuations()?
                .start(crate::continuation::ContinuableStart {
                    provider: self.config.provider.clone(),
                    label,
                    request,
                })
                .await?;
            return Ok(Reply::text(format!("started subagent {child}"))
                .with_value(json!({"kind": "continuable", "subagentId": child})));
        }
        if background {
            return self.start_job(parent, &args, &run, cwd).await;
        }
        let mut request = self.request(parent, &args, run.cancel.clone());
        request.cwd = cwd;
        let started = self.subagents.start(&self.config.provider, request).await?;
        let run_id = started.id.clone();
        let output = settle_foreground(started).await?;
        let value = json!({
            "kind": "foreground",
            "runId": run_id,
            "output": serde_json::to_value(&output).unwrap_or_else(|_| json!([])),
        });
        Ok(Reply::text(crate::types::text_of(&output)).with_value(value))
    }
}

/// `@deepseek-ai/dsh-tool-subagent`: mounts the tool while its provider is registered.
pub struct ToolSubagentPlugin;

impl Plugin for ToolSubagentPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-subagent"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("agentPreset", "agent presets are not part of this build"),
            (
                "allowedAgentPresets",
                "agent presets are not part of this build",
            ),
            (
                "modelSelectionSettings",
                "a child runs on its parent's model here; the tool has no model choice",
            ),
        ]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: ConfigRow = config.parse()?;
        let config = SubagentToolConfig::from_row(row)?;
        let subagents = ctx.require::<Subagents>()?;
        let tools = ctx.require::<ToolRegistry>()?;
        let mounted: Arc<Mutex<Option<EffectHandle>>> = Arc::new(Mutex::new(None));
        let mount = {
            let (config, subagents, tools, mounted, ctx) = (
                config.clone(),
                subagents.clone(),
                tools.clone(),
                mounted.clone(),
                ctx.clone(),
            );
            move |provider: &ProviderRef| -> Result<(), BoxError> {
                let mut slot = mounted.lock().unwrap_or_else(|p| p.into_inner());
                if slot.is_some() {
                    return Ok(());
                }
                if config.max_depth.is_some() && !provider.capabilities().depth_limit {
                    return Err(format!(
                        "tool-subagent: provider \"{}\" has no depthLimit capability, so it cannot apply maxDepth \u{2014} set maxDepth: 'provider-managed' to let the provider limit the nesting itself",
                        provider.name()
                    )
                    .into());
                }
                let tool = Typed::new(SubagentTool::new(
                    provider,
                    config.clone(),
                    subagents.clone(),
                    ctx.clone(),
                ))?;
                *slot = Some(tools.register(&ctx, Arc::new(tool))?);
                Ok(())
            }
        };
        let name = config.provider.clone();
        {
            let mount = mount.clone();
            let name = name.clone();
            ctx.on_emit::<ProviderAdded>(ListenOptions::default(), move |p| {
                if p.name() == name {
                    mount(p)?;
                }
                Ok(())
            })?;
        }
        {
            let (mounted, name) = (mounted.clone(), name.clone());
            ctx.on_emit::<ProviderRemoved>(ListenOptions::default(), move |removed| {
                if *removed == name
                    && let Some(h) = mounted.lock().unwrap_or_else(|p| p.into_inner()).take()
                {
                    h.dispose();
                }
                Ok(())
            })?;
        }
        match subagents.provider(&name) {
            Some(p) => mount(&p)?,
            None => tracing::info!(
                "subagent provider \"{name}\" is not registered yet; the \"{}\" tool will appear when it is",
                config.tool_name
            ),
        }
        if config.background_enabled && config.continuable() {
            let prompt = ctx.require::<SystemPrompt>()?;
            let (tool_name, tools) = (config.tool_name.clone(), tools.clone());
            prompt.section(
                ctx,
                &format!("tool:{tool_name}"),
                116.5,
                Arc::new(move |a| {
                    if tools.get(&a.ctx, &tool_name).is_none() {
                        return String::new();
                    }
                    format!("{tool_name} runs in the background unless told otherwise: start independent delegations together in one message and keep working while they run. Wait for a result (`run_in_background: false`) only when your next step depends on it. Each background subagent reports back with a notice carrying its outcome and final message when it settles.")
                }),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_tools::Prop;
    use pretty_assertions::assert_eq;

    /// The builder the schema used to come from.
    fn built(inherits: bool, takes_cwd: bool, config: &SubagentToolConfig) -> ObjectSchema {
        let (_, prompt) = wording(inherits, config);
        let mut schema = ObjectSchema::new();
        if takes_cwd {
            schema = schema.optional(
                "cwd",
                Prop::string(
                    "Where the subagent starts: a directory inside your workspace, relative to your current directory or absolute. Without it the subagent starts where you started. Each side's later directory changes stay its own.",
                ),
            );
        }
        schema = schema
            .required(
                "description",
                Prop::string("A short label for the task (3-5 words), shown to the user."),
            )
            .required("prompt", Prop::string(prompt));
        if config.background_enabled {
            schema = schema.optional(
                "run_in_background",
                Prop::boolean(if config.continuable() {
                    "Run in the background and get the subagent's durable id at once (the default: true). Pass false to wait for the result."
                } else {
                    "Run as a background job and get its id (the default: false); collect it with job_output, stop it with job_kill."
                }),
            );
        }
        schema
    }

    #[test]
    fn derived_parameter_schemas_are_the_builders() {
        for background_enabled in [false, true] {
            for background_mode in [BackgroundMode::OneShot, BackgroundMode::Continuable] {
                let config = SubagentToolConfig {
                    provider: "p".into(),
                    tool_name: "subagent".into(),
                    background_enabled,
                    background_mode,
                    agent_options: None,
                    persona: None,
                    tool_filter: None,
                    max_depth: Some(3),
                };
                for inherits in [false, true] {
                    for takes_cwd in [false, true] {
                        let mut derived = dsh_tools::params_schema::<SubagentArgs>().unwrap();
                        tune_params(&mut derived, inherits, takes_cwd, &config);
                        assert_eq!(
                            dsh_kernel::json::to_string(&derived.to_value()),
                            dsh_kernel::json::to_string(
                                &built(inherits, takes_cwd, &config).to_value()
                            ),
                            "background {background_enabled}, {background_mode:?}, inherits {inherits}, cwd {takes_cwd}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn undeclared_keys_of_another_type_are_ignored() {
        let args: SubagentArgs = serde_json::from_value(
            json!({"description": "d", "prompt": "p", "cwd": 1, "run_in_background": "yes"}),
        )
        .unwrap();
        assert_eq!((args.cwd, args.run_in_background), (None, None));
    }
}
