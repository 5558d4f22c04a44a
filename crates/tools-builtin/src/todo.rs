//! `todo_write`: replace the session's task list; each call appends a `todo/write` event.

use std::collections::HashSet;
use std::sync::Arc;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_session::types;
use dsh_tools::{Reply, ToolRegistry, ToolRunContext, Typed, TypedTool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::errors::{self, js_string};

const DESCRIPTION_HEAD: &str = "Maintains the checklist for the task in progress. Each call carries the FULL checklist and \
overwrites whatever was there; single items cannot be patched. Reach for it when a job takes several steps: write down one \
todo per concrete step up front, then keep the statuses current so progress is visible. ";

const DESCRIPTION_PARALLEL: &str = "Any todo you are working on right now is `in_progress`; that can be several when work \
truly happens side by side (subagents, background commands running together) and is one when you work step by step. As long \
as anything is left to do, something should be `in_progress`. ";

const DESCRIPTION_SINGLE: &str = "Only ONE todo may be `in_progress` at a time (more is rejected); as long as anything is left \
to do, exactly one should carry that status. ";

const DESCRIPTION_TAIL: &str = "Flip a todo to `completed` the moment it is finished instead of saving completions up; \
nothing stays `in_progress` once everything is done. A one-step job needs no checklist. The statuses are `pending` (not begun), \
`in_progress` (under way) and `completed` (finished).";

/// How many todos may be `in_progress` at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InProgressPolicy {
    /// At most one (more is rejected).
    Single,
    /// Any number, for work that really runs in parallel.
    Parallel,
}

/// The `todo_write` tool.
#[derive(Clone)]
pub struct TodoWriteTool {
    allow_parallel: bool,
}

// The arguments (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
pub struct TodoArgs {
    /// The COMPLETE task list; it replaces the previous one.
    todos: Vec<TodoItem>,
}

#[derive(Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoItem {
    /// The task, as one short imperative line.
    content: String,
    /// pending (not started), in_progress (now) or completed (done).
    status: TodoStatus,
}

#[derive(Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Completed,
}

/// What a Code Mode binding of `todo_write` resolves to.
#[derive(Serialize, JsonSchema)]
pub struct TodoValue {
    todos: Vec<TodoItem>,
    counts: TodoCounts,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TodoCounts {
    pending: usize,
    in_progress: usize,
    completed: usize,
}

impl TodoWriteTool {
    pub fn new(policy: InProgressPolicy) -> Self {
        Self {
            allow_parallel: matches!(policy, InProgressPolicy::Parallel),
        }
    }
}

impl TypedTool for TodoWriteTool {
    type Args = TodoArgs;
    type Value = TodoValue;

    fn name(&self) -> String {
        "todo_write".into()
    }

    fn description(&self) -> String {
        let middle = if self.allow_parallel {
            DESCRIPTION_PARALLEL
        } else {
            DESCRIPTION_SINGLE
        };
        format!("{DESCRIPTION_HEAD}{middle}{DESCRIPTION_TAIL}")
    }

    async fn run(
        self: Arc<Self>,
        args: TodoArgs,
        run: ToolRunContext,
    ) -> Result<Reply<TodoValue>, BoxError> {
        let mut todos: Vec<TodoItem> = Vec::new();
        let mut seen = HashSet::new();
        for item in args.todos {
            let content = item.content.trim().to_string();
            if content.is_empty() {
                return Err(errors::plain(
                    "invalid todo: `content` must be a non-empty string",
                ));
            }
            if !seen.insert(content.clone()) {
                return Err(errors::plain(format!(
                    "invalid todos: duplicate content {}",
                    js_string(&content)
                )));
            }
            todos.push(TodoItem { content, ..item });
        }
        let count = |s: TodoStatus| todos.iter().filter(|t| t.status == s).count();
        let counts = TodoCounts {
            pending: count(TodoStatus::Pending),
            in_progress: count(TodoStatus::InProgress),
            completed: count(TodoStatus::Completed),
        };
        let active = counts.in_progress;
        if !self.allow_parallel && active > 1 {
            return Err(errors::plain(format!(
                "invalid todos: {active} tasks are in_progress, but only one may be at a time; keep one in_progress and set the others to pending or completed"
            )));
        }
        let Some(session) = &run.session else {
            return Err(errors::plain("todo_write requires an owning agent session"));
        };
        session
            .append(types::TODO_WRITE, json!({ "todos": todos }), None)
            .map_err(|e| errors::plain(e.to_string()))?;
        let text = format!(
            "Updated todo list: {} pending, {} in progress, {} completed.",
            counts.pending, active, counts.completed
        );
        Ok(Reply::text(text).with_value(TodoValue { todos, counts }))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TodoConfig {
    allow_parallel_in_progress: bool,
}

/// `@deepseek-ai/dsh-tool-todo` (config `{allowParallelInProgress}`, required).
pub struct ToolTodoPlugin;

impl Plugin for ToolTodoPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-todo"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: TodoConfig = config.parse()?;
        let policy = if c.allow_parallel_in_progress {
            InProgressPolicy::Parallel
        } else {
            InProgressPolicy::Single
        };
        let tool = Typed::new(TodoWriteTool::new(policy))?;
        ctx.require::<ToolRegistry>()?
            .register(ctx, Arc::new(tool))?;
        Ok(())
    }
}
