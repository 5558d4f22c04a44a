//! Folding every matched hook's outcome into one, most restrictive first: `deny > ask >
//! allow`; only the reasons of the winning rank are kept (joined by a blank line); the
//! first `continue:false` wins; contexts and system messages accumulate in hook order.

use super::codec::{HookDecision, HookOutput};

/// The single decision a hook point resolves to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergedDecision {
    Allow,
    Ask,
    Deny,
    /// No hook expressed a decision.
    None,
}

/// The folded outcome of every hook that matched one point.
#[derive(Clone, Debug, PartialEq)]
pub struct MergedOutcome {
    pub decision: MergedDecision,
    /// The winning rank's reasons joined with `\n\n` (only for `deny` and `ask`).
    pub reason: Option<String>,
    /// Some hook asked to halt (`continue:false`). Logged, not yet acted on (upstream's
    /// `hook-continue-false` is still open).
    pub stop: bool,
    pub stop_reason: Option<String>,
    pub additional_context: Vec<String>,
    pub system_messages: Vec<String>,
}

fn rank(decision: Option<HookDecision>) -> u8 {
    match decision {
        Some(HookDecision::Deny | HookDecision::Block) => 3,
        Some(HookDecision::Ask) => 2,
        Some(HookDecision::Approve | HookDecision::Allow) => 1,
        None => 0,
    }
}

/// Folds `outputs` (in hook order); an empty list is neutral.
pub fn merge_hook_outputs(outputs: &[HookOutput]) -> MergedOutcome {
    let mut max_rank = 0;
    let mut reasons: [Vec<&str>; 4] = Default::default();
    let mut stop = false;
    let mut stop_reason = None;
    let mut additional_context = Vec::new();
    let mut system_messages = Vec::new();
    for out in outputs {
        let r = rank(out.decision);
        max_rank = max_rank.max(r);
        if r >= 2
            && let Some(reason) = out.reason.as_deref().filter(|s| !s.is_empty())
        {
            reasons[usize::from(r)].push(reason);
        }
        if out.proceed == Some(false) && !stop {
            stop = true;
            stop_reason = out.stop_reason.clone();
        }
        if let Some(c) = out.additional_context.as_ref().filter(|s| !s.is_empty()) {
            additional_context.push(c.clone());
        }
        if let Some(m) = out.system_message.as_ref().filter(|s| !s.is_empty()) {
            system_messages.push(m.clone());
        }
    }
    let winning = &reasons[usize::from(max_rank)];
    MergedOutcome {
        decision: match max_rank {
            3 => MergedDecision::Deny,
            2 => MergedDecision::Ask,
            1 => MergedDecision::Allow,
            _ => MergedDecision::None,
        },
        reason: (!winning.is_empty()).then(|| winning.join("\n\n")),
        stop,
        stop_reason,
        additional_context,
        system_messages,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn out(decision: Option<HookDecision>, reason: Option<&str>) -> HookOutput {
        HookOutput {
            decision,
            reason: reason.map(str::to_owned),
            ..HookOutput::default()
        }
    }

    #[test]
    fn deny_beats_ask_beats_allow_and_only_winning_reasons_survive() {
        let merged = merge_hook_outputs(&[
            out(Some(HookDecision::Allow), Some("fine")),
            out(Some(HookDecision::Ask), Some("check")),
            out(Some(HookDecision::Block), Some("no")),
            out(Some(HookDecision::Deny), Some("never")),
            out(Some(HookDecision::Deny), Some("")),
        ]);
        assert_eq!(
            (merged.decision, merged.reason.as_deref()),
            (MergedDecision::Deny, Some("no\n\nnever"))
        );
        let merged = merge_hook_outputs(&[
            out(Some(HookDecision::Approve), Some("ok")),
            out(Some(HookDecision::Ask), None),
        ]);
        assert_eq!(
            (merged.decision, merged.reason),
            (MergedDecision::Ask, None)
        );
        let merged = merge_hook_outputs(&[out(Some(HookDecision::Approve), Some("ok"))]);
        assert_eq!(
            (merged.decision, merged.reason),
            (MergedDecision::Allow, None),
            "allow carries no reason"
        );
    }

    #[test]
    fn the_first_stop_is_sticky_and_contexts_accumulate_in_order() {
        let a = HookOutput {
            proceed: Some(false),
            stop_reason: Some("first".into()),
            additional_context: Some("one".into()),
            ..HookOutput::default()
        };
        let b = HookOutput {
            proceed: Some(false),
            stop_reason: Some("second".into()),
            additional_context: Some("two".into()),
            system_message: Some("note".into()),
            ..HookOutput::default()
        };
        assert_eq!(
            merge_hook_outputs(&[a, b]),
            MergedOutcome {
                decision: MergedDecision::None,
                reason: None,
                stop: true,
                stop_reason: Some("first".into()),
                additional_context: vec!["one".into(), "two".into()],
                system_messages: vec!["note".into()],
            }
        );
        assert_eq!(merge_hook_outputs(&[]).decision, MergedDecision::None);
    }
}
