//! `tool-jobs`: the model-facing `job_output`, `job_list` and `job_kill`, the `tool:jobs`
//! prompt section, and the delivery of completion notices to the owning agent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use dsh_agent::{AgentDisposed, AgentPayload, AgentRef, AgentStatus, InboxClaimed};
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_tools::{Reply, ToolRegistry, ToolRunContext, Typed, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::notice::{completion_message, status_line};
use crate::registry::{JobRegistry, JobSnapshot, KillOutcome};
use crate::retain::fit_with_suffix;

/// How a completion reaches an owner that is idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompletionDelivery {
    /// Open a turn for it (bounded by `maxConsecutiveWakes`).
    Wakeup,
    /// Leave it for the owner's next turn.
    Quiet,
}

/// `tool-jobs` settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolJobsConfig {
    pub wait_timeout_ms: f64,
    pub max_wait_timeout_ms: f64,
    pub completion_delivery: CompletionDelivery,
    pub max_consecutive_wakes: u32,
}

impl Default for ToolJobsConfig {
    fn default() -> Self {
        Self {
            wait_timeout_ms: 30_000.0,
            max_wait_timeout_ms: 600_000.0,
            completion_delivery: CompletionDelivery::Wakeup,
            max_consecutive_wakes: 3,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConfigRow {
    wait_timeout_ms: Option<f64>,
    max_wait_timeout_ms: Option<f64>,
    completion_delivery: Option<CompletionDelivery>,
    max_consecutive_wakes: Option<f64>,
}

impl ToolJobsConfig {
    fn from_row(row: ConfigRow) -> Result<Self, BoxError> {
        let d = Self::default();
        let at_least_one = |name: &str, v: Option<f64>, default: f64| -> Result<f64, BoxError> {
            match v {
                None => Ok(default),
                Some(v) if v >= 1.0 => Ok(v),
                Some(v) => Err(format!(
                    "tool-jobs: {name} must be at least 1, got {}",
                    dsh_kernel::json::to_string(&Value::from(v))
                )
                .into()),
            }
        };
        let wait = at_least_one("waitTimeoutMs", row.wait_timeout_ms, d.wait_timeout_ms)?;
        let cap = at_least_one(
            "maxWaitTimeoutMs",
            row.max_wait_timeout_ms,
            d.max_wait_timeout_ms,
        )?;
        let wakes = at_least_one(
            "maxConsecutiveWakes",
            row.max_consecutive_wakes,
            f64::from(d.max_consecutive_wakes),
        )?;
        if wait > cap {
            return Err(format!(
                "tool-jobs: waitTimeoutMs ({}) exceeds maxWaitTimeoutMs ({})",
                js(wait),
                js(cap)
            )
            .into());
        }
        if wakes.fract() != 0.0 || wakes > f64::from(u32::MAX) {
            return Err(format!(
                "tool-jobs: maxConsecutiveWakes ({}) must be a whole number of turns",
                js(wakes)
            )
            .into());
        }
        Ok(Self {
            wait_timeout_ms: wait,
            max_wait_timeout_ms: cap,
            completion_delivery: row.completion_delivery.unwrap_or(d.completion_delivery),
            max_consecutive_wakes: wakes as u32,
        })
    }
}

fn js(v: f64) -> String {
    dsh_kernel::json::to_string(&Value::from(v))
}

fn caller(run: &ToolRunContext) -> Option<String> {
    run.session.as_ref().map(|s| s.id())
}

fn job_id(id: &str) -> Result<String, BoxError> {
    if id.is_empty() {
        return Err(format!(
            "invalid job_id: expected a non-empty string, got {}",
            dsh_kernel::json::to_string(&Value::from(id))
        )
        .into());
    }
    Ok(id.to_string())
}

/// The `job_output` text: the new output (or `(no new output)`), then the status line,
/// bounded for jobs that carry an output bound.
pub fn render_output(text: &str, job: &JobSnapshot) -> String {
    let body = if text.is_empty() {
        "(no new output)"
    } else {
        text
    };
    let content = body.strip_suffix('\n').unwrap_or(body);
    let suffix = format!("\n{}", status_line(job));
    fit_with_suffix(
        content,
        &suffix,
        job.output_limit_bytes,
        "\n[output truncated]",
    )
}

/// The `job_list` text.
pub fn render_list(jobs: &[JobSnapshot]) -> String {
    if jobs.is_empty() {
        return "(no background jobs)".into();
    }
    jobs.iter()
        .map(|j| {
            format!(
                "{} [{}] {} \u{2014} {}",
                j.id,
                j.kind,
                j.status.as_str(),
                j.label
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Which job tool an output schema belongs to.
#[derive(Clone, Copy)]
enum Which {
    Output,
    List,
    Kill,
}

/// What the three job tools share.
#[derive(Clone)]
struct JobTools {
    jobs: Arc<JobRegistry>,
    config: ToolJobsConfig,
}

/// `job_output`, `job_list` and `job_kill`, each holding what they share.
struct JobOutputTool(JobTools);
struct JobListTool(JobTools);
struct JobKillTool(JobTools);

const ID_DESCRIPTION: &str = "The job id that the tool which started the work returned.";
const OUTPUT_DESCRIPTION: &str = "Read what a background job produced. Streaming jobs return only the output since your previous read; \
                 jobs with a final result return it once they finish. Every answer ends with a `[status: ...]` line. \
                 A read returns at once unless `wait: true`, which blocks until the job finishes or the wait times out.";
const WAIT_DESCRIPTION: &str = "Block until the job finishes or the timeout passes. When the wait times out the job keeps running and the answer shows [status: running].";
const TIMEOUT_DESCRIPTION: &str = "Longest wait in milliseconds (with wait: true only). Defaults to the configured wait; the configured maximum caps it.";
const LIST_DESCRIPTION: &str =
    "Show every background job you started, running or finished: id, kind, status and label.";
const KILL_DESCRIPTION: &str = "Ask a running background job to stop. Returns at once; the job shows as killed once its work has actually stopped.";
const REASON_DESCRIPTION: &str = "A short reason, passed to the job and kept in the log.";

// The arguments of each (no doc: upstream's parameter objects carry no description).
#[derive(Deserialize, JsonSchema)]
struct JobOutputArgs {
    #[schemars(description = ID_DESCRIPTION)]
    job_id: String,
    #[schemars(description = WAIT_DESCRIPTION)]
    wait: Option<bool>,
    #[schemars(description = TIMEOUT_DESCRIPTION)]
    timeout_ms: Option<f64>,
}

#[derive(Deserialize, JsonSchema)]
struct JobListArgs {}

#[derive(Deserialize, JsonSchema)]
struct JobKillArgs {
    #[schemars(description = ID_DESCRIPTION)]
    job_id: String,
    #[schemars(description = REASON_DESCRIPTION)]
    reason: Option<String>,
}

impl TypedTool for JobOutputTool {
    type Args = JobOutputArgs;
    type Value = Value;

    fn name(&self) -> String {
        "job_output".into()
    }

    fn description(&self) -> String {
        OUTPUT_DESCRIPTION.into()
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(output_schema(Which::Output).clone()))
    }

    async fn run(
        self: Arc<Self>,
        args: JobOutputArgs,
        run: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let JobTools { jobs, config } = &self.0;
        let caller = caller(&run);
        let caller = caller.as_deref();
        let id = job_id(&args.job_id)?;
        if args.wait == Some(true) {
            let timeout = args
                .timeout_ms
                .unwrap_or(config.wait_timeout_ms)
                .min(config.max_wait_timeout_ms);
            jobs.wait(&id, timeout, caller, &run.cancel).await?;
        }
        let (text, job) = jobs.read(&id, caller)?;
        let value = json!({"text": text, "job": public_job(&job)});
        Ok(Reply::text(render_output(&text, &job)).with_value(value))
    }
}

impl TypedTool for JobListTool {
    type Args = JobListArgs;
    type Value = Value;

    fn name(&self) -> String {
        "job_list".into()
    }

    fn description(&self) -> String {
        LIST_DESCRIPTION.into()
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(output_schema(Which::List).clone()))
    }

    async fn run(
        self: Arc<Self>,
        _args: JobListArgs,
        run: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let caller = caller(&run);
        let jobs = self.0.jobs.list(caller.as_deref());
        let value = Value::Array(jobs.iter().map(public_job).collect());
        Ok(Reply::text(render_list(&jobs)).with_value(value))
    }
}

impl TypedTool for JobKillTool {
    type Args = JobKillArgs;
    type Value = Value;

    fn name(&self) -> String {
        "job_kill".into()
    }

    fn description(&self) -> String {
        KILL_DESCRIPTION.into()
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(output_schema(Which::Kill).clone()))
    }

    async fn run(
        self: Arc<Self>,
        args: JobKillArgs,
        run: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let jobs = &self.0.jobs;
        let caller = caller(&run);
        let caller = caller.as_deref();
        let id = job_id(&args.job_id)?;
        let outcome = jobs.kill(&id, caller, args.reason.as_deref())?;
        let job = jobs.get(&id, caller)?;
        let value = json!({
            "outcome": match outcome {
                KillOutcome::AlreadyFinished => "already-finished",
                KillOutcome::CancellationRequested => "cancellation-requested",
            },
            "job": public_job(&job),
        });
        let text = match outcome {
            KillOutcome::AlreadyFinished => {
                format!("job {} had already finished {}", job.id, status_line(&job))
            }
            KillOutcome::CancellationRequested => {
                format!("requested cancellation of job {}", job.id)
            }
        };
        Ok(Reply::text(fit_with_suffix(
            &text,
            "",
            job.output_limit_bytes,
            "\n[result truncated]",
        ))
        .with_value(value))
    }
}

/// A job as a program sees it: the snapshot without ownership or notice bookkeeping
/// (`{id, kind, label, status, detail?, startedAt, finishedAt?}`).
pub fn public_job(job: &JobSnapshot) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), json!(job.id));
    m.insert("kind".into(), json!(job.kind));
    m.insert("label".into(), json!(job.label));
    m.insert("status".into(), json!(job.status.as_str()));
    if let Some(detail) = &job.detail {
        m.insert("detail".into(), json!(detail));
    }
    m.insert("startedAt".into(), json!(job.started_at));
    if let Some(finished) = job.finished_at {
        m.insert("finishedAt".into(), json!(finished));
    }
    Value::Object(m)
}

/// The declared output schema of each job tool (upstream's shapes, plain JSON Schema).
fn output_schema(which: Which) -> &'static Value {
    use std::sync::LazyLock;
    fn job() -> Value {
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["id", "kind", "label", "status", "startedAt"],
            "properties": {
                "id": {"type": "string"},
                "kind": {"type": "string"},
                "label": {"type": "string"},
                "status": {
                    "type": "string",
                    "enum": ["running", "stopping", "completed", "killed", "failed"],
                },
                "detail": {"type": "string"},
                "startedAt": {"type": "integer"},
                "finishedAt": {"type": "integer"},
            },
        })
    }
    static OUTPUT: LazyLock<Value> = LazyLock::new(|| {
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["text", "job"],
            "properties": {"text": {"type": "string"}, "job": job()},
        })
    });
    static LIST: LazyLock<Value> = LazyLock::new(|| json!({"type": "array", "items": job()}));
    static KILL: LazyLock<Value> = LazyLock::new(|| {
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["outcome", "job"],
            "properties": {
                "outcome": {
                    "type": "string",
                    "enum": ["cancellation-requested", "already-finished"],
                },
                "job": job(),
            },
        })
    });
    match which {
        Which::Output => &OUTPUT,
        Which::List => &LIST,
        Which::Kill => &KILL,
    }
}

/// Turns opened by completion wakes per owner since its last user input.
#[derive(Default)]
struct WakeBudget {
    spent: Mutex<HashMap<String, u32>>,
}

impl WakeBudget {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.spent.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn deliver(snapshot: &JobSnapshot, owner: &AgentRef, config: &ToolJobsConfig, budget: &WakeBudget) {
    let message = completion_message(snapshot);
    let wake = config.completion_delivery == CompletionDelivery::Wakeup
        && owner.status() == AgentStatus::Idle
        && {
            let mut spent = budget.lock();
            let n = spent.entry(owner.id().to_string()).or_insert(0);
            let ok = *n < config.max_consecutive_wakes;
            if ok {
                *n += 1;
            }
            ok
        };
    let sent = if wake {
        owner.followup(message)
    } else {
        owner.inject(message)
    };
    if let Err(e) = sent {
        tracing::warn!(
            "tool-jobs: the completion notice of {} could not reach {}: {e}",
            snapshot.id,
            owner.id()
        );
    }
}

const PROMPT_SECTION: &str = "Keep track of the id of every background job you start. A message in this session tells you when one finishes, \
so do not poll it or sleep waiting for it: carry on with work that does not depend on it, and do not start the same work twice. \
Before your final answer, read each job that still matters with job_output (use wait: true only when you cannot go on without its result) \
and stop the ones you no longer need with job_kill.";

/// `@deepseek-ai/dsh-tool-jobs` (config `{waitTimeoutMs, maxWaitTimeoutMs,
/// completionDelivery, maxConsecutiveWakes}`): attaches the job controller, registers the
/// three tools and the `tool:jobs` section, and delivers completion notices.
pub struct ToolJobsPlugin;

impl Plugin for ToolJobsPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-jobs"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: ConfigRow = config.parse()?;
        let config = ToolJobsConfig::from_row(row)?;
        let jobs = ctx.require::<JobRegistry>()?;
        let tools = ctx.require::<ToolRegistry>()?;
        jobs.attach_controller(ctx)?;

        let budget = Arc::new(WakeBudget::default());
        if config.completion_delivery == CompletionDelivery::Wakeup {
            let b = budget.clone();
            ctx.on_emit::<InboxClaimed>(ListenOptions::default(), move |p| {
                // Only the human's input refills the budget; a notice must not refill it.
                if p.message.source.kind() == "user" {
                    b.lock().remove(p.agent.id());
                }
                Ok(())
            })?;
            let b = budget.clone();
            ctx.on_emit::<AgentDisposed>(ListenOptions::default(), move |p: &AgentPayload| {
                b.lock().remove(p.agent.id());
                Ok(())
            })?;
        }
        let c = config.clone();
        jobs.on_job_done(
            ctx,
            Arc::new(move |snapshot, owner| deliver(snapshot, owner, &c, &budget)),
        )?;

        if let Some(prompt) = ctx.get::<dsh_prompt::SystemPrompt>() {
            prompt.section(
                ctx,
                "tool:jobs",
                106.0,
                Arc::new(|_| PROMPT_SECTION.to_string()),
            )?;
        }
        let shared = JobTools { jobs, config };
        tools.register(ctx, Arc::new(Typed::new(JobOutputTool(shared.clone()))?))?;
        tools.register(ctx, Arc::new(Typed::new(JobListTool(shared.clone()))?))?;
        tools.register(ctx, Arc::new(Typed::new(JobKillTool(shared))?))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::JobStatus;
    use pretty_assertions::assert_eq;

    fn snap(status: JobStatus, detail: Option<&str>, limit: Option<usize>) -> JobSnapshot {
        JobSnapshot {
            id: "pty-send-1".into(),
            kind: "pty-send".into(),
            label: "pty-1: ls".into(),
            output_limit_bytes: limit,
            owner_session: None,
            status,
            detail: detail.map(str::to_owned),
            started_at: 0,
            finished_at: None,
            reported: false,
        }
    }

    #[test]
    fn parameter_schemas_are_the_declared_ones() {
        use dsh_tools::{ObjectSchema, Prop, params_schema};
        let text = |s: ObjectSchema| dsh_kernel::json::to_string(&s.to_value());
        assert_eq!(
            text(params_schema::<JobOutputArgs>().unwrap()),
            text(
                ObjectSchema::new()
                    .required("job_id", Prop::string(ID_DESCRIPTION))
                    .optional(
                        "wait",
                        Prop::boolean("Block until the job finishes or the timeout passes. When the wait times out the job keeps running and the answer shows [status: running]."),
                    )
                    .optional(
                        "timeout_ms",
                        Prop::number("Longest wait in milliseconds (with wait: true only). Defaults to the configured wait; the configured maximum caps it."),
                    )
            )
        );
        assert_eq!(
            text(params_schema::<JobListArgs>().unwrap()),
            text(ObjectSchema::new())
        );
        assert_eq!(
            text(params_schema::<JobKillArgs>().unwrap()),
            text(
                ObjectSchema::new()
                    .required("job_id", Prop::string(ID_DESCRIPTION))
                    .optional(
                        "reason",
                        Prop::string("A short reason, passed to the job and kept in the log."),
                    )
            )
        );
        assert_eq!(
            OUTPUT_DESCRIPTION,
            "Read what a background job produced. Streaming jobs return only the output since your previous read; jobs with a final result return it once they finish. Every answer ends with a `[status: ...]` line. A read returns at once unless `wait: true`, which blocks until the job finishes or the wait times out."
        );
    }

    #[test]
    fn public_snapshots_drop_bookkeeping() {
        let running = snap(JobStatus::Running, None, Some(10));
        assert_eq!(
            public_job(&running),
            json!({"id": "pty-send-1", "kind": "pty-send", "label": "pty-1: ls",
                   "status": "running", "startedAt": 0})
        );
        let mut done = snap(JobStatus::Failed, Some("exit code: 3"), None);
        done.finished_at = Some(5);
        done.owner_session = Some("s".into());
        assert_eq!(
            public_job(&done),
            json!({"id": "pty-send-1", "kind": "pty-send", "label": "pty-1: ls",
                   "status": "failed", "detail": "exit code: 3", "startedAt": 0,
                   "finishedAt": 5})
        );
        // Every field the snapshot carries is declared.
        let declared = output_schema(Which::List)["items"]["properties"]
            .as_object()
            .unwrap()
            .clone();
        for key in public_job(&done).as_object().unwrap().keys() {
            assert!(declared.contains_key(key), "{key}");
        }
    }

    #[test]
    fn output_renders_like_upstream() {
        let running = snap(JobStatus::Running, None, None);
        assert_eq!(
            render_output("", &running),
            "(no new output)\n[status: running]"
        );
        assert_eq!(render_output("a\n", &running), "a\n[status: running]");
        assert_eq!(render_output("a", &running), "a\n[status: running]");
        let done = snap(JobStatus::Completed, Some("exit code: 3"), None);
        assert_eq!(
            render_output("x\n", &done),
            "x\n[status: completed, exit code: 3]"
        );
        // A bounded job keeps the status line and the tail of its output.
        let bounded = snap(JobStatus::Running, None, Some(40));
        let text = render_output(&"0123456789".repeat(5), &bounded);
        assert_eq!(text, "789\n[output truncated]\n[status: running]");
        assert_eq!(text.len(), 40);
    }

    #[test]
    fn lists_render_like_upstream() {
        assert_eq!(render_list(&[]), "(no background jobs)");
        let jobs = [
            snap(JobStatus::Running, None, None),
            JobSnapshot {
                id: "bash-2".into(),
                kind: "bash".into(),
                label: "sleep 1".into(),
                ..snap(JobStatus::Killed, Some("signal: SIGTERM"), None)
            },
        ];
        assert_eq!(
            render_list(&jobs),
            "pty-send-1 [pty-send] running \u{2014} pty-1: ls\nbash-2 [bash] killed \u{2014} sleep 1"
        );
    }

    #[test]
    fn config_is_validated_with_upstream_texts() {
        let row = |w: Option<f64>, m: Option<f64>, k: Option<f64>| ConfigRow {
            wait_timeout_ms: w,
            max_wait_timeout_ms: m,
            completion_delivery: None,
            max_consecutive_wakes: k,
        };
        assert_eq!(
            ToolJobsConfig::from_row(row(None, None, None)).unwrap(),
            ToolJobsConfig::default()
        );
        assert_eq!(
            ToolJobsConfig::from_row(row(Some(5000.0), Some(10.0), None))
                .unwrap_err()
                .to_string(),
            "tool-jobs: waitTimeoutMs (5000) exceeds maxWaitTimeoutMs (10)"
        );
        assert_eq!(
            ToolJobsConfig::from_row(row(None, None, Some(2.5)))
                .unwrap_err()
                .to_string(),
            "tool-jobs: maxConsecutiveWakes (2.5) must be a whole number of turns"
        );
        assert!(ToolJobsConfig::from_row(row(Some(0.0), None, None)).is_err());
    }
}
