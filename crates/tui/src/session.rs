//! Opening a session for a terminal front end (the TUI and headless): a fresh one on the
//! profile's default model (or the route a plugin assigned), or a stored one continued where
//! its log ends.

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
    // A route a plugin assigned (a team session's client chose it) wins over the default.
    let options = match root.get::<dsh_session::AssignedRoute>() {
        Some(route) => AgentOptions {
            provider: Some(route.provider.clone()),
            model: Some(route.model.clone()),
            max_tokens: route.max_tokens,
            reasoning_effort: route.reasoning_effort.clone(),
        },
        None => AgentOptions {
            provider: Some(model.provider.clone()),
            model: Some(model.model.clone()),
            max_tokens: None,
            reasoning_effort: model.reasoning_effort.clone(),
        },
    };
    let mut request = CreateAgent::fresh(options);
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
