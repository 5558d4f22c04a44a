//! `LiveSession::append_group`: adjacent appends whose later events cite earlier ones.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_kernel::Context;
use dsh_session::{SessionHeader, SessionSource, SessionStore, system_clock};
use serde_json::json;

#[test]
fn a_group_lands_in_order_and_stops_at_a_refusal() {
    let root = Context::new_root();
    let store = SessionStore::new(system_clock());
    let s = store
        .create(&root, SessionHeader::new("g", 0), SessionSource::Fresh)
        .unwrap();
    s.append("turn/start", json!({"turn": 1}), None).unwrap();
    let got = s
        .append_group(|first| {
            vec![
                (
                    "compaction/start".into(),
                    json!({"compactionId": "k", "turn": 1}),
                    None,
                ),
                (
                    "compaction/end".into(),
                    json!({"compactionId": "k", "turn": 1, "cites": first}),
                    None,
                ),
            ]
        })
        .unwrap();
    let seqs: Vec<u64> = got.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2]);
    assert_eq!(got[1].data["cites"], 1);
    // A refused event stops the group; the ones before it stay.
    let err = s.append_group(|_| {
        vec![
            (
                "compaction/start".into(),
                json!({"compactionId": "x", "turn": 1}),
                None,
            ),
            ("step/start".into(), json!({"turn": 9, "step": 1}), None),
            (
                "compaction/end".into(),
                json!({"compactionId": "x", "turn": 1}),
                None,
            ),
        ]
    });
    assert!(err.is_err());
    assert_eq!(s.next_seq(), 4);
}
