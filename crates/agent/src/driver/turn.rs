//! The turn/step algorithm: one turn drains admitted input; one step is one model request
//! plus the tool calls it asked for.

use std::sync::Arc;

use dsh_kernel::{BoxError, BoxFuture, error_chain};
use dsh_llm::{
    BlockAssembler, ContentBlock, FinishReason, LlmError, LlmFailure, Message, StreamChunk, codes,
};
use dsh_prompt::{
    AssembleContext, PromptAssembly, join_context_sections, render_context_sections, render_prompt,
};
use dsh_session::{AssistantMessageData, InboxTarget, SurfaceIntent, TurnEndReason, types};
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::request::{BuiltRequest, check};
use super::{LoopAgent, Phase, Run};
use crate::events::{
    AgentErrorEvent, AgentErrorPayload, PreStep, PreStepDecision, PreStepPayload, RequestError,
    RequestErrorAction, RequestErrorPayload, TurnStopping, TurnStoppingPayload,
};
use crate::handle::Agent;

/// The plugin whose settings hold the loop bounds (named in their errors).
const LOOP_PLUGIN: &str = "@deepseek-ai/dsh-agent-loop";

/// Why a turn stopped early.
pub(crate) enum Fail {
    /// The turn's signal was cancelled.
    Aborted,
    /// Anything else: the turn ends `error`.
    Error(BoxError),
}

impl From<BoxError> for Fail {
    fn from(e: BoxError) -> Self {
        Fail::Error(e)
    }
}

/// A turn whose `turn/start` is logged and whose first batch is claimed.
pub(crate) struct OpenedTurn {
    turn: u64,
    token: CancellationToken,
    claimed: Vec<Arc<Message>>,
}

/// How a step ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StepEnd {
    Completed,
    MaxTokens,
}

/// What the turn loop decided.
enum TurnExit {
    /// Natural end (completed / max-tokens): continue with pending input.
    Natural,
    /// A zero-step turn: completed, and the driver stops.
    ZeroStep,
    /// `agent/pre-step` rejected a proposed step: blocked, and the driver stops.
    Blocked,
}

impl LoopAgent {
    fn fail_append(&self, e: impl std::fmt::Display) -> Fail {
        Fail::Error(format!("{e}").into())
    }

    /// The synchronous prefix of a turn: abort check, `turn/start`, claim.
    pub(crate) fn open_turn(&self) -> Result<OpenedTurn, ()> {
        let (token, turn) = {
            let state = self.state();
            match &state.phase {
                Phase::Running(run) => (run.abort.clone(), run.turn + 1),
                Phase::Idle => return Err(()),
            }
        };
        if token.is_cancelled() {
            return Err(());
        }
        if let Err(e) = self
            .session()
            .append(types::TURN_START, json!({"turn": turn}), None)
        {
            self.report_error(turn, 0, &e.to_string());
            return Err(());
        }
        if let Phase::Running(run) = &mut self.state().phase {
            run.turn = turn;
            run.step = 0;
            run.failing = super::FailingStreak::default();
        }
        let claimed = match self.claim(InboxTarget::NextTurn, turn) {
            Ok(c) => c,
            Err(e) => {
                // The claim could not be logged: close the turn as an error.
                self.report_error(turn, 0, &e.to_string());
                let failure = LlmFailure::new(codes::UNKNOWN, e.to_string());
                let _ = self.session().append(
                    types::TURN_END,
                    json!({"turn": turn, "reason": TurnEndReason::Error(failure).to_value()}),
                    None,
                );
                return Err(());
            }
        };
        Ok(OpenedTurn {
            turn,
            token,
            claimed,
        })
    }

    /// The failure of a loop bound: the turn ends `error` with `code` and `message`.
    fn bound_hit(&self, code: &str, message: String) -> Fail {
        tracing::warn!(agent = %self.id(), code, "{message}");
        Fail::Error(Box::new(LlmError::new(code, message)))
    }

    /// Ends the turn when the same call failed `maxIdenticalFailingCalls` times in a row.
    fn check_failing_streak(&self) -> Result<(), Fail> {
        let limit = self.config.max_identical_failing_calls;
        let hit = match &self.state().phase {
            Phase::Running(run) if run.failing.count >= limit => run
                .failing
                .call
                .as_ref()
                .map(|(name, _)| (name.clone(), run.failing.last_error.clone())),
            Phase::Running(_) | Phase::Idle => None,
        };
        let Some((name, last_error)) = hit else {
            return Ok(());
        };
        let mut last_error: String = last_error.split_whitespace().collect::<Vec<_>>().join(" ");
        if last_error.chars().count() > 300 {
            last_error = last_error.chars().take(299).collect::<String>() + "…";
        }
        Err(self.bound_hit(
            codes::REPEATED_FAILING_CALL,
            format!(
                "the model called {name} with the same arguments {limit} times in a row and every \
                 call failed, so the turn was stopped instead of repeating it again (last error: \
                 {last_error}); the limit is maxIdenticalFailingCalls of {LOOP_PLUGIN}"
            ),
        ))
    }

    fn report_error(&self, turn: u64, step: u64, message: &str) {
        if let Some(agent) = self.agent_ref() {
            self.ctx().emit::<AgentErrorEvent>(&AgentErrorPayload {
                agent,
                turn,
                step,
                message: message.into(),
            });
        }
    }

    /// Runs turns until the driver should stop, then converges to idle.
    pub(crate) async fn drive(self: Arc<Self>, first: Result<OpenedTurn, ()>) {
        let mut next = first;
        while let Ok(opened) = next {
            if !self.run_turn(opened).await {
                break;
            }
            next = self.open_turn();
        }
        self.go_idle();
    }

    fn current_step(&self) -> u64 {
        match &self.state().phase {
            Phase::Running(run) => run.step,
            Phase::Idle => 0,
        }
    }

    fn set_step(&self, step: u64) {
        if let Phase::Running(run) = &mut self.state().phase {
            run.step = step;
        }
    }

    /// One turn. Returns whether the driver should continue with another turn.
    async fn run_turn(&self, opened: OpenedTurn) -> bool {
        let OpenedTurn {
            turn,
            token,
            claimed,
        } = opened;
        let mut turn_ends: Option<StepEnd> = None;
        let outcome = self.turn_body(turn, &token, claimed, &mut turn_ends).await;
        let reason = match &outcome {
            Ok(TurnExit::Natural) => match turn_ends {
                Some(StepEnd::MaxTokens) => TurnEndReason::MaxTokens,
                _ => TurnEndReason::Completed,
            },
            Ok(TurnExit::ZeroStep) => TurnEndReason::Completed,
            Ok(TurnExit::Blocked) => TurnEndReason::Blocked,
            Err(Fail::Aborted) => TurnEndReason::Aborted(self.abort_cause()),
            Err(Fail::Error(e)) => {
                let failure = match LlmError::find(e.as_ref()) {
                    Some(l) => l.failure.clone(),
                    None => LlmFailure::new(codes::UNKNOWN, error_chain(e.as_ref())),
                };
                self.report_error(turn, self.current_step(), &failure.message);
                TurnEndReason::Error(failure)
            }
        };
        if let Err(e) = self.session().append(
            types::TURN_END,
            json!({"turn": turn, "reason": reason.to_value()}),
            None,
        ) {
            self.report_error(turn, self.current_step(), &e.to_string());
            return false;
        }
        if !matches!(outcome, Ok(TurnExit::Natural)) || !self.has_pending() {
            return false;
        }
        let mut state = self.state();
        if let Phase::Running(run) = &mut state.phase {
            let turn = run.turn;
            *run = Run::new(turn);
        }
        true
    }

    async fn turn_body(
        &self,
        turn: u64,
        token: &CancellationToken,
        first_claim: Vec<Arc<Message>>,
        turn_ends: &mut Option<StepEnd>,
    ) -> Result<TurnExit, Fail> {
        let mut first = Some(first_claim);
        loop {
            check(token)?;
            let step = self.current_step() + 1;
            // Checked before anything is claimed: input waiting for the next step stays in
            // the inbox for the next turn.
            if step > self.config.max_steps_per_turn {
                return Err(self.bound_hit(
                    codes::STEP_LIMIT,
                    format!(
                        "the turn was stopped after {} steps without the model finishing; the limit \
                         is maxStepsPerTurn of {LOOP_PLUGIN}. Send a message to continue, or raise \
                         the limit if turns this long are expected",
                        self.config.max_steps_per_turn
                    ),
                ));
            }
            let claimed = match first.take() {
                Some(c) => c,
                None => self
                    .claim(InboxTarget::NextStep, turn)
                    .map_err(|e| Fail::Error(Box::new(e)))?,
            };
            let (decision, assembly) = self.pre_step(claimed, turn, step, token).await?;
            let messages = match decision {
                PreStepDecision::Reject => return Ok(TurnExit::Blocked),
                PreStepDecision::Enter(m) => m,
            };
            if turn_ends.is_some() && messages.is_empty() {
                break;
            }
            if self.current_step() == 0 && messages.is_empty() {
                return Ok(TurnExit::ZeroStep);
            }
            check(token)?;
            self.session()
                .append(types::STEP_START, json!({"turn": turn, "step": step}), None)
                .map_err(|e| self.fail_append(e))?;
            self.set_step(step);
            let result = self
                .enter_and_run(turn, step, &messages, &assembly, token)
                .await;
            let end =
                self.session()
                    .append(types::STEP_END, json!({"turn": turn, "step": step}), None);
            let step_end = result?;
            end.map_err(|e| self.fail_append(e))?;
            if *turn_ends != Some(StepEnd::MaxTokens) {
                *turn_ends = step_end;
            }
            check(token)?;
            if turn_ends.is_some() && !self.next_step_pending() {
                let Some(agent) = self.agent_ref() else {
                    return Err(Fail::Aborted);
                };
                self.ctx()
                    .serial::<TurnStopping>(&TurnStoppingPayload {
                        agent,
                        turn,
                        cancel: token.clone(),
                    })
                    .await?;
                check(token)?;
            }
            if turn_ends.is_some() && !self.next_step_pending() {
                break;
            }
        }
        Ok(TurnExit::Natural)
    }

    async fn enter_and_run(
        &self,
        turn: u64,
        step: u64,
        messages: &[Arc<Message>],
        assembly: &PromptAssembly,
        token: &CancellationToken,
    ) -> Result<Option<StepEnd>, Fail> {
        for m in messages {
            let event = self
                .session()
                .append(
                    types::USER_MESSAGE,
                    m.to_value(),
                    Some(SurfaceIntent::append()),
                )
                .map_err(|e| self.fail_append(e))?;
            self.runtime_context
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entered(event.seq, m);
        }
        self.step_body(turn, step, assembly, token).await
    }

    fn assemble_context(&self) -> AssembleContext {
        let o = self.options();
        AssembleContext {
            ctx: self.ctx().clone(),
            session: Some(self.session().clone()),
            provider: o.provider.unwrap_or_default(),
            model: o.model.unwrap_or_default(),
            cwd: self.cwd(),
        }
    }

    async fn pre_step(
        &self,
        claimed: Vec<Arc<Message>>,
        turn: u64,
        step: u64,
        token: &CancellationToken,
    ) -> Result<(PreStepDecision, PromptAssembly), Fail> {
        let assembly = self
            .services
            .prompt
            .assemble(self.assemble_context())
            .await?;
        check(token)?;
        let sections = render_context_sections(&assembly).map_err(|e| Fail::Error(Box::new(e)))?;
        let current = join_context_sections(&sections);
        let surface = self.session().read(|s| s.surface().nodes().to_vec());
        let snapshot = self
            .runtime_context
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .project(&current, &sections, &surface);
        let mut entered = claimed.clone();
        entered.extend(snapshot.map(Arc::new));
        let Some(agent) = self.agent_ref() else {
            return Err(Fail::Aborted);
        };
        let payload = PreStepPayload {
            agent,
            messages: claimed,
            turn,
            step,
            cancel: token.clone(),
        };
        let default =
            move |_: &PreStepPayload| -> BoxFuture<'_, Result<PreStepDecision, BoxError>> {
                let entered = entered.clone();
                Box::pin(async move { Ok(PreStepDecision::Enter(entered)) })
            };
        let decision = self
            .ctx()
            .waterfall::<PreStep, _>(&payload, &default)
            .await?;
        check(token)?;
        Ok((decision, assembly))
    }

    /// Streams one response into `asm`, logging each chunk (its seq goes to `chunk_seqs`)
    /// and stopping at the finish chunk, a cancel, or too many tool calls.
    async fn stream_response(
        &self,
        turn: u64,
        step: u64,
        built: &BuiltRequest,
        asm: &mut BlockAssembler,
        chunk_seqs: &mut Vec<u64>,
        token: &CancellationToken,
    ) -> Result<(), Fail> {
        let mut stream = self
            .services
            .llm
            .stream(built.options.clone(), built.prepared.as_ref())
            .await?;
        check(token)?;
        loop {
            let next = tokio::select! {
                biased;
                _ = token.cancelled() => return Err(Fail::Aborted),
                next = stream.next() => next,
            };
            let Some(item) = next else { break };
            let chunk = item?;
            check(token)?;
            let data = json!({"turn": turn, "step": step, "chunk": serde_json::to_value(&chunk).map_err(|e| Fail::Error(Box::new(e)))?});
            let event = self
                .session()
                .append(types::ASSISTANT_CHUNK, data, None)
                .map_err(|e| self.fail_append(e))?;
            chunk_seqs.push(event.seq);
            let finished = matches!(chunk, StreamChunk::Finish { .. });
            asm.push_owned(chunk);
            // Stopped while streaming: the calls past the bound are never assembled.
            let limit = self.config.max_tool_calls_per_response;
            if asm.tool_call_count() > limit {
                return Err(self.bound_hit(
                    codes::TOO_MANY_TOOL_CALLS,
                    format!(
                        "the model asked for more than {limit} tool calls in one response, so \
                         none of them ran and the turn was stopped; the limit is \
                         maxToolCallsPerResponse of {LOOP_PLUGIN}: raise it if responses \
                         this wide are expected"
                    ),
                ));
            }
            if finished {
                break;
            }
        }
        check(token)
    }

    async fn step_body(
        &self,
        turn: u64,
        step: u64,
        assembly: &PromptAssembly,
        token: &CancellationToken,
    ) -> Result<Option<StepEnd>, Fail> {
        check(token)?;
        let system = render_prompt(assembly).map_err(|e| Fail::Error(Box::new(e)))?;
        loop {
            let history = self.session().derive_messages();
            let built = self
                .build_request(turn, step, &assembly.tools, &system, history, token)
                .await?;
            let provider = built.options.config.provider.clone();
            let model = built.options.config.model.clone();
            let mut asm = BlockAssembler::new();
            let mut chunk_seqs: Vec<u64> = Vec::new();
            let streamed = self
                .stream_response(turn, step, &built, &mut asm, &mut chunk_seqs, token)
                .await;
            if let Err(fail) = streamed {
                if token.is_cancelled() {
                    let content = asm.interrupted_blocks();
                    if !content.is_empty() {
                        let message = Message::assistant(content, &provider, &model, None);
                        let data = AssistantMessageData {
                            turn,
                            step,
                            message: &message,
                            usage: asm.usage(),
                            interrupted: Some(true),
                        };
                        self.session()
                            .append(
                                types::ASSISTANT_MESSAGE,
                                dsh_session::to_data(&data),
                                Some(SurfaceIntent::append_citing(chunk_seqs.clone())),
                            )
                            .map_err(|e| self.fail_append(e))?;
                    }
                    return Err(Fail::Aborted);
                }
                return Err(fail);
            }
            let finish = asm.finish();
            if let Some(failure) = finish.failure() {
                let Some(agent) = self.agent_ref() else {
                    return Err(Fail::Aborted);
                };
                let payload = RequestErrorPayload {
                    agent,
                    turn,
                    step,
                    provider: provider.clone(),
                    failure: failure.clone(),
                    retry_policy: built.prepared.as_ref().map(|p| p.retry_policy.clone()),
                    cancel: token.clone(),
                };
                let default = |_: &RequestErrorPayload| -> BoxFuture<'_, Result<Option<RequestErrorAction>, BoxError>> {
                    Box::pin(async { Ok(None) })
                };
                let action = self
                    .ctx()
                    .waterfall::<RequestError, _>(&payload, &default)
                    .await?;
                check(token)?;
                if action != Some(RequestErrorAction::Retry) {
                    return Err(Fail::Error(Box::new(LlmError::from_failure(
                        failure.clone(),
                    ))));
                }
                continue;
            }
            // The assembler's text moves into the message and the message is dropped once
            // its logged form exists: a long answer is not held three times over.
            let replay_state = asm.replay_state();
            let usage = asm.usage().cloned();
            let blocks = asm.take_blocks().map_err(|e| Fail::Error(Box::new(e)))?;
            drop(asm);
            let message = Message::assistant(blocks, &provider, &model, replay_state);
            let calls: Vec<(String, String, String)> = message
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolCall {
                        id,
                        name,
                        arguments,
                    } => Some((id.clone(), name.clone(), arguments.clone())),
                    _ => None,
                })
                .collect();
            let data = dsh_session::to_data(&AssistantMessageData {
                turn,
                step,
                message: &message,
                usage: usage.as_ref(),
                interrupted: None,
            });
            drop(message);
            self.session()
                .append(
                    types::ASSISTANT_MESSAGE,
                    data,
                    Some(SurfaceIntent::append_citing(chunk_seqs)),
                )
                .map_err(|e| self.fail_append(e))?;
            if matches!(finish, FinishReason::MaxTokens) {
                tracing::warn!(
                    agent = %self.id(),
                    turn,
                    step,
                    "the model stopped at its output limit (max tokens); the answer is cut short"
                );
                return Ok(Some(StepEnd::MaxTokens));
            }
            if calls.is_empty() {
                return Ok(Some(StepEnd::Completed));
            }
            let concluded = self.execute_tool_calls(turn, step, calls, token).await?;
            self.check_failing_streak()?;
            return Ok(if concluded {
                Some(StepEnd::Completed)
            } else {
                None
            });
        }
    }
}
