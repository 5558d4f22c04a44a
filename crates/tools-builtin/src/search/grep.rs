//! `grep`: regex search of file contents with ripgrep's defaults (ignore files honoured,
//! hidden and binary files skipped, symlinks not followed), matches grouped by file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_kernel::BoxError;
use dsh_tools::{Reply, ToolRunContext, TypedTool};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, SearcherBuilder, Sink, SinkMatch};
use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::{
    SearchConfig, SpillRef, aborted, cap_meta, display_path, raw_overflow, search_failed,
    search_workdir, to_workdir_relative, try_spill,
};
use crate::errors;
use crate::fs::io::blocking;
use crate::guidance::PromptSection;

/// The `grep` tool.
#[derive(Clone)]
pub struct GrepTool {
    config: SearchConfig,
}

// The arguments (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
pub struct GrepArgs {
    /// The regular expression to look for, in ripgrep syntax.
    pattern: String,
    /// A file or directory to search. Defaults to the session workspace; relative paths start there.
    path: Option<String>,
    /// A single glob restricting which files are searched, e.g. "*.rs" or "*.{ts,tsx}". One glob only, and no "!" negation.
    include: Option<String>,
}

/// What a Code Mode binding of `grep` resolves to: every match found, lines whole.
#[derive(Serialize, JsonSchema)]
pub struct GrepValue {
    matches: Vec<GrepMatch>,
}

/// One matching line.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrepMatch {
    path: String,
    line_number: u64,
    line: String,
}

impl GrepTool {
    pub fn new(config: SearchConfig) -> Self {
        Self { config }
    }

    fn describe(&self) -> String {
        format!(
            "Looks for a ripgrep regular expression inside files and reports each hit as a numbered line under its file. \
             Up to {} hits are shown in the result; past that, it names where the full list was stored. \
             To see what surrounds a hit, read that file.",
            self.config.grep_max_matches
        )
    }

    /// The `tool:grep` prompt section.
    pub fn prompt_section(&self) -> PromptSection {
        PromptSection::new(
            "tool:grep",
            104,
            "For searching text inside files, call the grep tool; do not run grep or rg through bash. Read the matching file when you want the lines around a hit.",
        )
    }
}

fn validate_include(include: &str) -> Result<(), BoxError> {
    if include.trim().is_empty() {
        return Err(errors::plain("include must be a non-empty glob when given"));
    }
    if include.starts_with('!') {
        return Err(errors::plain(
            "include selects files and cannot exclude them: drop the leading \"!\" and name the files to search",
        ));
    }
    let mut depth: usize = 0;
    for ch in include.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                return Err(errors::plain(
                    "include takes a single glob, not a comma-separated list: write alternatives in braces, e.g. *.{a,b}",
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// At most `max_bytes` of the line, cut on a character boundary, marked when cut.
fn preview_line(line: &str, max_bytes: usize) -> String {
    if line.len() <= max_bytes {
        return line.to_string();
    }
    let mut cut = max_bytes;
    while !line.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{} (line truncated)", &line[..cut])
}

fn group_by_file(matches: &[GrepMatch]) -> Vec<(String, Vec<&GrepMatch>)> {
    let mut groups: Vec<(String, Vec<&GrepMatch>)> = Vec::new();
    for m in matches {
        match groups.iter_mut().find(|(p, _)| *p == m.path) {
            Some((_, group)) => group.push(m),
            None => groups.push((m.path.clone(), vec![m])),
        }
    }
    groups
}

fn format_matches(matches: &[GrepMatch]) -> String {
    group_by_file(matches)
        .into_iter()
        .map(|(path, group)| {
            let rows: Vec<String> = group
                .iter()
                .map(|m| format!("Line {}: {}", m.line_number, m.line))
                .collect();
            format!("{path}\n{}", rows.join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn noun(count: usize) -> &'static str {
    if count == 1 { "match" } else { "matches" }
}

/// The inline head with line previews applied.
fn retained(matches: &[GrepMatch], config: &SearchConfig) -> Vec<GrepMatch> {
    matches
        .iter()
        .take(config.grep_max_matches)
        .map(|m| GrepMatch {
            line: preview_line(&m.line, config.grep_max_line_bytes),
            ..m.clone()
        })
        .collect()
}

fn render(matches: &[GrepMatch], config: &SearchConfig, spill: Option<&SpillRef>) -> String {
    if matches.is_empty() {
        return "No matches found".into();
    }
    let kept = retained(matches, config);
    let truncated = matches.len() > kept.len();
    let header = if truncated {
        format!("Found {} of {} matches", kept.len(), matches.len())
    } else {
        format!("Found {} {}", matches.len(), noun(matches.len()))
    };
    let body = format_matches(&kept);
    if !truncated {
        return format!("{header}\n\n{body}");
    }
    let recovery = match spill {
        Some(s) => format!(
            "Full grep result stored at: {}. {}",
            s.locator, s.retrieval_hint
        ),
        None => {
            "No full copy of the result could be saved; search with a narrower pattern, path or include to see the rest."
                .into()
        }
    };
    format!("{header}\n\n{body}\n\n({recovery})")
}

fn meta(matches: &[GrepMatch], config: &SearchConfig) -> Value {
    let kept = retained(matches, config);
    let files: Vec<Value> = group_by_file(&kept)
        .into_iter()
        .map(|(path, group)| {
            let rows: Vec<Value> = group
                .iter()
                .map(|m| {
                    let mut row = Map::new();
                    row.insert("lineNumber".into(), json!(m.line_number));
                    row.insert("line".into(), json!(m.line));
                    Value::Object(row)
                })
                .collect();
            let mut file = Map::new();
            file.insert("path".into(), json!(path));
            file.insert("matches".into(), Value::Array(rows));
            Value::Object(file)
        })
        .collect();
    let mut m = Map::new();
    m.insert("shape".into(), json!("matches"));
    m.insert("files".into(), Value::Array(files));
    m.insert("truncated".into(), json!(matches.len() > kept.len()));
    m.insert("total".into(), json!(matches.len()));
    cap_meta(m, "files", config.search_meta_max_bytes)
}

/// Collects the matching lines of one file.
struct Collector<'a> {
    path: &'a str,
    out: &'a mut Vec<GrepMatch>,
    raw_bytes: &'a mut u64,
    cap: u64,
}

impl Sink for Collector<'_> {
    type Error = std::io::Error;

    fn matched(
        &mut self,
        _searcher: &grep_searcher::Searcher,
        mat: &SinkMatch<'_>,
    ) -> Result<bool, Self::Error> {
        let first = mat.line_number().unwrap_or(0);
        for (i, line) in mat.lines().enumerate() {
            let text = match std::str::from_utf8(line) {
                Ok(t) => {
                    let t = t
                        .strip_suffix('\n')
                        .map(|t| t.strip_suffix('\r').unwrap_or(t))
                        .unwrap_or(t);
                    t.to_string()
                }
                Err(_) => "(line is not valid UTF-8)".to_string(),
            };
            // Roughly what one `rg --json` match record costs.
            *self.raw_bytes += 160 + 2 * self.path.len() as u64 + 2 * line.len() as u64;
            if *self.raw_bytes > self.cap {
                return Err(std::io::Error::other("raw output overflow"));
            }
            self.out.push(GrepMatch {
                path: self.path.to_string(),
                line_number: first + i as u64,
                line: text,
            });
        }
        Ok(true)
    }
}

/// Searches like `rg --json --regexp=<pattern> [--glob=<include>] [-- <path>]`.
/// Whether a path could name a secret file (a credential file name, a `/proc` secret, or an
/// explicitly named path that may be a link to one); only those are canonicalised.
fn may_be_secret(path: &Path, explicit: bool) -> bool {
    explicit
        || matches!(
            path.file_name().and_then(|n| n.to_str()),
            Some(".credentials.yaml" | ".env" | "environ" | "mem" | "auxv" | "pagemap")
        )
}

fn search(
    workdir: &Path,
    input: &GrepArgs,
    config: &SearchConfig,
    cancel: &CancellationToken,
) -> Result<Vec<GrepMatch>, BoxError> {
    let matcher = RegexMatcherBuilder::new()
        .line_terminator(Some(b'\n'))
        .build(&input.pattern)
        .map_err(|e| {
            errors::search(
                "SEARCH_INVALID_PATTERN",
                format!(
                    "grep pattern rejected by ripgrep: rg: {}",
                    e.to_string().trim()
                ),
            )
        })?;
    let root: PathBuf = match &input.path {
        Some(p) => workdir.join(p),
        None => workdir.to_path_buf(),
    };
    let mut builder = WalkBuilder::new(&root);
    builder
        .add_custom_ignore_filename(".rgignore")
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b));
    if let Some(include) = &input.include {
        let mut overrides = OverrideBuilder::new(workdir);
        overrides.add(include).map_err(|e| {
            errors::search(
                "SEARCH_INVALID_PATTERN",
                format!("grep pattern rejected by ripgrep: rg: {e}"),
            )
        })?;
        let overrides = overrides.build().map_err(|e| {
            errors::search(
                "SEARCH_INVALID_PATTERN",
                format!("grep pattern rejected by ripgrep: rg: {e}"),
            )
        })?;
        builder.overrides(overrides);
    }
    let mut matches = Vec::new();
    let mut stderr: Vec<String> = Vec::new();
    let mut raw_bytes: u64 = 0;
    for entry in builder.build() {
        if cancel.is_cancelled() {
            return Err(aborted("grep"));
        }
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                stderr.push(format!("rg: {e}"));
                continue;
            }
        };
        let explicit = entry.depth() == 0;
        let is_file = entry.file_type().is_some_and(|t| t.is_file());
        if !(is_file || (explicit && !entry.path().is_dir())) {
            continue;
        }
        if may_be_secret(entry.path(), explicit)
            && std::fs::canonicalize(entry.path())
                .is_ok_and(|real| dsh_sandbox::secrets::is_secret_path(&real))
        {
            if explicit {
                return Err(crate::paths::secret_refusal(
                    &entry.path().to_string_lossy(),
                ));
            }
            continue;
        }
        let shown = to_workdir_relative(
            &display_path(input.path.as_deref(), &root, entry.path()),
            workdir,
        );
        // Files found by walking stop at the first NUL; a file named explicitly is searched
        // with NULs treated as line breaks.
        let detection = if explicit {
            BinaryDetection::convert(b'\x00')
        } else {
            BinaryDetection::quit(b'\x00')
        };
        let mut searcher = SearcherBuilder::new()
            .line_number(true)
            .binary_detection(detection)
            .build();
        let before = raw_bytes;
        let sink = Collector {
            path: &shown,
            out: &mut matches,
            raw_bytes: &mut raw_bytes,
            cap: config.raw_output_max_bytes,
        };
        // Open first, then judge the opened file: a directory swapped for a link during the
        // walk cannot lead the search into the credentials.
        let file = match dsh_sandbox::secrets::open_for_read(entry.path()) {
            Ok(file) => file,
            Err(dsh_sandbox::secrets::OpenForRead::Secret) => {
                if explicit {
                    return Err(crate::paths::secret_refusal(
                        &entry.path().to_string_lossy(),
                    ));
                }
                continue;
            }
            Err(dsh_sandbox::secrets::OpenForRead::Io(e)) => {
                stderr.push(format!("rg: {shown}: {e}"));
                continue;
            }
        };
        if !file.metadata().is_ok_and(|m| m.is_file()) && !explicit {
            continue;
        }
        if let Err(e) = searcher.search_file(&matcher, &file, sink) {
            if raw_bytes > config.raw_output_max_bytes {
                return Err(raw_overflow("grep", config.raw_output_max_bytes));
            }
            stderr.push(format!("rg: {}: {e}", shown));
        }
        if raw_bytes > before {
            raw_bytes += 200 + 2 * shown.len() as u64;
        }
    }
    if !stderr.is_empty() {
        return Err(search_failed("grep", &stderr, config.stderr_max_bytes));
    }
    Ok(matches)
}

impl TypedTool for GrepTool {
    type Args = GrepArgs;
    type Value = GrepValue;

    fn name(&self) -> String {
        "grep".into()
    }

    fn description(&self) -> String {
        self.describe()
    }

    fn timeout_ms(&self) -> Option<u64> {
        Some(self.config.timeout_ms)
    }

    async fn run(
        self: Arc<Self>,
        input: GrepArgs,
        run: ToolRunContext,
    ) -> Result<Reply<GrepValue>, BoxError> {
        if input.pattern.is_empty() {
            return Err(errors::plain("pattern must be a non-empty string"));
        }
        if input.path.as_deref().is_some_and(|p| p.trim().is_empty()) {
            return Err(errors::plain("path must be a non-empty string when given"));
        }
        if let Some(include) = &input.include {
            validate_include(include)?;
        }
        if run.cancel.is_cancelled() {
            return Err(aborted("grep"));
        }
        let workdir = search_workdir(&run);
        let matches = {
            let (config, cancel) = (self.config.clone(), run.cancel.clone());
            blocking(move || search(&workdir, &input, &config, &cancel)).await?
        };
        let spill = if matches.len() > self.config.grep_max_matches {
            let previewed: Vec<GrepMatch> = matches
                .iter()
                .map(|m| GrepMatch {
                    line: preview_line(&m.line, self.config.grep_max_line_bytes),
                    ..m.clone()
                })
                .collect();
            let content = format!(
                "Found {} {}\n\n{}",
                matches.len(),
                noun(matches.len()),
                format_matches(&previewed)
            );
            try_spill(&run, "grep-results.txt", content).await
        } else {
            None
        };
        let text = render(&matches, &self.config, spill.as_ref());
        let meta = meta(&matches, &self.config);
        Ok(Reply::text(text)
            .with_meta(meta)
            .with_value(GrepValue { matches }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn include_must_be_one_positive_glob() {
        let err = |s: &str| validate_include(s).unwrap_err().to_string();
        assert_eq!(err(" "), "include must be a non-empty glob when given");
        assert_eq!(
            err("!*.rs"),
            "include selects files and cannot exclude them: drop the leading \"!\" and name the files to search"
        );
        assert_eq!(
            err("*.rs,*.ts"),
            "include takes a single glob, not a comma-separated list: write alternatives in braces, e.g. *.{a,b}"
        );
        assert!(validate_include("*.{rs,ts}").is_ok());
    }

    #[test]
    fn previews_cut_on_char_boundaries() {
        assert_eq!(preview_line("abcdef", 4), "abcd (line truncated)");
        assert_eq!(preview_line("aé", 2), "a (line truncated)");
        assert_eq!(preview_line("ab", 2), "ab");
    }
}
