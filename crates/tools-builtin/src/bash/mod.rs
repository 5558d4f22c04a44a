//! `bash`: one-shot `bash -c` in a fresh process group, plus the executor and shell-env
//! plugins that configure it.

mod background;
mod env;
mod process;
mod render;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_tools::{
    ObjectSchema, Prop, Reply, ToolOutput, ToolRegistry, ToolRunContext, Typed, TypedTool,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

pub use env::{SessionJsonlLocator, ShellEnv};

use crate::errors::{self, js_number};
use crate::guidance::{BashGuidance, Guidance, PromptSection};
use crate::paths::{canonical_path, process_cwd, resolve_lexical, session_cwd};
use crate::sandbox::{
    ESCALATION_TARGETS, EscalationArgs, SandboxMode, SandboxPolicy, approve_escalation,
    denial_marker, escalation_hint,
};
use dsh_sandbox::runner::{denied, is_runner_spawn_failure, runner_failure, spawn_detail};
use dsh_sandbox::{Sandbox, SandboxUnavailable};

/// The largest delay one timer may hold (upstream's `MAX_TIMER_DELAY_MS`).
const MAX_TIMER_DELAY_MS: f64 = 2_147_483_647.0;

/// Executor settings (the `bash-local` / `bash-sandbox` row config).
#[derive(Clone, Debug, PartialEq)]
pub struct BashSettings {
    /// Working directory for calls without a session (default: the process cwd).
    pub cwd: Option<PathBuf>,
    /// Default foreground timeout.
    pub timeout_ms: f64,
    /// Upper bound for per-call `timeoutMs`.
    pub max_timeout_ms: f64,
    /// Per-stream in-memory output tail.
    pub max_output_bytes: f64,
    /// Per-stream spill-file cap.
    pub max_spill_bytes: f64,
    /// SIGTERM→SIGKILL grace (and the bound on waiting for inherited pipes).
    pub grace_ms: f64,
    /// Whether the executor confines commands (advertises sandbox escalation).
    pub confines: bool,
    /// The row's explicit `sandboxed` value, if any.
    pub sandboxed_override: Option<bool>,
}

impl Default for BashSettings {
    fn default() -> Self {
        Self {
            cwd: None,
            timeout_ms: 120_000.0,
            max_timeout_ms: 600_000.0,
            max_output_bytes: 64_000.0,
            max_spill_bytes: 64.0 * 1024.0 * 1024.0,
            grace_ms: 3_000.0,
            confines: false,
            sandboxed_override: None,
        }
    }
}

/// The `shell` executor service: the settings bash calls run with.
#[derive(Clone, Debug, Default)]
pub struct BashExecutor {
    pub settings: BashSettings,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ExecutorConfig {
    cwd: Option<String>,
    timeout_ms: Option<f64>,
    max_timeout_ms: Option<f64>,
    max_output_bytes: Option<f64>,
    max_spill_bytes: Option<f64>,
    grace_ms: Option<f64>,
    sandboxed: Option<bool>,
}

fn positive(plugin: &str, name: &str, value: f64) -> Result<f64, BoxError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(errors::plain(format!(
            "{plugin}: {name} must be a positive finite number"
        )))
    }
}

fn executor_settings(plugin: &str, config: &PluginConfig) -> Result<BashSettings, BoxError> {
    let c: ExecutorConfig = config.parse()?;
    let d = BashSettings::default();
    let settings = BashSettings {
        cwd: c.cwd.map(|cwd| resolve_lexical(&process_cwd(), &cwd)),
        timeout_ms: positive(plugin, "timeoutMs", c.timeout_ms.unwrap_or(d.timeout_ms))?,
        max_timeout_ms: positive(
            plugin,
            "maxTimeoutMs",
            c.max_timeout_ms.unwrap_or(d.max_timeout_ms),
        )?,
        max_output_bytes: positive(
            plugin,
            "maxOutputBytes",
            c.max_output_bytes.unwrap_or(d.max_output_bytes),
        )?,
        max_spill_bytes: positive(
            plugin,
            "maxSpillBytes",
            c.max_spill_bytes.unwrap_or(d.max_spill_bytes),
        )?,
        grace_ms: positive(plugin, "graceMs", c.grace_ms.unwrap_or(d.grace_ms))?,
        confines: c.sandboxed.unwrap_or(false),
        sandboxed_override: c.sandboxed,
    };
    if settings.grace_ms > MAX_TIMER_DELAY_MS {
        return Err(errors::plain(format!(
            "{plugin}: graceMs must be no greater than {}",
            js_number(MAX_TIMER_DELAY_MS)
        )));
    }
    Ok(settings)
}

/// The durable presentation metadata of a call (`tool/result.data.meta`, as upstream 0.2.1
/// records it): the directory the command ran in.
fn cwd_meta(cwd: &Path) -> Value {
    serde_json::json!({"cwd": cwd.to_string_lossy()})
}

/// `@deepseek-ai/dsh-bash-local`: the unconfined executor (config `{cwd, timeoutMs,
/// maxTimeoutMs, maxOutputBytes, maxSpillBytes, graceMs}`).
pub struct BashLocalPlugin;

impl Plugin for BashLocalPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-bash-local"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let settings = executor_settings("bash-local", config)?;
        ctx.provide(Arc::new(BashExecutor { settings }))?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-bash-sandbox`: the confining executor (config as `bash-local`, plus
/// `sandboxed: false` to run unconfined): commands in a confined mode run under the
/// `sandbox-local` provider's runner, or are refused.
pub struct BashSandboxPlugin;

impl Plugin for BashSandboxPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-bash-sandbox"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let mut settings = executor_settings("bash-sandbox", config)?;
        // Confining unless the row says otherwise; a confining executor needs a provider
        // (the `sandbox-local` row), so a composition without one fails to load instead of
        // running commands it was meant to confine.
        settings.confines = settings.sandboxed_override.unwrap_or(true);
        if settings.confines {
            ctx.require::<Sandbox>()?;
        }
        ctx.provide(Arc::new(BashExecutor { settings }))?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-shell-env` (config `{dshHome?}`): provides [`ShellEnv`].
pub struct ShellEnvPlugin;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ShellEnvConfig {
    dsh_home: Option<String>,
}

impl Plugin for ShellEnvPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-shell-env"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: ShellEnvConfig = config.parse()?;
        ctx.provide(Arc::new(ShellEnv::resolve(c.dsh_home.as_deref())))?;
        Ok(())
    }
}

/// Configuration of the `bash` tool itself.
#[derive(Clone, Debug, PartialEq)]
pub struct BashToolConfig {
    /// Advertise `run_in_background` (default true).
    pub enable_run_in_background: bool,
    /// Overrides the executor's default timeout.
    pub timeout_ms: Option<f64>,
    /// Overrides the executor's timeout cap.
    pub max_timeout_ms: Option<f64>,
    /// Advertise sandbox escalation (the plugin defaults it to whether the loaded
    /// executor confines; unset means no).
    pub sandboxed: Option<bool>,
}

impl Default for BashToolConfig {
    fn default() -> Self {
        Self {
            enable_run_in_background: true,
            timeout_ms: None,
            max_timeout_ms: None,
            sandboxed: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfigRow {
    #[serde(default = "yes")]
    enable_run_in_background: bool,
    timeout_ms: Option<f64>,
    max_timeout_ms: Option<f64>,
    sandboxed: Option<bool>,
}

fn yes() -> bool {
    true
}

/// The `bash` tool.
#[derive(Clone)]
pub struct BashTool {
    inner: Arc<BashInner>,
}

struct BashInner {
    description: String,
    config: BashToolConfig,
    sandboxed: bool,
    /// Used when no `shellEnv` service is loaded; `DSH_HOME` is read at construction.
    fallback_env: ShellEnv,
}

const DESCRIPTION_BASE: &str = "Run a shell command with `bash -c` and return what it printed on stdout and stderr. \
Every call starts a new shell, so nothing carries over between calls (working directory, variables, functions); \
set `workdir` instead of running `cd`. A non-zero exit status is reported as an `[exit code: N]` marker. \
Facts about the running harness are available to the command as managed `$DSH_*` environment variables. \
File access may be restricted by a sandbox: a refused file operation shows up as `[sandbox: file access denied under <mode> mode]`, \
which is a policy decision rather than a fault in the command, so do not look for another way around it. \
Very long output keeps only its end; when the complete output could be saved, the file path is given.";

const DESCRIPTION_BACKGROUND: &str = "For commands that run for a long time, set `run_in_background: true`: the call returns a job id at once, \
`job_output` reads what the job printed and `job_kill` stops it.";

const DESCRIPTION_NO_BACKGROUND: &str =
    "Commands cannot run in the background here; each one has to finish within its timeout.";

const DESCRIPTION_ESCALATION: &str = " Running a command that the sandbox might refuse is fine: run it and read the marker instead of guessing. \
If a command was refused and a wider mode would let it work, retry that exact command once, in the same turn, with \
`sandbox_permissions` set to the narrowest wider mode that is enough and a one-sentence `justification`; the approval \
prompt this raises is how the user agrees, so do not stop to ask in chat first. If the session says approval prompts are \
disabled, a refusal is final and `sandbox_permissions` must not be used. Only escalate after a real refusal (normally the one \
this command just got, or the same access refused earlier in this session). When the user rejects an escalation, stop and \
explain; do not work around it, though other commands may still be run or escalated later.";

// The arguments (no doc: upstream's parameter object carries no description), in 0.2.1's
// order: the summary before the command line. `run_in_background` is declared only when
// enabled and the escalation pair only when sandboxed (`tune`); the pair is read from the
// call's arguments as sent.
#[derive(Deserialize, JsonSchema)]
pub struct BashArgs {
    /// A short active-voice summary of what the command does, about 5-10 words, shown to the user (for example "List files in the current directory" for `ls`).
    description: String,
    /// The command line to run.
    command: String,
    /// Timeout in milliseconds; the configured default and maximum apply, and the command is killed when it expires.
    #[serde(rename = "timeoutMs")]
    timeout_ms: Option<f64>,
    /// Directory to run the command in. Defaults to the session workspace; a relative path is taken relative to it.
    workdir: Option<String>,
    /// Start the command as a background job and return its id immediately (read it with job_output, stop it with job_kill); no timeout applies.
    #[serde(default, deserialize_with = "dsh_tools::lenient::bool")]
    run_in_background: Option<bool>,
}

impl BashTool {
    pub fn new(config: BashToolConfig) -> Self {
        let sandboxed = config.sandboxed.unwrap_or(false);
        let mut description = format!(
            "{DESCRIPTION_BASE} {}",
            if config.enable_run_in_background {
                DESCRIPTION_BACKGROUND
            } else {
                DESCRIPTION_NO_BACKGROUND
            }
        );
        if sandboxed {
            description.push_str(DESCRIPTION_ESCALATION);
        }
        Self {
            inner: Arc::new(BashInner {
                description,
                config,
                sandboxed,
                fallback_env: ShellEnv::from_process_env(),
            }),
        }
    }

    /// The `tool:bash` prompt section.
    pub fn prompt_section(&self) -> PromptSection {
        PromptSection::new(
            "tool:bash",
            105,
            "After every bash call, look at its [exit code: N] marker and find out why a command failed before continuing.",
        )
    }
}

/// The arguments the schema cannot check: a command and a description that say something,
/// and a positive finite timeout.
fn check_args(args: &BashArgs, run: &ToolRunContext) -> Result<(), BoxError> {
    let command = args.command.as_str();
    let description = args.description.as_str();
    if command.trim().is_empty() {
        return Err(errors::plain(
            "command is empty: pass the shell command to run",
        ));
    }
    if description.trim().is_empty() {
        return Err(errors::plain(
            "description is empty: say in a few words what the command does",
        ));
    }
    if let Some(t) = args.timeout_ms
        && !(t.is_finite() && t > 0.0)
    {
        return Err(errors::plain(format!(
            "invalid timeoutMs: expected a positive number, got {}",
            dsh_kernel::json::to_string(&run.arguments()["timeoutMs"])
        )));
    }
    Ok(())
}

impl BashInner {
    async fn run(&self, args: BashArgs, run: ToolRunContext) -> Result<ToolOutput, BoxError> {
        check_args(&args, &run)?;
        let command = args.command.as_str();
        let requested_timeout = args.timeout_ms;
        let settings = run
            .ctx
            .get::<BashExecutor>()
            .map(|e| e.settings.clone())
            .unwrap_or_default();
        let policy = self.policy(settings.confines, &run).await?;
        let workdir = self.workdir(
            args.workdir.as_deref(),
            &run,
            policy.as_ref().map(|p| p.workspace_root.as_path()),
            &settings,
        );
        let managed = self.managed_env(&run);

        if args.run_in_background == Some(true) {
            if !self.config.enable_run_in_background {
                return Err(errors::plain(
                    "run_in_background is switched off in this setup (enableRunInBackground: false); run the command in the foreground instead",
                ));
            }
            let Some(jobs) = run.ctx.get::<dsh_jobs::JobRegistry>() else {
                return Err(errors::plain(
                    "run_in_background needs the job plugins, which are not loaded: add @deepseek-ai/dsh-jobs and @deepseek-ai/dsh-tool-jobs to the composition, or run the command in the foreground",
                ));
            };
            if run.cancel.is_cancelled() {
                return Err(errors::aborted());
            }
            return self
                .start_background(
                    &jobs,
                    command,
                    &run,
                    policy.as_ref(),
                    &settings,
                    workdir,
                    managed,
                )
                .await;
        }

        let default_timeout = self.config.timeout_ms.unwrap_or(settings.timeout_ms);
        let max_timeout = self
            .config
            .max_timeout_ms
            .unwrap_or(settings.max_timeout_ms);
        let timeout_ms = requested_timeout
            .unwrap_or(default_timeout)
            .min(max_timeout);
        let confined = match &policy {
            Some(p) if settings.confines && p.mode.is_confined() => {
                Some(confine(command, &run, p).await?)
            }
            _ => None,
        };
        let (program, argv) = match &confined {
            Some(c) => (
                c.program.to_string_lossy().into_owned(),
                c.args
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
            ),
            None => ("bash".to_string(), vec!["-c".into(), command.to_string()]),
        };
        // An unconfined command in a session whose client offers terminals runs in one
        // (the editor shows it live); a confined one always runs here, in the sandbox.
        if confined.is_none()
            && let Some(terminals) = dsh_tools::client_terminals(&run)
        {
            return self
                .run_in_client_terminal(
                    terminals,
                    command,
                    &run,
                    workdir,
                    env::child_env(managed),
                    timeout_ms,
                    &settings,
                    policy.as_ref(),
                )
                .await;
        }
        let runner_workdir = workdir.clone();
        let spec = process::SpawnSpec {
            program,
            args: argv,
            cwd: workdir,
            env: env::child_env(managed),
            timeout: Some(Duration::from_secs_f64(
                timeout_ms.min(MAX_TIMER_DELAY_MS) / 1000.0,
            )),
            max_output_bytes: settings.max_output_bytes as usize,
            max_spill_bytes: settings.max_spill_bytes as u64,
            grace: Duration::from_secs_f64(settings.grace_ms / 1000.0),
            spill_dir: spill_dir(&run),
            taps: dsh_tools::OutputTap::for_call(&run, dsh_tools::OutputStream::Stdout).zip(
                dsh_tools::OutputTap::for_call(&run, dsh_tools::OutputStream::Stderr),
            ),
            resident: resident_spec(confined.as_ref(), &run, command),
        };
        if run.cancel.is_cancelled() {
            return Err(errors::aborted());
        }
        let runner_program = PathBuf::from(&spec.program);
        let outcome = match process::run(spec, run.cancel.clone()).await {
            Ok(o) => o,
            Err(e) => {
                if let (Some(p), Some(_)) = (&policy, &confined)
                    && is_runner_spawn_failure(&e, &runner_workdir)
                {
                    return Err(SandboxUnavailable::new(
                        p.mode,
                        Some(spawn_detail(&runner_program, &e)),
                    )
                    .into_error()
                    .into());
                }
                return Err(spawn_error(e));
            }
        };
        if outcome.aborted {
            return Err(errors::aborted());
        }
        let markers = self.sandbox_markers(&outcome, policy.as_ref(), confined.as_ref())?;
        run.set_value(render::typed_value(
            &outcome,
            timeout_ms,
            policy.as_ref().map(|p| {
                (
                    p.mode.as_str().to_string(),
                    !markers.is_empty(),
                    confined.as_ref().map(|c| c.enforcement.as_str()),
                )
            }),
        ));
        Ok(ToolOutput {
            meta: Some(cwd_meta(&runner_workdir)),
            ..ToolOutput::text(render::render_result(&outcome, timeout_ms, &markers))
        })
    }

    /// The standing policy of a confining executor (`confines`) or a sandboxed tool; an
    /// approved escalation widens it for this one call.
    async fn policy(
        &self,
        confines: bool,
        run: &ToolRunContext,
    ) -> Result<Option<dsh_sandbox::ExecutionPolicy>, BoxError> {
        let escalation = EscalationArgs::from_args(run.arguments());
        escalation.validate()?;
        let mut policy = (confines || self.sandboxed).then(|| {
            let service = run.ctx.get::<SandboxPolicy>();
            let session = run.session.as_deref();
            match service {
                Some(p) => p.resolve(session),
                None => SandboxPolicy::new(SandboxMode::from_env_or_default(), &process_cwd())
                    .resolve(session),
            }
        });
        if let Some((mode, justification)) = escalation.requested() {
            let Some(policy) = policy.as_mut() else {
                return Err(errors::plain(
                    "sandbox_permissions does not apply here: commands in this setup do not run in a sandbox, so there is nothing to widen; call again without sandbox_permissions and justification",
                ));
            };
            policy.mode = approve_escalation(
                mode,
                justification,
                policy.mode,
                "command",
                run,
                run.arguments(),
            )
            .await?;
        }
        Ok(policy)
    }

    /// The variables a command gets from the harness: the session's managed facts, then what
    /// the front end publishes (`DSH_WEB_URL`); the managed facts win a clash.
    /// What a confined run's output says about the sandbox: a runner that could not start
    /// is an error; a denial gets its marker (and, for the sandboxed tool, the hint that an
    /// escalation can be asked for).
    fn sandbox_markers(
        &self,
        outcome: &process::RunOutcome,
        policy: Option<&dsh_sandbox::ExecutionPolicy>,
        confined: Option<&dsh_sandbox::runner::Confined>,
    ) -> Result<Vec<String>, BoxError> {
        let mut markers = Vec::new();
        if let (Some(p), Some(c)) = (policy, confined) {
            if let Some(line) = runner_failure(
                outcome.exit_code,
                &outcome.stderr.text,
                &c.runner_failure_rules,
            ) {
                runner_failed(c.runner);
                return Err(SandboxUnavailable::new(p.mode, Some(line))
                    .into_error()
                    .into());
            }
            if denied(
                outcome.exit_code,
                &outcome.stderr.text,
                &c.denial_signatures,
            ) {
                markers.push(denial_marker(p.mode));
                if self.sandboxed {
                    markers.push(escalation_hint("command"));
                }
            }
        }
        Ok(markers)
    }

    fn managed_env(&self, run: &ToolRunContext) -> Vec<(String, String)> {
        let mut managed = match run.ctx.get::<ShellEnv>() {
            Some(shell_env) => shell_env.collect(run.session.as_ref()),
            None => self.fallback_env.collect(run.session.as_ref()),
        };
        if let Some(host) = run.ctx.get::<dsh_tools::HostShellVars>() {
            for (name, value) in host.snapshot() {
                if !managed.iter().any(|(n, _)| *n == name) {
                    managed.push((name, value));
                }
            }
            managed.sort();
        }
        managed
    }

    /// Runs `command` in the session's client terminal; the result reads as a local run's
    /// (the terminal's combined output as stdout).
    #[allow(clippy::too_many_arguments)]
    async fn run_in_client_terminal(
        &self,
        terminals: Arc<dyn dsh_tools::ClientTerminals>,
        command: &str,
        run: &ToolRunContext,
        workdir: PathBuf,
        env: Vec<(String, String)>,
        timeout_ms: f64,
        settings: &BashSettings,
        policy: Option<&dsh_sandbox::ExecutionPolicy>,
    ) -> Result<ToolOutput, BoxError> {
        if run.cancel.is_cancelled() {
            return Err(errors::aborted());
        }
        let exit = terminals
            .run(
                dsh_tools::TerminalCommand {
                    call_id: run.call_id.clone(),
                    command: command.to_string(),
                    cwd: workdir.clone(),
                    env,
                    timeout: Some(Duration::from_secs_f64(
                        timeout_ms.min(MAX_TIMER_DELAY_MS) / 1000.0,
                    )),
                    output_limit: settings.max_output_bytes as usize,
                },
                run.cancel.clone(),
            )
            .await
            .map_err(|e| {
                errors::plain(format!(
                    "the editor's terminal could not run the command: {e}"
                ))
            })?;
        if exit.aborted {
            return Err(errors::aborted());
        }
        let outcome = process::RunOutcome {
            exit_code: exit.exit_code,
            signal: exit.signal,
            timed_out: exit.timed_out,
            aborted: false,
            stdout: process::Collected {
                text: exit.output,
                truncated: exit.truncated,
                spill_path: None,
            },
            stderr: process::Collected::default(),
        };
        run.set_value(render::typed_value(
            &outcome,
            timeout_ms,
            policy.map(|p| (p.mode.as_str().to_string(), false, None)),
        ));
        Ok(ToolOutput {
            meta: Some(cwd_meta(&workdir)),
            ..ToolOutput::text(render::render_result(&outcome, timeout_ms, &[]))
        })
    }

    /// Starts `command` as a background job owned by the calling session. Confinement is
    /// decided exactly as in the foreground (a refusal fails the call and starts nothing).
    #[allow(clippy::too_many_arguments)]
    async fn start_background(
        &self,
        jobs: &dsh_jobs::JobRegistry,
        command: &str,
        run: &ToolRunContext,
        policy: Option<&dsh_sandbox::ExecutionPolicy>,
        settings: &BashSettings,
        workdir: PathBuf,
        managed: Vec<(String, String)>,
    ) -> Result<ToolOutput, BoxError> {
        let owner = run
            .session
            .as_ref()
            .and_then(|session| jobs.owner_of(&session.id()));
        jobs.preflight(owner.as_ref())?;
        let confined = match policy {
            Some(p) if settings.confines && p.mode.is_confined() => {
                Some((p.mode, confine(command, run, p).await?))
            }
            _ => None,
        };
        let (program, argv) = match &confined {
            Some((_, c)) => (
                c.program.to_string_lossy().into_owned(),
                c.args
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
            ),
            None => ("bash".to_string(), vec!["-c".into(), command.to_string()]),
        };
        let meta = cwd_meta(&workdir);
        let spec = background::BackgroundSpec {
            program,
            args: argv,
            cwd: workdir,
            env: env::child_env(managed),
            max_output_bytes: settings.max_output_bytes as usize,
            max_spill_bytes: settings.max_spill_bytes as u64,
            grace: Duration::from_secs_f64(settings.grace_ms / 1000.0),
            spill_dir: spill_dir(run),
            confinement: confined.map(|(mode, c)| background::Confinement {
                mode,
                denial_signatures: c.denial_signatures,
                runner_failure_rules: c.runner_failure_rules,
                runner: c.runner,
            }),
            escalation: self.sandboxed,
        };
        let start = dsh_jobs::JobStart {
            kind: "bash".into(),
            label: command.to_string(),
            owner,
            output_limit_bytes: None,
            announce: dsh_jobs::Announce::AfterStartingStep,
            tool_call: Some(run.call_id.clone()),
        };
        let id = jobs.start(start, |settler| Ok(background::start(spec, settler)))?;
        run.set_value(serde_json::json!({"kind": "background", "jobId": id.to_string()}));
        Ok(ToolOutput {
            meta: Some(meta),
            ..ToolOutput::text(format!("started background job {id}"))
        })
    }

    /// An explicit workdir wins (relative ones resolve against the session workspace);
    /// otherwise the directory a frontend moved the session to, the sandbox root, the
    /// session cwd's filesystem identity, the executor's configured cwd, or the process cwd.
    fn workdir(
        &self,
        requested: Option<&str>,
        run: &ToolRunContext,
        policy_root: Option<&Path>,
        settings: &BashSettings,
    ) -> PathBuf {
        let origin = run.session.as_ref().and_then(|s| s.header().cwd);
        let moved = run
            .cwd
            .as_ref()
            .filter(|cwd| {
                origin
                    .as_deref()
                    .is_none_or(|o| Path::new(o) != cwd.as_path())
            })
            .map(|cwd| canonical_path(cwd));
        let session = moved
            .or_else(|| policy_root.map(Path::to_path_buf))
            .or_else(|| session_cwd(run).map(|cwd| canonical_path(Path::new(&cwd))));
        match (requested, session) {
            (Some(dir), Some(base)) if !Path::new(dir).is_absolute() => resolve_lexical(&base, dir),
            (Some(dir), _) => PathBuf::from(dir),
            (None, Some(base)) => base,
            (None, None) => settings.cwd.clone().unwrap_or_else(process_cwd),
        }
    }
}

/// A runner could not run a command: a recorded bubblewrap verdict is not trusted again.
fn runner_failed(runner: &str) {
    if runner == "bwrap" {
        dsh_sandbox::forget_bwrap_verdict();
    }
}

/// Wraps `bash -c command` in the sandbox runner for `policy`, or refuses.
async fn confine(
    command: &str,
    run: &ToolRunContext,
    policy: &dsh_sandbox::ExecutionPolicy,
) -> Result<dsh_sandbox::runner::Confined, BoxError> {
    if !policy.workspace_root.is_dir() {
        return Err(SandboxUnavailable::new(
            policy.mode,
            Some(format!(
                "the workspace root {} does not exist",
                policy.workspace_root.display()
            )),
        )
        .into_error()
        .into());
    }
    let Some(sandbox) = run.ctx.get::<Sandbox>() else {
        return Err(SandboxUnavailable::new(
            policy.mode,
            Some("no sandbox provider is composed".into()),
        )
        .into_error()
        .into());
    };
    let argv = vec!["bash".into(), "-c".into(), command.into()];
    sandbox
        .0
        .confine(argv, policy.clone())
        .await
        .map_err(|e| BoxError::from(e.into_error()))
}

/// The session's resident sandbox for a confined command, when the runner can host one
/// (`DSH_SANDBOX_RESIDENT=0` turns residents off: every command gets its own runner).
fn resident_spec(
    confined: Option<&dsh_sandbox::runner::Confined>,
    run: &ToolRunContext,
    command: &str,
) -> Option<(dsh_sandbox::resident::ResidentSpec, Vec<std::ffi::OsString>)> {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *OFF.get_or_init(|| std::env::var_os("DSH_SANDBOX_RESIDENT").is_some_and(|v| v == "0")) {
        return None;
    }
    let confined = confined?;
    let spec = dsh_sandbox::resident::ResidentSpec {
        session: run.session.as_ref()?.id(),
        program: confined.program.clone(),
        args: confined.serve_args.clone()?,
    };
    Some((spec, vec!["bash".into(), "-c".into(), command.into()]))
}

/// Full outputs go to the session's spill area (the `spillStore` every tool shares);
/// without a store, beside the session's log, never the temp directory.
fn spill_dir(run: &ToolRunContext) -> Option<PathBuf> {
    let session = run.session.as_ref()?;
    if let Some(store) = run.ctx.get::<dsh_tools::SpillStore>() {
        return store.0.session_dir(&session.id());
    }
    let artifacts = run.ctx.get::<dsh_session::Artifacts>()?;
    artifacts
        .0
        .artifact_dir(&session.header())
        .map(|dir| dir.join("spill"))
}

/// Node's spawn failure text (`spawn bash ENOENT`), e.g. for a missing workdir.
fn spawn_error(error: std::io::Error) -> BoxError {
    let code = match error.raw_os_error() {
        Some(libc::ENOENT) => "ENOENT".to_string(),
        Some(libc::EACCES) => "EACCES".to_string(),
        Some(libc::ENOTDIR) => "ENOTDIR".to_string(),
        Some(libc::EPERM) => "EPERM".to_string(),
        Some(libc::E2BIG) => "E2BIG".to_string(),
        Some(libc::ENOMEM) => "ENOMEM".to_string(),
        Some(libc::EAGAIN) => "EAGAIN".to_string(),
        _ => error.to_string(),
    };
    errors::plain(format!("spawn bash {code}"))
}

impl TypedTool for BashTool {
    type Args = BashArgs;
    /// `{kind: "background", jobId}` or the foreground outcome, reported by the body.
    type Value = ();

    fn name(&self) -> String {
        "bash".into()
    }

    fn description(&self) -> String {
        self.inner.description.clone()
    }

    fn tune(&self, params: &mut ObjectSchema) {
        if !self.inner.config.enable_run_in_background {
            params
                .properties
                .retain(|(name, _, _)| name != "run_in_background");
        }
        if self.inner.sandboxed {
            *params = std::mem::take(params)
                .optional(
                    "sandbox_permissions",
                    Prop::enumeration(
                        "A wider sandbox mode for this one command. Only for retrying a command the sandbox just refused; needs a justification and the user's approval.",
                        &ESCALATION_TARGETS,
                    ),
                )
                .optional(
                    "justification",
                    Prop::string("Goes with sandbox_permissions: one sentence telling the user why this command needs the wider access."),
                );
        }
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(crate::outputs::bash().clone()))
    }

    async fn run(
        self: Arc<Self>,
        args: BashArgs,
        ctx: ToolRunContext,
    ) -> Result<Reply<()>, BoxError> {
        Ok(Reply::output(self.inner.run(args, ctx).await?))
    }
}

/// `@deepseek-ai/dsh-tool-bash` (config `{enableRunInBackground?, timeoutMs?,
/// maxTimeoutMs?, sandboxed?}`): registers `bash`.
pub struct ToolBashPlugin;

impl Plugin for ToolBashPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-bash"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "promoteOnTimeout",
            "a command that times out is stopped and reported; use run_in_background for long commands",
        )]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: ToolConfigRow = config.parse()?;
        if let Some(t) = row.timeout_ms {
            positive("tool-bash", "timeoutMs", t)?;
        }
        // Commands will run in process groups: have the reaper up before the first one.
        dsh_process::start_reaper_soon();
        if let Some(t) = row.max_timeout_ms {
            positive("tool-bash", "maxTimeoutMs", t)?;
        }
        let confines = ctx
            .get::<BashExecutor>()
            .is_some_and(|e| e.settings.confines);
        let config = BashToolConfig {
            enable_run_in_background: row.enable_run_in_background,
            timeout_ms: row.timeout_ms,
            max_timeout_ms: row.max_timeout_ms,
            sandboxed: Some(row.sandboxed.unwrap_or(confines)),
        };
        let tool = BashTool::new(config);
        Guidance::<BashGuidance>::publish(ctx, vec![tool.prompt_section()])?;
        ctx.require::<ToolRegistry>()?
            .register(ctx, Arc::new(Typed::new(tool)?))?;
        Ok(())
    }
}
