//! A model adapter that serves scripted replies in order and records every request: the
//! stand-in provider of the loop-level tests (agent, hooks, plan, subagent, workflow), with
//! builders for the chunk streams a provider sends.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use dsh_llm::{
    AdapterStream, ContentBlock, FinishReason, GenerateOptions, LlmAdapter, LlmError, LlmFailure,
    ModelInfo, StreamChunk, TokenUsage,
};
use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// One scripted model call.
#[derive(Clone)]
pub enum Reply {
    Chunks(Vec<StreamChunk>),
    /// Stream these chunks, then fail with `code`.
    Throw(Vec<StreamChunk>, String),
    /// Stream these chunks, then wait until the call is cancelled.
    Hang(Vec<StreamChunk>),
    /// Decided when the call is made: polled every 5 ms until it gives a reply (so a script
    /// can wait for a condition, or use an id only known at run time).
    Lazy(Arc<dyn Fn() -> Option<Reply> + Send + Sync>),
}

impl From<Vec<StreamChunk>> for Reply {
    fn from(chunks: Vec<StreamChunk>) -> Self {
        Reply::Chunks(chunks)
    }
}

/// A reply computed when the call is made (see [`Reply::Lazy`]).
pub fn lazy(f: impl Fn() -> Option<Reply> + Send + Sync + 'static) -> Reply {
    Reply::Lazy(Arc::new(f))
}

/// A call that waits until it is cancelled, having sent nothing.
pub fn hang() -> Reply {
    Reply::Hang(Vec::new())
}

/// The chunks of a text answer ending with `finish` (usage: 10 in, 2 out).
pub fn text_chunks(t: &str, finish: FinishReason) -> Vec<StreamChunk> {
    vec![
        StreamChunk::BlockStart {
            index: 0,
            block_type: "text".into(),
        },
        StreamChunk::TextDelta {
            index: 0,
            text: t.into(),
        },
        StreamChunk::BlockEnd {
            index: 0,
            block: ContentBlock::text(t),
        },
        StreamChunk::Usage {
            usage: TokenUsage {
                input_tokens: 10,
                output_tokens: 2,
                ..Default::default()
            },
        },
        StreamChunk::finish(finish),
    ]
}

/// A text answer.
pub fn text(t: &str) -> Reply {
    Reply::Chunks(text_chunks(t, FinishReason::Stop))
}

/// The chunks of tool calls `(id, name, arguments)`, block `first` onwards (no finish).
pub fn call_chunks(first: u32, list: &[(&str, &str, Value)]) -> Vec<StreamChunk> {
    let mut chunks = Vec::new();
    for (i, (id, name, args)) in list.iter().enumerate() {
        let index = first + i as u32;
        let args = args.to_string();
        chunks.push(StreamChunk::BlockStart {
            index,
            block_type: "tool-call".into(),
        });
        chunks.push(StreamChunk::ToolCallDelta {
            index,
            id: id.to_string(),
            name: Some(name.to_string()),
            arguments_delta: args.clone(),
        });
        chunks.push(StreamChunk::BlockEnd {
            index,
            block: ContentBlock::ToolCall {
                id: id.to_string(),
                name: name.to_string(),
                arguments: args,
            },
        });
    }
    chunks
}

/// Tool calls in one response.
pub fn calls(list: &[(&str, &str, Value)]) -> Reply {
    let mut chunks = call_chunks(0, list);
    chunks.push(StreamChunk::finish(FinishReason::ToolCalls));
    Reply::Chunks(chunks)
}

/// One tool call.
pub fn call(id: &str, name: &str, args: Value) -> Reply {
    calls(&[(id, name, args)])
}

/// A tool call streamed as one delta with raw (possibly malformed) arguments.
pub fn raw_call(id: &str, name: &str, args: &str) -> Reply {
    Reply::Chunks(vec![
        StreamChunk::ToolCallDelta {
            index: 0,
            id: id.into(),
            name: Some(name.into()),
            arguments_delta: args.into(),
        },
        StreamChunk::finish(FinishReason::ToolCalls),
    ])
}

/// A provider failure with `code`, sent as an error chunk.
pub fn failure(code: &str) -> Reply {
    Reply::Chunks(vec![StreamChunk::error(LlmFailure::new(
        code,
        format!("simulated {code}"),
    ))])
}

/// The stream a scripted call sends: `reply` (none: the script is exhausted), ended early
/// by `cancel` where it waits.
pub fn serve(reply: Option<Reply>, cancel: CancellationToken) -> AdapterStream {
    match reply {
        None => futures::stream::iter([Err(LlmError::new("UNKNOWN", "script exhausted"))]).boxed(),
        Some(Reply::Chunks(c)) => futures::stream::iter(c.into_iter().map(Ok)).boxed(),
        Some(Reply::Throw(c, code)) => futures::stream::iter(
            c.into_iter()
                .map(Ok)
                .chain([Err(LlmError::new(code.clone(), format!("simulated {code}")))]),
        )
        .boxed(),
        Some(Reply::Hang(c)) => futures::stream::iter(c.into_iter().map(Ok))
            .chain(futures::stream::once(async move {
                cancel.cancelled().await;
                Err(LlmError::new("ABORTED", "aborted"))
            }))
            .boxed(),
        Some(Reply::Lazy(decide)) => futures::stream::once(async move {
            loop {
                if let Some(reply) = decide() {
                    return serve(Some(reply), cancel);
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(5)) => {}
                    _ = cancel.cancelled() => {
                        return futures::stream::iter([Err(LlmError::new("ABORTED", "aborted"))]).boxed();
                    }
                }
            }
        })
        .flatten()
        .boxed(),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An adapter serving one script in order, recording every request.
#[derive(Default)]
pub struct Scripted {
    pub script: Mutex<VecDeque<Reply>>,
    pub requests: Mutex<Vec<Arc<GenerateOptions>>>,
}

impl Scripted {
    pub fn push(&self, reply: impl Into<Reply>) {
        lock(&self.script).push_back(reply.into());
    }

    pub fn requests(&self) -> Vec<Arc<GenerateOptions>> {
        lock(&self.requests).clone()
    }
}

/// Model info for any model: a 100 000-token window.
pub fn model_info(model: &str) -> ModelInfo {
    ModelInfo {
        id: model.into(),
        context_window: Some(100_000),
        ..Default::default()
    }
}

impl LlmAdapter for Scripted {
    fn model_info(&self, _provider: &str, model: &str) -> Result<ModelInfo, LlmError> {
        Ok(model_info(model))
    }

    fn stream(&self, options: Arc<GenerateOptions>) -> AdapterStream {
        lock(&self.requests).push(options.clone());
        let reply = lock(&self.script).pop_front();
        serve(reply, options.cancel.clone())
    }
}
