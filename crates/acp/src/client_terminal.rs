//! Shell commands through the editor's terminals (`terminal/create`, `terminal/wait_for_exit`,
//! `terminal/output`, `terminal/kill`, `terminal/release`), for clients that advertise
//! `terminal`: the command's call shows the live terminal (a `tool_call_update` with
//! `{type: "terminal", terminalId}`). The bash tool sends only unconfined commands here.

use dsh_kernel::{BoxError, BoxFuture};
use dsh_tools::{ClientTerminals, TerminalCommand, TerminalExit};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::protocol::{
    self, CreateTerminal, EnvVariable, SessionNotification, SessionUpdate, TerminalRef,
    ToolCallContent, ToolCallUpdate,
};
use crate::rpc::Peer;

pub struct EditorTerminals {
    pub peer: Peer,
    pub session_id: String,
}

fn exit_of(status: &Value) -> (Option<i32>, Option<String>) {
    (
        status
            .get("exitCode")
            .and_then(Value::as_i64)
            .and_then(|c| i32::try_from(c).ok()),
        status
            .get("signal")
            .and_then(Value::as_str)
            .map(str::to_owned),
    )
}

impl ClientTerminals for EditorTerminals {
    fn run(
        &self,
        c: TerminalCommand,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<TerminalExit, BoxError>> {
        let (peer, session) = (self.peer.clone(), self.session_id.clone());
        Box::pin(async move {
            let create = CreateTerminal {
                session_id: &session,
                command: "bash",
                args: vec!["-c", &c.command],
                env: c
                    .env
                    .iter()
                    .map(|(name, value)| EnvVariable { name, value })
                    .collect(),
                cwd: c.cwd.display().to_string(),
                output_byte_limit: c.output_limit as u64,
            };
            let created = peer
                .request("terminal/create", protocol::to_value(&create))
                .await
                .map_err(|e| e.message)?;
            let id = created
                .get("terminalId")
                .and_then(Value::as_str)
                .ok_or("the editor created a terminal without a terminalId")?
                .to_string();
            peer.notify(
                "session/update",
                protocol::to_value(&SessionNotification {
                    session_id: &session,
                    update: SessionUpdate::ToolCallUpdate(ToolCallUpdate {
                        tool_call_id: c.call_id.clone(),
                        status: None,
                        content: Some(vec![ToolCallContent::Terminal {
                            terminal_id: id.clone(),
                        }]),
                        raw_output: None,
                    }),
                }),
            );
            let ids = protocol::to_value(&TerminalRef {
                session_id: &session,
                terminal_id: &id,
            });
            let waited = peer.request("terminal/wait_for_exit", ids.clone());
            let deadline = async {
                match c.timeout {
                    Some(t) => tokio::time::sleep(t).await,
                    None => std::future::pending().await,
                }
            };
            let (mut timed_out, mut aborted) = (false, false);
            let status = tokio::select! {
                r = waited => r.map_err(|e| e.message),
                _ = deadline => { timed_out = true; Err(String::new()) }
                _ = cancel.cancelled() => { aborted = true; Err(String::new()) }
            };
            let status = match status {
                Ok(s) => s,
                Err(e) if !timed_out && !aborted => {
                    let _ = peer.request("terminal/release", ids.clone()).await;
                    return Err(format!("waiting for the terminal failed: {e}").into());
                }
                Err(_) => {
                    // Stop the command, then read what it printed.
                    let _ = peer.request("terminal/kill", ids.clone()).await;
                    Value::Null
                }
            };
            let output = peer
                .request("terminal/output", ids.clone())
                .await
                .unwrap_or(Value::Null);
            let _ = peer.request("terminal/release", ids).await;
            let (mut exit_code, mut signal) = exit_of(&status);
            if exit_code.is_none()
                && signal.is_none()
                && let Some(s) = output.get("exitStatus")
            {
                (exit_code, signal) = exit_of(s);
            }
            Ok(TerminalExit {
                output: output
                    .get("output")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                truncated: output
                    .get("truncated")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                exit_code,
                signal,
                timed_out,
                aborted,
            })
        })
    }
}
