//! Child agents: header lineage, setup after session creation, ownership, the idle epoch
//! and the consumed-work fold delegation reads results with.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{AgentOptions, AgentSource, Agents, CreateAgent, SessionMeta, fold_consumed_work};
use dsh_llm::Message;
use dsh_session::{Event, SurfaceKeyOrder, TurnEndReason};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::*;

fn options() -> AgentOptions {
    AgentOptions {
        provider: Some("test".into()),
        model: Some("m".into()),
        max_tokens: None,
        reasoning_effort: None,
    }
}

fn child_request(parent: &str, setup_log: Arc<std::sync::Mutex<Vec<String>>>) -> CreateAgent {
    CreateAgent {
        meta: SessionMeta {
            parent_session: Some(parent.to_string()),
            origin: Some("subagent".into()),
            delegation_depth: 1,
            agent_preset: None,
        },
        owner: Some(parent.to_string()),
        setup: Some(Box::new(move |_ctx, session| {
            setup_log
                .lock()
                .unwrap()
                .push(format!("setup sees {} events", session.next_seq()));
            session.append(
                "approval/policy",
                json!({"policy": "never", "source": "delegation"}),
                None,
            )?;
            Ok(())
        })),
        ..CreateAgent::fresh(options())
    }
}

#[tokio::test]
async fn a_child_has_its_lineage_in_the_header_and_setup_events_before_its_input() {
    let h = Harness::new();
    let agents = h.root.get::<Agents>().unwrap();
    let parent = h.agent();
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let child = agents
        .create(&h.root, child_request(parent.id(), log.clone()))
        .unwrap();
    assert_eq!(*log.lock().unwrap(), ["setup sees 0 events"]);
    let header = child.session().header();
    assert_eq!(
        header.to_value(),
        json!({
            "type": "session", "version": 0, "id": child.id(), "createdAt": header.created_at,
            "parentSession": parent.id(), "origin": "subagent", "delegationDepth": 1
        })
    );
    h.model.push(text("CHILD_OK"));
    child.followup(Message::user_text("do it")).unwrap();
    idle(&child).await;
    let t = trace(child.session());
    assert_eq!(
        t[..3],
        [
            "approval/policy",
            "inbox next-turn @0 +[do it]",
            "turn/start 1"
        ]
    );
    assert_eq!(agents.owner_of(child.id()).as_deref(), Some(parent.id()));
    assert!(agents.is_root(parent.id()));
    assert!(!agents.is_root(child.id()));
    assert_eq!(
        agents
            .roots()
            .iter()
            .map(|a| a.id().to_string())
            .collect::<Vec<_>>(),
        [parent.id()]
    );
    assert_eq!(agents.children_of(parent.id()).len(), 1);
    child.dispose().await;
    assert!(agents.children_of(parent.id()).is_empty());
    assert!(agents.get(child.id()).is_none());
}

#[tokio::test]
async fn a_seeded_child_keeps_an_explicit_seed_length() {
    let h = Harness::new();
    let agents = h.root.get::<Agents>().unwrap();
    h.model.push(text("one"));
    let parent = h.agent();
    parent.followup(Message::user_text("first")).unwrap();
    idle(&parent).await;
    let prefix = parent.session().events();
    let n = prefix.len() as u64;
    // A fork: the header's boundary is the inherited prefix.
    let fork = agents
        .create(
            &h.root,
            CreateAgent {
                source: AgentSource::Seeded {
                    prefix: prefix.clone(),
                    seed_length: Some(n),
                },
                meta: SessionMeta {
                    parent_session: Some(parent.id().to_string()),
                    origin: Some("subagent".into()),
                    delegation_depth: 1,
                    agent_preset: None,
                },
                ..CreateAgent::fresh(options())
            },
        )
        .unwrap();
    assert_eq!(fork.session().header().seed_length, Some(n));
    assert_eq!(
        fork.session().next_seq(),
        n + 1,
        "prefix plus session/end-seed"
    );
    // A seed that inherits nothing (a continuable child's descriptor) has no boundary.
    let descriptor = ev(
        0,
        "subagent/descriptor",
        json!({"version": 2, "mode": "continuable", "provider": "spawn", "label": "x"}),
    );
    let continuable = agents
        .create(
            &h.root,
            CreateAgent {
                source: AgentSource::Seeded {
                    prefix: vec![descriptor],
                    seed_length: None,
                },
                ..CreateAgent::fresh(options())
            },
        )
        .unwrap();
    assert_eq!(continuable.session().header().seed_length, None);
    assert_eq!(
        trace(continuable.session()),
        ["subagent/descriptor", "session/end-seed"]
    );
}

#[tokio::test]
async fn a_failing_setup_publishes_nothing() {
    let h = Harness::new();
    let agents = h.root.get::<Agents>().unwrap();
    let result = agents.create(
        &h.root,
        CreateAgent {
            session_id: Some("doomed".into()),
            setup: Some(Box::new(|_ctx, _session| Err("setup refused".into()))),
            ..CreateAgent::fresh(options())
        },
    );
    assert_eq!(result.err().unwrap().to_string(), "setup refused");
    assert!(agents.get("doomed").is_none());
    let sessions = h.root.get::<dsh_session::SessionStore>().unwrap();
    assert!(sessions.get("doomed").is_none());
}

#[tokio::test]
async fn when_idle_resolves_at_the_next_idle_even_if_the_agent_restarts_at_once() {
    let h = Harness::new();
    let agent = h.agent();
    h.model.push(text("first"));
    h.model.push(text("second"));
    agent.followup(Message::user_text("one")).unwrap();
    let waiter = agent.when_idle();
    // Queue a second prompt that starts as soon as the first turn ends: the agent passes
    // through idle only between the two turns, yet the waiter must resolve.
    let restart = agent.clone();
    let listener = {
        let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
        h.root
            .on_emit::<dsh_agent::AgentStatusChanged>(Default::default(), move |p| {
                if p.status == dsh_agent::AgentStatus::Idle
                    && !fired.swap(true, std::sync::atomic::Ordering::SeqCst)
                {
                    restart.followup(Message::user_text("two")).unwrap();
                }
                Ok(())
            })
            .unwrap()
    };
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter saw the idle between the turns");
    drop(listener);
    idle(&agent).await;
    // An idle agent resolves at once.
    tokio::time::timeout(Duration::from_millis(100), agent.when_idle())
        .await
        .unwrap();
}

fn ev(seq: u64, t: &'static str, data: Value) -> Arc<Event> {
    Arc::new(Event {
        event_type: t.into(),
        seq,
        time: 0,
        data: data.into(),
        source_event_seqs: None,
        surface_op: None,
        ignorable: false,
        key_order: SurfaceKeyOrder::SourcesFirst,
    })
}

#[test]
fn consumed_work_takes_the_last_turn_that_stepped_or_failed_a_claim() {
    let claim = json!({"target": "next-turn", "start": 0, "removedCount": 1, "inserted": []});
    let events = vec![
        ev(0, "turn/start", json!({"turn": 1})),
        ev(1, "agent/inbox/spliced", claim.clone()),
        ev(2, "step/start", json!({"turn": 1, "step": 1})),
        ev(3, "step/end", json!({"turn": 1, "step": 1})),
        ev(
            4,
            "turn/end",
            json!({"turn": 1, "reason": {"kind": "max-tokens"}}),
        ),
        // A turn that claimed nothing and ran no step does not account for work.
        ev(5, "turn/start", json!({"turn": 2})),
        ev(
            6,
            "turn/end",
            json!({"turn": 2, "reason": {"kind": "completed"}}),
        ),
    ];
    let folded = fold_consumed_work(&events);
    assert_eq!(folded.end, Some(TurnEndReason::MaxTokens));
    assert!(!folded.dropped_unrun);
    // A claimed turn that ended in error without a step accounts for its input; input
    // cancelled unrun afterwards is reported.
    let mut more = events.clone();
    more.push(ev(7, "turn/start", json!({"turn": 3})));
    more.push(ev(8, "agent/inbox/spliced", claim));
    more.push(ev(
        9,
        "turn/end",
        json!({"turn": 3, "reason": {"kind": "error", "error": {"message": "x", "code": "UNKNOWN"}}}),
    ));
    more.push(ev(
        10,
        "agent/inbox/spliced",
        json!({"target": "next-turn", "start": 0, "removedCount": 1, "inserted": [], "outcome": "canceled"}),
    ));
    let folded = fold_consumed_work(&more);
    assert_eq!(
        folded.end.as_ref().map(|r| r.kind().to_string()),
        Some("error".into())
    );
    assert!(folded.dropped_unrun);
    assert_eq!(fold_consumed_work(&[]), Default::default());
}
