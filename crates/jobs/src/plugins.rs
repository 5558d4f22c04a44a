//! The registry rows: `jobs-local` (the service and its lifecycle listeners) and the
//! abstract `jobs` seam.

use std::sync::Arc;

use dsh_agent::{AgentDisposing, AgentStatus, AgentStatusChanged, PreStep};
use dsh_kernel::{BoxError, Catalog, Context, ListenOptions, Plugin, PluginConfig};
use serde::Deserialize;
use serde_json::Value;

use crate::registry::JobRegistry;
use crate::tools::ToolJobsPlugin;

/// Upstream's default active-job limit per owner.
pub const DEFAULT_MAX_JOBS_PER_OWNER: usize = 10;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LocalConfig {
    max_concurrent_jobs_per_owner: Option<f64>,
}

/// `@deepseek-ai/dsh-jobs-local` (config `{maxConcurrentJobsPerOwner}`, default 10):
/// provides the [`JobRegistry`]. Owned jobs are cancelled and awaited when their agent is
/// disposed (`agent/disposing`); unloading the row cancels every job.
pub struct JobsLocalPlugin;

impl Plugin for JobsLocalPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-jobs-local"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "pumpPollMs",
                "job output is delivered as it arrives, not polled",
            ),
            (
                "retainBytes",
                "each job keeps its output in its own bounded buffer and spill file (see tool-jobs)",
            ),
            (
                "settledRetainBytes",
                "each job keeps its output in its own bounded buffer and spill file (see tool-jobs)",
            ),
        ]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: LocalConfig = config.parse()?;
        let limit = match c.max_concurrent_jobs_per_owner {
            None => DEFAULT_MAX_JOBS_PER_OWNER,
            Some(n) if n >= 1.0 && n.fract() == 0.0 && n <= 9_007_199_254_740_991.0 => n as usize,
            Some(n) => {
                return Err(format!(
                    "jobs-local: maxConcurrentJobsPerOwner must be a positive integer, got {}",
                    dsh_kernel::json::to_string(&Value::from(n))
                )
                .into());
            }
        };
        let jobs = JobRegistry::new(ctx.clone(), limit);
        install_lifecycle(ctx, &jobs)?;
        ctx.provide(jobs.clone())?;
        let weak = Arc::downgrade(&jobs);
        ctx.effect("jobs teardown", move || {
            if let Some(jobs) = weak.upgrade() {
                jobs.close();
            }
        })?;
        Ok(())
    }
}

/// Step boundaries release deferred notices; an idle owner gets them at once; a disposing
/// owner's jobs are cancelled and awaited.
fn install_lifecycle(ctx: &Context, jobs: &Arc<JobRegistry>) -> Result<(), BoxError> {
    let j = Arc::downgrade(jobs);
    ctx.on_waterfall::<PreStep>(ListenOptions::default(), move |p, next| {
        let j = j.clone();
        Box::pin(async move {
            if let Some(jobs) = j.upgrade() {
                jobs.step_boundary(&p.agent);
            }
            next.run().await
        })
    })?;
    let j = Arc::downgrade(jobs);
    ctx.on_emit::<AgentStatusChanged>(ListenOptions::default(), move |p| {
        if p.status != AgentStatus::Idle {
            return Ok(());
        }
        if let Some(jobs) = j.upgrade() {
            let agent = p.agent.clone();
            // Outside the status change: a notice may open the next turn.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move { jobs.owner_idle(&agent) });
            }
        }
        Ok(())
    })?;
    let j = Arc::downgrade(jobs);
    ctx.on_serial::<AgentDisposing>(ListenOptions::default(), move |p| {
        let j = j.clone();
        Box::pin(async move {
            if let Some(jobs) = j.upgrade() {
                jobs.dispose_owned(&p.agent).await;
            }
            Ok(())
        })
    })?;
    Ok(())
}

/// `@deepseek-ai/dsh-jobs`: the abstract seam; loading it is a configuration error.
pub struct JobsSeamPlugin;

impl Plugin for JobsSeamPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-jobs"
    }

    fn apply(&self, _ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        Err("@deepseek-ai/dsh-jobs only names the job registry interface and cannot run jobs itself; load an implementation such as @deepseek-ai/dsh-jobs-local instead".into())
    }
}

/// Registers `jobs-local`, the `jobs` seam and `tool-jobs`.
pub fn register_catalog(catalog: &mut Catalog) {
    catalog.register(JobsLocalPlugin);
    catalog.register(JobsSeamPlugin);
    catalog.register(ToolJobsPlugin);
}
