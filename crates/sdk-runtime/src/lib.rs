//! The SDK runtime (`dsh --profile sdk`): the JSON-RPC 2.0 stdio surface upstream's
//! published SDKs drive. See README.md for what it owns and its invariants.

mod app;
mod remote;
mod rpc;
mod server;
mod stream;

use std::sync::Arc;

use dsh_acp::{Frame, Incoming, Peer, classify, read_frame, write_loop};
use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::task::JoinSet;

pub use app::{HELP, SdkRuntimeApp};
pub use server::Server;

/// Longest input line (prompts may carry images as base64).
const MAX_LINE_BYTES: usize = 64 << 20;

/// What the `sdk-jsonrpc-server` row configures.
#[derive(Clone, Debug)]
pub struct SdkServerConfig {
    /// Report a child that stopped at its token limit as a success (`subagent.finished`).
    pub max_tokens_as_success: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ServerRow {
    #[serde(default)]
    max_tokens_as_success: bool,
}

/// `@deepseek-ai/dsh-sdk-jsonrpc-server`: the server row.
pub struct SdkJsonRpcServerPlugin;

impl Plugin for SdkJsonRpcServerPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-sdk-jsonrpc-server"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: ServerRow = config.parse()?;
        ctx.provide(Arc::new(SdkServerConfig {
            max_tokens_as_success: c.max_tokens_as_success,
        }))?;
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AppRow {
    #[serde(default)]
    profile: Option<String>,
}

/// The profile an SDK app row names (`sdk`, `sdk-minimal`).
#[derive(Clone, Debug)]
pub struct SdkApp {
    pub profile: String,
}

/// `@deepseek-ai/dsh-sdk-app`: marks the tree as the SDK runtime's.
pub struct SdkAppPlugin;

/// The row that marks a tree as the SDK runtime's.
pub const SDK_APP_PLUGIN: &str = "@deepseek-ai/dsh-sdk-app";

impl Plugin for SdkAppPlugin {
    fn name(&self) -> &'static str {
        SDK_APP_PLUGIN
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: AppRow = config.parse()?;
        ctx.provide(Arc::new(SdkApp {
            profile: c.profile.unwrap_or_else(|| "sdk".into()),
        }))?;
        Ok(())
    }
}

/// Adds this crate's plugins to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(SdkAppPlugin)
        .register(SdkJsonRpcServerPlugin);
}

/// Who answers the client: this process's agents, or a team gateway ([`remote`]).
#[derive(Clone)]
enum Handler {
    Local(Arc<Server>),
    Remote(Arc<remote::Remote>),
}

impl Handler {
    async fn handle(
        &self,
        method: &str,
        params: Option<serde_json::Value>,
    ) -> Result<serde_json::Value, dsh_acp::RpcError> {
        match self {
            Self::Local(s) => s.handle(method, params).await,
            Self::Remote(r) => r.handle(method, params).await,
        }
    }

    async fn shutdown(&self) {
        match self {
            Self::Local(s) => s.shutdown().await,
            Self::Remote(r) => r.shutdown(),
        }
    }
}

/// Serves one client until `shutdown` or the end of `input`; either way every session is
/// flushed and disposed before it returns. With `DSH_GATEWAY` set the sessions are a team's,
/// run by its workers ([`remote`]).
pub async fn serve<R, W>(root: &Context, input: R, output: W) -> Result<(), String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let writer = tokio::spawn(write_loop(rx, output));
    let peer = Peer::new(tx.clone());
    let server = match dsh_gateway_client::Gateway::from_env()? {
        Some(gateway) => {
            let format = root
                .get::<dsh_persistence::SessionFiles>()
                .map_or(dsh_session::SESSION_FORMAT_V4, |f| f.format());
            Handler::Remote(remote::Remote::new(gateway, peer.clone(), format))
        }
        None => Handler::Local(Server::new(root.clone(), peer.clone())?),
    };
    let mut reader = BufReader::new(input);
    let mut tasks = JoinSet::new();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut line = Vec::new();
    loop {
        let frame = tokio::select! {
            f = read_frame(&mut reader, &mut line, MAX_LINE_BYTES) => f,
            _ = done_rx.recv() => break,
        };
        match frame {
            Ok(Frame::Eof) => break,
            Ok(Frame::TooLong) => {
                tracing::warn!("sdk: ignored an input line longer than {MAX_LINE_BYTES} bytes");
                continue;
            }
            Ok(Frame::Line) => {}
            Err(e) => {
                tracing::warn!("sdk: reading stdin failed: {e}");
                break;
            }
        }
        // Upstream's transport ignores what is not a request or a notification.
        match classify(&String::from_utf8_lossy(&line)) {
            Some(Incoming::Request { id, method, params }) => {
                while tasks.try_join_next().is_some() {}
                if tasks.len() >= dsh_acp::MAX_IN_FLIGHT {
                    peer.respond(
                        id,
                        Err(dsh_acp::RpcError {
                            code: -32603,
                            message: format!(
                                "too many concurrent requests (at most {})",
                                dsh_acp::MAX_IN_FLIGHT
                            ),
                            data: None,
                        }),
                    );
                    continue;
                }
                let (s, done, out) = (server.clone(), done_tx.clone(), peer.clone());
                tasks.spawn(async move {
                    let result = s.handle(&method, params).await;
                    out.respond(id, result);
                    if method == "shutdown" {
                        let _ = done.send(());
                    }
                });
            }
            Some(Incoming::Invalid { log, .. }) if !log.is_empty() => {
                tracing::debug!("sdk: ignored input: {log}");
            }
            _ => {}
        }
    }
    // Shutdown or EOF: nothing is lost either way.
    server.shutdown().await;
    while tasks.join_next().await.is_some() {}
    peer.close();
    let _ = tx.send(String::new());
    let _ = writer.await;
    Ok(())
}
