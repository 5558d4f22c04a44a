//! The filesystem tools (`read`, `write`, `edit`), the local backend settings, the sandbox
//! fence, and the read-before-edit observation policy.

mod anchor;
mod diff;
mod edit;
mod events;
pub(crate) mod io;
mod mutate;
mod read;
mod read_image;
mod write;

use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_tools::ToolRegistry;
use serde::Deserialize;

pub use edit::EditTool;
pub use events::{
    FsEditIntent, FsObserved, FsWriteIntent, IntentRequest, Observation, ObservationPolicyPlugin,
    ObservedPayload, WriteIntent,
};
pub(crate) use events::{edit_intent, observed, write_intent};
pub(crate) use mutate::{DenialText, remediate};
pub use read::{ReadLimits, ReadTool};
pub use read_image::ReadImageTool;
pub use write::WriteTool;
#[cfg(test)]
pub(crate) use {edit::EditValue, read::ReadValue, write::WriteValue};

use crate::errors;
use crate::guidance::{FsGuidance, Guidance};
use crate::paths::{process_cwd, resolve_lexical};
use crate::sandbox::{SandboxMode, SandboxPolicy};

/// Default bound on either side of a write's diff basis.
const DEFAULT_DIFF_BASIS_MAX_BYTES: u64 = 10 * 1024 * 1024;

/// The `fs` backend service: local text storage settings and, when confining, the shared
/// sandbox policy that fences mutations.
#[derive(Clone, Debug)]
pub struct FsBackend {
    /// Resolution base for calls without a session.
    pub cwd: PathBuf,
    /// `write` computes no diff when either side reaches this size.
    pub diff_basis_max_bytes: u64,
    /// `Some` when mutations are fenced (`dsh-fs-sandbox`).
    pub sandbox: Option<Arc<SandboxPolicy>>,
}

impl Default for FsBackend {
    fn default() -> Self {
        Self {
            cwd: process_cwd(),
            diff_basis_max_bytes: DEFAULT_DIFF_BASIS_MAX_BYTES,
            sandbox: None,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct BackendConfig {
    cwd: Option<String>,
    diff_basis_max_bytes: Option<f64>,
    mode: Option<SandboxMode>,
    /// Writable temporary areas under `workspace-write` (default: `/tmp` and the process
    /// temp dir).
    temp_roots: Option<Vec<String>>,
}

fn backend_from(plugin: &str, config: &BackendConfig) -> Result<FsBackend, BoxError> {
    let diff_basis_max_bytes = match config.diff_basis_max_bytes {
        None => DEFAULT_DIFF_BASIS_MAX_BYTES,
        Some(v) if v.is_finite() && v.fract() == 0.0 && v > 0.0 && v <= 9_007_199_254_740_991.0 => {
            v as u64
        }
        Some(_) => {
            return Err(errors::plain(format!(
                "{plugin}: diffBasisMaxBytes must be a positive safe integer"
            )));
        }
    };
    let cwd = config
        .cwd
        .as_deref()
        .map(|c| resolve_lexical(&process_cwd(), c))
        .unwrap_or_else(process_cwd);
    Ok(FsBackend {
        cwd,
        diff_basis_max_bytes,
        sandbox: None,
    })
}

/// `@deepseek-ai/dsh-fs-local` (config `{cwd?, diffBasisMaxBytes?}`): the unconfined backend.
pub struct FsLocalPlugin;

impl Plugin for FsLocalPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-fs-local"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: BackendConfig = config.parse()?;
        ctx.provide(Arc::new(backend_from("fs-local", &c)?))?;
        Ok(())
    }
}

/// `@deepseek-ai/dsh-fs-sandbox` (config `{cwd?, mode?, diffBasisMaxBytes?}`): the
/// backend whose `write`/`edit` are fenced by the sandbox policy. Uses the loaded
/// [`SandboxPolicy`] when there is one, else provides one (mode: `mode`, else
/// `$DSH_PERMISSION_MODE`, else `workspace-write`; fallback root: `cwd`).
pub struct FsSandboxPlugin;

impl Plugin for FsSandboxPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-fs-sandbox"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: BackendConfig = config.parse()?;
        let mut backend = backend_from("fs-sandbox", &c)?;
        let policy = match ctx.get::<SandboxPolicy>() {
            Some(policy) => policy,
            None => {
                let mut policy = SandboxPolicy::new(
                    c.mode.unwrap_or_else(SandboxMode::from_env_or_default),
                    &backend.cwd,
                );
                if let Some(roots) = &c.temp_roots {
                    policy = policy
                        .with_temp_roots(roots.iter().map(std::path::PathBuf::from).collect());
                }
                let policy = Arc::new(policy);
                ctx.provide(policy.clone())?;
                policy
            }
        };
        backend.sandbox = Some(policy);
        ctx.provide(Arc::new(backend))?;
        Ok(())
    }
}

/// Config of `@deepseek-ai/dsh-tool-fs`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ToolFsConfig {
    /// Upstream 0.2's per-tool switches (each on unless `false`).
    read: Option<bool>,
    read_image: Option<bool>,
    write: Option<bool>,
    edit: Option<bool>,
    read_limit: Option<f64>,
    read_max_line_length: Option<f64>,
    read_max_bytes: Option<f64>,
    read_stream_min_size: Option<f64>,
}

fn positive_integer(name: &str, value: Option<f64>, default: u64) -> Result<u64, BoxError> {
    match value {
        None => Ok(default),
        Some(v) if v.is_finite() && v.fract() == 0.0 && v >= 1.0 => Ok(v as u64),
        Some(_) => Err(errors::plain(format!(
            "tool-fs: {name} must be a positive integer"
        ))),
    }
}

/// `@deepseek-ai/dsh-tool-fs` (config `{read?, readImage?, write?, edit?, readLimit?,
/// readMaxLineLength?, readMaxBytes?, readStreamMinSize?}`): registers `read`, `read_image`,
/// `write` and `edit` over the loaded backend, each unless its switch is `false` (upstream
/// 0.2's sdk-minimal keeps only `read_image`).
pub struct ToolFsPlugin;

impl Plugin for ToolFsPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-fs"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: ToolFsConfig = config.parse()?;
        let d = ReadLimits::default();
        let limits = ReadLimits {
            limit: positive_integer("readLimit", c.read_limit, d.limit)?,
            max_line_length: positive_integer(
                "readMaxLineLength",
                c.read_max_line_length,
                d.max_line_length as u64,
            )? as usize,
            max_bytes: positive_integer("readMaxBytes", c.read_max_bytes, d.max_bytes as u64)?
                as usize,
        };
        // Every read streams, so the streaming threshold only needs to be valid.
        positive_integer(
            "readStreamMinSize",
            c.read_stream_min_size,
            10 * 1024 * 1024,
        )?;
        // Like upstream's `inject: ['fs']`: the row waits for the backend row, so a fenced
        // backend can never be missed because of row order.
        let backend = ctx.require::<FsBackend>()?;
        let on = |switch: Option<bool>| switch != Some(false);
        let read = on(c.read).then(|| ReadTool::new(limits, backend.clone()));
        let write = on(c.write).then(|| WriteTool::new(backend.clone()));
        let edit = on(c.edit).then(|| EditTool::new(backend.clone()));
        if on(c.read_image) {
            register_read_image(ctx, backend)?;
        }
        let mut sections = Vec::new();
        sections.extend(read.as_ref().map(|t| t.prompt_section()));
        sections.extend(write.as_ref().map(|t| t.prompt_section()));
        sections.extend(edit.as_ref().map(|t| t.prompt_section()));
        Guidance::<FsGuidance>::publish(ctx, sections)?;
        let registry = ctx.require::<ToolRegistry>()?;
        if let Some(t) = read {
            registry.register(ctx, Arc::new(dsh_tools::Typed::new(t)?))?;
        }
        if let Some(t) = write {
            registry.register(ctx, Arc::new(dsh_tools::Typed::new(t)?))?;
        }
        if let Some(t) = edit {
            registry.register(ctx, Arc::new(dsh_tools::Typed::new(t)?))?;
        }
        Ok(())
    }
}

/// `read_image` exists while an attachment store is mounted, as upstream's
/// `inject: ['attachments']`: registered now when the store row applied first, or when it
/// is mounted later.
fn register_read_image(ctx: &Context, backend: Arc<FsBackend>) -> Result<(), BoxError> {
    let registry = ctx.require::<ToolRegistry>()?;
    if let Some(store) = ctx.get::<dsh_attachments::AttachmentStore>() {
        registry.register(
            ctx,
            Arc::new(dsh_tools::Typed::new(ReadImageTool::new(
                ctx, backend, store,
            ))?),
        )?;
        return Ok(());
    }
    let owner = ctx.clone();
    ctx.on_emit::<dsh_attachments::AttachmentsMounted>(
        dsh_kernel::ListenOptions::GLOBAL,
        move |store| {
            registry.register(
                &owner,
                Arc::new(dsh_tools::Typed::new(ReadImageTool::new(
                    &owner,
                    backend.clone(),
                    store.clone(),
                ))?),
            )?;
            Ok(())
        },
    )?;
    Ok(())
}
