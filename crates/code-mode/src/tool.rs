//! `run_code`: runs one program on its own thread and serves its tool calls through the
//! registry's whole pipeline (policies, sandbox, approvals, `tools/result`), logging each
//! as `tool/code-dispatch-start` / `tool/code-dispatch`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dsh_kernel::{BoxError, HarnessError};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_tools::{RUN_CODE, Reply, ToolExecution, ToolRegistry, ToolRunContext, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::engine::{HostCall, HostReply, Limits, RunOutcome, run_program};
use crate::render::render_value;

const DESCRIPTION: &str = "Run a TypeScript program that calls the available tools. Two required \
arguments: `code`, the BODY of an async function (`await` and `return` work at its top level), \
and `description`, a short summary of what the program does. Type syntax is erased, not checked, \
before the program runs, so use only erasable TypeScript (no `enum`, `namespace` or parameter \
properties). Call a tool as `await tools.name(args)`, as the system prompt declares them. Only \
what the program prints or returns becomes output, so keep it to what you need. Images that \
tools return are attached after the run.";
const CODE_DESCRIPTION: &str = "The program: the body of an async TypeScript function (types are \
erased before it runs).";
const LABEL_DESCRIPTION: &str = "What this program does, in active voice and 5-10 words (shown \
in the UI), e.g. \"Count TODO markers across packages\".";

/// The `run_code` tool (registered as `dsh_tools::Typed::new(RunCodeTool::new(limits))`).
pub struct RunCodeTool {
    limits: Limits,
}

impl RunCodeTool {
    pub fn new(limits: Limits) -> Self {
        Self { limits }
    }
}

// The arguments (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
pub struct RunCodeArgs {
    #[schemars(description = CODE_DESCRIPTION)]
    code: String,
    #[schemars(description = LABEL_DESCRIPTION)]
    description: String,
}

fn run_failed(message: String) -> BoxError {
    Box::new(HarnessError::new(
        "CodeRunFailedError",
        "CODE_RUN_FAILED",
        message,
    ))
}

impl TypedTool for RunCodeTool {
    type Args = RunCodeArgs;
    type Value = Value;

    fn name(&self) -> String {
        RUN_CODE.into()
    }

    fn description(&self) -> String {
        DESCRIPTION.into()
    }

    async fn run(
        self: Arc<Self>,
        args: RunCodeArgs,
        ctx: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let limits = self.limits.clone();
        let RunCodeArgs { code, description } = args;
        if description.trim().is_empty() {
            return Err("description is empty: say in a few words what the program does".into());
        }
        let registry = ctx.ctx.require::<ToolRegistry>()?;
        let session = ctx.session.as_ref().map(|s| s.id());
        let bindings: Vec<String> = registry
            .native_schemas_in(&ctx.ctx, session.as_deref())
            .into_iter()
            .map(|s| s.name)
            .filter(|n| n != RUN_CODE)
            .collect();
        let outcome = run(code, bindings, limits, &ctx, &registry).await;
        if let Some(error) = outcome.error {
            let logs = if outcome.logs.is_empty() {
                String::new()
            } else {
                format!("\nCaptured output:\n{}", outcome.logs.join("\n"))
            };
            return Err(run_failed(format!(
                "code run failed ({}): {}{logs}",
                error.kind.as_str(),
                error.message
            )));
        }
        let rendered = outcome.value.as_ref().map(render_value).unwrap_or_default();
        let parts: Vec<String> = [outcome.logs.join("\n"), rendered]
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
        let text = if parts.is_empty() {
            "(run_code completed with no output)".to_string()
        } else {
            parts.join("\n")
        };
        let mut value = json!({"logs": outcome.logs});
        if let (Some(v), Some(map)) = (outcome.value, value.as_object_mut()) {
            map.insert("result".into(), v);
        }
        Ok(Reply::text(text).with_value(value))
    }
}

/// Runs the program on a dedicated thread while this task serves its tool calls, in
/// submission order as upstream schedules them: consecutive concurrency-safe calls (reads,
/// searches, subagents, …) overlap — a `Promise.all` over them runs them together — and
/// any other call waits for the calls before it and runs alone.
async fn run(
    code: String,
    bindings: Vec<String>,
    limits: Limits,
    run: &ToolRunContext,
    registry: &Arc<ToolRegistry>,
) -> RunOutcome {
    let (call_tx, mut call_rx) = tokio::sync::mpsc::unbounded_channel::<HostCall>();
    let (reply_tx, reply_rx) = std::sync::mpsc::channel::<HostReply>();
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<RunOutcome>();
    let abort = Arc::new(AtomicBool::new(false));
    let engine_abort = abort.clone();
    let spawned = std::thread::Builder::new()
        .name("dsh-run-code".into())
        .stack_size(16 * 1024 * 1024)
        .spawn(move || {
            let outcome = run_program(&code, &bindings, &limits, call_tx, reply_rx, engine_abort);
            let _ = done_tx.send(outcome);
        });
    if let Err(e) = spawned {
        return RunOutcome {
            error: Some(crate::engine::RunFailure {
                kind: crate::engine::FailureKind::WorkerExit,
                message: format!("could not start the program thread: {e}"),
            }),
            ..RunOutcome::default()
        };
    }
    // The run's own token: cancelled with the call, and when the program settles, so a
    // sub-call still in flight is stopped rather than orphaned.
    let cancel = run.cancel.child_token();
    let mut dispatches = 0u64;
    let mut in_flight = futures::stream::FuturesUnordered::new();
    // Calls not started yet, in submission order, and whether the running one is exclusive.
    let mut queued: std::collections::VecDeque<HostCall> = Default::default();
    let mut exclusive_running = false;
    let mut calls_open = true;
    loop {
        while let Some(next) = queued.front() {
            let parallel = registry.get(&run.ctx, &next.name).is_some_and(|t| {
                t.validate(&next.arguments).is_ok() && t.concurrency_safe(&next.arguments)
            });
            if exclusive_running || (!parallel && !in_flight.is_empty()) {
                break;
            }
            let Some(call) = queued.pop_front() else {
                break;
            };
            dispatches += 1;
            exclusive_running = !parallel;
            in_flight.push(dispatch(run, registry, &cancel, dispatches, call));
        }
        tokio::select! {
            outcome = &mut done_rx => {
                // Calls the program left behind are stopped and still settle (and log);
                // queued ones never start.
                cancel.cancel();
                while futures::StreamExt::next(&mut in_flight).await.is_some() {}
                return outcome.unwrap_or_else(|_| RunOutcome {
                    error: Some(crate::engine::RunFailure {
                        kind: crate::engine::FailureKind::WorkerExit,
                        message: "the program thread ended without a result".into(),
                    }),
                    ..RunOutcome::default()
                });
            }
            call = call_rx.recv(), if calls_open => {
                let Some(call) = call else {
                    calls_open = false;
                    continue;
                };
                queued.push_back(call);
            }
            Some(reply) = futures::StreamExt::next(&mut in_flight), if !in_flight.is_empty() => {
                if in_flight.is_empty() {
                    exclusive_running = false;
                }
                let _ = reply_tx.send(reply);
            }
            () = run.cancel.cancelled(), if !abort.load(Ordering::Relaxed) => {
                abort.store(true, Ordering::Relaxed);
                let _ = reply_tx.send(HostReply::Abort { reason: "run_code was cancelled".into() });
            }
        }
    }
}

/// One program tool call: logged start, the full pipeline, logged settlement; images and
/// contexts forwarded to the outer call.
async fn dispatch(
    run: &ToolRunContext,
    registry: &Arc<ToolRegistry>,
    cancel: &tokio_util::sync::CancellationToken,
    n: u64,
    call: HostCall,
) -> HostReply {
    let sub_call_id = format!("{}:code:{n}", run.call_id);
    let head = json!({
        "rootCallId": run.call_id,
        "parentCallId": run.call_id,
        "subCallId": sub_call_id,
        "name": call.name,
        "arguments": call.arguments,
    });
    if let Some(session) = &run.session
        && let Err(e) = session.append("tool/code-dispatch-start", head.clone(), None)
    {
        tracing::warn!("run_code: could not log a dispatch start: {e}");
    }
    let exec = ToolExecution {
        call_id: sub_call_id,
        root_call_id: run.call_id.clone(),
        name: call.name.clone(),
        arguments: call.arguments,
        ctx: run.ctx.clone(),
        session: run.session.clone(),
        cwd: run.cwd.clone(),
        cancel: cancel.child_token(),
        parent: Some(run.call_id.clone()),
    };
    let result = registry.execute(exec).await;
    if let Some(session) = &run.session {
        let mut settled = head;
        if let Some(map) = settled.as_object_mut() {
            map.insert("isError".into(), Value::Bool(result.is_error));
            map.insert(
                "content".into(),
                serde_json::to_value(&result.content).unwrap_or(Value::Null),
            );
        }
        if let Err(e) = session.append("tool/code-dispatch", settled, None) {
            tracing::warn!("run_code: could not log a dispatch: {e}");
        }
    }
    if !result.is_error && result.content.iter().any(|b| b.block_type() == "image") {
        run.defer_context(Message::user(
            result.content.clone(),
            MessageSource::plugin("tools-code-mode", []),
        ));
    }
    for context in result.additional_contexts.iter().cloned() {
        run.defer_context(context);
    }
    if result.concludes_turn {
        run.conclude_turn();
    }
    if result.is_error {
        let message = result
            .error
            .map(|e| e.message)
            .unwrap_or_else(|| "tool call failed".into());
        return HostReply::Rejected {
            id: call.id,
            message,
        };
    }
    let value = result
        .value
        .unwrap_or_else(|| Value::String(text_of(&result.content)));
    HostReply::Resolved { id: call.id, value }
}

/// The text blocks of a result, joined: the value of a tool that reports no typed value.
fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_tools::{ObjectSchema, Prop};
    use pretty_assertions::assert_eq;

    #[test]
    fn the_derived_parameter_schema_is_the_builders() {
        let built = ObjectSchema::new()
            .required("code", Prop::string(CODE_DESCRIPTION))
            .required("description", Prop::string(LABEL_DESCRIPTION));
        assert_eq!(
            dsh_kernel::json::to_string(
                &dsh_tools::params_schema::<RunCodeArgs>()
                    .unwrap()
                    .to_value()
            ),
            dsh_kernel::json::to_string(&built.to_value())
        );
    }
}
