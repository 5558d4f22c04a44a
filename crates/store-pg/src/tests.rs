//! Against the PostgreSQL on loopback (`DSH_TEST_POSTGRES`, default
//! `host=127.0.0.1 port=5432 user=postgres dbname=test`), each test in a schema of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;

use super::*;

fn url() -> String {
    std::env::var("DSH_TEST_POSTGRES")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".into())
}

/// A store on a fresh schema, or `None` (a skip; a failure in a strict run) without a server.
async fn store_in(schema: &str) -> Option<Store> {
    let store = match Store::connect(&url()).await {
        Ok(s) => s,
        Err(e) => {
            dsh_test_support::prereq::skip(&format!(
                "PostgreSQL at {} ({e}); the machine's server, or set DSH_TEST_POSTGRES",
                url()
            ));
            return None;
        }
    };
    store
        .execute_batch(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; SET search_path TO {schema};"
        ))
        .await
        .unwrap();
    Some(store)
}

async fn fresh() -> Option<(Store, String)> {
    let schema = format!("dsh_t_{}", uuid::Uuid::new_v4().simple());
    let mut store = store_in(&schema).await?;
    store.migrate().await.unwrap();
    Some((store, schema))
}

async fn drop_schema(store: &Store, schema: &str) {
    store
        .execute_batch(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}

fn events(kinds: &[&str]) -> Vec<NewEvent> {
    kinds
        .iter()
        .map(|k| NewEvent {
            kind: (*k).to_string(),
            data: format!(r#"{{"type":"{k}", "z":1,"a":[1, 2]}}"#),
        })
        .collect()
}

const TTL: Duration = Duration::from_secs(30);

#[tokio::test]
async fn appends_are_contiguous_and_keep_the_payload_bytes() {
    let Some((mut store, schema)) = fresh().await else {
        return;
    };
    // Migrating again changes nothing.
    store.migrate().await.unwrap();
    assert!(store.create_session("s1", None).await.unwrap());
    assert!(!store.create_session("s1", None).await.unwrap());
    let lease = store.acquire("s1", "w1", TTL).await.unwrap().unwrap();
    assert_eq!(lease.epoch, 1);
    assert_eq!(
        store
            .append(&lease, 0, &events(&["a", "b", "c"]))
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        store.append(&lease, 3, &events(&["d", "e"])).await.unwrap(),
        5
    );
    let read = store.read("s1", 0, 100).await.unwrap();
    assert_eq!(
        read.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    assert_eq!(read[3].kind, "d");
    // The record's text as written, spacing included (the column is `json`, not `jsonb`).
    assert_eq!(read[0].data, r#"{"type":"a", "z":1,"a":[1, 2]}"#);
    assert_eq!(store.read("s1", 3, 1).await.unwrap()[0].seq, 4);
    // A stale head is refused whole.
    match store.append(&lease, 3, &events(&["x"])).await {
        Err(StoreError::HeadMoved {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (3, 5)),
        other => panic!("{other:?}"),
    }
    assert_eq!(store.session("s1").await.unwrap().head_seq, 5);
    assert!(matches!(
        store.session("nope").await,
        Err(StoreError::NoSession(_))
    ));
    drop_schema(&store, &schema).await;
}

#[tokio::test]
async fn a_writer_whose_lease_was_taken_is_fenced_and_epochs_never_decrease() {
    let Some((mut a, schema)) = fresh().await else {
        return;
    };
    let mut b = store_in(&schema).await.unwrap();
    a.create_session("s", None).await.unwrap();
    // A zero TTL is expired as soon as it is taken: B may claim at once.
    let old = a.acquire("s", "a", Duration::ZERO).await.unwrap().unwrap();
    let held = b.acquire("s", "b", TTL).await.unwrap().unwrap();
    assert_eq!((old.epoch, held.epoch), (1, 2));
    // While B holds it, nobody else can take it.
    assert_eq!(a.acquire("s", "a", TTL).await.unwrap(), None);
    b.append(&held, 0, &events(&["b1"])).await.unwrap();
    // The frozen writer wakes up: its append, its renewal and its release change nothing.
    match a.append(&old, 1, &events(&["a1"])).await {
        Err(StoreError::Fenced { epoch, current, .. }) => assert_eq!((epoch, current), (1, 2)),
        other => panic!("{other:?}"),
    }
    assert!(!a.renew(&old, TTL).await.unwrap());
    a.release(&old).await.unwrap();
    assert!(b.renew(&held, TTL).await.unwrap());
    b.append(&held, 1, &events(&["b2"])).await.unwrap();
    // B gives it up: A takes it with the next epoch and continues the same seqs.
    b.release(&held).await.unwrap();
    let next = a.acquire("s", "a", TTL).await.unwrap().unwrap();
    assert_eq!(next.epoch, 3);
    a.append(&next, 2, &events(&["a2"])).await.unwrap();
    let log = a.read("s", 0, 100).await.unwrap();
    assert_eq!(
        log.iter().map(|e| (e.seq, e.epoch)).collect::<Vec<_>>(),
        vec![(1, 2), (2, 2), (3, 3)]
    );
    drop_schema(&a, &schema).await;
}

#[tokio::test]
async fn racing_appends_with_one_head_land_exactly_once() {
    let Some((mut a, schema)) = fresh().await else {
        return;
    };
    let mut b = store_in(&schema).await.unwrap();
    a.create_session("s", None).await.unwrap();
    let lease = a.acquire("s", "w", TTL).await.unwrap().unwrap();
    // Two copies of one writer (a retried request) race on the same head.
    for round in 0..20i64 {
        let head = round;
        let (x, y) = (events(&["x"]), events(&["y"]));
        let (ra, rb) = tokio::join!(a.append(&lease, head, &x), b.append(&lease, head, &y));
        let landed = [ra.is_ok(), rb.is_ok()];
        assert_eq!(
            landed.iter().filter(|l| **l).count(),
            1,
            "round {round}: {landed:?}"
        );
        // The loser is told the head moved (not a key clash surfacing from the insert).
        let loser = if ra.is_ok() { rb } else { ra };
        assert!(
            matches!(loser, Err(StoreError::HeadMoved { expected, actual, .. }) if expected == head && actual == head + 1),
            "round {round}: {loser:?}"
        );
    }
    let log = a.read("s", 0, 100).await.unwrap();
    assert_eq!(log.len(), 20);
    assert!(log.iter().enumerate().all(|(i, e)| e.seq == i as i64 + 1));
    drop_schema(&a, &schema).await;
}

#[tokio::test]
async fn a_kept_lease_holds_until_the_keeper_stops_and_a_taken_one_fences_its_keeper() {
    let Some((a, schema)) = fresh().await else {
        return;
    };
    let b = store_in(&schema).await.unwrap();
    a.create_session("s", None).await.unwrap();
    let ttl = Duration::from_millis(600);
    let taken_at = tokio::time::Instant::now();
    let lease = a.acquire("s", "a", ttl).await.unwrap().unwrap();
    let keeper = LeaseKeeper::start(
        store_in(&schema).await.unwrap(),
        lease.clone(),
        ttl,
        taken_at,
    );
    // Over three TTLs the keeper keeps it: nobody else can take it.
    let until = tokio::time::Instant::now() + ttl * 3;
    while tokio::time::Instant::now() < until {
        assert_eq!(b.acquire("s", "b", ttl).await.unwrap(), None);
        assert!(!keeper.fenced().is_cancelled());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The holder freezes (its keeper stops): once the TTL passes, B takes over.
    drop(keeper);
    let taken = loop {
        if let Some(l) = b.acquire("s", "b", TTL).await.unwrap() {
            break l;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(taken.epoch, lease.epoch + 1);
    // A keeper of the old lease learns at its first renewal that it is fenced.
    let stale = LeaseKeeper::start(
        store_in(&schema).await.unwrap(),
        lease,
        ttl,
        tokio::time::Instant::now(),
    );
    tokio::time::timeout(ttl * 2, stale.fenced().cancelled())
        .await
        .expect("the stale keeper was not fenced");
    drop_schema(&a, &schema).await;
}

#[tokio::test]
async fn a_keeper_that_cannot_reach_the_database_fences_itself_within_one_ttl() {
    let Some((a, schema)) = fresh().await else {
        return;
    };
    a.create_session("s", None).await.unwrap();
    let ttl = Duration::from_millis(600);
    let taken_at = tokio::time::Instant::now();
    let lease = a.acquire("s", "a", ttl).await.unwrap().unwrap();
    let own = store_in(&schema).await.unwrap();
    let pid: i32 = own
        .client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let keeper = LeaseKeeper::start(own, lease, ttl, taken_at);
    // The keeper's connection dies (the server ends it): renewals fail from now on.
    a.client
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    tokio::time::timeout(ttl * 2, keeper.fenced().cancelled())
        .await
        .expect("the keeper did not fence itself");
    assert!(taken_at.elapsed() >= ttl, "fenced before its TTL ran out");
    drop_schema(&a, &schema).await;
}

#[tokio::test]
async fn workers_claim_distinct_sessions_and_record_each_input_exactly_once() {
    let Some((a, schema)) = fresh().await else {
        return;
    };
    let b = store_in(&schema).await.unwrap();
    for s in ["s1", "s2", "s3"] {
        a.create_session(s, None).await.unwrap();
    }
    // Oldest input first: s2, then s1; s3 has input on another pool only.
    let m2 = a.enqueue("s2", "p", &json!({"text": "two"})).await.unwrap();
    let m1 = a.enqueue("s1", "p", &json!({"text": "one"})).await.unwrap();
    let m1b = a
        .enqueue("s1", "p", &json!({"text": "one-b"}))
        .await
        .unwrap();
    a.enqueue("s3", "other", &json!({"text": "elsewhere"}))
        .await
        .unwrap();
    let (ca, cb) = tokio::join!(a.claim("p", "wa", TTL), b.claim("p", "wb", TTL));
    let (ca, cb) = (ca.unwrap().unwrap(), cb.unwrap().unwrap());
    let mut claimed = vec![ca.session.clone(), cb.session.clone()];
    claimed.sort();
    assert_eq!(
        claimed,
        vec!["s1", "s2"],
        "both runnable sessions, once each"
    );
    assert_eq!(
        a.backlog("p").await.unwrap(),
        3,
        "held input is still backlog"
    );
    // Nothing else is runnable on the pool while both are held.
    assert_eq!(a.claim("p", "wc", TTL).await.unwrap(), None);
    let (s1_lease, mut s1_store) = if ca.session == "s1" { (ca, a) } else { (cb, b) };
    let pending = s1_store.pending("s1").await.unwrap();
    assert_eq!(
        pending.iter().map(|m| m.id).collect::<Vec<_>>(),
        vec![m1, m1b]
    );
    let recorded: Vec<NewEvent> = pending
        .iter()
        .map(|m| NewEvent {
            kind: "message".into(),
            data: m.body.to_string(),
        })
        .collect();
    // Consuming input of another session fails the append whole.
    assert!(matches!(
        s1_store
            .append_consuming(&s1_lease, 0, &recorded, &[(m2, 0)])
            .await,
        Err(StoreError::Inbox(_))
    ));
    assert_eq!(s1_store.session("s1").await.unwrap().head_seq, 0);
    s1_store
        .append_consuming(&s1_lease, 0, &recorded, &[(m1, 0), (m1b, 1)])
        .await
        .unwrap();
    assert!(s1_store.pending("s1").await.unwrap().is_empty());
    // The same input cannot be recorded twice.
    assert!(matches!(
        s1_store
            .append_consuming(&s1_lease, 2, &recorded[..1], &[(m1, 0)])
            .await,
        Err(StoreError::Inbox(_))
    ));
    // s1 has no input left: released, it is not claimable; new input makes it so again.
    s1_store.release(&s1_lease).await.unwrap();
    assert_eq!(s1_store.claim("p", "wd", TTL).await.unwrap(), None);
    s1_store
        .enqueue("s1", "p", &json!({"text": "again"}))
        .await
        .unwrap();
    let again = s1_store.claim("p", "wd", TTL).await.unwrap().unwrap();
    assert_eq!((again.session.as_str(), again.epoch), ("s1", 2));
    drop_schema(&s1_store, &schema).await;
}

#[tokio::test]
async fn a_worker_that_died_holding_a_session_gives_it_up_when_its_lease_expires() {
    let Some((mut a, schema)) = fresh().await else {
        return;
    };
    a.create_session("s", None).await.unwrap();
    let m = a.enqueue("s", "p", &json!({"text": "hi"})).await.unwrap();
    // The first worker claims with a lease that is already over (it died at once).
    let dead = a.claim("p", "dead", Duration::ZERO).await.unwrap().unwrap();
    let next = a.claim("p", "alive", TTL).await.unwrap().unwrap();
    assert_eq!((dead.epoch, next.epoch), (1, 2));
    // The input is still pending: nobody recorded it. The dead one's append is fenced.
    let ev = [NewEvent {
        kind: "message".into(),
        data: json!({"text": "hi"}).to_string(),
    }];
    assert!(matches!(
        a.append_consuming(&dead, 0, &ev, &[(m, 0)]).await,
        Err(StoreError::Fenced { .. })
    ));
    a.append_consuming(&next, 0, &ev, &[(m, 0)]).await.unwrap();
    assert_eq!(a.read("s", 0, 10).await.unwrap().len(), 1);
    drop_schema(&a, &schema).await;
}

#[tokio::test]
async fn a_turn_left_open_by_a_lost_writer_is_claimable_until_it_is_closed() {
    let Some((mut a, schema)) = fresh().await else {
        return;
    };
    for s in ["open", "done", "elsewhere"] {
        a.create_session(s, None).await.unwrap();
    }
    let mut leases = Vec::new();
    for (s, pool) in [("open", "p"), ("done", "p"), ("elsewhere", "q")] {
        let m = a.enqueue(s, pool, &json!({"text": "go"})).await.unwrap();
        let lease = a.claim(pool, "w", TTL).await.unwrap().unwrap();
        assert_eq!(lease.session, s);
        a.append_consuming(
            &lease,
            0,
            &events(&["turn/start", "user/message"]),
            &[(m, 1)],
        )
        .await
        .unwrap();
        assert!(a.session(s).await.unwrap().turn_open);
        leases.push(lease);
    }
    // "done" ends its turn; its writer releases it. The other two writers are lost while
    // their turns are open: one released (its turn crashed), one just stops renewing.
    a.append(&leases[1], 2, &events(&["turn/end"]))
        .await
        .unwrap();
    assert!(!a.session("done").await.unwrap().turn_open);
    a.release(&leases[1]).await.unwrap();
    // Held turns are backlog of their pool, but not runnable.
    assert_eq!(a.backlog("p").await.unwrap(), 1);
    assert_eq!(a.claim("p", "w2", TTL).await.unwrap(), None);
    a.release(&leases[0]).await.unwrap();
    let repair = a.claim("p", "w2", TTL).await.unwrap().unwrap();
    assert_eq!((repair.session.as_str(), repair.epoch), ("open", 2));
    // Nothing else: "done" is closed, "elsewhere" belongs to pool q (and is still held).
    assert_eq!(a.claim("p", "w3", TTL).await.unwrap(), None);
    assert_eq!(a.claim("q", "w3", TTL).await.unwrap(), None);
    // The old writer is fenced; the claimer closes the turn and the session rests.
    assert!(matches!(
        a.append(&leases[0], 2, &events(&["turn/end"])).await,
        Err(StoreError::Fenced { .. })
    ));
    a.append(&repair, 2, &events(&["tool/result", "turn/end"]))
        .await
        .unwrap();
    a.release(&repair).await.unwrap();
    assert_eq!(a.backlog("p").await.unwrap(), 0);
    assert_eq!(a.claim("p", "w3", TTL).await.unwrap(), None);
    // A flag that disagrees with the log is settled under a lease, and only under one.
    a.execute_batch("UPDATE dsh_sessions SET turn_open = true WHERE id = 'done'")
        .await
        .unwrap();
    let settle = a.claim("p", "w4", TTL).await.unwrap().unwrap();
    assert_eq!(settle.session, "done");
    assert!(matches!(
        a.settle_turn(&leases[1]).await,
        Err(StoreError::Fenced { .. })
    ));
    a.settle_turn(&settle).await.unwrap();
    a.release(&settle).await.unwrap();
    assert_eq!(a.claim("p", "w4", TTL).await.unwrap(), None);
    // A turn started and ended in one append leaves nothing open.
    assert_eq!(
        turn_state(&events(&["turn/start", "x", "turn/end", "y"])),
        Some(false)
    );
    assert_eq!(turn_state(&events(&["turn/end", "turn/start"])), Some(true));
    assert_eq!(turn_state(&events(&["x"])), None);
    drop_schema(&a, &schema).await;
}

#[tokio::test]
async fn the_first_append_stores_the_header_once() {
    let Some((mut a, schema)) = fresh().await else {
        return;
    };
    a.create_session("s", None).await.unwrap();
    assert_eq!(a.session("s").await.unwrap().header, None);
    let lease = a.acquire("s", "w", TTL).await.unwrap().unwrap();
    let batch = |header: &str| Batch {
        events: events(&["x"]),
        consumed: Vec::new(),
        header: Some(header.to_string()),
    };
    a.append_batch(&lease, 0, &batch(r#"{"type":"session","id":"s"}"#))
        .await
        .unwrap();
    // A later writer's header does not replace the first.
    a.append_batch(&lease, 1, &batch(r#"{"type":"session","id":"other"}"#))
        .await
        .unwrap();
    assert_eq!(
        a.session("s").await.unwrap().header.as_deref(),
        Some(r#"{"type":"session","id":"s"}"#)
    );
    // A refused append stores no header either.
    a.create_session("t", None).await.unwrap();
    let stale = Lease {
        session: "t".into(),
        owner: "w".into(),
        epoch: 9,
    };
    assert!(matches!(
        a.append_batch(&stale, 0, &batch("{}")).await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(a.session("t").await.unwrap().header, None);
    drop_schema(&a, &schema).await;
}

#[tokio::test]
async fn accounts_own_their_sessions() {
    let Some((a, schema)) = fresh().await else {
        return;
    };
    assert!(a.add_user("ann", "aa11", false).await.unwrap());
    assert!(a.add_user("root", "ff00", true).await.unwrap());
    assert!(
        !a.add_user("ann", "bb22", false).await.unwrap(),
        "names are unique"
    );
    assert!(
        a.add_user("bob", "aa11", false).await.is_err(),
        "tokens are unique"
    );
    assert_eq!(
        a.user_by_token("ff00").await.unwrap(),
        Some(User {
            name: "root".into(),
            admin: true
        })
    );
    assert_eq!(a.user_by_token("nope").await.unwrap(), None);
    assert!(a.create_owned_session("s-ann", "ann").await.unwrap());
    assert!(a.create_session("s-none", None).await.unwrap());
    assert!(
        a.create_owned_session("s-x", "nobody").await.is_err(),
        "an unknown account"
    );
    let mine: Vec<String> = a
        .sessions(Some("ann"), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(mine, vec!["s-ann"]);
    assert_eq!(a.sessions(None, 10).await.unwrap().len(), 2);
    assert_eq!(
        a.session("s-ann").await.unwrap().owner_user.as_deref(),
        Some("ann")
    );
    drop_schema(&a, &schema).await;
}

#[tokio::test]
async fn accounts_are_listed_get_new_tokens_and_are_removed_keeping_their_sessions() {
    let Some((mut a, schema)) = fresh().await else {
        return;
    };
    assert!(a.add_user("ann", "aa11", false).await.unwrap());
    assert!(
        a.add_user_with_password("root", "ff00", true, Some("pbkdf2$x"))
            .await
            .unwrap()
    );
    assert!(a.create_owned_session("s-ann", "ann").await.unwrap());
    a.add_login_token("ann", "5151", std::time::Duration::from_secs(60))
        .await
        .unwrap();
    let listed = a.accounts().await.unwrap();
    assert_eq!(
        listed,
        vec![
            crate::Account {
                name: "ann".into(),
                admin: false,
                has_password: false,
                live_sign_ins: 1,
                sessions: 1,
            },
            crate::Account {
                name: "root".into(),
                admin: true,
                has_password: true,
                live_sign_ins: 0,
                sessions: 0,
            },
        ]
    );
    // A new standing token replaces the old one at once.
    assert!(a.set_token_hash("ann", "bb22").await.unwrap());
    assert_eq!(a.user_by_token("aa11").await.unwrap(), None);
    assert_eq!(a.user_by_token("bb22").await.unwrap().unwrap().name, "ann");
    assert!(!a.set_token_hash("nobody", "cc33").await.unwrap());
    assert!(
        a.set_token_hash("ann", "ff00").await.is_err(),
        "another account's token"
    );
    // Removal ends every way in and keeps the session, owned by nobody.
    assert_eq!(a.remove_user("ann").await.unwrap(), Some(1));
    assert_eq!(a.user_by_token("bb22").await.unwrap(), None);
    assert_eq!(a.user_by_token("5151").await.unwrap(), None);
    assert_eq!(a.session("s-ann").await.unwrap().owner_user, None);
    assert_eq!(a.remove_user("ann").await.unwrap(), None);
    // A new account of the same name does not inherit the session.
    assert!(a.add_user("ann", "dd44", false).await.unwrap());
    assert!(a.sessions(Some("ann"), 10).await.unwrap().is_empty());
    drop_schema(&a, &schema).await;
}

#[tokio::test]
async fn a_cancel_reaches_the_turn_holding_the_lease_only() {
    let Some((a, schema)) = fresh().await else {
        return;
    };
    a.create_session("s", None).await.unwrap();
    assert_eq!(a.request_cancel("s").await.unwrap(), None, "no turn runs");
    let first = a.acquire("s", "w", TTL).await.unwrap().unwrap();
    assert_eq!(a.renew_watching(&first, TTL).await.unwrap(), Some(false));
    assert_eq!(a.request_cancel("s").await.unwrap(), Some(first.epoch));
    assert_eq!(a.renew_watching(&first, TTL).await.unwrap(), Some(true));
    // The next turn (a new epoch) is not cancelled by a request made for the last one.
    a.release(&first).await.unwrap();
    let next = a.acquire("s", "w", TTL).await.unwrap().unwrap();
    assert_eq!(a.renew_watching(&next, TTL).await.unwrap(), Some(false));
    assert_eq!(a.renew_watching(&first, TTL).await.unwrap(), None, "fenced");
    drop_schema(&a, &schema).await;
}

/// The migration lock is the database's: a migrator that stalls inside its transaction must
/// not hold up a store whose schema is current, and the server cuts the stalled one off.
#[tokio::test]
async fn a_stalled_migrator_holds_up_no_current_store() {
    let Some((mut a, schema)) = fresh().await else {
        return;
    };
    let Some(mut stalled) = store_in(&schema).await else {
        return;
    };
    // What a partitioned worker leaves behind: the lock taken, then silence.
    let tx = stalled.client.transaction().await.unwrap();
    tx.batch_execute(
        "SET LOCAL idle_in_transaction_session_timeout = '10s';
         SELECT pg_advisory_xact_lock(7411203);",
    )
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(5), a.migrate())
        .await
        .expect("a current schema needs no lock")
        .unwrap();
    drop(tx);
    drop(stalled);
    drop_schema(&a, &schema).await;
}

#[tokio::test]
async fn input_is_withdrawn_only_while_no_lease_holds_its_session() {
    let Some((mut store, schema)) = fresh().await else {
        return;
    };
    store.create_session("w", None).await.unwrap();
    store
        .enqueue("w", "default", &json!({"text": "a", "messageId": "m1"}))
        .await
        .unwrap();
    let second = store
        .enqueue("w", "default", &json!({"text": "b", "messageId": "m2"}))
        .await
        .unwrap();
    assert_eq!(
        store.withdraw("w", "m1").await.unwrap(),
        Withdrawal::Withdrawn
    );
    assert_eq!(
        store.withdraw("w", "m1").await.unwrap(),
        Withdrawal::Unknown
    );
    assert_eq!(
        store.withdraw("other", "m2").await.unwrap(),
        Withdrawal::Unknown
    );
    // Under a live lease the input may be running: it stays.
    let lease = store.claim("default", "w1", TTL).await.unwrap().unwrap();
    assert_eq!(store.withdraw("w", "m2").await.unwrap(), Withdrawal::Held);
    let pending = store.pending("w").await.unwrap();
    assert_eq!(pending.iter().map(|m| m.id).collect::<Vec<_>>(), [second]);
    // Recorded by the turn: nothing to withdraw.
    store
        .append_consuming(&lease, 0, &events(&["user/message"]), &[(second, 0)])
        .await
        .unwrap();
    store.release(&lease).await.unwrap();
    assert_eq!(
        store.withdraw("w", "m2").await.unwrap(),
        Withdrawal::Recorded
    );
    drop_schema(&store, &schema).await;
}

#[tokio::test]
async fn an_approval_takes_the_first_answer_while_its_turn_waits() {
    let Some((mut store, schema)) = fresh().await else {
        return;
    };
    store.create_session("a", None).await.unwrap();
    let lease = store.acquire("a", "w", TTL).await.unwrap().unwrap();
    let record = |kind: &str, id: &str| NewEvent {
        kind: kind.to_string(),
        data: json!({"type": kind, "data": {"id": id}}).to_string(),
    };
    store
        .append(&lease, 0, &[record("approval/asked", "p1")])
        .await
        .unwrap();
    assert_eq!(
        store
            .answer_approval("a", "nope", "rejected", None)
            .await
            .unwrap(),
        ApprovalAnswer::Unknown
    );
    assert_eq!(store.approval_answer("a", "p1").await.unwrap(), None);
    assert_eq!(
        store
            .answer_approval("a", "p1", "allowed-once", Some("ann"))
            .await
            .unwrap(),
        ApprovalAnswer::Accepted
    );
    assert_eq!(
        store
            .answer_approval("a", "p1", "rejected", None)
            .await
            .unwrap(),
        ApprovalAnswer::Answered
    );
    assert_eq!(
        store.approval_answer("a", "p1").await.unwrap().as_deref(),
        Some("allowed-once")
    );
    store
        .append(
            &lease,
            1,
            &[
                record("approval/asked", "p2"),
                record("approval/decided", "p2"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .answer_approval("a", "p2", "rejected", None)
            .await
            .unwrap(),
        ApprovalAnswer::Decided
    );
    drop_schema(&store, &schema).await;
}
