//! What every product child shares: its working directory, the bounded diagnostic, and
//! the published run (local cancellation settles the result at once as `aborted` with the
//! partial output; disposal cancels and tears the process tree down).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{BoxError, BoxFuture};
use dsh_llm::ContentBlock;
use dsh_subagent::{RunFault, StopReason, SubagentResult, SubagentRun};
use tokio_util::sync::CancellationToken;

/// Maximum UTF-8 size of a result's diagnostic.
pub const MAX_DIAGNOSTIC_BYTES: usize = 4096;
const TRUNCATION_SUFFIX: &str = "\n[diagnostic truncated]";

/// `diagnostic`, or a prefix cut on a character boundary plus `\n[diagnostic truncated]`
/// when it is longer than [`MAX_DIAGNOSTIC_BYTES`].
pub fn limit_diagnostic(diagnostic: &str) -> String {
    if diagnostic.len() <= MAX_DIAGNOSTIC_BYTES {
        return diagnostic.to_string();
    }
    let mut cut = MAX_DIAGNOSTIC_BYTES - TRUNCATION_SUFFIX.len();
    while !diagnostic.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{TRUNCATION_SUFFIX}", &diagnostic[..cut])
}

/// `Product subagent failure (product: …; stage: …; category: …<extra>)`.
pub fn failure_line(product: &str, stage: &str, category: &str, extra: &str) -> String {
    format!(
        "Product subagent failure (product: {product}; stage: {stage}; category: {category}{extra})"
    )
}

fn enterable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            // Search permission for someone; the spawn reports a finer EACCES.
            m.permissions().mode() & 0o111 != 0 && std::fs::read_dir(path).is_ok()
        }
        _ => false,
    }
}

fn usable(prefix: &str, label: &str, cwd: PathBuf) -> Result<PathBuf, BoxError> {
    if !cwd.is_absolute() {
        return Err(format!(
            "{prefix}: {label} must be an absolute path: {}",
            cwd.display()
        )
        .into());
    }
    if !enterable(&cwd) {
        return Err(format!(
            "{prefix}: {label} is not an accessible directory: {}",
            cwd.display()
        )
        .into());
    }
    Ok(cwd)
}

/// A configured `cwd` override, checked once at load (relative to the launch directory).
pub fn configured_cwd(prefix: &str, cwd: Option<String>) -> Result<Option<PathBuf>, BoxError> {
    let Some(cwd) = cwd else { return Ok(None) };
    if cwd.is_empty() {
        return Err(format!(
            "{prefix}: config cwd is empty \u{2014} leave the key out to use the parent session's cwd"
        )
        .into());
    }
    let base = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    usable(prefix, "config cwd", base.join(cwd)).map(Some)
}

/// The child's working directory: the configured override, else the parent session's.
pub fn child_cwd(
    prefix: &str,
    configured: Option<&PathBuf>,
    parent: Option<PathBuf>,
) -> Result<PathBuf, BoxError> {
    if let Some(c) = configured {
        return Ok(c.clone());
    }
    let Some(parent) = parent else {
        return Err(format!(
            "{prefix}: the child has no working directory \u{2014} set `cwd` in the config, or delegate from a parent session that has a cwd"
        )
        .into());
    };
    usable(prefix, "parent session cwd", parent)
}

/// A positive timing bound from a row (milliseconds).
pub fn positive_ms(
    prefix: &str,
    name: &str,
    value: Option<f64>,
    default: u64,
) -> Result<Duration, BoxError> {
    match value {
        None => Ok(Duration::from_millis(default)),
        // At most about 31 years: deadlines computed from it never overflow.
        Some(v) if v > 1e12 && v.is_finite() => {
            Err(format!("{prefix}: {name} must be at most 1e12 milliseconds").into())
        }
        Some(v) if v.is_finite() && v > 0.0 => Ok(Duration::from_secs_f64(v / 1000.0)),
        Some(_) => Err(format!("{prefix}: {name} must be a positive finite number").into()),
    }
}

/// The text blocks of a one-shot task, refused when it has another kind of block or no
/// text at all.
pub fn text_task(prefix: &str, prompt: &[ContentBlock]) -> Result<Vec<String>, BoxError> {
    let mut texts = Vec::new();
    for block in prompt {
        match block {
            ContentBlock::Text { text } => texts.push(text.clone()),
            _ => {
                return Err(
                    format!("{prefix}: the one-shot task must contain only text blocks").into(),
                );
            }
        }
    }
    if texts.is_empty() {
        return Err(format!("{prefix}: the one-shot task must contain only text blocks").into());
    }
    if texts.iter().all(|t| t.trim().is_empty()) {
        return Err(format!("{prefix}: the one-shot task must not be empty").into());
    }
    Ok(texts)
}

/// The parts of a published run.
pub struct Publish {
    /// Cancelled by the caller (the parent's tool call); cancels the run.
    pub parent_cancel: CancellationToken,
    /// This run's local cancellation (cancelled once it was requested).
    pub local: CancellationToken,
    /// Best-effort protocol cancel (the process teardown stays authoritative).
    pub on_cancel: Arc<dyn Fn() + Send + Sync>,
    /// The output collected so far.
    pub partial: Arc<dyn Fn() -> Vec<ContentBlock> + Send + Sync>,
    /// The bound of the run and the diagnostic it ends with when exceeded.
    pub timeout: Option<(Duration, String)>,
    /// Stops the process tree; resolves once it is gone.
    pub teardown: Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>,
}

/// Publishes a run whose result is `attempt`, raced against local cancellation (then
/// `aborted` with the partial output) and the timeout (then `error` with its diagnostic).
pub fn publish(parts: Publish, attempt: BoxFuture<'static, SubagentResult>) -> SubagentRun {
    let Publish {
        parent_cancel,
        local,
        on_cancel,
        partial,
        timeout,
        teardown,
    } = parts;
    // Settled once the result is in: a later cancel (disposal) sends no protocol cancel.
    let settled = CancellationToken::new();
    let request_cancel: Arc<dyn Fn() + Send + Sync> = {
        let local = local.clone();
        let settled = settled.clone();
        Arc::new(move || {
            if !local.is_cancelled() && !settled.is_cancelled() {
                local.cancel();
                on_cancel();
            }
        })
    };
    {
        let request_cancel = request_cancel.clone();
        let settled = settled.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = parent_cancel.cancelled() => request_cancel(),
                _ = settled.cancelled() => {}
            }
        });
    }
    let task = {
        let local = local.clone();
        let interrupt = request_cancel.clone();
        tokio::spawn(async move {
            let aborted = |partial: &Arc<dyn Fn() -> Vec<ContentBlock> + Send + Sync>| {
                SubagentResult::new(partial(), StopReason::Aborted)
            };
            let bound = async {
                match &timeout {
                    Some((d, diag)) => {
                        tokio::time::sleep(*d).await;
                        diag.clone()
                    }
                    None => std::future::pending().await,
                }
            };
            let mut result = tokio::select! {
                biased;
                _ = local.cancelled() => aborted(&partial),
                r = attempt => if local.is_cancelled() { aborted(&partial) } else { r },
                diag = bound => {
                    let mut r = SubagentResult::new(partial(), StopReason::Error);
                    r.diagnostic = Some(diag);
                    // Stop the child's work; the result is the timeout, not a cancel.
                    interrupt();
                    r
                }
            };
            settled.cancel();
            result.diagnostic = result.diagnostic.map(|d| limit_diagnostic(&d));
            result
        })
    };
    let id = uuid::Uuid::new_v4().to_string();
    let result: BoxFuture<'static, Result<SubagentResult, RunFault>> = Box::pin(async move {
        task.await
            .map_err(|e| RunFault(format!("product subagent run failed: {e}")))
    });
    SubagentRun::new(id, None, result, move || {
        Box::pin(async move {
            request_cancel();
            teardown().await;
            Ok(())
        })
    })
}
