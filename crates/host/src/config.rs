//! Host services: the Harness home, `settings.yaml`, credentials, and the default model.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_kernel::config::{ConfigFileError, Node, parse, read_config_file};
use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use serde::Deserialize;
use serde_json::{Map, Value};

/// `$DSH_HOME` when set and not blank (made absolute by [`absolute_path`]), else `~/.dsh`.
pub fn dsh_home() -> PathBuf {
    match std::env::var("DSH_HOME") {
        Ok(v) if !v.trim().is_empty() => absolute_path(&v),
        _ => PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| ".".into())).join(".dsh"),
    }
}

/// `~`, `~/…` and relative paths made absolute (`$HOME`, the process's working directory).
pub fn absolute_path(path: &str) -> PathBuf {
    let home = std::env::var("HOME").unwrap_or_else(|_| ".".into());
    let expanded = if path == "~" {
        PathBuf::from(&home)
    } else if let Some(rest) = path.strip_prefix("~/") {
        Path::new(&home).join(rest)
    } else {
        PathBuf::from(path)
    };
    if expanded.is_absolute() {
        expanded
    } else {
        std::env::current_dir()
            .map(|d| d.join(&expanded))
            .unwrap_or(expanded)
    }
}

fn node_to_json(node: &Node) -> Value {
    match node {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(*b),
        Node::Int(i) => Value::from(*i),
        Node::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        Node::Str(s) | Node::Js(s) => Value::String(s.clone()),
        Node::Seq(items) => Value::Array(items.iter().map(node_to_json).collect()),
        Node::Map(entries) => Value::Object(
            entries
                .iter()
                .map(|(k, v)| (k.clone(), node_to_json(v)))
                .collect(),
        ),
    }
}

/// Parses a YAML (or JSON) document into JSON; a missing or empty file is `None`. The file
/// is read within the config size limit (`DSH_MAX_CONFIG_BYTES`).
pub fn read_yaml_file(path: &Path) -> Result<Option<Value>, String> {
    let Some(text) = read_config_file(path).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    match parse(&text) {
        Ok(node) => Ok(node.map(|n| node_to_json(&n))),
        Err(e) => Err(format!("invalid document at {}: {e}", path.display())),
    }
}

/// The user settings document (`ctx.settings`): one section per namespace.
///
/// Sections replaced at runtime ([`Settings::replace_section`], `settings_store.rs`) are
/// seen by [`Settings::live_section`]; [`Settings::section`] is the document as loaded.
#[derive(Default)]
pub struct Settings {
    pub path: PathBuf,
    sections: Map<String, Value>,
    /// Sections replaced since loading (`Null`: removed).
    pub(crate) replaced: std::sync::RwLock<Map<String, Value>>,
    /// Serializes read-modify-write cycles of `path`.
    pub(crate) write_lock: std::sync::Mutex<()>,
}

impl Settings {
    pub fn load(path: PathBuf) -> Result<Self, String> {
        let sections = match read_yaml_file(&path).map_err(|e| format!("settings-file: {e}"))? {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m,
            Some(_) => {
                return Err(format!(
                    "settings-file: {} must be a map of namespace sections",
                    path.display()
                ));
            }
        };
        for (ns, v) in &sections {
            if !v.is_object() && !v.is_null() {
                return Err(format!(
                    "{}: settings section \"{ns}\" must be an object of keys",
                    path.display()
                ));
            }
        }
        Ok(Self {
            path,
            sections,
            replaced: Default::default(),
            write_lock: Default::default(),
        })
    }

    pub fn section(&self, namespace: &str) -> Option<&Value> {
        self.sections.get(namespace).filter(|v| v.is_object())
    }
}

/// Deep-merges `over` onto `base` (objects merge, everything else replaces).
pub fn layer(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) => layer(slot, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

#[derive(Deserialize, Default)]
struct SettingsConfig {
    path: Option<String>,
}

/// `@deepseek-ai/dsh-settings-file`.
pub struct SettingsPlugin;

impl Plugin for SettingsPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-settings-file"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: SettingsConfig = config.parse()?;
        let path = c
            .path
            .map(PathBuf::from)
            .unwrap_or_else(|| dsh_home().join("settings.yaml"));
        ctx.provide(Arc::new(Settings::load(path)?))?;
        Ok(())
    }
}

/// Parses `.env` text: `KEY=value`, optional `export`, quotes, `#` comments.
///
/// Kept here rather than taken from `dotenvy`: that crate substitutes `$VAR` and `${VAR}`
/// inside unquoted and double-quoted values, while the Node.js `dotenv` that upstream's
/// `.env` files are written for takes values literally, so an API key containing `$` would
/// silently change.
pub fn parse_dotenv(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim();
        let v = if (v.starts_with('"') && v.ends_with('"') && v.len() >= 2)
            || (v.starts_with('\'') && v.ends_with('\'') && v.len() >= 2)
        {
            v[1..v.len() - 1].to_string()
        } else {
            v.split(" #").next().unwrap_or(v).trim().to_string()
        };
        out.insert(k.trim().to_string(), v);
    }
    out
}

/// Credential references resolved on every request (`ctx.credentials`): the launching
/// environment, then `$DSH_HOME/.credentials.yaml` `refs`, then `<cwd>/.env`, then
/// `$DSH_HOME/.env`. Values from files are never exported into the process environment.
/// The stored refs change at runtime through [`Credentials::set`] / [`Credentials::unset`]
/// (`credentials_store.rs`); every later `resolve` sees the change.
#[derive(Default)]
pub struct Credentials {
    pub(crate) refs: std::sync::RwLock<HashMap<String, String>>,
    pub(crate) project_env: HashMap<String, String>,
    pub(crate) user_env: HashMap<String, String>,
    /// `$DSH_HOME/.credentials.yaml`.
    pub(crate) file: PathBuf,
    /// Serializes read-modify-write cycles of `file`.
    pub(crate) write_lock: std::sync::Mutex<()>,
}

impl Credentials {
    pub fn load(home: &Path, cwd: &Path) -> Result<Self, String> {
        let file = home.join(".credentials.yaml");
        let refs = match read_yaml_file(&file).map_err(|e| format!("credentials-local: {e}"))? {
            None | Some(Value::Null) => HashMap::new(),
            Some(Value::Object(doc)) => {
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    if let Ok(meta) = std::fs::metadata(&file) {
                        let mode = meta.permissions().mode() & 0o777;
                        if mode & 0o077 != 0 {
                            return Err(format!(
                                "credentials-local: {} is readable beyond its owner (mode {mode:o}); run \"chmod 600 {}\" before starting again",
                                file.display(),
                                file.display()
                            ));
                        }
                    }
                }
                // An empty document is an empty store; any other needs its version first
                // (a flat list of keys is the old layout, not a set of unknown keys).
                if !doc.is_empty() && !doc.contains_key("version") {
                    return Err(format!(
                        "credentials-local: {} has no `version: 1`; put `version: 1` at the top and nest keys under `refs:`",
                        file.display()
                    ));
                }
                crate::credentials_doc::validate(doc, &file)
                    .map_err(|e| format!("credentials-local: {e}"))?
                    .refs
            }
            Some(_) => {
                return Err(format!(
                    "credentials-local: {} must be a mapping",
                    file.display()
                ));
            }
        };
        // An unreadable `.env` is skipped as before; one past the size limit is an error.
        let read_env = |p: PathBuf| match read_config_file(&p) {
            Ok(text) => Ok(text.map(|t| parse_dotenv(&t)).unwrap_or_default()),
            Err(e @ (ConfigFileError::TooLarge { .. } | ConfigFileError::Setting(_))) => {
                Err(format!("credentials-local: {e}"))
            }
            Err(ConfigFileError::Io { .. }) => Ok(HashMap::new()),
        };
        let project_env = read_env(cwd.join(".env"))?;
        let user_env = if home == cwd {
            HashMap::new()
        } else {
            read_env(home.join(".env"))?
        };
        Ok(Self {
            refs: std::sync::RwLock::new(refs),
            project_env,
            user_env,
            file,
            write_lock: std::sync::Mutex::new(()),
        })
    }

    /// Resolves a credential reference name (e.g. `DEEPSEEK_API_KEY`).
    pub fn resolve(&self, name: &str) -> Option<String> {
        if let Some(v) = crate::environ::secret_var(name)
            && !v.is_empty()
        {
            crate::secrets::remember_secret(&v);
            return Some(v);
        }
        let stored = self
            .refs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .filter(|v| !v.is_empty())
            .cloned();
        let found = stored.or_else(|| {
            [&self.project_env, &self.user_env]
                .iter()
                .find_map(|m| m.get(name).filter(|v| !v.is_empty()).cloned())
        });
        if let Some(v) = &found {
            // Whatever a credential resolves to must never reach a child process.
            crate::secrets::remember_secret(v);
        }
        found
    }
}

/// `@deepseek-ai/dsh-credentials-local`.
pub struct CredentialsPlugin;

impl Plugin for CredentialsPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-credentials-local"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "path",
                "credentials live in $DSH_HOME/.credentials.yaml (set DSH_HOME to move them)",
            ),
            (
                "dshHome",
                "credentials live in $DSH_HOME/.credentials.yaml (set DSH_HOME to move them)",
            ),
            (
                "watch",
                "the credentials file is read when dsh starts and changed through the credentials service (the Models page of dsh web); a hand edit takes effect at the next start",
            ),
            (
                "debounceMs",
                "the credentials file is read when dsh starts and changed through the credentials service (the Models page of dsh web); a hand edit takes effect at the next start",
            ),
        ]
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        ctx.provide(Arc::new(Credentials::load(&dsh_home(), &cwd)?))?;
        Ok(())
    }
}

/// The model new sessions use (`ctx.agentDefaultModel`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DefaultModel {
    pub provider: String,
    pub model: String,
    #[serde(default)]
    pub reasoning_effort: Option<String>,
}

impl DefaultModel {
    /// What a composition without a default-model row runs: 0.2's default, `deepseek-flash`
    /// on the DeepSeek route.
    pub fn fallback() -> Self {
        Self {
            provider: "deepseek-official".into(),
            model: "deepseek-flash".into(),
            reasoning_effort: None,
        }
    }
}

/// `@deepseek-ai/dsh-agent-default-model`: row config, overridden by the
/// `agent-default-model` settings section.
pub struct DefaultModelPlugin;

impl Plugin for DefaultModelPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-agent-default-model"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let mut value = match config.raw_keys(&["provider", "model", "reasoningEffort"]) {
            Value::Null => Value::Object(Map::new()),
            v => v.clone(),
        };
        let base = PluginConfig::new(config.row_id.clone(), config.source.clone(), value.clone());
        let mut source = config.source.clone();
        if let Some(settings) = ctx.get::<Settings>()
            && let Some(section) = settings.section("agent-default-model")
        {
            layer(&mut value, section);
            // A failure the row alone does not have comes from the settings file.
            if base.parse::<DefaultModel>().is_ok() {
                source = format!(
                    "{}: section \"agent-default-model\"",
                    settings.path.display()
                );
            }
        }
        let model =
            PluginConfig::new(config.row_id.clone(), source, value).parse::<DefaultModel>()?;
        // `DSH_CONTEXT_WINDOW` sets the default model's capacity (as upstream's SDK
        // composition does); compaction and the token meter read it from `ctx.llm`.
        if let Ok(raw) = std::env::var("DSH_CONTEXT_WINDOW") {
            let window = raw
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|w| *w > 0)
                .ok_or_else(|| {
                    format!("DSH_CONTEXT_WINDOW must be a positive integer (got \"{raw}\")")
                })?;
            if let Some(llm) = ctx.get::<dsh_llm::LlmRuntime>() {
                llm.set_context_window(&model.provider, &model.model, window);
            }
        }
        ctx.provide(Arc::new(model))?;
        Ok(())
    }
}
