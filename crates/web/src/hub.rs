//! Live signals from kernel listeners to every open event stream. Listeners only record
//! and signal (O(1), never blocking); each stream task computes what to send when it
//! handles a signal, outside any kernel dispatch.

use tokio::sync::broadcast;

/// Signals are cheap to clone; a stream that lags behind gets a fresh baseline instead.
pub const CAPACITY: usize = 1024;

/// Something changed that open pages may show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signal {
    /// Session or workspace lists changed (titles, status, archive, delete, create).
    Lists,
    /// A session's running status changed (to `running`: true/false). The transition is
    /// carried, so a page sees it even when the turn is already over when it is handled.
    Status { session: String, running: bool },
    /// A session's pending inbox changed.
    Queue(String),
    /// A session's pending approvals changed.
    Approvals(String),
    /// A session's pending user questions changed.
    Questions(String),
    /// A running tool printed something.
    Output {
        session: String,
        call: String,
        stream: &'static str,
        text: String,
    },
    /// A turn failed or the log could not be written.
    AgentError { session: String, message: String },
}

impl Signal {
    /// The session this signal concerns (`None`: everyone).
    pub fn session(&self) -> Option<&str> {
        match self {
            Signal::Lists => None,
            Signal::Queue(s) | Signal::Approvals(s) | Signal::Questions(s) => Some(s),
            Signal::Status { session, .. } => Some(session),
            Signal::Output { session, .. } | Signal::AgentError { session, .. } => Some(session),
        }
    }
}

/// The broadcast channel.
#[derive(Clone, Debug)]
pub struct Hub {
    tx: broadcast::Sender<Signal>,
}

impl Default for Hub {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(CAPACITY).0,
        }
    }
}

impl Hub {
    pub fn send(&self, signal: Signal) {
        // No receiver (no page open) is fine.
        let _ = self.tx.send(signal);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Signal> {
        self.tx.subscribe()
    }
}
