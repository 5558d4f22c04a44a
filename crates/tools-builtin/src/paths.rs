//! Path identity shared by the filesystem tools: Node-style lexical resolution for the
//! path the model sees, realpath identity for locks and observations.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use dsh_kernel::BoxError;
use dsh_tools::ToolRunContext;

use crate::errors;

/// A resolved filesystem target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Absolute, lexically normalized, symlinks not resolved: what the model sees.
    pub display: String,
    /// Realpath identity (for a missing file: realpath of the deepest existing ancestor plus
    /// the missing suffix). Locks and observations key on it, so aliases share them.
    pub key: PathBuf,
}

/// Node's `path.resolve(base, path)`: absolute, `.`/`..` folded lexically, no trailing slash.
pub fn resolve_lexical(base: &Path, path: &str) -> PathBuf {
    let joined = if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else if base.is_absolute() {
        base.join(path)
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(base)
            .join(path)
    };
    let mut out = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::Normal(c) => out.push(c),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The filesystem identity of `path` (realpath), or `path` itself when it cannot be resolved.
pub fn canonical_path(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

fn not_a_directory(display: &str) -> BoxError {
    errors::fs(
        "FS_NOT_FOUND",
        format!("cannot resolve \"{display}\": a parent path segment is not a directory"),
    )
}

/// Resolves `path` against `base` into its display path and realpath identity. The
/// harness's credential files and the `/proc` files exposing a process's environment or
/// memory are refused in every mode.
pub fn resolve_target(base: &Path, path: &str) -> Result<Target, BoxError> {
    let target = resolve_any_target(base, path)?;
    if dsh_sandbox::secrets::is_secret_path(&target.key) {
        return Err(secret_refusal(&target.display));
    }
    Ok(target)
}

/// The refusal of a secret path.
pub(crate) fn secret_refusal(display: &str) -> BoxError {
    errors::fs(
        "FS_SECRET",
        format!(
            "cannot access \"{display}\": it holds the harness's credentials or another process's environment, which tools may not read"
        ),
    )
}

fn resolve_any_target(base: &Path, path: &str) -> Result<Target, BoxError> {
    if path.trim().is_empty() {
        return Err(errors::fs(
            "FS_NOT_FOUND",
            "file_path must be a non-empty string",
        ));
    }
    let display_path = resolve_lexical(base, path);
    let display = display_path.to_string_lossy().into_owned();
    match std::fs::canonicalize(&display_path) {
        Ok(key) => return Ok(Target { display, key }),
        Err(e) if e.kind() == ErrorKind::NotADirectory => return Err(not_a_directory(&display)),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(errors::plain(e.to_string())),
    }
    // Missing target: realpath the deepest existing ancestor and re-append the missing
    // suffix, so the identity is stable across creating those directories.
    let mut missing: Vec<std::ffi::OsString> = display_path
        .file_name()
        .map(|n| vec![n.to_os_string()])
        .unwrap_or_default();
    let mut ancestor = display_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    loop {
        match std::fs::canonicalize(&ancestor) {
            Ok(real) => {
                let mut key = real;
                for part in missing.iter().rev() {
                    key.push(part);
                }
                return Ok(Target { display, key });
            }
            Err(e) if e.kind() == ErrorKind::NotADirectory => {
                return Err(not_a_directory(&display));
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let Some(parent) = ancestor.parent().map(Path::to_path_buf) else {
                    return Ok(Target {
                        display,
                        key: display_path,
                    });
                };
                if let Some(name) = ancestor.file_name() {
                    missing.push(name.to_os_string());
                }
                ancestor = parent;
            }
            Err(e) => return Err(errors::plain(e.to_string())),
        }
    }
}

/// The session working directory of a call, as recorded (not canonicalized).
pub fn session_cwd(run: &ToolRunContext) -> Option<String> {
    if let Some(cwd) = &run.cwd {
        return Some(cwd.to_string_lossy().into_owned());
    }
    run.session.as_ref().and_then(|s| s.header().cwd)
}

fn has_parent_segment(path: &str) -> bool {
    path.split(['/', '\\']).any(|segment| segment == "..")
}

/// The directory a filesystem tool resolves `requested` against: the session cwd verbatim,
/// canonicalized only when it or `requested` traverses `..` (so a symlinked cwd's identity
/// decides where `..` leads); `fallback` for calls without a session.
pub fn fs_base(run: &ToolRunContext, requested: &str, fallback: &Path) -> PathBuf {
    match session_cwd(run) {
        Some(cwd) if has_parent_segment(&cwd) || has_parent_segment(requested) => {
            canonical_path(Path::new(&cwd))
        }
        Some(cwd) => PathBuf::from(cwd),
        None => fallback.to_path_buf(),
    }
}

/// The process working directory (`/` if it cannot be read).
pub fn process_cwd() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
}

/// Whether `path` is `root` or lies below it: lexically, or — for alias spellings — by
/// filesystem identity of one of its existing ancestors.
pub fn is_path_under(path: &Path, root: &Path) -> bool {
    if path.starts_with(root) {
        return true;
    }
    use std::os::unix::fs::MetadataExt;
    let Ok(root_info) = std::fs::metadata(root) else {
        return false;
    };
    let mut ancestor = Some(path);
    while let Some(a) = ancestor {
        if let Ok(info) = std::fs::metadata(a)
            && info.dev() == root_info.dev()
            && info.ino() == root_info.ino()
        {
            return true;
        }
        ancestor = a.parent();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn lexical_resolution_matches_node() {
        assert_eq!(
            resolve_lexical(Path::new("/a/b"), "c/../d/./e/"),
            PathBuf::from("/a/b/d/e")
        );
        assert_eq!(
            resolve_lexical(Path::new("/a/b"), "/x//y/.."),
            PathBuf::from("/x")
        );
        assert_eq!(
            resolve_lexical(Path::new("/"), "../../z"),
            PathBuf::from("/z")
        );
    }
}
