//! Opening a session for a terminal front end (the TUI and headless): a fresh one on the
//! profile's default model, or a stored one continued where its log ends.

use std::path::PathBuf;

use dsh_agent::{AgentOptions, AgentSource, CreateAgent};
use dsh_kernel::Context;
use dsh_policies::DefaultModel;

/// A fresh session in `cwd` on the default model, with a new id.
pub fn fresh_request(root: &Context, cwd: Option<PathBuf>) -> CreateAgent {
    let model = root
        .get::<DefaultModel>()
        .map(|m| (*m).clone())
        .unwrap_or_else(DefaultModel::fallback);
    let mut request = CreateAgent::fresh(AgentOptions {
        provider: Some(model.provider.clone()),
        model: Some(model.model.clone()),
        max_tokens: None,
        reasoning_effort: model.reasoning_effort.clone(),
    });
    request.session_id = Some(match root.get::<dsh_session::AssignedSessionId>() {
        Some(assigned) => assigned.0.clone(),
        None => format!("session-{}", uuid::Uuid::new_v4()),
    });
    request.cwd = cwd;
    request
}

/// Turns `request` into the continuation of the stored session `loaded` (its id, its
/// directory when it recorded one, its events).
pub fn resume_into(request: &mut CreateAgent, loaded: dsh_persistence::Loaded) {
    request.session_id = Some(loaded.header.id.clone());
    request.cwd = loaded
        .header
        .cwd
        .as_ref()
        .map(PathBuf::from)
        .or(request.cwd.take());
    request.source = AgentSource::Resume {
        header: loaded.header,
        events: loaded.events,
        stored_len: loaded.stored_len,
    };
}
