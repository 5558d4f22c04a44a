//! The filesystem policy seam: two single-slot intent waterfalls and one observation
//! notification, plus the read-before-edit policy that occupies them.
//!
//! Without a listener both intents are `None` (unconditional mutations) and observations go
//! nowhere. `@deepseek-ai/dsh-fs-observation-policy` records, per session, what each
//! session last saw of each file (keyed by realpath identity) and turns that into guards.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dsh_kernel::{
    BoxError, Context, EmitEvent, Event, ListenOptions, Plugin, PluginConfig, WaterfallEvent,
};
use dsh_session::{LiveSession, SessionDisposed};

use crate::errors;
use crate::paths::Target;

/// The guard a write runs under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteIntent {
    /// The caller never saw the file: publish without replacing anything.
    CreateIfAbsent,
    /// The caller saw this version: fail if the file changed or vanished since.
    ReplaceIfVersion(String),
}

/// What a session learnt about a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    Present { version: String },
    Absent,
}

/// Payload of the intent waterfalls.
pub struct IntentRequest {
    pub target: Target,
    /// The calling agent's session (`None` for an agentless call).
    pub session: Option<Arc<LiveSession>>,
}

/// `fs/write-intent` (waterfall, scoped): the guard for a `write`. Default: `None`
/// (unconditional). A failing listener fails the call.
pub struct FsWriteIntent;
impl Event for FsWriteIntent {
    const NAME: &'static str = "fs/write-intent";
    type Payload = IntentRequest;
}
impl WaterfallEvent for FsWriteIntent {
    type Output = Option<WriteIntent>;
}

/// `fs/edit-intent` (waterfall, scoped): the version an `edit` must still find. Default:
/// `None` (unconditional). A failing listener (e.g. `FS_NOT_OBSERVED`) fails the call.
pub struct FsEditIntent;
impl Event for FsEditIntent {
    const NAME: &'static str = "fs/edit-intent";
    type Payload = IntentRequest;
}
impl WaterfallEvent for FsEditIntent {
    type Output = Option<String>;
}

/// Payload of [`FsObserved`].
pub struct ObservedPayload {
    pub target: Target,
    pub observation: Observation,
    pub session: Option<Arc<LiveSession>>,
}

/// `fs/observed` (emit, contained): a tool saw a file's state (read, write, edit, view).
/// Listeners must be synchronous recorders.
pub struct FsObserved;
impl Event for FsObserved {
    const NAME: &'static str = "fs/observed";
    type Payload = ObservedPayload;
}
impl EmitEvent for FsObserved {}

pub(crate) async fn write_intent(
    ctx: &Context,
    request: &IntentRequest,
) -> Result<Option<WriteIntent>, BoxError> {
    let default =
        |_: &IntentRequest| -> dsh_kernel::BoxFuture<'_, Result<Option<WriteIntent>, BoxError>> {
            Box::pin(async { Ok(None) })
        };
    ctx.waterfall::<FsWriteIntent, _>(request, &default).await
}

pub(crate) async fn edit_intent(
    ctx: &Context,
    request: &IntentRequest,
) -> Result<Option<String>, BoxError> {
    let default =
        |_: &IntentRequest| -> dsh_kernel::BoxFuture<'_, Result<Option<String>, BoxError>> {
            Box::pin(async { Ok(None) })
        };
    ctx.waterfall::<FsEditIntent, _>(request, &default).await
}

pub(crate) fn observed(
    ctx: &Context,
    target: &Target,
    observation: Observation,
    session: Option<&Arc<LiveSession>>,
) {
    ctx.emit::<FsObserved>(&ObservedPayload {
        target: target.clone(),
        observation,
        session: session.cloned(),
    });
}

/// Per-session observations (in memory only; a restart starts clean).
#[derive(Default)]
struct ObservationStore {
    by_session: Mutex<HashMap<String, HashMap<PathBuf, Observation>>>,
}

impl ObservationStore {
    fn get(&self, session: &str, key: &PathBuf) -> Option<Observation> {
        self.by_session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .and_then(|m| m.get(key))
            .cloned()
    }

    fn set(&self, session: String, key: PathBuf, observation: Observation) {
        self.by_session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(session)
            .or_default()
            .insert(key, observation);
    }

    fn forget(&self, session: &str) {
        self.by_session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session);
    }

    fn write_intent(&self, request: &IntentRequest) -> WriteIntent {
        let prior = request
            .session
            .as_ref()
            .and_then(|s| self.get(&s.id(), &request.target.key));
        match prior {
            Some(Observation::Present { version }) => WriteIntent::ReplaceIfVersion(version),
            Some(Observation::Absent) | None => WriteIntent::CreateIfAbsent,
        }
    }

    fn edit_intent(&self, request: &IntentRequest) -> Result<String, BoxError> {
        let display = &request.target.display;
        let prior = request
            .session
            .as_ref()
            .and_then(|s| self.get(&s.id(), &request.target.key));
        match prior {
            None => Err(errors::fs(
                "FS_NOT_OBSERVED",
                format!("edit requires reading \"{display}\" first"),
            )),
            Some(Observation::Absent) => Err(errors::fs(
                "FS_NOT_FOUND",
                format!("cannot edit \"{display}\": not found"),
            )),
            Some(Observation::Present { version }) => Ok(version),
        }
    }
}

/// `@deepseek-ai/dsh-fs-observation-policy`: read before edit. An edit needs a prior
/// observation of the same file by the same session and fails stale when the file changed
/// since; a write over a file the session never saw is refused.
pub struct ObservationPolicyPlugin;

impl Plugin for ObservationPolicyPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-fs-observation-policy"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let store = Arc::new(ObservationStore::default());
        let s = store.clone();
        ctx.on_waterfall::<FsWriteIntent>(ListenOptions::default(), move |request, _next| {
            let intent = s.write_intent(request);
            Box::pin(async move { Ok(Some(intent)) })
        })?;
        let s = store.clone();
        ctx.on_waterfall::<FsEditIntent>(ListenOptions::default(), move |request, _next| {
            let intent = s.edit_intent(request);
            Box::pin(async move { intent.map(Some) })
        })?;
        let s = store.clone();
        ctx.on_emit::<FsObserved>(ListenOptions::default(), move |payload| {
            if let Some(session) = &payload.session {
                s.set(
                    session.id(),
                    payload.target.key.clone(),
                    payload.observation.clone(),
                );
            }
            Ok(())
        })?;
        let s = store.clone();
        ctx.on_emit::<SessionDisposed>(ListenOptions::GLOBAL, move |session| {
            s.forget(&session.id());
            Ok(())
        })?;
        let s = store;
        ctx.effect("fs observations", move || {
            s.by_session
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clear()
        })?;
        Ok(())
    }
}
