//! Owners' side of the registry: notices at step boundaries and when idle, and what an owner's
//! teardown does to its jobs.

use super::*;

impl JobRegistry {
    pub(super) fn announce(&self, snapshot: &JobSnapshot, owner: &AgentRef) {
        let listeners: Vec<JobDoneListener> = self
            .state()
            .listeners
            .iter()
            .map(|(_, l)| l.clone())
            .collect();
        for listener in listeners {
            listener(snapshot, owner);
        }
    }

    /// Announces the deferred settlements of `owner` that are still unreported.
    pub(super) fn flush_pending(&self, owner: &AgentRef) {
        let ready: Vec<JobSnapshot> = {
            let mut s = self.state();
            let ids = s.pending.remove(owner.id()).unwrap_or_default();
            if s.closed {
                return;
            }
            ids.iter()
                .filter_map(|id| {
                    s.jobs
                        .get(id)
                        .filter(|j| j.owned_by(owner) && !j.reported)
                        .map(|j| j.snapshot(id))
                })
                .collect()
        };
        for snapshot in ready {
            self.announce(&snapshot, owner);
        }
    }

    /// The owner reached a step boundary (`agent/pre-step`, after the claim): jobs started
    /// before it may now be announced. The `jobs-local` row calls it; a driver without
    /// `agent/pre-step` must call it at its own step boundaries.
    pub fn step_boundary(&self, owner: &AgentRef) {
        *self
            .state()
            .epochs
            .entry(owner.id().to_string())
            .or_insert(0) += 1;
        self.flush_pending(owner);
    }

    /// The owner went idle: nothing more happens in the starting step.
    pub fn owner_idle(&self, owner: &AgentRef) {
        let has_pending = self.state().pending.contains_key(owner.id());
        if has_pending {
            self.flush_pending(owner);
        }
    }

    pub(super) fn ensure_owner_cleanup(&self, owner: &AgentRef) -> Result<(), BoxError> {
        let key = owner.id().to_string();
        if self.state().cleanups.contains(&key) {
            return Ok(());
        }
        // The awaited teardown runs at `agent/disposing`; this effect is the backstop for a
        // driver that unwinds the scope without announcing it.
        let me = self.me.clone();
        let weak_owner = Arc::downgrade(owner);
        owner.ctx().effect("jobs owner cleanup", move || {
            if let (Some(me), Some(owner)) = (me.upgrade(), weak_owner.upgrade()) {
                me.cancel_owned(&owner, "owner disposed");
                me.forget_owner(&owner);
            }
        })?;
        self.state().cleanups.push(key);
        Ok(())
    }

    /// Marks every live job of `owner` reported and cancels it. Returns the settlement
    /// receivers of the jobs that are not finished.
    pub(super) fn cancel_owned(
        &self,
        owner: &AgentRef,
        reason: &str,
    ) -> Vec<(String, watch::Receiver<bool>)> {
        let live: Vec<(String, Arc<CancelFn>, watch::Receiver<bool>)> = {
            let mut s = self.state();
            s.pending.remove(owner.id());
            s.jobs
                .iter_mut()
                .filter(|(_, j)| j.owned_by(owner) && !j.status.is_terminal())
                .map(|(id, j)| {
                    j.reported = true;
                    j.cause = Some(Cause::Teardown);
                    (id.clone(), j.cancel.clone(), j.settled.subscribe())
                })
                .collect()
        };
        self.cancel_for_teardown(live, reason)
    }

    pub(super) fn cancel_for_teardown(
        &self,
        live: Vec<(String, Arc<CancelFn>, watch::Receiver<bool>)>,
        reason: &str,
    ) -> Vec<(String, watch::Receiver<bool>)> {
        let mut waiting = Vec::new();
        for (id, cancel, rx) in live {
            match cancel(Some(reason)) {
                Ok(()) => {
                    if let Some(j) = self.state().jobs.get_mut(&id)
                        && j.status == JobStatus::Running
                    {
                        j.status = JobStatus::Stopping;
                    }
                    waiting.push((id, rx));
                }
                Err(e) => {
                    tracing::warn!(
                        "jobs: cancel of {id} failed during teardown; its work may be orphaned: {e}"
                    );
                    self.settle(
                        &id,
                        JobOutcome::new(
                            Terminal::Failed,
                            format!("cancel threw during teardown; work may be orphaned: {e}"),
                        ),
                        Cause::Teardown,
                    );
                }
            }
        }
        waiting
    }

    pub(super) fn forget_owner(&self, owner: &AgentRef) {
        let mut s = self.state();
        s.jobs.retain(|_, j| !j.owned_by(owner));
        s.epochs.remove(owner.id());
        s.pending.remove(owner.id());
        s.cleanups.retain(|k| k != owner.id());
    }

    /// Cancels `owner`'s jobs, waits (bounded) for them to settle, and drops their records.
    pub async fn dispose_owned(&self, owner: &AgentRef) {
        let waiting = self.cancel_owned(owner, "owner disposed");
        for (id, mut rx) in waiting {
            let settled = tokio::time::timeout(TEARDOWN_WAIT, rx.wait_for(|s| *s)).await;
            if settled.is_err() {
                tracing::warn!("jobs: {id} did not stop within {TEARDOWN_WAIT:?} of teardown");
                self.settle(
                    &id,
                    JobOutcome::new(
                        Terminal::Failed,
                        "did not stop within the teardown grace; work may be orphaned",
                    ),
                    Cause::Teardown,
                );
            }
        }
        self.forget_owner(owner);
    }

    /// Service teardown: no more notices, every live job cancelled, records dropped (which
    /// drops their producers' guards).
    pub(crate) fn close(&self) {
        let live: Vec<(String, Arc<CancelFn>, watch::Receiver<bool>)> = {
            let mut s = self.state();
            s.closed = true;
            s.pending.clear();
            s.jobs
                .iter_mut()
                .filter(|(_, j)| !j.status.is_terminal())
                .map(|(id, j)| {
                    j.reported = true;
                    j.cause = Some(Cause::Teardown);
                    (id.clone(), j.cancel.clone(), j.settled.subscribe())
                })
                .collect()
        };
        self.cancel_for_teardown(live, "jobs service disposed");
        let dropped: Vec<Tracked> = {
            let mut s = self.state();
            s.jobs.drain(..).map(|(_, j)| j).collect()
        };
        drop(dropped);
    }
}
