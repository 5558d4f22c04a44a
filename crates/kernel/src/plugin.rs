//! Plugins, the catalog of compiled-in plugins, and loading a composed tree.

use std::sync::Arc;

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
}

/// The evaluated `config` of one row, with enough provenance for good error messages.
#[derive(Clone, Debug)]
pub struct PluginConfig {
    pub row_id: String,
    pub source: String,
    pub value: serde_json::Value,
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
        }
    }

    /// Deserializes the config; a missing config (`null`) is treated as `{}`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigFieldError> {
        let value = match &self.value {
            serde_json::Value::Null => serde_json::Value::Object(Default::default()),
            other => other.clone(),
        };
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            ConfigFieldError {
                source_file: self.source.clone(),
                row_id: self.row_id.clone(),
                field: if path == "." {
                    "(root)".to_string()
                } else {
                    path
                },
                message: e.into_inner().to_string(),
            }
        })
    }
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
            let config = PluginConfig::new(row.id.clone(), row.source.clone(), row.config.clone());
            match plugin.apply(&ctx, &config) {
                Ok(()) => {
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
                Err(error) => {
                    return Err(LoadError::Apply {
                        source_file: row.source.clone(),
                        row_id: row.id.clone(),
                        name: row.name.clone(),
                        error,
                    });
                }
            }
        }
        if deferred.is_empty() {
            return Ok(());
        }
        if !progressed {
            let (row, error) = deferred.remove(0);
            return Err(LoadError::Apply {
                source_file: row.source.clone(),
                row_id: row.id.clone(),
                name: row.name.clone(),
                error,
            });
        }
        pending = deferred.into_iter().map(|(r, _)| r).collect();
    }
}
