//! The RPC methods, by area. Each takes the payload object and returns the value or an
//! [`ApiError`] the page shows.

mod choices;
mod config;
pub(crate) mod export;
pub(crate) mod files;
mod host;
mod memory;
pub(crate) mod presets;
mod schedule;
mod sessions;
mod workspaces;

use std::sync::Arc;

use serde_json::Value;

use crate::fence::Trust;
use crate::rpc::{ApiError, ApiResult, ErrorCode};
use crate::state::WebState;

pub use sessions::respond;

/// Methods that change this machine's configuration or reveal its file system: only for
/// requests addressed to a loopback name (upstream's privileged set).
fn loopback_only(method: &str) -> bool {
    method.starts_with("credentials.")
        || matches!(
            method,
            "host.listDirectory" | "llm.saveProvider" | "llm.removeProvider" | "llm.setDefault"
        )
}

/// Runs one method.
pub async fn dispatch(
    state: Arc<WebState>,
    trust: Trust,
    method: &str,
    payload: Value,
) -> ApiResult {
    if loopback_only(method) && trust != Trust::Loopback {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "{method} is only available on a loopback address (open the page at http://127.0.0.1:<port>)"
            ),
        ));
    }
    let s = &state;
    let p = &payload;
    if let Some(remote) = &s.remote {
        return crate::remote::dispatch(s, remote, method, p).await;
    }
    match method {
        "host.describe" => host::describe(s).await,
        "host.listDirectory" => host::list_directory(s, p).await,
        "session.list" => sessions::list(s, p).await,
        "session.search" => sessions::search(s, p).await,
        "session.create" => sessions::create(s, p).await,
        "session.prompt" => sessions::prompt(s, p).await,
        "session.attachment" => sessions::attachment(s, p).await,
        "session.cancel" => sessions::cancel(s, p).await,
        "session.rename" => sessions::rename(s, p).await,
        "session.fork" => sessions::fork(s, p).await,
        "session.delete" => sessions::delete(s, p).await,
        "session.updateQueue" => sessions::update_queue(s, p).await,
        "session.options" => choices::options(s, p).await,
        "session.commands" => choices::commands(s, p).await,
        "session.files" => files::files(s, p).await,
        "session.workspaceDiff" => files::workspace_diff(s, p).await,
        "session.export" => export::export(s, p).await,
        "session.setModel" => choices::set_model(s, p).await,
        "session.setEffort" => choices::set_effort(s, p).await,
        "session.setMode" => choices::set_mode(s, p).await,
        "agentPresets.list" => presets::list(s).await,
        "agentPresets.select" => presets::select(s, p).await,
        "schedule.list" => schedule::list(s, p).await,
        "schedule.catalog" => schedule::catalog(s).await,
        "schedule.delete" => schedule::delete(s, p).await,
        "memory.list" => memory::list(s, p).await,
        "memory.add" => memory::add(s, p).await,
        "memory.edit" => memory::edit(s, p).await,
        "memory.forget" => memory::forget(s, p).await,
        "memory.accept" => memory::accept(s, p).await,
        "workspace.list" => workspaces::list(s).await,
        "workspace.create" => workspaces::create(s, p).await,
        "workspace.rename" => workspaces::rename(s, p).await,
        "workspace.delete" => workspaces::delete(s, p).await,
        "workspace.archiveSession" => workspaces::archive(s, p, true).await,
        "workspace.unarchiveSession" => workspaces::archive(s, p, false).await,
        "credentials.describe" => config::describe(s, p),
        "credentials.set" => config::set(s, p).await,
        "credentials.unset" => config::unset(s, p).await,
        "llm.providers" => config::providers(s),
        "llm.saveProvider" => config::save_provider(s, p).await,
        "llm.removeProvider" => config::remove_provider(s, p).await,
        "llm.setDefault" => config::set_default(s, p).await,
        other => Err(ApiError::new(
            ErrorCode::BadRequest,
            format!("unknown method \"{other}\""),
        )),
    }
}

/// Whether `method` is served (unknown ones answer 404 like upstream).
pub fn known(method: &str) -> bool {
    matches!(
        method,
        "host.describe"
            | "host.listDirectory"
            | "session.list"
            | "session.search"
            | "session.create"
            | "session.prompt"
            | "session.attachment"
            | "session.cancel"
            | "session.rename"
            | "session.fork"
            | "session.delete"
            | "session.updateQueue"
            | "session.options"
            | "session.commands"
            | "session.files"
            | "session.workspaceDiff"
            | "session.export"
            | "session.setModel"
            | "session.setEffort"
            | "session.setMode"
            | "agentPresets.list"
            | "agentPresets.select"
            | "schedule.list"
            | "schedule.catalog"
            | "schedule.delete"
            | "memory.list"
            | "memory.add"
            | "memory.edit"
            | "memory.forget"
            | "memory.accept"
            | "workspace.list"
            | "workspace.create"
            | "workspace.rename"
            | "workspace.delete"
            | "workspace.archiveSession"
            | "workspace.unarchiveSession"
            | "credentials.describe"
            | "credentials.set"
            | "credentials.unset"
            | "llm.providers"
            | "llm.saveProvider"
            | "llm.removeProvider"
            | "llm.setDefault"
    )
}
