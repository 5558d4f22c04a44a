//! `remember`, `recall` and `forget`.

use std::collections::HashMap;
use std::sync::Arc;

use dsh_context::SessionQuery;
use dsh_context::query::EventFilters;
use dsh_kernel::{BoxError, Context, HarnessError};
use dsh_tools::{
    Approval, ApprovalOutcome, ApprovalRequest, Reply, Tool, ToolRunContext, Typed, TypedTool,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::plugin::{MemoryService, record_change, turn_number};
use crate::service::{Found, Memory, WritePolicy};
use crate::store::{MemoryError, Origin, Scope};

/// The `tool:memory` section.
pub const SECTION: &str = "Memory outlives this session. When you learn something a later session in this project would otherwise have to rediscover — how to build or test, a convention, a decision and its reason, what the person prefers — keep it with remember: one short fact per call, in your own words, no secrets, nothing about this task's passing state. Use scope user only for the person's preferences that hold in every project. recall searches the memories (and, with a query, earlier sessions of this workspace); forget removes an entry that is wrong or stale. Memories written now reach the prompt of later sessions, not this one.";

const REMEMBER_DESCRIPTION: &str = "Keeps one fact for later sessions: workspace scope (the project's .dsh/memory.md) or user scope (the person's own memory for every project). Duplicates are recognised; secrets are removed before anything is written.";
const TEXT_DESCRIPTION: &str =
    "The fact, short and self-contained, as a later session should read it.";
const SCOPE_DESCRIPTION: &str =
    "workspace (default) for this project, user for the person's preferences in every project.";
const TAGS_DESCRIPTION: &str = "Optional keywords that help recall find it.";
const RECALL_DESCRIPTION: &str = "Searches memory: entries whose text or tags hold the query's words, best match and newest first; without a query the newest entries. With a query it also lists earlier sessions of this workspace that mention it, with the session id and event seq to read them by.";
const QUERY_DESCRIPTION: &str = "Words to look for; leave out for the newest entries.";
const RECALL_SCOPE_DESCRIPTION: &str = "workspace, user or all (default).";
const LIMIT_DESCRIPTION: &str = "How many memories at most (default 10).";
const SESSIONS_DESCRIPTION: &str =
    "Whether to search earlier sessions too (default true; needs a query).";
const FORGET_DESCRIPTION: &str = "Removes one memory entry by the id shown in brackets in the memory section or returned by recall.";
const ID_DESCRIPTION: &str = "The entry id.";

fn fail(code: &'static str, message: impl Into<String>) -> BoxError {
    Box::new(HarnessError::new("HarnessError", code, message))
}

fn memory_error(e: MemoryError) -> BoxError {
    let code = match &e {
        MemoryError::NotFound(_) => "MEMORY_NOT_FOUND",
        MemoryError::Invalid(_) => "MEMORY_INVALID",
        MemoryError::Unusable { .. } => "MEMORY_FILE_UNUSABLE",
        MemoryError::Io { .. } => "MEMORY_IO",
    };
    fail(code, e.to_string())
}

/// Runs file work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, MemoryError> + Send + 'static,
) -> Result<T, BoxError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| fail("MEMORY_IO", e.to_string()))?
        .map_err(memory_error)
}

/// The JSON text, with the value itself as the Code Mode value.
fn output(value: Value) -> Reply<Value> {
    let text = serde_json::to_string(&value).unwrap_or_default();
    Reply::text(text).with_value(value)
}

#[derive(Clone)]
struct Shared {
    service: Arc<MemoryService>,
    root: Context,
    cap: usize,
}

impl Shared {
    fn memory(&self, ctx: &ToolRunContext) -> Result<Memory, BoxError> {
        let cwd = ctx
            .cwd
            .clone()
            .or_else(|| std::env::current_dir().ok())
            .ok_or_else(|| {
                fail(
                    "MEMORY_NO_WORKSPACE",
                    "no working directory to find the project's memory from",
                )
            })?;
        Ok(self.service.at(&cwd))
    }

    /// Asks for the session's yes to model writes when the policy wants one.
    async fn authorize(&self, ctx: &ToolRunContext, args: &Value) -> Result<(), BoxError> {
        let session = ctx.session.clone();
        match self.service.config.writes {
            WritePolicy::Allow => return Ok(()),
            WritePolicy::Deny => {
                return Err(fail(
                    "MEMORY_WRITES_DENIED",
                    "memory writes by the model are turned off here (writes: deny on the memory row); tell the person what you would keep so they can add it with /remember",
                ));
            }
            WritePolicy::AskOnce => {}
        }
        if let Some(s) = &session
            && self.service.granted(s)
        {
            return Ok(());
        }
        let Some(approval) = ctx
            .ctx
            .get::<Approval>()
            .or_else(|| self.root.get::<Approval>())
        else {
            return Err(fail(
                "MEMORY_APPROVAL_UNAVAILABLE",
                "memory writes need the person's yes and this session has no way to ask; set writes: allow on the memory row to let the model write memory unasked",
            ));
        };
        let outcome = approval
            .0
            .request(ApprovalRequest {
                approval_id: String::new(),
                ctx: ctx.ctx.clone(),
                session: session.clone(),
                tool_name: ctx.name.clone(),
                call_id: ctx.call_id.clone(),
                arguments: args.clone(),
                reason: Some(
                    "Write memory that later sessions read (asked once per session)".into(),
                ),
                cancel: ctx.cancel.clone(),
            })
            .await;
        match outcome {
            ApprovalOutcome::AllowedOnce => {
                if let Some(s) = &session {
                    self.service.grant(s);
                }
                Ok(())
            }
            ApprovalOutcome::Rejected => Err(fail(
                "MEMORY_WRITE_REJECTED",
                "the person declined memory writes for this session; do not ask again",
            )),
            ApprovalOutcome::Cancelled => {
                Err(fail("MEMORY_WRITE_CANCELLED", "the approval was cancelled"))
            }
            ApprovalOutcome::Unavailable => Err(fail(
                "MEMORY_APPROVAL_UNAVAILABLE",
                "memory writes need the person's yes and this session has no way to ask; set writes: allow on the memory row to let the model write memory unasked",
            )),
        }
    }
}

/// `remember`.
struct RememberTool(Shared);
/// `recall`.
struct RecallTool(Shared);
/// `forget`.
struct ForgetTool(Shared);

// The arguments of each (no doc: upstream's parameter objects carry no description).
#[derive(Deserialize, JsonSchema)]
struct RememberArgs {
    #[schemars(description = TEXT_DESCRIPTION)]
    text: String,
    #[schemars(description = SCOPE_DESCRIPTION)]
    scope: Option<RememberScope>,
    #[schemars(description = TAGS_DESCRIPTION)]
    tags: Option<Vec<String>>,
}

#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum RememberScope {
    Workspace,
    User,
}

#[derive(Deserialize, JsonSchema)]
struct RecallArgs {
    #[schemars(description = QUERY_DESCRIPTION)]
    query: Option<String>,
    #[schemars(description = RECALL_SCOPE_DESCRIPTION)]
    scope: Option<RecallScope>,
    #[schemars(description = LIMIT_DESCRIPTION)]
    #[schemars(with = "Option<i64>")]
    limit: Option<f64>,
    #[schemars(description = SESSIONS_DESCRIPTION)]
    sessions: Option<bool>,
}

#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum RecallScope {
    Workspace,
    User,
    All,
}

#[derive(Deserialize, JsonSchema)]
struct ForgetArgs {
    #[schemars(description = ID_DESCRIPTION)]
    id: String,
}

/// The three tools.
pub(crate) fn tools(
    root: &Context,
    service: &Arc<MemoryService>,
    cap: usize,
) -> Result<Vec<Arc<dyn Tool>>, BoxError> {
    let shared = Shared {
        service: service.clone(),
        root: root.clone(),
        cap,
    };
    let remember: Arc<dyn Tool> = Arc::new(Typed::new(RememberTool(shared.clone()))?);
    let recall: Arc<dyn Tool> = Arc::new(Typed::new(RecallTool(shared.clone()))?);
    let forget: Arc<dyn Tool> = Arc::new(Typed::new(ForgetTool(shared))?);
    Ok(vec![remember, recall, forget])
}

/// A memory as tools report it.
pub fn found_value(f: &Found, event: Option<u64>) -> Value {
    let mut origin = Map::new();
    if !f.entry.origin.by.is_empty() {
        origin.insert("by".into(), json!(f.entry.origin.by));
    }
    if let Some(s) = &f.entry.origin.session {
        origin.insert("sessionId".into(), json!(s));
    }
    if let Some(t) = f.entry.origin.turn {
        origin.insert("turn".into(), json!(t));
    }
    if let Some(seq) = event {
        origin.insert("seq".into(), json!(seq));
    }
    let mut v = json!({
        "id": f.entry.id,
        "scope": f.scope.as_str(),
        "text": f.entry.text,
    });
    if !f.entry.tags.is_empty() {
        v["tags"] = json!(f.entry.tags);
    }
    if let Some(at) = &f.entry.at {
        v["at"] = json!(at);
    }
    if f.entry.proposed {
        v["proposed"] = json!(true);
    }
    if !origin.is_empty() {
        v["origin"] = Value::Object(origin);
    }
    v
}

impl TypedTool for RememberTool {
    type Args = RememberArgs;
    type Value = Value;

    fn name(&self) -> String {
        "remember".into()
    }

    fn description(&self) -> String {
        REMEMBER_DESCRIPTION.into()
    }

    async fn run(
        self: Arc<Self>,
        args: RememberArgs,
        ctx: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let shared = &self.0;
        let memory = shared.memory(&ctx)?;
        let scope = match args.scope {
            Some(RememberScope::User) => Scope::User,
            Some(RememberScope::Workspace) | None => Scope::Workspace,
        };
        let text = args.text.trim().to_string();
        let tags: Vec<String> = args.tags.unwrap_or_default();
        shared.authorize(&ctx, ctx.arguments()).await?;
        let origin = Origin {
            by: "model".into(),
            session: ctx.session.as_ref().map(|s| s.id()),
            turn: ctx.session.as_deref().map(turn_number),
        };
        let m = memory.clone();
        let (added, redacted) =
            tokio::task::spawn_blocking(move || m.remember(scope, &text, &tags, origin, false))
                .await
                .map_err(|e| fail("MEMORY_IO", e.to_string()))?
                .map_err(memory_error)?;
        let found = Found {
            scope,
            entry: added.entry.clone(),
            score: 0,
        };
        if let Some(session) = &ctx.session
            && !added.duplicate
        {
            let mut extra = Map::new();
            extra.insert("callId".into(), json!(ctx.call_id));
            if redacted > 0 {
                extra.insert("redacted".into(), json!(redacted));
            }
            record_change(session, "remember", "model", &memory, &found, extra)?;
        }
        let mut value = json!({
            "id": found.entry.id,
            "scope": scope.as_str(),
            "path": memory.display_path(scope),
            "status": if added.duplicate { "already-known" } else { "saved" },
        });
        if redacted > 0 {
            value["redacted"] = json!(redacted);
        }
        Ok(output(value))
    }
}

impl TypedTool for ForgetTool {
    type Args = ForgetArgs;
    type Value = Value;

    fn name(&self) -> String {
        "forget".into()
    }

    fn description(&self) -> String {
        FORGET_DESCRIPTION.into()
    }

    async fn run(
        self: Arc<Self>,
        args: ForgetArgs,
        ctx: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let shared = &self.0;
        let memory = shared.memory(&ctx)?;
        let id = args.id.trim().to_string();
        // Fail on an unknown id before asking anyone.
        memory.find(&id).map_err(memory_error)?;
        shared.authorize(&ctx, ctx.arguments()).await?;
        let m = memory.clone();
        let found = blocking(move || m.forget(&id)).await?;
        if let Some(session) = &ctx.session {
            let mut extra = Map::new();
            extra.insert("callId".into(), json!(ctx.call_id));
            record_change(session, "forget", "model", &memory, &found, extra)?;
        }
        Ok(output(
            json!({"id": found.entry.id, "scope": found.scope.as_str(), "status": "forgotten"}),
        ))
    }
}

/// The seq of the `memory/change` event that wrote `id` in session `session`.
fn origin_seq(query: &SessionQuery, session: &str, id: &str) -> Option<u64> {
    crate::change_event_seq(&query.view(session).ok()?.events, id)
}

impl TypedTool for RecallTool {
    type Args = RecallArgs;
    type Value = Value;

    fn name(&self) -> String {
        "recall".into()
    }

    fn description(&self) -> String {
        RECALL_DESCRIPTION.into()
    }

    fn concurrency_safe(&self) -> bool {
        true
    }

    async fn run(
        self: Arc<Self>,
        args: RecallArgs,
        ctx: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let shared = &self.0;
        let memory = shared.memory(&ctx)?;
        let query = args.query.as_deref().map_or("", str::trim).to_string();
        let scopes = match args.scope {
            Some(RecallScope::Workspace) => vec![Scope::Workspace],
            Some(RecallScope::User) => vec![Scope::User],
            Some(RecallScope::All) | None => vec![Scope::Workspace, Scope::User],
        };
        let limit = args
            .limit
            .filter(|n| *n >= 1.0)
            .map_or(10, |n| n as usize)
            .min(shared.cap);
        let with_sessions = args.sessions != Some(false) && !query.is_empty();
        let sq = shared.root.get::<SessionQuery>();
        let caller = ctx.session.as_ref().map(|s| s.header());
        let value = tokio::task::spawn_blocking(move || {
            let (found, warnings) = memory.recall(&query, &scopes, limit, false);
            let mut cache: HashMap<(String, String), Option<u64>> = HashMap::new();
            let memories: Vec<Value> = found
                .iter()
                .map(|f| {
                    let seq = match (&sq, &f.entry.origin.session) {
                        (Some(q), Some(s)) => *cache
                            .entry((s.clone(), f.entry.id.clone()))
                            .or_insert_with(|| origin_seq(q, s, &f.entry.id)),
                        _ => None,
                    };
                    found_value(f, seq)
                })
                .collect();
            let mut value = json!({"memories": memories});
            if !warnings.is_empty() {
                value["warnings"] = json!(
                    warnings
                        .iter()
                        .map(|w| w.message.clone())
                        .collect::<Vec<_>>()
                );
            }
            if with_sessions && let (Some(q), Some(caller)) = (&sq, &caller) {
                match q.records() {
                    Ok(all) => {
                        let records: Vec<_> = all
                            .into_iter()
                            .filter(|r| {
                                r.header.id != caller.id
                                    && caller.cwd.is_some()
                                    && r.header.cwd == caller.cwd
                            })
                            .collect();
                        match q.search_sessions(&records, &query, &EventFilters::default(), limit) {
                            Ok(hits) => {
                                value["sessions"] = json!(
                                    hits.iter()
                                        .map(|h| json!({
                                            "sessionId": h.session_id,
                                            "seq": h.seq,
                                            "type": h.event_type,
                                            "snippet": h.snippet,
                                        }))
                                        .collect::<Vec<_>>()
                                );
                            }
                            Err(e) => {
                                value["sessionsError"] = json!(e.message());
                            }
                        }
                    }
                    Err(e) => value["sessionsError"] = json!(e.message()),
                }
            }
            value
        })
        .await
        .map_err(|e| fail("MEMORY_IO", e.to_string()))?;
        Ok(output(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_tools::{ObjectSchema, Prop};
    use pretty_assertions::assert_eq;

    fn derived<T: JsonSchema>() -> String {
        dsh_kernel::json::to_string(&dsh_tools::params_schema::<T>().unwrap().to_value())
    }

    #[test]
    fn derived_parameter_schemas_are_the_builders() {
        let remember = ObjectSchema::new()
            .required("text", Prop::string(TEXT_DESCRIPTION))
            .optional(
                "scope",
                Prop::enumeration(SCOPE_DESCRIPTION, &["workspace", "user"]),
            )
            .optional(
                "tags",
                Prop::array(
                    TAGS_DESCRIPTION,
                    Prop::String {
                        description: None,
                        enumeration: None,
                    },
                ),
            );
        let recall = ObjectSchema::new()
            .optional("query", Prop::string(QUERY_DESCRIPTION))
            .optional(
                "scope",
                Prop::enumeration(RECALL_SCOPE_DESCRIPTION, &["workspace", "user", "all"]),
            )
            .optional("limit", Prop::integer(LIMIT_DESCRIPTION))
            .optional("sessions", Prop::boolean(SESSIONS_DESCRIPTION));
        let forget = ObjectSchema::new().required("id", Prop::string(ID_DESCRIPTION));
        assert_eq!(
            derived::<RememberArgs>(),
            dsh_kernel::json::to_string(&remember.to_value())
        );
        assert_eq!(
            derived::<RecallArgs>(),
            dsh_kernel::json::to_string(&recall.to_value())
        );
        assert_eq!(
            derived::<ForgetArgs>(),
            dsh_kernel::json::to_string(&forget.to_value())
        );
    }
}
