//! `glob`: files matching a glob pattern, oldest modification first, hidden and ignored
//! files included, VCS metadata excluded (`rg --files --sort=modified --no-ignore --hidden`).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use dsh_kernel::BoxError;
use dsh_tools::{Reply, ToolRunContext, TypedTool};
use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::{
    SearchConfig, SpillRef, VCS_DIRS, aborted, cap_meta, display_path, raw_overflow, search_failed,
    search_workdir, to_workdir_relative, try_spill,
};
use crate::errors;
use crate::fs::io::blocking;
use crate::guidance::PromptSection;

/// The `glob` tool.
#[derive(Clone)]
pub struct GlobTool {
    config: SearchConfig,
}

// The arguments (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
pub struct GlobArgs {
    /// The glob to match paths against, e.g. "**/*.rs" or "src/**/*.test.ts". Without a "/" it matches file names at any depth ("*" and "*.rs" cover the whole tree); add a separator to anchor it.
    pattern: String,
    /// The directory to search. Defaults to the session workspace; relative paths start there.
    path: Option<String>,
}

/// What a Code Mode binding of `glob` resolves to: every path found, not the rendered page.
#[derive(Serialize, JsonSchema)]
pub struct GlobValue {
    root: String,
    paths: Vec<String>,
}

impl GlobTool {
    pub fn new(config: SearchConfig) -> Self {
        Self { config }
    }

    fn describe(&self) -> String {
        let config = &self.config;
        let m = config.glob_max_results;
        let over_cap = if config.sample_over_cap_glob_results {
            format!("beyond that you get {m} paths spread over the top-level entries")
        } else {
            format!("beyond that you get the {m} oldest paths")
        };
        format!(
            "Lists the files (not directories) below a directory whose paths fit a glob. Hidden and git-ignored files count; \
             version-control metadata directories are skipped. A result of at most {m} paths is ordered oldest modification \
             first; {over_cap}, states that it did, and names where the full sorted list went. Not a directory listing tool."
        )
    }

    /// The `tool:glob` prompt section.
    pub fn prompt_section(&self) -> PromptSection {
        let over_cap = if self.config.sample_over_cap_glob_results {
            "larger ones are thinned out evenly across the top-level entries, giving a view of the whole tree instead of one subtree."
        } else {
            "larger ones are cut down to the oldest paths."
        };
        PromptSection::new(
            "tool:glob",
            103,
            format!(
                "When you need files by name or path pattern, call glob instead of shelling out to find. Note that a pattern \
                 with no \"/\" is matched against file names anywhere below the search root, so \"*\" returns the entire tree. \
                 Directories never appear, while hidden and ignored files do. Small results arrive sorted by modification time; {over_cap}"
            ),
        )
    }
}

/// The inline page of an over-cap result and the top-level spread it reaches.
#[derive(Clone, Debug, PartialEq)]
pub struct GlobSample {
    pub items: Vec<String>,
    /// Distinct top-level entries the page reaches.
    pub shown: usize,
    /// Distinct top-level entries of the complete result.
    pub total: usize,
}

fn relative_to_search_root<'a>(path: &'a str, root: &str) -> &'a str {
    if root == "." {
        return path.strip_prefix("./").unwrap_or(path);
    }
    let trimmed = root.trim_end_matches('/');
    if trimmed.is_empty() {
        return path.trim_start_matches('/');
    }
    if path == trimmed {
        return "";
    }
    match path
        .strip_prefix(trimmed)
        .and_then(|rest| rest.strip_prefix('/'))
    {
        Some(rest) => rest,
        None => path,
    }
}

fn top_level_segment(path: &str) -> &str {
    let trimmed = path.trim_start_matches('/');
    trimmed.split('/').next().unwrap_or(trimmed)
}

/// Round-robin across the result's top-level entries (first-appearance order): every entry
/// gets a slot before any gets a second; the page is emitted entry by entry, each in
/// modification-time order.
pub fn sample_across_top_level(paths: &[String], max_items: usize, root: &str) -> GlobSample {
    let mut order: Vec<&str> = Vec::new();
    let mut groups: HashMap<&str, Vec<&String>> = HashMap::new();
    for path in paths {
        let key = top_level_segment(relative_to_search_root(path, root));
        groups
            .entry(key)
            .or_insert_with(|| {
                order.push(key);
                Vec::new()
            })
            .push(path);
    }
    let mut taken: Vec<usize> = vec![0; order.len()];
    let mut count = 0;
    let mut round = 0;
    while count < max_items {
        let mut progressed = false;
        for (i, key) in order.iter().enumerate() {
            if count >= max_items {
                break;
            }
            if groups[key].len() > round {
                taken[i] += 1;
                count += 1;
                progressed = true;
            }
        }
        if !progressed {
            break;
        }
        round += 1;
    }
    let items: Vec<String> = order
        .iter()
        .zip(&taken)
        .flat_map(|(key, n)| groups[key][..*n].iter().map(|p| (*p).clone()))
        .collect();
    GlobSample {
        items,
        shown: taken.iter().filter(|n| **n > 0).count(),
        total: order.len(),
    }
}

fn recovery(spill: Option<&SpillRef>) -> String {
    match spill {
        Some(s) => format!(
            "Full sorted result stored at: {}. {}",
            s.locator, s.retrieval_hint
        ),
        None => {
            "The complete result could not be saved; narrow pattern or path to see more.".into()
        }
    }
}

fn format_page(items: &[String], seen: usize, spill: Option<&SpillRef>, basis: &str) -> String {
    format!(
        "{}\n\n(Showing {} of {seen} paths{basis} {})",
        items.join("\n"),
        items.len(),
        recovery(spill)
    )
}

/// The inline page (and whether the result was capped), computed the same way for the
/// text and the metadata.
fn page(paths: &[String], config: &SearchConfig, root: &str) -> (Vec<String>, bool) {
    if paths.len() <= config.glob_max_results {
        (paths.to_vec(), false)
    } else if !config.sample_over_cap_glob_results {
        (paths[..config.glob_max_results].to_vec(), true)
    } else {
        (
            sample_across_top_level(paths, config.glob_max_results, root).items,
            true,
        )
    }
}

fn render(paths: &[String], config: &SearchConfig, root: &str, spill: Option<&SpillRef>) -> String {
    if paths.is_empty() {
        return "No files found".into();
    }
    if paths.len() <= config.glob_max_results {
        return paths.join("\n");
    }
    if !config.sample_over_cap_glob_results {
        return format_page(&paths[..config.glob_max_results], paths.len(), spill, ".");
    }
    let sample = sample_across_top_level(paths, config.glob_max_results, root);
    let basis = if sample.total == paths.len() {
        ".".to_string()
    } else {
        let narrow = if sample.shown < sample.total {
            " Narrow path to inspect a specific subtree."
        } else {
            ""
        };
        format!(
            ", sampled across {} of the {} top-level entries this pattern matched instead of taken in modification-time order.{narrow}",
            sample.shown, sample.total
        )
    };
    format_page(&sample.items, paths.len(), spill, &basis)
}

fn meta(paths: &[String], config: &SearchConfig, root: &str) -> Value {
    let (items, truncated) = page(paths, config, root);
    let mut m = Map::new();
    m.insert("shape".into(), json!("paths"));
    m.insert("paths".into(), json!(items));
    m.insert("truncated".into(), json!(truncated));
    m.insert("total".into(), json!(paths.len()));
    cap_meta(m, "paths", config.search_meta_max_bytes)
}

/// Walks like `rg --files --glob=<pattern> --sort=modified --no-ignore --hidden` with the
/// VCS exclusions, returning display paths oldest first.
fn walk(
    workdir: &Path,
    pattern: &str,
    path: Option<&str>,
    config: &SearchConfig,
    cancel: &CancellationToken,
) -> Result<Vec<String>, BoxError> {
    let mut overrides = OverrideBuilder::new(workdir);
    let invalid = |e: ignore::Error| {
        errors::search(
            "SEARCH_INVALID_PATTERN",
            format!("glob pattern rejected by ripgrep: rg: {e}"),
        )
    };
    overrides.add(pattern).map_err(invalid)?;
    for dir in VCS_DIRS {
        overrides.add(&format!("!**/{dir}")).map_err(invalid)?;
        overrides.add(&format!("!**/{dir}/**")).map_err(invalid)?;
    }
    let overrides = overrides.build().map_err(invalid)?;
    let root: PathBuf = match path {
        Some(p) => workdir.join(p),
        None => workdir.to_path_buf(),
    };
    let walker = WalkBuilder::new(&root)
        .standard_filters(false)
        .overrides(overrides)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();
    let mut found: Vec<(Option<SystemTime>, String)> = Vec::new();
    let mut stderr: Vec<String> = Vec::new();
    let mut raw_bytes: u64 = 0;
    for entry in walker {
        if cancel.is_cancelled() {
            return Err(aborted("glob"));
        }
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                stderr.push(format!("rg: {e}"));
                continue;
            }
        };
        let is_file = entry.file_type().is_some_and(|t| t.is_file());
        let explicit_file = entry.depth() == 0 && !entry.path().is_dir();
        if !(is_file || explicit_file) {
            continue;
        }
        let shown = display_path(path, &root, entry.path());
        raw_bytes += shown.len() as u64 + 1;
        if raw_bytes > config.raw_output_max_bytes {
            return Err(raw_overflow("glob", config.raw_output_max_bytes));
        }
        let modified = entry.metadata().ok().and_then(|m| m.modified().ok());
        found.push((modified, shown));
    }
    if !stderr.is_empty() {
        return Err(search_failed("glob", &stderr, config.stderr_max_bytes));
    }
    // Stable: entries with equal times keep walk (name) order; unreadable times go last.
    found.sort_by(|(a, _), (b, _)| match (a, b) {
        (Some(a), Some(b)) => a.cmp(b),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    });
    Ok(found
        .into_iter()
        .map(|(_, p)| to_workdir_relative(&p, workdir))
        .collect())
}

impl TypedTool for GlobTool {
    type Args = GlobArgs;
    type Value = GlobValue;

    fn name(&self) -> String {
        "glob".into()
    }

    fn description(&self) -> String {
        self.describe()
    }

    fn timeout_ms(&self) -> Option<u64> {
        Some(self.config.timeout_ms)
    }

    async fn run(
        self: Arc<Self>,
        args: GlobArgs,
        run: ToolRunContext,
    ) -> Result<Reply<GlobValue>, BoxError> {
        let GlobArgs { pattern, path } = args;
        if pattern.trim().is_empty() {
            return Err(errors::plain("pattern must be a non-empty string"));
        }
        if path.as_deref().is_some_and(|p| p.trim().is_empty()) {
            return Err(errors::plain("path must be a non-empty string when given"));
        }
        if run.cancel.is_cancelled() {
            return Err(aborted("glob"));
        }
        let workdir = search_workdir(&run);
        let root = path
            .as_deref()
            .map(|p| to_workdir_relative(p, &workdir))
            .unwrap_or_else(|| ".".into());
        let paths = {
            let (workdir, config, cancel, path) = (
                workdir.clone(),
                self.config.clone(),
                run.cancel.clone(),
                path.clone(),
            );
            blocking(move || walk(&workdir, &pattern, path.as_deref(), &config, &cancel)).await?
        };
        let spill = if paths.len() > self.config.glob_max_results {
            try_spill(&run, "glob-results.txt", paths.join("\n")).await
        } else {
            None
        };
        let text = render(&paths, &self.config, &root, spill.as_ref());
        let meta = meta(&paths, &self.config, &root);
        Ok(Reply::text(text)
            .with_meta(meta)
            .with_value(GlobValue { root, paths }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sampling_round_robins_across_top_level_entries() {
        let paths = strings(&[
            "t/a/1", "t/a/2", "t/a/3", "t/b/1", "t/c/1", "t/c/2", "t/top", "t/b/2",
        ]);
        let s = sample_across_top_level(&paths, 5, "t");
        assert_eq!(
            s,
            GlobSample {
                items: strings(&["t/a/1", "t/a/2", "t/b/1", "t/c/1", "t/top"]),
                shown: 4,
                total: 4
            }
        );
        let s = sample_across_top_level(&paths, 3, "t");
        assert_eq!(
            s,
            GlobSample {
                items: strings(&["t/a/1", "t/b/1", "t/c/1"]),
                shown: 3,
                total: 4
            }
        );
        let flat = strings(&["x", "y", "z"]);
        assert_eq!(
            sample_across_top_level(&flat, 2, ".").items,
            strings(&["x", "y"])
        );
    }

    #[test]
    fn flat_over_cap_results_keep_the_plain_footer() {
        let mut config = SearchConfig::new(true);
        config.glob_max_results = 2;
        let paths = strings(&["a", "b", "c"]);
        assert_eq!(
            render(&paths, &config, ".", None),
            format!("a\nb\n\n(Showing 2 of 3 paths. {})", recovery(None))
        );
        let spill = SpillRef {
            locator: "/s/x-glob-results.txt".into(),
            retrieval_hint: "Use read.".into(),
        };
        config.sample_over_cap_glob_results = false;
        assert_eq!(
            render(&paths, &config, ".", Some(&spill)),
            "a\nb\n\n(Showing 2 of 3 paths. Full sorted result stored at: /s/x-glob-results.txt. Use read.)"
        );
        assert_eq!(render(&[], &config, ".", None), "No files found");
    }
}
