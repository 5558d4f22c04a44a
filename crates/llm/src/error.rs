//! `LlmError` and the canonical failure codes.

use std::sync::OnceLock;

use regex::Regex;

use crate::chunk::LlmFailure;

/// Canonical failure codes. Retryability is decided by the route's retry policy; the default
/// policy retries [`DEFAULT_RETRYABLE`].
pub mod codes {
    /// 401/403 or an invalid key. Not retryable.
    pub const AUTH: &str = "AUTH";
    /// The account is out of quota/balance. Not retryable.
    pub const QUOTA: &str = "QUOTA";
    /// 429. Retryable.
    pub const RATE_LIMIT: &str = "RATE_LIMIT";
    /// 5xx. Retryable.
    pub const SERVER: &str = "SERVER";
    /// No byte arrived within the idle timeout. Retryable.
    pub const TIMEOUT: &str = "TIMEOUT";
    /// Connection failed or was reset. Retryable.
    pub const TRANSPORT: &str = "TRANSPORT";
    /// The request was rejected as invalid (400, 413). Not retryable.
    pub const INVALID_REQUEST: &str = "INVALID_REQUEST";
    /// The prompt does not fit the model's context. Not retryable (compaction handles it).
    pub const CONTEXT_WINDOW_EXCEEDED: &str = "CONTEXT_WINDOW_EXCEEDED";
    /// A successful completion without content. Retryable.
    pub const EMPTY_RESPONSE: &str = "EMPTY_RESPONSE";
    /// The call was cancelled.
    pub const ABORTED: &str = "ABORTED";
    /// No adapter serves the route.
    pub const NO_ADAPTER: &str = "NO_ADAPTER";
    /// The stream ended without its terminal marker. Retryable (a dropped connection).
    pub const STREAM_CLOSED: &str = "STREAM_CLOSED";
    /// The provider sent something that is not valid protocol.
    pub const MALFORMED_RESPONSE: &str = "MALFORMED_RESPONSE";
    /// No API key is configured for the route.
    pub const MISSING_CREDENTIAL: &str = "MISSING_CREDENTIAL";
    /// A configured key is unusable.
    pub const INVALID_CREDENTIAL: &str = "INVALID_CREDENTIAL";
    /// The requested reasoning effort is not offered by the model.
    pub const UNSUPPORTED_REASONING_EFFORT: &str = "UNSUPPORTED_REASONING_EFFORT";
    /// A prepared call was used with a different config.
    pub const INVALID_PREPARED_CALL: &str = "INVALID_PREPARED_CALL";
    /// An unclassified failure.
    pub const UNKNOWN: &str = "UNKNOWN";
    /// One response carried more bytes than the route's `maxResponseBytes` allows; the
    /// attempt was cut there. Not retryable (a retry would pay the same cost again).
    pub const RESPONSE_TOO_LARGE: &str = "RESPONSE_TOO_LARGE";
    /// One response asked for more tool calls than the agent loop's
    /// `maxToolCallsPerResponse`; none of them ran. Not retryable.
    pub const TOO_MANY_TOOL_CALLS: &str = "TOO_MANY_TOOL_CALLS";
    /// A turn reached the agent loop's `maxStepsPerTurn`. Ends the turn, not retryable.
    pub const STEP_LIMIT: &str = "STEP_LIMIT";
    /// The same tool call (same tool, same arguments) failed `maxIdenticalFailingCalls`
    /// times in a row. Ends the turn, not retryable.
    pub const REPEATED_FAILING_CALL: &str = "REPEATED_FAILING_CALL";

    /// Codes the default retry policy retries.
    pub const DEFAULT_RETRYABLE: [&str; 6] = [
        EMPTY_RESPONSE,
        RATE_LIMIT,
        SERVER,
        STREAM_CLOSED,
        TIMEOUT,
        TRANSPORT,
    ];
}

/// A provider or routing failure carrying an [`LlmFailure`].
#[derive(Clone, Debug, PartialEq)]
pub struct LlmError {
    pub failure: LlmFailure,
}

impl LlmError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            failure: LlmFailure::new(code, message),
        }
    }

    pub fn from_failure(failure: LlmFailure) -> Self {
        Self { failure }
    }

    pub fn code(&self) -> &str {
        &self.failure.code
    }

    pub fn with_status(mut self, status: u16) -> Self {
        self.failure.status = Some(status);
        self
    }

    /// Finds an `LlmError` in an error's source chain.
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a LlmError> {
        let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(e) = current {
            if let Some(l) = e.downcast_ref::<LlmError>() {
                return Some(l);
            }
            current = e.source();
        }
        None
    }
}

impl std::fmt::Display for LlmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.failure.message)
    }
}

impl std::error::Error for LlmError {}

/// Whether a provider error text describes a context-window overflow (case-insensitive).
pub fn is_context_window_exceeded(detail: &str) -> bool {
    static PATTERNS: OnceLock<Vec<Regex>> = OnceLock::new();
    let patterns = PATTERNS.get_or_init(|| {
        [
            r"(?i)context[_\- ](length|window)[_\- ](exceed(ed|s)?|overflow(ed)?|limit[_\- ]exceeded)",
            r"(?i)(maximum|max)( allowed| supported)? context (length|window)",
            r"(?i)(request|prompt|input|messages?) (is |are )?too (large|long) for ((this|the) )?(model('s)? )?context( window)?",
            r"(?i)(input|prompt|request) (is )?too (long|large) for (this|the) model",
            r"(?i)(input|prompt|request|messages?).{0,40}(exceeds|overflows|is larger than).{0,40}(the )?(model('s)? )?context( length| window)?",
        ]
        .iter()
        .filter_map(|p| Regex::new(p).ok())
        .collect()
    });
    patterns.iter().any(|r| r.is_match(detail))
}
