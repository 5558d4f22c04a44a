//! MCP servers a client names in `session/new` and `session/load`: started for the session,
//! followed while it lives.

use super::*;

/// Connects a session's ACP `mcpServers` in its agent scope (their tools are that
/// session's; they stop when it is disposed). A server that fails is logged; the session
/// opens without it.
/// Connects the editor's MCP servers for `agent`; returns what to tell the user about the
/// ones that did not connect (also logged), and the connected ones, to follow.
pub(super) async fn attach_mcp(
    agent: &AgentRef,
    servers: Vec<dsh_mcp::ServerConfig>,
) -> (Vec<String>, Vec<dsh_mcp::ServerHandle>) {
    let mut notices = Vec::new();
    let mut handles = Vec::new();
    for outcome in dsh_mcp::acp::attach(agent.ctx(), servers).await {
        match outcome {
            Ok(server) => {
                if let Some(e) = server.startup_error() {
                    tracing::error!(
                        "acp: MCP server \"{}\" did not connect: {e}",
                        server.server_name()
                    );
                    notices.push(format!(
                        "MCP server \"{}\" did not start ({e}); its tools are not available in this session for now.",
                        server.server_name()
                    ));
                }
                handles.push(server);
            }
            Err(e) => {
                tracing::error!("acp: {e}");
                notices.push(format!("An MCP server could not be attached: {e}."));
            }
        }
    }
    (notices, handles)
}

/// Tells the user when an editor's MCP server loses its connection, comes back, or is
/// given up on: at once during a prompt, else at the start of the next one.
pub(super) fn follow_mcp(
    peer: &Peer,
    session: &Arc<AcpSession>,
    servers: Vec<dsh_mcp::ServerHandle>,
) {
    for server in servers {
        let mut states = server.subscribe();
        let owner = session.agent.ctx().clone();
        let (peer, session) = (peer.clone(), Arc::downgrade(session));
        let name = server.server_name().to_string();
        let follow = async move {
            let mut was_connected = matches!(
                *states.borrow_and_update(),
                dsh_mcp::ServerState::Connected { .. }
            );
            let mut lost = false;
            while states.changed().await.is_ok() {
                let state = states.borrow_and_update().clone();
                let connected = matches!(state, dsh_mcp::ServerState::Connected { .. });
                let notice = match state {
                    dsh_mcp::ServerState::Reconnecting { .. } if was_connected && !lost => {
                        lost = true;
                        Some(format!(
                            "MCP server \"{name}\" lost its connection; reconnecting (its tools fail until it is back)."
                        ))
                    }
                    dsh_mcp::ServerState::Connected { .. } if lost => {
                        lost = false;
                        Some(format!("MCP server \"{name}\" is connected again."))
                    }
                    dsh_mcp::ServerState::Stopped { reason } => {
                        Some(format!("MCP server \"{name}\" stopped: {reason}."))
                    }
                    _ => None,
                };
                was_connected |= connected;
                let (Some(notice), Some(session)) = (notice, session.upgrade()) else {
                    if session.strong_count() == 0 {
                        return;
                    }
                    continue;
                };
                let in_prompt = session
                    .prompt
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_some();
                if in_prompt {
                    update(
                        &peer,
                        &session.agent.session().id(),
                        SessionUpdate::agent_text(format!("{notice}\n\n")),
                    );
                } else {
                    session
                        .notices
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(notice);
                }
            }
        };
        if let Err(e) = owner.spawn(follow) {
            tracing::warn!(
                "acp: MCP server \"{}\" is not followed: {e}",
                server.server_name()
            );
        }
    }
}
