//! Choosing what to compact: the oldest surface range that leaves a priced recent tail
//! and never separates a tool call from its result.

use crate::meter::PricedNode;

/// Whether the cut before `nodes[k]` leaves every tool call with its result on one side.
fn balanced_before(nodes: &[PricedNode], k: usize) -> bool {
    let mut open: i64 = 0;
    for n in &nodes[..k] {
        open += i64::from(n.calls);
        if n.result {
            open -= 1;
        }
    }
    open == 0
}

/// The head-anchored range `[0, end]` (indices into `nodes`) to compact so that the nodes
/// after it cost at least `retain` tokens (with `retain == 0`: everything but the newest
/// node), moved towards the head until the cut is balanced. `None`: nothing to compact.
pub fn compactable_range(nodes: &[PricedNode], retain: u64) -> Option<usize> {
    if nodes.is_empty() {
        return None;
    }
    let mut tail = 0u64;
    let mut keep_from = nodes.len() - 1;
    for (i, n) in nodes.iter().enumerate().rev() {
        tail += n.tokens;
        keep_from = i;
        if tail >= retain {
            break;
        }
    }
    while keep_from > 0 && !balanced_before(nodes, keep_from) {
        keep_from -= 1;
    }
    (keep_from > 0).then(|| keep_from - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn user(seq: u64, tokens: u64) -> PricedNode {
        PricedNode {
            seq,
            tokens,
            calls: 0,
            result: false,
        }
    }
    fn call(seq: u64, tokens: u64) -> PricedNode {
        PricedNode {
            seq,
            tokens,
            calls: 1,
            result: false,
        }
    }
    fn result(seq: u64, tokens: u64) -> PricedNode {
        PricedNode {
            seq,
            tokens,
            calls: 0,
            result: true,
        }
    }

    #[test]
    fn the_tail_keeps_at_least_retain_tokens() {
        let nodes = [
            user(0, 10),
            call(1, 5),
            result(2, 100),
            call(3, 5),
            result(4, 100),
        ];
        // Retain 100: the last result alone is enough, but the cut before it splits call 3
        // from its result, so the tail starts at the call.
        assert_eq!(compactable_range(&nodes, 100), Some(2));
        // Retain 0 keeps the newest indivisible unit.
        assert_eq!(compactable_range(&nodes, 0), Some(2));
        // Retaining everything leaves nothing to compact.
        assert_eq!(compactable_range(&nodes, 1000), None);
        assert_eq!(compactable_range(&[], 0), None);
        assert_eq!(compactable_range(&[user(0, 5)], 0), None);
    }

    #[test]
    fn cuts_never_split_parallel_calls() {
        let two = PricedNode {
            seq: 1,
            tokens: 5,
            calls: 2,
            result: false,
        };
        let nodes = [user(0, 10), two, result(2, 50), result(3, 50), user(4, 10)];
        assert_eq!(compactable_range(&nodes, 60), Some(0));
        assert_eq!(compactable_range(&nodes, 10), Some(3));
    }
}
