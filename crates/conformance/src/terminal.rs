//! `@deepseek-ai/dsh-test-pty-snapshot-backend` upstream's
//! deterministic terminal of the pty-tools scenario — every send answers `<text>\nPTY_OK\n
//! dsh> ` at once and waits for input.

use std::sync::{Arc, Mutex};

use dsh_kernel::{BoxError, BoxFuture, Context, Plugin, PluginConfig};
use dsh_terminal::TerminalService;
use tokio_util::sync::CancellationToken;

use dsh_terminal::{
    ReadPage, SendHandle, SendRequest, SendResult, SessionStatus, SpawnSpec, TerminalBackend,
    TerminalSession, TerminalSignal, WaitReason,
};

struct State {
    status: SessionStatus,
    scrollback: String,
}

pub struct SnapshotSession {
    state: Mutex<State>,
}

impl SnapshotSession {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl TerminalSession for SnapshotSession {
    fn motd(&self) -> String {
        "dsh> ".into()
    }

    fn pid(&self) -> Option<u32> {
        None
    }

    fn status(&self) -> SessionStatus {
        self.state().status.clone()
    }

    fn start_send(&self, request: SendRequest, _cancel: CancellationToken) -> SendHandle {
        let viewport = format!("{}\nPTY_OK\ndsh> ", request.text);
        let status = {
            let mut s = self.state();
            s.scrollback.push_str(&viewport);
            s.status.clone()
        };
        let result = SendResult {
            viewport: viewport.clone(),
            wait: WaitReason::StdinRead,
            status,
            truncated: false,
        };
        let consumed = Arc::new(Mutex::new(false));
        SendHandle {
            done: Box::pin(async move { Ok(result) }),
            read_output: Arc::new(move || {
                let mut c = consumed.lock().unwrap_or_else(|p| p.into_inner());
                if std::mem::replace(&mut *c, true) {
                    (String::new(), false)
                } else {
                    (viewport.clone(), false)
                }
            }),
        }
    }

    fn read(&self, offset: usize, count: usize) -> ReadPage {
        let s = self.state();
        let lines: Vec<&str> = s.scrollback.split('\n').collect();
        let end = lines.len().saturating_sub(offset);
        let start = end.saturating_sub(count);
        let text = lines[start..end].join("\n");
        let n = text.split('\n').count();
        ReadPage {
            text,
            total_lines: lines.len(),
            line_begin: offset,
            line_end: offset + n,
            truncated: false,
        }
    }

    fn signal(&self, _signal: TerminalSignal) -> Result<i32, BoxError> {
        Ok(1)
    }

    fn close(&self) -> BoxFuture<'static, Result<(), BoxError>> {
        self.state().status = SessionStatus::Exited {
            code: Some(0),
            signal: None,
        };
        Box::pin(async { Ok(()) })
    }
}

pub struct SnapshotBackend;

impl TerminalBackend for SnapshotBackend {
    fn type_name(&self) -> &str {
        "shell"
    }

    fn spawn(
        &self,
        _spec: SpawnSpec,
    ) -> BoxFuture<'static, Result<Arc<dyn TerminalSession>, BoxError>> {
        Box::pin(async {
            Ok(Arc::new(SnapshotSession {
                state: Mutex::new(State {
                    status: SessionStatus::Running,
                    scrollback: "dsh> ".into(),
                }),
            }) as Arc<dyn TerminalSession>)
        })
    }
}

/// `@deepseek-ai/dsh-test-pty-snapshot-backend`: registers [`SnapshotBackend`].
pub struct SnapshotBackendPlugin;

impl Plugin for SnapshotBackendPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-test-pty-snapshot-backend"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.require::<TerminalService>()?
            .register_backend(ctx, Arc::new(SnapshotBackend))
    }
}
