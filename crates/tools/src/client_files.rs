//! Client file routes: a frontend whose client owns the files (an editor over ACP, with
//! unsaved buffers and its own review of changes) routes a session's text-file reads and
//! writes through that client. The file tools keep every check local (path resolution,
//! sandbox fence, read-before-write versions); only the content travels through the route.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use dsh_kernel::{BoxError, BoxFuture};

use crate::tool::ToolRunContext;

/// Text-file I/O through a client.
pub trait ClientFiles: Send + Sync + 'static {
    /// Whether reads go through the client.
    fn reads(&self) -> bool;
    /// Whether writes go through the client.
    fn writes(&self) -> bool;
    /// The text of `path` as the client has it (an unsaved buffer included).
    fn read_text(&self, path: &Path) -> BoxFuture<'static, Result<String, BoxError>>;
    /// Replaces the whole text of `path` through the client.
    fn write_text(&self, path: &Path, content: String) -> BoxFuture<'static, Result<(), BoxError>>;
}

/// The routes, by session id (a service; the tools plugin provides it).
#[derive(Default)]
pub struct ClientFileRoutes {
    by_session: Mutex<HashMap<String, Arc<dyn ClientFiles>>>,
}

impl ClientFileRoutes {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Routes session `id`'s file I/O through `files` until [`ClientFileRoutes::unroute`].
    pub fn route(&self, id: &str, files: Arc<dyn ClientFiles>) {
        self.by_session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), files);
    }

    pub fn unroute(&self, id: &str) {
        self.by_session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    pub fn get(&self, id: &str) -> Option<Arc<dyn ClientFiles>> {
        self.by_session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }
}

/// The route of the session a tool call runs in, if its frontend set one.
pub fn client_files(run: &ToolRunContext) -> Option<Arc<dyn ClientFiles>> {
    let id = run.session.as_ref()?.id();
    run.ctx.get::<ClientFileRoutes>()?.get(&id)
}

/// Sessions whose client asks its user before an operation the session's mode forbids (an
/// editor over ACP): the file tools ask for the wider mode at once instead of failing
/// first. A service; the agent plugin provides it.
#[derive(Default)]
pub struct AskAtOnce {
    sessions: Mutex<std::collections::HashSet<String>>,
}

impl AskAtOnce {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn mark(&self, id: &str) {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string());
    }

    pub fn unmark(&self, id: &str) {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    pub fn contains(&self, id: &str) -> bool {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(id)
    }
}

/// Whether the session a tool call runs in asks at once.
pub fn asks_at_once(run: &ToolRunContext) -> bool {
    let Some(session) = run.session.as_ref() else {
        return false;
    };
    run.ctx
        .get::<AskAtOnce>()
        .is_some_and(|a| a.contains(&session.id()))
}
