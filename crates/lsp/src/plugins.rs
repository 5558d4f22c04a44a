//! The rows: `@deepseek-ai/dsh-lsp` (the service), `@deepseek-ai/dsh-lsp-stdio` (configured
//! servers, plus our `discover` extension) and `@deepseek-ai/dsh-tool-lsp` (the tool).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{BoxError, Catalog, Context, ListenOptions, Plugin, PluginConfig};
use dsh_process::resolve_program;
use dsh_session::SessionDisposed;
use dsh_tools::{ToolRegistry, Typed};
use serde::Deserialize;
use serde_json::Value;

use crate::service::LspService;
use crate::stdio::{ServerConfig, StdioProvider};
use crate::tool::{LspDiagnosticsTool, LspTool, PROMPT_SECTION, ToolLspConfig};

/// `@deepseek-ai/dsh-lsp`: provides the [`LspService`].
pub struct LspPlugin;

impl Plugin for LspPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-lsp"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let service = Arc::new(LspService::new());
        ctx.provide(service.clone())?;
        // Servers shut down with the sessions that used them (and all of them at unload).
        let weak = Arc::downgrade(&service);
        ctx.on_emit::<SessionDisposed>(ListenOptions::GLOBAL, move |session| {
            if let Some(service) = weak.upgrade() {
                service.release(&session.id());
            }
            Ok(())
        })?;
        Ok(())
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ServerRow {
    command: Option<String>,
    extension_to_language: Option<BTreeMap<String, String>>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    initialization_options: Value,
    #[serde(default)]
    configuration: Value,
    max_message_bytes: Option<f64>,
    max_stderr_bytes: Option<f64>,
    max_document_bytes: Option<f64>,
    shutdown_timeout_ms: Option<f64>,
    kill_grace_ms: Option<f64>,
    /// Ours: how long a query waits for a server that reports it is still indexing.
    ready_timeout_ms: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct StdioRow {
    #[serde(default)]
    servers: BTreeMap<String, ServerRow>,
    /// Ours: also serve the well-known language servers found on PATH at load.
    #[serde(default)]
    discover: bool,
}

const MAX_TIMER_MS: f64 = 2_147_483_647.0;

fn positive(id: &str, name: &str, v: Option<f64>, default: u64, max: f64) -> Result<u64, BoxError> {
    match v {
        None => Ok(default),
        Some(v) if v >= 1.0 && v.fract() == 0.0 && v <= max => Ok(v as u64),
        Some(_) if max == MAX_TIMER_MS => Err(format!(
            "lsp-stdio: servers.{id}.{name} must be a positive integer no greater than {MAX_TIMER_MS}"
        )
        .into()),
        Some(_) => Err(format!("lsp-stdio: servers.{id}.{name} must be a positive integer").into()),
    }
}

/// The child environment: the scrubbed ambient environment plus the row's `env`.
fn child_env(extra: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut env = dsh_host::secrets::scrubbed_process_env();
    for (k, v) in extra {
        match env.iter_mut().find(|(key, _)| key == k) {
            Some(slot) => slot.1 = v.clone(),
            None => env.push((k.clone(), v.clone())),
        }
    }
    env
}

/// `command` resolved on the child's PATH, if it names an executable.
fn resolve(command: &str, env: &[(String, String)]) -> Option<PathBuf> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let program = resolve_program(command, env, &cwd);
    let path = if program.is_absolute() {
        program
    } else if command.contains('/') {
        cwd.join(program)
    } else {
        return None;
    };
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(&path)
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .then_some(path)
}

fn server_config(id: &str, row: ServerRow) -> Result<ServerConfig, BoxError> {
    if id.trim().is_empty() {
        return Err("lsp-stdio: server ids must be non-empty strings".into());
    }
    let command = row
        .command
        .filter(|c| !c.trim().is_empty())
        .ok_or_else(|| format!("lsp-stdio: servers.{id}.command must be a non-empty string"))?;
    let map = row
        .extension_to_language
        .filter(|m| !m.is_empty())
        .ok_or_else(|| {
            format!("lsp-stdio: servers.{id}.extensionToLanguage must map at least one extension")
        })?;
    let mut extension_to_language = BTreeMap::new();
    for (ext, lang) in map {
        let normalized = ext.to_lowercase();
        let valid = normalized.len() > 1
            && normalized.starts_with('.')
            && !normalized[1..].contains(['.', '/', '\\']);
        if !valid || lang.trim().is_empty() {
            return Err(format!(
                "lsp-stdio: servers.{id}.extensionToLanguage has an invalid entry \"{ext}\": \"{lang}\""
            )
            .into());
        }
        extension_to_language.insert(normalized, lang);
    }
    let env = child_env(&row.env);
    let program = resolve(&command, &env).ok_or_else(|| {
        format!(
            "lsp-stdio: servers.{id}.command \"{command}\" was not found as an executable on PATH"
        )
    })?;
    Ok(ServerConfig {
        command,
        program,
        args: row.args,
        env,
        extension_to_language,
        initialization_options: row.initialization_options,
        configuration: row.configuration,
        max_message_bytes: positive(
            id,
            "maxMessageBytes",
            row.max_message_bytes,
            16_000_000,
            9e15,
        )? as usize,
        max_stderr_bytes: positive(id, "maxStderrBytes", row.max_stderr_bytes, 1_000_000, 9e15)?
            as usize,
        max_document_bytes: positive(
            id,
            "maxDocumentBytes",
            row.max_document_bytes,
            4_000_000,
            9e15,
        )? as usize,
        shutdown_timeout: Duration::from_millis(positive(
            id,
            "shutdownTimeoutMs",
            row.shutdown_timeout_ms,
            5_000,
            MAX_TIMER_MS,
        )?),
        kill_grace: Duration::from_millis(positive(
            id,
            "killGraceMs",
            row.kill_grace_ms,
            2_000,
            MAX_TIMER_MS,
        )?),
        ready_timeout: Duration::from_millis(positive(
            id,
            "readyTimeoutMs",
            row.ready_timeout_ms,
            30_000,
            MAX_TIMER_MS,
        )?),
    })
}

/// A well-known server `discover` looks for: id, candidate commands with their args (the
/// first found wins), extension → language id.
type KnownServer = (
    &'static str,
    Vec<(&'static str, Vec<&'static str>)>,
    Vec<(&'static str, &'static str)>,
);

fn known_servers() -> Vec<KnownServer> {
    vec![
        (
            "rust-analyzer",
            vec![("rust-analyzer", vec![])],
            vec![(".rs", "rust")],
        ),
        (
            "typescript-language-server",
            vec![("typescript-language-server", vec!["--stdio"])],
            vec![
                (".ts", "typescript"),
                (".mts", "typescript"),
                (".cts", "typescript"),
                (".tsx", "typescriptreact"),
                (".js", "javascript"),
                (".mjs", "javascript"),
                (".cjs", "javascript"),
                (".jsx", "javascriptreact"),
            ],
        ),
        (
            "python",
            vec![("pyright-langserver", vec!["--stdio"]), ("pylsp", vec![])],
            vec![(".py", "python"), (".pyi", "python")],
        ),
        ("gopls", vec![("gopls", vec![])], vec![(".go", "go")]),
        (
            "clangd",
            vec![("clangd", vec![])],
            vec![
                (".c", "c"),
                (".h", "c"),
                (".cc", "cpp"),
                (".cpp", "cpp"),
                (".cxx", "cpp"),
                (".hpp", "cpp"),
                (".hh", "cpp"),
            ],
        ),
    ]
}

/// Why `path` (found for `command`) cannot run although it is on PATH: a rustup proxy
/// (a link to the `rustup` beside it) whose toolchain lacks the component answers every
/// start with an error and a backtrace. `rustup which` names the binary it would run;
/// when that is not there, the server is not offered. Anything else is assumed to run.
fn rustup_proxy_gap(command: &str, path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let rustup = path.parent()?.join("rustup");
    let (a, b) = (
        std::fs::metadata(path).ok()?,
        std::fs::metadata(&rustup).ok()?,
    );
    if (a.dev(), a.ino()) != (b.dev(), b.ino()) {
        return None;
    }
    let missing = || {
        Some(format!(
            "it is a rustup proxy and the active toolchain has no {command} (install it with `rustup component add {command}`)"
        ))
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    match crate::rustup::active_toolchain(&cwd, &|k| std::env::var(k).ok()) {
        crate::rustup::Toolchain::None => {
            return Some(
                "it is a rustup proxy and no rustup toolchain is active (set one with `rustup default stable`)"
                    .to_string(),
            );
        }
        crate::rustup::Toolchain::Dir(dir) => {
            return if dir.join("bin").join(command).is_file() {
                None
            } else {
                missing()
            };
        }
        crate::rustup::Toolchain::Ask => {}
    }
    let out = std::process::Command::new(&rustup)
        .args(["which", command])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let target = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() && !target.is_empty() && std::path::Path::new(&target).is_file() {
        return None;
    }
    missing()
}

/// The discovered servers whose executable resolves on PATH, minus extensions the explicit
/// table already maps.
fn discovered(taken: &[String]) -> Vec<(String, ServerRow)> {
    let env = child_env(&BTreeMap::new());
    let mut out = Vec::new();
    for (id, candidates, exts) in known_servers() {
        let Some((command, args)) = candidates.into_iter().find(|(c, _)| {
            resolve(c, &env).is_some_and(|path| match rustup_proxy_gap(c, &path) {
                Some(why) => {
                    tracing::info!("lsp-stdio: {c} is not offered: {why}");
                    false
                }
                None => true,
            })
        }) else {
            continue;
        };
        let map: BTreeMap<String, String> = exts
            .into_iter()
            .filter(|(e, _)| !taken.iter().any(|t| t == e))
            .map(|(e, l)| (e.to_string(), l.to_string()))
            .collect();
        if map.is_empty() {
            continue;
        }
        out.push((
            id.to_string(),
            ServerRow {
                command: Some(command.to_string()),
                extension_to_language: Some(map),
                args: args.into_iter().map(String::from).collect(),
                ..ServerRow::default()
            },
        ));
    }
    out
}

/// `@deepseek-ai/dsh-lsp-stdio` (`{servers: {<id>: {command, extensionToLanguage, args, env,
/// initializationOptions, configuration, maxMessageBytes, maxStderrBytes, maxDocumentBytes,
/// shutdownTimeoutMs, killGraceMs}}}` as upstream, plus `discover`). Every server's
/// settings are checked and its command resolved before any is registered. Unloading the
/// row unregisters the providers and shuts their servers down.
pub struct LspStdioPlugin;

impl Plugin for LspStdioPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-lsp-stdio"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: StdioRow = config.parse()?;
        if row.servers.is_empty() && !row.discover {
            return Err("lsp-stdio: servers must contain at least one server".into());
        }
        let mut configs: Vec<(String, ServerConfig)> = Vec::new();
        for (id, server) in row.servers {
            configs.push((id.clone(), server_config(&id, server)?));
        }
        if row.discover {
            let taken: Vec<String> = configs
                .iter()
                .flat_map(|(_, c)| c.extension_to_language.keys().cloned())
                .collect();
            for (id, server) in discovered(&taken) {
                if configs.iter().any(|(i, _)| *i == id) {
                    continue;
                }
                match server_config(&id, server) {
                    Ok(c) => configs.push((id, c)),
                    Err(e) => tracing::debug!("lsp-stdio discovery skipped {id}: {e}"),
                }
            }
        }
        let service = ctx.require::<LspService>()?;
        let mut registered: Vec<Arc<StdioProvider>> = Vec::new();
        for (id, c) in configs {
            let provider = Arc::new(
                StdioProvider::new(id, c)
                    .with_sandbox(ctx.get::<dsh_sandbox::Sandbox>().map(|s| (*s).clone())),
            );
            if let Err(e) = service.register(provider.clone()) {
                for p in &registered {
                    service.unregister(dsh_lspid(p));
                }
                return Err(e);
            }
            registered.push(provider);
        }
        let weak = Arc::downgrade(&service);
        ctx.effect("lsp-stdio providers", move || {
            if let Some(service) = weak.upgrade() {
                for p in &registered {
                    service.unregister(dsh_lspid(p));
                }
            }
            for p in &registered {
                p.dispose_blocking();
            }
        })?;
        Ok(())
    }
}

fn dsh_lspid(p: &Arc<StdioProvider>) -> &str {
    crate::service::LspProvider::id(p.as_ref())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ToolRow {
    max_locations: Option<f64>,
    max_result_chars: Option<f64>,
    timeout_ms: Option<f64>,
}

/// A tool row's settings (`tool-lsp`, `tool-lsp-diagnostics`).
fn tool_config(config: &PluginConfig) -> Result<ToolLspConfig, BoxError> {
    let row: ToolRow = config.parse()?;
    Ok(ToolLspConfig {
        max_locations: tool_positive("maxLocations", row.max_locations, 100, None)? as usize,
        max_result_chars: tool_positive("maxResultChars", row.max_result_chars, 16_000, None)?
            as usize,
        timeout_ms: tool_positive("timeoutMs", row.timeout_ms, 60_000, Some(MAX_TIMER_MS))?,
    })
}

fn tool_positive(
    name: &str,
    v: Option<f64>,
    default: u64,
    max: Option<f64>,
) -> Result<u64, BoxError> {
    match (v, max) {
        (None, _) => Ok(default),
        (Some(v), None) if v >= 1.0 && v.fract() == 0.0 && v <= 9e15 => Ok(v as u64),
        (Some(v), Some(m)) if v >= 1.0 && v.fract() == 0.0 && v <= m => Ok(v as u64),
        (Some(_), None) => Err(format!("tool-lsp: {name} must be a positive integer").into()),
        (Some(_), Some(m)) => {
            Err(format!("tool-lsp: {name} must be a positive integer no greater than {m}").into())
        }
    }
}

/// `@deepseek-ai/dsh-tool-lsp` (`{maxLocations = 100, maxResultChars = 16000, timeoutMs =
/// 60000}`): the `lsp` tool and its prompt guidance. When the `lsp` service has no provider
/// at load (discovery found no server), nothing is registered: a tool that can only fail
/// is not offered.
pub struct ToolLspPlugin;

impl Plugin for ToolLspPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-lsp"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c = tool_config(config)?;
        let service = ctx.require::<LspService>()?;
        if !service.has_providers() {
            tracing::debug!(
                "tool-lsp: no language server is configured or found; lsp is not offered"
            );
            return Ok(());
        }
        let tools = ctx.require::<ToolRegistry>()?;
        if let Some(prompt) = ctx.get::<dsh_prompt::SystemPrompt>() {
            prompt.section(
                ctx,
                "tool:lsp",
                112.0,
                Arc::new(|_| PROMPT_SECTION.to_string()),
            )?;
        }
        tools.register(ctx, Arc::new(Typed::new(LspTool::new(service, c))?))?;
        Ok(())
    }
}

/// Registers the LSP rows.
pub fn register_catalog(catalog: &mut Catalog) {
    catalog.register(LspPlugin);
    catalog.register(LspStdioPlugin);
    catalog.register(ToolLspPlugin);
    catalog.register(ToolLspDiagnosticsPlugin);
}

/// `@deepseek-ai/dsh-tool-lsp-diagnostics` (ours; config like `tool-lsp`'s): the
/// `lsp_diagnostics` tool, offered when a language server is configured or found. A row of
/// its own, so compositions with `tool-lsp` alone keep exactly upstream's tool list.
pub struct ToolLspDiagnosticsPlugin;

impl Plugin for ToolLspDiagnosticsPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-lsp-diagnostics"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c = tool_config(config)?;
        let service = ctx.require::<LspService>()?;
        if !service.has_providers() {
            return Ok(());
        }
        ctx.require::<ToolRegistry>()?.register(
            ctx,
            Arc::new(Typed::new(LspDiagnosticsTool::new(service, c))?),
        )?;
        Ok(())
    }
}
