//! Tools: definitions (schema separate from handler), the scoped registry, and the staged
//! pipeline `tools/pre-execute` → `tools/execute` → `tools/post-execute` → `tools/result`
//! by which every outcome — success, denial, unknown tool, bad arguments, failure,
//! cancellation — becomes one result.

mod client_files;
mod client_terminals;
mod exec;
mod output;

mod registry;
mod schema;
mod shell_vars;
mod spill;
pub mod text;
mod tool;
mod typed;

pub use client_files::{AskAtOnce, ClientFileRoutes, ClientFiles, asks_at_once, client_files};
pub use client_terminals::{
    ClientTerminalRoutes, ClientTerminals, TerminalCommand, TerminalExit, client_terminals,
};
pub use exec::{
    Approval, ApprovalOutcome, ApprovalRequest, ApprovalService, Decision, Execute, PostExecute,
    PostExecutePayload, PostToolDecision, PreExecute, PreToolDecision, RemoteApprovals,
    ToolExecution, ToolFailure, ToolResult, ToolResultEvent, ToolResultPayload, parse_arguments,
};
pub use output::{OutputStream, OutputTap, ToolOutputEvent, ToolOutputPayload};
pub use registry::{
    DuplicateTool, ExecutionMode, Guard, Prepared, RUN_CODE, ToolRegistry, ToolView, ToolsMode,
    json_text,
};
pub use schema::{ObjectSchema, Prop};
pub use shell_vars::HostShellVars;
pub use spill::{SpillRef, SpillRequest, SpillStore, TextSpillStore};
pub use tool::{Tool, ToolOutput, ToolRunContext, args_error};
pub use typed::{Reply, Typed, TypedTool, lenient, output_schema, params_schema};
