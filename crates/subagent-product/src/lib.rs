//! Product subagents (upstream subagent-codex, -claude-code, -acp, -dsh-sdk): other agent
//! programs run as one-shot children of the delegation service.
//!
//! Each row registers one named provider in `dsh-subagent`'s `Subagents`; the model reaches
//! it through an `@deepseek-ai/dsh-tool-subagent` row naming that provider. A product child
//! is another process: it has no local agent and no session log here (`subagent/end` has no
//! local child), advertises no start capabilities, runs in the configured `cwd` or the
//! parent session's, with the scrubbed environment plus the row's `env`. Loading a row
//! starts nothing; a process exists only while a delegated run does. See README.md.

mod acp;
mod claude;
mod codex;
mod common;
mod process;
mod rpc;
mod sdk;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{BoxError, BoxFuture, Context, Plugin, PluginConfig};
use dsh_subagent::{Capabilities, ResolvedStart, SubagentProvider, SubagentRun, Subagents};
use serde::Deserialize;

pub use acp::{AcpSpec, Permission, acp_stop_reason};
pub use claude::{ClaudeMode, ClaudeSpec, protocol_args as claude_protocol_args, result_outcome};
pub use codex::{CodexMode, CodexSpec, failure_category};
pub use common::{MAX_DIAGNOSTIC_BYTES, failure_line, limit_diagnostic};
pub use sdk::{SdkSpec, sdk_stop_reason};

/// Starts children directly (without a parent agent): the drivers behind the providers.
pub mod drivers {
    pub use crate::acp::start as start_acp;
    pub use crate::claude::start as start_claude_code;
    pub use crate::codex::start as start_codex;
    pub use crate::sdk::start as start_dsh_sdk;
}

/// Adds the production rows of this crate to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(AcpPlugin)
        .register(CodexPlugin)
        .register(ClaudeCodePlugin)
        .register(DshSdkPlugin);
}

/// What a provider starts, with everything but the working directory resolved.
#[derive(Clone, Debug)]
enum Product {
    Acp(AcpSpec),
    Codex(CodexSpec),
    Claude(ClaudeSpec),
    Sdk(SdkSpec),
}

impl Product {
    fn prefix(&self) -> &'static str {
        match self {
            Product::Acp(_) => "subagent-acp",
            Product::Codex(_) => "subagent-codex",
            Product::Claude(_) => "subagent-claude-code",
            Product::Sdk(_) => "subagent-dsh-sdk",
        }
    }
}

/// One named product provider.
struct ProductProvider {
    name: String,
    product: Product,
    /// The configured `cwd` (checked at load); else the parent session's.
    cwd: Option<PathBuf>,
}

impl SubagentProvider for ProductProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    fn inherits_parent_context(&self) -> bool {
        false
    }

    fn start(&self, request: ResolvedStart) -> BoxFuture<'static, Result<SubagentRun, BoxError>> {
        let product = self.product.clone();
        let configured = self.cwd.clone();
        Box::pin(async move {
            let request = request.request;
            let parent_cwd = request
                .parent
                .session()
                .read(|s| s.header().cwd.clone())
                .map(PathBuf::from);
            let cwd = common::child_cwd(product.prefix(), configured.as_ref(), parent_cwd)?;
            let prompt = request.prompt;
            let cancel = request.cancel;
            match product {
                Product::Acp(mut s) => {
                    s.cwd = cwd;
                    acp::start(s, prompt, cancel).await
                }
                Product::Codex(mut s) => {
                    s.cwd = cwd;
                    codex::start(s, prompt, cancel).await
                }
                Product::Claude(mut s) => {
                    s.cwd = cwd;
                    claude::start(s, prompt, cancel).await
                }
                Product::Sdk(mut s) => {
                    s.cwd = cwd;
                    sdk::start(s, prompt, cancel).await
                }
            }
        })
    }
}

fn provider_name(prefix: &str, name: Option<String>, default: &str) -> Result<String, BoxError> {
    let name = name.unwrap_or_else(|| default.to_string());
    if name.is_empty() {
        return Err(format!("{prefix}: `providerName` must be a non-empty string").into());
    }
    Ok(name)
}

fn command(
    prefix: &str,
    command: Option<String>,
    default: Option<&str>,
) -> Result<String, BoxError> {
    match (command, default) {
        (Some(c), _) if !c.is_empty() => Ok(c),
        (Some(_), _) => Err(format!("{prefix}: `command` must be a non-empty string").into()),
        (None, Some(d)) => Ok(d.to_string()),
        (None, None) => Err(format!("{prefix}: `command` is required").into()),
    }
}

fn env_vec(env: Option<BTreeMap<String, String>>) -> Vec<(String, String)> {
    env.unwrap_or_default().into_iter().collect()
}

/// A product child's run limit unless its row sets `timeoutMs`: a child that waits for
/// something that never comes (a network, a login) ends, and says so, within it.
const DEFAULT_TIMEOUT_MS: f64 = 30.0 * 60.0 * 1000.0;

fn timeout(prefix: &str, value: Option<f64>) -> Result<Option<Duration>, BoxError> {
    common::positive_ms(
        prefix,
        "timeoutMs",
        Some(value.unwrap_or(DEFAULT_TIMEOUT_MS)),
        0,
    )
    .map(Some)
}

fn register(
    ctx: &Context,
    name: String,
    product: Product,
    cwd: Option<PathBuf>,
) -> Result<(), BoxError> {
    let subagents = ctx.require::<Subagents>()?;
    subagents.register_provider(ctx, Arc::new(ProductProvider { name, product, cwd }))?;
    Ok(())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AcpRow {
    provider_name: Option<String>,
    command: Option<String>,
    args: Option<Vec<String>>,
    cwd: Option<String>,
    permission: Option<String>,
    env: Option<BTreeMap<String, String>>,
    dispose_eof_grace_ms: Option<f64>,
    dispose_grace_ms: Option<f64>,
    timeout_ms: Option<f64>,
}

/// `@deepseek-ai/dsh-subagent-acp`: any ACP agent program (`command` required).
pub struct AcpPlugin;

impl Plugin for AcpPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-subagent-acp"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        const P: &str = "subagent-acp";
        let row: AcpRow = config.parse()?;
        let permission = match row.permission.as_deref() {
            None | Some("reject") => Permission::Reject,
            Some("allow") => Permission::Allow,
            Some(other) => {
                return Err(format!(
                    "{P}: `permission` must be 'allow' or 'reject', got '{other}'"
                )
                .into());
            }
        };
        let spec = AcpSpec {
            command: command(P, row.command, None)?,
            args: row.args.unwrap_or_default(),
            cwd: PathBuf::new(),
            env: env_vec(row.env),
            permission,
            dispose_eof_grace: common::positive_ms(
                P,
                "disposeEofGraceMs",
                row.dispose_eof_grace_ms,
                6000,
            )?,
            dispose_grace: common::positive_ms(P, "disposeGraceMs", row.dispose_grace_ms, 3000)?,
            timeout: timeout(P, row.timeout_ms)?,
        };
        let cwd = common::configured_cwd(P, row.cwd)?;
        register(
            ctx,
            provider_name(P, row.provider_name, "acp")?,
            Product::Acp(spec),
            cwd,
        )
    }
}

/// The row of a product that is one agent CLI (Codex, Claude Code); each parses its own
/// `permissionMode` values.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CliRow {
    provider_name: Option<String>,
    command: Option<String>,
    args: Option<Vec<String>>,
    cwd: Option<String>,
    env: Option<BTreeMap<String, String>>,
    permission_mode: Option<String>,
    dispose_grace_ms: Option<f64>,
    timeout_ms: Option<f64>,
}

/// What a CLI product row resolves to, besides its `permissionMode` and default args.
struct CliParts {
    command: String,
    args: Option<Vec<String>>,
    env: Vec<(String, String)>,
    dispose_grace: Duration,
    timeout: Option<Duration>,
    cwd: Option<PathBuf>,
    name: String,
}

impl CliRow {
    /// Checks the row's shared keys; `program` and `name` are the product's defaults.
    fn resolve(self, prefix: &str, program: &str, name: &str) -> Result<CliParts, BoxError> {
        Ok(CliParts {
            command: command(prefix, self.command, Some(program))?,
            args: self.args,
            env: env_vec(self.env),
            dispose_grace: common::positive_ms(
                prefix,
                "disposeGraceMs",
                self.dispose_grace_ms,
                3000,
            )?,
            timeout: timeout(prefix, self.timeout_ms)?,
            cwd: common::configured_cwd(prefix, self.cwd)?,
            name: provider_name(prefix, self.provider_name, name)?,
        })
    }
}

/// `@deepseek-ai/dsh-subagent-codex`: `codex app-server --stdio` (or `command args`).
pub struct CodexPlugin;

impl Plugin for CodexPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-subagent-codex"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        const P: &str = "subagent-codex";
        let mut row: CliRow = config.parse()?;
        let mode = match row.permission_mode.take().as_deref() {
            None => CodexMode::Never,
            Some(m) => CodexMode::parse(m).ok_or_else(|| {
                format!("{P}: `permissionMode` must be 'never', 'approve-for-me' or 'dangerously-bypass-approvals-and-sandbox', got '{m}'")
            })?,
        };
        let parts = row.resolve(P, "codex", "codex")?;
        let spec = CodexSpec {
            command: parts.command,
            args: parts
                .args
                .unwrap_or_else(|| vec!["app-server".into(), "--stdio".into()]),
            cwd: PathBuf::new(),
            env: parts.env,
            mode,
            dispose_grace: parts.dispose_grace,
            timeout: parts.timeout,
        };
        register(ctx, parts.name, Product::Codex(spec), parts.cwd)
    }
}

/// `@deepseek-ai/dsh-subagent-claude-code`: the `claude` CLI in stream-json mode.
pub struct ClaudeCodePlugin;

impl Plugin for ClaudeCodePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-subagent-claude-code"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        const P: &str = "subagent-claude-code";
        let mut row: CliRow = config.parse()?;
        let mode = match row.permission_mode.take().as_deref() {
            None => ClaudeMode::DontAsk,
            Some(m) => ClaudeMode::parse(m).ok_or_else(|| {
                format!("{P}: `permissionMode` must be one of 'dontAsk', 'acceptEdits', 'auto', 'plan', 'bypassPermissions', got '{m}'")
            })?,
        };
        let parts = row.resolve(P, "claude", "claude-code")?;
        let spec = ClaudeSpec {
            command: parts.command,
            args: parts.args.unwrap_or_default(),
            cwd: PathBuf::new(),
            env: parts.env,
            mode,
            dispose_grace: parts.dispose_grace,
            timeout: parts.timeout,
        };
        register(ctx, parts.name, Product::Claude(spec), parts.cwd)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SdkRow {
    provider_name: Option<String>,
    command: Option<String>,
    args: Option<Vec<String>>,
    cwd: Option<String>,
    provider: Option<String>,
    model: Option<String>,
    max_tokens: Option<f64>,
    env: Option<BTreeMap<String, String>>,
    shutdown_timeout_ms: Option<f64>,
    dispose_eof_grace_ms: Option<f64>,
    dispose_grace_ms: Option<f64>,
    timeout_ms: Option<f64>,
}

/// `@deepseek-ai/dsh-subagent-dsh-sdk`: a dsh SDK runtime (`command` required, e.g.
/// `dsh --profile sdk`).
pub struct DshSdkPlugin;

impl Plugin for DshSdkPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-subagent-dsh-sdk"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        const P: &str = "subagent-dsh-sdk";
        let row: SdkRow = config.parse()?;
        let max_tokens = match row.max_tokens {
            None => None,
            Some(v) if v >= 1.0 && v.fract() == 0.0 && v < 9_007_199_254_740_992.0 => {
                Some(v as u64)
            }
            Some(_) => return Err(format!("{P}: `maxTokens` must be a positive integer").into()),
        };
        let nonempty = |name: &str, v: Option<String>, default: &str| -> Result<String, BoxError> {
            match v {
                None => Ok(default.to_string()),
                Some(s) if !s.is_empty() => Ok(s),
                Some(_) => Err(format!("{P}: `{name}` must be a non-empty string").into()),
            }
        };
        let spec = SdkSpec {
            command: command(P, row.command, None)?,
            args: row.args.unwrap_or_default(),
            cwd: PathBuf::new(),
            env: env_vec(row.env),
            provider: nonempty("provider", row.provider, "deepseek-official")?,
            model: nonempty("model", row.model, "deepseek-v4-flash")?,
            max_tokens,
            shutdown_timeout: common::positive_ms(
                P,
                "shutdownTimeoutMs",
                row.shutdown_timeout_ms,
                1000,
            )?,
            dispose_eof_grace: common::positive_ms(
                P,
                "disposeEofGraceMs",
                row.dispose_eof_grace_ms,
                6000,
            )?,
            dispose_grace: common::positive_ms(P, "disposeGraceMs", row.dispose_grace_ms, 3000)?,
            timeout: timeout(P, row.timeout_ms)?,
        };
        let cwd = common::configured_cwd(P, row.cwd)?;
        register(
            ctx,
            provider_name(P, row.provider_name, "dsh-sdk")?,
            Product::Sdk(spec),
            cwd,
        )
    }
}

/// Entry points for the fuzz targets (`fuzz/`).
#[doc(hidden)]
pub mod fuzzing {
    /// Reads a child's stdout `bytes` as the driver does (lines of at most `max_line`
    /// bytes), parses each line as JSON-RPC, classifies it and builds the reply frame a
    /// request would get; returns how many lines were read.
    pub async fn lines(bytes: &[u8], max_line: usize) -> std::io::Result<usize> {
        let mut reader = tokio::io::BufReader::with_capacity(64, bytes);
        let mut buf = Vec::new();
        let mut n = 0;
        loop {
            match crate::process::read_line_bounded(&mut reader, &mut buf, max_line).await? {
                crate::process::LineRead::Eof => return Ok(n),
                crate::process::LineRead::TooLong => {}
                crate::process::LineRead::Line => {
                    let text = String::from_utf8_lossy(&buf);
                    if let Ok(msg) = serde_json::from_str::<serde_json::Value>(text.trim())
                        && let dsh_jsonrpc::Incoming::Request { id, method, .. } =
                            dsh_jsonrpc::classify(msg)
                    {
                        let _ = crate::rpc::reply_frame(&id, Err((-32601, method)));
                    }
                }
            }
            n += 1;
        }
    }
}
