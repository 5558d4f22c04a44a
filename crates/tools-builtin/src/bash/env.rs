//! The child environment of a model shell call, and the `shellEnv` service.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use dsh_session::LiveSession;

use crate::paths::{process_cwd, resolve_lexical};

/// Finds the JSONL file a session persists to, when the persistence backend has one.
pub type SessionJsonlLocator = Arc<dyn Fn(&LiveSession) -> Option<PathBuf> + Send + Sync>;

/// The `shellEnv` service: the trusted `DSH_*` facts injected into every model shell call.
pub struct ShellEnv {
    dsh_home: PathBuf,
    jsonl: RwLock<Option<SessionJsonlLocator>>,
}

impl std::fmt::Debug for ShellEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShellEnv")
            .field("dsh_home", &self.dsh_home)
            .finish_non_exhaustive()
    }
}

impl ShellEnv {
    /// `DSH_HOME` from a non-blank `$DSH_HOME`, else `~/.dsh` (read now).
    pub fn from_process_env() -> Self {
        Self::resolve(None)
    }

    /// `DSH_HOME` = `dsh_home` (made absolute).
    pub fn with_dsh_home(dsh_home: &str) -> Self {
        Self::resolve(Some(dsh_home))
    }

    pub(crate) fn resolve(configured: Option<&str>) -> Self {
        Self {
            dsh_home: resolve_dsh_home(configured),
            jsonl: RwLock::new(None),
        }
    }

    pub fn dsh_home(&self) -> &Path {
        &self.dsh_home
    }

    /// Installs how `DSH_SESSION_JSONL` is found (by the persistence layer).
    pub fn set_session_jsonl_locator(&self, locator: SessionJsonlLocator) {
        *self.jsonl.write().unwrap_or_else(|p| p.into_inner()) = Some(locator);
    }

    /// The managed `DSH_*` snapshot for one call, sorted by name.
    pub fn collect(&self, session: Option<&Arc<LiveSession>>) -> Vec<(String, String)> {
        let mut vars = vec![
            (
                "DSH_HOME".to_string(),
                self.dsh_home.to_string_lossy().into_owned(),
            ),
            ("DSH_SHELL".to_string(), "1".to_string()),
        ];
        if let Some(session) = session {
            vars.push(("DSH_SESSION_ID".into(), session.id()));
            let locator = self.jsonl.read().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(path) = locator.and_then(|l| l(session)) {
                vars.push((
                    "DSH_SESSION_JSONL".into(),
                    resolve_lexical(&process_cwd(), &path.to_string_lossy())
                        .to_string_lossy()
                        .into_owned(),
                ));
            }
        }
        vars.sort();
        vars
    }
}

fn resolve_dsh_home(configured: Option<&str>) -> PathBuf {
    let chosen = configured
        .map(str::to_owned)
        .or_else(|| {
            std::env::var("DSH_HOME")
                .ok()
                .filter(|v| !v.trim().is_empty())
        })
        .unwrap_or_else(|| {
            let home = std::env::var("HOME").unwrap_or_else(|_| "/".into());
            Path::new(&home).join(".dsh").to_string_lossy().into_owned()
        });
    resolve_lexical(&process_cwd(), &chosen)
}

/// The complete child environment: the scrubbed parent environment, then the terminal
/// overrides (no colour, no pager), then the managed `DSH_*` snapshot; later layers win.
pub(crate) fn child_env(managed: Vec<(String, String)>) -> Vec<(String, String)> {
    dsh_sandbox::secrets::child_env(&managed)
}
