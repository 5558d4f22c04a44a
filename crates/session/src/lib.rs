//! The durable session vocabulary (no IO, no hidden clock): event envelope and known types,
//! typed payloads, the append-only log with its surface and `derive_messages()`, fork,
//! crash-repair closers, storage records (chunk-row packing) and the JSONL text form.

mod artifacts;
mod data;
mod delta;
mod enclosure;
mod event;
mod header;
mod lineparse;
mod log;
mod payload;
mod records;
mod repair;
mod storage;
mod store;
mod surface;
pub mod v4;

pub use artifacts::{Artifacts, SessionArtifacts};
pub use data::{
    AssistantChunk, AssistantMessageData, CancelCause, EpochHeader, ErrorInfo, HeaderReason,
    InboxSplice, InboxTarget, RequestContext, RequestHeaderData, StepMark, ToolCallData,
    ToolResultData, TurnEnd, TurnEndReason, TurnStart, text_of, to_data,
};
pub use delta::ChunkDelta;
pub use event::{Event, EventType, SurfaceKeyOrder, SurfaceOp, types};
pub use header::{
    HeaderError, SESSION_FORMAT_V4, SESSION_FORMAT_VERSION, SessionHeader, version_refusal,
};
pub use log::{AppendError, ForkError, Session, SurfaceIntent};
pub use payload::EventData;
pub use records::{
    MIN_RUN, PackedRow, Record, RecordError, RecordFormat, RowKind, decode_line, decode_record,
    decode_record_with_format, pack, write_event, write_record,
};
pub use repair::{NOT_STARTED_TEXT, OUTCOME_UNKNOWN_TEXT, interrupted_turn_closers};
pub use storage::{
    MAX_LINE_BYTES, ParsedLog, StorageError, encode_batch, encode_records, header_line,
    parse_header_line, parse_log,
};
pub use store::{
    AppendedEvent, AssignedMessageId, AssignedRoute, AssignedSessionId, AssignedWorkingDirectory,
    Clock, FlushRequest, LiveSession, SessionAppended, SessionCreated, SessionDisposed,
    SessionFlush, SessionSource, SessionStore, SessionWriteFailed, StoreError, TaskImage,
    TaskImages, TaskIsMessage, WriteFailure, is_plain_id, system_clock,
};
pub use surface::{Surface, SurfacePlan};
