//! `WebError`: upstream's typed web failure (durable `{name: "WebError", code}`).

use dsh_kernel::{BoxError, HarnessError};

/// A web failure with one of upstream's `WEB_*` codes.
pub fn web_error(code: &'static str, message: impl Into<String>) -> BoxError {
    Box::new(HarnessError::new("WebError", code, message))
}

/// The `WEB_*` code of an error, if it is a web error.
pub fn web_code(error: &BoxError) -> Option<&str> {
    HarnessError::find(error.as_ref())
        .filter(|h| h.name == "WebError")
        .map(|h| h.code.as_ref())
}
