//! `session.*`: list, search, create, prompt (queue or steer; text and images), the
//! attachments a session references, cancel, rename, fork, delete, the pending inbox — and `POST /api/respond` for approvals and user questions.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_agent::{AgentRef, AgentStatus};
use dsh_attachments::{
    AdmissionError, AttachmentStore, SaveImage, admit_prompt_images, decode_prompt_image,
    encode_base64,
};
use dsh_llm::{ContentBlock, ImageAttachmentRef, Message, MessageSource};
use dsh_persistence::{SessionSummary, fork_cut};
use dsh_session::{CancelCause, Session, SessionHeader};
use dsh_tools::ApprovalOutcome;
use serde_json::{Value, json};

use super::workspaces;
use crate::approvals::Answered;
use crate::hub::Signal;
use crate::listing::Listed;
use crate::rpc::{ApiError, ApiResult, Args, ErrorCode};
use crate::state::WebState;

/// Longest session title.
const MAX_TITLE_CHARS: usize = 200;
/// Search results per query (upstream's).
const MAX_SEARCH_RESULTS: usize = 20;

fn not_found(id: &str) -> ApiError {
    ApiError::new(ErrorCode::SessionNotFound, format!("No session {id}"))
        .with(json!({"sessionId": id}))
}

pub(super) fn session_id(p: &Value) -> Result<&str, ApiError> {
    let id = Args(p).str("sessionId")?;
    if id.is_empty() || id.len() > 200 || id.contains(['/', '\\', '\0']) {
        return Err(ApiError::bad_request("sessionId is not a session id"));
    }
    Ok(id)
}

/// Errors unless `id` is live here or stored.
pub async fn require_known(s: &WebState, id: &str) -> Result<(), ApiError> {
    if s.hosting.get(id).and_then(|h| h.agent()).is_some() {
        return Ok(());
    }
    let Some(files) = s.files.clone() else {
        return Err(not_found(id));
    };
    let owned = id.to_string();
    match tokio::task::spawn_blocking(move || files.find(&owned)).await {
        Ok(Ok(Some(_))) => Ok(()),
        Ok(Ok(None)) => Err(not_found(id)),
        Ok(Err(e)) => Err(crate::hosting::persistence_error(id, e)),
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// Every session this process knows: stored ones, overridden by live ones.
async fn summaries(s: &WebState) -> Vec<Listed> {
    let mut by_id: HashMap<String, Listed> = HashMap::new();
    let live = s.hosting.live();
    if let Some(files) = s.files.clone() {
        let listing = s.listing.clone();
        let skip: std::collections::HashSet<String> = live
            .iter()
            .filter_map(|a| dsh_persistence::encode_segment(a.id()).ok())
            .collect();
        let listed = tokio::task::spawn_blocking(move || listing.stored(&files, &skip))
            .await
            .unwrap_or_default();
        for l in listed {
            let id = match &l {
                Listed::Ok(summary) => summary.header.id.clone(),
                Listed::Unreadable { id, .. } => id.clone(),
            };
            by_id.insert(id, l);
        }
    }
    for agent in live {
        let session = agent.session();
        let header = session.header();
        let path = s
            .files
            .as_ref()
            .and_then(|f| f.path_for(&header).ok())
            .unwrap_or_default();
        let summary = session.read(|log| SessionSummary::of(header, path, log.events()));
        by_id.insert(summary.header.id.clone(), Listed::Ok(Arc::new(summary)));
    }
    by_id.into_values().collect()
}

fn row(
    s: &WebState,
    listed: &Listed,
    workspaces: &[crate::workspaces::Workspace],
    archived: &[String],
    waiting: &[String],
    asking: &[String],
) -> (i64, Value) {
    match listed {
        Listed::Ok(summary) => {
            let id = &summary.header.id;
            let hosted = s.hosting.get(id);
            let agent = hosted.as_ref().and_then(|h| h.agent());
            let running = agent
                .as_ref()
                .is_some_and(|a| a.status() == AgentStatus::Running);
            let error = hosted.as_ref().and_then(|h| h.last_error());
            let state = if waiting.contains(id) {
                "approval"
            } else if asking.contains(id) {
                "question"
            } else if running {
                "running"
            } else if error.is_some() {
                "error"
            } else {
                "idle"
            };
            let cwd = summary.header.cwd.clone();
            (
                summary.updated_at,
                json!({
                    "sessionId": id,
                    "title": summary.title,
                    "cwd": cwd,
                    "workspaceId": workspaces::workspace_of(workspaces, id, cwd.as_deref()),
                    "createdAt": summary.header.created_at,
                    "updatedAt": summary.updated_at,
                    "turns": summary.turns,
                    "blank": summary.blank,
                    "live": agent.is_some(),
                    "running": running,
                    "state": state,
                    "error": error,
                    "archived": archived.contains(id),
                    "parentSessionId": summary.header.parent_session,
                }),
            )
        }
        Listed::Unreadable { path, id, error } => (
            0,
            json!({
                "sessionId": id,
                "title": "",
                "cwd": Value::Null,
                "workspaceId": Value::Null,
                "updatedAt": 0,
                "turns": 0,
                "blank": false,
                "live": false,
                "running": false,
                "state": "unreadable",
                "error": format!("{error} ({})", path.display()),
                "archived": archived.contains(id),
            }),
        ),
    }
}

async fn registry(s: &WebState) -> (Vec<crate::workspaces::Workspace>, Vec<String>) {
    let Some(store) = s.workspaces.clone() else {
        return (Vec::new(), Vec::new());
    };
    match tokio::task::spawn_blocking(move || store.list()).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            tracing::warn!("web: workspace registry unreadable: {e}");
            (Vec::new(), Vec::new())
        }
        Err(_) => (Vec::new(), Vec::new()),
    }
}

pub async fn list(s: &WebState, p: &Value) -> ApiResult {
    let want_archived = Args(p).flag("archived")?;
    let (workspaces, archived) = registry(s).await;
    let waiting = s.approvals.sessions_waiting();
    let asking = s.questions.sessions_waiting();
    let mut rows: Vec<(i64, Value)> = summaries(s)
        .await
        .iter()
        .map(|l| row(s, l, &workspaces, &archived, &waiting, &asking))
        .filter(|(_, r)| r["blank"] != Value::Bool(true))
        .filter(|(_, r)| r["archived"] == Value::Bool(want_archived))
        .collect();
    rows.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then_with(|| a.1["sessionId"].as_str().cmp(&b.1["sessionId"].as_str()))
    });
    Ok(json!({"items": rows.into_iter().map(|(_, r)| r).collect::<Vec<_>>()}))
}

fn snippet(text: &str, at: usize, len: usize) -> String {
    let mut start = at.saturating_sub(60);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (at + len + 60).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    let body = text[start..end]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "{}{body}{}",
        if start > 0 { "…" } else { "" },
        if end < text.len() { "…" } else { "" }
    )
}

pub async fn search(s: &WebState, p: &Value) -> ApiResult {
    let query = Args(p).str("query")?.trim().to_string();
    if query.is_empty() || query.chars().count() > 500 {
        return Err(ApiError::bad_request(
            "query must be 1 to 500 characters long",
        ));
    }
    let needle = query.to_lowercase();
    let mut hits: Vec<(i64, Value)> = Vec::new();
    for listed in summaries(s).await {
        let Listed::Ok(summary) = listed else {
            continue;
        };
        if summary.blank {
            continue;
        }
        let in_title = summary.title.to_lowercase().find(&needle);
        let text = summary.text.to_lowercase();
        let snippet = match (in_title, text.find(&needle)) {
            // Lower-casing can change byte lengths; cut the snippet from the lowered text.
            (_, Some(at)) => snippet(&text, at, needle.len()),
            (Some(_), None) => summary.title.clone(),
            (None, None) => continue,
        };
        hits.push((
            summary.updated_at,
            json!({"sessionId": summary.header.id, "title": summary.title, "snippet": snippet}),
        ));
    }
    hits.sort_by_key(|h| std::cmp::Reverse(h.0));
    let has_more = hits.len() > MAX_SEARCH_RESULTS;
    hits.truncate(MAX_SEARCH_RESULTS);
    Ok(json!({"items": hits.into_iter().map(|(_, v)| v).collect::<Vec<_>>(), "hasMore": has_more}))
}

fn missing_dir(path: &Path) -> ApiError {
    ApiError::new(
        ErrorCode::WorkspaceInvalidPath,
        format!(
            "The directory {} no longer exists; choose another workspace",
            path.display()
        ),
    )
    .with(json!({"path": path.display().to_string()}))
}

pub async fn create(s: &WebState, p: &Value) -> ApiResult {
    let args = Args(p);
    let (cwd, workspace_id) = match (args.opt_str("workspaceId")?, args.opt_str("cwd")?) {
        (Some(ws), _) => {
            let store = workspaces::store(s)?;
            let (items, _) = tokio::task::spawn_blocking(move || store.list())
                .await
                .map_err(ApiError::internal)?
                .map_err(workspaces::error)?;
            let found = items.into_iter().find(|w| w.id == ws).ok_or_else(|| {
                ApiError::new(ErrorCode::WorkspaceNotFound, format!("No workspace {ws}"))
            })?;
            (PathBuf::from(found.path), Some(found.id))
        }
        (None, Some(cwd)) => (PathBuf::from(cwd), None),
        (None, None) => {
            return Err(ApiError::bad_request(
                "choose a workspace first (workspaceId or cwd is required)",
            ));
        }
    };
    if !cwd.is_absolute() {
        return Err(ApiError::bad_request("cwd must be an absolute path"));
    }
    if !cwd.is_dir() {
        return Err(missing_dir(&cwd));
    }
    // An unused session in the same directory is reused (clicking "New" twice makes one).
    let reusable = s.hosting.live().into_iter().find(|a| {
        a.cwd().as_deref() == Some(cwd.as_path())
            && a.status() == AgentStatus::Idle
            && a.inbox() == dsh_agent::InboxSnapshot::default()
            && a.session().read(|l| {
                !l.events()
                    .iter()
                    .any(|e| e.is(dsh_session::types::TURN_START))
            })
    });
    let agent = match reusable {
        Some(a) => a,
        None => s.lifecycle().create(cwd.clone())?,
    };
    let id = agent.id().to_string();
    // `agentPreset`: the preset this session runs (a reused blank session switches to it).
    let preset = match (
        args.opt_str("agentPreset")?,
        s.root.get::<crate::presets::AgentPresets>(),
    ) {
        (Some(wanted), Some(presets)) => Some(super::presets::apply(&presets, &agent, wanted)?),
        (Some(_), None) => {
            return Err(ApiError::bad_request(
                "agent presets are off in this profile (no agent-preset-registry row)",
            ));
        }
        (None, Some(presets)) => Some(presets.of(&id)),
        (None, None) => None,
    };
    workspaces::attach(s, workspace_id, &id, &cwd.to_string_lossy()).await;
    Ok(json!({"sessionId": id, "agentPreset": preset}))
}

/// Longest display name of a prompt image.
const MAX_IMAGE_NAME_CHARS: usize = 255;

/// One part of a prompt, in wire order.
enum Part {
    Text(String),
    Image(SaveImage),
}

fn attachment_error(e: AdmissionError) -> ApiError {
    match e {
        AdmissionError::Refused { reason, message } => {
            ApiError::new(ErrorCode::AttachmentError, message).with(json!({"reason": reason}))
        }
        AdmissionError::Failed { message } => ApiError::new(ErrorCode::Internal, message),
    }
}

/// Parses and validates every part (`text`, or `image` with `mediaType`, canonical base64
/// `data` and an optional `name`) before anything else happens.
fn prompt_parts(p: &Value) -> Result<Vec<Part>, ApiError> {
    let content = p
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad_request("content must be a list of blocks"))?;
    let mut parts = Vec::with_capacity(content.len());
    for block in content {
        let field = |k: &str| block.get(k).and_then(Value::as_str);
        match field("type") {
            Some("text") => match field("text") {
                Some(t) => parts.push(Part::Text(t.to_string())),
                None => return Err(ApiError::bad_request("a text block needs text")),
            },
            Some("image") => {
                let (Some(media_type), Some(data)) = (field("mediaType"), field("data")) else {
                    return Err(ApiError::bad_request(
                        "an image block needs mediaType and data (base64)",
                    ));
                };
                let name = match block.get("name") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(n)) if n.chars().count() <= MAX_IMAGE_NAME_CHARS => {
                        Some(n.as_str())
                    }
                    Some(_) => {
                        return Err(ApiError::bad_request(
                            "an image name must be a string of at most 255 characters",
                        ));
                    }
                };
                let image =
                    decode_prompt_image(media_type, data, name).map_err(attachment_error)?;
                parts.push(Part::Image(image));
            }
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "{other} blocks are not supported; send text or images"
                )));
            }
            None => return Err(ApiError::bad_request("each block needs a type")),
        }
    }
    let has_image = parts.iter().any(|p| matches!(p, Part::Image(_)));
    let has_text = parts
        .iter()
        .any(|p| matches!(p, Part::Text(t) if !t.trim().is_empty()));
    if !has_image && !has_text {
        return Err(ApiError::bad_request("the message is empty"));
    }
    Ok(parts)
}

/// The text of `parts`, concatenated.
fn parts_text(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            Part::Image(_) => None,
        })
        .collect()
}

/// Stores the prompt's images for the session's current route (the whole batch, before
/// any message exists) and builds the user content: text runs and image references in
/// wire order.
async fn durable_content(
    s: &WebState,
    agent: &AgentRef,
    parts: Vec<Part>,
) -> Result<Vec<ContentBlock>, ApiError> {
    let mut images = Vec::new();
    let mut layout = Vec::new();
    for part in parts {
        match part {
            Part::Text(t) => layout.push(Some(t)),
            Part::Image(i) => {
                images.push(i);
                layout.push(None);
            }
        }
    }
    let (default_provider, default_model) = crate::hosting::default_model(&s.root);
    let (provider, model) = agent.current_route((&default_provider, &default_model));
    let root = s.root.clone();
    let refs =
        tokio::task::spawn_blocking(move || admit_prompt_images(&root, &provider, &model, &images))
            .await
            .map_err(|_| ApiError::internal("unable to persist the prompt image batch"))?
            .map_err(attachment_error)?;
    let mut refs = refs.into_iter();
    let mut content = Vec::new();
    let mut run = String::new();
    for slot in layout {
        match slot {
            Some(t) => run.push_str(&t),
            None => {
                if !run.is_empty() {
                    content.push(ContentBlock::text(std::mem::take(&mut run)));
                }
                let r = refs
                    .next()
                    .ok_or_else(|| ApiError::internal("the image batch came back short"))?;
                content.push(ContentBlock::image(r.to_store_value()));
            }
        }
    }
    if !run.is_empty() {
        content.push(ContentBlock::text(run));
    }
    Ok(content)
}

pub async fn prompt(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    let mode = Args(p).opt_str("mode")?.unwrap_or("queue");
    if !matches!(mode, "queue" | "steer") {
        return Err(ApiError::bad_request("mode must be \"queue\" or \"steer\""));
    }
    let parts = prompt_parts(p)?;
    let has_image = parts.iter().any(|p| matches!(p, Part::Image(_)));
    let text = parts_text(&parts);
    let agent = s.lifecycle().ensure_live(id).await?;
    if let Some(cwd) = agent.cwd()
        && !cwd.is_dir()
    {
        return Err(missing_dir(&cwd));
    }
    let commands = s.root.get::<dsh_commands::CommandRegistry>();
    if has_image {
        if let (Some(commands), Some((name, _))) =
            (&commands, dsh_commands::parse_command(text.trim_start()))
            && commands.list().iter().any(|c| c.name == name)
        {
            return Err(ApiError::bad_request(format!(
                "/{name} is a command and takes no images; send the command without images"
            )));
        }
    } else if text.starts_with('/')
        && let Some(commands) = commands
    {
        let outcome = commands
            .dispatch_line(
                &agent,
                text.trim(),
                tokio_util::sync::CancellationToken::new(),
            )
            .await;
        // `recorded`: the command ran and its reply is in the session log (`command/done`),
        // so the page shows it from there; help and unknown names are answered only here.
        let reply = match &outcome {
            dsh_commands::LineOutcome::NotACommand => None,
            dsh_commands::LineOutcome::Executed { result, .. } => Some((result.is_error(), true)),
            dsh_commands::LineOutcome::Unknown { .. } => Some((true, false)),
            dsh_commands::LineOutcome::Help { .. } => Some((false, false)),
        };
        if let Some((is_error, recorded)) = reply {
            return Ok(json!({"accepted": true, "command": {
                "text": outcome.reply(), "isError": is_error, "recorded": recorded}}));
        }
    }
    // The browser's IANA zone rides on the message's source (0.2.1's `clientTimeZone`);
    // the clock reading tells the model which zone the user's dates and times are in.
    let source = match Args(p).opt_str("clientTimeZone")? {
        None => MessageSource::User,
        Some(zone) => {
            if crate::schedule::rule::zone_of(zone).is_err() {
                return Err(ApiError::bad_request(format!(
                    "clientTimeZone \"{zone}\" is not UTC or an IANA Area/Location name"
                )));
            }
            let mut m = serde_json::Map::new();
            m.insert("kind".into(), json!("user"));
            m.insert("clientTimeZone".into(), json!(zone));
            MessageSource::Other(m)
        }
    };
    // `@server:uri` references to connected MCP servers: each resource's text joins the
    // message as a block of its own after what the user typed (the page shows it folded).
    let referenced = referenced_resources(s, &agent, &text).await?;
    let mut message = if has_image {
        Message::user(durable_content(s, &agent, parts).await?, source)
    } else {
        Message::user(vec![ContentBlock::text(text)], source)
    };
    message
        .content
        .extend(referenced.into_iter().map(ContentBlock::text));
    let sent = if mode == "steer" && agent.status() == AgentStatus::Running {
        agent.steer(message)
    } else {
        agent.followup(message)
    };
    sent.map_err(|e| {
        ApiError::new(
            ErrorCode::AgentBusy,
            format!("the message was not accepted: {e}"),
        )
    })?;
    Ok(json!({"accepted": true}))
}

/// Reads the MCP resources `text` references; an unreadable one refuses the prompt with
/// the reason (nothing is sent, the composer keeps the text).
async fn referenced_resources(
    s: &WebState,
    agent: &AgentRef,
    text: &str,
) -> Result<Vec<String>, ApiError> {
    let Some(service) = s.root.get::<dsh_mcp::McpResources>() else {
        return Ok(Vec::new());
    };
    let servers = service.servers(agent.ctx());
    let mut out = Vec::new();
    for (server, uri) in super::files::resource_refs(text, &servers)
        .into_iter()
        .take(8)
    {
        let read = service.read_for_prompt(agent.ctx(), &server, &uri).await;
        out.push(read.map_err(|e| {
            ApiError::bad_request(format!("@{server}:{uri} cannot be attached: {e}"))
        })?);
    }
    Ok(out)
}

/// Longest attachment id accepted (`sha256:` and 64 hex digits, with room to spare).
const MAX_ATTACHMENT_ID_CHARS: usize = 200;

/// The reference of the first image block anywhere in `value` whose id is `wanted`.
fn referenced_image(value: &Value, wanted: &str) -> Option<ImageAttachmentRef> {
    match value {
        Value::Object(map) => {
            if map.get("type").and_then(Value::as_str) == Some("image")
                && let Some(attachment) = map.get("attachment")
                && attachment.get("attachmentId").and_then(Value::as_str) == Some(wanted)
                && let Ok(r) = ImageAttachmentRef::from_json(attachment)
            {
                return Some(r);
            }
            map.values().find_map(|v| referenced_image(v, wanted))
        }
        Value::Array(items) => items.iter().find_map(|v| referenced_image(v, wanted)),
        _ => None,
    }
}

/// `session.attachment {sessionId, attachmentId}`: the stored image (`data`, base64) and
/// its reference, only when a durable event of that session references the id.
pub async fn attachment(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    let wanted = Args(p).str("attachmentId")?;
    if wanted.is_empty() || wanted.len() > MAX_ATTACHMENT_ID_CHARS {
        return Err(ApiError::bad_request(
            "attachmentId is not an attachment id",
        ));
    }
    let events = match s.hosting.get(id).and_then(|h| h.agent()) {
        Some(agent) => agent.session().events(),
        None => {
            let files = s.files.clone().ok_or_else(|| not_found(id))?;
            let owned = id.to_string();
            match tokio::task::spawn_blocking(move || files.inspect(&owned))
                .await
                .map_err(ApiError::internal)?
            {
                Ok(loaded) => loaded.events,
                Err(e) => return Err(crate::hosting::persistence_error(id, e)),
            }
        }
    };
    let found = events
        .iter()
        .find_map(|e| referenced_image(e.data.as_value(), wanted));
    let Some(image) = found else {
        return Err(ApiError::new(
            ErrorCode::AttachmentError,
            format!("attachment {wanted} was not found in session {id}"),
        )
        .with(
            json!({"reason": "ATTACHMENT_NOT_REFERENCED", "sessionId": id, "attachmentId": wanted}),
        ));
    };
    let store = s.root.get::<AttachmentStore>().ok_or_else(|| {
        ApiError::new(ErrorCode::AttachmentError, "no attachment store is mounted")
            .with(json!({"reason": "ATTACHMENTS_UNAVAILABLE"}))
    })?;
    let read = image.clone();
    let bytes = tokio::task::spawn_blocking(move || store.read_image(&read))
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| {
            ApiError::new(ErrorCode::AttachmentError, e.message)
                .with(json!({"reason": e.code.as_str()}))
        })?;
    Ok(json!({"attachment": image.to_store_value(), "data": encode_base64(&bytes)}))
}

pub async fn cancel(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    if let Some(agent) = s.hosting.get(id).and_then(|h| h.agent()) {
        // Pending messages stay queued (upstream's cancel keeps the inbox).
        agent.cancel(CancelCause::User, true);
    }
    Ok(json!({"accepted": true}))
}

pub async fn rename(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    let title: String = Args(p)
        .str("title")?
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(MAX_TITLE_CHARS)
        .collect();
    if title.is_empty() {
        return Err(
            ApiError::new(ErrorCode::TitleInvalid, "a title cannot be empty")
                .with(json!({"sessionId": id})),
        );
    }
    let agent = s.lifecycle().ensure_live(id).await?;
    let event = agent
        .session()
        .append(
            dsh_session::types::SESSION_TITLE,
            json!({"title": title, "source": {"kind": "user"}}),
            None,
        )
        .map_err(|e| ApiError::internal(format!("the title was not recorded: {e}")))?;
    s.hub.send(Signal::Lists);
    Ok(json!({"title": title, "seq": event.seq}))
}

fn now_ms() -> i64 {
    crate::http::now_ms() as i64
}

pub async fn fork(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    let at = Args(p).opt_u64("atSeq")?;
    let files = s.files.clone().ok_or_else(|| {
        ApiError::new(
            ErrorCode::ForkUnavailable,
            "session persistence is disabled",
        )
    })?;
    let (header, events) = match s.hosting.get(id).and_then(|h| h.agent()) {
        Some(agent) => (agent.session().header(), agent.session().events()),
        None => {
            let (f, owned) = (files.clone(), id.to_string());
            let loaded = tokio::task::spawn_blocking(move || f.inspect(&owned))
                .await
                .map_err(ApiError::internal)?
                .map_err(|e| crate::hosting::persistence_error(id, e))?;
            (loaded.header, loaded.events)
        }
    };
    let cut = fork_cut(&events, at)
        .map_err(|e| ApiError::new(ErrorCode::ForkUnavailable, e).with(json!({"sessionId": id})))?;
    let now = now_ms();
    let mut child = SessionHeader::new(
        format!("session-{}", uuid::Uuid::new_v4()),
        now.max(0) as u64,
    );
    child.cwd = header.cwd.clone();
    child.parent_session = Some(header.id.clone());
    child.seed_length = Some(cut as u64);
    child.agent_preset = header.agent_preset.clone();
    let seeded = Session::with_seed(child.clone(), events[..cut].to_vec(), now)
        .map_err(|e| ApiError::new(ErrorCode::ForkUnavailable, e.to_string()))?;
    let seeded_events = seeded.events().to_vec();
    let create_header = child.clone();
    // Publishing a log takes its writer lock for the appends that usually follow; the fork
    // stays cold until someone continues it, so the lock is released at once.
    tokio::task::spawn_blocking(move || {
        let created = files.create(&create_header, &seeded_events);
        files.release(&create_header.id);
        created
    })
    .await
    .map_err(ApiError::internal)?
    .map_err(|e| ApiError::internal(format!("the fork could not be stored: {e}")))?;
    let (items, _) = registry(s).await;
    let ws = workspaces::workspace_of(&items, id, header.cwd.as_deref());
    workspaces::attach(s, ws, &child.id, header.cwd.as_deref().unwrap_or_default()).await;
    s.hub.send(Signal::Lists);
    Ok(json!({"sessionId": child.id}))
}

pub async fn delete(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?.to_string();
    let stop = Args(p).flag("stopActivity")?;
    require_known(s, &id).await?;
    if let Some(agent) = s.hosting.get(&id).and_then(|h| h.agent())
        && agent.status() == AgentStatus::Running
        && !stop
    {
        return Err(ApiError::new(
            ErrorCode::AgentBusy,
            "the session is running; stop it before deleting it",
        )
        .with(json!({"sessionId": id})));
    }
    s.lifecycle().close(&id).await?;
    let files = s.files.clone().ok_or_else(|| not_found(&id))?;
    let owned = id.clone();
    tokio::task::spawn_blocking(move || files.delete(&owned))
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| crate::hosting::persistence_error(&id, e))?;
    workspaces::forget(s, &id).await;
    // Its reminders go with it (they could never be delivered again).
    if let Some(reminders) = s.root.get::<crate::schedule::ScheduleService>() {
        let owned = id.clone();
        if let Ok(Err(e)) =
            tokio::task::spawn_blocking(move || reminders.forget_session(&owned)).await
        {
            tracing::warn!("reminders of deleted session {id}: {e}");
        }
    }
    s.hosting.forget(&id);
    s.hub.send(Signal::Lists);
    Ok(json!({"deleted": true}))
}

pub async fn update_queue(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    let item = Args(p).str("itemId")?;
    let kind = p.pointer("/action/kind").and_then(Value::as_str);
    let agent: AgentRef = s
        .hosting
        .get(id)
        .and_then(|h| h.agent())
        .ok_or_else(|| not_found(id))?;
    match kind {
        Some("remove") => {
            if !agent.discard(item) {
                return Err(ApiError::new(
                    ErrorCode::QueueItemNotFound,
                    "that message is no longer pending",
                ));
            }
        }
        _ => return Err(ApiError::bad_request("action.kind must be \"remove\"")),
    }
    Ok(json!({"accepted": true}))
}

/// `POST /api/respond`: `{type: "client-response", rpcId: <approvalId>, result: {ok: true,
/// value: {sessionId, approvalId, outcome: "allowed-once" | "rejected"}}}`, or for a user
/// question `rpcId: <questionId>` and `value: {sessionId, questionId, answers: [{id,
/// selected: [label…], custom?}]}` (or `dismissed: true` to close it unanswered).
pub fn respond(s: &WebState, body: &Value) -> Value {
    let value = body.pointer("/result/value");
    if value.and_then(|v| v.get("questionId")).is_some() {
        return respond_question(s, body);
    }
    let field = |k: &str| value.and_then(|v| v.get(k)).and_then(Value::as_str);
    let outcome = match field("outcome") {
        Some("allowed-once") => Some(ApprovalOutcome::AllowedOnce),
        Some("rejected") => Some(ApprovalOutcome::Rejected),
        _ => None,
    };
    let well_formed = body.get("type").and_then(Value::as_str) == Some("client-response")
        && body.pointer("/result/ok") == Some(&Value::Bool(true));
    match (
        well_formed,
        field("sessionId"),
        field("approvalId"),
        outcome,
    ) {
        (true, Some(session), Some(approval), Some(outcome))
            if body.get("rpcId").and_then(Value::as_str) == Some(approval) =>
        {
            answered(s.approvals.answer(session, approval, outcome))
        }
        _ => json!({"accepted": false, "reason": "bad-response"}),
    }
}

fn respond_question(s: &WebState, body: &Value) -> Value {
    let value = body.pointer("/result/value").unwrap_or(&Value::Null);
    let field = |k: &str| value.get(k).and_then(Value::as_str);
    let well_formed = body.get("type").and_then(Value::as_str) == Some("client-response")
        && body.pointer("/result/ok") == Some(&Value::Bool(true));
    let (Some(session), Some(question)) = (field("sessionId"), field("questionId")) else {
        return json!({"accepted": false, "reason": "bad-response"});
    };
    if !well_formed || body.get("rpcId").and_then(Value::as_str) != Some(question) {
        return json!({"accepted": false, "reason": "bad-response"});
    }
    let taken = if value.get("dismissed") == Some(&Value::Bool(true)) {
        s.questions.dismiss(session, question)
    } else {
        s.questions.answer(
            session,
            question,
            value.get("answers").unwrap_or(&Value::Null),
        )
    };
    answered(taken)
}

fn answered(taken: Answered) -> Value {
    match taken {
        Answered::Accepted => json!({"accepted": true}),
        Answered::NotPending => json!({"accepted": false, "reason": "not-pending"}),
        Answered::Invalid(message) => {
            json!({"accepted": false, "reason": "invalid-answer", "message": message})
        }
    }
}
