//! Errors shared by every layer.

use std::borrow::Cow;
use std::fmt;

/// Any error a listener, plugin or tool body may return. Producers that want a stable
/// machine-readable code return a [`HarnessError`] (or another error that wraps one).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error with a stable `code` and an error-class `name`, the Rust counterpart of
/// upstream's `HarnessError`. The `name`/`code` pair is what durable records carry
/// (for example a tool result's `error: {name, code}`).
#[derive(Debug)]
pub struct HarnessError {
    pub name: Cow<'static, str>,
    pub code: Cow<'static, str>,
    pub message: String,
    pub source: Option<BoxError>,
}

impl HarnessError {
    pub fn new(
        name: impl Into<Cow<'static, str>>,
        code: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            code: code.into(),
            message: message.into(),
            source: None,
        }
    }

    pub fn with_source(mut self, source: BoxError) -> Self {
        self.source = Some(source);
        self
    }

    /// Finds a `HarnessError` in `error` or its source chain.
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a HarnessError> {
        let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(e) = current {
            if let Some(h) = e.downcast_ref::<HarnessError>() {
                return Some(h);
            }
            current = e.source();
        }
        None
    }
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HarnessError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e.as_ref() as &(dyn std::error::Error + 'static))
    }
}

/// Renders an error and its `source` chain as `message: cause: cause`, the way upstream's
/// `errorChain` flattens non-LLM turn failures. Repeated messages are not printed twice.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut current = error.source();
    let mut depth = 0;
    while let Some(e) = current {
        let text = e.to_string();
        if !text.is_empty() && !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        current = e.source();
        depth += 1;
        if depth > 32 {
            break;
        }
    }
    out
}

/// Errors raised by the kernel itself.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// A plugin asked for a service nobody provides (not retryable: fix the composition).
    #[error("plugin \"{plugin}\" requires service {service}, which no loaded plugin provides")]
    MissingService {
        plugin: String,
        service: &'static str,
    },
    /// Two plugins tried to provide the same service.
    #[error(
        "service {service} is already provided by \"{owner}\"; \"{plugin}\" cannot provide it again"
    )]
    DuplicateService {
        service: &'static str,
        owner: String,
        plugin: String,
    },
    /// A registration was attempted through a context whose plugin was already unloaded.
    #[error("plugin \"{plugin}\" is unloaded; it cannot register {what}")]
    Disposed { plugin: String, what: &'static str },
}
