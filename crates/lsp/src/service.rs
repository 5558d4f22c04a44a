//! The `lsp` service (upstream's `ctx.lsp`): providers registered by id and file extension,
//! one query operation routed by the final extension of the file path, and `LspError`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use dsh_kernel::{BoxError, BoxFuture, HarnessError};
use tokio_util::sync::CancellationToken;

/// An `LspError` with one of upstream's `LSP_*` codes (durable `{name: "LspError", code}`).
pub fn lsp_error(code: &'static str, message: impl Into<String>) -> BoxError {
    Box::new(HarnessError::new("LspError", code, message))
}

/// The four operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    GoToDefinition,
    FindReferences,
    GoToImplementation,
    Hover,
    /// A file's diagnostics (the `lsp_diagnostics` tool; not an `lsp` operation).
    Diagnostics,
}

impl Operation {
    pub const ALL: [Operation; 4] = [
        Operation::GoToDefinition,
        Operation::FindReferences,
        Operation::GoToImplementation,
        Operation::Hover,
    ];

    /// The model-facing name.
    pub fn name(self) -> &'static str {
        match self {
            Operation::GoToDefinition => "goToDefinition",
            Operation::FindReferences => "findReferences",
            Operation::GoToImplementation => "goToImplementation",
            Operation::Hover => "hover",
            Operation::Diagnostics => "diagnostics",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == name)
    }
}

/// A zero-based UTF-16 position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: u64,
    pub character: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub start: Position,
    pub end: Position,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub uri: String,
    pub range: Range,
}

/// One diagnostic of a file (zero-based range; severity 1 error … 4 hint).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub range: Range,
    pub severity: Option<u64>,
    pub message: String,
    pub source: Option<String>,
    pub code: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hover {
    pub contents: String,
    pub range: Option<Range>,
}

/// One query.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    pub operation: Operation,
    /// As the model gave it: relative to the workspace, or absolute.
    pub file_path: String,
    pub position: Position,
    pub workspace_root: PathBuf,
    /// The session asking (its servers may shut down when it goes away).
    pub owner: Option<String>,
    /// The sandbox policy of the asking session, when the composition has one: a server
    /// started for a confined mode runs under the sandbox runner like any command (a
    /// build script it runs is model-written code).
    pub policy: Option<dsh_sandbox::ExecutionPolicy>,
}

/// A query's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum QueryResult {
    Locations {
        locations: Vec<Location>,
        /// The provider's canonical workspace `file:` URI (for relative rendering).
        workspace_uri: String,
    },
    Hover(Option<Hover>),
    /// `None`: the server reported nothing for the file in time.
    Diagnostics(Option<Vec<Diagnostic>>),
}

/// A provider of LSP answers. Implementations must honour `cancel` promptly, and must not
/// panic on any server output.
pub trait LspProvider: Send + Sync + 'static {
    fn id(&self) -> &str;
    /// Lowercase extensions with their dot (`.ts`) → language id.
    fn extension_to_language(&self) -> &BTreeMap<String, String>;
    fn query(
        self: Arc<Self>,
        query: Query,
        language_id: String,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<QueryResult, BoxError>>;
    /// `owner` (a session) went away: servers no remaining owner uses may shut down.
    /// Must not block.
    fn release(&self, _owner: &str) {}
}

/// The service.
#[derive(Default)]
pub struct LspService {
    providers: RwLock<Vec<Arc<dyn LspProvider>>>,
}

/// The final lowercase extension of a path's file name (`foo.d.ts` → `.ts`); none for
/// dotfiles and names without a dot.
pub fn extension_of(path: &str) -> Option<String> {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let dot = name.rfind('.')?;
    if dot == 0 || dot + 1 == name.len() {
        return None;
    }
    Some(name[dot..].to_lowercase())
}

fn lock_poisoned<T>(r: std::sync::LockResult<T>) -> T {
    r.unwrap_or_else(|p| p.into_inner())
}

impl LspService {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a provider: its id and every extension must be free (all or nothing).
    pub fn register(&self, provider: Arc<dyn LspProvider>) -> Result<(), BoxError> {
        let mut all = lock_poisoned(self.providers.write());
        let id = provider.id().to_string();
        if id.is_empty() {
            return Err(lsp_error(
                "LSP_INVALID_PROVIDER",
                "an LSP provider needs a non-empty id",
            ));
        }
        if provider.extension_to_language().is_empty() {
            return Err(lsp_error(
                "LSP_INVALID_PROVIDER",
                format!("LSP provider \"{id}\" must map at least one extension"),
            ));
        }
        if all.iter().any(|p| p.id() == id) {
            return Err(lsp_error(
                "LSP_CONFLICT",
                format!("LSP provider \"{id}\" is already registered"),
            ));
        }
        for ext in provider.extension_to_language().keys() {
            if let Some(other) = all
                .iter()
                .find(|p| p.extension_to_language().contains_key(ext))
            {
                return Err(lsp_error(
                    "LSP_CONFLICT",
                    format!(
                        "extension \"{ext}\" is already handled by LSP provider \"{}\"",
                        other.id()
                    ),
                ));
            }
        }
        all.push(provider);
        Ok(())
    }

    pub fn unregister(&self, id: &str) {
        lock_poisoned(self.providers.write()).retain(|p| p.id() != id);
    }

    /// Whether any provider is registered.
    pub fn has_providers(&self) -> bool {
        !lock_poisoned(self.providers.read()).is_empty()
    }

    /// Whether some provider handles `ext`.
    pub fn handles(&self, ext: &str) -> bool {
        lock_poisoned(self.providers.read())
            .iter()
            .any(|p| p.extension_to_language().contains_key(ext))
    }

    /// A session went away: every provider may shut down the servers only it used.
    pub fn release(&self, owner: &str) {
        let all: Vec<Arc<dyn LspProvider>> = lock_poisoned(self.providers.read()).clone();
        for p in all {
            p.release(owner);
        }
    }

    /// Routes and runs one query.
    pub async fn query(
        &self,
        query: Query,
        cancel: CancellationToken,
    ) -> Result<QueryResult, BoxError> {
        let routed = extension_of(&query.file_path).and_then(|ext| {
            lock_poisoned(self.providers.read()).iter().find_map(|p| {
                p.extension_to_language()
                    .get(&ext)
                    .map(|lang| (p.clone(), lang.clone()))
            })
        });
        let Some((provider, language)) = routed else {
            return Err(lsp_error(
                "LSP_UNAVAILABLE",
                format!("no LSP provider handles \"{}\"", query.file_path),
            ));
        };
        provider.query(query, language, cancel).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn extensions_route_by_the_final_lowercase_suffix() {
        assert_eq!(extension_of("src/foo.d.ts"), Some(".ts".into()));
        assert_eq!(extension_of("A/B.RS"), Some(".rs".into()));
        assert_eq!(extension_of(".bashrc"), None);
        assert_eq!(extension_of("Makefile"), None);
        assert_eq!(extension_of("dir.d/file"), None);
        assert_eq!(extension_of("x."), None);
    }
}
