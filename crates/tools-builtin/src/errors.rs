//! Error values: typed (name and code) or plain.
//!
//! Upstream distinguishes typed failures (a `HarnessError` whose `{name, code}` is written
//! durably on the tool result) from plain `Error`s (message only). Both map onto
//! [`BoxError`]: typed ones wrap a [`HarnessError`], plain ones are bare messages.

use dsh_kernel::{BoxError, HarnessError};

/// A plain failure: the model sees `Error: <message>`, nothing durable beyond the text.
pub(crate) fn plain(message: impl Into<String>) -> BoxError {
    BoxError::from(message.into())
}

/// An `FsError` (filesystem seam failure) with one of upstream's `FS_*` codes.
pub(crate) fn fs(code: &'static str, message: impl Into<String>) -> BoxError {
    Box::new(HarnessError::new("FsError", code, message))
}

/// A `SearchError` (glob/grep failure) with one of upstream's `SEARCH_*` codes.
pub(crate) fn search(code: &'static str, message: impl Into<String>) -> BoxError {
    Box::new(HarnessError::new("SearchError", code, message))
}

/// The foreground abort of a running tool body.
pub(crate) fn aborted() -> BoxError {
    Box::new(HarnessError::new(
        "AbortError",
        "ABORTED",
        "tool call aborted",
    ))
}

/// The `{name, code}` of a typed error, if any.
pub(crate) fn code_of(error: &BoxError) -> Option<&str> {
    HarnessError::find(error.as_ref()).map(|h| h.code.as_ref())
}

/// Formats a JSON number the way JavaScript prints it (`1500`, `1500.5`).
pub(crate) fn js_number(value: f64) -> String {
    let mut out = String::new();
    dsh_kernel::json::write_f64(&mut out, value);
    out
}

/// `JSON.stringify` of a string value.
pub(crate) fn js_string(value: &str) -> String {
    let mut out = String::new();
    dsh_kernel::json::write_string(&mut out, value);
    out
}
