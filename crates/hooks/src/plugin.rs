//! The two bridge plugins: `@deepseek-ai/dsh-hooks-claude-code` (config `{configPath,
//! pluginRoot?, projectDir?, defaultTimeoutMs?, stderrSummaryMaxChars?}`) and
//! `@deepseek-ai/dsh-hooks-codex` (config `{configPath, model?, defaultTimeoutMs?,
//! stderrSummaryMaxChars?}`).
//!
//! `configPath` is read once at load; a relative path resolves against the process cwd,
//! so one file applies to every session. A missing file registers nothing (an `info`
//! line); an unreadable or invalid one registers nothing and warns (hooks are opt-in; a
//! broken file must not break boot). Hook commands run in each session's cwd.

use std::path::Path;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use serde::Deserialize;

use crate::bridge::{Bridge, BridgeSettings, install};
use crate::config::{ConfigError, HookPoint, SkipReason, Substitutions, load_config};
use crate::protocol::{DEFAULT_HOOK_TIMEOUT_MS, DEFAULT_STDERR_SUMMARY_MAX_CHARS, HookDialect};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClaudeCodeConfig {
    config_path: String,
    plugin_root: Option<String>,
    project_dir: Option<String>,
    default_timeout_ms: Option<f64>,
    stderr_summary_max_chars: Option<f64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CodexConfig {
    config_path: String,
    model: Option<String>,
    default_timeout_ms: Option<f64>,
    stderr_summary_max_chars: Option<f64>,
}

/// The summary cap bounds a persisted field: it must be a positive integer.
fn summary_cap(label: &str, value: Option<f64>) -> Result<usize, BoxError> {
    match value {
        None => Ok(DEFAULT_STDERR_SUMMARY_MAX_CHARS),
        Some(v) if v.fract() == 0.0 && v >= 1.0 && v <= usize::MAX as f64 => Ok(v as usize),
        Some(_) => Err(format!("{label}: stderrSummaryMaxChars must be a positive integer").into()),
    }
}

fn load(
    ctx: &Context,
    dialect: HookDialect,
    label: &str,
    path: &str,
    substitutions: &Substitutions,
    settings: BridgeSettings,
) -> Result<(), BoxError> {
    let parsed = match load_config(Path::new(path), dialect, substitutions) {
        Ok(p) => p,
        // No file is the ordinary "no hooks" case: say so quietly.
        Err(ConfigError::Read(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::info!("{label}: no hook config at \"{path}\" — no hooks registered");
            return Ok(());
        }
        Err(e) => {
            tracing::warn!(
                "{label}: could not load hook config \"{path}\": {e} — no hooks registered"
            );
            return Ok(());
        }
    };
    for s in &parsed.skipped {
        let event = s.point.as_str();
        match (dialect, &s.reason) {
            (HookDialect::ClaudeCode, SkipReason::UnsupportedType(t)) => {
                tracing::warn!(
                    "{label}: skipping unsupported \"{t}\" hook on {event} (only command hooks run)"
                );
            }
            (HookDialect::Codex, SkipReason::UnsupportedType(t)) => {
                tracing::warn!(
                    "{label}: skipping unsupported \"{t}\" hook on {event} (only sync command hooks run)"
                );
            }
            (_, SkipReason::Async) => {
                tracing::warn!(
                    "{label}: skipping async hook on {event} (only sync command hooks run)"
                );
            }
        }
    }
    if dialect == HookDialect::Codex {
        for point in [HookPoint::SubagentStart, HookPoint::SubagentStop] {
            if parsed.config.has(point) {
                tracing::warn!(
                    "{label}: {} hooks are not supported by the Codex dialect (ignored)",
                    point.as_str()
                );
            }
        }
    }
    // Hook commands run confined under the deployment's default mode (upstream runs them
    // through its shell executor without a session policy).
    let confinement = ctx
        .get::<dsh_sandbox::Sandbox>()
        .zip(ctx.get::<dsh_sandbox::SandboxPolicy>());
    install(
        ctx,
        Bridge::new(dialect, parsed.config, settings).with_confinement(confinement),
    )
}

/// `@deepseek-ai/dsh-hooks-claude-code`: unmodified Claude Code command hooks.
pub struct ClaudeCodeHooksPlugin;

impl Plugin for ClaudeCodeHooksPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-hooks-claude-code"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let label = "hooks-claude-code";
        let c: ClaudeCodeConfig = config.parse()?;
        let settings = BridgeSettings {
            default_timeout_ms: c.default_timeout_ms.unwrap_or(DEFAULT_HOOK_TIMEOUT_MS),
            stderr_summary_max_chars: summary_cap(label, c.stderr_summary_max_chars)?,
            project_dir: c.project_dir.clone(),
            model: String::new(),
        };
        let substitutions = Substitutions {
            plugin_root: c.plugin_root,
            project_dir: c.project_dir,
        };
        load(
            ctx,
            HookDialect::ClaudeCode,
            label,
            &c.config_path,
            &substitutions,
            settings,
        )
    }
}

/// `@deepseek-ai/dsh-hooks-codex`: unmodified Codex command hooks.
pub struct CodexHooksPlugin;

impl Plugin for CodexHooksPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-hooks-codex"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let label = "hooks-codex";
        let c: CodexConfig = config.parse()?;
        let settings = BridgeSettings {
            default_timeout_ms: c.default_timeout_ms.unwrap_or(DEFAULT_HOOK_TIMEOUT_MS),
            stderr_summary_max_chars: summary_cap(label, c.stderr_summary_max_chars)?,
            project_dir: None,
            model: c.model.unwrap_or_default(),
        };
        load(
            ctx,
            HookDialect::Codex,
            label,
            &c.config_path,
            &Substitutions::default(),
            settings,
        )
    }
}
