//! The sandbox policy: the deployment's default mode and roots, resolved per call against
//! the calling session (its last `sandbox/mode` event and its cwd), and the
//! `@deepseek-ai/dsh-sandbox-policy` plugin that provides it and tells the model the
//! standing policy in the runtime context (re-rendered from the session on every request).

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_session::LiveSession;
use serde::Deserialize;
use serde_json::Value;

use crate::mode::SandboxMode;
use crate::secrets::SecretPaths;

/// Whether confined commands may use the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// No network in confined modes (the default): a private network namespace (bwrap) or
    /// Landlock's TCP rules.
    Deny,
    /// Confined commands keep the host network.
    Allow,
}

/// The resolved policy of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutionPolicy {
    pub mode: SandboxMode,
    /// Absolute, canonical workspace root.
    pub workspace_root: PathBuf,
    /// Temporary areas writable under `workspace-write` besides the workspace.
    pub temp_roots: Vec<PathBuf>,
    /// Further writable roots under `workspace-write` (config `writableRoots`).
    pub extra_roots: Vec<PathBuf>,
    pub network: Network,
    /// Files no confined process may read (credentials).
    pub masked: Vec<PathBuf>,
    /// Existing paths inside the writable roots that stay read-only under
    /// `workspace-write` (by default the workspace's `.git/hooks` and `.git/config`: a
    /// hook or a `core.fsmonitor` line would run later, outside any sandbox).
    pub protected: Vec<PathBuf>,
}

impl ExecutionPolicy {
    /// The canonical roots a call may write under: none for `read-only`, the workspace plus
    /// the temp areas and extra roots for `workspace-write`; `danger-full-access` is not
    /// fenced at all.
    pub fn writable_roots(&self) -> Vec<PathBuf> {
        if self.mode != SandboxMode::WorkspaceWrite {
            return Vec::new();
        }
        let mut roots: Vec<PathBuf> = Vec::new();
        for root in std::iter::once(&self.workspace_root)
            .chain(&self.temp_roots)
            .chain(&self.extra_roots)
        {
            let root = canonical_path(root);
            if !roots.contains(&root) {
                roots.push(root);
            }
        }
        roots
    }

    /// The protected path that `path` (canonical) lies in, if any — only under
    /// `workspace-write`, the one mode where the protection matters.
    pub fn protected_path_of(&self, path: &Path) -> Option<&Path> {
        if self.mode != SandboxMode::WorkspaceWrite {
            return None;
        }
        self.protected
            .iter()
            .find(|p| path.starts_with(p))
            .map(PathBuf::as_path)
    }
}

/// Workspace-relative paths that stay read-only under `workspace-write` unless configured
/// otherwise (`protectedPaths`).
pub const DEFAULT_PROTECTED_PATHS: [&str; 2] = [".git/hooks", ".git/config"];

/// The `sandboxPolicy` service.
#[derive(Clone, Debug)]
pub struct SandboxPolicy {
    default_mode: SandboxMode,
    workspace_root: PathBuf,
    temp_roots: Vec<PathBuf>,
    extra_roots: Vec<PathBuf>,
    network: Network,
    secrets: SecretPaths,
    /// Workspace-relative (or absolute) paths kept read-only under `workspace-write`.
    protected: Vec<PathBuf>,
}

/// The platform's temporary areas (`/tmp` and the process temp dir).
pub fn default_temp_roots() -> Vec<PathBuf> {
    let mut roots = vec![PathBuf::from("/tmp")];
    let tmp = std::env::temp_dir();
    if !roots.contains(&tmp) {
        roots.push(tmp);
    }
    roots
}

/// The filesystem identity of `path` (realpath), or `path` itself when it cannot be
/// resolved.
pub fn canonical_path(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `path` made absolute and normalised lexically (`.`/`..` folded), against `base`.
pub fn resolve_lexical(base: &Path, path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
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

fn workspace_root_of(path: &Path) -> PathBuf {
    resolve_lexical(Path::new("/"), &canonical_path(path))
}

/// The mode a session's log sets (its last `sandbox/mode` event), if any.
pub fn session_mode(session: &LiveSession) -> Option<SandboxMode> {
    session.read(|log| {
        log.events()
            .iter()
            .rev()
            .find(|e| e.event_type == "sandbox/mode")
            .and_then(|e| {
                e.data
                    .get("mode")
                    .and_then(Value::as_str)
                    .and_then(SandboxMode::parse)
            })
    })
}

impl SandboxPolicy {
    pub fn new(default_mode: SandboxMode, workspace_root: &Path) -> Self {
        Self {
            default_mode,
            workspace_root: workspace_root_of(workspace_root),
            temp_roots: default_temp_roots(),
            extra_roots: Vec::new(),
            network: Network::Deny,
            secrets: SecretPaths::default(),
            protected: DEFAULT_PROTECTED_PATHS.iter().map(PathBuf::from).collect(),
        }
    }

    /// Replaces the paths kept read-only under `workspace-write` (relative ones are taken
    /// from the session's workspace root).
    pub fn with_protected_paths(mut self, paths: Vec<PathBuf>) -> Self {
        self.protected = paths;
        self
    }

    /// Replaces the writable temporary areas (e.g. none, for a strict workspace fence).
    pub fn with_temp_roots(mut self, roots: Vec<PathBuf>) -> Self {
        self.temp_roots = roots;
        self
    }

    pub fn with_extra_roots(mut self, roots: Vec<PathBuf>) -> Self {
        self.extra_roots = roots;
        self
    }

    pub fn with_network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }

    pub fn with_secrets(mut self, secrets: SecretPaths) -> Self {
        self.secrets = secrets;
        self
    }

    pub fn default_mode(&self) -> SandboxMode {
        self.default_mode
    }

    pub fn secrets(&self) -> &SecretPaths {
        &self.secrets
    }

    /// The session's override (its last `sandbox/mode` event), else the default; the
    /// session cwd as workspace root, else the configured root.
    pub fn resolve(&self, session: Option<&LiveSession>) -> ExecutionPolicy {
        let (mode, cwd) = match session {
            Some(s) => (session_mode(s), s.header().cwd),
            None => (None, None),
        };
        let mode = mode.unwrap_or(self.default_mode);
        let workspace_root = cwd
            .map(|c| workspace_root_of(Path::new(&c)))
            .unwrap_or_else(|| self.workspace_root.clone());
        let protected = if mode == SandboxMode::WorkspaceWrite {
            self.protected
                .iter()
                .map(|p| workspace_root.join(p))
                .filter(|p| p.exists())
                .filter_map(|p| std::fs::canonicalize(p).ok())
                .collect()
        } else {
            Vec::new()
        };
        ExecutionPolicy {
            mode,
            workspace_root,
            temp_roots: self.temp_roots.clone(),
            extra_roots: self.extra_roots.clone(),
            network: self.network,
            masked: self.secrets.existing(),
            protected,
        }
    }

    /// The standing policy as the model reads it in the runtime context.
    pub fn describe(&self, session: Option<&LiveSession>) -> String {
        let policy = self.resolve(session);
        let network = match (policy.network, policy.mode) {
            (_, SandboxMode::DangerFullAccess) | (Network::Allow, _) => "",
            (Network::Deny, _) => " Commands have no network access in this mode.",
        };
        match policy.mode {
            SandboxMode::ReadOnly => format!(
                "File policy: read-only. Sandboxed operations cannot change files in this mode. Don't decline a needed change on this basis alone: try the tool and follow any denial or escalation guidance it returns.{network}"
            ),
            SandboxMode::WorkspaceWrite => format!(
                "File policy: workspace-write. Sandboxed operations may change files inside the session workspace {} (and some temporary directories).{network}",
                serde_json::to_string(&policy.workspace_root.to_string_lossy()).unwrap_or_default()
            ),
            SandboxMode::DangerFullAccess => {
                "File policy: danger-full-access. The file sandbox places no limits on changes."
                    .to_string()
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicyConfig {
    mode: Option<String>,
    workspace_root: Option<String>,
    temp_roots: Option<Vec<String>>,
    writable_roots: Option<Vec<String>>,
    network: Option<Network>,
    /// Our extension: paths kept read-only under `workspace-write` (default
    /// `[.git/hooks, .git/config]`; `[]` turns the protection off).
    protected_paths: Option<Vec<String>>,
}

/// `@deepseek-ai/dsh-sandbox-policy` (config `{mode?, workspaceRoot?, tempRoots?,
/// writableRoots?, network?, protectedPaths?}`): provides [`SandboxPolicy`] and the `sandbox:policy`
/// runtime-context section. A configured root that does not exist is a load error.
pub struct SandboxPolicyPlugin;

impl Plugin for SandboxPolicyPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-sandbox-policy"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: PolicyConfig = config.parse()?;
        let at = |field: &str, message: String| -> BoxError {
            format!(
                "{}: row \"{}\": config field `{field}`: {message}",
                config.source, config.row_id
            )
            .into()
        };
        let raw = c.mode.unwrap_or_else(|| "workspace-write".into());
        let mode = SandboxMode::parse(&raw).ok_or_else(|| {
            at(
                "mode",
                format!(
                    "unknown permission mode \"{raw}\" (read-only, workspace-write, danger-full-access)"
                ),
            )
        })?;
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let existing_dir = |field: &str, raw: &str| -> Result<PathBuf, BoxError> {
            let path = resolve_lexical(&cwd, Path::new(raw));
            if !path.is_dir() {
                return Err(at(
                    field,
                    format!("{} does not exist or is not a directory", path.display()),
                ));
            }
            Ok(path)
        };
        let root = match &c.workspace_root {
            Some(r) => existing_dir("workspaceRoot", r)?,
            None => cwd.clone(),
        };
        let mut policy = SandboxPolicy::new(mode, &root)
            .with_network(c.network.unwrap_or(Network::Deny))
            .with_secrets(SecretPaths::for_home(&crate::secrets::dsh_home()));
        if let Some(roots) = &c.temp_roots {
            policy = policy.with_temp_roots(roots.iter().map(PathBuf::from).collect());
        }
        if let Some(paths) = &c.protected_paths {
            policy = policy.with_protected_paths(paths.iter().map(PathBuf::from).collect());
        }
        if let Some(roots) = &c.writable_roots {
            let roots = roots
                .iter()
                .map(|r| existing_dir("writableRoots", r))
                .collect::<Result<Vec<_>, _>>()?;
            policy = policy.with_extra_roots(roots);
        }
        let policy = Arc::new(policy);
        ctx.provide(policy.clone())?;
        let prompt = ctx.require::<dsh_prompt::SystemPrompt>()?;
        prompt.context(
            ctx,
            "sandbox:policy",
            110.0,
            Arc::new(move |a| policy.describe(a.session.as_deref())),
        )?;
        Ok(())
    }
}
