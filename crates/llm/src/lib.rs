//! Provider-neutral LLM vocabulary (no IO): messages, content blocks, stream chunks, the
//! block assembler, failures, request shapes, and the adapter registry with the
//! `llm/stream` waterfall.

mod assembler;
mod chunk;
mod error;
mod extensions;
mod image;
mod message;
mod request;
mod runtime;

pub use assembler::{BlockAssembler, OpenUnknownBlock};
pub use chunk::{FinishReason, LlmFailure, StreamChunk, TokenUsage};
pub use error::{LlmError, codes, is_context_window_exceeded};
pub use extensions::{
    AcceptFn, ExtensionField, ExtensionRequest, PreparedExtensions, RequestExtension,
    RequestExtensions, splice_fields,
};
pub use image::{
    DEFAULT_MAX_INLINE_REQUEST_IMAGE_BYTES, IMAGE_MEDIA_TYPES, ImageAttachmentRef,
    OFFLOADED_IMAGE_TEXT, RequestImageReader, content_has_image, image_request_data,
    inline_request_images, offload_request_images, project_images_for_text_model,
};
pub use message::{ContentBlock, Message, MessageSource, Role, new_message_id};
pub use request::{
    AdapterDefaults, CallPurpose, GenerateOptions, LlmCallConfig, ModelInfo, ReasoningInfo,
    RetryMode, RetryPolicy, ToolSchema,
};
pub use runtime::{
    AdapterStream, ChunkStream, LlmAdapter, LlmRuntime, LlmStreamEvent, LlmStreamRequest,
    PreparedCall, adapter_stream,
};
