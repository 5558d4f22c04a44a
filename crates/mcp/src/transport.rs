//! Opening one connection generation: a child process over stdio (its process group owned
//! by the generation and registered with the reaper) or a Streamable HTTP endpoint over the
//! tree's reqwest client, then the MCP `initialize` handshake.

use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use dsh_process::{ProcessGroup, resolve_program};
use rmcp::model::{ClientCapabilities, ClientInfo, Implementation, ProtocolVersion};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, serve_client};
use tokio::sync::mpsc;

use crate::config::{ServerConfig, Transport};
use crate::stdio::LineTransport;

/// How long a stdio server gets between SIGTERM and SIGKILL when its generation ends.
const TERMINATE_GRACE: Duration = Duration::from_secs(2);

/// Receives the server's notifications for one generation.
pub(crate) struct Handler {
    list_changed: mpsc::UnboundedSender<()>,
    link: std::sync::Arc<crate::tools::Link>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientInfo {
        // Upstream announces itself as `dsh-mcp-client` 0.0.1 with no client capabilities.
        ClientInfo {
            meta: None,
            protocol_version: ProtocolVersion::default(),
            capabilities: ClientCapabilities::default(),
            client_info: Implementation {
                name: "dsh-mcp-client".into(),
                title: None,
                version: "0.0.1".into(),
                description: None,
                icons: None,
                website_url: None,
            },
        }
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        let _ = self.list_changed.send(());
        std::future::ready(())
    }

    fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        let token = match &params.progress_token.0 {
            rmcp::model::NumberOrString::String(s) => s.to_string(),
            rmcp::model::NumberOrString::Number(n) => n.to_string(),
        };
        self.link.progress(
            &token,
            params.progress,
            params.total,
            params.message.as_deref(),
        );
        std::future::ready(())
    }
}

/// One live generation: the MCP session and, for stdio, the server's process group.
pub(crate) struct Generation {
    pub service: RunningService<RoleClient, Handler>,
    pub list_changed: mpsc::UnboundedReceiver<()>,
    pub process: Option<ProcessGroup>,
    pub pid: Option<u32>,
}

/// Opens a generation: spawn or dial, then `initialize` within `timeout`.
pub(crate) async fn open(
    config: &ServerConfig,
    timeout: Duration,
    link: std::sync::Arc<crate::tools::Link>,
) -> Result<Generation, String> {
    let (tx, rx) = mpsc::unbounded_channel();
    let handler = Handler {
        list_changed: tx,
        link,
    };
    match &config.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut child_env = dsh_host::secrets::scrubbed_process_env();
            for (key, value) in env {
                match child_env.iter_mut().find(|(k, _)| k == key) {
                    Some(slot) => slot.1 = value.clone(),
                    None => child_env.push((key.clone(), value.clone())),
                }
            }
            let dir = if cwd.is_empty() {
                std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
            } else {
                PathBuf::from(cwd)
            };
            let program = resolve_program(command, &child_env, &dir);
            let mut cmd = tokio::process::Command::new(&program);
            cmd.arg0(command)
                .args(args)
                .env_clear()
                .envs(child_env)
                .current_dir(&dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                // Upstream lets a stdio server's diagnostics through to the host's stderr.
                .stderr(Stdio::inherit())
                .process_group(0)
                .kill_on_drop(true);
            let mut child = cmd
                .spawn()
                .map_err(|e| format!("cannot start \"{command}\": {e}"))?;
            let pid = child.id();
            let process = ProcessGroup::new(pid, TERMINATE_GRACE);
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(format!("\"{command}\" started without stdio pipes"));
            };
            // Reap the child whenever it exits; the group guard signals what is left.
            tokio::spawn(async move {
                let _ = child.wait().await;
            });
            let transport = LineTransport::new(stdout, stdin, config.label());
            let service = tokio::time::timeout(timeout, serve_client(handler, transport))
                .await
                .map_err(|_| initialize_timeout(timeout))?
                .map_err(|e| format!("initialize failed: {e}"))?;
            Ok(Generation {
                service,
                list_changed: rx,
                process: Some(process),
                pid,
            })
        }
        Transport::StreamableHttp { url, headers } => {
            let mut map = reqwest::header::HeaderMap::new();
            for (name, value) in headers {
                let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| format!("header name \"{name}\" is invalid: {e}"))?;
                let value = reqwest::header::HeaderValue::from_str(value)
                    .map_err(|e| format!("header \"{name}\" has an invalid value: {e}"))?;
                map.insert(name, value);
            }
            let client = reqwest::Client::builder()
                .default_headers(map)
                .build()
                .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
            let transport = StreamableHttpClientTransport::with_client(
                client,
                StreamableHttpClientTransportConfig::with_uri(url.as_str()),
            );
            let service = tokio::time::timeout(timeout, serve_client(handler, transport))
                .await
                .map_err(|_| initialize_timeout(timeout))?
                .map_err(|e| format!("initialize failed: {e}"))?;
            Ok(Generation {
                service,
                list_changed: rx,
                process: None,
                pid: None,
            })
        }
    }
}

fn initialize_timeout(timeout: Duration) -> String {
    format!(
        "initialize did not complete within {} ms",
        timeout.as_millis()
    )
}
