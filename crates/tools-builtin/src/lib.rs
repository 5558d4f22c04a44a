//! The core model-facing tools and their plugins:
//!
//! * `bash` — one-shot `bash -c` in its own process group ([`ToolBashPlugin`], executor
//!   rows [`BashLocalPlugin`] / [`BashSandboxPlugin`], [`ShellEnvPlugin`]);
//! * `read`, `write`, `edit` ([`ToolFsPlugin`]) over the local backend ([`FsLocalPlugin`])
//!   or the fenced one ([`FsSandboxPlugin`]), with read-before-edit
//!   ([`ObservationPolicyPlugin`]);
//! * `glob`, `grep` ([`ToolFsSearchPlugin`]);
//! * `str_replace_editor` ([`ToolStrReplaceEditorPlugin`]);
//! * `todo_write` ([`ToolTodoPlugin`]).
//!
//! Model-facing result and error texts follow upstream exactly; descriptions and prompt
//! guidance ([`tool_guidance`]) are our own words.

mod bash;
mod catalog;
mod editor;
mod errors;
mod fs;
mod guidance;
mod outputs;
mod paths;
mod sandbox;
mod search;
mod todo;

pub use bash::{
    BashExecutor, BashLocalPlugin, BashSandboxPlugin, BashSettings, BashTool, BashToolConfig,
    SessionJsonlLocator, ShellEnv, ShellEnvPlugin, ToolBashPlugin,
};
pub use catalog::{SubprocessLocalPlugin, register_catalog};
pub use editor::{EditorConfig, StrReplaceEditorTool, ToolStrReplaceEditorPlugin};
pub use fs::{
    EditTool, FsBackend, FsEditIntent, FsLocalPlugin, FsObserved, FsSandboxPlugin, FsWriteIntent,
    IntentRequest, Observation, ObservationPolicyPlugin, ObservedPayload, ReadImageTool,
    ReadLimits, ReadTool, ToolFsPlugin, WriteIntent, WriteTool,
};
pub use guidance::{PromptSection, tool_guidance};
pub use paths::Target;
pub use sandbox::{ExecutionPolicy, SandboxMode, SandboxPolicy};
pub use search::{
    GlobTool, GrepTool, SearchConfig, SpillRef, SpillRequest, SpillStore, TextSpillStore,
    ToolFsSearchPlugin, sample_across_top_level,
};
pub use todo::{InProgressPolicy, TodoWriteTool, ToolTodoPlugin};
