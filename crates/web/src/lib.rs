//! `dsh web`: the browser UI, a frontend layer like `acp`. One process hosts many sessions;
//! pages are driven from durable session events and `agent/*` live events only.
//!
//! * [`startup`] — the app's command line (`ctx.webStartup`).
//! * [`register_catalog`] — the web bundle's rows (storage root, workspace registry,
//!   webserver, client connection, the app row).
//! * [`start`] — binds, wires the live listeners and the approval answerer, serves;
//!   [`RunningWeb::shutdown`] cancels running turns and closes every session.
//!
//! HTTP is hyper 1 with a small route table (no router framework: one fixed middleware —
//! fence, then auth — over ~25 routes); the downlink is server-sent events (the browser
//! reconnects and resumes by itself), everything the page sends is a JSON POST. The UI is
//! hand-written ES modules embedded in the binary, so `cargo build` alone builds it.

mod api;
mod app;
mod approvals;
mod assets;
mod auth;
mod changes;
mod fence;
mod hosting;
mod http;
mod hub;
mod listing;
mod open_browser;
mod pending;
mod plugins;
mod present;
mod presets;
mod questions;
mod remote;
mod routes;
mod rpc;
mod schedule;
mod server;
pub mod startup;
mod state;
mod stream;
mod time_context;
mod tls;
mod workspaces;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::Context;
use tokio_util::sync::CancellationToken;

pub use app::WebApp;
pub use assets::{ASSETS, first_page_bytes};
pub use auth::{Auth, SECRET_RECORD};
pub use open_browser::{is_local_launch, open as open_browser};
pub use plugins::{ConnectionConfig, StorageRoot, WebAppConfig, WebServerConfig, register_catalog};
pub use routes::{AUTH_REQUIRED, TOKEN_SPENT};
pub use stream::elide_committed_chunks;
pub use workspaces::WorkspaceStore;

/// Why the web app could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// A row the app needs is disabled or missing. Not retryable.
    #[error("dsh web: the profile has no {0} row; the web app cannot start")]
    MissingRow(&'static str),
    /// Binding failed (port in use, address not local). Retryable with another port.
    #[error("{0}")]
    Bind(String),
    /// The auth secret or token could not be set up. Not retryable.
    #[error("dsh web: {0}")]
    Auth(#[from] auth::AuthError),
    /// Wiring the live listeners failed. Not retryable.
    #[error("dsh web: {0}")]
    Wiring(String),
    /// `DSH_GATEWAY` names no usable gateway. Not retryable.
    #[error("dsh web: {0}")]
    Gateway(String),
}

/// A serving web app.
pub struct RunningWeb {
    state: Arc<state::WebState>,
    addr: SocketAddr,
    url: String,
    open_browser: bool,
    print_url: bool,
    warnings: Vec<String>,
    server: tokio::task::JoinHandle<()>,
}

impl RunningWeb {
    /// `http://HOST:PORT/?token=…` — the URL that signs a browser in.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Things the user should know (a non-loopback bind).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The app row asks to open the default browser.
    pub fn wants_browser(&self) -> bool {
        self.open_browser
    }

    /// The app row asks to print the URL line.
    pub fn prints_url(&self) -> bool {
        self.print_url
    }

    /// Stops serving: open pages get a `shutdown` frame, running turns are cancelled (their
    /// inbox kept), every live session is flushed and closed (bounded wait per session).
    pub async fn shutdown(self) {
        self.state.shutdown.cancel();
        let agents = self.state.hosting.live();
        for a in &agents {
            a.cancel(dsh_session::CancelCause::User, true);
        }
        // Nothing waits for a page past this point.
        self.state.approvals.close_all();
        self.state.questions.close_all();
        // Sessions settle in parallel, each bounded: a stuck one cannot hold the others.
        let mut closing = tokio::task::JoinSet::new();
        for a in agents {
            closing.spawn(async move {
                let _ =
                    tokio::time::timeout(std::time::Duration::from_secs(5), a.when_idle()).await;
                if let Err(e) = a.session().flush().await {
                    tracing::warn!(session = %a.id(), "web: flushing at shutdown failed: {e}");
                }
                a.dispose().await;
            });
        }
        while closing.join_next().await.is_some() {}
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), self.server).await;
    }
}

fn url_host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// The signing secret: the stored record (created on first use), else a per-process one
/// when credentials cannot be stored.
async fn signing_secret(
    credentials: Option<Arc<dsh_policies::Credentials>>,
) -> Result<Vec<u8>, WebError> {
    let Some(c) = credentials else {
        return Ok(auth::random_token()?.into_bytes());
    };
    let fresh = auth::new_secret_record()?;
    let stored = tokio::task::spawn_blocking(move || c.record_or_insert(SECRET_RECORD, || fresh))
        .await
        .map_err(|e| WebError::Wiring(e.to_string()))?;
    match stored {
        Ok(record) => Ok(auth::secret_from_record(&record)?),
        Err(e) => {
            tracing::warn!(
                "web: cannot store the browser-session secret ({e}); sign-ins last until dsh web stops"
            );
            Ok(auth::random_token()?.into_bytes())
        }
    }
}

/// Binds and serves the app of a loaded web tree.
pub async fn start(root: &Context) -> Result<RunningWeb, WebError> {
    let server_cfg = root.get::<WebServerConfig>().ok_or(WebError::MissingRow(
        "webserver (@deepseek-ai/dsh-host-webserver)",
    ))?;
    let connection = root.get::<ConnectionConfig>().ok_or(WebError::MissingRow(
        "connection (@deepseek-ai/dsh-client-connection)",
    ))?;
    let app = root.get::<WebAppConfig>().ok_or(WebError::MissingRow(
        "web-runtime (@deepseek-ai/dsh-web-app)",
    ))?;
    let remote = remote::Remote::from_env().map_err(WebError::Gateway)?;
    // The certificate is checked before anything listens: a bad pair is a startup error.
    let tls = server_cfg
        .tls
        .as_ref()
        .map(tls::acceptor)
        .transpose()
        .map_err(WebError::Bind)?;
    let listener = server::bind(SocketAddr::new(server_cfg.host, server_cfg.port))
        .await
        .map_err(WebError::Bind)?;
    let addr = listener
        .local_addr()
        .map_err(|e| WebError::Bind(format!("dsh web: no local address: {e}")))?;
    let credentials = root.get::<dsh_policies::Credentials>();
    let secret = signing_secret(credentials.clone()).await?;
    // Browsers reach the page over HTTPS when this server speaks TLS or the advertised
    // root is https (a TLS-terminating proxy): the sign-in cookie is then `Secure`.
    let https = tls.is_some()
        || app
            .public_url
            .as_deref()
            .is_some_and(|u| u.starts_with("https://"));
    let auth = auth::Auth::new(
        auth::random_token()?,
        &secret,
        connection.cookie_max_age_days,
    )?
    .secure(https);
    let hub = hub::Hub::default();
    let hosting = Arc::new(hosting::Hosting::default());
    hosting::install_listeners(root, &hosting, &hub)
        .map_err(|e| WebError::Wiring(e.to_string()))?;
    // Workspace changes per turn need git and a scratch directory; without them the page
    // lists the file tools' own changes only.
    let changes = match changes::Changes::new() {
        Ok(c) => {
            changes::install(root, &hosting, &c).map_err(|e| WebError::Wiring(e.to_string()))?;
            Some(c)
        }
        Err(e) => {
            tracing::warn!("web: no scratch directory for workspace changes: {e}");
            None
        }
    };
    let approvals = approvals::WebApprovals::new(hub.clone());
    if let Some(service) = root.get::<dsh_policies::Approvals>() {
        service
            .register_answerer(root, Arc::new(approvals.clone()))
            .map_err(|e| WebError::Wiring(e.to_string()))?;
    }
    let questions = questions::WebQuestions::new(hub.clone());
    if let Some(service) = root.get::<dsh_user_questions::UserQuestions>() {
        service
            .register_provider(root, Arc::new(questions.clone()))
            .map_err(|e| WebError::Wiring(e.to_string()))?;
    }
    let workspaces = root
        .get::<plugins::WorkspaceRow>()
        .and(root.get::<StorageRoot>())
        .map(|r| Arc::new(workspaces::WorkspaceStore::new(&r.0)));
    let launch_cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let mut warnings = Vec::new();
    if !server_cfg.host.is_loopback() && tls.is_none() {
        warnings.push(format!(
            "listening on {} over plain HTTP; anyone who can reach this address and obtains the token controls this machine's shell — restrict the port to a trusted network",
            server_cfg.host
        ));
    }
    let url = match &app.public_url {
        Some(root) => format!("{root}?token={}", auth.token()),
        None => format!(
            "{}://{}:{}/?token={}",
            if tls.is_some() { "https" } else { "http" },
            url_host(addr.ip()),
            addr.port(),
            auth.token()
        ),
    };
    if let Some(vars) = root.get::<dsh_tools::HostShellVars>() {
        let root_url = url.split("?token=").next().unwrap_or_default();
        vars.set("DSH_WEB_URL", root_url);
    }
    let state = Arc::new(state::WebState {
        root: root.clone(),
        hub,
        hosting,
        approvals,
        questions,
        workspaces,
        files: root.get::<dsh_persistence::SessionFiles>(),
        credentials,
        listing: Arc::default(),
        auth,
        fence: fence::Fence::new(addr.ip(), connection.trusted_hosts.clone())
            .with_public_url(app.public_url.as_deref()),
        instance: uuid::Uuid::new_v4().simple().to_string()[..12].to_string(),
        launch_cwd,
        home: dsh_policies::dsh_home(),
        shutdown: CancellationToken::new(),
        changes,
        remote,
    });
    if let Some(reminders) = root.get::<schedule::ScheduleService>() {
        tokio::spawn(schedule::drive(state.clone(), reminders));
    }
    let server = tokio::spawn(server::serve(listener, state.clone(), tls));
    Ok(RunningWeb {
        state,
        addr,
        url,
        open_browser: app.open_browser,
        print_url: app.print_url,
        warnings,
        server,
    })
}
