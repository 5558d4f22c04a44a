//! `spill-local`: complete results saved as private files, one directory per session.
//!
//! Layout (upstream's): `<root>/session-<first 12 hex of sha256(session id)>/<12 random
//! hex>-<encoded suggested name>`, directories 0700, files created exclusively with 0600.
//! Without a configured root the session's spill area is `spill/` beside its log (the
//! persistence backend's artifact directory), so locators recorded in the log stay valid
//! when the session is resumed; with no persistence either, a private temp directory.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use dsh_kernel::{BoxError, BoxFuture, Context};
use dsh_session::{Artifacts, SessionStore};
use dsh_tools::{SpillRef, SpillRequest, TextSpillStore};
use sha2::{Digest, Sha256};

/// How to read a spilled file back (model-visible; recorded tool results in the conformance
/// scenarios contain it, so it stays exactly as it is).
pub const RETRIEVAL_HINT: &str =
    "Use read with offset/limit, or grep this path to search within it.";

/// Where the store puts session directories.
#[derive(Clone, Debug)]
enum Root {
    /// `root/session-<hash>/`.
    Configured(PathBuf),
    /// Beside each session's log; a private temp root for sessions without one.
    BesideLog,
}

/// The local spill store.
pub struct LocalSpillStore {
    root: Root,
    ctx: Context,
    temp_root: OnceLock<Option<PathBuf>>,
}

/// `session-<first 12 hex of sha256(id)>`.
pub fn session_dir_name(session_id: &str) -> String {
    let digest = Sha256::digest(session_id.as_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("session-{hex}")
}

fn random_hex12() -> String {
    // The first 12 hex digits of a v4 UUID are all random.
    uuid::Uuid::new_v4().simple().to_string()[..12].to_string()
}

fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

impl LocalSpillStore {
    /// A store under `root` (made absolute against the process cwd), or beside each
    /// session's log when `None`.
    pub fn new(ctx: Context, root: Option<PathBuf>) -> Arc<Self> {
        let root = match root {
            Some(r) if r.is_absolute() => Root::Configured(r),
            Some(r) => {
                Root::Configured(std::env::current_dir().map(|cwd| cwd.join(&r)).unwrap_or(r))
            }
            None => Root::BesideLog,
        };
        Arc::new(Self {
            root,
            ctx,
            temp_root: OnceLock::new(),
        })
    }

    fn temp_root(&self) -> Option<PathBuf> {
        self.temp_root
            .get_or_init(|| {
                for _ in 0..8 {
                    let dir =
                        std::env::temp_dir().join(format!("dsh-spill-{}", &random_hex12()[..6]));
                    if std::fs::DirBuilder::new().mode(0o700).create(&dir).is_ok() {
                        return Some(dir);
                    }
                }
                None
            })
            .clone()
    }

    /// The session's directory path (not created).
    fn dir_for(&self, session_id: &str) -> Option<PathBuf> {
        match &self.root {
            Root::Configured(root) => Some(root.join(session_dir_name(session_id))),
            Root::BesideLog => {
                let beside = self.ctx.get::<Artifacts>().and_then(|artifacts| {
                    let session = self.ctx.get::<SessionStore>()?.get(session_id)?;
                    artifacts
                        .0
                        .artifact_dir(&session.header())
                        .map(|d| d.join("spill"))
                });
                beside.or_else(|| Some(self.temp_root()?.join(session_dir_name(session_id))))
            }
        }
    }

    /// Writes `content` to a fresh private file in `dir`.
    fn write_file(dir: &Path, suggested_name: &str, content: &str) -> std::io::Result<PathBuf> {
        private_dir(dir)?;
        let safe = dsh_persistence::encode_segment(suggested_name).unwrap_or_else(|_| "~".into());
        let mut last = None;
        // A clash of 48 random bits is next to impossible; retry a few times anyway.
        for _ in 0..4 {
            let path = dir.join(format!("{}-{safe}", random_hex12()));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(mut file) => {
                    file.write_all(content.as_bytes())?;
                    file.flush()?;
                    return Ok(path);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no free spill file name")))
    }
}

impl TextSpillStore for LocalSpillStore {
    fn save_text(&self, request: SpillRequest) -> BoxFuture<'static, Result<SpillRef, BoxError>> {
        let dir = self.dir_for(&request.session_id);
        Box::pin(async move {
            let dir = dir.ok_or("spill-local: no directory is available for this session")?;
            let SpillRequest {
                suggested_name,
                content,
                ..
            } = request;
            let path = tokio::task::spawn_blocking(move || {
                Self::write_file(&dir, &suggested_name, &content)
            })
            .await
            .map_err(|e| format!("spill-local: the write task failed: {e}"))?
            .map_err(|e| format!("spill-local: cannot save the result: {e}"))?;
            Ok(SpillRef {
                locator: path.to_string_lossy().into_owned(),
                retrieval_hint: RETRIEVAL_HINT.into(),
            })
        })
    }

    fn session_dir(&self, session_id: &str) -> Option<PathBuf> {
        let dir = self.dir_for(session_id)?;
        match private_dir(&dir) {
            Ok(()) => Some(dir),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "spill-local: cannot create the session spill directory");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn session_directories_hash_the_id() {
        // sha256("abc") = ba7816bf8f01cfea…
        assert_eq!(session_dir_name("abc"), "session-ba7816bf8f01");
    }

    #[tokio::test]
    async fn saved_files_are_private_and_named_after_the_tool() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LocalSpillStore::new(Context::new_root(), Some(tmp.path().to_path_buf()));
        let saved = store
            .save_text(SpillRequest {
                session_id: "s1".into(),
                tool_name: "bash".into(),
                call_id: "c1".into(),
                suggested_name: "my tool.txt".into(),
                content: "hello".into(),
            })
            .await
            .unwrap();
        let path = PathBuf::from(&saved.locator);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "hello");
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(name.len(), 13 + "my~0020tool.txt".len());
        assert!(name.ends_with("-my~0020tool.txt"), "{name}");
        assert_eq!(
            path.parent().unwrap(),
            tmp.path().join(session_dir_name("s1"))
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(saved.retrieval_hint, RETRIEVAL_HINT);
    }

    #[tokio::test]
    async fn an_unwritable_root_is_an_error_not_a_panic() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("not-a-dir");
        std::fs::write(&file, "x").unwrap();
        let store = LocalSpillStore::new(Context::new_root(), Some(file));
        let got = store
            .save_text(SpillRequest {
                session_id: "s1".into(),
                tool_name: "bash".into(),
                call_id: "c1".into(),
                suggested_name: "bash.txt".into(),
                content: "hello".into(),
            })
            .await;
        assert!(got.is_err());
    }
}
