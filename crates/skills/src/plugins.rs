//! The config rows: `skill` (the registry), `skill-filesystem`, `tool-skill`, `skill-badge`.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_host::absolute_path as absolute;
use dsh_kernel::{BoxError, Catalog, Context, Plugin, PluginConfig};
use dsh_tools::ToolRegistry;
use serde::Deserialize;

use crate::filesystem::{FileSystemProvider, FileSystemProviderConfig};
use crate::registry::SkillRegistry;

/// Registers the four skill plugins.
pub fn register_catalog(catalog: &mut Catalog) {
    catalog.register(SkillRegistryPlugin);
    catalog.register(SkillFileSystemPlugin);
    catalog.register(ToolSkillPlugin);
    catalog.register(SkillBadgePlugin);
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RegistryRow {
    /// Upstream caches listings; this registry reads providers afresh, so the bound is
    /// accepted for compatibility and only validated.
    collect_cache_max_entries: Option<f64>,
}

/// `@deepseek-ai/dsh-skill`: provides the [`SkillRegistry`] service.
pub struct SkillRegistryPlugin;

impl Plugin for SkillRegistryPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-skill"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: RegistryRow = config.parse()?;
        if let Some(n) = row.collect_cache_max_entries
            && (n.fract() != 0.0 || n < 1.0)
        {
            return Err("skills: collectCacheMaxEntries must be a positive integer".into());
        }
        ctx.provide(SkillRegistry::new())?;
        Ok(())
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileSystemRow {
    provider_name: Option<String>,
    include_default_roots: Option<bool>,
    dsh_home: Option<String>,
    agents_home: Option<String>,
    #[serde(default)]
    custom_skill_dirs: Vec<String>,
    bundled_skill_dir: Option<String>,
    // Upstream watches roots to invalidate its cache; listings here are never cached, so
    // these are accepted and have nothing to tune.
    watch: Option<bool>,
    watch_use_polling: Option<bool>,
    watch_stability_threshold_ms: Option<f64>,
    watch_poll_interval_ms: Option<f64>,
    watch_max_projects: Option<f64>,
    watch_follow_symlinks: Option<bool>,
}

/// The configured path, else the environment variable, else `~/<fallback>`.
fn home_dir(configured: Option<&str>, var: &str, fallback: &str) -> PathBuf {
    if let Some(p) = configured.filter(|p| !p.trim().is_empty()) {
        return absolute(p);
    }
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => absolute(&v),
        _ => absolute(&format!("~/{fallback}")),
    }
}

/// `@deepseek-ai/dsh-skill-filesystem`: skills in folders on disk.
pub struct SkillFileSystemPlugin;

impl Plugin for SkillFileSystemPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-skill-filesystem"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: FileSystemRow = config.parse()?;
        for (field, value) in [
            (
                "watchStabilityThresholdMs",
                row.watch_stability_threshold_ms,
            ),
            ("watchPollIntervalMs", row.watch_poll_interval_ms),
            ("watchMaxProjects", row.watch_max_projects),
        ] {
            if let Some(v) = value
                && (v.fract() != 0.0 || v < 1.0)
            {
                return Err(format!("skill-filesystem: {field} must be a positive integer").into());
            }
        }
        let _ = (row.watch, row.watch_use_polling, row.watch_follow_symlinks);
        let provider_name = row.provider_name.unwrap_or_else(|| "filesystem".into());
        if provider_name.is_empty() {
            return Err("skill-filesystem: providerName must not be empty".into());
        }
        let include_default_roots = row.include_default_roots.unwrap_or(true);
        // The environment's bundled root is a default root: a provider limited to its
        // explicit roots must not rediscover the app's bundled skills.
        let bundled = row.bundled_skill_dir.or_else(|| {
            include_default_roots
                .then(|| std::env::var("DSH_BUNDLED_SKILL_DIR").ok())
                .flatten()
                .filter(|v| !v.trim().is_empty())
        });
        let provider = FileSystemProvider::new(FileSystemProviderConfig {
            provider_name,
            include_default_roots,
            dsh_home: home_dir(row.dsh_home.as_deref(), "DSH_HOME", ".dsh"),
            agents_home: home_dir(row.agents_home.as_deref(), "DSH_AGENTS_HOME", ".agents"),
            custom_skill_dirs: row.custom_skill_dirs.iter().map(|d| absolute(d)).collect(),
            bundled_skill_dir: bundled.as_deref().map(absolute),
        });
        ctx.require::<SkillRegistry>()?
            .register_provider(ctx, Arc::new(provider))?;
        Ok(())
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ToolRow {
    catalog_description_max_length: Option<f64>,
}

/// `@deepseek-ai/dsh-tool-skill`: the `skill` tool, the session catalog, `/name`.
pub struct ToolSkillPlugin;

impl Plugin for ToolSkillPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-skill"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: ToolRow = config.parse()?;
        let max = row.catalog_description_max_length.unwrap_or(500.0);
        if max.fract() != 0.0 || max < 3.0 || max > f64::from(u32::MAX) {
            return Err(
                "tool-skill: catalogDescriptionMaxLength must be an integer greater than or equal to 3"
                    .into(),
            );
        }
        let skills = ctx.require::<SkillRegistry>()?;
        let tools = ctx.require::<ToolRegistry>()?;
        crate::tool::install(ctx, skills, tools, max as usize)
    }
}

/// `@deepseek-ai/dsh-skill-badge`: a bundled skill about the "powered by dsh" badge.
pub struct SkillBadgePlugin;

impl Plugin for SkillBadgePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-skill-badge"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.require::<SkillRegistry>()?
            .register_provider(ctx, Arc::new(crate::badge::BadgeProvider))?;
        Ok(())
    }
}
