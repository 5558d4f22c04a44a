//! The web bundle's rows. Names match upstream's so patches written for upstream keep
//! targeting them; each row only provides its configuration as a service — the app row's
//! [`crate::start`] binds and serves once the whole tree is loaded.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use serde::Deserialize;

/// `@deepseek-ai/dsh-storage-json` config: where frontend state (workspaces) is stored.
#[derive(Clone, Debug)]
pub struct StorageRoot(pub PathBuf);

/// `@deepseek-ai/dsh-host-webserver` config.
#[derive(Clone, Debug)]
pub struct WebServerConfig {
    pub host: IpAddr,
    pub port: u16,
    /// `tls.certFile` / `tls.keyFile`: serve HTTPS.
    pub tls: Option<TlsFiles>,
}

/// A PEM certificate chain and its private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// `@deepseek-ai/dsh-client-connection` config.
#[derive(Clone, Debug)]
pub struct ConnectionConfig {
    /// Bare `host[:port]` authorities the fence admits besides loopback and the bound IP.
    pub trusted_hosts: Vec<String>,
    pub cookie_max_age_days: u64,
}

/// `@deepseek-ai/dsh-web-app` config (the app row).
#[derive(Clone, Debug)]
pub struct WebAppConfig {
    pub open_browser: bool,
    pub print_url: bool,
    /// The advertised root (`publicUrl`), ending in `/`.
    pub public_url: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StorageRow {
    root: String,
}

/// `@deepseek-ai/dsh-storage-json`.
pub struct StorageJsonPlugin;

impl Plugin for StorageJsonPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-storage-json"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: StorageRow = config.parse()?;
        ctx.provide(Arc::new(StorageRoot(PathBuf::from(row.root))))?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-workspace`: the workspace registry (its store opens in `start`).
pub struct WorkspacePlugin;

/// Marker service: the workspace row is enabled.
pub struct WorkspaceRow;

impl Plugin for WorkspacePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-workspace"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.require::<StorageRoot>()
            .map_err(|_| "workspace: needs the storage-json row (storage root)")?;
        ctx.provide(Arc::new(WorkspaceRow))?;
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerRow {
    host: Option<String>,
    port: Option<u64>,
    tls: Option<TlsRow>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TlsRow {
    cert_file: String,
    key_file: String,
}

/// `@deepseek-ai/dsh-host-webserver`.
pub struct WebServerPlugin;

impl Plugin for WebServerPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-host-webserver"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "compression",
                "responses are sent uncompressed (dsh web serves loopback only)",
            ),
            (
                "compressionLevel",
                "responses are sent uncompressed (dsh web serves loopback only)",
            ),
            (
                "compressionThresholdBytes",
                "responses are sent uncompressed (dsh web serves loopback only)",
            ),
        ]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: ServerRow = config.parse()?;
        let host_text = row.host.unwrap_or_else(|| "127.0.0.1".into());
        let host: IpAddr = host_text.parse().map_err(|_| {
            format!(
                "webserver: host \"{host_text}\" is not a concrete IPv4 or IPv6 address literal"
            )
        })?;
        if host.is_unspecified() {
            return Err(format!(
                "webserver: host \"{host_text}\" is a wildcard address; bind one concrete address"
            )
            .into());
        }
        let port = row.port.unwrap_or(u64::from(crate::startup::DEFAULT_PORT));
        let port = u16::try_from(port)
            .map_err(|_| format!("webserver: port {port} is out of range (0..=65535)"))?;
        // Relative files are relative to where dsh started, as on the command line.
        let tls = row.tls.map(|t| TlsFiles {
            cert: PathBuf::from(t.cert_file),
            key: PathBuf::from(t.key_file),
        });
        ctx.provide(Arc::new(WebServerConfig { host, port, tls }))?;
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ConnectionRow {
    trusted_hosts: Option<Vec<String>>,
    cookie_max_age_days: Option<u64>,
}

/// `@deepseek-ai/dsh-client-connection`.
pub struct ConnectionPlugin;

impl Plugin for ConnectionPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-client-connection"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "maxRequestBodyBytes",
                "dsh web bounds each request body with its own fixed limit",
            ),
            (
                "recovery",
                "the page reconnects its event stream by itself and replays from the last event it saw; there is nothing to tune",
            ),
        ]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: ConnectionRow = config.parse()?;
        let mut trusted = Vec::new();
        for entry in row.trusted_hosts.unwrap_or_default() {
            let canonical = crate::startup::parse_authority(&entry).map_err(|_| {
                format!("client-connection: trustedHosts entry \"{entry}\" is not a bare host[:port] authority")
            })?;
            trusted.push(canonical);
        }
        let days = row
            .cookie_max_age_days
            .unwrap_or(crate::auth::DEFAULT_MAX_AGE_DAYS);
        if days == 0 || days > 400 {
            return Err(format!(
                "client-connection: cookieMaxAgeDays must be between 1 and 400, got {days}"
            )
            .into());
        }
        ctx.provide(Arc::new(ConnectionConfig {
            trusted_hosts: trusted,
            cookie_max_age_days: days,
        }))?;
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AppRow {
    open_browser: Option<bool>,
    print_url: Option<bool>,
    public_url: Option<String>,
    /// Publish `DSH_WEB_URL` (the advertised root) to the model's shell calls.
    surface_context: Option<bool>,
}

/// `@deepseek-ai/dsh-web-app`: the app row.
pub struct WebAppPlugin;

/// The web app's row (the plugin that marks a tree as the web app).
pub const WEB_APP_PLUGIN: &str = "@deepseek-ai/dsh-web-app";

impl Plugin for WebAppPlugin {
    fn name(&self) -> &'static str {
        WEB_APP_PLUGIN
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: AppRow = config.parse()?;
        if row.surface_context.unwrap_or(true) {
            // Filled with the URL once the server is bound (`crate::start`).
            ctx.provide(Arc::new(dsh_tools::HostShellVars::default()))?;
        }
        ctx.provide(Arc::new(WebAppConfig {
            open_browser: row.open_browser.unwrap_or(true),
            print_url: row.print_url.unwrap_or(true),
            public_url: row
                .public_url
                .map(|u| {
                    crate::startup::parse_public_url(&u, "web-app: publicUrl")
                        .map_err(|e| e.trim_start_matches("error: ").to_string())
                })
                .transpose()?,
        }))?;
        Ok(())
    }
}

/// Adds the web rows to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(StorageJsonPlugin)
        .register(WorkspacePlugin)
        .register(WebServerPlugin)
        .register(ConnectionPlugin)
        .register(WebAppPlugin)
        .register(crate::present::PresentPlugin)
        .register(crate::presets::PresetRegistryPlugin)
        .register(crate::presets::PresetPlugin)
        .register(crate::schedule::SchedulePlugin)
        .register(crate::schedule::ToolSchedulePlugin)
        .register(crate::time_context::TimeContextPlugin);
}
