//! `user-approval`: the approval policy of a session, shown to the model as a
//! runtime-context section, and the approval service that routes `ask` decisions to
//! whichever answerer a frontend registered. (The sandbox policy lives in `dsh-sandbox`.)

use std::sync::{Arc, RwLock};

use dsh_kernel::{BoxError, BoxFuture, Context, EffectHandle, Plugin, PluginConfig};
use dsh_session::LiveSession;
use dsh_tools::{Approval, ApprovalOutcome, ApprovalRequest, ApprovalService};
use serde::Deserialize;

/// A frontend that can ask the user.
pub trait ApprovalAnswerer: Send + Sync + 'static {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalOutcome>;
}

/// How asks are resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalPolicy {
    Ask,
    Never,
}

impl ApprovalPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalPolicy::Ask => "ask",
            ApprovalPolicy::Never => "never",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ask" => Some(ApprovalPolicy::Ask),
            "never" => Some(ApprovalPolicy::Never),
            _ => None,
        }
    }

    /// The runtime-context text the model reads.
    fn describe(self) -> &'static str {
        match self {
            // Recorded behaviour, kept byte for byte: the `session-query-spill` scenario reads
            // the runtime-context snapshot back through a session tool and compares the
            // result (the dash is written as the character the recording holds).
            ApprovalPolicy::Never => {
                "Approval prompts are disabled in this session: actions that require approval are rejected automatically — do not request sandbox escalation (do not set `sandbox_permissions`)."
            }
            ApprovalPolicy::Ask => {
                "Approval policy: ask. Operations that need approval go to the user when a way to ask is available; if none is, they are refused."
            }
        }
    }
}

/// The policy a session's log sets (its last `approval/policy` event), if any.
pub fn session_approval_policy(session: &LiveSession) -> Option<ApprovalPolicy> {
    session.read(|log| {
        log.events()
            .iter()
            .rev()
            .find(|e| e.event_type == "approval/policy")
            .and_then(|e| e.data.get("policy").and_then(serde_json::Value::as_str))
            .and_then(ApprovalPolicy::parse)
    })
}

/// The approval service: policy plus the registered answerers (first one answers).
pub struct Approvals {
    policy: ApprovalPolicy,
    answerers: RwLock<Vec<(u64, Arc<dyn ApprovalAnswerer>)>>,
    next: std::sync::atomic::AtomicU64,
}

impl Approvals {
    /// The configured (deployment) policy.
    pub fn policy(&self) -> ApprovalPolicy {
        self.policy
    }

    /// The policy in force for `session`: its last `approval/policy`, else the configured one.
    pub fn effective(&self, session: Option<&LiveSession>) -> ApprovalPolicy {
        session
            .and_then(session_approval_policy)
            .unwrap_or(self.policy)
    }

    /// Switches `session`'s policy: logs `approval/policy` and tells the model at its next
    /// step. No-op when it already is `policy`.
    pub fn set_policy(
        &self,
        agent: &dsh_agent::AgentRef,
        policy: ApprovalPolicy,
    ) -> Result<(), BoxError> {
        let previous = self.effective(Some(agent.session()));
        if previous == policy {
            return Ok(());
        }
        agent.session().append(
            "approval/policy",
            serde_json::json!({"policy": policy.as_str()}),
            None,
        )?;
        let mut notice = dsh_llm::Message::user_text(format!(
            "The approval policy is now \"{}\" (it was \"{}\"; the user changed it).",
            policy.as_str(),
            previous.as_str()
        ));
        notice.source = dsh_llm::MessageSource::plugin("user-approval", []);
        agent.inject(notice)?;
        Ok(())
    }

    /// Registers a frontend answerer as an effect of `ctx`.
    pub fn register_answerer(
        self: &Arc<Self>,
        ctx: &Context,
        answerer: Arc<dyn ApprovalAnswerer>,
    ) -> Result<EffectHandle, BoxError> {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.answerers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, answerer));
        let this = Arc::downgrade(self);
        Ok(ctx.effect("approval answerer", move || {
            if let Some(this) = this.upgrade() {
                this.answerers
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|(i, _)| *i != id);
            }
        })?)
    }
}

fn outcome_name(o: ApprovalOutcome) -> &'static str {
    match o {
        ApprovalOutcome::AllowedOnce => "allowed-once",
        ApprovalOutcome::Rejected => "rejected",
        ApprovalOutcome::Cancelled => "cancelled",
        ApprovalOutcome::Unavailable => "unavailable",
    }
}

impl ApprovalService for Approvals {
    fn request(&self, mut request: ApprovalRequest) -> BoxFuture<'static, ApprovalOutcome> {
        let answerer = self
            .answerers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .first()
            .map(|(_, a)| a.clone());
        let policy = self.effective(request.session.as_deref());
        Box::pin(async move {
            // Every ask is audited in the session log: `approval/asked` then `approval/decided`.
            let id = uuid::Uuid::new_v4().to_string();
            request.approval_id = id.clone();
            let session = request.session.clone();
            if let Some(s) = &session {
                let mut asked = serde_json::Map::new();
                asked.insert("id".into(), id.clone().into());
                asked.insert("toolName".into(), request.tool_name.clone().into());
                if !request.call_id.is_empty() {
                    asked.insert("callId".into(), request.call_id.clone().into());
                }
                if let Some(r) = &request.reason {
                    asked.insert("reason".into(), r.clone().into());
                }
                if let Err(e) = s.append("approval/asked", serde_json::Value::Object(asked), None) {
                    tracing::warn!("approval: cannot log the request: {e}");
                }
            }
            let outcome = match (policy, answerer) {
                (ApprovalPolicy::Never, _) => ApprovalOutcome::Rejected,
                (ApprovalPolicy::Ask, None) => ApprovalOutcome::Unavailable,
                (ApprovalPolicy::Ask, Some(a)) => a.ask(request).await,
            };
            if let Some(s) = &session
                && let Err(e) = s.append(
                    "approval/decided",
                    serde_json::json!({"id": id, "outcome": outcome_name(outcome)}),
                    None,
                )
            {
                tracing::warn!("approval: cannot log the decision: {e}");
            }
            outcome
        })
    }
}

struct Forward(Arc<Approvals>);

impl ApprovalService for Forward {
    fn request(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalOutcome> {
        self.0.request(request)
    }
}

#[derive(Deserialize)]
struct ApprovalConfig {
    policy: Option<ApprovalPolicy>,
}

/// `@deepseek-ai/dsh-user-approval`.
pub struct ApprovalPlugin;

impl Plugin for ApprovalPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-user-approval"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: ApprovalConfig = config.parse()?;
        let policy = c.policy.unwrap_or(ApprovalPolicy::Ask);
        let approvals = Arc::new(Approvals {
            policy,
            answerers: RwLock::new(Vec::new()),
            next: 1.into(),
        });
        ctx.provide(approvals.clone())?;
        ctx.provide(Arc::new(Approval(Arc::new(Forward(approvals.clone())))))?;
        let prompt = ctx.require::<dsh_prompt::SystemPrompt>()?;
        let service = approvals;
        prompt.context(
            ctx,
            "approval:policy",
            115.0,
            Arc::new(move |a| {
                service
                    .effective(a.session.as_deref())
                    .describe()
                    .to_string()
            }),
        )?;
        Ok(())
    }
}
