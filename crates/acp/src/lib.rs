//! `dsh acp`: the Agent Client Protocol server (JSON-RPC 2.0 over stdio, NDJSON).
//!
//! Stdout carries protocol frames only. The server answers `initialize`, `authenticate`,
//! `session/new`, `session/prompt` and the `session/cancel` notification, and in the rich
//! projection (the default outside the recorded snapshot compositions) also
//! `session/load|resume|list|close` and `session/set_mode` (the permission presets); it
//! asks the client `session/request_permission` when a tool needs approval, and reads and
//! writes text files through `fs/*` when the client offers them. Malformed frames are
//! answered as the reference SDK does (`-32700`, `-32600`). On stdin EOF it cancels running
//! turns, flushes every session log and returns.

mod app;
mod bridge;
mod client_fs;
mod client_terminal;
mod images;
mod project;
mod protocol;
mod remote;
mod rpc;

use std::path::Path;
use std::sync::Arc;

use dsh_kernel::config::Layer;
use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::task::JoinSet;

pub use app::{AcpApp, COMMAND_HELP, Command, PROFILE_HELP, command};
pub use bridge::{AcpConfig, Bridge, Projection};
pub use rpc::{Incoming, Peer, RpcError, classify};

const ACP_COMPOSITION: &str = include_str!("../compositions/acp.cordis.yml");

/// The composition `DSH_SNAPSHOT_CONFIG` names when it is unset (upstream's default).
pub const DEFAULT_COMPOSITION: &str = "cordis.yml";

/// The layers `dsh acp` composes: with `folder` (a compositions folder such as the
/// repository's `conformance/compositions/`), the file `name` (`DSH_SNAPSHOT_CONFIG`, an
/// upstream composition name such as `code-mode.cordis.yml` or `tests/lsp.cordis.yml`,
/// default `cordis.yml`) in it, read as an entry list whose include rows resolve against
/// the file; without a folder, the built-in composition. A name the folder does not have
/// is an error: running another composition instead would report results for a feature set
/// nobody asked for.
pub fn composition_layers(folder: Option<&Path>, name: Option<&str>) -> Result<Vec<Layer>, String> {
    let Some(folder) = folder else {
        return match name {
            None | Some(DEFAULT_COMPOSITION) => Layer::parse_rows(
                "dsh-acp/acp.cordis.yml",
                "dsh-acp/acp.cordis.yml",
                ACP_COMPOSITION,
            )
            .map(|l| vec![l])
            .map_err(|e| e.to_string()),
            Some(other) => Err(format!(
                "DSH_SNAPSHOT_CONFIG names \"{other}\", but this server has only its built-in composition; pass --compositions DIR (a folder of compositions, such as the repository's conformance/compositions) to choose one by name"
            )),
        };
    };
    let name = name.unwrap_or(DEFAULT_COMPOSITION);
    let relative = Path::new(name);
    let inside = relative
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    let path = folder.join(relative);
    if !inside || !path.is_file() {
        let mut known = Vec::new();
        list_compositions(folder, Path::new(""), &mut known);
        known.sort();
        return Err(format!(
            "DSH_SNAPSHOT_CONFIG names \"{name}\", which is not a composition in {} (known: {})",
            folder.display(),
            if known.is_empty() {
                "none; is the folder right?".to_string()
            } else {
                known.join(", ")
            }
        ));
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let shown = std::path::absolute(&path)
        .unwrap_or(path)
        .display()
        .to_string();
    Layer::parse_rows(shown.clone(), shown, &text)
        .map(|l| vec![l])
        .map_err(|e| e.to_string())
}

/// Every composition (`*cordis.yml`) under `dir`, as paths relative to the folder.
fn list_compositions(dir: &Path, prefix: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir.join(prefix)) else {
        return;
    };
    for entry in entries.flatten() {
        let rel = prefix.join(entry.file_name());
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            list_compositions(dir, &rel, out);
        } else if rel.to_string_lossy().ends_with("cordis.yml") {
            out.push(rel.display().to_string());
        }
    }
}

#[derive(Deserialize)]
struct AgentConfig {
    provider: String,
    model: String,
    /// `rich` (the default) or `committed` (upstream 0.1's projection, which the recorded
    /// snapshot scenarios pin).
    #[serde(default)]
    projection: Projection,
}

/// `@deepseek-ai/dsh-acp-demo`: the route ACP sessions use.
pub struct AcpAgentPlugin;

/// The row that marks a tree as the ACP server's.
pub const ACP_AGENT_PLUGIN: &str = "@deepseek-ai/dsh-acp-demo";

impl Plugin for AcpAgentPlugin {
    fn name(&self) -> &'static str {
        ACP_AGENT_PLUGIN
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "sessionListPageSize",
            "`session/list` answers with every stored session in one reply here (no cursor pages)",
        )]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: AgentConfig = config.parse()?;
        ctx.provide(Arc::new(AcpConfig {
            provider: c.provider,
            model: c.model,
            projection: c.projection,
        }))?;
        Ok(())
    }
}

/// Writes queued frames to `out` until the queue ends or an empty line asks it to stop.
pub async fn write_loop<W: AsyncWrite + Unpin>(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<String>,
    mut out: W,
) {
    while let Some(line) = rx.recv().await {
        if line.is_empty() {
            break;
        }
        if out.write_all(line.as_bytes()).await.is_err() || out.flush().await.is_err() {
            break;
        }
    }
    let _ = out.flush().await;
}

/// Requests one connection may have in flight at once.
pub const MAX_IN_FLIGHT: usize = 128;

/// Largest incoming frame (prompts may carry images as base64).
pub const MAX_FRAME_BYTES: usize = 64 << 20;

/// What [`read_frame`] read.
pub enum Frame {
    Eof,
    Line,
    TooLong,
}

/// Reads one newline-terminated frame into `buf` (cleared first) without ever holding more
/// than `max` bytes of it: a longer frame is skipped up to its newline and reported.
pub async fn read_frame<R: AsyncBufReadExt + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Frame> {
    buf.clear();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, buf.is_empty()) {
                (true, _) => Frame::TooLong,
                (false, true) => Frame::Eof,
                (false, false) => Frame::Line,
            });
        }
        let (take, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if !too_long {
            if buf.len() + take > max {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&available[..take]);
            }
        }
        reader.consume(take);
        if done {
            return Ok(if too_long {
                Frame::TooLong
            } else {
                Frame::Line
            });
        }
    }
}

/// Serves one connection until `input` ends.
pub async fn serve<R, W>(root: &Context, input: R, output: W) -> Result<(), String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_with(root, input, output, None).await
}

/// [`serve`], with `projection` (when given) instead of the one the acp-agent row chose.
pub async fn serve_with<R, W>(
    root: &Context,
    input: R,
    output: W,
    projection: Option<Projection>,
) -> Result<(), String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut config = root
        .get::<AcpConfig>()
        .map(|c| (*c).clone())
        .ok_or("the composition has no acp-agent row")?;
    if let Some(p) = projection {
        config.projection = p;
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let writer = tokio::spawn(write_loop(rx, output));
    let peer = Peer::new(tx.clone());
    // With a team gateway named, the team's workers run the sessions ([`remote`]).
    let (server, config_rich) = match dsh_gateway_client::Gateway::from_env()? {
        Some(gateway) => (
            Server::Remote(remote::Remote::new(gateway, peer.clone())),
            true,
        ),
        None => {
            let rich = config.projection == Projection::Rich;
            (
                Server::Local(Bridge::new(root.clone(), peer.clone(), config)?),
                rich,
            )
        }
    };
    let mut reader = BufReader::new(input);
    let mut tasks = JoinSet::new();
    let mut buf = Vec::new();
    loop {
        match read_frame(&mut reader, &mut buf, MAX_FRAME_BYTES).await {
            Ok(Frame::Eof) => break,
            Ok(Frame::Line) => {}
            Ok(Frame::TooLong) => {
                tracing::warn!(
                    "acp: dropped an incoming frame longer than {MAX_FRAME_BYTES} bytes"
                );
                peer.send_error_without_id(rpc::RpcError {
                    code: -32600,
                    message: format!("Invalid Request: frame longer than {MAX_FRAME_BYTES} bytes"),
                    data: None,
                });
                continue;
            }
            Err(e) => {
                tracing::warn!("acp: reading stdin failed: {e}");
                break;
            }
        }
        let line = String::from_utf8_lossy(&buf);
        match classify(&line) {
            None => {}
            Some(Incoming::Request { id, method, params }) => {
                // Reap finished requests; a client flooding the agent gets errors beyond
                // the bound instead of unbounded tasks.
                while tasks.try_join_next().is_some() {}
                if tasks.len() >= MAX_IN_FLIGHT {
                    peer.respond(
                        id,
                        Err(rpc::RpcError::internal(format!(
                            "too many concurrent requests (at most {MAX_IN_FLIGHT})"
                        ))),
                    );
                    continue;
                }
                let (server, peer) = (server.clone(), peer.clone());
                tasks.spawn(async move {
                    let result = server.handle(&method, params.clone()).await;
                    let follow = result.clone();
                    peer.respond(id, result);
                    server.after_response(&method, params.as_ref(), &follow);
                });
            }
            Some(Incoming::Notification { method, params }) => server.notification(&method, params),
            Some(Incoming::Response { id, outcome }) => peer.resolve(&id, outcome),
            Some(Incoming::Invalid { log, answer }) => {
                if !log.is_empty() {
                    tracing::warn!("acp: {log}");
                }
                // The rich server answers malformed frames as the reference SDK does;
                // upstream 0.1's (the committed projection) logs and ignores them.
                if config_rich {
                    peer.send_error_without_id(answer);
                }
            }
        }
    }
    // EOF: no more updates; cancel running work, let pending prompts answer, flush.
    peer.close();
    server.quiesce().await;
    while tasks.join_next().await.is_some() {}
    let _ = tx.send(String::new());
    let _ = writer.await;
    Ok(())
}

/// Who answers the client: this process's agents, or a team gateway's workers.
#[derive(Clone)]
enum Server {
    Local(Arc<Bridge>),
    Remote(Arc<remote::Remote>),
}

impl Server {
    async fn handle(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        match self {
            Server::Local(b) => b.handle(method, params).await,
            Server::Remote(r) => r.handle(method, params).await,
        }
    }

    fn after_response(
        &self,
        method: &str,
        params: Option<&Value>,
        result: &Result<Value, RpcError>,
    ) {
        if let Server::Local(b) = self {
            b.after_response(method, params, result);
        }
    }

    fn notification(&self, method: &str, params: Option<Value>) {
        match self {
            Server::Local(b) => b.notification(method, params),
            Server::Remote(r) => r.notification(method, params),
        }
    }

    async fn quiesce(&self) {
        match self {
            Server::Local(b) => b.quiesce().await,
            Server::Remote(r) => r.quiesce(),
        }
    }
}

/// Entry points for the fuzz targets (`fuzz/`).
#[doc(hidden)]
pub mod fuzzing {
    use super::*;

    /// Reads every frame of `input` (frames over `max` bytes skipped) and classifies each
    /// the way the server does; returns how many frames were read.
    pub async fn frames(input: &[u8], max: usize) -> std::io::Result<usize> {
        let mut reader = BufReader::with_capacity(64, input);
        let mut buf = Vec::new();
        let mut n = 0;
        loop {
            match read_frame(&mut reader, &mut buf, max).await? {
                Frame::Eof => return Ok(n),
                Frame::TooLong => {}
                Frame::Line => {
                    let _ = classify(&String::from_utf8_lossy(&buf));
                }
            }
            n += 1;
        }
    }
}

#[cfg(test)]
mod frame_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn an_oversized_frame_is_skipped_and_the_next_one_reads() {
        let mut input = Vec::new();
        input.extend(std::iter::repeat_n(b'x', 100));
        input.extend(b"\n{\"ok\":1}\n{\"tail\":true}");
        let mut reader = BufReader::with_capacity(16, &input[..]);
        let mut buf = Vec::new();
        assert!(matches!(
            read_frame(&mut reader, &mut buf, 50).await.unwrap(),
            Frame::TooLong
        ));
        assert!(matches!(
            read_frame(&mut reader, &mut buf, 50).await.unwrap(),
            Frame::Line
        ));
        assert_eq!(buf, b"{\"ok\":1}\n");
        assert!(matches!(
            read_frame(&mut reader, &mut buf, 50).await.unwrap(),
            Frame::Line
        ));
        assert_eq!(buf, b"{\"tail\":true}");
        assert!(matches!(
            read_frame(&mut reader, &mut buf, 50).await.unwrap(),
            Frame::Eof
        ));
    }
}
