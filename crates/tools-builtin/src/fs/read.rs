//! `read`: a bounded, line-numbered window of a UTF-8 text file.

use std::sync::Arc;

use dsh_kernel::BoxError;
use dsh_tools::{ObjectSchema, Reply, ToolRunContext, TypedTool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::FsBackend;
use super::events::{Observation, observed};
use super::io::{BINARY_SAMPLE_BYTES, Kind, blocking, io_error, probe};
use crate::errors;
use crate::guidance::PromptSection;
use crate::paths::{Target, fs_base, resolve_target};

/// Read limits (the `tool-fs` row config).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadLimits {
    /// Default and maximum lines per call.
    pub limit: u64,
    /// Longest line kept, in UTF-16 units (JavaScript string length).
    pub max_line_length: usize,
    /// Byte budget of the returned lines.
    pub max_bytes: usize,
}

impl Default for ReadLimits {
    fn default() -> Self {
        Self {
            limit: 2000,
            max_line_length: 2000,
            max_bytes: 50 * 1024,
        }
    }
}

/// The `read` tool.
#[derive(Clone)]
pub struct ReadTool {
    limits: ReadLimits,
    backend: Arc<FsBackend>,
}

// The arguments (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
pub struct ReadArgs {
    /// The file to read; relative paths start at the session workspace.
    file_path: String,
    /// Line number (1-based) to start reading at. Defaults to 1.
    offset: Option<f64>,
    /// How many lines to return at most (the default is set from the configured limit).
    limit: Option<f64>,
}

/// What a Code Mode binding of `read` resolves to (the result's meta, less `lang`).
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadValue {
    path: String,
    offset: u64,
    lines: Vec<ReadLine>,
    total_lines: u64,
}

#[derive(Serialize, JsonSchema)]
pub struct ReadLine {
    number: u64,
    text: String,
}

impl ReadTool {
    pub fn new(limits: ReadLimits, backend: Arc<FsBackend>) -> Self {
        Self { limits, backend }
    }

    /// The `tool:read` prompt section.
    pub fn prompt_section(&self) -> PromptSection {
        PromptSection::new(
            "tool:read",
            100,
            "To look at a text file, call read instead of running cat or similar shell commands. Lines come back numbered; page through a large file with offset and limit.",
        )
    }
}

fn positive_integer(value: Option<f64>, name: &str) -> Result<Option<u64>, BoxError> {
    match value {
        None => Ok(None),
        Some(v) if v.is_finite() && v.fract() == 0.0 && v >= 1.0 => Ok(Some(v as u64)),
        Some(_) => Err(errors::plain(format!("{name} must be a positive integer"))),
    }
}

impl TypedTool for ReadTool {
    type Args = ReadArgs;
    type Value = ReadValue;

    fn name(&self) -> String {
        "read".into()
    }

    fn description(&self) -> String {
        "Returns lines of a UTF-8 text file, each prefixed by its line number.".into()
    }

    fn tune(&self, params: &mut ObjectSchema) {
        params.describe_property(
            "limit",
            &format!(
                "How many lines to return at most. Defaults to {}.",
                self.limits.limit
            ),
        );
    }

    fn concurrency_safe(&self) -> bool {
        true
    }

    async fn run(
        self: Arc<Self>,
        args: ReadArgs,
        run: ToolRunContext,
    ) -> Result<Reply<ReadValue>, BoxError> {
        let file_path = args.file_path;
        if file_path.trim().is_empty() {
            return Err(errors::plain("file_path must be a non-empty string"));
        }
        let offset = positive_integer(args.offset, "offset")?.unwrap_or(1);
        let limit = positive_integer(args.limit, "limit")?.unwrap_or(self.limits.limit);
        if limit > self.limits.limit {
            return Err(errors::plain(format!(
                "limit must be less than or equal to {}",
                self.limits.limit
            )));
        }
        let base = fs_base(&run, &file_path, &self.backend.cwd);
        let target = resolve_target(&base, &file_path)?;
        let display = target.display.clone();
        let info = {
            let key = target.key.clone();
            blocking(move || probe(&key)).await?
        };
        let Some(info) = info else {
            observed(&run.ctx, &target, Observation::Absent, run.session.as_ref());
            return Err(errors::fs(
                "FS_NOT_FOUND",
                format!("cannot read \"{display}\": not found"),
            ));
        };
        if info.kind != Kind::File {
            return Err(errors::fs(
                "FS_NOT_REGULAR_FILE",
                format!("cannot read \"{display}\": not a regular file"),
            ));
        }
        let window = WindowRequest {
            offset,
            limit,
            limits: self.limits,
        };
        let result = match dsh_tools::client_files(&run).filter(|c| c.reads()) {
            // The editor's text of the file (an unsaved buffer included).
            Some(client) => {
                let text = client
                    .read_text(&target.key)
                    .await
                    .map_err(|e| super::io::client_error("read", &display, &e))?;
                let target = target.clone();
                blocking(move || {
                    read_window_from(
                        &mut std::io::Cursor::new(text.into_bytes()),
                        &target,
                        &window,
                    )
                })
                .await?
            }
            None => {
                let target = target.clone();
                blocking(move || read_window(&target, &window)).await?
            }
        };
        if run.cancel.is_cancelled() {
            return Err(errors::fs("FS_ABORTED", "read aborted"));
        }
        let text = format_read_output(&display, offset, &result);
        let value = ReadValue {
            path: display.clone(),
            offset,
            lines: result
                .lines
                .iter()
                .map(|(number, text)| ReadLine {
                    number: *number,
                    text: text.clone(),
                })
                .collect(),
            total_lines: result.total_lines,
        };
        let mut meta = serde_json::to_value(&value)?;
        if let (Some(m), Some(lang)) = (meta.as_object_mut(), lang_from_path(&display)) {
            m.insert("lang".into(), Value::from(lang));
        }
        observed(
            &run.ctx,
            &target,
            Observation::Present {
                version: info.version,
            },
            run.session.as_ref(),
        );
        Ok(Reply::text(text).with_meta(meta).with_value(value))
    }
}

#[derive(Clone, Copy)]
struct WindowRequest {
    offset: u64,
    limit: u64,
    limits: ReadLimits,
}

/// The selected lines and the exact total.
#[derive(Debug, Default, PartialEq)]
struct WindowResult {
    lines: Vec<(u64, String)>,
    total_lines: u64,
    truncated_by_bytes: bool,
}

/// Scans the whole file (for an exact total) while keeping only the window; a line is held
/// only up to one unit past the truncation point, so one giant line cannot grow memory.
struct LineScanner {
    request: WindowRequest,
    acc: WindowResult,
    output_bytes: usize,
    line: String,
    line_units: usize,
}

impl LineScanner {
    fn feed(&mut self, mut text: &str) {
        while let Some(i) = text.find('\n') {
            self.append(&text[..i]);
            self.flush();
            text = &text[i + 1..];
        }
        self.append(text);
    }

    fn append(&mut self, segment: &str) {
        let cap = self.request.limits.max_line_length + 1;
        for ch in segment.chars() {
            if self.line_units >= cap {
                break;
            }
            self.line.push(ch);
            self.line_units += ch.len_utf16();
        }
    }

    fn flush(&mut self) {
        let mut line = std::mem::take(&mut self.line);
        self.line_units = 0;
        if line.ends_with('\r') {
            line.pop();
        }
        self.consume(line);
    }

    fn consume(&mut self, raw: String) {
        let acc = &mut self.acc;
        acc.total_lines += 1;
        let r = &self.request;
        if acc.truncated_by_bytes || acc.total_lines < r.offset || acc.lines.len() as u64 >= r.limit
        {
            return;
        }
        let text = truncate_line(raw, r.limits.max_line_length);
        let bytes = text.len() + usize::from(!acc.lines.is_empty());
        if self.output_bytes + bytes > r.limits.max_bytes {
            acc.truncated_by_bytes = true;
            return;
        }
        self.output_bytes += bytes;
        acc.lines.push((acc.total_lines, text));
    }

    fn finish(mut self, display: &str) -> Result<WindowResult, BoxError> {
        if !self.line.is_empty() {
            self.flush();
        }
        let acc = self.acc;
        let offset = self.request.offset;
        if !acc.truncated_by_bytes
            && offset > acc.total_lines
            && !(acc.total_lines == 0 && offset == 1)
        {
            return Err(errors::fs(
                "FS_NOT_FOUND",
                format!(
                    "offset {offset} is out of range for \"{display}\" ({} lines)",
                    acc.total_lines
                ),
            ));
        }
        Ok(acc)
    }
}

fn truncate_line(line: String, max_units: usize) -> String {
    let mut units = 0;
    for (i, ch) in line.char_indices() {
        if units + ch.len_utf16() > max_units {
            return format!("{}... (line truncated to {max_units} chars)", &line[..i]);
        }
        units += ch.len_utf16();
    }
    line
}

/// Streams the file in chunks: NUL in the leading sample → binary; fatal UTF-8 decoding
/// across chunk boundaries; a leading BOM is dropped.
fn read_window(target: &Target, request: &WindowRequest) -> Result<WindowResult, BoxError> {
    let mut file = super::io::open_checked(target)?;
    read_window_from(&mut file, target, request)
}

/// [`read_window`] over any source (the file, or the text a client route returned).
fn read_window_from(
    file: &mut dyn std::io::Read,
    target: &Target,
    request: &WindowRequest,
) -> Result<WindowResult, BoxError> {
    let display = &target.display;
    let mut scanner = LineScanner {
        request: *request,
        acc: WindowResult::default(),
        output_bytes: 0,
        line: String::new(),
        line_units: 0,
    };
    let not_text = || {
        errors::fs(
            "FS_NOT_TEXT",
            format!("cannot read \"{display}\": invalid UTF-8 text"),
        )
    };
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    let mut sampled = 0usize;
    let mut first = true;
    loop {
        let n = fill(file, &mut buf).map_err(|e| io_error(&e, "read", &target.key))?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        if sampled < BINARY_SAMPLE_BYTES {
            let take = n.min(BINARY_SAMPLE_BYTES - sampled);
            if chunk[..take].contains(&0) {
                return Err(errors::fs(
                    "FS_NOT_TEXT",
                    format!("cannot read \"{display}\": binary file"),
                ));
            }
            sampled += take;
        }
        pending.extend_from_slice(chunk);
        let valid = match std::str::from_utf8(&pending) {
            Ok(_) => pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => return Err(not_text()),
        };
        let rest = pending.split_off(valid);
        let mut text = std::str::from_utf8(&pending).map_err(|_| not_text())?;
        if first && !text.is_empty() {
            text = text.strip_prefix('\u{feff}').unwrap_or(text);
            first = false;
        }
        scanner.feed(text);
        pending = rest;
    }
    if !pending.is_empty() {
        return Err(not_text());
    }
    scanner.finish(display)
}

/// Reads until `buf` is full or the file ends.
fn fill(file: &mut dyn std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

fn format_read_output(display: &str, offset: u64, window: &WindowResult) -> String {
    let end = window
        .lines
        .last()
        .map(|(n, _)| *n)
        .unwrap_or(offset.saturating_sub(1));
    let footer = if window.truncated_by_bytes {
        format!(
            "(Output capped. Showing lines {offset}-{end}. Use offset={} to continue.)",
            end + 1
        )
    } else if end < window.total_lines {
        format!(
            "(Showing lines {offset}-{end} of {}. Use offset={} to continue.)",
            window.total_lines,
            end + 1
        )
    } else {
        format!("(End of file - total {} lines)", window.total_lines)
    };
    let body = if window.lines.is_empty() {
        footer
    } else {
        let rows: Vec<String> = window
            .lines
            .iter()
            .map(|(n, t)| format!("{n}: {t}"))
            .collect();
        format!("{}\n\n{footer}", rows.join("\n"))
    };
    format!("<path>{display}</path>\n<type>file</type>\n<content>\n{body}\n</content>")
}

/// A syntax-highlighting hint from the file extension (none for dotfiles and unknown ones).
fn lang_from_path(path: &str) -> Option<&'static str> {
    let base = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let dot = base.rfind('.').filter(|d| *d > 0)?;
    let ext = base[dot + 1..].to_ascii_lowercase();
    Some(match ext.as_str() {
        "ts" | "mts" | "cts" => "ts",
        "tsx" => "tsx",
        "js" | "mjs" | "cjs" => "js",
        "jsx" => "jsx",
        "json" | "jsonc" => "json",
        "py" => "py",
        "rb" => "rb",
        "go" => "go",
        "rs" => "rs",
        "java" => "java",
        "c" | "h" => "c",
        "cc" | "cpp" | "hpp" | "cxx" => "cpp",
        "cs" => "cs",
        "kt" => "kotlin",
        "swift" => "swift",
        "php" => "php",
        "sh" | "bash" | "zsh" => "sh",
        "yaml" | "yml" => "yaml",
        "toml" => "toml",
        "ini" => "ini",
        "md" | "markdown" => "md",
        "mdx" => "mdx",
        "html" | "htm" => "html",
        "css" => "css",
        "scss" => "scss",
        "less" => "less",
        "sql" => "sql",
        "xml" => "xml",
        "lua" => "lua",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn scan(
        text: &str,
        offset: u64,
        limit: u64,
        limits: ReadLimits,
    ) -> Result<WindowResult, String> {
        let mut s = LineScanner {
            request: WindowRequest {
                offset,
                limit,
                limits,
            },
            acc: WindowResult::default(),
            output_bytes: 0,
            line: String::new(),
            line_units: 0,
        };
        for chunk in text.as_bytes().chunks(3) {
            s.feed(std::str::from_utf8(chunk).unwrap_or(""));
        }
        s.finish("/f").map_err(|e| e.to_string())
    }

    #[test]
    fn windows_count_lines_like_upstream() {
        let l = ReadLimits::default();
        assert_eq!(scan("hello\n", 1, 10, l).unwrap().total_lines, 1);
        assert_eq!(
            scan("a\r\nb\n\n", 1, 10, l).unwrap().lines,
            vec![(1, "a".into()), (2, "b".into()), (3, String::new())]
        );
        assert_eq!(scan("", 1, 10, l).unwrap(), WindowResult::default());
        assert_eq!(
            scan("a\nb\n", 3, 10, l).unwrap_err(),
            "offset 3 is out of range for \"/f\" (2 lines)"
        );
        let tight = ReadLimits {
            limit: 10,
            max_line_length: 3,
            max_bytes: 38,
        };
        let w = scan("abcdef\nxy\nzz\n", 1, 10, tight).unwrap();
        assert_eq!(
            w.lines,
            vec![
                (1, "abc... (line truncated to 3 chars)".into()),
                (2, "xy".into())
            ]
        );
        assert!(w.truncated_by_bytes);
        assert_eq!(w.total_lines, 3);
    }

    #[test]
    fn footers_follow_the_window() {
        let w = WindowResult {
            lines: vec![(2, "b".into())],
            total_lines: 3,
            truncated_by_bytes: false,
        };
        assert_eq!(
            format_read_output("/f", 2, &w),
            "<path>/f</path>\n<type>file</type>\n<content>\n2: b\n\n(Showing lines 2-2 of 3. Use offset=3 to continue.)\n</content>"
        );
        let empty = WindowResult::default();
        assert_eq!(
            format_read_output("/f", 1, &empty),
            "<path>/f</path>\n<type>file</type>\n<content>\n(End of file - total 0 lines)\n</content>"
        );
        assert_eq!(lang_from_path("/a/b.RS"), Some("rs"));
        assert_eq!(lang_from_path("/a/.gitignore"), None);
        assert_eq!(lang_from_path("/a/notes.txt"), None);
    }
}
