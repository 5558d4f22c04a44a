//! Where a session's log lives: `<root>/<project dir>/<escaped id>/session.jsonl[.zstd]`.
//!
//! Both escapes work on UTF-16 code units (not code points) so that paths match the ones
//! upstream computes for the same strings: every unit outside `[A-Za-z0-9._-]` becomes
//! `~` followed by four uppercase hex digits.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::error::PersistenceError;

/// The directory of sessions that have no working directory.
pub const NO_CWD_DIR: &str = "_no-cwd";

/// The file name every session log has (plus the compression suffix).
pub const LOG_STEM: &str = "session";

/// Longest project slug, in UTF-16 units, so `--<slug>--` fits a 255-byte name.
const MAX_SLUG_UNITS: usize = 251;

/// The physical encoding of the logs under one root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    /// `session.jsonl.zstd`: one checksummed Zstandard frame for the header line, then one
    /// frame per durable batch.
    Zstd,
    /// `session.jsonl`: plain JSON lines.
    None,
}

impl Compression {
    /// The file-name suffix after `session`.
    pub fn suffix(self) -> &'static str {
        match self {
            Compression::Zstd => ".jsonl.zstd",
            Compression::None => ".jsonl",
        }
    }

    /// The config spelling (`"zstd"` / `"none"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::Zstd => "zstd",
            Compression::None => "none",
        }
    }

    /// The other encoding (whose artifacts a root of this encoding must not hold).
    pub fn opposite(self) -> Self {
        match self {
            Compression::Zstd => Compression::None,
            Compression::None => Compression::Zstd,
        }
    }

    /// The log file name (`session.jsonl` or `session.jsonl.zstd`).
    pub fn file_name(self) -> String {
        format!("{LOG_STEM}{}", self.suffix())
    }
}

fn is_safe_unit(unit: u16) -> bool {
    matches!(unit, 0x30..=0x39 | 0x41..=0x5A | 0x61..=0x7A | 0x2E | 0x5F | 0x2D)
}

fn push_escape(out: &mut String, unit: u16) {
    let _ = write!(out, "~{unit:04X}");
}

/// Encodes a session id as one safe path segment (injective over all strings).
/// `.` and `..` are escaped whole so no id can name a parent directory.
pub fn encode_segment(id: &str) -> Result<String, PersistenceError> {
    match id {
        "" => {
            return Err(PersistenceError::InvalidPath(
                "cannot encode an empty path segment".into(),
            ));
        }
        "." => return Ok("~002E".into()),
        ".." => return Ok("~002E~002E".into()),
        _ => {}
    }
    let mut out = String::with_capacity(id.len());
    for unit in id.encode_utf16() {
        if is_safe_unit(unit) {
            out.push(char::from(unit as u8));
        } else {
            push_escape(&mut out, unit);
        }
    }
    Ok(out)
}

/// The readable directory key of a project path: separators (`/`, `\`, `:`) collapse to
/// one `-` per run, unsafe units are escaped, leading dashes are stripped, and the slug is
/// cut to 251 units. Lossy by design (`/a/b-c` and `/a-b/c` share a directory).
pub fn project_key(cwd: &str) -> Result<String, PersistenceError> {
    if cwd.is_empty() {
        return Err(PersistenceError::InvalidPath(
            "cannot encode an empty project path".into(),
        ));
    }
    let mut readable = String::with_capacity(cwd.len());
    let mut in_separator_run = false;
    for unit in cwd.encode_utf16() {
        if matches!(unit, 0x2F | 0x5C | 0x3A) {
            if !in_separator_run {
                readable.push('-');
            }
            in_separator_run = true;
        } else {
            if is_safe_unit(unit) {
                readable.push(char::from(unit as u8));
            } else {
                push_escape(&mut readable, unit);
            }
            in_separator_run = false;
        }
    }
    let slug = readable.trim_start_matches('-');
    let slug = if slug.is_empty() { "root" } else { slug };
    // Every char of the slug is ASCII, so byte and UTF-16 lengths agree.
    let cut = &slug[..slug.len().min(MAX_SLUG_UNITS)];
    Ok(format!("--{cut}--"))
}

/// The project directory name for a session's cwd (`_no-cwd` without one).
pub fn project_dir_name(cwd: Option<&str>) -> Result<String, PersistenceError> {
    match cwd {
        None => Ok(NO_CWD_DIR.to_string()),
        Some(cwd) => project_key(cwd),
    }
}

/// The log path of a session under `root`.
pub fn log_path(
    root: &Path,
    cwd: Option<&str>,
    id: &str,
    compression: Compression,
) -> Result<PathBuf, PersistenceError> {
    Ok(root
        .join(project_dir_name(cwd)?)
        .join(encode_segment(id)?)
        .join(compression.file_name()))
}
