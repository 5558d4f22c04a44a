//! Terminals for the model.
//!
//! * [`TerminalService`] (`@deepseek-ai/dsh-terminal`) — owner-scoped sessions `pty-<n>`,
//!   closed with their owner.
//! * [`LocalBackend`] (`@deepseek-ai/dsh-terminal-bash`) — an interactive bash on a real
//!   pseudo-terminal, confined by the sandbox runner in confined modes (bubblewrap without
//!   `--new-session`, so the shell keeps its terminal), with readiness detection: prompt
//!   marker, a foreground program blocked reading stdin, idle output, exit, timeout.
//! * `terminal_*` tools (`@deepseek-ai/dsh-tool-terminal`) with upstream's renderings;
//!   background sends are `pty-send` jobs.
//! * [`PersistentBashTool`] (`@deepseek-ai/dsh-tool-bash-persistent`) — `bash` over one
//!   terminal per agent, so state carries over between calls.

mod inspect;
mod local;
mod outputs;
mod persistent;
mod plugins;
mod sanitize;
mod service;
mod tools;
mod types;

pub use local::{LocalBackend, LocalConfig};
pub use persistent::{PersistentBashTool, PersistentConfig, ansi_c_quote, extract, wrap};
pub use plugins::{
    TerminalBashPlugin, TerminalPlugin, ToolBashPersistentPlugin, ToolTerminalPlugin,
    register_catalog,
};
pub use sanitize::Sanitizer;
pub use service::{TerminalInfo, TerminalService};
pub use tools::{
    ToolTerminalConfig, bound_text, render_list, render_open, render_read, render_send,
};
pub use types::{
    ReadPage, SendHandle, SendRequest, SendResult, SessionStatus, SpawnSpec, TerminalBackend,
    TerminalSession, TerminalSignal, WaitReason,
};
