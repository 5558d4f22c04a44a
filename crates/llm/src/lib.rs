//! Provider-neutral LLM vocabulary (no IO): messages, content blocks, stream chunks, the
//! block assembler, failures, request shapes, and the adapter registry with the
//! `llm/stream` waterfall.

mod assembler;
mod chunk;
mod error;
mod message;
mod request;
mod runtime;

pub use assembler::{BlockAssembler, OpenUnknownBlock};
pub use chunk::{FinishReason, LlmFailure, StreamChunk, TokenUsage};
pub use error::{LlmError, codes, is_context_window_exceeded};
pub use message::{ContentBlock, Message, MessageSource, Role, new_message_id};
pub use request::{
    AdapterDefaults, CallPurpose, GenerateOptions, LlmCallConfig, ModelInfo, ReasoningInfo,
    RetryMode, RetryPolicy, ToolSchema,
};
pub use runtime::{
    AdapterStream, ChunkStream, LlmAdapter, LlmRuntime, LlmStreamEvent, LlmStreamRequest,
    PreparedCall, adapter_stream,
};
