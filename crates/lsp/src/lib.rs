//! dsh-lsp: language servers for the model.
//!
//! * [`LspService`] (`@deepseek-ai/dsh-lsp`) — providers registered by id and file
//!   extension; a query is routed by the final extension of its path.
//! * [`StdioProvider`] (`@deepseek-ai/dsh-lsp-stdio`) — a configured (or, with `discover`,
//!   found-on-PATH) stdio language server, one process per canonical workspace started on
//!   first use, shut down when the row unloads.
//! * [`LspTool`] (`@deepseek-ai/dsh-tool-lsp`) — the model-facing `lsp` tool.
//! * [`LspDiagnosticsTool`] (`@deepseek-ai/dsh-tool-lsp-diagnostics`, ours) — a file's
//!   diagnostics (pulled, or the list the server publishes once the file is opened).
//!
//! A server that reports work in progress (`$/progress`, rust-analyzer's
//! `experimental/serverStatus`) is waited for before a query (bounded by the server's
//! `readyTimeoutMs`, default 30 s); an empty answer given while it is still busy says so.
//!
//! Invariants: every server process runs in its own process group registered with the
//! reaper and dies with its instance, its provider or dsh; no server output (garbage,
//! oversized frames, crashes, silence) panics — it becomes an error naming the problem, and
//! a transport failure is retried once on a fresh process.

mod connection;
mod framing;
mod plugins;
mod render;
mod rustup;
mod service;
mod stdio;
mod tool;
mod translate;

pub use connection::{CallError, Connection, ServerCommand};
pub use framing::{MAX_HEADER_BYTES, encode, read_message};
pub use plugins::{
    LspPlugin, LspStdioPlugin, ToolLspDiagnosticsPlugin, ToolLspPlugin, register_catalog,
};
pub use render::{format_diagnostics, format_hover, format_locations, render_uri};
pub use service::{
    Diagnostic, Hover, Location, LspProvider, LspService, Operation, Position, Query, QueryResult,
    Range, extension_of, lsp_error,
};
pub use stdio::{ServerConfig, StdioProvider};
pub use tool::{LspDiagnosticsTool, LspTool, PROMPT_SECTION, ToolLspConfig, parse_args};
pub use translate::{hover as translate_hover, locations as translate_locations};
