//! `glob` and `grep`: ripgrep semantics in-process (the `ignore`, `globset` and `grep-*`
//! crates ripgrep is built from), upstream's caps, ordering, footers and spill texts.

mod glob;
mod grep;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_tools::{ToolRegistry, ToolRunContext, Typed};
use serde::Deserialize;
use serde_json::Value;

pub use glob::{GlobTool, sample_across_top_level};
pub use grep::GrepTool;
#[cfg(test)]
pub(crate) use {glob::GlobValue, grep::GrepValue};

use crate::errors;
use crate::guidance::{Guidance, SearchGuidance};
use crate::paths::{process_cwd, session_cwd};

/// VCS metadata directories `glob` never descends into.
const VCS_DIRS: [&str; 6] = [".git", ".svn", ".hg", ".bzr", ".jj", ".sl"];

/// Caps of both search tools (the `tool-fs-search` row config).
#[derive(Clone, Debug, PartialEq)]
pub struct SearchConfig {
    /// Sample an over-cap glob result across top-level entries instead of taking its head.
    pub sample_over_cap_glob_results: bool,
    pub glob_max_results: usize,
    pub grep_max_matches: usize,
    pub grep_max_line_bytes: usize,
    pub search_meta_max_bytes: usize,
    pub raw_output_max_bytes: u64,
    pub stderr_max_bytes: usize,
    /// Tool-level cooperative deadline.
    pub timeout_ms: u64,
}

impl SearchConfig {
    pub fn new(sample_over_cap_glob_results: bool) -> Self {
        Self {
            sample_over_cap_glob_results,
            glob_max_results: 100,
            grep_max_matches: 250,
            grep_max_line_bytes: 2000,
            search_meta_max_bytes: 65_536,
            raw_output_max_bytes: 20_000_000,
            stderr_max_bytes: 64 * 1024,
            timeout_ms: 30_000,
        }
    }
}

pub use dsh_tools::{SpillRef, SpillRequest, SpillStore, TextSpillStore};

/// Saves a complete result; any failure only costs the recovery path.
async fn try_spill(
    run: &ToolRunContext,
    suggested_name: &str,
    content: String,
) -> Option<SpillRef> {
    let session = run.session.as_ref()?;
    let store = run.ctx.get::<SpillStore>()?;
    let request = SpillRequest {
        session_id: session.id(),
        tool_name: run.name.clone(),
        call_id: run.call_id.clone(),
        suggested_name: suggested_name.into(),
        content,
    };
    match store.0.save_text(request).await {
        Ok(spill) => Some(spill),
        Err(e) => {
            tracing::warn!(error = %e, tool = %run.name, "complete search result not saved");
            None
        }
    }
}

/// The directory searches run in: the session cwd verbatim, else the process cwd.
fn search_workdir(run: &ToolRunContext) -> PathBuf {
    session_cwd(run)
        .map(PathBuf::from)
        .unwrap_or_else(process_cwd)
}

/// Absolute paths inside the workdir become relative (`.` for the workdir itself).
fn to_workdir_relative(path: &str, workdir: &Path) -> String {
    let p = Path::new(path);
    if !p.is_absolute() {
        return path.to_string();
    }
    match p.strip_prefix(workdir) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
        Ok(rel) => rel.to_string_lossy().into_owned(),
        Err(_) => path.to_string(),
    }
}

/// Builds the display path of a walked entry the way ripgrep prints it: the search root
/// as given, joined with the entry's path below it.
fn display_path(given_root: Option<&str>, walk_root: &Path, entry: &Path) -> String {
    let rel = entry.strip_prefix(walk_root).unwrap_or(entry);
    match given_root {
        Some(root) if rel.as_os_str().is_empty() => root.to_string(),
        Some(root) => Path::new(root).join(rel).to_string_lossy().into_owned(),
        None => rel.to_string_lossy().into_owned(),
    }
}

/// The failure texts of a finished search (`<tool> search failed (exit 2): …`).
fn search_failed(tool: &str, stderr: &[String], stderr_max_bytes: usize) -> BoxError {
    let mut text = stderr.join("\n").trim().to_string();
    let truncated = text.len() > stderr_max_bytes;
    if truncated {
        let mut cut = text.len() - stderr_max_bytes;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text = text[cut..].trim().to_string();
    }
    if text.is_empty() {
        return errors::search("SEARCH_FAILED", format!("{tool} search failed (exit 2)"));
    }
    let suffix = if truncated { " [stderr truncated]" } else { "" };
    errors::search(
        "SEARCH_FAILED",
        format!("{tool} search failed (exit 2): {text}{suffix}"),
    )
}

fn aborted(tool: &str) -> BoxError {
    errors::search(
        "SEARCH_ABORTED",
        format!("{tool} was aborted before completion (tool timeout or caller cancellation)"),
    )
}

fn raw_overflow(tool: &str, cap: u64) -> BoxError {
    errors::search(
        "SEARCH_RAW_OUTPUT_OVERFLOW",
        format!(
            "{tool} produced more raw output than the subprocess seam retained within the {cap}-byte cap; narrow pattern, path, or include and retry"
        ),
    )
}

/// Drops trailing entries of `meta[key]` (keeping one) while its JSON exceeds `max_bytes`,
/// marking it truncated.
fn cap_meta(mut meta: serde_json::Map<String, Value>, key: &str, max_bytes: usize) -> Value {
    let size = |m: &serde_json::Map<String, Value>| {
        dsh_kernel::json::to_string(&Value::Object(m.clone())).len()
    };
    if size(&meta) <= max_bytes {
        return Value::Object(meta);
    }
    meta.insert("truncated".into(), Value::Bool(true));
    loop {
        let len = meta.get(key).and_then(Value::as_array).map_or(0, Vec::len);
        if len <= 1 || size(&meta) <= max_bytes {
            break;
        }
        if let Some(Value::Array(items)) = meta.get_mut(key) {
            items.pop();
        }
    }
    Value::Object(meta)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SearchConfigRow {
    sample_over_cap_glob_results: bool,
    glob_max_results: Option<f64>,
    grep_max_matches: Option<f64>,
    grep_max_line_bytes: Option<f64>,
    search_meta_max_bytes: Option<f64>,
    raw_output_max_bytes: Option<f64>,
    grace_ms: Option<f64>,
    stderr_max_bytes: Option<f64>,
    timeout_ms: Option<f64>,
}

fn positive_integer(name: &str, value: Option<f64>, default: u64) -> Result<u64, BoxError> {
    match value {
        None => Ok(default),
        Some(v) if v.is_finite() && v.fract() == 0.0 && v >= 1.0 => Ok(v as u64),
        Some(_) => Err(errors::plain(format!(
            "tool-fs-search: {name} must be a positive integer"
        ))),
    }
}

/// `@deepseek-ai/dsh-tool-fs-search` (config `{sampleOverCapGlobResults, globMaxResults?,
/// grepMaxMatches?, grepMaxLineBytes?, searchMetaMaxBytes?, rawOutputMaxBytes?, graceMs?,
/// stderrMaxBytes?, timeoutMs?}`): registers `glob` and `grep`.
pub struct ToolFsSearchPlugin;

impl Plugin for ToolFsSearchPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-fs-search"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: SearchConfigRow = config.parse()?;
        let d = SearchConfig::new(row.sample_over_cap_glob_results);
        let grace = positive_integer("graceMs", row.grace_ms, 3_000)?;
        if grace > 2_147_483_647 {
            return Err(errors::plain(
                "tool-fs-search: graceMs must be no greater than 2147483647",
            ));
        }
        let config = SearchConfig {
            sample_over_cap_glob_results: row.sample_over_cap_glob_results,
            glob_max_results: positive_integer(
                "globMaxResults",
                row.glob_max_results,
                d.glob_max_results as u64,
            )? as usize,
            grep_max_matches: positive_integer(
                "grepMaxMatches",
                row.grep_max_matches,
                d.grep_max_matches as u64,
            )? as usize,
            grep_max_line_bytes: positive_integer(
                "grepMaxLineBytes",
                row.grep_max_line_bytes,
                d.grep_max_line_bytes as u64,
            )? as usize,
            search_meta_max_bytes: positive_integer(
                "searchMetaMaxBytes",
                row.search_meta_max_bytes,
                d.search_meta_max_bytes as u64,
            )? as usize,
            raw_output_max_bytes: positive_integer(
                "rawOutputMaxBytes",
                row.raw_output_max_bytes,
                d.raw_output_max_bytes,
            )?,
            stderr_max_bytes: positive_integer(
                "stderrMaxBytes",
                row.stderr_max_bytes,
                d.stderr_max_bytes as u64,
            )? as usize,
            timeout_ms: positive_integer("timeoutMs", row.timeout_ms, d.timeout_ms)?,
        };
        let glob = GlobTool::new(config.clone());
        let grep = GrepTool::new(config);
        Guidance::<SearchGuidance>::publish(
            ctx,
            vec![glob.prompt_section(), grep.prompt_section()],
        )?;
        let registry = ctx.require::<ToolRegistry>()?;
        registry.register(ctx, Arc::new(Typed::new(glob)?))?;
        registry.register(ctx, Arc::new(Typed::new(grep)?))?;
        Ok(())
    }
}
