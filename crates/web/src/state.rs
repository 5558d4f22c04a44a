//! What every request handler reaches: the kernel root, the hosted sessions, the stores,
//! and the security setup of this launch.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::Context;
use dsh_persistence::SessionFiles;
use dsh_policies::Credentials;
use tokio_util::sync::CancellationToken;

use crate::approvals::WebApprovals;
use crate::auth::Auth;
use crate::fence::Fence;
use crate::hosting::{Hosting, Lifecycle};
use crate::hub::Hub;
use crate::listing::Listing;
use crate::questions::WebQuestions;
use crate::workspaces::WorkspaceStore;

pub struct WebState {
    pub root: Context,
    pub hub: Hub,
    pub hosting: Arc<Hosting>,
    pub approvals: WebApprovals,
    pub questions: WebQuestions,
    pub workspaces: Option<Arc<WorkspaceStore>>,
    pub files: Option<Arc<SessionFiles>>,
    pub credentials: Option<Arc<Credentials>>,
    pub listing: Arc<Listing>,
    pub auth: Auth,
    pub fence: Fence,
    /// Random per process: stream cursors name it, so a cursor of another launch is never
    /// taken for one of this launch.
    pub instance: String,
    /// The directory `dsh web` was started in (offered first as a workspace).
    pub launch_cwd: PathBuf,
    pub home: PathBuf,
    pub shutdown: CancellationToken,
    /// Workspace changes per turn (`None`: no scratch directory).
    pub changes: Option<Arc<crate::changes::Changes>>,
    /// The team gateway whose sessions the page shows (`DSH_GATEWAY`); `None`: this
    /// process hosts the sessions.
    pub remote: Option<Arc<crate::remote::Remote>>,
}

impl WebState {
    pub fn lifecycle(&self) -> Lifecycle<'_> {
        Lifecycle {
            root: &self.root,
            hosting: &self.hosting,
            hub: &self.hub,
            files: self.files.as_ref(),
        }
    }
}
