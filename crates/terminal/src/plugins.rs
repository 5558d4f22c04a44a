//! The terminal rows.

use std::sync::Arc;
use std::time::Duration;

use dsh_agent::AgentDisposing;
use dsh_kernel::{BoxError, Catalog, Context, ListenOptions, Plugin, PluginConfig};
use dsh_session::{AppendedEvent, SessionAppended};
use serde::Deserialize;

use crate::local::{LocalBackend, LocalConfig};
use crate::persistent::{PersistentBashTool, PersistentConfig};
use crate::service::TerminalService;
use crate::tools::{ToolTerminalConfig, register};

/// `@deepseek-ai/dsh-terminal`: the terminal registry. An agent's terminals are closed
/// (every process in them ended) when the agent is disposed; unloading closes all.
pub struct TerminalPlugin;

impl Plugin for TerminalPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-terminal"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let service = TerminalService::new(ctx.clone());
        ctx.provide(service.clone())?;
        let s = Arc::downgrade(&service);
        ctx.on_serial::<AgentDisposing>(ListenOptions::default(), move |p| {
            let s = s.clone();
            Box::pin(async move {
                if let Some(s) = s.upgrade() {
                    s.dispose_owner(p.agent.id()).await;
                }
                Ok(())
            })
        })?;
        // A terminal is confined once, when it starts. When its owner's sandbox mode changes
        // (`/permission`), its terminals are closed, so none keeps running under a mode the
        // session no longer has; the next one starts under the new mode. (Upstream refuses
        // the change instead; our sessions have no veto before an append commits.)
        let s = Arc::downgrade(&service);
        ctx.on_emit::<SessionAppended>(ListenOptions::GLOBAL, move |a: &AppendedEvent| {
            if a.event.event_type != "sandbox/mode" {
                return Ok(());
            }
            let owner = a.session.id();
            if let Some(s) = s.upgrade()
                && s.has_sessions(&owner)
                && let Ok(rt) = tokio::runtime::Handle::try_current()
            {
                rt.spawn(async move { s.dispose_owner(&owner).await });
            }
            Ok(())
        })?;
        let s = Arc::downgrade(&service);
        ctx.effect("terminals teardown", move || {
            if let Some(s) = s.upgrade() {
                s.close_all();
            }
        })?;
        Ok(())
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct LocalRow {
    backend_type: Option<String>,
    shell_path: Option<String>,
    shell_args: Option<Vec<String>>,
    rows: Option<u16>,
    cols: Option<u16>,
    scrollback_lines: Option<usize>,
    scrollback_max_bytes: Option<usize>,
    max_read_bytes: Option<usize>,
    poll_interval_ms: Option<u64>,
    exact_probe_after_ms: Option<u64>,
    idle_silence_ms: Option<u64>,
    handoff_grace_ms: Option<u64>,
    timeout_ms: Option<u64>,
    dispose_grace_ms: Option<u64>,
}

/// `@deepseek-ai/dsh-terminal-bash`: the local interactive-bash backend (upstream's
/// settings: `pollIntervalMs`, `idleSilenceMs`, `timeoutMs`, …).
pub struct TerminalBashPlugin;

impl Plugin for TerminalBashPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-terminal-bash"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "promptTailGraceMs",
                "the persistent shell detects command completion by its own marker, not by waiting for a prompt",
            ),
            ("shellDialect", "the persistent shell is always bash"),
        ]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let r: LocalRow = config.parse()?;
        let d = LocalConfig::default();
        let ms = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_millis);
        let c = LocalConfig {
            backend_type: r.backend_type.unwrap_or(d.backend_type),
            shell_path: r.shell_path.unwrap_or(d.shell_path),
            shell_args: r.shell_args.unwrap_or(d.shell_args),
            rows: r.rows.unwrap_or(d.rows),
            cols: r.cols.unwrap_or(d.cols),
            scrollback_lines: r.scrollback_lines.unwrap_or(d.scrollback_lines),
            scrollback_max_bytes: r.scrollback_max_bytes.unwrap_or(d.scrollback_max_bytes),
            max_read_bytes: r.max_read_bytes.unwrap_or(d.max_read_bytes),
            poll: ms(r.poll_interval_ms, d.poll),
            exact_probe_after: ms(r.exact_probe_after_ms, d.exact_probe_after),
            idle_silence: ms(r.idle_silence_ms, d.idle_silence),
            handoff_grace: ms(r.handoff_grace_ms, d.handoff_grace),
            timeout: ms(r.timeout_ms, d.timeout),
            dispose_grace: ms(r.dispose_grace_ms, d.dispose_grace),
        };
        if c.backend_type.is_empty() {
            return Err("terminal-bash: backendType must be non-empty".into());
        }
        if c.max_read_bytes > c.scrollback_max_bytes {
            return Err("terminal-bash: maxReadBytes must not exceed scrollbackMaxBytes".into());
        }
        if c.handoff_grace < c.poll {
            return Err("terminal-bash: handoffGraceMs must be at least pollIntervalMs".into());
        }
        if c.poll.is_zero() || c.timeout.is_zero() || c.rows == 0 || c.cols == 0 {
            return Err(
                "terminal-bash: pollIntervalMs, timeoutMs, rows and cols must be positive".into(),
            );
        }
        let service = ctx.require::<TerminalService>()?;
        service.register_backend(ctx, Arc::new(LocalBackend { config: c }))
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ToolRow {
    enable_run_in_background: Option<bool>,
    max_result_bytes: Option<f64>,
}

/// `@deepseek-ai/dsh-tool-terminal` (`{enableRunInBackground, maxResultBytes}`).
pub struct ToolTerminalPlugin;

impl Plugin for ToolTerminalPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-terminal"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let r: ToolRow = config.parse()?;
        let d = ToolTerminalConfig::default();
        let max = match r.max_result_bytes {
            None => d.max_result_bytes,
            Some(v) if v >= 64.0 && v.fract() == 0.0 && v <= 9_007_199_254_740_991.0 => v as usize,
            Some(_) => {
                return Err(
                    "tool-terminal: maxResultBytes must be a safe integer of at least 64".into(),
                );
            }
        };
        let c = ToolTerminalConfig {
            enable_run_in_background: r
                .enable_run_in_background
                .unwrap_or(d.enable_run_in_background),
            max_result_bytes: max,
        };
        register(ctx, ctx.require::<TerminalService>()?, c)
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PersistentRow {
    backend_type: Option<String>,
    timeout_ms: Option<f64>,
    max_output_chars: Option<f64>,
    description: Option<String>,
}

/// `@deepseek-ai/dsh-tool-bash-persistent` (`{backendType, timeoutMs, maxOutputChars,
/// description}`):
/// registers a `bash` that keeps its shell (compose it instead of `tool-bash`).
pub struct ToolBashPersistentPlugin;

impl Plugin for ToolBashPersistentPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-bash-persistent"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let r: PersistentRow = config.parse()?;
        let d = PersistentConfig::default();
        let positive = |name: &str, v: Option<f64>, d: u64| -> Result<u64, BoxError> {
            match v {
                None => Ok(d),
                Some(v) if v >= 1.0 && v.fract() == 0.0 && v <= 9_007_199_254_740_991.0 => {
                    Ok(v as u64)
                }
                Some(_) => Err(format!(
                    "tool-bash-persistent: {name} must be a positive safe integer"
                )
                .into()),
            }
        };
        let backend_type = r.backend_type.unwrap_or(d.backend_type);
        if backend_type.is_empty() {
            return Err("tool-bash-persistent: backendType must be non-empty".into());
        }
        let c = PersistentConfig {
            backend_type,
            timeout: Duration::from_millis(positive("timeoutMs", r.timeout_ms, 300_000)?),
            max_output_chars: positive("maxOutputChars", r.max_output_chars, 16_000)? as usize,
            description: r.description,
        };
        let tools = ctx.require::<dsh_tools::ToolRegistry>()?;
        let tool = Arc::new(dsh_tools::Typed::new(PersistentBashTool::new(
            ctx.require::<TerminalService>()?,
            c,
        ))?);
        tools.register(ctx, tool.clone())?;
        let t = Arc::downgrade(&tool);
        ctx.on_serial::<AgentDisposing>(ListenOptions::default(), move |p| {
            if let Some(t) = t.upgrade() {
                t.inner().forget(p.agent.id());
            }
            Box::pin(async { Ok(()) })
        })?;
        Ok(())
    }
}

pub fn register_catalog(catalog: &mut Catalog) {
    catalog.register(TerminalPlugin);
    catalog.register(TerminalBashPlugin);
    catalog.register(ToolTerminalPlugin);
    catalog.register(ToolBashPersistentPlugin);
}
