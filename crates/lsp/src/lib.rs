//! dsh-lsp: language servers for the model.
//!
//! * [`LspService`] (`@deepseek-ai/dsh-lsp`) — providers registered by id and file
//!   extension; a query is routed by the final extension of its path.
//! * [`StdioProvider`] (`@deepseek-ai/dsh-lsp-stdio`) — a configured (or, with `discover`,
//!   found-on-PATH) stdio language server, one process per canonical workspace started on
//!   first use, shut down when the row unloads.
//! * [`LspTool`] (`@deepseek-ai/dsh-tool-lsp`) — the model-facing `lsp` tool.
//!
//! Invariants: every server process runs in its own process group registered with the
//! reaper and dies with its instance, its provider or dsh; no server output (garbage,
//! oversized frames, crashes, silence) panics — it becomes an error naming the problem, and
//! a transport failure is retried once on a fresh process.

mod connection;
mod framing;
mod plugins;
mod render;
mod service;
mod stdio;
mod tool;
mod translate;

pub use connection::{CallError, Connection, ServerCommand};
pub use framing::{MAX_HEADER_BYTES, encode, read_message};
pub use plugins::{LspPlugin, LspStdioPlugin, ToolLspPlugin, register_catalog};
pub use render::{format_hover, format_locations, render_uri};
pub use service::{
    Hover, Location, LspProvider, LspService, Operation, Position, Query, QueryResult, Range,
    extension_of, lsp_error,
};
pub use stdio::{ServerConfig, StdioProvider};
pub use tool::{LspTool, PROMPT_SECTION, ToolLspConfig, parse_args};
pub use translate::{hover as translate_hover, locations as translate_locations};
