//! Plugin wiring: register the adapters with `ctx.llm`, resolving credentials through
//! `ctx.credentials` (environment, `.credentials.yaml`, `.env`) and reading live settings
//! sections from `settings.yaml`.

use std::sync::Arc;

use dsh_host::{Credentials, Settings, SettingsChanged, dsh_home};
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::{LlmRuntime, RequestExtensions};
use serde_json::Value;

use crate::deepseek_config::DeepSeekRelease;
use crate::{
    AnthropicAdapter, AnthropicConfig, DeepSeekAdapter, DeepSeekConfig, OpenAiCompatAdapter,
    OpenAiCompatConfig, ProviderDeps,
};

fn deps(ctx: &Context, section: &'static str) -> ProviderDeps {
    let credentials = ctx.get::<Credentials>();
    let resolver = Arc::new(move |name: &str| match &credentials {
        Some(c) => c.resolve(name),
        None => dsh_host::environ::secret_var(name).filter(|v| !v.is_empty()),
    });
    let settings = ctx.get::<Settings>();
    let origin = settings
        .as_ref()
        .map(|s| format!("{}: section \"{section}\"", s.path.display()));
    let source = Arc::new(move || {
        settings
            .as_ref()
            .and_then(|s| s.live_section(section))
            .unwrap_or(Value::Null)
    });
    let user_id = Arc::new(anonymous_user_id);
    let owner = ctx.clone();
    let deps = ProviderDeps::new(resolver)
        .with_settings(source)
        .with_user_id(user_id)
        .with_extensions(Arc::new(move || owner.get::<RequestExtensions>()));
    match origin {
        Some(origin) => deps.with_settings_origin(origin),
        None => deps,
    }
}

/// The install's anonymous id (`$DSH_HOME/.anonymous-user-id`), created once.
fn anonymous_user_id() -> Option<String> {
    static ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let path = dsh_home().join(".anonymous-user-id");
        if let Ok(text) = std::fs::read_to_string(&path) {
            let id = text.trim().to_string();
            if !id.is_empty() {
                return Some(id);
            }
        }
        let id = uuid::Uuid::new_v4().to_string();
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{id}\n").as_bytes()));
        Some(id)
    })
    .clone()
}

fn row_value(raw: &Value) -> Value {
    match raw {
        Value::Null => Value::Object(Default::default()),
        v => v.clone(),
    }
}

/// `@deepseek-ai/dsh-llm-deepseek` (0.1's name, chat completions by default) and
/// `@deepseek-ai/dsh-llm-deepseek-api-key` (0.2's, DeepSeek's Messages API by default):
/// route `deepseek-official`, one settings section `llm-deepseek`.
pub struct DeepSeekPlugin(pub DeepSeekRelease);

impl Plugin for DeepSeekPlugin {
    fn name(&self) -> &'static str {
        match self.0 {
            DeepSeekRelease::V01 => "@deepseek-ai/dsh-llm-deepseek",
            DeepSeekRelease::V02 => "@deepseek-ai/dsh-llm-deepseek-api-key",
        }
    }

    fn upstream_keys_without_effect(&self) -> &'static [(&'static str, &'static str)] {
        crate::deepseek_config::UPSTREAM_KEYS_WITHOUT_EFFECT
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let llm = ctx.require::<LlmRuntime>()?;
        let parsed = config.parse_with::<DeepSeekConfig, _>(|raw| {
            DeepSeekConfig::from_value(&row_value(raw))
                .map_err(|e| format!("{}: row \"{}\": {e}", config.source, config.row_id).into())
        })?;
        let adapter = DeepSeekAdapter::for_release(parsed, deps(ctx, "llm-deepseek"), self.0)?;
        llm.register_adapter(ctx, DeepSeekAdapter::routes(), Arc::new(adapter))?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-llm-openai-compatible`: plain chat-completions routes.
pub struct OpenAiCompatPlugin;

impl Plugin for OpenAiCompatPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-llm-openai-compatible"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let llm = ctx.require::<LlmRuntime>()?;
        let parsed = config.parse_with::<OpenAiCompatConfig, _>(|raw| {
            OpenAiCompatConfig::from_value(&row_value(raw))
                .map_err(|e| format!("{}: row \"{}\": {e}", config.source, config.row_id).into())
        })?;
        let adapter = OpenAiCompatAdapter::new(parsed.clone(), deps(ctx, "openai-compatible"))?;
        let routes = adapter.routes();
        let registration = Arc::new(std::sync::Mutex::new(None));
        if !routes.is_empty() {
            *registration.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(llm.register_adapter(ctx, routes, Arc::new(adapter))?);
        }
        // The route set is fixed per adapter: when the section changes at runtime (a
        // provider added in the web UI), the adapter is rebuilt and registered again.
        let owner = ctx.clone();
        ctx.on_emit::<SettingsChanged>(ListenOptions::GLOBAL, move |change| {
            if change.namespace != "openai-compatible" {
                return Ok(());
            }
            let adapter =
                OpenAiCompatAdapter::new(parsed.clone(), deps(&owner, "openai-compatible"))?;
            let routes = adapter.routes();
            let mut slot = registration.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(previous) = slot.take() {
                previous.dispose();
            }
            if !routes.is_empty() {
                *slot = Some(llm.register_adapter(&owner, routes, Arc::new(adapter))?);
            }
            Ok(())
        })?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-llm-pi-ai`: Anthropic Messages and OpenAI Responses routes from the
/// `llm-pi-ai` section.
/// Mounted dormant (no routes) until the row or the settings section declares a profile;
/// re-registered when the section changes.
pub struct AnthropicPlugin;

impl Plugin for AnthropicPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-llm-pi-ai"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let llm = ctx.require::<LlmRuntime>()?;
        let parsed = config.parse_with::<AnthropicConfig, _>(|raw| {
            AnthropicConfig::from_value(&row_value(raw))
                .map_err(|e| format!("{}: row \"{}\": {e}", config.source, config.row_id).into())
        })?;
        let adapter = AnthropicAdapter::new(parsed.clone(), deps(ctx, "llm-pi-ai"))?;
        let routes = adapter.routes();
        let registration = Arc::new(std::sync::Mutex::new(None));
        if !routes.is_empty() {
            *registration.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(llm.register_adapter(ctx, routes, Arc::new(adapter))?);
        }
        let owner = ctx.clone();
        ctx.on_emit::<SettingsChanged>(ListenOptions::GLOBAL, move |change| {
            if change.namespace != "llm-pi-ai" {
                return Ok(());
            }
            let adapter = AnthropicAdapter::new(parsed.clone(), deps(&owner, "llm-pi-ai"))?;
            let routes = adapter.routes();
            let mut slot = registration.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(previous) = slot.take() {
                previous.dispose();
            }
            if !routes.is_empty() {
                *slot = Some(llm.register_adapter(&owner, routes, Arc::new(adapter))?);
            }
            Ok(())
        })?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-deepseek-llm-api-extensions`: the registry of extra request fields the
/// DeepSeek route sends (`dsh_session_log`, `dsh_plugin_packages`). Empty unless a row
/// registers a field; the rows that do are off unless enabled.
pub struct RequestExtensionsPlugin;

impl Plugin for RequestExtensionsPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-deepseek-llm-api-extensions"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.provide(RequestExtensions::new())?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-plugin-package-inventory-deepseek`: with `enabled: true`, every DeepSeek
/// request carries `dsh_plugin_packages: {version: 1, packages: [{name, version}]}`, the
/// plugins the loaded rows apply (sorted by name; the version is this build's). Off by
/// default here (upstream 0.2.1 sends it unless disabled).
pub struct PluginInventoryPlugin;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct InventoryConfig {
    #[serde(default)]
    enabled: bool,
}

struct PluginInventory(Context);

impl dsh_llm::RequestExtension for PluginInventory {
    fn prepare(
        &self,
        _request: &dsh_llm::ExtensionRequest<'_>,
    ) -> Result<Option<dsh_llm::ExtensionField>, String> {
        let mut names = self.0.active_plugins();
        names.sort();
        names.dedup();
        let version = env!("CARGO_PKG_VERSION");
        let packages: Vec<Value> = names
            .into_iter()
            .map(|name| serde_json::json!({"name": name, "version": version}))
            .collect();
        let value = serde_json::json!({"version": 1, "packages": packages});
        Ok(Some(dsh_llm::ExtensionField {
            json: dsh_kernel::json::to_string(&value),
            accept: None,
        }))
    }
}

impl Plugin for PluginInventoryPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-plugin-package-inventory-deepseek"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let parsed: InventoryConfig = config.parse()?;
        let registry = ctx.require::<RequestExtensions>()?;
        if parsed.enabled {
            registry.register(
                ctx,
                "dsh_plugin_packages",
                Arc::new(PluginInventory(ctx.clone())),
            )?;
        }
        Ok(())
    }
}

/// Adds the provider plugins to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(DeepSeekPlugin(DeepSeekRelease::V01))
        .register(DeepSeekPlugin(DeepSeekRelease::V02))
        .register(OpenAiCompatPlugin)
        .register(AnthropicPlugin)
        .register(RequestExtensionsPlugin)
        .register(PluginInventoryPlugin);
}
