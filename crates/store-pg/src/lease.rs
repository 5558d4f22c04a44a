//! [`LeaseKeeper`]: keeping a lease while its holder works, and telling the holder the moment
//! it may have lost it (or was asked to stop).

use std::time::Duration;

use dsh_process::AbortOnDrop;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{Lease, Store, StoreError};

/// Renews a lease in the background; its token is cancelled once the lease may be lost.
pub struct LeaseKeeper {
    fenced: CancellationToken,
    cancel: CancellationToken,
    _task: AbortOnDrop<()>,
}

/// How soon a renewal that failed is tried again (at most a third of the TTL).
const RETRY: Duration = Duration::from_millis(250);

/// When a holder whose last successful renewal was sent at `sent` must consider its lease
/// lost: `ttl` later (the database set the expiry no earlier than that).
fn fence_deadline(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl
}

impl LeaseKeeper {
    /// Keeps `lease` (taken with `ttl`, `taken_at` being when the acquiring statement was
    /// sent) on `store`, a connection the keeper owns.
    pub fn start(store: Store, lease: Lease, ttl: Duration, taken_at: Instant) -> Self {
        Self::spawn(store, None, lease, ttl, taken_at)
    }

    /// [`LeaseKeeper::start`], reconnecting to `url` when the connection closes (the
    /// database restarted, a proxy reset it): the lease survives anything shorter than its TTL.
    pub fn start_reconnecting(
        store: Store,
        url: &str,
        lease: Lease,
        ttl: Duration,
        taken_at: Instant,
    ) -> Self {
        Self::spawn(store, Some(url.to_string()), lease, ttl, taken_at)
    }

    fn spawn(
        store: Store,
        url: Option<String>,
        lease: Lease,
        ttl: Duration,
        taken_at: Instant,
    ) -> Self {
        let fenced = CancellationToken::new();
        let token = fenced.clone();
        let cancel = CancellationToken::new();
        let asked = cancel.clone();
        let task = tokio::spawn(async move {
            let mut store = Some(store);
            let mut deadline = fence_deadline(taken_at, ttl);
            let every = ttl / 3;
            // After a failed renewal the next try comes sooner: a store that is back within
            // the TTL keeps the lease, however the outage fell between renewals.
            let soon = every.min(RETRY);
            let mut pause = every;
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {
                        tracing::warn!(
                            "lease of session {} (epoch {}) not renewed within its TTL: fencing this writer",
                            lease.session, lease.epoch
                        );
                        token.cancel();
                        return;
                    }
                    () = tokio::time::sleep(pause) => {}
                }
                pause = soon;
                if store.is_none()
                    && let Some(url) = &url
                {
                    store = tokio::select! {
                        c = Store::connect(url) => c.ok(),
                        () = tokio::time::sleep_until(deadline) => None,
                    };
                }
                let Some(current) = &store else { continue };
                let sent = Instant::now();
                let renewed = tokio::select! {
                    r = current.renew_watching(&lease, ttl) => r,
                    () = tokio::time::sleep_until(deadline) => continue,
                };
                match renewed {
                    Ok(Some(cancelled)) => {
                        deadline = fence_deadline(sent, ttl);
                        pause = every;
                        if cancelled {
                            asked.cancel();
                        }
                    }
                    Ok(None) => {
                        tracing::warn!(
                            "lease of session {} (epoch {}) was taken over: fencing this writer",
                            lease.session,
                            lease.epoch
                        );
                        token.cancel();
                        return;
                    }
                    // The deadline decides; a closed connection is opened again first.
                    Err(e) => {
                        tracing::warn!("cannot renew the lease of {}: {e}", lease.session);
                        if matches!(&e, StoreError::Db(db) if db.is_closed()) && url.is_some() {
                            store = None;
                        }
                    }
                }
            }
        });
        Self {
            fenced,
            cancel,
            _task: AbortOnDrop(task),
        }
    }

    /// Cancelled once a renewal learns that the turn under the lease was asked to stop
    /// ([`Store::request_cancel`]): the holder should stop the turn as a user's Ctrl-C would.
    pub fn cancel_requested(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Cancelled once the lease may be lost: the holder must stop its tools and append nothing.
    pub fn fenced(&self) -> &CancellationToken {
        &self.fenced
    }
}
