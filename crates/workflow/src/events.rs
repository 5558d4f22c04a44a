//! Live narration of runs (upstream's `workflow/*` events), emitted through the calling
//! agent's context so any plugin can follow a run. Not durable: the `workflow` tool's
//! `tool-workflow/*` records are the log's account.

use std::sync::Arc;

use dsh_kernel::{Context, EmitEvent, Event};

use crate::engine::{AgentOutcome, AgentStartInfo, RunStop, WorkflowObserver};
use crate::meta::Meta;

/// Which run an event is about.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkflowRunInfo {
    pub run_id: String,
    pub meta: Meta,
}

/// A phase title or a log message of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkflowNote {
    pub info: WorkflowRunInfo,
    pub text: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct WorkflowAgentStarted {
    pub info: WorkflowRunInfo,
    pub agent: AgentStartInfo,
}

#[derive(Clone, Debug, PartialEq)]
pub struct WorkflowAgentEnded {
    pub info: WorkflowRunInfo,
    pub seq: u64,
    pub outcome: AgentOutcome,
}

#[derive(Clone, Debug, PartialEq)]
pub struct WorkflowEnded {
    pub info: WorkflowRunInfo,
    pub stop_reason: RunStop,
    pub error: Option<String>,
    pub agents_started: u64,
}

macro_rules! emit_event {
    ($ty:ident, $name:literal, $payload:ty) => {
        #[doc = concat!("`", $name, "` (emit).")]
        pub struct $ty;
        impl Event for $ty {
            const NAME: &'static str = $name;
            type Payload = $payload;
        }
        impl EmitEvent for $ty {}
    };
}

emit_event!(WorkflowStart, "workflow/start", WorkflowRunInfo);
emit_event!(WorkflowPhase, "workflow/phase", WorkflowNote);
emit_event!(WorkflowLog, "workflow/log", WorkflowNote);
emit_event!(
    WorkflowAgentStart,
    "workflow/agent-start",
    WorkflowAgentStarted
);
emit_event!(WorkflowAgentEnd, "workflow/agent-end", WorkflowAgentEnded);
emit_event!(WorkflowEnd, "workflow/end", WorkflowEnded);

/// Emits the live events and forwards to the caller's observer.
pub(crate) struct Narrator {
    pub ctx: Context,
    pub info: WorkflowRunInfo,
    pub inner: Option<Arc<dyn WorkflowObserver>>,
}

impl Narrator {
    pub(crate) fn end(&self, stop_reason: RunStop, error: Option<String>, agents_started: u64) {
        self.ctx.emit::<WorkflowEnd>(&WorkflowEnded {
            info: self.info.clone(),
            stop_reason,
            error,
            agents_started,
        });
    }
}

impl WorkflowObserver for Narrator {
    fn run_start(&self, run_id: &str, meta: &Meta) {
        if let Some(o) = &self.inner {
            o.run_start(run_id, meta);
        }
        self.ctx.emit::<WorkflowStart>(&self.info);
    }

    fn phase(&self, title: &str) {
        if let Some(o) = &self.inner {
            o.phase(title);
        }
        self.ctx.emit::<WorkflowPhase>(&WorkflowNote {
            info: self.info.clone(),
            text: title.to_string(),
        });
    }

    fn log(&self, message: &str) {
        if let Some(o) = &self.inner {
            o.log(message);
        }
        self.ctx.emit::<WorkflowLog>(&WorkflowNote {
            info: self.info.clone(),
            text: message.to_string(),
        });
    }

    fn agent_start(&self, info: &AgentStartInfo) {
        if let Some(o) = &self.inner {
            o.agent_start(info);
        }
        self.ctx.emit::<WorkflowAgentStart>(&WorkflowAgentStarted {
            info: self.info.clone(),
            agent: info.clone(),
        });
    }

    fn agent_end(&self, seq: u64, outcome: AgentOutcome) {
        if let Some(o) = &self.inner {
            o.agent_end(seq, outcome);
        }
        self.ctx.emit::<WorkflowAgentEnd>(&WorkflowAgentEnded {
            info: self.info.clone(),
            seq,
            outcome,
        });
    }
}
