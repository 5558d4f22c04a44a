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

mod bridge;
mod client_fs;
mod images;
mod project;
mod rpc;

use std::sync::Arc;

use dsh_kernel::config::Layer;
use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::task::JoinSet;

pub use bridge::{AcpConfig, Bridge, Projection};
pub use rpc::{Incoming, Peer, RpcError, classify};

const ACP_COMPOSITION: &str = include_str!("../compositions/acp.cordis.yml");
const RETRY_PATCH: &str = include_str!("../compositions/retry.patch.yml");
const FS_SEARCH_COMPOSITION: &str = include_str!("../compositions/fs-search.cordis.yml");
const INSTRUCTIONS_PATCH: &str = include_str!("../compositions/agent-instructions.patch.yml");
const SANDBOX_ROOT_PATCH: &str = include_str!("../compositions/session-sandbox-root.patch.yml");
const PARTIAL_LANDLOCK_PATCH: &str = include_str!("../compositions/partial-landlock.patch.yml");
const SESSION_QUERY_PATCH: &str = include_str!("../compositions/session-query.patch.yml");
const DEPTH_TWO_PATCH: &str = include_str!("../compositions/depth-two.patch.yml");
const SUBAGENT_FAILURE_PATCH: &str =
    include_str!("../compositions/subagent-durability-failure.patch.yml");
const WEB_PATCH: &str = include_str!("../compositions/web.patch.yml");
const IMAGE_PATCH: &str = include_str!("../compositions/image.patch.yml");
const IMAGE_TEXT_ROUTE_PATCH: &str = include_str!("../compositions/image-text-route.patch.yml");
const CONTINUABLE_INHERITANCE_PATCH: &str =
    include_str!("../compositions/subagent-continuable-inheritance.patch.yml");
const CHILD_QUESTION_PATCH: &str = include_str!("../compositions/child-question.patch.yml");
const RESULT_DIAGNOSTIC_PATCH: &str =
    include_str!("../compositions/subagent-result-diagnostic.patch.yml");
const PTY_PATCH: &str = include_str!("../compositions/pty.patch.yml");
const LSP_PATCH: &str = include_str!("../compositions/lsp.patch.yml");
const CODE_MODE_PATCH: &str = include_str!("../compositions/code-mode.patch.yml");
const BOTH_MODE_PATCH: &str = include_str!("../compositions/both-mode.patch.yml");
const PRODUCT_BOTH_PATCH: &str = include_str!("../compositions/product-subagent-both.patch.yml");
const PRODUCT_CODEX_PATCH: &str = include_str!("../compositions/product-subagent-codex.patch.yml");
const ADVANCED_PATCH: &str = include_str!("../compositions/advanced.patch.yml");

/// Upstream composition names (`DSH_SNAPSHOT_CONFIG`) this build has a composition for.
pub const KNOWN_COMPOSITIONS: [&str; 25] = [
    "code-mode.cordis.yml",
    "code-mode-image.cordis.yml",
    "code-mode-workspace-context.cordis.yml",
    "both-mode.cordis.yml",
    "cordis.yml",
    "background-job-admission.cordis.yml",
    "image.cordis.yml",
    "image-text-route.cordis.yml",
    "web.cordis.yml",
    "pty.cordis.yml",
    "tests/lsp.cordis.yml",
    "tests/fs-search.cordis.yml",
    "retry.cordis.yml",
    "agent-instructions.cordis.yml",
    "session-sandbox-root.cordis.yml",
    "partial-landlock.cordis.yml",
    "session-query.cordis.yml",
    "depth-two.cordis.yml",
    "subagent-durability-failure.cordis.yml",
    "subagent-continuable-inheritance.cordis.yml",
    "child-question.cordis.yml",
    "subagent-result-diagnostic.cordis.yml",
    "product-subagent-both.cordis.yml",
    "product-subagent-codex.cordis.yml",
    "advanced.cordis.yml",
];

/// The layers of the ACP composition selected by `DSH_SNAPSHOT_CONFIG` (upstream's
/// composition file name). A name this build has no composition for is an error: running
/// another composition instead would report results for a feature set nobody asked for.
pub fn composition_layers(config: Option<&str>) -> Result<Vec<Layer>, String> {
    let parse =
        |label: &str, text: &str| Layer::parse(label, label, text).map_err(|e| e.to_string());
    let name = config.unwrap_or("cordis.yml");
    Ok(match name {
        "tests/fs-search.cordis.yml" => vec![parse(
            "dsh-acp/fs-search.cordis.yml",
            FS_SEARCH_COMPOSITION,
        )?],
        "retry.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/retry.patch.yml", RETRY_PATCH)?,
        ],
        "agent-instructions.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/agent-instructions.patch.yml", INSTRUCTIONS_PATCH)?,
        ],
        "session-sandbox-root.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/session-sandbox-root.patch.yml", SANDBOX_ROOT_PATCH)?,
        ],
        "partial-landlock.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/partial-landlock.patch.yml", PARTIAL_LANDLOCK_PATCH)?,
        ],
        "session-query.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/session-query.patch.yml", SESSION_QUERY_PATCH)?,
        ],
        "web.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/web.patch.yml", WEB_PATCH)?,
        ],
        "pty.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/pty.patch.yml", PTY_PATCH)?,
        ],
        "tests/lsp.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/lsp.patch.yml", LSP_PATCH)?,
        ],
        "code-mode.cordis.yml" | "code-mode-workspace-context.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/code-mode.patch.yml", CODE_MODE_PATCH)?,
        ],
        "code-mode-image.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/image.patch.yml", IMAGE_PATCH)?,
            parse("dsh-acp/code-mode.patch.yml", CODE_MODE_PATCH)?,
        ],
        "both-mode.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/both-mode.patch.yml", BOTH_MODE_PATCH)?,
        ],
        "image.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/image.patch.yml", IMAGE_PATCH)?,
        ],
        "image-text-route.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/image-text-route.patch.yml", IMAGE_TEXT_ROUTE_PATCH)?,
        ],
        "depth-two.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/depth-two.patch.yml", DEPTH_TWO_PATCH)?,
        ],
        "subagent-durability-failure.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse(
                "dsh-acp/subagent-durability-failure.patch.yml",
                SUBAGENT_FAILURE_PATCH,
            )?,
        ],
        "subagent-continuable-inheritance.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse(
                "dsh-acp/subagent-continuable-inheritance.patch.yml",
                CONTINUABLE_INHERITANCE_PATCH,
            )?,
        ],
        "child-question.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/child-question.patch.yml", CHILD_QUESTION_PATCH)?,
        ],
        "subagent-result-diagnostic.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse(
                "dsh-acp/subagent-result-diagnostic.patch.yml",
                RESULT_DIAGNOSTIC_PATCH,
            )?,
        ],
        "product-subagent-both.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse(
                "dsh-acp/product-subagent-both.patch.yml",
                PRODUCT_BOTH_PATCH,
            )?,
        ],
        "product-subagent-codex.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse(
                "dsh-acp/product-subagent-codex.patch.yml",
                PRODUCT_CODEX_PATCH,
            )?,
        ],
        "advanced.cordis.yml" => vec![
            parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?,
            parse("dsh-acp/advanced.patch.yml", ADVANCED_PATCH)?,
        ],
        // Upstream's overlay sets a `tasks` key its ACP demo ignores, so the default job
        // limit applies; the recorded log shows exactly that.
        "cordis.yml" | "background-job-admission.cordis.yml" => {
            vec![parse("dsh-acp/acp.cordis.yml", ACP_COMPOSITION)?]
        }
        other => {
            return Err(format!(
                "DSH_SNAPSHOT_CONFIG names \"{other}\", a composition this build does not have (known: {})",
                KNOWN_COMPOSITIONS.join(", ")
            ));
        }
    })
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

impl Plugin for AcpAgentPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-acp-demo"
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
    let config = root
        .get::<AcpConfig>()
        .map(|c| (*c).clone())
        .ok_or("the composition has no acp-agent row")?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let writer = tokio::spawn(write_loop(rx, output));
    let peer = Peer::new(tx.clone());
    let config_rich = config.projection == Projection::Rich;
    let bridge = Bridge::new(root.clone(), peer.clone(), config)?;
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
                let b = bridge.clone();
                tasks.spawn(async move {
                    let result = b.handle(&method, params.clone()).await;
                    let follow = result.clone();
                    b.peer.respond(id, result);
                    b.after_response(&method, params.as_ref(), &follow);
                });
            }
            Some(Incoming::Notification { method, params }) => bridge.notification(&method, params),
            Some(Incoming::Response(frame)) => peer.resolve(&frame),
            Some(Incoming::Invalid { message, answer }) => {
                if !message.is_empty() {
                    tracing::warn!("acp: {message}");
                }
                // The rich server answers malformed frames as the reference SDK does;
                // upstream 0.1's (the committed projection) logs and ignores them.
                if config_rich && let Some(error) = answer {
                    peer.send_error_without_id(error);
                }
            }
        }
    }
    // EOF: no more updates; cancel running work, let pending prompts answer, flush.
    peer.close();
    bridge.quiesce().await;
    while tasks.join_next().await.is_some() {}
    let _ = tx.send(String::new());
    let _ = writer.await;
    Ok(())
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
