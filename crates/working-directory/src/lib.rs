//! The session working directory (upstream 0.2's `dsh-working-directory` and
//! `dsh-tool-working-directory`).
//!
//! A session's effective directory is the latest `working-directory/change` in its log, else
//! the directory it was created in (the agent reads it before every tool dispatch). Moving a
//! session is one rule, shared by every door that can move it — the SDK runtime's
//! `session/working-directory/set` and the model's `working_directory` tool: the target
//! resolves against the current directory, must be an existing directory, is logged, and the
//! model is told in a user message of source kind `working-directory` before its next step.

mod tool;

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_session::{LiveSession, types};
use serde_json::{Map, Value, json};

pub use tool::{WORKING_DIRECTORY_TOOL, WorkingDirectoryTool, WorkingDirectoryToolPlugin};

/// `path` against `base`, with `.` and `..` folded lexically (symlinks are not followed).
pub fn resolve(base: &Path, path: &str) -> PathBuf {
    let joined = if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else {
        base.join(path)
    };
    let mut out = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// What a get or change settled on.
#[derive(Clone, Debug)]
pub struct Settled {
    /// The session's directory now.
    pub cwd: PathBuf,
    /// The message that tells the model, when the directory moved.
    pub notice: Option<Message>,
}

fn quoted(path: &Path) -> String {
    dsh_kernel::json::to_string(&json!(path.display().to_string()))
}

/// A message of source kind `working-directory` telling the model `text`.
pub fn notice(text: String) -> Message {
    let mut source = Map::new();
    source.insert("kind".into(), Value::from("working-directory"));
    Message::user(vec![ContentBlock::text(text)], MessageSource::Other(source))
}

/// Reads (`cd` None) or changes the directory of `session`, whose effective directory is
/// `current` and whose creation directory is `origin`. A change is appended to the log
/// (`working-directory/change {cwd}`) before this returns; the caller delivers the notice.
/// A read of a directory that vanished falls back to `origin` the same way.
///
/// Errors are the texts the model or SDK client sees.
pub fn settle(
    session: &Arc<LiveSession>,
    current: &Path,
    origin: &Path,
    cd: Option<&str>,
) -> Result<Settled, String> {
    let (target, text) = match cd {
        Some("") => return Err("working-directory: cd must not be empty".into()),
        Some(p) => {
            let target = resolve(current, p);
            if !target.is_dir() {
                return Err(format!(
                    "working-directory: directory does not exist: {}",
                    dsh_kernel::json::to_string(&json!(p))
                ));
            }
            let text = format!(
                "The working directory changed from {} to {}.",
                quoted(current),
                quoted(&target)
            );
            (target, text)
        }
        None if current.is_dir() => {
            return Ok(Settled {
                cwd: current.to_path_buf(),
                notice: None,
            });
        }
        None => {
            let text = format!(
                "The working directory {} is unavailable. The working directory is now {}.",
                quoted(current),
                quoted(origin)
            );
            (origin.to_path_buf(), text)
        }
    };
    if target == current {
        return Ok(Settled {
            cwd: target,
            notice: None,
        });
    }
    session
        .append(
            types::WORKING_DIRECTORY_CHANGE,
            json!({"cwd": target.display().to_string()}),
            None,
        )
        .map_err(|e| format!("working-directory: the change could not be logged: {e}"))?;
    Ok(Settled {
        cwd: target,
        notice: Some(notice(text)),
    })
}

/// Adds the working-directory plugins to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog.register(WorkingDirectoryToolPlugin);
}

#[cfg(test)]
mod tests {
    use super::resolve;
    use std::path::{Path, PathBuf};

    #[test]
    fn paths_resolve_against_the_current_directory() {
        let base = Path::new("/w/a");
        assert_eq!(resolve(base, "b"), PathBuf::from("/w/a/b"));
        assert_eq!(resolve(base, "../c/./d"), PathBuf::from("/w/c/d"));
        assert_eq!(resolve(base, "/etc"), PathBuf::from("/etc"));
        assert_eq!(resolve(base, "../../../.."), PathBuf::from("/"));
    }
}
