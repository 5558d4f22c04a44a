//! Waits a page answers (approvals, user questions): each pending entry belongs to one
//! session and is keyed by an id; every open page of that session is signalled and sees it
//! (also in the `live` baseline); the first accepted answer wins; a cancelled wait, or
//! [`PendingWaits::close_all`] at shutdown, resolves it without an answer.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::hub::{Hub, Signal};

struct Entry<T> {
    order: u64,
    session_id: String,
    view: Value,
    answer: oneshot::Sender<T>,
}

/// How an answer was taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answered {
    Accepted,
    /// Already answered, cancelled, or never asked.
    NotPending,
    /// The answer does not fit what was asked (the entry stays pending).
    Invalid(String),
}

/// Removes a wait's entry when the wait ends, however it ends.
struct Clear<'a, T: Send + 'static> {
    waits: &'a PendingWaits<T>,
    id: &'a str,
    session_id: &'a str,
}

impl<T: Send + 'static> Drop for Clear<'_, T> {
    fn drop(&mut self) {
        let removed = self.waits.lock().remove(self.id).is_some();
        if removed {
            self.waits.changed(self.session_id);
        }
    }
}

/// Pending waits of every session, of one kind (`signal` names the kind's hub signal).
pub struct PendingWaits<T> {
    entries: Arc<Mutex<BTreeMap<String, Entry<T>>>>,
    next: Arc<AtomicU64>,
    hub: Hub,
    signal: fn(String) -> Signal,
}

impl<T> Clone for PendingWaits<T> {
    fn clone(&self) -> Self {
        Self {
            entries: self.entries.clone(),
            next: self.next.clone(),
            hub: self.hub.clone(),
            signal: self.signal,
        }
    }
}

impl<T: Send + 'static> PendingWaits<T> {
    pub fn new(hub: Hub, signal: fn(String) -> Signal) -> Self {
        Self {
            entries: Arc::default(),
            next: Arc::default(),
            hub,
            signal,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry<T>>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self, session_id: &str) {
        self.hub.send((self.signal)(session_id.to_string()));
        self.hub.send(Signal::Lists);
    }

    /// The pending views of `session_id`, oldest first.
    pub fn of_session(&self, session_id: &str) -> Vec<Value> {
        let map = self.lock();
        let mut items: Vec<(u64, Value)> = map
            .values()
            .filter(|p| p.session_id == session_id)
            .map(|p| (p.order, p.view.clone()))
            .collect();
        items.sort_by_key(|(o, _)| *o);
        items.into_iter().map(|(_, v)| v).collect()
    }

    /// Sessions with at least one pending entry.
    pub fn sessions_waiting(&self) -> Vec<String> {
        let mut out: Vec<String> = self.lock().values().map(|p| p.session_id.clone()).collect();
        out.sort();
        out.dedup();
        out
    }

    /// Answers entry `id` of `session_id` with what `make` builds from the entry's view;
    /// a `make` error leaves the entry pending.
    pub fn answer_with(
        &self,
        session_id: &str,
        id: &str,
        make: impl FnOnce(&Value) -> Result<T, String>,
    ) -> Answered {
        let entry = {
            let mut map = self.lock();
            let value = match map.get(id) {
                Some(p) if p.session_id == session_id => make(&p.view),
                _ => return Answered::NotPending,
            };
            match value {
                Ok(value) => map.remove(id).map(|e| (e, value)),
                Err(message) => return Answered::Invalid(message),
            }
        };
        match entry {
            Some((e, value)) => {
                let _ = e.answer.send(value);
                self.changed(session_id);
                Answered::Accepted
            }
            None => Answered::NotPending,
        }
    }

    /// Shows `view` as entry `id` of `session_id` and waits for its answer; `None` when
    /// `cancel` fires or the entry is dropped (shutdown) first.
    pub async fn wait(
        &self,
        id: String,
        session_id: String,
        view: Value,
        cancel: &CancellationToken,
    ) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        let order = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(
            id.clone(),
            Entry {
                order,
                session_id: session_id.clone(),
                view,
                answer: tx,
            },
        );
        self.changed(&session_id);
        // Also when this future is dropped unfinished (a caller gave up on it first).
        let _clear = Clear {
            waits: self,
            id: &id,
            session_id: &session_id,
        };
        tokio::select! {
            answer = rx => answer.ok(),
            () = cancel.cancelled() => None,
        }
    }

    /// Resolves every pending wait without an answer (shutdown).
    pub fn close_all(&self) {
        let drained = std::mem::take(&mut *self.lock());
        let mut sessions: Vec<String> = drained.into_values().map(|e| e.session_id).collect();
        sessions.sort();
        sessions.dedup();
        for s in sessions {
            self.changed(&s);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_wait_dropped_unfinished_leaves_nothing_pending() {
        let waits: PendingWaits<u8> = PendingWaits::new(Hub::default(), Signal::Questions);
        let cancel = CancellationToken::new();
        let wait = waits.wait("q".into(), "s".into(), Value::Null, &cancel);
        let gave_up = tokio::time::timeout(std::time::Duration::from_millis(20), wait).await;
        assert!(gave_up.is_err());
        assert!(waits.sessions_waiting().is_empty());
        assert_eq!(waits.answer_with("s", "q", |_| Ok(1)), Answered::NotPending);
    }

    #[tokio::test]
    async fn the_first_answer_wins_and_a_bad_one_leaves_it_pending() {
        let waits: PendingWaits<u8> = PendingWaits::new(Hub::default(), Signal::Questions);
        let cancel = CancellationToken::new();
        let other = waits.clone();
        let answering = tokio::spawn(async move {
            while other.of_session("s").is_empty() {
                tokio::task::yield_now().await;
            }
            assert_eq!(other.answer_with("t", "q", |_| Ok(9)), Answered::NotPending);
            assert_eq!(
                other.answer_with("s", "q", |_| Err("no".into())),
                Answered::Invalid("no".into())
            );
            assert_eq!(other.answer_with("s", "q", |_| Ok(2)), Answered::Accepted);
            assert_eq!(other.answer_with("s", "q", |_| Ok(3)), Answered::NotPending);
        });
        let got = waits
            .wait("q".into(), "s".into(), Value::Null, &cancel)
            .await;
        answering.await.unwrap();
        assert_eq!(got, Some(2));
        assert!(waits.of_session("s").is_empty());
    }
}
