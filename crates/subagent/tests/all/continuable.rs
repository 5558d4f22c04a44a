//! Continuable children through the model-facing tools: a background `subagent` call
//! starts a durable child whose settlement wakes the parent with a notice,
//! `send_message` continues it (cold-resuming it from its log), `interrupt_agent` stops
//! its turn, `report` reaches the parent early, and `list_agents` lists the children.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_agent::{AgentRef, Agents, SubagentEnd};
use dsh_kernel::ListenOptions;
use dsh_llm::Message;
use dsh_persistence::SessionFiles;
use dsh_session::{Event, LiveSession, types};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::*;

struct Setup {
    h: Harness,
    _dir: tempfile::TempDir,
    /// Every session created, in order (a cold resume creates its session again).
    seen: Arc<Mutex<Vec<Arc<LiveSession>>>>,
    ends: Arc<Mutex<Vec<String>>>,
}

/// Persistence, the control tools and a continuable `subagent` tool; with `fence`, a new
/// child's first step waits for its parent to go idle (so its notice always opens a new
/// parent turn), and root sessions start read-only.
fn setup(fence: bool) -> Setup {
    setup_with(fence, vec![])
}

fn setup_with(fence: bool, extra: Vec<dsh_kernel::LoadRow>) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let mut rows = vec![
        plain_row(
            "persistence",
            "@deepseek-ai/dsh-session-persistence-jsonl",
            json!({"root": dir.path().to_str().unwrap(), "compression": "none", "writeBatchMaxDelayMs": 0}),
        ),
        plain_row(
            "sandbox-policy",
            "@deepseek-ai/dsh-sandbox-policy",
            json!({"mode": "danger-full-access"}),
        ),
        plain_row(
            "control",
            "@deepseek-ai/dsh-tool-subagent-control",
            Value::Null,
        ),
        plain_row(
            "list-agents",
            "@deepseek-ai/dsh-tool-subagent-control/list-agents",
            Value::Null,
        ),
        plain_row(
            "report",
            "@deepseek-ai/dsh-tool-subagent-report",
            Value::Null,
        ),
        tool_row(
            "tool-subagent",
            json!({"provider": "spawn", "toolName": "subagent", "backgroundMode": "continuable", "maxDepth": 1}),
        ),
        tool_row(
            "tool-subagent-once",
            json!({"provider": "spawn", "toolName": "subagent_once", "enableRunInBackground": false}),
        ),
    ];
    if fence {
        rows.push(plain_row(
            "fence",
            "@deepseek-ai/dsh-test-subagent-continuable-fence",
            Value::Null,
        ));
        rows.push(plain_row(
            "override",
            "@deepseek-ai/dsh-test-parent-sandbox-override",
            Value::Null,
        ));
    }
    rows.extend(extra);
    let h = Harness::new(rows);
    let seen = record_sessions(&h.root);
    let ends = Arc::new(Mutex::new(Vec::new()));
    let e = ends.clone();
    h.root
        .on_emit::<SubagentEnd>(ListenOptions::GLOBAL, move |p| {
            e.lock()
                .unwrap()
                .push(format!("{} {}", p.info.id, p.stop_reason));
            Ok(())
        })
        .unwrap();
    Setup {
        h,
        _dir: dir,
        seen,
        ends,
    }
}

impl Setup {
    /// The id of the `n`th child session created (0-based), once it exists.
    fn child_id(&self, n: usize) -> Option<String> {
        let mut ids: Vec<String> = Vec::new();
        for s in self.seen.lock().unwrap().iter() {
            let h = s.header();
            if h.parent_session.is_some() && !ids.contains(&h.id) {
                ids.push(h.id);
            }
        }
        ids.get(n).cloned()
    }

    fn first_child(&self) -> Option<Arc<LiveSession>> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .find(|s| s.header().parent_session.is_some())
            .cloned()
    }

    fn agents(&self) -> Arc<Agents> {
        self.h.root.get::<Agents>().unwrap()
    }

    fn live(&self, id: &str) -> Option<AgentRef> {
        self.agents().get(id)
    }

    /// The child's whole stored log (after its writer flushed).
    async fn stored(&self, id: &str) -> Vec<Arc<Event>> {
        let files = self.h.root.get::<SessionFiles>().unwrap();
        let id = id.to_string();
        tokio::task::spawn_blocking(move || files.inspect(&id).unwrap().events)
            .await
            .unwrap()
    }

    fn settled(&self, n: usize) -> bool {
        self.ends.lock().unwrap().len() >= n
    }
}

/// The parent's messages from its children (notices and reports), as text lines.
fn from_children(parent: &AgentRef) -> Vec<(String, Vec<String>)> {
    parent
        .session()
        .events()
        .iter()
        .filter(|e| e.is(types::USER_MESSAGE))
        .filter_map(|e| {
            let d = e.data.as_value();
            let kind = d["source"]["kind"].as_str()?.to_string();
            kind.starts_with("subagent-").then(|| {
                let texts = d["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|b| b["text"].as_str().map(str::to_owned))
                    .collect();
                (kind, texts)
            })
        })
        .collect()
}

/// `(isError, text, error code)` of every tool result of `session`.
fn results(events: &[Arc<Event>]) -> Vec<(bool, String, Option<String>)> {
    events
        .iter()
        .filter(|e| e.is(types::TOOL_RESULT))
        .map(|e| {
            let d = e.data.as_value();
            let block = &d["message"]["content"][0];
            (
                block["isError"] == json!(true),
                text_of(block),
                d["error"]["code"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

fn started_id(events: &[Arc<Event>]) -> String {
    results(events)
        .into_iter()
        .find_map(|(_, t, _)| t.strip_prefix("started subagent ").map(str::to_owned))
        .expect("a started child")
}

async fn settle_parent(parent: &AgentRef, s: &Setup, notices: usize) {
    let p = parent.clone();
    wait_for(|| {
        from_children(&p)
            .iter()
            .filter(|(k, _)| k == "subagent-settled")
            .count()
            >= notices
    })
    .await;
    wait_for(|| s.settled(notices)).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    idle(parent).await;
}

fn start_call(description: &str, prompt: &str) -> Reply {
    calls(&[(
        "bg",
        "subagent",
        json!({"description": description, "prompt": prompt}),
    )])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_child_settles_into_a_notice_that_opens_a_parent_turn() {
    let s = setup(true);
    s.h.model.script(
        "parent",
        vec![
            start_call("Reply with OK", "child: reply OK"),
            text("STARTED"),
            text("NOTED"),
        ],
    );
    s.h.model.script("child:", vec![text("CHILD_OK")]);
    let parent = s.h.agent();
    parent.followup(Message::user_text("parent task")).unwrap();
    settle_parent(&parent, &s, 1).await;

    let events = parent.session().events();
    let id = started_id(&events);
    // The tool answered at once; the notice arrived after the turn that started the child
    // and opened the parent's second turn.
    assert_eq!(
        tail_of(&trace(&events), 12),
        vec![
            "step/start".to_string(),
            "assistant STARTED".into(),
            "step/end".into(),
            "turn/end completed".into(),
            "inbox next-turn +".into(),
            "turn/start 2".into(),
            "inbox next-turn -".into(),
            "step/start".into(),
            format!(
                "user Background subagent {id} is done and stays idle until you send it another message.Its closing message:CHILD_OK"
            ),
            "assistant NOTED".into(),
            "step/end".into(),
            "turn/end completed".into(),
        ]
    );
    assert_eq!(
        from_children(&parent),
        vec![(
            "subagent-settled".to_string(),
            vec![
                format!(
                    "Background subagent {id} is done and stays idle until you send it another message."
                ),
                "Its closing message:".into(),
                "CHILD_OK".into(),
            ]
        )]
    );
    // Settled: the child is no longer resident.
    assert!(s.live(&id).is_none());
    assert_eq!(*s.ends.lock().unwrap(), vec![format!("{id} completed")]);

    // Its log: the descriptor is its seed, then the inherited read-only override and the
    // delegated approval policy, then its one turn.
    let child = s.first_child().unwrap();
    let header = child.header();
    assert_eq!(header.id, id);
    assert_eq!(header.parent_session.as_deref(), Some(parent.id()));
    assert_eq!(header.origin.as_deref(), Some("subagent"));
    assert_eq!(header.delegation_depth, 1);
    assert_eq!(header.seed_length, None);
    let log = s.stored(&id).await;
    assert_eq!(
        trace(&log)[..8].to_vec(),
        vec![
            "subagent/descriptor",
            "session/end-seed",
            "sandbox/mode",
            "approval/policy",
            "inbox next-turn +",
            "turn/start 1",
            "inbox next-turn -",
            "step/start",
        ]
    );
    assert_eq!(
        dsh_kernel::json::to_string(log[0].data.as_value()),
        r#"{"version":2,"mode":"continuable","provider":"spawn","label":"Reply with OK","agentProvider":"test","agentModel":"m"}"#
    );
    assert_eq!(
        log[2].data.as_value(),
        &json!({"mode": "read-only", "source": "delegation"})
    );
    assert_eq!(trace(&log).last().unwrap(), "turn/end completed");
    // Only a continuable child has the `report` tool.
    let tool_names = |session: &str| -> Vec<String> {
        s.h.model.requests_of(session)[0]
            .tools
            .iter()
            .flatten()
            .map(|t| t.name.clone())
            .collect()
    };
    assert!(tool_names(&id).contains(&"report".to_string()));
    assert!(!tool_names(parent.id()).contains(&"report".to_string()));
}

fn tail_of(t: &[String], n: usize) -> Vec<String> {
    t[t.len().saturating_sub(n)..].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_cold_resumes_a_settled_child_as_its_next_turn() {
    let s = Arc::new(setup(true));
    let ids = s.clone();
    s.h.model.script(
        "parent",
        vec![
            start_call("Remember", "child: remember"),
            text("STARTED"),
            // Turn 2 (the first notice): continue the child.
            lazy(move || {
                let id = ids.child_id(0)?;
                Some(calls(&[(
                    "more",
                    "send_message",
                    json!({"agent_id": id, "message": "second task"}),
                )]))
            }),
            text("SENT"),
            text("NOTED_AGAIN"),
            text("SPARE"),
        ],
    );
    s.h.model
        .script("child:", vec![text("FIRST_OK"), text("SECOND_OK")]);
    let parent = s.h.agent();
    parent.followup(Message::user_text("parent task")).unwrap();
    settle_parent(&parent, &s, 2).await;

    let id = started_id(&parent.session().events());
    assert!(
        results(&parent.session().events()).contains(&(
            false,
            format!("message queued as the next turn for subagent {id}"),
            None
        )),
        "{:?}",
        results(&parent.session().events())
    );
    let notices = from_children(&parent);
    assert_eq!(notices.len(), 2);
    assert_eq!(notices[1].1[1..], ["Its closing message:", "SECOND_OK"]);

    // One log, two turns: the second one is the relayed message; nothing of the setup is
    // appended again on resume.
    let log = s.stored(&id).await;
    let t = trace(&log);
    assert_eq!(t.iter().filter(|l| *l == "subagent/descriptor").count(), 1);
    assert_eq!(t.iter().filter(|l| *l == "approval/policy").count(), 1);
    assert!(t.contains(&"turn/start 2".to_string()), "{t:?}");
    let relay = log
        .iter()
        .filter(|e| e.is(types::INBOX_SPLICED))
        .filter_map(|e| {
            e.data.as_value()["inserted"][0]["source"]
                .as_object()
                .cloned()
        })
        .nth(1)
        .expect("a second delivery");
    assert_eq!(
        Value::Object(relay),
        json!({"kind": "coordinator", "form": "relay", "senderSessionId": parent.id()})
    );
    assert_eq!(t.last().unwrap(), "turn/end completed");
    assert!(s.live(&id).is_none(), "settled again after its second turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_refuses_unknown_and_one_shot_children() {
    let s = Arc::new(setup(false));
    let ids = s.clone();
    s.h.model.script(
        "parent",
        vec![
            calls(&[(
                "once",
                "subagent_once",
                json!({"description": "Once", "prompt": "child: once"}),
            )]),
            lazy(move || {
                let id = ids.child_id(0)?;
                Some(calls(&[
                    (
                        "a",
                        "send_message",
                        json!({"agent_id": "no-such-child", "message": "hi"}),
                    ),
                    (
                        "b",
                        "send_message",
                        json!({"agent_id": id, "message": "hi"}),
                    ),
                ]))
            }),
            text("DONE"),
        ],
    );
    s.h.model.script("child:", vec![text("ONCE_OK")]);
    let parent = s.h.agent();
    parent.followup(Message::user_text("parent task")).unwrap();
    idle(&parent).await;
    let once = s.child_id(0).unwrap();
    let r = results(&parent.session().events());
    assert_eq!(
        r,
        vec![
            (false, "ONCE_OK".to_string(), None),
            (
                true,
                "Error: subagent \"no-such-child\" is unavailable".into(),
                Some("NOT_RESUMABLE".into())
            ),
            (
                true,
                format!(
                    "Error: subagent \"{once}\" cannot be resumed: it was not started as a continuable subagent, so there is no state to continue from; do not call send_message with this id again"
                ),
                Some("NOT_RESUMABLE".into())
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_agent_stops_a_working_child_which_then_settles_as_stopped() {
    let s = Arc::new(setup(false));
    let ids = s.clone();
    s.h.model.script(
        "parent",
        vec![
            start_call("Work long", "child: work"),
            // Once the child is working (its model call hangs), stop it.
            lazy(move || {
                let id = ids.child_id(0)?;
                let busy = ids
                    .live(&id)
                    .is_some_and(|a| a.status() == dsh_agent::AgentStatus::Running);
                busy.then(|| {
                    calls(&[
                        ("i", "interrupt_agent", json!({"agent_id": id})),
                        ("j", "interrupt_agent", json!({"agent_id": "nobody"})),
                    ])
                })
            }),
            text("INTERRUPTED"),
            text("NOTED"),
            text("SPARE"),
        ],
    );
    s.h.model.script("child:", vec![hang()]);
    let parent = s.h.agent();
    parent.followup(Message::user_text("parent task")).unwrap();
    settle_parent(&parent, &s, 1).await;
    let id = started_id(&parent.session().events());
    let r = results(&parent.session().events());
    assert!(
        r.contains(&(false, format!("interrupt requested for agent {id}"), None)),
        "{r:?}"
    );
    // An absent target is not an error.
    assert!(
        r.contains(&(false, "interrupt requested for agent nobody".into(), None)),
        "{r:?}"
    );
    assert_eq!(
        from_children(&parent)[0].1,
        vec![
            format!("Background subagent {id} was stopped before it finished."),
            "It left no closing message.".to_string(),
        ]
    );
    assert_eq!(*s.ends.lock().unwrap(), vec![format!("{id} aborted")]);
    let log = s.stored(&id).await;
    let end = log.iter().rev().find(|e| e.is(types::TURN_END)).unwrap();
    assert_eq!(end.data.as_value()["reason"]["kind"], json!("aborted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_reaches_the_parent_before_the_child_settles() {
    let s = setup(true);
    s.h.model.script(
        "parent",
        vec![
            start_call("Report early", "child: report"),
            text("STARTED"),
            text("NOTED"),
            text("SPARE"),
            text("SPARE"),
        ],
    );
    s.h.model.script(
        "child:",
        vec![
            calls(&[("r", "report", json!({"output": "INTERIM"}))]),
            text("FINAL"),
        ],
    );
    let parent = s.h.agent();
    parent.followup(Message::user_text("parent task")).unwrap();
    settle_parent(&parent, &s, 1).await;
    let id = started_id(&parent.session().events());
    let got = from_children(&parent);
    assert_eq!(
        got[0],
        (
            "subagent-report".to_string(),
            vec![
                format!("Background subagent {id} reported:"),
                "INTERIM".to_string()
            ]
        )
    );
    assert_eq!(got[1].0, "subagent-settled");
    assert_eq!(got[1].1[1..], ["Its closing message:", "FINAL"]);
    let log = s.stored(&id).await;
    let (is_error, text, _) = results(&log)[0].clone();
    assert!(!is_error);
    assert!(
        text.starts_with("report accepted by the agent that started you as message "),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_agents_shows_continuable_children_with_their_state() {
    let s = Arc::new(setup(false));
    let gate = s.clone();
    s.h.model.script(
        "parent",
        vec![
            calls(&[("l0", "list_agents", json!({}))]),
            calls(&[(
                "once",
                "subagent_once",
                json!({"description": "One shot", "prompt": "child: once"}),
            )]),
            start_call("Keep working", "child: hang"),
            // Wait until the continuable child is working.
            lazy(move || {
                let id = gate.child_id(1)?;
                gate.live(&id)
                    .is_some_and(|a| a.status() == dsh_agent::AgentStatus::Running)
                    .then(|| calls(&[("l1", "list_agents", json!({}))]))
            }),
            calls(&[("l2", "list_agents", json!({"scope": "descendants"}))]),
            text("LISTED"),
            text("NOTED"),
            calls(&[("l3", "list_agents", json!({}))]),
            text("LISTED_AGAIN"),
        ],
    );
    s.h.model.script("child: once", vec![text("ONCE_OK")]);
    s.h.model.script("child: hang", vec![hang()]);
    let parent = s.h.agent();
    parent.followup(Message::user_text("parent task")).unwrap();
    idle(&parent).await;
    let id = started_id(&parent.session().events());
    let r: Vec<String> = results(&parent.session().events())
        .into_iter()
        .map(|(_, t, _)| t)
        .collect();
    // The one-shot child is never listed: it cannot be continued.
    assert_eq!(
        r,
        vec![
            "(no subagents)".to_string(),
            "ONCE_OK".into(),
            format!("started subagent {id}"),
            format!("{id} [running] \u{2014} Keep working"),
            format!(
                "{id} [running] parent={} depth=1 \u{2014} Keep working",
                parent.id()
            ),
        ]
    );

    // Stopped and settled, the child is only stored: `ready`.
    s.h.root
        .get::<dsh_subagent::Subagents>()
        .unwrap()
        .continuations()
        .unwrap()
        .interrupt(
            &id,
            &dsh_subagent::InterruptAuthority::Ancestor(parent.clone()),
        )
        .unwrap();
    settle_parent(&parent, &s, 1).await;
    parent.followup(Message::user_text("list again")).unwrap();
    let p = parent.clone();
    wait_for(|| results(&p.session().events()).len() >= 6).await;
    idle(&parent).await;
    assert_eq!(
        results(&parent.session().events())[5].1,
        format!("{id} [ready] \u{2014} Keep working")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_ups_to_a_working_child_queue_as_its_next_turns_in_order() {
    // The replay fixture lets a static script name the child by a placeholder id, holds
    // the child until both follow-ups are queued, and fails its third turn before any step.
    let s = setup_with(
        true,
        vec![plain_row(
            "durability",
            "@deepseek-ai/dsh-test-subagent-durability-failure",
            Value::Null,
        )],
    );
    let placeholder = dsh_conformance::PLACEHOLDER_CHILD_ID;
    let unknown = dsh_conformance::UNKNOWN_CHILD_ID;
    s.h.model.script(
        "parent",
        vec![
            start_call("Work", "child: work"),
            calls(&[(
                "m2",
                "send_message",
                json!({"agent_id": placeholder, "message": "second"}),
            )]),
            calls(&[(
                "m3",
                "send_message",
                json!({"agent_id": placeholder, "message": "third"}),
            )]),
            calls(&[(
                "m4",
                "send_message",
                json!({"agent_id": unknown, "message": "hello?"}),
            )]),
            text("DONE"),
            text("NOTED"),
            text("SPARE"),
        ],
    );
    s.h.model
        .script("child:", vec![text("CHILD_OK"), text("SECOND_OK")]);
    let parent = s.h.agent();
    parent.followup(Message::user_text("parent task")).unwrap();
    settle_parent(&parent, &s, 1).await;
    let id = started_id(&parent.session().events());
    let queued = format!("message queued as the next turn for subagent {placeholder}");
    assert_eq!(
        results(&parent.session().events()),
        vec![
            (false, format!("started subagent {id}"), None),
            (false, queued.clone(), None),
            (false, queued, None),
            (
                true,
                format!("Error: subagent \"{unknown}\" is unavailable"),
                Some("NOT_RESUMABLE".into())
            ),
        ]
    );
    assert_eq!(
        from_children(&parent)[0].1,
        vec![
            format!("Background subagent {id} failed before it finished."),
            "Its closing message:".to_string(),
            "SECOND_OK".to_string(),
        ]
    );
    assert_eq!(*s.ends.lock().unwrap(), vec![format!("{id} error")]);
    let log = s.stored(&id).await;
    let t = trace(&log);
    assert_eq!(
        t[4..9].to_vec(),
        vec![
            "inbox next-turn +",
            "turn/start 1",
            "inbox next-turn -",
            "inbox next-turn +",
            "inbox next-turn +",
        ]
    );
    assert_eq!(
        tail_of(&t, 3),
        vec!["turn/start 3", "inbox next-turn -", "turn/end error"]
    );
}
