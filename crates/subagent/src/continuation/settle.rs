//! How a continuable child ends: disposal, the settlement notice to its parent, and draining
//! children (a process ending, a parent going away).

use super::*;

impl Continuations {
    pub(super) fn state_of(&self, a: &Activation) -> ActivationState {
        if a.agent.status() == AgentStatus::Running || !lock(&a.accepted).is_empty() {
            ActivationState::Running
        } else if !lock(&a.owned).is_empty() {
            ActivationState::Waiting
        } else {
            ActivationState::Settled
        }
    }

    /// Disposes an activation (memoized): children first, then the child agent; notifies
    /// the parent, releases ownership and emits `subagent/end`.
    pub(super) fn dispose(&self, a: Arc<Activation>) -> Disposal {
        let mut slot = lock(&a.disposal);
        if let Some(d) = slot.as_ref() {
            return d.clone();
        }
        let me = self.me.clone();
        let target = a.clone();
        let fut: BoxFuture<'static, Result<(), String>> = async move {
            match me.upgrade() {
                Some(me) => me.finish_disposal(target).await,
                None => {
                    target.agent.dispose().await;
                    Ok(())
                }
            }
        }
        .boxed();
        let shared = fut.shared();
        *slot = Some(shared.clone());
        drop(slot);
        tokio::spawn(shared.clone().map(|_| ()));
        shared
    }

    pub(super) async fn finish_disposal(&self, a: Arc<Activation>) -> Result<(), String> {
        a.wake();
        a.agent.cancel(CancelCause::Parent, false);
        let idle = a.agent.when_idle();
        let owned: Vec<Arc<Activation>> = lock(&a.owned)
            .iter()
            .filter_map(|id| self.activation(id))
            .collect();
        let results = futures::future::join_all(owned.into_iter().map(|c| self.dispose(c))).await;
        let mut failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
        if !failures.is_empty() {
            failures = vec![format!(
                "subagent \"{}\" child teardown failed: {}",
                a.child_id,
                failures.join("; ")
            )];
        }
        idle.await;
        if let Err(e) = a.agent.session().flush().await {
            tracing::warn!(
                "subagent \"{}\": the last flush of its session failed, so a later resume may find its stored state missing or out of date: {e}",
                a.child_id
            );
        }
        let boundary = a.boundary.load(Ordering::SeqCst) as usize;
        let own = a
            .agent
            .session()
            .read(|s| s.events().get(boundary..).map(<[_]>::to_vec))
            .unwrap_or_default();
        let mut stop = StopReason::of_epoch(&fold_consumed_work(&own));
        let mut output = final_assistant_output(&own);
        a.agent.dispose().await;
        lock(&self.state).activations.remove(&a.child_id);
        let failure = (!failures.is_empty()).then(|| failures.join("; "));
        if failure.is_some() {
            stop = StopReason::Error;
            output = None;
        }
        self.notify_settlement(&a, stop, output.clone());
        self.release_ownership(&a.child_id);
        let end = SubagentRunEnd {
            info: a.info.clone(),
            stop_reason: stop.as_str().to_string(),
            last_assistant_message: output,
        };
        a.info.parent.ctx().emit::<SubagentEnd>(&end);
        match failure {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }

    pub(super) fn notify_settlement(
        &self,
        a: &Activation,
        stop: StopReason,
        output: Option<Vec<ContentBlock>>,
    ) {
        if !a.announced.load(Ordering::SeqCst) {
            return;
        }
        let Some(parent) = self.agents.get(&a.parent_session) else {
            return;
        };
        let message = settlement_notice(&a.child_id, stop, output);
        let sent = if self.closing_for(&parent) {
            parent.inject(message).map_err(|e| e.to_string())
        } else {
            let id = message.id.clone();
            let target = parent.clone();
            self.admit_waking(&parent, &id, move || {
                let sent = if target.status() == AgentStatus::Idle {
                    target.followup(message)
                } else {
                    target.steer(message)
                };
                sent.map_err(|e| Box::new(e) as BoxError)
            })
            .map_err(|e| e.to_string())
        };
        if let Err(e) = sent {
            tracing::warn!(
                "subagent \"{}\" settlement notice was not delivered to its parent: {e}",
                a.child_id
            );
        }
    }

    /// Disposes every resident continuable descendant of `parents` (host teardown): no new
    /// delivery below them is admitted meanwhile.
    pub async fn drain_descendants(&self, parents: &[AgentRef]) -> Result<(), BoxError> {
        let ids: HashSet<String> = parents.iter().map(|p| p.id().to_string()).collect();
        let roots: Vec<Arc<Activation>> = {
            let mut s = lock(&self.state);
            s.closing.extend(ids.iter().cloned());
            s.activations
                .values()
                .filter(|a| ids.contains(&a.parent_session))
                .cloned()
                .collect()
        };
        let results = futures::future::join_all(roots.into_iter().map(|a| self.dispose(a))).await;
        {
            let mut s = lock(&self.state);
            for id in &ids {
                s.closing.remove(id);
            }
        }
        let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(subagent_error(
                "ACTIVATION_TEARDOWN_FAILED",
                format!(
                    "continuable subagent teardown failed for {} activation(s): {}",
                    failures.len(),
                    failures.join("; ")
                ),
            ))
        }
    }

    /// Closes admission and disposes every resident child.
    pub async fn drain(&self) {
        let roots: Vec<Arc<Activation>> = {
            let mut s = lock(&self.state);
            s.draining = true;
            let owned: HashSet<String> = s
                .activations
                .values()
                .flat_map(|a| lock(&a.owned).iter().cloned().collect::<Vec<_>>())
                .collect();
            s.activations
                .values()
                .filter(|a| !owned.contains(&a.child_id))
                .cloned()
                .collect()
        };
        for r in futures::future::join_all(roots.into_iter().map(|a| self.dispose(a))).await {
            if let Err(e) = r {
                tracing::warn!("continuable subagent teardown failed: {e}");
            }
        }
    }
}

/// Watches one activation until it settles, then disposes it.
pub(super) async fn watch(manager: Weak<Continuations>, a: Arc<Activation>) {
    loop {
        if a.disposing() {
            return;
        }
        let idle = a.agent.when_idle();
        tokio::select! {
            _ = idle => {}
            _ = a.poke.notified() => {}
        }
        let Some(m) = manager.upgrade() else {
            return;
        };
        let child_lock = m.child_lock(&a.child_id);
        let held = child_lock.lock().await;
        if a.disposing() {
            return;
        }
        match m.state_of(&a) {
            ActivationState::Settled => {
                let done = m.dispose(a.clone());
                drop(held);
                if let Err(e) = done.await {
                    tracing::warn!(
                        "subagent \"{}\" activation teardown failed: {e}",
                        a.child_id
                    );
                }
                return;
            }
            ActivationState::Running => {
                drop(held);
                if a.agent.status() != AgentStatus::Running {
                    a.poke.notified().await;
                }
            }
            ActivationState::Waiting => {
                drop(held);
                a.poke.notified().await;
            }
        }
    }
}
