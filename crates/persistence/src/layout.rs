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

    /// The v0 log file name (`session.jsonl` or `session.jsonl.zstd`).
    pub fn file_name(self) -> String {
        log_file_name(0, self)
    }
}

/// The file name of format `version` in `compression`: `session.jsonl` for v0,
/// `session.v<N>.jsonl` for later generations, plus `.zstd` when compressed.
pub fn log_file_name(version: u64, compression: Compression) -> String {
    match version {
        0 => format!("{LOG_STEM}{}", compression.suffix()),
        n => format!("{LOG_STEM}.v{n}{}", compression.suffix()),
    }
}

/// The format generation a file name of `compression` holds, when it is a canonical log
/// name (`session.jsonl` → 0, `session.v4.jsonl` → 4; `session.v0.jsonl`, `session.v04…`,
/// temporary files → none).
pub fn generation_of(name: &str, compression: Compression) -> Option<u64> {
    let base = name.strip_suffix(compression.suffix())?;
    if base == LOG_STEM {
        return Some(0);
    }
    let digits = base.strip_prefix("session.v")?;
    let canonical = !digits.is_empty()
        && !digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit());
    if !canonical {
        return None;
    }
    digits.parse().ok()
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

/// The directory of a session under `root`.
pub fn session_dir(root: &Path, cwd: Option<&str>, id: &str) -> Result<PathBuf, PersistenceError> {
    Ok(root.join(project_dir_name(cwd)?).join(encode_segment(id)?))
}

/// The log path of format `version` of a session under `root`.
pub fn log_path(
    root: &Path,
    cwd: Option<&str>,
    id: &str,
    version: u64,
    compression: Compression,
) -> Result<PathBuf, PersistenceError> {
    Ok(session_dir(root, cwd, id)?.join(log_file_name(version, compression)))
}

/// The canonical log generations present in a session directory: `(version, path)`,
/// highest version last. A missing directory holds none.
pub fn generations(dir: &Path, compression: Compression) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(u64, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let v = generation_of(name.to_str()?, compression)?;
            e.file_type().ok()?.is_file().then(|| (v, e.path()))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod generation_tests {
    use super::*;

    #[test]
    fn canonical_generation_names() {
        let z = Compression::Zstd;
        assert_eq!(generation_of("session.jsonl.zstd", z), Some(0));
        assert_eq!(generation_of("session.v4.jsonl.zstd", z), Some(4));
        assert_eq!(generation_of("session.v12.jsonl.zstd", z), Some(12));
        for bad in [
            "session.v0.jsonl.zstd",
            "session.v04.jsonl.zstd",
            "session.V4.jsonl.zstd",
            "session.v4.jsonl",
            "session.jsonl.zstd.abc.tmp",
            "session.v.jsonl.zstd",
        ] {
            assert_eq!(generation_of(bad, z), None, "{bad}");
        }
        assert_eq!(
            generation_of("session.v4.jsonl", Compression::None),
            Some(4)
        );
        assert_eq!(log_file_name(4, z), "session.v4.jsonl.zstd");
    }
}
