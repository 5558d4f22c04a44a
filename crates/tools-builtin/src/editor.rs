//! `str_replace_editor`: view / create / str_replace / insert over absolute paths, in the
//! shape of the Anthropic editor tool, sharing the fs backend, fence and observations.

use std::path::Path;
use std::sync::Arc;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_tools::{Reply, ToolRegistry, ToolRunContext, Typed, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::errors::{self, js_number};
use crate::fs::io::{
    Kind, LineWindow, Probe, blocking, probe, read_line_window, read_whole_text, write_text,
};
use crate::fs::{
    DenialText, FsBackend, Observation, WriteIntent, edit_intent, observed, remediate, write_intent,
};
use crate::paths::{Target, resolve_target};
use crate::sandbox::ExecutionPolicy;

const CLIPPED: &str = "<response clipped><NOTE>The output was cut here to save context. Find what you need first (`grep -n` gives line numbers), then view a smaller part: a `view_range` of the file, or a subdirectory.</NOTE>";

const DEFAULT_DESCRIPTION: &str = "File editor working on absolute paths, with four commands.
* `view`: a file is shown with numbered lines (like `cat -n`), optionally only a `view_range`; a directory is listed two levels deep without hidden entries
* `create`: writes a new file from `file_text`; it fails if the path is already taken
* `str_replace`: swaps `old_str` for `new_str`; `old_str` must match the file exactly (whitespace too) and occur only once, so include enough neighbouring lines to make it unique
* `insert`: puts `new_str` after line `insert_line` (0 = top of the file)
* Edits are real file changes and persist; very long output is cut short and marked `<response clipped>`";

/// Config of `@deepseek-ai/dsh-tool-str-replace-editor`.
#[derive(Clone, Debug, PartialEq)]
pub struct EditorConfig {
    /// View output is clipped past this many characters (UTF-16 units).
    pub max_output_chars: usize,
    pub description: String,
}

impl Default for EditorConfig {
    fn default() -> Self {
        Self {
            max_output_chars: 16_000,
            description: DEFAULT_DESCRIPTION.into(),
        }
    }
}

/// The `str_replace_editor` tool.
#[derive(Clone)]
pub struct StrReplaceEditorTool {
    inner: Arc<Inner>,
}

struct Inner {
    config: EditorConfig,
    backend: Arc<FsBackend>,
}

// The arguments (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
pub struct EditorArgs {
    /// What to do: `view`, `create`, `str_replace` or `insert`.
    command: EditorCommand,
    /// Absolute path of the file or directory, such as `/repo/main.py` or `/repo`.
    path: String,
    /// For `create` (required): the full contents of the new file.
    file_text: Option<String>,
    /// For `insert` (required): `new_str` goes in after this line of `path` (0 puts it at the top).
    #[schemars(with = "Option<i64>")]
    insert_line: Option<f64>,
    /// For `str_replace` (optional, defaults to nothing): the replacement text. For `insert` (required): the text to insert.
    new_str: Option<String>,
    /// For `str_replace` (required): the exact text in `path` to replace.
    old_str: Option<String>,
    /// For `view` of a file (optional): the 1-based line range to show, e.g. [11, 12] for lines 11 and 12; `[start, -1]` shows from `start` to the end. Without it the whole file is shown.
    #[schemars(with = "Option<Vec<i64>>")]
    view_range: Option<Vec<f64>>,
}

#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EditorCommand {
    View,
    Create,
    StrReplace,
    Insert,
}

impl StrReplaceEditorTool {
    pub fn new(config: EditorConfig, backend: Arc<FsBackend>) -> Self {
        Self {
            inner: Arc::new(Inner { config, backend }),
        }
    }
}

/// Clips past `max` UTF-16 units, marking the cut.
fn maybe_truncate(content: String, max: usize) -> String {
    let mut units = 0;
    for (i, ch) in content.char_indices() {
        if units + ch.len_utf16() > max {
            return format!("{}{CLIPPED}", &content[..i]);
        }
        units += ch.len_utf16();
    }
    content
}

fn required<'a>(
    value: Option<&'a str>,
    parameter: &str,
    command: &str,
) -> Result<&'a str, BoxError> {
    value.ok_or_else(|| {
        errors::plain(format!(
            "Parameter `{parameter}` is required for command: {command}"
        ))
    })
}

impl Inner {
    fn policy(&self, run: &ToolRunContext) -> Option<ExecutionPolicy> {
        self.backend
            .sandbox
            .as_ref()
            .map(|p| p.resolve(run.session.as_deref()))
    }

    fn target(path: &str) -> Result<Target, BoxError> {
        if path.trim().is_empty() {
            return Err(errors::plain("path must be a non-empty string"));
        }
        if !Path::new(path).is_absolute() {
            return Err(errors::plain(format!(
                "The path {path} is relative, but str_replace_editor needs an absolute path starting with `/` (did you mean /{path}?)"
            )));
        }
        resolve_target(Path::new("/"), path)
    }

    async fn stat(target: &Target) -> Result<Option<Probe>, BoxError> {
        let key = target.key.clone();
        blocking(move || probe(&key)).await
    }

    /// The target must exist; only `view` may name a directory.
    async fn stat_existing(
        target: &Target,
        command: &str,
        run: &ToolRunContext,
    ) -> Result<Probe, BoxError> {
        let Some(info) = Self::stat(target).await? else {
            observed(&run.ctx, target, Observation::Absent, run.session.as_ref());
            return Err(errors::fs(
                "FS_NOT_FOUND",
                format!(
                    "The path {} does not exist. Please provide a valid path.",
                    target.display
                ),
            ));
        };
        if info.kind == Kind::Directory && command != "view" {
            return Err(errors::fs(
                "FS_NOT_REGULAR_FILE",
                format!(
                    "The path {} is a directory; directories can only be shown with `view`, so pass a file path for this command",
                    target.display
                ),
            ));
        }
        Ok(info)
    }

    async fn read(target: &Target) -> Result<String, BoxError> {
        let target = target.clone();
        blocking(move || read_whole_text(&target)).await
    }

    async fn run(&self, args: EditorArgs, run: ToolRunContext) -> Result<String, BoxError> {
        let path = args.path.as_str();
        match args.command {
            EditorCommand::View => {
                // Whole numbers only, as JSON integers were.
                let range = args.view_range.as_ref().map(|items| {
                    items
                        .iter()
                        .filter(|n| n.fract() == 0.0)
                        .map(|n| *n as i64)
                        .collect::<Vec<i64>>()
                });
                self.view(path, range, &run).await
            }
            EditorCommand::Create => self.create(path, &args, &run).await,
            EditorCommand::StrReplace => self.str_replace(path, &args, &run).await,
            EditorCommand::Insert => self.insert(path, &args, &run).await,
        }
    }

    async fn create(
        &self,
        path: &str,
        args: &EditorArgs,
        run: &ToolRunContext,
    ) -> Result<String, BoxError> {
        let content = required(args.file_text.as_deref(), "file_text", "create")?.to_string();
        let policy = self.policy(run);
        let target = Self::target(path)?;
        if Self::stat(&target).await?.is_some() {
            return Err(errors::plain(format!(
                "File already exists at: {}. Cannot overwrite files using command `create`.",
                target.display
            )));
        }
        let request = crate::fs::IntentRequest {
            target: target.clone(),
            session: run.session.clone(),
        };
        let intent = write_intent(&run.ctx, &request)
            .await?
            .unwrap_or(WriteIntent::CreateIfAbsent);
        let outcome = write_text(
            &target,
            content,
            Some(intent),
            policy.as_ref(),
            0,
            dsh_tools::client_files(run),
        )
        .await
        .map_err(|e| remediate(e, policy.as_ref(), DenialText::Marker))?;
        observed(
            &run.ctx,
            &target,
            Observation::Present {
                version: outcome.version,
            },
            run.session.as_ref(),
        );
        Ok(format!(
            "New file created successfully at: {}",
            target.display
        ))
    }

    /// The policy, target and edit intent of a command that changes an existing file.
    async fn edit_target(
        &self,
        path: &str,
        run: &ToolRunContext,
    ) -> Result<(Option<ExecutionPolicy>, Target, Option<String>), BoxError> {
        let policy = self.policy(run);
        let target = Self::target(path)?;
        let request = crate::fs::IntentRequest {
            target: target.clone(),
            session: run.session.clone(),
        };
        let intent = edit_intent(&run.ctx, &request).await?;
        Ok((policy, target, intent))
    }

    async fn str_replace(
        &self,
        path: &str,
        args: &EditorArgs,
        run: &ToolRunContext,
    ) -> Result<String, BoxError> {
        let (policy, target, intent) = self.edit_target(path, run).await?;
        let old = required(args.old_str.as_deref(), "old_str", "str_replace")?;
        if old.is_empty() {
            return Err(errors::plain(
                "Parameter `old_str` is empty for command: str_replace",
            ));
        }
        let new = args.new_str.as_deref().unwrap_or_default();
        let info = Self::stat_existing(&target, "str_replace", run).await?;
        if info.kind != Kind::File {
            return Err(errors::fs(
                "FS_NOT_REGULAR_FILE",
                format!("cannot edit \"{}\": not a regular file", target.display),
            ));
        }
        let before = Self::read(&target).await?;
        let offsets: Vec<usize> = before.match_indices(old).map(|(i, _)| i).collect();
        let Some(&offset) = offsets.first() else {
            return Err(errors::fs(
                "FS_EDIT_NOT_FOUND",
                format!(
                    "No replacement was performed, old_str `{old}` did not appear verbatim in {}.",
                    target.display
                ),
            ));
        };
        if offsets.len() > 1 {
            let lines: Vec<String> = offsets
                .iter()
                .map(|o| (before[..*o].matches('\n').count() + 1).to_string())
                .collect();
            return Err(errors::fs(
                "FS_AMBIGUOUS_EDIT",
                format!(
                    "No replacement was performed. Multiple occurrences of old_str `{old}` in lines [{}]. Please ensure it is unique",
                    lines.join(", ")
                ),
            ));
        }
        let after = format!(
            "{}{new}{}",
            &before[..offset],
            &before[offset + old.len()..]
        );
        self.write_back(
            &target,
            after,
            intent.unwrap_or(info.version),
            policy.as_ref(),
            run,
        )
        .await
    }

    async fn insert(
        &self,
        path: &str,
        args: &EditorArgs,
        run: &ToolRunContext,
    ) -> Result<String, BoxError> {
        let Some(insert_line) = args.insert_line else {
            return Err(errors::plain(
                "Parameter `insert_line` is required for command: insert",
            ));
        };
        let value = required(args.new_str.as_deref(), "new_str", "insert")?;
        let (policy, target, intent) = self.edit_target(path, run).await?;
        let info = Self::stat_existing(&target, "insert", run).await?;
        if info.kind != Kind::File {
            return Err(errors::fs(
                "FS_NOT_REGULAR_FILE",
                format!(
                    "cannot insert into \"{}\": not a regular file",
                    target.display
                ),
            ));
        }
        let before = Self::read(&target).await?;
        let lines: Vec<&str> = before.split('\n').collect();
        if insert_line.fract() != 0.0 || insert_line < 0.0 || insert_line > lines.len() as f64 {
            return Err(errors::plain(format!(
                "Invalid `insert_line` parameter: {}. Use a line number from 0 to {} (0 inserts before the first line)",
                js_number(insert_line),
                lines.len()
            )));
        }
        let at = insert_line as usize;
        let mut out: Vec<&str> = lines[..at].to_vec();
        out.extend(value.split('\n'));
        out.extend_from_slice(&lines[at..]);
        self.write_back(
            &target,
            out.join("\n"),
            intent.unwrap_or(info.version),
            policy.as_ref(),
            run,
        )
        .await
    }

    async fn write_back(
        &self,
        target: &Target,
        content: String,
        version: String,
        policy: Option<&ExecutionPolicy>,
        run: &ToolRunContext,
    ) -> Result<String, BoxError> {
        let outcome = write_text(
            target,
            content,
            Some(WriteIntent::ReplaceIfVersion(version)),
            policy,
            0,
            dsh_tools::client_files(run),
        )
        .await
        .map_err(|e| remediate(e, policy, DenialText::Marker))?;
        observed(
            &run.ctx,
            target,
            Observation::Present {
                version: outcome.version,
            },
            run.session.as_ref(),
        );
        Ok(format!(
            "The file {} has been edited successfully.",
            target.display
        ))
    }

    async fn view(
        &self,
        path: &str,
        range: Option<Vec<i64>>,
        run: &ToolRunContext,
    ) -> Result<String, BoxError> {
        let target = Self::target(path)?;
        let info = Self::stat_existing(&target, "view", run).await?;
        match info.kind {
            Kind::Directory => {
                if range.is_some() {
                    return Err(errors::plain(
                        "`view_range` works on files only, and `path` is a directory; view the directory without `view_range`.",
                    ));
                }
                let max = self.config.max_output_chars;
                let t = target.clone();
                blocking(move || Ok(list_directory(&t, max))).await
            }
            Kind::Other => Err(errors::fs(
                "FS_NOT_REGULAR_FILE",
                format!(
                    "cannot view \"{}\": not a regular file or directory",
                    target.display
                ),
            )),
            Kind::File => {
                let first = match range.as_deref() {
                    Some([initial, _]) if *initial >= 1 => *initial as usize,
                    _ => 1,
                };
                let budget = self.config.max_output_chars.saturating_mul(4) + 64;
                let t = target.clone();
                let window = blocking(move || read_line_window(&t, first, budget)).await?;
                observed(
                    &run.ctx,
                    &target,
                    Observation::Present {
                        version: info.version,
                    },
                    run.session.as_ref(),
                );
                format_file_view(
                    &target.display,
                    &window,
                    first,
                    self.config.max_output_chars,
                    range.as_deref(),
                )
            }
        }
    }
}

/// Formats a view from the streamed window (lines `first..` of a file of `window.total`
/// lines, kept while they could still be shown).
fn format_file_view(
    path: &str,
    window: &LineWindow,
    first: usize,
    max: usize,
    range: Option<&[i64]>,
) -> Result<String, BoxError> {
    let kept: Vec<&str> = window.lines.iter().map(String::as_str).collect();
    let n = window.total as i64;
    // The SDK scenario `persistent-tools` records this heading byte for byte.
    let mut prompt = format!(
        "Here's the content of {} with line numbers (which has a total of {n} lines)",
        path
    );
    let (lines, first) = match range {
        None => (&kept[..], first as i64),
        Some(r) => {
            let [initial, last] = r else {
                return Err(errors::plain(
                    "Invalid `view_range`. It should be a list of two integers.",
                ));
            };
            let (initial, last) = (*initial, *last);
            let shown = format!("[{initial}, {last}]");
            if initial < 1 || initial > n {
                return Err(errors::plain(format!(
                    "Invalid `view_range`: {shown}. The first line must be from 1 to {n}"
                )));
            }
            if last > n {
                return Err(errors::plain(format!(
                    "Invalid `view_range`: {shown}. The last line must be at most {n}, the length of the file (or -1 for the end)"
                )));
            }
            if last != -1 && last < initial {
                return Err(errors::plain(format!(
                    "Invalid `view_range`: {shown}. The last line must not come before the first (or -1 for the end)"
                )));
            }
            prompt.push_str(&format!(" with view_range={shown}"));
            // `kept` starts at line `initial`; lines past the output budget were not kept.
            let wanted = if last == -1 {
                kept.len()
            } else {
                ((last - initial + 1) as usize).min(kept.len())
            };
            (&kept[..wanted], initial)
        }
    };
    let rows: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, line)| format!("{:>6}  {line}", first + i as i64))
        .collect();
    Ok(maybe_truncate(
        format!("{prompt}:\n{}\n", rows.join("\n")),
        max,
    ))
}

fn list_directory(target: &Target, max: usize) -> String {
    fn visit(dir_key: &Path, dir_display: &str, depth: u32, rows: &mut Vec<(String, char)>) {
        let Ok(entries) = std::fs::read_dir(dir_key) else {
            return;
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            if name.starts_with('.') || name == "node_modules" || name == "__pycache__" {
                continue;
            }
            let key = dir_key.join(&name);
            let display = format!("{}/{name}", dir_display.trim_end_matches('/'));
            let kind = match std::fs::metadata(&key) {
                Ok(m) if m.is_dir() => 'd',
                Ok(m) if m.is_file() => 'f',
                _ => '?',
            };
            rows.push((display.clone(), kind));
            if kind == 'd' && depth < 2 {
                visit(&key, &display, depth + 1, rows);
            }
        }
    }
    let mut rows = vec![(target.display.clone(), 'd')];
    visit(&target.key, &target.display, 1, &mut rows);
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let listing: String = rows.iter().map(|(p, k)| format!("{k}\t{p}\n")).collect();
    format!(
        "Contents of {}, two levels deep, without hidden entries, node_modules or __pycache__ (d = directory, f = file, ? = other):\n{}\n",
        target.display,
        maybe_truncate(listing, max)
    )
}

impl TypedTool for StrReplaceEditorTool {
    type Args = EditorArgs;
    /// The result text itself.
    type Value = String;

    fn name(&self) -> String {
        "str_replace_editor".into()
    }

    fn description(&self) -> String {
        self.inner.config.description.clone()
    }

    async fn run(
        self: Arc<Self>,
        args: EditorArgs,
        ctx: ToolRunContext,
    ) -> Result<Reply<String>, BoxError> {
        let text = self.inner.run(args, ctx).await?;
        Ok(Reply::text(text.clone()).with_value(text))
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct EditorConfigRow {
    max_output_chars: Option<f64>,
    description: Option<String>,
}

/// `@deepseek-ai/dsh-tool-str-replace-editor` (config `{maxOutputChars?, description?}`).
pub struct ToolStrReplaceEditorPlugin;

impl Plugin for ToolStrReplaceEditorPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-str-replace-editor"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: EditorConfigRow = config.parse()?;
        let d = EditorConfig::default();
        let max_output_chars = match row.max_output_chars {
            None => d.max_output_chars,
            Some(v)
                if v.is_finite() && v.fract() == 0.0 && v > 0.0 && v <= 9_007_199_254_740_991.0 =>
            {
                v as usize
            }
            Some(_) => {
                return Err(errors::plain(
                    "tool-str-replace-editor: maxOutputChars must be a positive safe integer",
                ));
            }
        };
        let description = row.description.unwrap_or(d.description);
        if description.trim().is_empty() {
            return Err(errors::plain(
                "tool-str-replace-editor: description must be non-empty",
            ));
        }
        let backend = ctx.require::<FsBackend>()?;
        let tool = StrReplaceEditorTool::new(
            EditorConfig {
                max_output_chars,
                description,
            },
            backend,
        );
        ctx.require::<ToolRegistry>()?
            .register(ctx, Arc::new(Typed::new(tool)?))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// The window `read_line_window` would keep of `text` from line `first` on.
    fn window(text: &str, first: usize) -> LineWindow {
        let all: Vec<&str> = text.split('\n').collect();
        LineWindow {
            total: all.len(),
            lines: all[first - 1..].iter().map(|l| l.to_string()).collect(),
        }
    }

    fn view(text: &str, max: usize, range: Option<&[i64]>) -> Result<String, BoxError> {
        let first = match range {
            Some([initial, _])
                if *initial >= 1 && (*initial as usize) <= text.split('\n').count() =>
            {
                *initial as usize
            }
            _ => 1,
        };
        format_file_view("/f", &window(text, first), first, max, range)
    }

    #[test]
    fn file_view_numbers_lines_and_clips() {
        assert_eq!(
            view("a\nb\n", 16_000, None).unwrap(),
            "Here's the content of /f with line numbers (which has a total of 3 lines):\n     1  a\n     2  b\n     3  \n"
        );
        assert_eq!(
            view("a\nb\nc", 16_000, Some(&[2, -1])).unwrap(),
            "Here's the content of /f with line numbers (which has a total of 3 lines) with view_range=[2, -1]:\n     2  b\n     3  c\n"
        );
        let err = |r: &[i64]| view("a\nb", 100, Some(r)).unwrap_err().to_string();
        assert_eq!(
            err(&[0, 1]),
            "Invalid `view_range`: [0, 1]. The first line must be from 1 to 2"
        );
        assert_eq!(
            err(&[1, 3]),
            "Invalid `view_range`: [1, 3]. The last line must be at most 2, the length of the file (or -1 for the end)"
        );
        assert_eq!(
            err(&[2, 1]),
            "Invalid `view_range`: [2, 1]. The last line must not come before the first (or -1 for the end)"
        );
        assert_eq!(
            err(&[1]),
            "Invalid `view_range`. It should be a list of two integers."
        );
        assert_eq!(maybe_truncate("abcdef".into(), 3), format!("abc{CLIPPED}"));
    }
}
