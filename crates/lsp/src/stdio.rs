//! `lsp-stdio`'s provider: one configured stdio server, one process per canonical
//! workspace started on its first query, queries serialized per workspace. Each query opens
//! the document (full text), sends the request and closes the document. A transport failure
//! (the process exited, wrote garbage, stopped reading) drops that process and the query is
//! retried once on a fresh one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_kernel::{BoxError, BoxFuture};
use lsp_types::notification::{
    DidCloseTextDocument, DidOpenTextDocument, Initialized, Notification as _,
};
use lsp_types::request::{
    DocumentDiagnosticRequest, GotoDefinition, GotoImplementation, HoverRequest, Initialize,
    References, Request as _,
};
use lsp_types::{self as lsp, Url};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::connection::{CallError, Connection, ServerCommand};
use crate::service::{LspProvider, Operation, Query, QueryResult, lsp_error};
use crate::translate;

/// One server's settings (upstream's `servers.<id>` fields).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub command: String,
    /// The executable `command` resolved to at load.
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The complete child environment (scrubbed ambient + configured).
    pub env: Vec<(String, String)>,
    pub extension_to_language: BTreeMap<String, String>,
    pub initialization_options: Value,
    pub configuration: Value,
    pub max_message_bytes: usize,
    pub max_stderr_bytes: usize,
    pub max_document_bytes: usize,
    pub shutdown_timeout: Duration,
    pub kill_grace: Duration,
    /// How long a query waits for a server that reports work in progress (indexing).
    pub ready_timeout: Duration,
}

/// How long a file's published diagnostics are waited for.
const DIAGNOSTICS_WAIT: Duration = Duration::from_secs(10);

/// How long a fresh server gets to announce that it is busy before the first query.
const ANNOUNCE_GRACE: Duration = Duration::from_millis(500);

/// An answer that says nothing (no hover, no location).
fn empty(v: &Value) -> bool {
    v.is_null() || v.as_array().is_some_and(Vec::is_empty)
}

/// A started, initialized server.
struct Instance {
    conn: Arc<Connection>,
    capabilities: lsp::ServerCapabilities,
    /// The sandbox mode it was started under (`None`: unconfined composition).
    mode: Option<dsh_sandbox::SandboxMode>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Instance>>>;

/// The provider.
pub struct StdioProvider {
    id: String,
    config: ServerConfig,
    /// The runner that confines servers started for confined sessions.
    sandbox: Option<dsh_sandbox::Sandbox>,
    pool: Mutex<HashMap<PathBuf, Slot>>,
    /// The sessions that queried each workspace's server.
    owners: Mutex<HashMap<PathBuf, BTreeSet<String>>>,
    /// Background shutdowns of released servers; disposal waits for them.
    releasing: Mutex<Vec<std::thread::JoinHandle<()>>>,
    disposed: CancellationToken,
}

enum Failure {
    Transport(String),
    Other(BoxError),
}

impl From<BoxError> for Failure {
    fn from(e: BoxError) -> Self {
        Failure::Other(e)
    }
}

fn file_uri(path: &Path) -> Result<Url, BoxError> {
    Url::from_file_path(path)
        .map_err(|()| format!("cannot express \"{}\" as a file URI", path.display()).into())
}

fn canonical_workspace(root: &Path) -> Result<PathBuf, BoxError> {
    let canonical = std::fs::canonicalize(root).map_err(|e| {
        format!(
            "workspace root \"{}\" cannot be resolved: {e}",
            root.display()
        )
    })?;
    if !canonical.is_dir() {
        return Err(format!("workspace root \"{}\" is not a directory", root.display()).into());
    }
    Ok(canonical)
}

/// Resolves the source inside the workspace and reads it, bounded.
fn read_source(
    workspace: &Path,
    file_path: &str,
    max: usize,
) -> Result<(PathBuf, String), BoxError> {
    let joined = workspace.join(file_path);
    let path = std::fs::canonicalize(&joined)
        .map_err(|e| format!("source \"{file_path}\" cannot be resolved: {e}"))?;
    if !path.starts_with(workspace) {
        return Err(format!("source \"{file_path}\" resolves outside the workspace").into());
    }
    let file = dsh_host::secrets::open_for_read(&path).map_err(|e| match e {
        dsh_host::secrets::OpenForRead::Secret => {
            format!("source \"{file_path}\" holds credentials, which tools may not read")
        }
        dsh_host::secrets::OpenForRead::Io(e) => {
            format!("source \"{file_path}\" could not be read: {e}")
        }
    })?;
    let mut bytes = Vec::new();
    let read = file
        .take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("source \"{file_path}\" could not be read: {e}"))?;
    if read > max {
        return Err(format!(
            "source \"{file_path}\" exceeds the {max}-byte limit; reading stopped after {read} bytes"
        )
        .into());
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("source \"{file_path}\" could not be read: it is not UTF-8 text"))?;
    Ok((path, text))
}

/// Whether the server offers `op` (a `true` or an options object).
fn offers(caps: &lsp::ServerCapabilities, op: Operation) -> bool {
    use lsp::OneOf;
    match op {
        Operation::GoToDefinition => matches!(
            caps.definition_provider,
            Some(OneOf::Left(true) | OneOf::Right(_))
        ),
        Operation::FindReferences => matches!(
            caps.references_provider,
            Some(OneOf::Left(true) | OneOf::Right(_))
        ),
        Operation::GoToImplementation => matches!(
            caps.implementation_provider,
            Some(
                lsp::ImplementationProviderCapability::Simple(true)
                    | lsp::ImplementationProviderCapability::Options(_)
            )
        ),
        Operation::Hover => matches!(
            caps.hover_provider,
            Some(
                lsp::HoverProviderCapability::Simple(true)
                    | lsp::HoverProviderCapability::Options(_)
            )
        ),
        Operation::Diagnostics => caps.diagnostic_provider.is_some(),
    }
}

/// Whether the server takes `didOpen`/`didClose` (full or incremental sync, or
/// `openClose: true`).
fn syncs_open_close(caps: &lsp::ServerCapabilities) -> bool {
    match &caps.text_document_sync {
        Some(lsp::TextDocumentSyncCapability::Kind(kind)) => {
            *kind == lsp::TextDocumentSyncKind::FULL
                || *kind == lsp::TextDocumentSyncKind::INCREMENTAL
        }
        Some(lsp::TextDocumentSyncCapability::Options(o)) => o.open_close == Some(true),
        None => false,
    }
}

/// The request that answers `op`.
fn method(op: Operation) -> &'static str {
    match op {
        Operation::GoToDefinition => GotoDefinition::METHOD,
        Operation::FindReferences => References::METHOD,
        Operation::GoToImplementation => GotoImplementation::METHOD,
        Operation::Hover => HoverRequest::METHOD,
        Operation::Diagnostics => DocumentDiagnosticRequest::METHOD,
    }
}

/// A protocol value as the connection sends it.
fn to_value<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// A position component as the protocol's `uinteger` (larger values are clamped).
fn clamp(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// What this host asks of a server: UTF-16 positions, work-done progress, rust-analyzer's
/// status notification, workspace folders and configuration, and the text-document
/// features the `lsp` tool queries.
fn client_capabilities() -> lsp::ClientCapabilities {
    let goto = lsp::GotoCapability {
        dynamic_registration: None,
        link_support: Some(true),
    };
    lsp::ClientCapabilities {
        general: Some(lsp::GeneralClientCapabilities {
            position_encodings: Some(vec![lsp::PositionEncodingKind::UTF16]),
            ..Default::default()
        }),
        window: Some(lsp::WindowClientCapabilities {
            work_done_progress: Some(true),
            ..Default::default()
        }),
        experimental: Some(json!({"serverStatusNotification": true})),
        workspace: Some(lsp::WorkspaceClientCapabilities {
            workspace_folders: Some(true),
            configuration: Some(true),
            ..Default::default()
        }),
        text_document: Some(lsp::TextDocumentClientCapabilities {
            synchronization: Some(lsp::TextDocumentSyncClientCapabilities {
                dynamic_registration: Some(false),
                ..Default::default()
            }),
            hover: Some(lsp::HoverClientCapabilities {
                dynamic_registration: None,
                content_format: Some(vec![lsp::MarkupKind::Markdown, lsp::MarkupKind::PlainText]),
            }),
            definition: Some(goto),
            implementation: Some(goto),
            references: Some(lsp::ReferenceClientCapabilities::default()),
            publish_diagnostics: Some(lsp::PublishDiagnosticsClientCapabilities::default()),
            diagnostic: Some(lsp::DiagnosticClientCapabilities {
                dynamic_registration: Some(false),
                related_document_support: None,
            }),
            ..Default::default()
        }),
    }
}

/// Opens `uri` on the server with its full text (version 1).
fn open(conn: &Connection, uri: &Url, language: &str, text: &str) {
    let params = lsp::DidOpenTextDocumentParams {
        text_document: lsp::TextDocumentItem {
            uri: uri.clone(),
            language_id: language.to_string(),
            version: 1,
            text: text.to_string(),
        },
    };
    conn.notify(DidOpenTextDocument::METHOD, to_value(&params));
}

/// Closes `uri` again, unless the connection is gone.
fn close(conn: &Connection, uri: &Url) {
    if conn.failure().is_none() {
        let params = lsp::DidCloseTextDocumentParams {
            text_document: lsp::TextDocumentIdentifier { uri: uri.clone() },
        };
        conn.notify(DidCloseTextDocument::METHOD, to_value(&params));
    }
}

fn call_failure(e: CallError) -> Failure {
    match e {
        CallError::Transport(m) => Failure::Transport(m),
        CallError::Response(m) => Failure::Other(m.into()),
    }
}

impl StdioProvider {
    pub fn new(id: impl Into<String>, config: ServerConfig) -> Self {
        Self {
            id: id.into(),
            config,
            sandbox: None,
            pool: Mutex::new(HashMap::new()),
            owners: Mutex::new(HashMap::new()),
            releasing: Mutex::new(Vec::new()),
            disposed: CancellationToken::new(),
        }
    }

    /// Confines servers of confined sessions with `sandbox`.
    pub fn with_sandbox(mut self, sandbox: Option<dsh_sandbox::Sandbox>) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// The program and arguments that start the server for `policy`: the configured
    /// command, wrapped by the sandbox runner in a confined mode. A confined mode without a
    /// runner refuses (the server would run model-written build scripts unconfined).
    async fn command_for(
        &self,
        policy: Option<&dsh_sandbox::ExecutionPolicy>,
    ) -> Result<(PathBuf, String, Vec<String>), Failure> {
        let c = &self.config;
        let Some(policy) = policy.filter(|p| p.mode.is_confined()) else {
            return Ok((c.program.clone(), c.command.clone(), c.args.clone()));
        };
        let Some(sandbox) = &self.sandbox else {
            return Err(Failure::Other(lsp_error(
                "LSP_SERVER_UNAVAILABLE",
                format!(
                    "language server \"{}\" cannot start: the session is in {} mode and no sandbox runner is composed to confine it",
                    c.command,
                    policy.mode.as_str()
                ),
            )));
        };
        let mut argv: Vec<std::ffi::OsString> = vec![c.program.clone().into()];
        argv.extend(c.args.iter().map(std::ffi::OsString::from));
        let confined = sandbox.0.confine(argv, policy.clone()).await.map_err(|e| {
            Failure::Other(lsp_error(
                "LSP_SERVER_UNAVAILABLE",
                format!(
                    "language server \"{}\" cannot start confined: {e}",
                    c.command
                ),
            ))
        })?;
        let command = confined.program.to_string_lossy().into_owned();
        Ok((
            confined.program,
            command,
            confined
                .args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        ))
    }

    /// The pids of the live servers (for tests and diagnostics).
    pub fn server_pids(&self) -> Vec<u32> {
        let slots: Vec<Slot> = self
            .pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        slots
            .iter()
            .filter_map(|s| s.try_lock().ok()?.as_ref()?.conn.pid())
            .collect()
    }

    async fn start(
        &self,
        workspace: &Path,
        policy: Option<&dsh_sandbox::ExecutionPolicy>,
    ) -> Result<Instance, Failure> {
        let c = &self.config;
        let (program, command, args) = self.command_for(policy).await?;
        let conn = Connection::spawn(&ServerCommand {
            program,
            command,
            args,
            env: c.env.clone(),
            cwd: workspace.to_path_buf(),
            max_message_bytes: c.max_message_bytes,
            max_stderr_bytes: c.max_stderr_bytes,
            configuration: c.configuration.clone(),
            kill_grace: c.kill_grace,
        })
        .map_err(|e| Failure::Other(e.into()))?;
        let uri = file_uri(workspace)?;
        #[allow(deprecated)] // `rootUri`: older servers read only it.
        let params = lsp::InitializeParams {
            process_id: None,
            root_uri: Some(uri.clone()),
            workspace_folders: Some(vec![lsp::WorkspaceFolder {
                uri,
                name: "workspace".into(),
            }]),
            capabilities: client_capabilities(),
            initialization_options: Some(c.initialization_options.clone()),
            ..Default::default()
        };
        let result = conn
            .request(Initialize::METHOD, to_value(&params), c.kill_grace)
            .await
            .map_err(call_failure)?;
        let capabilities = match serde_json::from_value::<lsp::InitializeResult>(result) {
            Ok(r) => r.capabilities,
            Err(e) => {
                conn.kill("malformed initialize answer");
                return Err(Failure::Other(lsp_error(
                    "LSP_MALFORMED_RESPONSE",
                    format!("language server answered initialize with malformed capabilities: {e}"),
                )));
            }
        };
        if let Some(enc) = capabilities.position_encoding.as_ref().map(|e| e.as_str())
            && enc != "utf-16"
        {
            conn.kill("unsupported position encoding");
            return Err(Failure::Other(
                format!(
                    "server negotiated unsupported position encoding \"{enc}\"; this host requires utf-16"
                )
                .into(),
            ));
        }
        conn.notify(Initialized::METHOD, to_value(&lsp::InitializedParams {}));
        // Servers announce indexing right after `initialized`; a query sent before that
        // would be answered as if there were nothing to find.
        conn.wait_noticed(ANNOUNCE_GRACE).await;
        Ok(Instance {
            conn,
            capabilities,
            mode: policy.map(|p| p.mode),
        })
    }

    async fn run(
        &self,
        instance: &Instance,
        query: &Query,
        language: &str,
        uri: &Url,
        text: &str,
    ) -> Result<Value, Failure> {
        let op = query.operation;
        if op == Operation::Diagnostics {
            return self.diagnostics(instance, language, uri, text).await;
        }
        if !offers(&instance.capabilities, op) {
            return Err(Failure::Other(lsp_error(
                "LSP_UNSUPPORTED_OPERATION",
                format!("server does not support {}", op.name()),
            )));
        }
        if !syncs_open_close(&instance.capabilities) {
            return Err(Failure::Other(lsp_error(
                "LSP_UNSUPPORTED_OPERATION",
                "server does not support the transient textDocument/didOpen this host requires",
            )));
        }
        let conn = &instance.conn;
        open(conn, uri, language, text);
        let at = lsp::TextDocumentPositionParams {
            text_document: lsp::TextDocumentIdentifier { uri: uri.clone() },
            position: lsp::Position {
                line: clamp(query.position.line),
                character: clamp(query.position.character),
            },
        };
        let params = if op == Operation::FindReferences {
            to_value(&lsp::ReferenceParams {
                text_document_position: at,
                context: lsp::ReferenceContext {
                    include_declaration: true,
                },
                work_done_progress_params: Default::default(),
                partial_result_params: Default::default(),
            })
        } else {
            to_value(&at)
        };
        // A server still indexing answers "nothing" for what it has not seen yet: wait for
        // it (bounded), and say so when it still has nothing.
        let mut busy = conn.wait_ready(self.config.ready_timeout).await;
        let mut outcome = conn
            .request(method(op), params.clone(), self.config.kill_grace)
            .await;
        // A server slow to announce its indexing (past `ANNOUNCE_GRACE`) answered as if there
        // were nothing; busy now, it is waited for and asked once more.
        if busy.is_none() && matches!(&outcome, Ok(v) if empty(v)) && conn.busy().is_some() {
            busy = conn.wait_ready(self.config.ready_timeout).await;
            outcome = conn
                .request(method(op), params, self.config.kill_grace)
                .await;
        }
        let outcome = match (outcome, busy) {
            (Ok(v), Some(work)) if empty(&v) => Err(CallError::Response(format!(
                "the language server is still busy ({work}) and has no answer yet; ask again in a moment"
            ))),
            (other, _) => other,
        };
        close(conn, uri);
        outcome.map_err(call_failure)
    }

    /// A file's diagnostics: pulled (`textDocument/diagnostic`) from a server that offers
    /// it, else the first list the server publishes after the file is opened (bounded).
    async fn diagnostics(
        &self,
        instance: &Instance,
        language: &str,
        uri: &Url,
        text: &str,
    ) -> Result<Value, Failure> {
        let conn = &instance.conn;
        let mark = conn.publications();
        open(conn, uri, language, text);
        let _ = conn.wait_ready(self.config.ready_timeout).await;
        let outcome = if offers(&instance.capabilities, Operation::Diagnostics) {
            let params = lsp::DocumentDiagnosticParams {
                text_document: lsp::TextDocumentIdentifier { uri: uri.clone() },
                identifier: None,
                previous_result_id: None,
                work_done_progress_params: Default::default(),
                partial_result_params: Default::default(),
            };
            conn.request(
                DocumentDiagnosticRequest::METHOD,
                to_value(&params),
                self.config.kill_grace,
            )
            .await
            // A `null` report is an empty one (the tool says "no problems", not "nothing
            // reported").
            .map(|report| match report {
                Value::Null => json!({"reported": []}),
                report => json!({"reported": report}),
            })
        } else {
            let published = conn.diagnostics_after(uri, mark, DIAGNOSTICS_WAIT).await;
            Ok(json!({"reported": to_value(&published)}))
        };
        close(conn, uri);
        outcome.map_err(call_failure)
    }

    async fn attempt(
        &self,
        slot: &mut Option<Instance>,
        workspace: &Path,
        query: &Query,
        language: &str,
        uri: &Url,
        text: &str,
    ) -> Result<Value, Failure> {
        if slot.as_ref().is_some_and(|i| i.conn.failure().is_some()) {
            *slot = None;
        }
        // A server started under another sandbox mode is not this session's to use.
        let mode = query.policy.as_ref().map(|p| p.mode);
        if let Some(other) = slot.take_if(|i| i.mode != mode) {
            other.conn.kill("the sandbox mode changed");
        }
        if slot.is_none() {
            *slot = Some(self.start(workspace, query.policy.as_ref()).await?);
        }
        let Some(instance) = slot.as_ref() else {
            return Err(Failure::Other("language server is not running".into()));
        };
        self.run(instance, query, language, uri, text).await
    }

    async fn query_inner(&self, query: Query, language: String) -> Result<QueryResult, BoxError> {
        let workspace = canonical_workspace(&query.workspace_root)?;
        if let Some(owner) = &query.owner {
            self.owners
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(workspace.clone())
                .or_default()
                .insert(owner.clone());
        }
        let slot: Slot = self
            .pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(workspace.clone())
            .or_default()
            .clone();
        let mut guard = slot.lock().await;
        let (path, text) =
            read_source(&workspace, &query.file_path, self.config.max_document_bytes)?;
        let uri = file_uri(&path)?;
        let mut result = None;
        for round in 0..2 {
            match self
                .attempt(&mut guard, &workspace, &query, &language, &uri, &text)
                .await
            {
                Ok(v) => {
                    result = Some(v);
                    break;
                }
                Err(Failure::Transport(message)) => {
                    if let Some(dead) = guard.take() {
                        dead.conn.kill("transport failure");
                    }
                    if round == 1 {
                        return Err(message.into());
                    }
                    tracing::debug!(
                        "lsp-stdio {}: {message}; retrying on a fresh server",
                        self.id
                    );
                }
                Err(Failure::Other(e)) => return Err(e),
            }
        }
        let raw = result.unwrap_or(Value::Null);
        let workspace_uri = file_uri(&workspace)?;
        Ok(match query.operation {
            Operation::Hover => QueryResult::Hover(translate::hover(&raw)?),
            Operation::Diagnostics => QueryResult::Diagnostics(match raw.get("reported") {
                None | Some(Value::Null) => None,
                Some(list) => Some(translate::diagnostics(list)?),
            }),
            Operation::GoToDefinition
            | Operation::FindReferences
            | Operation::GoToImplementation => QueryResult::Locations {
                locations: translate::locations(&raw)?,
                workspace_uri: workspace_uri.to_string(),
            },
        })
    }

    /// Drops `owner` from every workspace; a server left without owners is shut down in
    /// the background (the next query starts a fresh one).
    fn release_owner(&self, owner: &str) {
        let idle: Vec<PathBuf> = {
            let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
            let mut idle = Vec::new();
            owners.retain(|ws, set| {
                if set.remove(owner) && set.is_empty() {
                    idle.push(ws.clone());
                    return false;
                }
                true
            });
            idle
        };
        for ws in idle {
            let slot = self
                .pool
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&ws)
                .cloned();
            // A slot in use belongs to a query of another session that is still running.
            let conn = slot.and_then(|s| s.try_lock().ok()?.take().map(|i| i.conn));
            if let Some(conn) = conn {
                let (timeout, grace) = (self.config.shutdown_timeout, self.config.kill_grace);
                let spawned = std::thread::Builder::new()
                    .name("dsh-lsp-shutdown".into())
                    .spawn(move || conn.shutdown_blocking(timeout, grace));
                if let Ok(handle) = spawned {
                    let mut releasing = self.releasing.lock().unwrap_or_else(|p| p.into_inner());
                    releasing.retain(|h| !h.is_finished());
                    releasing.push(handle);
                }
            }
        }
    }

    /// Shuts every server down (graceful, then the group is killed), in parallel, and
    /// waits for them. Later queries fail with `LSP_DISPOSED`.
    pub fn dispose_blocking(&self) {
        self.disposed.cancel();
        let slots: Vec<Slot> = self
            .pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, s)| s)
            .collect();
        let (timeout, grace) = (self.config.shutdown_timeout, self.config.kill_grace);
        let mut threads = Vec::new();
        for slot in slots {
            // A slot still locked belongs to a query in flight; its connection is killed
            // when that query's future is dropped (the provider's cancel token fired).
            let conn = match slot.try_lock() {
                Ok(mut g) => g.take().map(|i| i.conn),
                Err(_) => None,
            };
            if let Some(conn) = conn {
                threads.push(std::thread::spawn(move || {
                    conn.shutdown_blocking(timeout, grace);
                }));
            }
        }
        threads.extend(
            self.releasing
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain(..),
        );
        for t in threads {
            let _ = t.join();
        }
    }
}

impl LspProvider for StdioProvider {
    fn id(&self) -> &str {
        &self.id
    }

    fn extension_to_language(&self) -> &BTreeMap<String, String> {
        &self.config.extension_to_language
    }

    fn query(
        self: Arc<Self>,
        query: Query,
        language_id: String,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<QueryResult, BoxError>> {
        let this = self;
        Box::pin(async move {
            if this.disposed.is_cancelled() {
                return Err(lsp_error("LSP_DISPOSED", "lsp-stdio provider is disposed"));
            }
            let disposed = this.disposed.clone();
            tokio::select! {
                r = this.query_inner(query, language_id) => r,
                () = cancel.cancelled() => Err("the LSP query was cancelled".into()),
                () = disposed.cancelled() => Err(lsp_error("LSP_DISPOSED", "lsp-stdio provider is disposed")),
            }
        })
    }

    fn release(&self, owner: &str) {
        self.release_owner(owner);
    }
}
