//! The FIFO limiter behind `imageCompressionConcurrency`: at most `permits` normalizations
//! run at once, and waiters are admitted in the order they arrived.

use std::sync::{Condvar, Mutex, PoisonError};

#[derive(Debug, Default)]
struct State {
    /// The ticket the next caller takes.
    next: u64,
    /// The oldest ticket not yet admitted.
    head: u64,
    active: usize,
    peak: usize,
}

#[derive(Debug)]
pub(crate) struct FifoLimiter {
    permits: usize,
    state: Mutex<State>,
    changed: Condvar,
}

/// Holds one permit; dropping it lets the next waiter in.
pub(crate) struct Permit<'a>(&'a FifoLimiter);

impl FifoLimiter {
    pub(crate) fn new(permits: usize) -> Self {
        Self {
            permits: permits.max(1),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        }
    }

    pub(crate) fn permits(&self) -> usize {
        self.permits
    }

    /// Waits for this caller's turn and a free permit.
    pub(crate) fn acquire(&self) -> Permit<'_> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let ticket = state.next;
        state.next += 1;
        while !(state.head == ticket && state.active < self.permits) {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.head += 1;
        state.active += 1;
        state.peak = state.peak.max(state.active);
        drop(state);
        // The next ticket may also fit under the limit.
        self.changed.notify_all();
        Permit(self)
    }

    /// The most permits ever held at once.
    pub(crate) fn peak(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .peak
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.active = state.active.saturating_sub(1);
        drop(state);
        self.0.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::FifoLimiter;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn never_admits_more_than_its_permits() {
        for permits in [1, 2, 3] {
            let limiter = Arc::new(FifoLimiter::new(permits));
            let running = Arc::new(AtomicUsize::new(0));
            let seen = Arc::new(AtomicUsize::new(0));
            std::thread::scope(|s| {
                for _ in 0..8 {
                    let (limiter, running, seen) = (&limiter, &running, &seen);
                    s.spawn(move || {
                        let _permit = limiter.acquire();
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        seen.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        running.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            });
            assert!(seen.load(Ordering::SeqCst) <= permits);
            assert_eq!(limiter.peak(), seen.load(Ordering::SeqCst));
        }
    }
}
