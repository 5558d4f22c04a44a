//! The inbox projection: two ordered lists of pending user messages, rebuilt from durable
//! `agent/inbox/spliced` events and changed only through normalized splices.

use std::sync::Arc;

use dsh_llm::Message;
use dsh_session::{Event, InboxSplice, InboxTarget, types};
use serde_json::Value;

/// One normalized splice.
#[derive(Clone, Debug, PartialEq)]
pub struct Splice {
    pub target: InboxTarget,
    pub start: usize,
    pub removed: Vec<Arc<Message>>,
    pub inserted: Vec<Arc<Message>>,
    /// Removals are cancellations (`outcome: "canceled"`, discarded notifications).
    pub canceled: bool,
}

impl Splice {
    /// The durable `agent/inbox/spliced` data.
    pub fn to_data(&self) -> Value {
        let data = InboxSplice {
            target: self.target,
            start: self.start as u64,
            removed_count: (!self.removed.is_empty()).then_some(self.removed.len() as u64),
            inserted: self.inserted.iter().map(|m| (**m).clone()).collect(),
            outcome: (self.canceled && !self.removed.is_empty()).then(|| "canceled".to_string()),
        };
        dsh_session::to_data(&data)
    }
}

/// `next-turn` (queued prompts, one per turn) and `next-step` (steering and context).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inbox {
    pub next_turn: Vec<Arc<Message>>,
    pub next_step: Vec<Arc<Message>>,
}

impl Inbox {
    fn list(&self, target: InboxTarget) -> &Vec<Arc<Message>> {
        match target {
            InboxTarget::NextTurn => &self.next_turn,
            InboxTarget::NextStep => &self.next_step,
        }
    }

    fn list_mut(&mut self, target: InboxTarget) -> &mut Vec<Arc<Message>> {
        match target {
            InboxTarget::NextTurn => &mut self.next_turn,
            InboxTarget::NextStep => &mut self.next_step,
        }
    }

    pub fn has_pending(&self) -> bool {
        !self.next_turn.is_empty() || !self.next_step.is_empty()
    }

    /// Replays every splice at or after `from_seq` (the fork boundary).
    pub fn replay(events: &[Arc<Event>], from_seq: u64) -> Result<Self, String> {
        let mut inbox = Inbox::default();
        for e in events
            .iter()
            .filter(|e| e.seq >= from_seq && e.is(types::INBOX_SPLICED))
        {
            let bad = || format!("invalid persisted inbox splice at session seq {}", e.seq);
            let data: InboxSplice = serde_json::from_value(e.data.to_value()).map_err(|_| bad())?;
            let start = data.start as usize;
            let removed = data.removed_count.unwrap_or(0) as usize;
            let list = inbox.list(data.target);
            if start > list.len() || start + removed > list.len() {
                return Err(bad());
            }
            let removed_msgs = list[start..start + removed].to_vec();
            let splice = Splice {
                target: data.target,
                start,
                removed: removed_msgs,
                inserted: data.inserted.into_iter().map(Arc::new).collect(),
                canceled: data.outcome.is_some(),
            };
            inbox.validate(&splice).map_err(|_| bad())?;
            inbox.apply(&splice);
        }
        Ok(inbox)
    }

    /// Normalizes a splice like `Array.prototype.splice`. `None` when it changes nothing.
    pub fn plan(
        &self,
        target: InboxTarget,
        start: Option<usize>,
        delete: usize,
        inserted: Vec<Arc<Message>>,
        canceled: bool,
    ) -> Option<Splice> {
        let list = self.list(target);
        let start = start.unwrap_or(list.len()).min(list.len());
        let delete = delete.min(list.len() - start);
        if delete == 0 && inserted.is_empty() {
            return None;
        }
        Some(Splice {
            target,
            start,
            removed: list[start..start + delete].to_vec(),
            inserted,
            canceled,
        })
    }

    /// Message ids must be unique across both lists after the splice.
    pub fn validate(&self, splice: &Splice) -> Result<(), String> {
        let removed_ids: Vec<&str> = splice.removed.iter().map(|m| m.id.as_str()).collect();
        let existing = self
            .next_turn
            .iter()
            .chain(self.next_step.iter())
            .map(|m| m.id.as_str())
            .filter(|id| !removed_ids.contains(id));
        let mut seen: Vec<&str> = existing.collect();
        for m in &splice.inserted {
            if seen.contains(&m.id.as_str()) {
                return Err(format!(
                    "inbox already holds a message with id \"{}\"",
                    m.id
                ));
            }
            seen.push(&m.id);
        }
        Ok(())
    }

    pub fn apply(&mut self, splice: &Splice) {
        let list = self.list_mut(splice.target);
        let end = splice.start + splice.removed.len();
        list.splice(splice.start..end, splice.inserted.iter().cloned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn m(id: &str) -> Arc<Message> {
        let mut msg = Message::user_text(id);
        msg.id = id.into();
        Arc::new(msg)
    }

    #[test]
    fn splices_normalize_and_validate() {
        let mut inbox = Inbox::default();
        let s = inbox
            .plan(InboxTarget::NextTurn, None, 0, vec![m("a"), m("b")], false)
            .unwrap();
        inbox.apply(&s);
        assert_eq!(
            inbox.plan(InboxTarget::NextTurn, Some(9), 5, vec![], false),
            None,
            "nothing to do"
        );
        let dup = inbox
            .plan(InboxTarget::NextStep, None, 0, vec![m("a")], false)
            .unwrap();
        assert!(
            inbox.validate(&dup).is_err(),
            "ids are unique across both lists"
        );
        let claim = inbox
            .plan(InboxTarget::NextTurn, Some(0), 1, vec![], false)
            .unwrap();
        assert_eq!(
            dsh_kernel::json::to_string(&claim.to_data()),
            r#"{"target":"next-turn","start":0,"removedCount":1,"inserted":[]}"#
        );
        inbox.apply(&claim);
        assert_eq!(inbox.next_turn, [m("b")]);
        let cancel = inbox
            .plan(InboxTarget::NextTurn, Some(0), 1, vec![], true)
            .unwrap();
        assert_eq!(
            dsh_kernel::json::to_string(&cancel.to_data()),
            r#"{"target":"next-turn","start":0,"removedCount":1,"inserted":[],"outcome":"canceled"}"#
        );
    }
}
