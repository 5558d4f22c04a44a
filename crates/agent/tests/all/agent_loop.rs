//! Whole-turn traces of the default driver, asserted as whole values.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::{Arc, Mutex};

use dsh_agent::{PreStep, PreStepDecision, RequestError, RequestErrorAction, TurnStopping};
use dsh_kernel::ListenOptions;
use dsh_llm::{ContentBlock, FinishReason, Message, StreamChunk};
use dsh_session::{CancelCause, types};
use pretty_assertions::assert_eq;
use serde_json::json;
use support::*;

#[tokio::test]
async fn a_tool_round_trip_has_the_reference_trace() {
    let h = Harness::new();
    h.model
        .push(calls(&[("c1", "echo", json!({"text": "hi"}))]));
    h.model.push(text("done"));
    let agent = h.agent();
    agent.followup(Message::user_text("go")).unwrap();
    idle(&agent).await;
    assert_eq!(
        trace(agent.session()),
        [
            "inbox next-turn @0 +[go]",
            "turn/start 1",
            "inbox next-turn @0 -1",
            "step/start 1.1",
            "user go",
            "request/header initial",
            "request/context",
            "assistant 1.1 [call:echo]",
            "tool/call echo",
            "tool/result ok hi",
            "step/end 1.1",
            "step/start 1.2",
            "assistant 1.2 [done]",
            "step/end 1.2",
            "turn/end 1 {\"kind\":\"completed\"}",
        ]
    );
    // The second request carries the call and its result, in order.
    let second = &h.model.requests()[1];
    let roles: Vec<String> = second
        .messages
        .iter()
        .map(|m| format!("{:?}:{}", m.role, m.content[0].block_type()))
        .collect();
    assert_eq!(
        roles,
        ["User:text", "Assistant:tool-call", "User:tool-result"]
    );
}

#[tokio::test]
async fn followup_on_an_idle_agent_opens_the_turn_before_returning() {
    let h = Harness::new();
    h.model.push(Reply::Hang(vec![]));
    let agent = h.agent();
    agent.followup(Message::user_text("go")).unwrap();
    // Synchronous prefix: the turn is open and the prompt claimed right now.
    assert_eq!(
        trace(agent.session()),
        [
            "inbox next-turn @0 +[go]",
            "turn/start 1",
            "inbox next-turn @0 -1"
        ]
    );
    agent.cancel(CancelCause::User, false);
    idle(&agent).await;
    let t = trace(agent.session());
    assert_eq!(
        t.last().unwrap(),
        "turn/end 1 {\"kind\":\"aborted\",\"reason\":{\"kind\":\"user\"}}"
    );
}

#[tokio::test]
async fn cancel_mid_stream_keeps_the_visible_prefix() {
    let h = Harness::new();
    h.model.push(Reply::Hang(vec![
        StreamChunk::BlockStart {
            index: 0,
            block_type: "text".into(),
        },
        StreamChunk::TextDelta {
            index: 0,
            text: "partial".into(),
        },
    ]));
    let agent = h.agent();
    agent.followup(Message::user_text("go")).unwrap();
    let session = agent.session().clone();
    wait_for(|| {
        session
            .events()
            .iter()
            .filter(|e| e.is(types::ASSISTANT_CHUNK))
            .count()
            == 2
    })
    .await;
    agent.cancel(CancelCause::User, false);
    idle(&agent).await;
    let t = trace(agent.session());
    assert_eq!(
        t[t.len() - 3..],
        [
            "assistant 1.1 [partial] (interrupted)",
            "step/end 1.1",
            "turn/end 1 {\"kind\":\"aborted\",\"reason\":{\"kind\":\"user\"}}"
        ]
    );
    // The interrupted prefix is model-visible next time.
    h.model.push(text("again"));
    agent.followup(Message::user_text("more")).unwrap();
    idle(&agent).await;
    let last = h.model.requests().last().unwrap().clone();
    let texts: Vec<String> = last.messages.iter().map(|m| m.text()).collect();
    assert_eq!(texts, ["go", "partial", "more"]);
}

#[tokio::test]
async fn errors_end_the_turn_with_the_failure_and_the_driver_stops() {
    let h = Harness::new();
    h.model.push(failure("AUTH"));
    let agent = h.agent();
    let errors = Arc::new(Mutex::new(Vec::new()));
    {
        let errors = errors.clone();
        agent
            .ctx()
            .on_emit::<dsh_agent::AgentErrorEvent>(ListenOptions::default(), move |p| {
                errors.lock().unwrap().push(p.message.clone());
                Ok(())
            })
            .unwrap();
    }
    agent.followup(Message::user_text("go")).unwrap();
    agent.followup(Message::user_text("queued")).unwrap();
    idle(&agent).await;
    let t = trace(agent.session());
    assert_eq!(
        t.last().unwrap(),
        "turn/end 1 {\"kind\":\"error\",\"error\":{\"message\":\"simulated AUTH\",\"code\":\"AUTH\"}}"
    );
    assert!(
        !t.iter().any(|l| l.starts_with("assistant")),
        "a failed attempt leaves chunks but no message"
    );
    assert_eq!(*errors.lock().unwrap(), ["simulated AUTH"]);
    assert_eq!(
        agent.inbox().next_turn.len(),
        1,
        "queued work waits for the next waking input"
    );
}

#[tokio::test]
async fn a_retry_stays_inside_the_same_step() {
    let h = Harness::new();
    h.model.push(failure("SERVER"));
    h.model.push(text("ok"));
    let agent = h.agent();
    agent
        .ctx()
        .on_waterfall::<RequestError>(ListenOptions::default(), |_p, _next| {
            Box::pin(async { Ok(Some(RequestErrorAction::Retry)) })
        })
        .unwrap();
    agent.followup(Message::user_text("go")).unwrap();
    idle(&agent).await;
    let t = trace(agent.session());
    assert_eq!(
        t[3..],
        [
            "step/start 1.1",
            "user go",
            "request/header initial",
            "request/context",
            "assistant 1.1 [ok]",
            "step/end 1.1",
            "turn/end 1 {\"kind\":\"completed\"}"
        ]
    );
    // The message cites only its own attempt's chunks.
    let events = agent.session().events();
    let msg = events
        .iter()
        .find(|e| e.is(types::ASSISTANT_MESSAGE))
        .unwrap();
    let chunk_seqs: Vec<u64> = events
        .iter()
        .filter(|e| e.is(types::ASSISTANT_CHUNK))
        .map(|e| e.seq)
        .collect();
    assert_eq!(msg.source_event_seqs.as_deref(), Some(&chunk_seqs[1..]));
}

#[tokio::test]
async fn bad_tool_calls_become_error_results_and_the_model_sees_them() {
    let h = Harness::new();
    h.model.push(Reply::Chunks(vec![
        StreamChunk::ToolCallDelta {
            index: 0,
            id: "a".into(),
            name: Some("nope".into()),
            arguments_delta: "{}".into(),
        },
        StreamChunk::ToolCallDelta {
            index: 1,
            id: "b".into(),
            name: Some("echo".into()),
            arguments_delta: "{not json".into(),
        },
        StreamChunk::ToolCallDelta {
            index: 2,
            id: "c".into(),
            name: Some("echo".into()),
            arguments_delta: "{\"text\":1}".into(),
        },
        StreamChunk::ToolCallDelta {
            index: 3,
            id: "d".into(),
            name: Some("echo".into()),
            arguments_delta: "{\"text\":\"fail\"}".into(),
        },
        StreamChunk::finish(FinishReason::ToolCalls),
    ]));
    h.model.push(text("sorry"));
    let agent = h.agent();
    agent.followup(Message::user_text("go")).unwrap();
    idle(&agent).await;
    let results: Vec<String> = trace(agent.session())
        .into_iter()
        .filter(|l| l.starts_with("tool/result"))
        .collect();
    assert_eq!(
        results,
        [
            "tool/result error UNKNOWN_TOOL Error: unknown tool \"nope\"",
            "tool/result error INVALID_ARGS Error: invalid arguments: \"arguments\" must be an object",
            "tool/result error INVALID_ARGS Error: invalid arguments: \"text\" must be a string",
            "tool/result error Error: echo failed",
        ]
    );
    assert_eq!(
        trace(agent.session()).last().unwrap(),
        "turn/end 1 {\"kind\":\"completed\"}"
    );
}

#[tokio::test]
async fn parallel_bodies_overlap_but_results_commit_in_model_order() {
    let h = Harness::new();
    h.model.push(calls(&[
        ("a", "peek", json!({"text": "slow", "delayMs": 80})),
        ("b", "peek", json!({"text": "fast"})),
        ("c", "echo", json!({"text": "barrier"})),
    ]));
    h.model.push(text("done"));
    let agent = h.agent();
    agent.followup(Message::user_text("go")).unwrap();
    idle(&agent).await;
    let log = h.tool_log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            "start slow",
            "start fast",
            "end fast",
            "end slow",
            "start barrier",
            "end barrier"
        ]
    );
    let t: Vec<String> = trace(agent.session())
        .into_iter()
        .filter(|l| l.starts_with("tool/"))
        .collect();
    assert_eq!(
        t,
        [
            "tool/call peek",
            "tool/call peek",
            "tool/result ok slow",
            "tool/result ok fast",
            "tool/call echo",
            "tool/result ok barrier"
        ]
    );
}

#[tokio::test]
async fn cancel_during_tools_drains_started_calls_and_answers_the_rest() {
    let h = Harness::new();
    h.model.push(calls(&[
        ("a", "echo", json!({"text": "long", "delayMs": 5000})),
        ("b", "echo", json!({"text": "never"})),
    ]));
    let agent = h.agent();
    agent.followup(Message::user_text("go")).unwrap();
    let log = h.tool_log.clone();
    wait_for(|| log.lock().unwrap().contains(&"start long".to_string())).await;
    agent.cancel(CancelCause::User, false);
    idle(&agent).await;
    let t: Vec<String> = trace(agent.session()).into_iter().skip(8).collect();
    assert_eq!(
        t,
        [
            "tool/call echo",
            "tool/result error ABORTED Error: tool call aborted",
            "tool/call echo",
            "tool/result error ABORTED_BEFORE_DISPATCH Error: tool call aborted before dispatch",
            "step/end 1.1",
            "turn/end 1 {\"kind\":\"aborted\",\"reason\":{\"kind\":\"user\"}}",
        ]
    );
}

#[tokio::test]
async fn steering_during_a_tool_enters_after_the_results() {
    let h = Harness::new();
    h.model.push(calls(&[(
        "a",
        "echo",
        json!({"text": "work", "delayMs": 100}),
    )]));
    h.model.push(text("adjusted"));
    let agent = h.agent();
    agent.followup(Message::user_text("go")).unwrap();
    let log = h.tool_log.clone();
    wait_for(|| log.lock().unwrap().contains(&"start work".to_string())).await;
    agent.steer(Message::user_text("also this")).unwrap();
    idle(&agent).await;
    let t: Vec<String> = trace(agent.session()).into_iter().skip(9).collect();
    assert_eq!(
        t,
        [
            "inbox next-step @0 +[also this]",
            "tool/result ok work",
            "step/end 1.1",
            "inbox next-step @0 -1",
            "step/start 1.2",
            "user also this",
            "assistant 1.2 [adjusted]",
            "step/end 1.2",
            "turn/end 1 {\"kind\":\"completed\"}",
        ]
    );
}

#[tokio::test]
async fn turn_stopping_can_force_another_step() {
    let h = Harness::new();
    h.model.push(text("first"));
    h.model.push(text("second"));
    let agent = h.agent();
    let once = Arc::new(Mutex::new(true));
    {
        let once = once.clone();
        agent
            .ctx()
            .on_serial::<TurnStopping>(ListenOptions::default(), move |p| {
                let again = std::mem::replace(&mut *once.lock().unwrap(), false);
                let agent = p.agent.clone();
                Box::pin(async move {
                    if again {
                        agent.steer(Message::user_text("keep going"))?;
                    }
                    Ok(())
                })
            })
            .unwrap();
    }
    agent.followup(Message::user_text("go")).unwrap();
    idle(&agent).await;
    let assistants: Vec<String> = trace(agent.session())
        .into_iter()
        .filter(|l| l.starts_with("assistant") || l.starts_with("user"))
        .collect();
    assert_eq!(
        assistants,
        [
            "user go",
            "assistant 1.1 [first]",
            "user keep going",
            "assistant 1.2 [second]"
        ]
    );
}

#[tokio::test]
async fn pre_step_can_reject_or_enter_nothing() {
    let h = Harness::new();
    let agent = h.agent();
    let mode = Arc::new(Mutex::new("reject"));
    {
        let mode = mode.clone();
        agent
            .ctx()
            .on_waterfall::<PreStep>(ListenOptions::default(), move |_p, _next| {
                let m = *mode.lock().unwrap();
                Box::pin(async move {
                    Ok(if m == "reject" {
                        PreStepDecision::Reject
                    } else {
                        PreStepDecision::Enter(vec![])
                    })
                })
            })
            .unwrap();
    }
    agent.followup(Message::user_text("one")).unwrap();
    idle(&agent).await;
    *mode.lock().unwrap() = "empty";
    agent.followup(Message::user_text("two")).unwrap();
    idle(&agent).await;
    assert_eq!(
        trace(agent.session()),
        [
            "inbox next-turn @0 +[one]",
            "turn/start 1",
            "inbox next-turn @0 -1",
            "turn/end 1 {\"kind\":\"blocked\"}",
            "inbox next-turn @0 +[two]",
            "turn/start 2",
            "inbox next-turn @0 -1",
            "turn/end 2 {\"kind\":\"completed\"}",
        ]
    );
    assert!(h.model.requests().is_empty());
}

#[tokio::test]
async fn max_tokens_is_sticky_and_drops_tool_calls() {
    let h = Harness::new();
    h.model.push(Reply::Chunks(vec![
        StreamChunk::TextDelta {
            index: 0,
            text: "cut".into(),
        },
        StreamChunk::ToolCallDelta {
            index: 1,
            id: "x".into(),
            name: Some("echo".into()),
            arguments_delta: "{".into(),
        },
        StreamChunk::finish(FinishReason::MaxTokens),
    ]));
    let agent = h.agent();
    agent.followup(Message::user_text("go")).unwrap();
    idle(&agent).await;
    let t = trace(agent.session());
    assert_eq!(
        t[t.len() - 3..],
        [
            "assistant 1.1 [cut]",
            "step/end 1.1",
            "turn/end 1 {\"kind\":\"max-tokens\"}"
        ]
    );
}

#[tokio::test]
async fn queued_prompts_each_get_their_own_turn() {
    let h = Harness::new();
    h.model.push(Reply::Chunks(vec![
        StreamChunk::TextDelta {
            index: 0,
            text: "a".into(),
        },
        StreamChunk::finish(FinishReason::Stop),
    ]));
    h.model.push(text("b"));
    let agent = h.agent();
    agent.followup(Message::user_text("first")).unwrap();
    agent.followup(Message::user_text("second")).unwrap();
    idle(&agent).await;
    let turns: Vec<String> = trace(agent.session())
        .into_iter()
        .filter(|l| l.starts_with("turn/") || l.starts_with("user"))
        .collect();
    assert_eq!(
        turns,
        [
            "turn/start 1",
            "user first",
            "turn/end 1 {\"kind\":\"completed\"}",
            "turn/start 2",
            "user second",
            "turn/end 2 {\"kind\":\"completed\"}"
        ]
    );
}

#[tokio::test]
async fn injected_context_waits_for_a_waking_input_and_precedes_the_prompt() {
    let h = Harness::new();
    h.model.push(text("ok"));
    let agent = h.agent();
    agent.inject(Message::user_text("context")).unwrap();
    assert_eq!(agent.status(), dsh_agent::AgentStatus::Idle);
    agent.followup(Message::user_text("prompt")).unwrap();
    idle(&agent).await;
    let users: Vec<String> = trace(agent.session())
        .into_iter()
        .filter(|l| l.starts_with("user"))
        .collect();
    assert_eq!(users, ["user context", "user prompt"]);
}

#[tokio::test]
async fn cancel_clears_the_inbox_durably_even_when_idle() {
    let h = Harness::new();
    let agent = h.agent();
    agent.inject(Message::user_text("pending")).unwrap();
    agent.cancel(CancelCause::User, false);
    assert_eq!(
        trace(agent.session()),
        [
            "inbox next-step @0 +[pending]",
            "inbox next-step @0 -1 canceled"
        ]
    );
}

#[tokio::test]
async fn the_model_visible_check_catches_unlogged_input() {
    let h = Harness::new();
    h.model.push(text("unreached"));
    let agent = h.agent();
    // An agent/request listener that sneaks a message into the log after history was derived.
    agent
        .ctx()
        .on_waterfall::<dsh_agent::Request>(ListenOptions::default(), |p, next| {
            let session = p.agent.session().clone();
            Box::pin(async move {
                session.append(
                    types::USER_MESSAGE,
                    Message::user_text("sneaky").to_value(),
                    Some(dsh_session::SurfaceIntent::append()),
                )?;
                next.run().await
            })
        })
        .unwrap();
    agent.followup(Message::user_text("go")).unwrap();
    idle(&agent).await;
    let t = trace(agent.session());
    assert!(t.last().unwrap().contains("invariant violated by"), "{t:?}");
}

#[tokio::test]
async fn runtime_context_is_appended_only_when_it_changes() {
    let h = Harness::new();
    let prompt = h.root.get::<dsh_prompt::SystemPrompt>().unwrap();
    let fact = Arc::new(Mutex::new("mode A".to_string()));
    {
        let fact = fact.clone();
        prompt
            .context(
                &h.root,
                "test:fact",
                110.0,
                Arc::new(move |_| fact.lock().unwrap().clone()),
            )
            .unwrap();
    }
    for _ in 0..3 {
        h.model.push(text("ok"));
    }
    let agent = h.agent();
    agent.followup(Message::user_text("one")).unwrap();
    idle(&agent).await;
    agent.followup(Message::user_text("two")).unwrap();
    idle(&agent).await;
    *fact.lock().unwrap() = "mode B".into();
    agent.followup(Message::user_text("three")).unwrap();
    idle(&agent).await;
    let users: Vec<String> = trace(agent.session())
        .into_iter()
        .filter(|l| l.starts_with("user"))
        .collect();
    let preamble = dsh_prompt::CONTEXT_PREAMBLE;
    assert_eq!(
        users,
        [
            "user one".to_string(),
            format!("user {preamble}\n\nmode A"),
            "user two".to_string(),
            "user three".to_string(),
            format!("user {preamble}\n\nmode B"),
        ]
    );
    // The system prompt stays byte-identical across all requests.
    let systems: Vec<Option<String>> = h
        .model
        .requests()
        .iter()
        .map(|r| r.system.clone())
        .collect();
    assert!(systems.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(ContentBlock::text("x").block_type(), "text");
}

/// The model-visible request of a multi-step turn with steering and a runtime-context
/// change, as a whole value (message ids normalized).
#[tokio::test]
async fn the_model_visible_request_after_steering_and_a_context_change() {
    let h = Harness::new();
    let prompt = h.root.get::<dsh_prompt::SystemPrompt>().unwrap();
    let fact = Arc::new(Mutex::new("mode A".to_string()));
    {
        let fact = fact.clone();
        prompt
            .context(
                &h.root,
                "test:fact",
                110.0,
                Arc::new(move |_| fact.lock().unwrap().clone()),
            )
            .unwrap();
    }
    h.model.push(calls(&[(
        "c1",
        "echo",
        json!({"text": "work", "delayMs": 50}),
    )]));
    h.model.push(text("adjusted"));
    let agent = h.agent();
    agent.followup(Message::user_text("go")).unwrap();
    let log = h.tool_log.clone();
    wait_for(|| log.lock().unwrap().contains(&"start work".to_string())).await;
    agent.steer(Message::user_text("also this")).unwrap();
    *fact.lock().unwrap() = "mode B".into();
    idle(&agent).await;

    let requests = h.model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].system, requests[1].system,
        "the system prompt is byte-stable"
    );
    assert_eq!(requests[0].tools, requests[1].tools);
    let mut ids = std::collections::HashMap::new();
    let normalized: Vec<serde_json::Value> = requests[1]
        .messages
        .iter()
        .map(|m| {
            let mut v = m.to_value();
            let n = ids.len();
            let id = ids
                .entry(v["id"].as_str().unwrap().to_string())
                .or_insert(format!("<id {n}>"))
                .clone();
            v["id"] = json!(id);
            v
        })
        .collect();
    let ctx = |text: &str| {
        json!({"content":[{"type":"text","text":format!("{}\n\n{text}", dsh_prompt::CONTEXT_PREAMBLE)}],
               "source":{"kind":"plugin","plugin":"@deepseek-ai/dsh-system-prompt","form":"snapshot","sections":[{"name":"test:fact","text":text}]},
               "role":"user"})
    };
    let with_id = |mut v: serde_json::Value, id: &str| {
        v["id"] = json!(id);
        v
    };
    assert_eq!(
        normalized,
        [
            json!({"content":[{"type":"text","text":"go"}],"source":{"kind":"user"},"role":"user","id":"<id 0>"}),
            with_id(ctx("mode A"), "<id 1>"),
            json!({"role":"assistant","content":[{"type":"tool-call","id":"c1","name":"echo","arguments":"{\"text\":\"work\",\"delayMs\":50}"}],"source":{"kind":"model","provider":"test","model":"m"},"id":"<id 2>"}),
            json!({"source":{"kind":"tool","callId":"c1"},"content":[{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"work"}],"isError":false}],"role":"user","id":"<id 3>"}),
            json!({"content":[{"type":"text","text":"also this"}],"source":{"kind":"user"},"role":"user","id":"<id 4>"}),
            with_id(ctx("mode B"), "<id 5>"),
        ]
    );
    // And the log can rebuild exactly this request.
    let derived: Vec<serde_json::Value> = agent
        .session()
        .derive_messages()
        .iter()
        .take(6)
        .map(|m| m.to_value())
        .collect();
    let sent: Vec<serde_json::Value> = requests[1].messages.iter().map(|m| m.to_value()).collect();
    assert_eq!(derived, sent);
}
