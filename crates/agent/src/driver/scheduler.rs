//! The tool scheduler: policy in model order, bounded parallel bodies, results committed
//! in model order, synthetic results for calls never started after a cancel.

use std::sync::Arc;

use dsh_llm::Message;
use dsh_session::{InboxTarget, SurfaceIntent, ToolCallData, ToolResultData, types};
use dsh_tools::{ExecutionMode, Prepared, ToolExecution, ToolResult, parse_arguments};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;

use super::LoopAgent;
use super::turn::Fail;
use crate::handle::Agent;

/// One model-requested call: `(id, name, raw arguments)`.
pub(crate) type Call = (String, String, String);

struct Slot {
    exec: ToolExecution,
    result: ToolResult,
    needs_post: bool,
}

struct GroupOutcome {
    consumed: usize,
    aborted: bool,
    concluded: bool,
}

impl LoopAgent {
    fn make_exec(&self, call: &Call, token: &CancellationToken) -> ToolExecution {
        let mut exec = ToolExecution::new(
            call.0.clone(),
            call.1.clone(),
            parse_arguments(&call.2),
            self.ctx().clone(),
        );
        exec.session = Some(self.session().clone());
        exec.cwd = self.cwd();
        exec.cancel = token.clone();
        exec
    }

    fn append_tool_call(&self, turn: u64, step: u64, call: &Call) -> Result<u64, Fail> {
        let data = ToolCallData {
            turn,
            step,
            call_id: call.0.clone(),
            name: call.1.clone(),
            arguments: call.2.clone(),
        };
        self.session()
            .append(types::TOOL_CALL, dsh_session::to_data(&data), None)
            .map(|e| e.seq)
            .map_err(|e| Fail::Error(Box::new(e)))
    }

    fn append_tool_result(
        &self,
        turn: u64,
        step: u64,
        call_id: &str,
        result: &ToolResult,
        call_seq: u64,
    ) -> Result<(), Fail> {
        let message = Message::tool_result(call_id, result.content.clone(), result.is_error);
        let info = result.error.as_ref().and_then(|e| e.info.as_ref());
        let data = ToolResultData {
            turn,
            step,
            message: &message,
            error: info,
            meta: result.meta.as_ref(),
        };
        self.session()
            .append(
                types::TOOL_RESULT,
                dsh_session::to_data(&data),
                Some(SurfaceIntent::append_citing(vec![call_seq])),
            )
            .map(|_| ())
            .map_err(|e| Fail::Error(Box::new(e)))
    }

    /// Feeds the identical-failing-calls streak with a committed result.
    fn record_outcome(&self, call: &Call, result: &ToolResult) {
        let failed = result.is_error.then(|| {
            result
                .content
                .iter()
                .filter_map(|b| match b {
                    dsh_llm::ContentBlock::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(" ")
        });
        if let super::Phase::Running(run) = &mut self.state().phase {
            run.failing.record(&call.1, &call.2, failed);
        }
    }

    /// A call that never started because the turn was cancelled: a synthetic pair that
    /// bypasses the pipeline.
    fn append_skipped(&self, turn: u64, step: u64, call: &Call) -> Result<(), Fail> {
        let seq = self.append_tool_call(turn, step, call)?;
        self.append_tool_result(
            turn,
            step,
            &call.0,
            &ToolResult::aborted_before_dispatch(),
            seq,
        )
    }

    /// Runs the calls of one assistant message; returns whether a result concluded the turn.
    pub(crate) async fn execute_tool_calls(
        &self,
        turn: u64,
        step: u64,
        calls: Vec<Call>,
        token: &CancellationToken,
    ) -> Result<bool, Fail> {
        let mut next = 0;
        let mut concluded = false;
        while next < calls.len() {
            let mode = self
                .services
                .tools
                .execution_mode(&self.make_exec(&calls[next], token));
            let group = match mode {
                ExecutionMode::Parallel => &calls[next..],
                ExecutionMode::Exclusive => &calls[next..=next],
            };
            let out = self.run_group(turn, step, group, mode, token).await?;
            next += out.consumed;
            concluded |= out.concluded;
            if out.aborted {
                for call in &calls[next..] {
                    self.append_skipped(turn, step, call)?;
                }
                return Ok(concluded);
            }
        }
        Ok(concluded)
    }

    #[allow(clippy::too_many_arguments)]
    async fn commit_ready(
        &self,
        turn: u64,
        step: u64,
        group: &[Call],
        slots: &mut [Option<Slot>],
        call_seqs: &[u64],
        committed: &mut usize,
        concluded: &mut bool,
    ) -> Result<(), Fail> {
        while *committed < slots.len() {
            let Some(slot) = slots[*committed].take() else {
                break;
            };
            let tools = &self.services.tools;
            let result = if slot.needs_post {
                tools.finalize(&slot.exec, slot.result).await
            } else {
                tools.finish(&slot.exec, slot.result)
            };
            self.append_tool_result(
                turn,
                step,
                &group[*committed].0,
                &result,
                call_seqs[*committed],
            )?;
            self.record_outcome(&group[*committed], &result);
            for context in &result.additional_contexts {
                self.mutate_inbox(
                    InboxTarget::NextStep,
                    None,
                    0,
                    vec![Arc::new(context.clone())],
                    false,
                )
                .map_err(|e| Fail::Error(Box::new(e)))?;
            }
            *concluded |= result.concludes_turn;
            *committed += 1;
        }
        Ok(())
    }

    async fn run_group(
        &self,
        turn: u64,
        step: u64,
        group: &[Call],
        mode: ExecutionMode,
        token: &CancellationToken,
    ) -> Result<GroupOutcome, Fail> {
        let max = self.config.max_parallel_tool_calls.max(1);
        let n = group.len();
        let mut slots: Vec<Option<Slot>> = (0..n).map(|_| None).collect();
        let mut call_seqs = vec![0u64; n];
        let (mut next_to_start, mut committed, mut started) = (0usize, 0usize, 0usize);
        let mut aborted = token.is_cancelled();
        let mut concluded = false;
        let mut in_flight = FuturesUnordered::new();
        let failure: Option<Fail> = loop {
            // Fill the pool: policy runs strictly in model order.
            let mut fill_failure = None;
            while !aborted && next_to_start < n && in_flight.len() < max {
                let i = next_to_start;
                let exec = self.make_exec(&group[i], token);
                if i > 0
                    && mode == ExecutionMode::Parallel
                    && self.services.tools.execution_mode(&exec) != ExecutionMode::Parallel
                {
                    break;
                }
                match self.append_tool_call(turn, step, &group[i]) {
                    Ok(seq) => call_seqs[i] = seq,
                    Err(e) => {
                        fill_failure = Some(e);
                        break;
                    }
                }
                started += 1;
                match self.services.tools.prepare(exec).await {
                    Prepared::Dispatch(exec) => {
                        let tools = self.services.tools.clone();
                        let handle = tokio::spawn(async move {
                            let result = tools.dispatch(&exec).await;
                            (exec, result)
                        });
                        in_flight.push(async move { (i, handle.await) });
                    }
                    Prepared::PostResult(exec, result) => {
                        slots[i] = Some(Slot {
                            exec,
                            result,
                            needs_post: true,
                        })
                    }
                    Prepared::FinalResult(exec, result) => {
                        slots[i] = Some(Slot {
                            exec,
                            result,
                            needs_post: false,
                        })
                    }
                }
                next_to_start += 1;
                if let Err(e) = self
                    .commit_ready(
                        turn,
                        step,
                        group,
                        &mut slots,
                        &call_seqs,
                        &mut committed,
                        &mut concluded,
                    )
                    .await
                {
                    fill_failure = Some(e);
                    break;
                }
                if token.is_cancelled() {
                    aborted = true;
                }
            }
            if let Some(f) = fill_failure {
                break Some(f);
            }
            let Some((i, joined)) = in_flight.next().await else {
                break None;
            };
            slots[i] = Some(match joined {
                Ok((exec, result)) => Slot {
                    exec,
                    result,
                    needs_post: true,
                },
                Err(join_error) => {
                    let exec = self.make_exec(&group[i], token);
                    let result =
                        ToolResult::failure(format!("tool body failed: {join_error}"), None);
                    Slot {
                        exec,
                        result,
                        needs_post: true,
                    }
                }
            });
            if let Err(e) = self
                .commit_ready(
                    turn,
                    step,
                    group,
                    &mut slots,
                    &call_seqs,
                    &mut committed,
                    &mut concluded,
                )
                .await
            {
                break Some(e);
            }
            if token.is_cancelled() {
                aborted = true;
            }
        };
        if let Some(f) = failure {
            // Scheduler failure: let started bodies settle; fabricate nothing.
            while in_flight.next().await.is_some() {}
            return Err(f);
        }
        if aborted {
            for call in &group[started..] {
                self.append_skipped(turn, step, call)?;
            }
            return Ok(GroupOutcome {
                consumed: n,
                aborted: true,
                concluded,
            });
        }
        Ok(GroupOutcome {
            consumed: started,
            aborted: false,
            concluded,
        })
    }
}
