//! Resuming a stored session: numbering continues, the header is re-logged with reason
//! `resume`, pending inbox items survive without waking the driver, and an interrupted
//! turn (repaired) stays closed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;

use dsh_agent::{AgentOptions, AgentSource, Agents, CreateAgent};
use dsh_llm::Message;
use dsh_session::{SessionHeader, interrupted_turn_closers};
use pretty_assertions::assert_eq;
use support::*;

fn resume(
    h: &Harness,
    header: SessionHeader,
    events: Vec<Arc<dsh_session::Event>>,
) -> dsh_agent::AgentRef {
    let stored_len = events.len() as u64;
    let agents = h.root.get::<Agents>().unwrap();
    let mut request = CreateAgent::fresh(AgentOptions {
        provider: Some("test".into()),
        model: Some("m".into()),
        max_tokens: None,
        reasoning_effort: None,
    });
    request.source = AgentSource::Resume {
        header,
        events,
        stored_len,
    };
    agents.create(&h.root, request).unwrap()
}

#[tokio::test]
async fn resume_continues_numbering_and_relogs_the_header() {
    let h = Harness::new();
    h.model.push(text("one"));
    let first = h.agent();
    first.followup(Message::user_text("first")).unwrap();
    idle(&first).await;
    first.inject(Message::user_text("pending context")).unwrap();
    let header = first.session().header();
    let events = first.session().events();
    let before = trace(first.session()).len();
    first.dispose().await;

    // A fresh runtime, as after a restart.
    let h2 = Harness::new();
    h2.model.push(text("two"));
    let agent = resume(&h2, header, events.clone());
    assert_eq!(
        agent.status(),
        dsh_agent::AgentStatus::Idle,
        "pending input does not wake a resumed agent"
    );
    assert_eq!(
        agent.inbox().next_step.len(),
        1,
        "pending inbox items survive"
    );
    agent.followup(Message::user_text("second")).unwrap();
    idle(&agent).await;
    let t: Vec<String> = trace(agent.session()).into_iter().skip(before).collect();
    assert_eq!(
        t,
        [
            "session/end-seed",
            "inbox next-turn @0 +[second]",
            "turn/start 2",
            "inbox next-step @0 -1",
            "inbox next-turn @0 -1",
            "step/start 2.1",
            "user pending context",
            "user second",
            "request/header resume",
            "assistant 2.1 [two]",
            "step/end 2.1",
            "turn/end 2 {\"kind\":\"completed\"}",
        ]
    );
    // The model sees the whole history.
    let texts: Vec<String> = h2.model.requests()[0]
        .messages
        .iter()
        .map(|m| m.text())
        .collect();
    assert_eq!(texts, ["first", "one", "pending context", "second"]);
}

#[tokio::test]
async fn an_interrupted_turn_is_closed_and_the_next_one_follows() {
    let h = Harness::new();
    h.model.push(Reply::Hang(vec![]));
    let first = h.agent();
    first.followup(Message::user_text("crash here")).unwrap();
    let session = first.session().clone();
    wait_for(|| {
        session
            .events()
            .iter()
            .any(|e| e.is(dsh_session::types::REQUEST_HEADER))
    })
    .await;
    // Simulate a crash: take the log as it is, with the turn open, and repair it.
    let mut events = session.events();
    let header = session.header();
    events.extend(interrupted_turn_closers(&events).into_iter().map(Arc::new));
    first.cancel(dsh_session::CancelCause::User, false);
    idle(&first).await;

    let h2 = Harness::new();
    h2.model.push(text("recovered"));
    let agent = resume(&h2, header, events);
    agent.followup(Message::user_text("again")).unwrap();
    idle(&agent).await;
    let t = trace(agent.session());
    assert!(
        t.contains(&"turn/end 1 {\"kind\":\"interrupted\"}".to_string()),
        "{t:?}"
    );
    assert_eq!(t.last().unwrap(), "turn/end 2 {\"kind\":\"completed\"}");
}
