//! `todo_write`: replace the session's task list; each call appends a `todo/write` event.

use std::collections::HashSet;
use std::sync::Arc;

use dsh_kernel::{BoxError, BoxFuture, Context, Plugin, PluginConfig};
use dsh_llm::ToolSchema;
use dsh_session::types;
use dsh_tools::{ObjectSchema, Prop, Tool, ToolOutput, ToolRegistry, ToolRunContext};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::errors::{self, js_string};

const STATUSES: [&str; 3] = ["pending", "in_progress", "completed"];

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
    inner: Arc<Inner>,
}

struct Inner {
    schema: ToolSchema,
    params: ObjectSchema,
    allow_parallel: bool,
}

impl TodoWriteTool {
    pub fn new(policy: InProgressPolicy) -> Self {
        let allow_parallel_in_progress = matches!(policy, InProgressPolicy::Parallel);
        let middle = if allow_parallel_in_progress {
            DESCRIPTION_PARALLEL
        } else {
            DESCRIPTION_SINGLE
        };
        let item = ObjectSchema::new()
            .required(
                "content",
                Prop::string("The task, as one short imperative line."),
            )
            .required(
                "status",
                Prop::enumeration(
                    "pending (not started), in_progress (now) or completed (done).",
                    &STATUSES,
                ),
            )
            .closed();
        let params = ObjectSchema::new().required(
            "todos",
            Prop::array(
                "The COMPLETE task list; it replaces the previous one.",
                Prop::Object(item),
            ),
        );
        let schema = ToolSchema {
            name: "todo_write".into(),
            description: format!("{DESCRIPTION_HEAD}{middle}{DESCRIPTION_TAIL}"),
            parameters: params.to_value().into(),
        };
        Self {
            inner: Arc::new(Inner {
                schema,
                params,
                allow_parallel: allow_parallel_in_progress,
            }),
        }
    }
}

impl Inner {
    fn run(&self, args: Value, run: ToolRunContext) -> Result<ToolOutput, BoxError> {
        let raw = args
            .get("todos")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut todos: Vec<(String, String)> = Vec::new();
        let mut seen = HashSet::new();
        for item in &raw {
            let content = item
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .trim()
                .to_string();
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
            let status = item
                .get("status")
                .and_then(Value::as_str)
                .unwrap_or("pending")
                .to_string();
            todos.push((content, status));
        }
        let count = |s: &str| todos.iter().filter(|(_, status)| status == s).count();
        let active = count("in_progress");
        if !self.allow_parallel && active > 1 {
            return Err(errors::plain(format!(
                "invalid todos: {active} tasks are in_progress, but only one may be at a time; keep one in_progress and set the others to pending or completed"
            )));
        }
        let Some(session) = &run.session else {
            return Err(errors::plain("todo_write requires an owning agent session"));
        };
        let list: Vec<Value> = todos
            .iter()
            .map(|(content, status)| {
                let mut m = Map::new();
                m.insert("content".into(), json!(content));
                m.insert("status".into(), json!(status));
                Value::Object(m)
            })
            .collect();
        let mut data = Map::new();
        data.insert("todos".into(), Value::Array(list.clone()));
        session
            .append(types::TODO_WRITE, Value::Object(data), None)
            .map_err(|e| errors::plain(e.to_string()))?;
        run.set_value(json!({
            "todos": list,
            "counts": {
                "pending": count("pending"),
                "inProgress": active,
                "completed": count("completed"),
            },
        }));
        Ok(ToolOutput::text(format!(
            "Updated todo list: {} pending, {} in progress, {} completed.",
            count("pending"),
            active,
            count("completed")
        )))
    }
}

impl Tool for TodoWriteTool {
    fn schema(&self) -> &ToolSchema {
        &self.inner.schema
    }

    fn output_schema(&self) -> Option<&Value> {
        Some(crate::outputs::todo_write())
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        self.inner.params.validate(args)
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.run(args, ctx) })
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
        let tool = TodoWriteTool::new(policy);
        ctx.require::<ToolRegistry>()?
            .register(ctx, Arc::new(tool))?;
        Ok(())
    }
}
