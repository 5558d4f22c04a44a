//! Workspace changes per turn (0.2.1's `workspace/changes`): what a turn changed in its git
//! working tree, whatever changed it (file tools, bash, a build), from two snapshots — one
//! before the turn's first step, one after its end.
//!
//! A snapshot is a git tree of the working tree as `git add -A` sees it (ignored files left
//! out), written with a temporary index into a scratch object directory of this process
//! (the repository's objects are only read, through `GIT_ALTERNATE_OBJECT_DIRECTORIES`), so
//! the user's index, refs and object store are never touched. The summary is a durable
//! event, `workspace/changes {turn, cwd, files: [{path, display, added, deleted, binary?}],
//! total, added, deleted, snapshot: {before, after}}`; a file's diff is served while this
//! process runs (`session.workspaceDiff`). Outside a git repository, or without git, no
//! event is written (the page lists the file tools' own changes).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// The durable event type.
pub const CHANGES: &str = "workspace/changes";
/// Files listed in one summary (the totals count all).
const MAX_FILES: usize = 200;
/// Longest wait for one snapshot; a slower repository gets no summary for that turn.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest diff served for one file.
const MAX_DIFF_BYTES: usize = 512 * 1024;

/// A repository found from a working directory.
#[derive(Clone, Debug)]
pub struct Repo {
    /// The working tree's top directory.
    top: PathBuf,
    /// `--git-dir` (where the index lives) and the common dir (where objects live).
    git_dir: PathBuf,
    common_dir: PathBuf,
}

/// The state between a turn's start and its end.
struct Baseline {
    turn: u64,
    repo: Repo,
    tree: String,
}

/// What one summary compares: the repository and the two snapshot trees.
type Compared = (Repo, String, String);

/// Per process: scratch objects, the open baselines, the snapshots each summary names.
pub struct Changes {
    scratch: PathBuf,
    baselines: Mutex<HashMap<String, Baseline>>,
    /// (session, event seq) → (repo, before, after): what `session.workspaceDiff` compares.
    recorded: Mutex<HashMap<(String, u64), Compared>>,
}

impl Drop for Changes {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

fn git(
    repo: &Repo,
    scratch: &Path,
    index: Option<&Path>,
    args: &[&str],
) -> Result<Vec<u8>, String> {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(&repo.top)
        // Nothing of the repository's configuration may run a program here.
        .args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .env("GIT_OBJECT_DIRECTORY", scratch.join("objects"))
        .env(
            "GIT_ALTERNATE_OBJECT_DIRECTORIES",
            repo.common_dir.join("objects"),
        )
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .stdin(std::process::Stdio::null());
    if let Some(index) = index {
        cmd.env("GIT_INDEX_FILE", index);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("git could not run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {} failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

/// The repository enclosing `cwd`, if any (and if git runs).
fn locate(cwd: &Path) -> Option<Repo> {
    let out = Command::new("git")
        .arg("-C")
        .arg(cwd)
        .args([
            "rev-parse",
            "--path-format=absolute",
            "--show-toplevel",
            "--git-dir",
            "--git-common-dir",
        ])
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let mut lines = text.lines();
    Some(Repo {
        top: PathBuf::from(lines.next()?),
        git_dir: PathBuf::from(lines.next()?),
        common_dir: PathBuf::from(lines.next()?),
    })
}

/// One changed file of a summary.
#[derive(Debug, PartialEq)]
struct Changed {
    path: String,
    added: u64,
    deleted: u64,
    binary: bool,
}

/// `git diff --numstat -z` output: `added\tdeleted\tpath\0` (`-\t-` for binary files).
fn parse_numstat(raw: &[u8]) -> Vec<Changed> {
    raw.split(|b| *b == 0)
        .filter(|r| !r.is_empty())
        .filter_map(|record| {
            let text = String::from_utf8_lossy(record);
            let mut parts = text.splitn(3, '\t');
            let (a, d, path) = (parts.next()?, parts.next()?, parts.next()?);
            let binary = a == "-" && d == "-";
            Some(Changed {
                path: path.to_string(),
                added: a.parse().unwrap_or(0),
                deleted: d.parse().unwrap_or(0),
                binary,
            })
        })
        .collect()
}

impl Changes {
    pub fn new() -> std::io::Result<Arc<Self>> {
        let scratch = std::env::temp_dir().join(format!(
            "dsh-workspace-changes-{}-{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        std::fs::create_dir_all(scratch.join("objects"))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o700));
        }
        Ok(Arc::new(Self {
            scratch,
            baselines: Mutex::default(),
            recorded: Mutex::default(),
        }))
    }

    /// A tree of the working tree now (a temporary copy of the repository's index keeps
    /// unchanged files from being hashed again).
    fn snapshot(&self, repo: &Repo) -> Result<String, String> {
        let index = self
            .scratch
            .join(format!("index-{}", uuid::Uuid::new_v4().simple()));
        let real = repo.git_dir.join("index");
        if real.is_file() {
            std::fs::copy(&real, &index).map_err(|e| format!("copying the index: {e}"))?;
        }
        let result = git(repo, &self.scratch, Some(&index), &["add", "-A", "--", "."])
            .and_then(|_| git(repo, &self.scratch, Some(&index), &["write-tree"]))
            .map(|out| String::from_utf8_lossy(&out).trim().to_string());
        let _ = std::fs::remove_file(&index);
        result
    }

    /// Before the first step of a turn: the baseline snapshot.
    pub async fn turn_starting(self: &Arc<Self>, session: &str, turn: u64, cwd: PathBuf) {
        let this = self.clone();
        let work = tokio::task::spawn_blocking(move || {
            let repo = locate(&cwd)?;
            match this.snapshot(&repo) {
                Ok(tree) => Some((repo, tree)),
                Err(e) => {
                    tracing::warn!(
                        "workspace changes: no snapshot of {}: {e}",
                        repo.top.display()
                    );
                    None
                }
            }
        });
        let Ok(Ok(Some((repo, tree)))) = tokio::time::timeout(SNAPSHOT_TIMEOUT, work).await else {
            self.lock_baselines().remove(session);
            return;
        };
        self.lock_baselines()
            .insert(session.to_string(), Baseline { turn, repo, tree });
    }

    fn lock_baselines(&self) -> std::sync::MutexGuard<'_, HashMap<String, Baseline>> {
        self.baselines.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// After a turn ended: the summary to record, if the turn changed anything.
    pub async fn turn_ended(
        self: &Arc<Self>,
        session: &str,
        turn: u64,
        cwd: &Path,
    ) -> Option<(Value, Repo)> {
        let baseline = {
            let mut map = self.lock_baselines();
            match map.get(session) {
                Some(b) if b.turn == turn => map.remove(session),
                _ => None,
            }
        }?;
        let this = self.clone();
        let work = tokio::task::spawn_blocking(
            move || -> Result<(Baseline, String, Vec<Changed>), String> {
                let after = this.snapshot(&baseline.repo)?;
                let raw = git(
                    &baseline.repo,
                    &this.scratch,
                    None,
                    &[
                        "diff",
                        "--numstat",
                        "-z",
                        "--no-renames",
                        "--no-ext-diff",
                        "--no-textconv",
                        &baseline.tree,
                        &after,
                    ],
                )?;
                Ok((baseline, after, parse_numstat(&raw)))
            },
        );
        let (baseline, after, files) = match tokio::time::timeout(SNAPSHOT_TIMEOUT, work).await {
            Ok(Ok(Ok(done))) => done,
            Ok(Ok(Err(e))) => {
                tracing::warn!("workspace changes of turn {turn}: {e}");
                return None;
            }
            _ => return None,
        };
        if files.is_empty() {
            return None;
        }
        let top = &baseline.repo.top;
        let listed: Vec<Value> = files
            .iter()
            .take(MAX_FILES)
            .map(|f| {
                let absolute = top.join(&f.path);
                let display = absolute
                    .strip_prefix(cwd)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| absolute.display().to_string());
                let mut v = json!({"path": absolute.display().to_string(), "display": display,
                                    "added": f.added, "deleted": f.deleted});
                if f.binary {
                    v["binary"] = json!(true);
                }
                v
            })
            .collect();
        let summary = json!({
            "turn": turn,
            "cwd": cwd.display().to_string(),
            "files": listed,
            "total": files.len(),
            "added": files.iter().map(|f| f.added).sum::<u64>(),
            "deleted": files.iter().map(|f| f.deleted).sum::<u64>(),
            "snapshot": {"before": baseline.tree, "after": after},
        });
        Some((summary, baseline.repo))
    }

    /// Remembers what the summary recorded at `seq` compares (for `diff`).
    pub fn remember(&self, session: &str, seq: u64, repo: Repo, summary: &Value) {
        let side = |k: &str| {
            summary
                .pointer(&format!("/snapshot/{k}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        self.recorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                (session.to_string(), seq),
                (repo, side("before"), side("after")),
            );
    }

    /// The unified diff of one file of the summary at `seq`; `None` when this process did
    /// not record it (it ran before a restart).
    pub async fn diff(
        self: &Arc<Self>,
        session: &str,
        seq: u64,
        path: &str,
    ) -> Option<Result<String, String>> {
        let (repo, before, after) = self
            .recorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(session.to_string(), seq))
            .cloned()?;
        let relative = Path::new(path)
            .strip_prefix(&repo.top)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| path.to_string());
        let this = self.clone();
        let out = tokio::task::spawn_blocking(move || {
            git(
                &repo,
                &this.scratch,
                None,
                &[
                    "diff",
                    "--no-renames",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--no-color",
                    &before,
                    &after,
                    "--",
                    &relative,
                ],
            )
        })
        .await
        .ok()?;
        Some(out.map(|bytes| {
            let mut text = String::from_utf8_lossy(&bytes).into_owned();
            if text.len() > MAX_DIFF_BYTES {
                let mut cut = MAX_DIFF_BYTES;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                text.push_str("\n… (diff cut at 512 KiB)\n");
            }
            text
        }))
    }
}

/// Takes the baseline before each hosted top-level turn's first step and records the
/// summary after its end.
pub fn install(
    root: &dsh_kernel::Context,
    hosting: &Arc<crate::hosting::Hosting>,
    changes: &Arc<Changes>,
) -> Result<(), dsh_kernel::BoxError> {
    use dsh_agent::PreStep;
    use dsh_kernel::ListenOptions;
    use dsh_session::{SessionAppended, types};

    let (h, c) = (hosting.clone(), changes.clone());
    root.on_waterfall::<PreStep>(ListenOptions::GLOBAL, move |p, next| {
        let session = p.agent.session().clone();
        let wanted =
            p.step == 1 && h.get(&session.id()).is_some() && session.header().delegation_depth == 0;
        let cwd = p.agent.cwd();
        let (c, turn) = (c.clone(), p.turn);
        Box::pin(async move {
            if wanted && let Some(cwd) = cwd {
                c.turn_starting(&session.id(), turn, cwd).await;
            }
            next.run().await
        })
    })?;
    let (h, c) = (hosting.clone(), changes.clone());
    root.on_emit::<SessionAppended>(ListenOptions::GLOBAL, move |p| {
        if !p.event.is(types::TURN_END) {
            return Ok(());
        }
        let Some(turn) = p.event.data.get("turn").and_then(Value::as_u64) else {
            return Ok(());
        };
        let session = p.session.clone();
        let id = session.id();
        let Some(cwd) = h
            .get(&id)
            .and_then(|hosted| hosted.agent())
            .and_then(|a| a.cwd())
        else {
            return Ok(());
        };
        let c = c.clone();
        tokio::spawn(async move {
            let Some((summary, repo)) = c.turn_ended(&id, turn, &cwd).await else {
                return;
            };
            match session.append(CHANGES, summary.clone(), None) {
                Ok(event) => c.remember(&id, event.seq, repo, &summary),
                Err(e) => {
                    tracing::warn!("workspace changes of turn {turn} in {id} not recorded: {e}")
                }
            }
        });
        Ok(())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn numstat_records_read_with_binary_files() {
        let raw = b"3\t1\tsrc/a.rs\0-\t-\tlogo.png\0";
        assert_eq!(
            parse_numstat(raw),
            vec![
                Changed {
                    path: "src/a.rs".into(),
                    added: 3,
                    deleted: 1,
                    binary: false
                },
                Changed {
                    path: "logo.png".into(),
                    added: 0,
                    deleted: 0,
                    binary: true
                },
            ]
        );
    }
}
