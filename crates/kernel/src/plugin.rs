//! Plugins, the catalog of compiled-in plugins, and loading a composed tree.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::error::{BoxError, KernelError};

/// A compiled-in plugin. `apply` registers everything the plugin contributes through `ctx`
/// (services, listeners, tools, tasks); every registration is an effect of `ctx`'s fiber, so
/// unloading the plugin undoes all of it. Implementations must not register anything through
/// a context other than `ctx` (or contexts derived from it) and must fail without side
/// effects that outlive `ctx` when the config is invalid.
pub trait Plugin: Send + Sync + 'static {
    /// The upstream package name, e.g. `@deepseek-ai/dsh-agent-loop`.
    fn name(&self) -> &'static str;
    /// Other names this plugin answers to (besides the derived short name).
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }
    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError>;
    /// Config keys that upstream 0.2's plugin of this name takes and this build does not,
    /// each with the reason. Setting one fails the load with that reason (rather than
    /// as an unknown key); `dsh --dump-config-schema` lists them.
    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    /// Config keys that upstream's plugin of this name takes and that change nothing this
    /// build does (they tune a mechanism it does not have), each with the reason. They are
    /// accepted with a warning naming the row and the key, and left out of the config the
    /// plugin parses; `dsh --dump-config-schema` lists them.
    fn upstream_keys_without_effect(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
}

/// The evaluated `config` of one row, with enough provenance for good error messages.
///
/// A config is read through [`PluginConfig::parse`] (every key the target type does not
/// take is an error naming it) or [`PluginConfig::raw`] (the plugin checks the keys
/// itself). A row whose plugin reads neither may carry no config: the loader refuses any
/// key such a row sets, so no key is ever ignored without a word.
#[derive(Clone, Debug)]
pub struct PluginConfig {
    pub row_id: String,
    pub source: String,
    value: serde_json::Value,
    read: Arc<AtomicBool>,
    /// Set when the loader only asks what the config takes (`dsh --dump-config-schema`).
    probe: Option<crate::config_shape::Slot>,
}

/// A config field had the wrong shape.
#[derive(Debug, thiserror::Error)]
#[error("{source_file}: row \"{row_id}\": config field `{field}`: {message}")]
pub struct ConfigFieldError {
    pub source_file: String,
    pub row_id: String,
    pub field: String,
    pub message: String,
}

impl PluginConfig {
    pub fn new(
        row_id: impl Into<String>,
        source: impl Into<String>,
        value: serde_json::Value,
    ) -> Self {
        Self {
            row_id: row_id.into(),
            source: source.into(),
            value,
            read: Arc::new(AtomicBool::new(false)),
            probe: None,
        }
    }

    /// A config that records what the plugin asks of it instead of answering.
    pub(crate) fn probing(row_id: &str, source: &str, slot: crate::config_shape::Slot) -> Self {
        Self {
            probe: Some(slot),
            ..Self::new(row_id, source, serde_json::Value::Null)
        }
    }

    /// The config as written, for a plugin that checks its keys itself.
    pub fn raw(&self) -> &serde_json::Value {
        self.read.store(true, Ordering::Relaxed);
        if let Some(slot) = &self.probe {
            let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert(crate::config_shape::ConfigShape::Checked);
        }
        &self.value
    }

    /// The config as written, for a plugin that checks it itself and takes these top-level
    /// keys (what `dsh --dump-config-schema` lists for it).
    pub fn raw_keys(&self, keys: &'static [&'static str]) -> &serde_json::Value {
        if let Some(slot) = &self.probe {
            let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert(crate::config_shape::ConfigShape::Fields(keys.to_vec()));
        }
        self.raw()
    }

    /// The config read by `read` (a plugin's own parser, with its own messages) whose
    /// result has the shape of `T`: when the loader only probes, `T`'s fields are
    /// recorded and `read` is not called.
    pub fn parse_with<T: DeserializeOwned, R>(
        &self,
        read: impl FnOnce(&serde_json::Value) -> Result<R, BoxError>,
    ) -> Result<R, BoxError> {
        if self.probe.is_some() {
            return Err(self.parse::<T>().err().map_or_else(
                || BoxError::from("config probe"),
                |e| BoxError::from(e.to_string()),
            ));
        }
        read(self.raw())
    }

    /// Whether the plugin read the config ([`Self::parse`] or [`Self::raw`]).
    pub fn was_read(&self) -> bool {
        self.read.load(Ordering::Relaxed)
    }

    fn field_error(&self, field: String, message: String) -> ConfigFieldError {
        ConfigFieldError {
            source_file: self.source.clone(),
            row_id: self.row_id.clone(),
            field: if field == "." || field.is_empty() {
                "(root)".to_string()
            } else {
                field
            },
            message,
        }
    }

    /// Deserializes the config; a missing config (`null`) is treated as `{}`. A key the
    /// target type does not take (at any depth) is an error naming it, never ignored; a
    /// key set to `null` counts as absent.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigFieldError> {
        self.read.store(true, Ordering::Relaxed);
        if let Some(slot) = &self.probe {
            let stop = T::deserialize(crate::config_shape::Recorder(slot))
                .err()
                .map_or_else(String::new, |e| e.to_string());
            return Err(self.field_error(String::new(), stop));
        }
        let value = match &self.value {
            serde_json::Value::Null => serde_json::Value::Object(Default::default()),
            other => other.clone(),
        };
        let mut ignored = Vec::new();
        let parsed: T = {
            let mut note = |path: serde_ignored::Path<'_>| {
                // `inner.?.key` (an Option on the way) reads as `inner.key`.
                let path = path.to_string();
                let parts: Vec<&str> = path
                    .split('.')
                    .map(|p| p.trim_end_matches('?'))
                    .filter(|p| !p.is_empty())
                    .collect();
                ignored.push(parts.join("."));
            };
            let de = serde_ignored::Deserializer::new(&value, &mut note);
            serde_path_to_error::deserialize(de)
                .map_err(|e| self.field_error(e.path().to_string(), e.into_inner().to_string()))?
        };
        let unknown: Vec<String> = ignored
            .into_iter()
            .filter(|path| !is_null_at(&value, path))
            .collect();
        if let Some(first) = unknown.first() {
            return Err(self.field_error(first.clone(), unknown_key_message(unknown.len())));
        }
        Ok(parsed)
    }

    /// The keys a plugin that did not read its config was given (null values aside).
    pub fn unread_keys(&self) -> Vec<String> {
        match &self.value {
            serde_json::Value::Object(map) if !self.was_read() => map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, _)| k.clone())
                .collect(),
            _ => Vec::new(),
        }
    }
}

fn unknown_key_message(count: usize) -> String {
    let others = match count {
        1 => String::new(),
        2 => " (and 1 more unknown key)".to_string(),
        n => format!(" (and {} more unknown keys)", n - 1),
    };
    format!(
        "unknown key: this plugin does not take it{others}; check its spelling against `dsh --dump-config-schema`, or remove it"
    )
}

/// Whether `path` (as serde_ignored prints it, `a.b.0.c`) names a `null` in `value`.
fn is_null_at(value: &serde_json::Value, path: &str) -> bool {
    let mut at = value;
    for part in path.split('.') {
        at = match at {
            serde_json::Value::Object(m) => match m.get(part) {
                Some(v) => v,
                None => return false,
            },
            serde_json::Value::Array(items) => {
                match part.parse::<usize>().ok().and_then(|i| items.get(i)) {
                    Some(v) => v,
                    None => return false,
                }
            }
            _ => return false,
        };
    }
    at.is_null()
}

/// The compiled-in plugins, looked up by name.
#[derive(Default, Clone)]
pub struct Catalog {
    entries: Vec<Arc<dyn Plugin>>,
}

/// `@deepseek-ai/dsh-agent-loop`, `dsh-agent-loop` and `agent-loop` all name the same plugin.
pub fn short_plugin_name(name: &str) -> &str {
    let name = name.strip_prefix("@deepseek-ai/").unwrap_or(name);
    name.strip_prefix("dsh-").unwrap_or(name)
}

impl Catalog {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, plugin: impl Plugin) -> &mut Self {
        self.entries.push(Arc::new(plugin));
        self
    }

    pub fn lookup(&self, name: &str) -> Option<Arc<dyn Plugin>> {
        let wanted = short_plugin_name(name);
        self.entries
            .iter()
            .find(|p| {
                short_plugin_name(p.name()) == wanted
                    || p.aliases()
                        .iter()
                        .any(|a| *a == name || short_plugin_name(a) == wanted)
            })
            .cloned()
    }

    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.entries.iter().map(|p| p.name())
    }
}

/// One row of a composed tree, ready to load.
#[derive(Clone, Debug)]
pub struct LoadRow {
    pub id: String,
    pub name: String,
    pub source: String,
    pub config: serde_json::Value,
    /// Rows of a `cordis:group` row, loaded under the group's fiber.
    pub children: Vec<LoadRow>,
}

/// Loading a tree failed; everything loaded before the failure was unloaded again.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{source_file}: row \"{row_id}\": unknown plugin \"{name}\"")]
    UnknownPlugin {
        source_file: String,
        row_id: String,
        name: String,
    },
    #[error("{}", apply_message(.source_file, .row_id, .name, .error))]
    Apply {
        source_file: String,
        row_id: String,
        name: String,
        error: BoxError,
    },
}

/// `<file>: row "<id>" (<name>): <error>`, without repeating a `<file>: row "<id>"` prefix
/// the error already carries.
fn apply_message(source_file: &str, row_id: &str, name: &str, error: &BoxError) -> String {
    let text = error.to_string();
    let prefix = format!("{source_file}: row \"{row_id}\"");
    let rest = text
        .strip_prefix(&prefix)
        .map(|r| r.trim_start_matches(':').trim_start())
        .unwrap_or(&text);
    format!("{prefix} ({name}): {rest}")
}

/// The plugins of one loaded tree. Unloading disposes them in reverse order.
pub struct LoadedTree {
    ctx: Context,
    rows: Vec<String>,
}

impl LoadedTree {
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    pub fn row_ids(&self) -> &[String] {
        &self.rows
    }

    pub fn unload(self) {
        self.ctx.dispose();
    }
}

/// Loads `rows` in order, each as a child fiber named by its row id under a fresh tree
/// fiber of `parent`. On the first failure the partially loaded tree is unloaded and the
/// error names the file, the row and the plugin.
pub fn load_tree(
    parent: &Context,
    catalog: &Catalog,
    rows: &[LoadRow],
) -> Result<LoadedTree, LoadError> {
    let tree = parent.child("tree");
    let mut loaded = Vec::with_capacity(rows.len());
    if let Err(e) = load_rows(&tree, catalog, rows, &mut loaded) {
        tree.dispose();
        return Err(e);
    }
    Ok(LoadedTree {
        ctx: tree,
        rows: loaded,
    })
}

fn apply_error(row: &LoadRow, error: BoxError) -> LoadError {
    LoadError::Apply {
        source_file: row.source.clone(),
        row_id: row.id.clone(),
        name: row.name.clone(),
        error,
    }
}

/// The config `plugin` gets for `row`: an upstream key this build does not implement is
/// refused with its reason; one without effect here is dropped with a warning.
fn row_config(plugin: &dyn Plugin, row: &LoadRow) -> Result<serde_json::Value, String> {
    let mut value = row.config.clone();
    if let serde_json::Value::Object(map) = &mut value {
        let set = |v: &serde_json::Value| !v.is_null();
        if let Some((key, why)) = plugin
            .upstream_keys_not_taken()
            .iter()
            .find(|(key, _)| map.get(*key).is_some_and(set))
        {
            return Err(format!(
                "config key `{key}` is one upstream 0.2 takes, but this build does not implement it: {why}; remove the key"
            ));
        }
        for (key, why) in plugin.upstream_keys_without_effect() {
            if map.remove(*key).is_some_and(|v| set(&v)) {
                tracing::warn!(
                    "{}: row \"{}\": config key `{key}` has no effect in this build: {why}",
                    row.source,
                    row.id
                );
            }
        }
    }
    Ok(value)
}

fn load_rows(
    parent: &Context,
    catalog: &Catalog,
    rows: &[LoadRow],
    loaded: &mut Vec<String>,
) -> Result<(), LoadError> {
    // Resolve every name first so an unknown plugin registers nothing at all.
    for row in rows {
        if row.name != "cordis:group" && catalog.lookup(&row.name).is_none() {
            return Err(LoadError::UnknownPlugin {
                source_file: row.source.clone(),
                row_id: row.id.clone(),
                name: row.name.clone(),
            });
        }
    }
    // A plugin that needs a service a later row provides is retried after the others
    // (like upstream's `inject`); it fails only when a whole pass makes no progress.
    let mut pending: Vec<&LoadRow> = rows.iter().collect();
    loop {
        let mut deferred: Vec<(&LoadRow, BoxError)> = Vec::new();
        let mut progressed = false;
        for row in pending {
            let ctx = parent.child(row.id.clone());
            if row.name == "cordis:group" {
                load_rows(&ctx, catalog, &row.children, loaded)?;
                loaded.push(row.id.clone());
                progressed = true;
                continue;
            }
            let Some(plugin) = catalog.lookup(&row.name) else {
                continue;
            };
            let value = match row_config(plugin.as_ref(), row) {
                Ok(value) => value,
                Err(error) => {
                    ctx.dispose();
                    return Err(apply_error(row, error.into()));
                }
            };
            let config = PluginConfig::new(row.id.clone(), row.source.clone(), value);
            match plugin.apply(&ctx, &config) {
                Ok(()) => {
                    let unread = config.unread_keys();
                    if !unread.is_empty() {
                        ctx.dispose();
                        let error = format!(
                            "config key `{}`: this plugin takes no config; remove the key{}",
                            unread.join("`, `"),
                            if unread.len() > 1 { "s" } else { "" }
                        );
                        return Err(apply_error(row, error.into()));
                    }
                    ctx.record_active_plugin(plugin.name());
                    loaded.push(row.id.clone());
                    progressed = true;
                }
                Err(error)
                    if matches!(
                        error.downcast_ref::<KernelError>(),
                        Some(KernelError::MissingService { .. })
                    ) =>
                {
                    ctx.dispose();
                    deferred.push((row, error));
                }
                Err(error) => return Err(apply_error(row, error)),
            }
        }
        if deferred.is_empty() {
            return Ok(());
        }
        if !progressed {
            let (row, error) = deferred.remove(0);
            return Err(apply_error(row, error));
        }
        pending = deferred.into_iter().map(|(r, _)| r).collect();
    }
}
