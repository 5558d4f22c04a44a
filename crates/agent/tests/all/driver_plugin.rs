//! The loop is a plugin: a different tiny driver, composed from config rows in place of
//! `agent-loop`, runs with nothing else changed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dsh_agent::{
    Agent, AgentFactory, AgentOptions, AgentRef, AgentStatus, Agents, CreateAgent, InboxSnapshot,
    SendError,
};
use dsh_kernel::{BoxError, BoxFuture, Catalog, Context, Plugin, PluginConfig};
use dsh_llm::{ContentBlock, Message};
use dsh_session::{
    CancelCause, InboxTarget, LiveSession, SessionHeader, SessionSource, SessionStore,
    SurfaceIntent, types,
};
use pretty_assertions::assert_eq;
use serde_json::json;
use support::trace;

/// A driver that answers every prompt by echoing it, without any model.
struct EchoAgent {
    ctx: Context,
    session: Arc<LiveSession>,
    turns: Mutex<u64>,
}

impl Agent for EchoAgent {
    fn id(&self) -> &str {
        "echo-agent"
    }
    fn session(&self) -> &Arc<LiveSession> {
        &self.session
    }
    fn ctx(&self) -> &Context {
        &self.ctx
    }
    fn options(&self) -> AgentOptions {
        AgentOptions::default()
    }
    fn cwd(&self) -> Option<PathBuf> {
        None
    }
    fn status(&self) -> AgentStatus {
        AgentStatus::Idle
    }
    fn inbox(&self) -> InboxSnapshot {
        InboxSnapshot::default()
    }
    fn send(&self, message: Message, _target: InboxTarget, _wakeup: bool) -> Result<(), SendError> {
        let fail = |e: dsh_session::AppendError| SendError(e.to_string());
        let mut turns = self.turns.lock().unwrap();
        *turns += 1;
        let t = *turns;
        let s = &self.session;
        s.append(types::TURN_START, json!({"turn": t}), None)
            .map_err(fail)?;
        s.append(types::STEP_START, json!({"turn": t, "step": 1}), None)
            .map_err(fail)?;
        s.append(
            types::USER_MESSAGE,
            message.to_value(),
            Some(SurfaceIntent::append()),
        )
        .map_err(fail)?;
        let reply = Message::assistant(
            vec![ContentBlock::text(format!("echo: {}", message.text()))],
            "tiny",
            "echo",
            None,
        );
        s.append(
            types::ASSISTANT_MESSAGE,
            json!({"turn": t, "step": 1, "message": reply.to_value()}),
            Some(SurfaceIntent::append_citing(vec![])),
        )
        .map_err(fail)?;
        s.append(types::STEP_END, json!({"turn": t, "step": 1}), None)
            .map_err(fail)?;
        s.append(
            types::TURN_END,
            json!({"turn": t, "reason": {"kind": "completed"}}),
            None,
        )
        .map_err(fail)?;
        Ok(())
    }
    fn discard(&self, _message_id: &str) -> bool {
        false
    }
    fn cancel(&self, _cause: CancelCause, _keep_inbox: bool) {}
    fn when_idle(&self) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
    fn dispose(&self) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

struct EchoFactory {
    sessions: Arc<SessionStore>,
}

impl AgentFactory for EchoFactory {
    fn create(&self, owner: &Context, _request: CreateAgent) -> Result<AgentRef, BoxError> {
        let scope = owner.create_scope("echo-agent");
        let session = self.sessions.create(
            &scope,
            SessionHeader::new("echo-agent", 1),
            SessionSource::Fresh,
        )?;
        Ok(Arc::new(EchoAgent {
            ctx: scope,
            session,
            turns: Mutex::new(0),
        }))
    }
}

struct EchoDriverPlugin;

impl Plugin for EchoDriverPlugin {
    fn name(&self) -> &'static str {
        "test/echo-driver"
    }
    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let agents = ctx.require::<Agents>()?;
        let sessions = ctx.require::<SessionStore>()?;
        agents.set_factory(ctx, Arc::new(EchoFactory { sessions }))?;
        Ok(())
    }
}

#[tokio::test]
async fn another_driver_replaces_the_default_loop_from_config() {
    let mut catalog = Catalog::new();
    catalog.register(EchoDriverPlugin);
    dsh_agent::register_core(&mut catalog);
    let root = Context::new_root();
    // The same core rows as always, with the driver row swapped.
    let rows = support::rows(&[("driver", "test/echo-driver", serde_json::Value::Null)]);
    let tree = dsh_kernel::load_tree(&root, &catalog, &rows).unwrap();
    let agents = root.get::<Agents>().unwrap();
    let agent = agents
        .create(&root, CreateAgent::fresh(AgentOptions::default()))
        .unwrap();
    agent.followup(Message::user_text("hello")).unwrap();
    agent.when_idle().await;
    assert_eq!(
        trace(agent.session()),
        [
            "turn/start 1",
            "step/start 1.1",
            "user hello",
            "assistant 1.1 [echo: hello]",
            "step/end 1.1",
            "turn/end 1 {\"kind\":\"completed\"}"
        ]
    );
    assert_eq!(agent.session().derive_messages().len(), 2);
    tree.unload();
    assert!(
        root.get::<Agents>().is_none(),
        "unloading the tree removes every service"
    );
    assert_eq!(root.listener_count(), 0);
}
