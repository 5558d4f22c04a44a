//! The terminal app: one live agent at a time, its screen folded from the session log, keys
//! driving the composer, menus, approvals and the session picker. The log stays the only
//! record: whatever ends the process (quit, SIGHUP, SIGTERM) cancels the turn, flushes the
//! log and leaves the terminal as it found it.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossterm::event::{
    DisableBracketedPaste, EnableBracketedPaste, Event as TermEvent, EventStream, KeyCode,
    KeyEvent, KeyEventKind, KeyModifiers,
};
use crossterm::execute;
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use dsh_agent::{AgentErrorEvent, AgentRef, AgentStatus, AgentStatusChanged, Agents};
use dsh_kernel::{BoxFuture, Context, ListenOptions};
use dsh_llm::Message;
use dsh_policies::{ApprovalAnswerer, Approvals, DefaultModel};
use dsh_session::{CancelCause, Event, SessionAppended, SessionWriteFailed};
use dsh_tools::{ApprovalOutcome, ApprovalRequest, ToolOutputEvent};
use dsh_user_questions::{
    Answer, AnswerItem, AskRequest, Question, QuestionProvider, UserQuestions, question_error,
};
use futures::StreamExt;
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::Startup;
use crate::composer::{Composer, Token};
use crate::files::WorkspaceFiles;
use crate::markdown::Theme;
use crate::transcript::{Transcript, line_of};
use crate::view::{self, LayoutCache};

/// A second Ctrl-C within this window quits.
const QUIT_WINDOW: Duration = Duration::from_secs(2);
/// How long a status message stays.
const FLASH: Duration = Duration::from_secs(4);

/// An approval the UI shows.
pub struct PendingApproval {
    pub tool_name: String,
    /// The exact command (shell calls) or the arguments.
    pub detail: String,
    pub reason: String,
    answer: Option<oneshot::Sender<ApprovalOutcome>>,
}

/// Questions the model asks, answered one after another.
pub struct PendingQuestions {
    pub questions: Vec<Question>,
    /// The question on screen.
    pub at: usize,
    /// The highlighted option (the last row is the free answer).
    pub cursor: usize,
    /// Options chosen for the question on screen (multi-select).
    pub chosen: Vec<bool>,
    /// The free answer typed for the question on screen.
    pub custom: String,
    answers: Vec<AnswerItem>,
    reply: Option<oneshot::Sender<Option<Answer>>>,
}

impl PendingQuestions {
    pub fn current(&self) -> Option<&Question> {
        self.questions.get(self.at)
    }

    pub fn option_count(&self) -> usize {
        self.current()
            .and_then(|q| q.options.as_ref())
            .map_or(0, Vec::len)
    }
}

#[derive(Clone, Debug)]
pub struct MenuItem {
    pub label: String,
    pub insert: String,
    pub detail: String,
}

pub struct Menu {
    pub title: &'static str,
    pub items: Vec<MenuItem>,
    pub selected: usize,
    start: usize,
}

/// One stored session in the picker.
#[derive(Clone, Debug)]
pub struct SessionRow {
    pub id: String,
    pub title: String,
    pub when: String,
    /// 0 for a top-level session; children (subagents, forks) sit under their parent.
    pub depth: usize,
    pub archived: bool,
    search: String,
}

pub struct Picker {
    pub query: String,
    pub all: Vec<SessionRow>,
    pub selected: usize,
    /// The archived sessions instead of the others.
    pub show_archived: bool,
}

impl Picker {
    pub fn filtered(&self) -> Vec<&SessionRow> {
        let q = self.query.to_lowercase();
        self.all
            .iter()
            .filter(|s| s.archived == self.show_archived)
            .filter(|s| q.is_empty() || s.search.contains(&q))
            .collect()
    }
}

pub enum Overlay {
    Sessions(Picker),
    Help(String),
}

/// What reaches the UI loop from the tree.
enum Incoming {
    Appended(Arc<Event>),
    Output { call_id: String, text: String },
    Status,
    Failure(String),
    Approval(PendingApproval),
    Questions(PendingQuestions),
    Files(WorkspaceFiles),
    Reply { text: String, error: bool },
}

/// Forwards tree events for the session on screen.
#[derive(Clone)]
struct Feed {
    tx: mpsc::UnboundedSender<Incoming>,
    current: Arc<Mutex<String>>,
}

impl Feed {
    fn is_current(&self, id: &str) -> bool {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) == id
    }
}

/// Approvals answered from the keyboard.
struct KeyboardApprovals {
    tx: mpsc::UnboundedSender<Incoming>,
}

/// What the user sees of a request: the command of a shell call, else the arguments.
fn approval_detail(request: &ApprovalRequest) -> String {
    let args = match &request.arguments {
        Value::String(s) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        other => other.clone(),
    };
    let mut out = match args.get("command").and_then(Value::as_str) {
        Some(c) => c.to_string(),
        None => serde_json::to_string_pretty(&args).unwrap_or_default(),
    };
    for key in ["sandbox_permissions", "justification", "cwd", "workdir"] {
        if let Some(v) = args.get(key)
            && !v.is_null()
            && args.get("command").is_some()
        {
            let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            out.push_str(&format!("\n{key}: {v}"));
        }
    }
    out
}

impl ApprovalAnswerer for KeyboardApprovals {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalOutcome> {
        let (answer, answered) = oneshot::channel();
        let pending = PendingApproval {
            tool_name: request.tool_name.clone(),
            detail: approval_detail(&request),
            reason: request.reason.clone().unwrap_or_default(),
            answer: Some(answer),
        };
        let sent = self.tx.send(Incoming::Approval(pending)).is_ok();
        let cancel = request.cancel.clone();
        Box::pin(async move {
            if !sent {
                return ApprovalOutcome::Unavailable;
            }
            tokio::select! {
                a = answered => a.unwrap_or(ApprovalOutcome::Cancelled),
                () = cancel.cancelled() => ApprovalOutcome::Cancelled,
            }
        })
    }
}

/// Questions answered from the keyboard.
struct KeyboardQuestions {
    tx: mpsc::UnboundedSender<Incoming>,
}

impl QuestionProvider for KeyboardQuestions {
    fn ask(&self, request: AskRequest) -> BoxFuture<'static, Result<Answer, dsh_kernel::BoxError>> {
        let (reply, replied) = oneshot::channel();
        let chosen = vec![
            false;
            request
                .questions
                .first()
                .and_then(|q| q.options.as_ref())
                .map_or(0, Vec::len)
        ];
        let pending = PendingQuestions {
            questions: request.questions,
            at: 0,
            cursor: 0,
            chosen,
            custom: String::new(),
            answers: Vec::new(),
            reply: Some(reply),
        };
        let sent = self.tx.send(Incoming::Questions(pending)).is_ok();
        Box::pin(async move {
            if !sent {
                return Err(question_error("NO_PROVIDER", "the terminal UI is closing"));
            }
            match replied.await {
                Ok(Some(answer)) => Ok(answer),
                Ok(None) => Err(question_error(
                    "ASK_CANCELLED",
                    "the user closed the question to reply in the conversation instead",
                )),
                Err(_) => Err(question_error(
                    "ASK_ABORTED",
                    "ask_user_question was aborted before the user answered",
                )),
            }
        })
    }
}

/// The UI state.
pub struct App {
    pub theme: Theme,
    pub transcript: Transcript,
    pub composer: Composer,
    pub menu: Option<Menu>,
    pub approvals: VecDeque<PendingApproval>,
    pub questions: VecDeque<PendingQuestions>,
    /// 0 = Reject (the safe default), 1 = Allow once.
    pub approval_focus: usize,
    pub overlay: Option<Overlay>,
    pub running: bool,
    pub turn_started: Option<Instant>,
    /// Rows scrolled up from the bottom.
    pub scroll: usize,
    pub expand_reasoning: bool,
    /// Typing during a turn steers it (else the message waits for the next turn).
    pub steer: bool,
    pub session_id: String,
    pub mode: String,
    pub queued: usize,
    pub frame: usize,
    pub layout: LayoutCache,
    flash: Option<(String, bool, Instant)>,
    quit_armed: Option<Instant>,
    /// `/quit` was sent: leave as on Ctrl-C twice.
    quit_requested: bool,
    files: WorkspaceFiles,
    default_model: String,
    /// The context window of the model on screen, when its route says.
    pub context_window: Option<u64>,
    /// The model chosen with `/model` for the session on screen (the request hook reads it).
    choice: Arc<Mutex<Option<(String, String)>>>,
    archive: Option<Arc<dyn crate::Archive>>,
}

impl App {
    /// A screen with nothing on it yet, for the session `session_id`.
    fn new(
        theme: Theme,
        session_id: &str,
        default_model: String,
        choice: Arc<Mutex<Option<(String, String)>>>,
        archive: Option<Arc<dyn crate::Archive>>,
    ) -> Self {
        Self {
            theme,
            transcript: Transcript::default(),
            composer: Composer::default(),
            menu: None,
            approvals: VecDeque::new(),
            questions: VecDeque::new(),
            approval_focus: 0,
            overlay: None,
            running: false,
            turn_started: None,
            scroll: 0,
            expand_reasoning: false,
            steer: false,
            session_id: session_id.to_string(),
            mode: String::new(),
            queued: 0,
            frame: 0,
            layout: LayoutCache::default(),
            flash: None,
            quit_armed: None,
            quit_requested: false,
            files: WorkspaceFiles::default(),
            default_model,
            context_window: None,
            choice,
            archive,
        }
    }

    pub fn flash(&self) -> Option<(String, bool)> {
        self.flash
            .as_ref()
            .filter(|(_, _, at)| at.elapsed() < FLASH)
            .map(|(t, e, _)| (t.clone(), *e))
    }

    fn say(&mut self, text: impl Into<String>, error: bool) {
        self.flash = Some((text.into(), error, Instant::now()));
    }

    pub fn model_label(&self) -> String {
        self.transcript
            .model
            .clone()
            .unwrap_or_else(|| self.default_model.clone())
    }
}

/// The session the app starts on.
fn create_agent(
    root: &Context,
    resume: Option<&str>,
    cwd: Option<PathBuf>,
) -> Result<AgentRef, String> {
    let agents = root.require::<Agents>().map_err(|e| e.to_string())?;
    let mut request = crate::session::fresh_request(root, cwd);
    if let Some(id) = resume {
        let files = root.get::<dsh_persistence::SessionFiles>().ok_or(
            "resuming needs session persistence (the session-persistence-jsonl row is disabled)",
        )?;
        let loaded = files
            .load(id)
            .map_err(|e| format!("cannot resume {id}: {e}"))?;
        crate::session::resume_into(&mut request, loaded);
    }
    agents.create(root, request).map_err(|e| e.to_string())
}

/// The newest stored top-level session started in `cwd`.
fn last_session(root: &Context, cwd: &std::path::Path) -> Option<String> {
    let files = root.get::<dsh_persistence::SessionFiles>()?;
    let mut list = files.list().ok()?;
    list.retain(|(h, _)| {
        h.parent_session.is_none() && h.cwd.as_deref().map(std::path::Path::new) == Some(cwd)
    });
    list.sort_by_key(|(h, _)| h.created_at);
    list.last().map(|(h, _)| h.id.clone())
}

/// Stored sessions, newest first, each followed by its children (subagents, forks).
fn session_rows(root: &Context, archived: &[String]) -> Vec<SessionRow> {
    let Some(files) = root.get::<dsh_persistence::SessionFiles>() else {
        return Vec::new();
    };
    let mut summaries: Vec<dsh_persistence::SessionSummary> = files
        .log_paths()
        .into_iter()
        .filter_map(|p| files.summarize_file(&p).ok())
        .filter(|s| !s.blank)
        .collect();
    summaries.sort_by_key(|s| std::cmp::Reverse(s.updated_at));
    let ids: std::collections::HashSet<String> =
        summaries.iter().map(|s| s.header.id.clone()).collect();
    let mut children: std::collections::HashMap<String, Vec<usize>> = Default::default();
    let mut roots = Vec::new();
    for (i, s) in summaries.iter().enumerate() {
        match &s.header.parent_session {
            Some(p) if ids.contains(p) => children.entry(p.clone()).or_default().push(i),
            _ => roots.push(i),
        }
    }
    let mut out = Vec::new();
    let mut stack: Vec<(usize, usize)> = roots.into_iter().rev().map(|i| (i, 0)).collect();
    while let Some((i, depth)) = stack.pop() {
        let s = &summaries[i];
        let title = if s.title.is_empty() {
            s.text
                .lines()
                .next()
                .unwrap_or("(untitled)")
                .chars()
                .take(60)
                .collect()
        } else {
            s.title.clone()
        };
        out.push(SessionRow {
            id: s.header.id.clone(),
            search: format!("{} {} {}", s.header.id, title, s.text).to_lowercase(),
            title,
            when: ago(s.updated_at),
            depth,
            archived: archived.contains(&s.header.id),
        });
        if depth < 8
            && let Some(kids) = children.get(&s.header.id)
        {
            stack.extend(kids.iter().rev().map(|k| (*k, depth + 1)));
        }
    }
    out
}

fn ago(ms: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let s = (now - ms).max(0) / 1000;
    match s {
        0..60 => "just now".into(),
        60..3600 => format!("{}m ago", s / 60),
        3600..86400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86400),
    }
}

const LOCAL_COMMANDS: &[(&str, &str)] = &[
    ("sessions", "Open the session picker (resume, fork, delete)"),
    ("new", "Start a fresh session"),
    (
        "model",
        "Switch the model for the next requests: /model [route/]model",
    ),
    (
        "steer",
        "Typing during a turn steers it (the default is to queue)",
    ),
    (
        "queue",
        "Typing during a turn queues the message for the next turn",
    ),
    (
        "retry",
        "Send your last message again (after a failed turn)",
    ),
    ("quit", "Leave (the session stays stored)"),
];

const KEYS_HELP: &str = "\
Keys
  Enter            send (or pick the highlighted menu entry)
  Alt-Enter, Ctrl-J  new line            Up/Down   history
  Esc              cancel the running turn (or close a menu)
  Ctrl-T           typing during a turn: steer it / queue for the next turn
  Ctrl-O           show or hide the model's reasoning
  PgUp/PgDn        scroll the conversation
  Ctrl-R           open the session picker
  Ctrl-C           clear the composer; twice to quit
  /                commands (Tab or Enter completes)
  @                files of the workspace

Approvals: ←/→ choose, Enter confirms, y allows once, n or Esc rejects.
The focus starts on Reject.";

/// Runs the terminal UI on a loaded tree until the user leaves or a signal ends it.
pub async fn run(
    root: &Context,
    startup: Startup,
    archive: Option<Arc<dyn crate::Archive>>,
) -> ExitCode {
    let started = Instant::now();
    let cwd = std::env::current_dir().ok();
    let resume = match (&startup.resume, startup.continue_last, &cwd) {
        (Some(id), _, _) => Some(id.clone()),
        (None, true, Some(dir)) => last_session(root, dir),
        _ => None,
    };
    let agent = match create_agent(root, resume.as_deref(), cwd.clone()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("dsh: {e}");
            return ExitCode::from(1);
        }
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<Incoming>();
    let feed = Feed {
        tx: tx.clone(),
        current: Arc::new(Mutex::new(agent.id().to_string())),
    };
    if let Err(e) = listen(root, &feed) {
        eprintln!("dsh: {e}");
        agent.dispose().await;
        return ExitCode::from(1);
    }
    // Model choice of this UI: applied to every request of the session on screen.
    let choice: Arc<Mutex<Option<(String, String)>>> = Arc::default();
    {
        let choice = choice.clone();
        let feed = feed.clone();
        let hooked =
            root.on_waterfall::<dsh_agent::Request>(ListenOptions::GLOBAL, move |p, next| {
                let chosen = if feed.is_current(&p.agent.session().id()) {
                    choice.lock().unwrap_or_else(|p| p.into_inner()).clone()
                } else {
                    None
                };
                Box::pin(async move {
                    let mut config = next.run().await?;
                    if let Some((provider, model)) = chosen
                        && (provider != config.provider || model != config.model)
                    {
                        config.reasoning_effort = None;
                        config.provider = provider;
                        config.model = model;
                    }
                    Ok(config)
                })
            });
        if let Err(e) = hooked {
            eprintln!("dsh: {e}");
        }
    }
    let _answerer = root
        .get::<Approvals>()
        .map(|a| a.register_answerer(root, Arc::new(KeyboardApprovals { tx: tx.clone() })));
    let _questions = root
        .get::<UserQuestions>()
        .map(|q| q.register_provider(root, Arc::new(KeyboardQuestions { tx: tx.clone() })));
    // The workspace's files for `@`, and the code colours, off the input path.
    if let Some(dir) = agent.cwd().or(cwd.clone()) {
        let tx = tx.clone();
        tokio::task::spawn_blocking(move || {
            let _ = tx.send(Incoming::Files(WorkspaceFiles::scan(&dir)));
        });
    }
    tokio::task::spawn_blocking(crate::markdown::warm_up);

    let default_model = root
        .get::<DefaultModel>()
        .map(|m| format!("{} / {}", m.provider, m.model))
        .unwrap_or_default();
    let mut app = App::new(
        Theme::from_env(),
        agent.id(),
        default_model,
        choice.clone(),
        archive,
    );
    app.steer = startup.steer;
    let mut agent = agent;
    load_transcript(&mut app, root, &agent);
    if resume.is_some() {
        app.say(
            format!(
                "resumed {} ({} items)",
                agent.id(),
                app.transcript.items.len()
            ),
            false,
        );
    }

    let mut terminal = match TerminalGuard::enter() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("dsh: cannot start the terminal UI: {e}");
            agent.dispose().await;
            return ExitCode::from(1);
        }
    };
    let mut stats = FrameStats {
        first_frame: Some(started.elapsed()),
        ..FrameStats::default()
    };
    draw(&mut terminal, &mut app, &mut stats);
    if let Some(first) = startup.prompt.clone() {
        submit(&mut app, root, &mut agent, &feed, &tx, first).await;
        draw(&mut terminal, &mut app, &mut stats);
    }

    let mut input = EventStream::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut hup = signal(tokio::signal::unix::SignalKind::hangup());
    let mut term = signal(tokio::signal::unix::SignalKind::terminate());
    let mut code = 0u8;
    loop {
        let mut dirty = false;
        let mut quit = false;
        tokio::select! {
            ev = input.next() => match ev {
                Some(Ok(ev)) => {
                    stats.key(&ev);
                    quit = on_terminal_event(&mut app, root, &mut agent, &feed, &tx, ev).await;
                    dirty = true;
                }
                // The terminal is gone (a closed SSH connection): leave as on SIGHUP.
                Some(Err(_)) | None => { code = 129; quit = true; }
            },
            msg = rx.recv() => {
                if let Some(m) = msg {
                    on_incoming(&mut app, &agent, m);
                    dirty = true;
                }
            }
            _ = tick.tick() => {
                if app.running || app.flash.is_some() {
                    app.frame = app.frame.wrapping_add(1);
                    dirty = true;
                }
                if app.flash.as_ref().is_some_and(|(_, _, at)| at.elapsed() >= FLASH) {
                    app.flash = None;
                }
            }
            () = recv(&mut hup) => { code = 129; quit = true; }
            () = recv(&mut term) => { code = 143; quit = true; }
        }
        // Everything already waiting is folded before the next frame.
        while let Ok(m) = rx.try_recv() {
            on_incoming(&mut app, &agent, m);
            dirty = true;
        }
        if quit || app.quit_requested {
            break;
        }
        if dirty {
            draw(&mut terminal, &mut app, &mut stats);
        }
    }
    let id = agent.id().to_string();
    if agent.status() == AgentStatus::Running {
        agent.cancel(CancelCause::User, true);
        let _ = tokio::time::timeout(Duration::from_secs(5), agent.when_idle()).await;
    }
    for mut q in app.questions.drain(..) {
        if let Some(tx) = q.reply.take() {
            let _ = tx.send(None);
        }
    }
    for mut a in app.approvals.drain(..) {
        if let Some(tx) = a.answer.take() {
            let _ = tx.send(ApprovalOutcome::Cancelled);
        }
    }
    let saved = agent.session().flush().await;
    agent.dispose().await;
    let written = match root.get::<dsh_persistence::SessionWriters>() {
        Some(w) => w.flush_all().await,
        None => Ok(()),
    };
    drop(terminal);
    stats.write();
    if code == 0 {
        let mut out = std::io::stdout();
        let _ = writeln!(
            out,
            "dsh: session {id} saved; go on with: dsh tui --session-id {id}"
        );
    }
    if let Err(e) = saved {
        eprintln!("dsh: the session could not be saved completely: {e}");
        return ExitCode::from(1);
    }
    if let Err(e) = written {
        eprintln!("dsh: the session could not be saved completely: {e}");
        return ExitCode::from(1);
    }
    ExitCode::from(code)
}

type Signal = Option<tokio::signal::unix::Signal>;

fn signal(kind: tokio::signal::unix::SignalKind) -> Signal {
    tokio::signal::unix::signal(kind).ok()
}

async fn recv(s: &mut Signal) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

fn listen(root: &Context, feed: &Feed) -> Result<(), dsh_kernel::BoxError> {
    let f = feed.clone();
    root.on_emit::<SessionAppended>(ListenOptions::GLOBAL, move |p| {
        if f.is_current(&p.session.id()) {
            let _ = f.tx.send(Incoming::Appended(p.event.clone()));
        }
        Ok(())
    })?;
    let f = feed.clone();
    root.on_emit::<ToolOutputEvent>(ListenOptions::GLOBAL, move |p| {
        if f.is_current(&p.session_id) {
            let _ = f.tx.send(Incoming::Output {
                call_id: p.call_id.clone(),
                text: p.text.clone(),
            });
        }
        Ok(())
    })?;
    let f = feed.clone();
    root.on_emit::<AgentStatusChanged>(ListenOptions::GLOBAL, move |p| {
        if f.is_current(p.agent.id()) {
            let _ = f.tx.send(Incoming::Status);
        }
        Ok(())
    })?;
    let f = feed.clone();
    root.on_emit::<AgentErrorEvent>(ListenOptions::GLOBAL, move |p| {
        if f.is_current(p.agent.id()) {
            let _ = f.tx.send(Incoming::Failure(p.message.clone()));
        }
        Ok(())
    })?;
    let f = feed.clone();
    root.on_emit::<SessionWriteFailed>(ListenOptions::GLOBAL, move |p| {
        if f.is_current(&p.session.id()) {
            let _ = f.tx.send(Incoming::Failure(format!(
                "the session log could not be written: {}",
                p.message
            )));
        }
        Ok(())
    })?;
    Ok(())
}

/// Folds the whole stored conversation of `agent` (a resumed session shows everything).
fn load_transcript(app: &mut App, root: &Context, agent: &AgentRef) {
    app.transcript = Transcript::default();
    app.layout = LayoutCache::default();
    app.scroll = 0;
    for e in agent.session().events().iter() {
        app.transcript.fold(e);
    }
    refresh(app, root, agent);
    number_hunks(app, agent);
}

/// Running or idle, and what waits in the inbox.
fn follow_status(app: &mut App, agent: &AgentRef) {
    let running = agent.status() == AgentStatus::Running;
    if running && !app.running {
        app.turn_started = Some(Instant::now());
    }
    app.running = running;
    let inbox = agent.inbox();
    app.queued = inbox.next_turn.len() + inbox.next_step.len();
}

fn refresh(app: &mut App, root: &Context, agent: &AgentRef) {
    follow_status(app, agent);
    app.session_id = agent.id().to_string();
    if let Some(p) = root.get::<dsh_policies::presets::PermissionPresets>() {
        app.mode = p.current(agent.session());
    }
    update_window(app, root, agent);
}

/// The context window of the model the next request goes to.
fn update_window(app: &mut App, root: &Context, agent: &AgentRef) {
    let Some(llm) = root.get::<dsh_llm::LlmRuntime>() else {
        return;
    };
    let chosen = app.choice.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let (provider, model) = chosen.unwrap_or_else(|| {
        let options = agent.options();
        agent.current_route((
            options.provider.as_deref().unwrap_or_default(),
            options.model.as_deref().unwrap_or_default(),
        ))
    });
    app.context_window = llm
        .model_info(&provider, &model)
        .ok()
        .and_then(|m| m.context_window);
}

/// Finds where each new hunk starts in its file, for line numbers.
fn number_hunks(app: &mut App, agent: &AgentRef) {
    let base = agent.cwd().unwrap_or_default();
    for (at, hunk, path, new) in app.transcript.hunks_without_lines() {
        let file = std::fs::read_to_string(base.join(&path)).unwrap_or_default();
        app.transcript.set_hunk_line(at, hunk, line_of(&file, &new));
    }
}

fn on_incoming(app: &mut App, agent: &AgentRef, m: Incoming) {
    match m {
        Incoming::Appended(e) => {
            let result = e.is(dsh_session::types::TOOL_RESULT);
            app.transcript.fold(&e);
            if result {
                number_hunks(app, agent);
            }
            if e.is(dsh_session::types::TURN_START) || e.is(dsh_session::types::TURN_END) {
                let inbox = agent.inbox();
                app.queued = inbox.next_turn.len() + inbox.next_step.len();
            }
            if e.event_type == "permission/preset" || e.event_type == "sandbox/mode" {
                app.mode = e
                    .data
                    .get("preset")
                    .and_then(Value::as_str)
                    .map_or_else(|| app.mode.clone(), str::to_owned);
            }
        }
        Incoming::Output { call_id, text } => app.transcript.tool_output(&call_id, &text),
        Incoming::Status => follow_status(app, agent),
        Incoming::Failure(message) => {
            app.transcript.notice(true, message.clone());
            app.say(message, true);
        }
        Incoming::Approval(a) => {
            if app.approvals.is_empty() {
                app.approval_focus = 0;
            }
            app.approvals.push_back(a);
        }
        Incoming::Questions(q) => app.questions.push_back(q),
        Incoming::Files(f) => app.files = f,
        Incoming::Reply { text, error } => app.transcript.notice(error, text),
    }
}

fn draw(terminal: &mut TerminalGuard, app: &mut App, stats: &mut FrameStats) {
    let t = Instant::now();
    // Terminals that know synchronized output show the frame at once; others ignore it.
    let _ = crossterm::queue!(
        terminal.terminal.backend_mut(),
        crossterm::terminal::BeginSynchronizedUpdate
    );
    let _ = terminal.terminal.draw(|f| view::draw(f, app));
    let _ = crossterm::execute!(
        terminal.terminal.backend_mut(),
        crossterm::terminal::EndSynchronizedUpdate
    );
    stats.frame(t.elapsed());
}

/// Keys, pastes and resizes. Returns true to quit.
async fn on_terminal_event(
    app: &mut App,
    root: &Context,
    agent: &mut AgentRef,
    feed: &Feed,
    tx: &mpsc::UnboundedSender<Incoming>,
    ev: TermEvent,
) -> bool {
    match ev {
        TermEvent::Paste(text) => {
            if let Some(Overlay::Sessions(p)) = &mut app.overlay {
                p.query.push_str(text.lines().next().unwrap_or(""));
            } else {
                app.composer.insert(&text);
                update_menu(app, root, agent);
            }
            false
        }
        TermEvent::Key(key) if key.kind != KeyEventKind::Release => {
            on_key(app, root, agent, feed, tx, key).await
        }
        _ => false,
    }
}

fn ctrl(key: &KeyEvent, c: char) -> bool {
    key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char(c)
}

async fn on_key(
    app: &mut App,
    root: &Context,
    agent: &mut AgentRef,
    feed: &Feed,
    tx: &mpsc::UnboundedSender<Incoming>,
    key: KeyEvent,
) -> bool {
    // Ctrl-C: clear, cancel, or (twice) quit.
    if ctrl(&key, 'c') {
        if app.quit_armed.is_some_and(|t| t.elapsed() < QUIT_WINDOW) {
            return true;
        }
        app.quit_armed = Some(Instant::now());
        if !app.composer.is_empty() {
            app.composer.clear();
            app.menu = None;
        } else if app.running {
            agent.cancel(CancelCause::User, true);
        }
        app.say("press Ctrl-C again to quit", false);
        return false;
    }
    if ctrl(&key, 'd') && app.composer.is_empty() && app.overlay.is_none() {
        return true;
    }
    if app.overlay.is_some() {
        on_overlay_key(app, root, agent, feed, key).await;
        return false;
    }
    if !app.approvals.is_empty() {
        on_approval_key(app, key);
        return false;
    }
    if !app.questions.is_empty() {
        on_question_key(app, key);
        return false;
    }
    if app.menu.is_some() && on_menu_key(app, root, agent, key) {
        return false;
    }
    let alt = key.modifiers.contains(KeyModifiers::ALT);
    let shift = key.modifiers.contains(KeyModifiers::SHIFT);
    match key.code {
        KeyCode::Enter if alt || shift => app.composer.insert("\n"),
        KeyCode::Char('j') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            app.composer.insert("\n")
        }
        KeyCode::Enter => {
            let text = app.composer.take();
            app.menu = None;
            if !text.trim().is_empty() {
                app.scroll = 0;
                submit(app, root, agent, feed, tx, text).await;
            }
        }
        KeyCode::Esc if app.running => {
            agent.cancel(CancelCause::User, true);
            app.say("cancelling the turn…", false);
        }
        KeyCode::Char('t') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            app.steer = !app.steer;
            let how = if app.steer {
                "messages typed during a turn steer it"
            } else {
                "messages typed during a turn wait for the next turn"
            };
            app.say(how, false);
        }
        KeyCode::Char('o') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            app.expand_reasoning = !app.expand_reasoning;
        }
        KeyCode::Char('r') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            open_picker(app, root);
        }
        KeyCode::Char('w') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            app.composer.delete_word()
        }
        KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            app.composer.delete_to_line_start()
        }
        KeyCode::Char('a') if key.modifiers.contains(KeyModifiers::CONTROL) => app.composer.home(),
        KeyCode::Char('e') if key.modifiers.contains(KeyModifiers::CONTROL) => app.composer.end(),
        KeyCode::Char('l') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            app.layout = LayoutCache::default();
        }
        KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => {
            let mut b = [0u8; 4];
            app.composer.insert(c.encode_utf8(&mut b));
        }
        KeyCode::Backspace => app.composer.backspace(),
        KeyCode::Delete => app.composer.delete(),
        KeyCode::Left => app.composer.left(),
        KeyCode::Right => app.composer.right(),
        KeyCode::Home => app.composer.home(),
        KeyCode::End => app.composer.end(),
        KeyCode::Up => app.composer.up(),
        KeyCode::Down => app.composer.down(),
        KeyCode::PageUp => app.scroll += 10,
        KeyCode::PageDown => app.scroll = app.scroll.saturating_sub(10),
        _ => {}
    }
    update_menu(app, root, agent);
    false
}

fn on_approval_key(app: &mut App, key: KeyEvent) {
    let decision = match key.code {
        KeyCode::Left | KeyCode::Right | KeyCode::Tab | KeyCode::BackTab => {
            app.approval_focus = 1 - app.approval_focus.min(1);
            None
        }
        KeyCode::Enter => Some(if app.approval_focus == 1 {
            ApprovalOutcome::AllowedOnce
        } else {
            ApprovalOutcome::Rejected
        }),
        KeyCode::Char('y') => Some(ApprovalOutcome::AllowedOnce),
        KeyCode::Char('n') | KeyCode::Esc => Some(ApprovalOutcome::Rejected),
        _ => None,
    };
    if let Some(outcome) = decision
        && let Some(mut a) = app.approvals.pop_front()
    {
        if let Some(tx) = a.answer.take() {
            let _ = tx.send(outcome);
        }
        app.approval_focus = 0;
        let word = if outcome == ApprovalOutcome::AllowedOnce {
            "allowed"
        } else {
            "rejected"
        };
        app.say(format!("{word}: {}", a.tool_name), false);
    }
}

/// Keys of the question panel: ↑/↓ move, Space chooses (several when allowed), Enter
/// confirms the question, typing writes a free answer, Esc closes the questions.
fn on_question_key(app: &mut App, key: KeyEvent) {
    let Some(q) = app.questions.front_mut() else {
        return;
    };
    let options = q.option_count();
    let multi = q.current().and_then(|c| c.multi_select).unwrap_or(false);
    match key.code {
        KeyCode::Up => q.cursor = q.cursor.saturating_sub(1),
        KeyCode::Down => q.cursor = (q.cursor + 1).min(options),
        KeyCode::Char(' ') if q.cursor < options => {
            if !multi {
                q.chosen.iter_mut().for_each(|c| *c = false);
            }
            if let Some(c) = q.chosen.get_mut(q.cursor) {
                *c = !*c;
            }
        }
        KeyCode::Esc => {
            if let Some(mut q) = app.questions.pop_front()
                && let Some(tx) = q.reply.take()
            {
                let _ = tx.send(None);
            }
            app.say("question closed; answer in the conversation", false);
        }
        KeyCode::Backspace => {
            q.custom.pop();
        }
        KeyCode::Enter => {
            let Some(current) = q.current().cloned() else {
                return;
            };
            let labels: Vec<String> = current
                .options
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|o| o.label)
                .collect();
            let mut selected: Vec<String> = labels
                .iter()
                .zip(&q.chosen)
                .filter(|(_, c)| **c)
                .map(|(l, _)| l.clone())
                .collect();
            // Enter on an option with nothing chosen picks it.
            if selected.is_empty() && q.cursor < labels.len() {
                selected.push(labels[q.cursor].clone());
            }
            let custom = (!q.custom.trim().is_empty()).then(|| q.custom.trim().to_string());
            if selected.is_empty() && custom.is_none() {
                app.say("choose an option or type an answer", true);
                return;
            }
            q.answers.push(AnswerItem {
                id: current.id.clone(),
                selected,
                custom,
            });
            q.at += 1;
            q.cursor = 0;
            q.custom.clear();
            q.chosen = vec![false; q.option_count()];
            if q.at >= q.questions.len()
                && let Some(mut done) = app.questions.pop_front()
            {
                let answer = Answer {
                    answers: std::mem::take(&mut done.answers),
                };
                if let Some(tx) = done.reply.take() {
                    let _ = tx.send(Some(answer));
                }
            }
        }
        KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => {
            q.cursor = options;
            q.custom.push(c);
        }
        _ => {}
    }
}

/// Menu keys; true when the key was the menu's.
fn on_menu_key(app: &mut App, root: &Context, agent: &AgentRef, key: KeyEvent) -> bool {
    let Some(menu) = &mut app.menu else {
        return false;
    };
    match key.code {
        KeyCode::Up => {
            menu.selected = menu
                .selected
                .checked_sub(1)
                .unwrap_or(menu.items.len().saturating_sub(1));
            true
        }
        KeyCode::Down => {
            menu.selected = if menu.selected + 1 >= menu.items.len() {
                0
            } else {
                menu.selected + 1
            };
            true
        }
        KeyCode::Esc => {
            app.menu = None;
            true
        }
        KeyCode::Tab | KeyCode::Enter => {
            let Some(item) = menu.items.get(menu.selected).cloned() else {
                app.menu = None;
                return false;
            };
            let start = menu.start;
            // Enter on a complete command runs it; otherwise it completes.
            let before = &app.composer.text()[start..app.composer.cursor()];
            if key.code == KeyCode::Enter && before.trim_end() == item.insert.trim_end() {
                app.menu = None;
                return false;
            }
            app.composer.complete(start, &item.insert);
            app.menu = None;
            update_menu(app, root, agent);
            if app
                .menu
                .as_ref()
                .is_some_and(|m| m.items.len() == 1 && m.items[0].insert == item.insert)
            {
                app.menu = None;
            }
            true
        }
        _ => false,
    }
}

/// The user-invocable skills the session on screen sees, as `/name` entries.
fn skill_items(agent: &AgentRef) -> Vec<MenuItem> {
    let Some(skills) = agent.ctx().get::<dsh_skills::SkillRegistry>() else {
        return Vec::new();
    };
    let lookup = dsh_skills::Lookup { cwd: agent.cwd() };
    skills
        .list(agent.ctx(), &lookup)
        .into_iter()
        .filter(|s| s.invocation.user_invocable)
        .map(|s| MenuItem {
            label: format!("/{}", s.name),
            insert: format!("/{} ", s.name),
            detail: format!("skill: {}", s.description),
        })
        .collect()
}

fn command_items(root: &Context) -> Vec<MenuItem> {
    let mut items: Vec<MenuItem> = root
        .get::<dsh_commands::CommandRegistry>()
        .map(|r| r.list())
        .unwrap_or_default()
        .into_iter()
        .map(|c| MenuItem {
            label: format!(
                "/{}{}",
                c.name,
                c.hint
                    .as_deref()
                    .map(|h| format!(" {h}"))
                    .unwrap_or_default()
            ),
            insert: format!("/{} ", c.name),
            detail: c.description,
        })
        .collect();
    for (name, detail) in LOCAL_COMMANDS {
        if !items.iter().any(|i| i.insert == format!("/{name} ")) {
            items.push(MenuItem {
                label: format!("/{name}"),
                insert: format!("/{name} "),
                detail: (*detail).to_string(),
            });
        }
    }
    if !items.iter().any(|i| i.insert == "/help ") {
        items.push(MenuItem {
            label: "/help".into(),
            insert: "/help ".into(),
            detail: "Keys and the commands this session offers".into(),
        });
    }
    items.sort_by(|a, b| a.label.cmp(&b.label));
    items
}

fn update_menu(app: &mut App, root: &Context, agent: &AgentRef) {
    let selected = app.menu.as_ref().map_or(0, |m| m.selected);
    app.menu = match app.composer.token() {
        Some(Token::Slash { start, word }) if !app.composer.text().contains(' ') => {
            let mut all = command_items(root);
            for skill in skill_items(agent) {
                if !all.iter().any(|i| i.insert == skill.insert) {
                    all.push(skill);
                }
            }
            all.sort_by(|a, b| a.label.cmp(&b.label));
            let items: Vec<MenuItem> = all
                .into_iter()
                .filter(|i| i.insert[1..].starts_with(&word))
                .collect();
            Some(Menu {
                title: " commands ",
                selected: selected.min(items.len().saturating_sub(1)),
                items,
                start,
            })
        }
        Some(Token::Mention { start, word }) => {
            let items = app
                .files
                .matches(&word, 50)
                .into_iter()
                .map(|path| MenuItem {
                    label: format!("@{path}"),
                    insert: format!("@{path} "),
                    detail: String::new(),
                })
                .collect::<Vec<_>>();
            Some(Menu {
                title: " files ",
                selected: selected.min(items.len().saturating_sub(1)),
                items,
                start,
            })
        }
        _ => None,
    };
    if app.menu.as_ref().is_some_and(|m| m.items.is_empty()) {
        app.menu = None;
    }
}

fn open_picker(app: &mut App, root: &Context) {
    app.menu = None;
    let archived = app
        .archive
        .as_ref()
        .and_then(|a| a.archived().ok())
        .unwrap_or_default();
    app.overlay = Some(Overlay::Sessions(Picker {
        query: String::new(),
        all: session_rows(root, &archived),
        selected: 0,
        show_archived: false,
    }));
}

async fn on_overlay_key(
    app: &mut App,
    root: &Context,
    agent: &mut AgentRef,
    feed: &Feed,
    key: KeyEvent,
) {
    let Some(overlay) = &mut app.overlay else {
        return;
    };
    let picker = match overlay {
        Overlay::Help(_) => {
            if matches!(key.code, KeyCode::Esc | KeyCode::Enter | KeyCode::Char('q')) {
                app.overlay = None;
            }
            return;
        }
        Overlay::Sessions(p) => p,
    };
    let count = picker.filtered().len();
    match key.code {
        KeyCode::Esc => app.overlay = None,
        KeyCode::Up => picker.selected = picker.selected.saturating_sub(1),
        KeyCode::Down => picker.selected = (picker.selected + 1).min(count.saturating_sub(1)),
        KeyCode::Backspace => {
            picker.query.pop();
            picker.selected = 0;
        }
        KeyCode::Char('f') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            let Some(id) = picker.filtered().get(picker.selected).map(|s| s.id.clone()) else {
                return;
            };
            match fork(root, &id) {
                Ok(child) => {
                    app.overlay = None;
                    switch(app, root, agent, feed, Some(&child)).await;
                    app.say(format!("forked {id} into {child}"), false);
                }
                Err(e) => app.say(e, true),
            }
        }
        KeyCode::Tab => {
            picker.show_archived = !picker.show_archived;
            picker.selected = 0;
        }
        KeyCode::Char('a') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            let Some(id) = picker.filtered().get(picker.selected).map(|s| s.id.clone()) else {
                return;
            };
            let Some(archive) = app.archive.clone() else {
                app.say("archiving needs the session archive of dsh web", true);
                return;
            };
            let to = !picker.show_archived;
            match archive.set_archived(&id, to) {
                Ok(()) => {
                    for s in picker.all.iter_mut().filter(|s| s.id == id) {
                        s.archived = to;
                    }
                    picker.selected = picker
                        .selected
                        .min(picker.filtered().len().saturating_sub(1));
                    app.say(
                        format!("{} {id}", if to { "archived" } else { "restored" }),
                        false,
                    );
                }
                Err(e) => app.say(format!("cannot archive {id}: {e}"), true),
            }
        }
        KeyCode::Char('d') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            let Some(id) = picker.filtered().get(picker.selected).map(|s| s.id.clone()) else {
                return;
            };
            if id == agent.id() {
                app.say(
                    "this session is open here; switch to another one first",
                    true,
                );
                return;
            }
            let deleted = root
                .get::<dsh_persistence::SessionFiles>()
                .ok_or_else(|| "no session storage".to_string())
                .and_then(|f| f.delete(&id).map_err(|e| e.to_string()));
            match deleted {
                Ok(_) => {
                    picker.all.retain(|s| s.id != id);
                    picker.selected = picker
                        .selected
                        .min(picker.filtered().len().saturating_sub(1));
                    app.say(format!("deleted {id}"), false);
                }
                Err(e) => app.say(e, true),
            }
        }
        KeyCode::Enter => {
            let Some(id) = picker.filtered().get(picker.selected).map(|s| s.id.clone()) else {
                return;
            };
            app.overlay = None;
            if id != agent.id() {
                switch(app, root, agent, feed, Some(&id)).await;
            }
        }
        KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => {
            picker.query.push(c);
            picker.selected = 0;
        }
        _ => {}
    }
}

/// Forks stored session `id` after its last completed turn; the new session's id.
fn fork(root: &Context, id: &str) -> Result<String, String> {
    let files = root
        .get::<dsh_persistence::SessionFiles>()
        .ok_or("no session storage")?;
    let loaded = files.inspect(id).map_err(|e| e.to_string())?;
    let cut = dsh_persistence::fork_cut(&loaded.events, None)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let mut header =
        dsh_session::SessionHeader::new(format!("session-{}", uuid::Uuid::new_v4()), now);
    header.cwd = loaded.header.cwd.clone();
    header.parent_session = Some(loaded.header.id.clone());
    header.seed_length = Some(cut as u64);
    header.agent_preset = loaded.header.agent_preset.clone();
    let child =
        dsh_session::Session::with_seed(header.clone(), loaded.events[..cut].to_vec(), now as i64)
            .map_err(|e| e.to_string())?;
    files
        .create(&header, child.events())
        .map_err(|e| e.to_string())?;
    Ok(header.id)
}

/// Puts another session on screen (`None`: a fresh one); the one left is saved and closed.
async fn switch(
    app: &mut App,
    root: &Context,
    agent: &mut AgentRef,
    feed: &Feed,
    to: Option<&str>,
) {
    if agent.status() == AgentStatus::Running {
        app.say("a turn is running; cancel it (Esc) before switching", true);
        return;
    }
    let cwd = agent.cwd().or_else(|| std::env::current_dir().ok());
    let old = agent.clone();
    let _ = old.session().flush().await;
    old.dispose().await;
    match create_agent(root, to, cwd.clone()) {
        Ok(next) => {
            *feed.current.lock().unwrap_or_else(|p| p.into_inner()) = next.id().to_string();
            *agent = next;
            *app.choice.lock().unwrap_or_else(|p| p.into_inner()) = None;
            load_transcript(app, root, agent);
        }
        Err(e) => {
            app.say(e, true);
            // Back to a fresh session rather than none.
            if let Ok(next) = create_agent(root, None, cwd) {
                *feed.current.lock().unwrap_or_else(|p| p.into_inner()) = next.id().to_string();
                *agent = next;
                load_transcript(app, root, agent);
            }
        }
    }
}

/// Sends what the user typed: a local command, a session command, or a message (steering
/// or queued while a turn runs).
async fn submit(
    app: &mut App,
    root: &Context,
    agent: &mut AgentRef,
    feed: &Feed,
    tx: &mpsc::UnboundedSender<Incoming>,
    text: String,
) {
    let trimmed = text.trim();
    if let Some((name, rest)) = dsh_commands::parse_command(trimmed) {
        let rest = rest.trim();
        match name {
            "quit" | "exit" => {
                app.quit_requested = true;
                return;
            }
            "sessions" | "resume" => {
                open_picker(app, root);
                return;
            }
            "new" | "clear" => {
                switch(app, root, agent, feed, None).await;
                app.say("new session", false);
                return;
            }
            "steer" | "queue" => {
                app.steer = name == "steer";
                app.say(
                    format!(
                        "typing during a turn now {}s",
                        if app.steer { "steer" } else { "queue" }
                    ),
                    false,
                );
                return;
            }
            "model" => {
                model_command(app, root, rest);
                return;
            }
            "retry" => {
                let last = app
                    .transcript
                    .items
                    .iter()
                    .rev()
                    .find_map(|(_, i)| match i {
                        crate::transcript::Item::User(t) => Some(t.clone()),
                        _ => None,
                    });
                match last {
                    Some(text) => {
                        if let Err(e) = send_message(agent, text, false) {
                            app.say(e, true);
                        }
                        refresh(app, root, agent);
                    }
                    None => app.say("there is no earlier message to send again", true),
                }
                return;
            }
            "help"
                if root
                    .get::<dsh_commands::CommandRegistry>()
                    .is_none_or(|r| r.list().iter().all(|c| c.name != "help")) =>
            {
                let mut text = String::from(KEYS_HELP);
                text.push_str("\n\nCommands\n");
                for item in command_items(root) {
                    text.push_str(&format!("  {:<16} {}\n", item.label, item.detail));
                }
                app.overlay = Some(Overlay::Help(text));
                return;
            }
            _ => {}
        }
        if let Some(commands) = root.get::<dsh_commands::CommandRegistry>() {
            let agent = agent.clone();
            let tx = tx.clone();
            let line = trimmed.to_string();
            tokio::spawn(async move {
                let outcome = commands
                    .dispatch_line(&agent, &line, tokio_util::sync::CancellationToken::new())
                    .await;
                // Executed commands are logged (their reply comes with `command/done`).
                let (text, error) = match &outcome {
                    dsh_commands::LineOutcome::NotACommand => {
                        if let Err(e) = send_message(&agent, line, false) {
                            let _ = tx.send(Incoming::Reply {
                                text: e,
                                error: true,
                            });
                        }
                        return;
                    }
                    dsh_commands::LineOutcome::Executed { .. } => return,
                    dsh_commands::LineOutcome::Unknown { .. } => (outcome.reply(), true),
                    dsh_commands::LineOutcome::Help { .. } => (outcome.reply(), false),
                };
                let _ = tx.send(Incoming::Reply { text, error });
            });
            return;
        }
    }
    let running = agent.status() == AgentStatus::Running;
    let base = agent
        .cwd()
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_default();
    let images = image_mentions(&text, &base);
    let mut message = Message::user_text(text.clone());
    if !images.is_empty() {
        let chosen = app.choice.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let (provider, model) = chosen.unwrap_or_else(|| {
            let o = agent.options();
            agent.current_route((
                o.provider.as_deref().unwrap_or_default(),
                o.model.as_deref().unwrap_or_default(),
            ))
        });
        let root2 = root.clone();
        let stored =
            tokio::task::spawn_blocking(move || attach_images(&root2, &provider, &model, &images))
                .await
                .unwrap_or_else(|_| Err("the images could not be read".into()));
        match stored {
            Ok(blocks) => message.content.extend(blocks),
            Err(e) => {
                // Nothing is sent: the text comes back to the composer to edit.
                app.composer.set(text);
                app.say(e, true);
                return;
            }
        }
    }
    match send(agent, message, running && app.steer) {
        Ok(()) => {
            if running && !app.steer {
                app.say("queued for the next turn", false);
            }
        }
        Err(e) => app.say(e, true),
    }
    refresh(app, root, agent);
}

/// Most bytes read from one mentioned image.
const MAX_IMAGE_FILE: u64 = 32 << 20;

/// `@path` mentions of image files that exist under `base`.
fn image_mentions(text: &str, base: &std::path::Path) -> Vec<PathBuf> {
    text.split_whitespace()
        .filter_map(|w| w.strip_prefix('@'))
        .filter(|p| dsh_attachments::media_type_for_path(p).is_some())
        .map(|p| base.join(p))
        .filter(|p| p.is_file())
        .collect()
}

/// Stores the mentioned images for the route (refused when the model takes no images);
/// the content blocks that reference them.
fn attach_images(
    root: &Context,
    provider: &str,
    model: &str,
    paths: &[PathBuf],
) -> Result<Vec<dsh_llm::ContentBlock>, String> {
    let mut images = Vec::new();
    for path in paths {
        let shown = path.display();
        let size = std::fs::metadata(path)
            .map_err(|e| format!("cannot read {shown}: {e}"))?
            .len();
        if size > MAX_IMAGE_FILE {
            return Err(format!(
                "{shown} is larger than {} MiB",
                MAX_IMAGE_FILE >> 20
            ));
        }
        let data = std::fs::read(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
        let media_type = dsh_attachments::sniff(&data)
            .ok_or_else(|| format!("{shown} is not a PNG, JPEG, WebP or GIF image"))?;
        images.push(dsh_attachments::SaveImage {
            data,
            media_type: media_type.to_string(),
            name: path.file_name().map(|n| n.to_string_lossy().into_owned()),
        });
    }
    let refs = dsh_attachments::admit_prompt_images(root, provider, model, &images)
        .map_err(|e| format!("the image was not sent: {}", e.message()))?;
    Ok(refs
        .into_iter()
        .map(|r| dsh_llm::ContentBlock::image(r.to_store_value()))
        .collect())
}

fn send_message(agent: &AgentRef, text: String, steer: bool) -> Result<(), String> {
    send(agent, Message::user_text(text), steer)
}

fn send(agent: &AgentRef, message: Message, steer: bool) -> Result<(), String> {
    let sent = if steer {
        agent.steer(message)
    } else {
        agent.followup(message)
    };
    sent.map_err(|e| format!("the message was not sent: {e}"))
}

/// `/model`: lists the configured models, or routes the next requests to one.
fn model_command(app: &mut App, root: &Context, arg: &str) {
    let Some(llm) = root.get::<dsh_llm::LlmRuntime>() else {
        app.say("this profile has no model runtime", true);
        return;
    };
    let mut all: Vec<(String, String)> = Vec::new();
    for route in llm.routes() {
        for m in llm.models(&route) {
            all.push((route.clone(), m.id));
        }
    }
    if arg.is_empty() {
        let mut text =
            String::from("Models (choose with /model <route>/<model> or /model <model>)\n\n");
        for (route, model) in &all {
            text.push_str(&format!("  {route}/{model}\n"));
        }
        text.push_str(&format!("\nNow: {}", app.model_label()));
        app.overlay = Some(Overlay::Help(text));
        return;
    }
    let found = match arg.split_once('/') {
        Some((route, model)) if all.iter().any(|(r, _)| r == route) => {
            Some((route.to_string(), model.to_string()))
        }
        _ => all.iter().find(|(_, m)| m == arg).cloned(),
    };
    match found {
        Some((route, model)) => {
            app.transcript.model = Some(format!("{route} / {model}"));
            *app.choice.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((route.clone(), model.clone()));
            app.context_window = llm
                .model_info(&route, &model)
                .ok()
                .and_then(|m| m.context_window);
            app.say(format!("the next requests go to {route} / {model}"), false);
        }
        None => app.say(
            format!("no configured model is called \"{arg}\" (/model lists them)"),
            true,
        ),
    }
}

/// Raw mode and the alternate screen for the app's lifetime; restored on drop (panics
/// included), so the shell gets its terminal back however the app ends.
struct TerminalGuard {
    terminal: Terminal<CrosstermBackend<std::io::BufWriter<std::io::Stdout>>>,
}

impl TerminalGuard {
    fn enter() -> std::io::Result<Self> {
        enable_raw_mode()?;
        let mut out = std::io::stdout();
        if let Err(e) = execute!(out, EnterAlternateScreen, EnableBracketedPaste) {
            let _ = disable_raw_mode();
            return Err(e);
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        // One write per frame: the whole frame is buffered and flushed once.
        let out = std::io::BufWriter::with_capacity(1 << 16, out);
        let terminal = Terminal::new(CrosstermBackend::new(out))?;
        Ok(Self { terminal })
    }
}

fn restore() {
    let _ = execute!(
        std::io::stdout(),
        DisableBracketedPaste,
        LeaveAlternateScreen
    );
    let _ = disable_raw_mode();
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = self.terminal.show_cursor();
        restore();
    }
}

/// Frame times and input, written to `$DSH_TUI_STATS` at exit (for the benchmark).
#[derive(Default)]
struct FrameStats {
    first_frame: Option<Duration>,
    frames: Vec<Duration>,
    keys: usize,
}

impl FrameStats {
    fn frame(&mut self, d: Duration) {
        if std::env::var_os("DSH_TUI_STATS").is_some() && self.frames.len() < 1_000_000 {
            self.frames.push(d);
        }
    }

    fn key(&mut self, ev: &TermEvent) {
        if matches!(ev, TermEvent::Key(_) | TermEvent::Paste(_)) {
            self.keys += 1;
        }
    }

    fn write(&mut self) {
        let Some(path) = std::env::var_os("DSH_TUI_STATS") else {
            return;
        };
        self.frames.sort();
        let pick = |q: f64| {
            self.frames
                .get(((self.frames.len() as f64 - 1.0) * q).round() as usize)
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
        };
        let doc = serde_json::json!({
            "firstFrameMs": self.first_frame.map_or(0.0, |d| d.as_secs_f64() * 1000.0),
            "frames": self.frames.len(),
            "frameP50Ms": pick(0.5),
            "frameP99Ms": pick(0.99),
            "frameMaxMs": pick(1.0),
            "keys": self.keys,
        });
        let _ = std::fs::write(path, doc.to_string());
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An app with a conversation, a plan, an approval, a question and an open menu.
    pub(crate) fn busy_app() -> App {
        let (answer, _) = oneshot::channel();
        let (reply, _) = oneshot::channel();
        let mut transcript = Transcript::default();
        transcript.notice(
            false,
            "a notice with quite a long text that has to wrap somewhere",
        );
        transcript.todos = vec![crate::transcript::Todo {
            status: "in_progress".into(),
            content: "do it".into(),
        }];
        let mut composer = Composer::default();
        composer.insert("/he");
        let mut app = App::new(
            Theme { color: true },
            "session-x",
            "p / m".into(),
            Arc::default(),
            None,
        );
        app.transcript = transcript;
        app.composer = composer;
        app.menu = Some(Menu {
            title: " commands ",
            items: vec![MenuItem {
                label: "/help".into(),
                insert: "/help ".into(),
                detail: "help".into(),
            }],
            selected: 0,
            start: 0,
        });
        app.approvals = VecDeque::from([PendingApproval {
            tool_name: "bash".into(),
            detail: "rm -rf build\nsandbox_permissions: danger-full-access".into(),
            reason: "clean".into(),
            answer: Some(answer),
        }]);
        app.questions = VecDeque::from([PendingQuestions {
            questions: vec![Question {
                id: "q".into(),
                question: "Which?".into(),
                detail: None,
                header: None,
                options: None,
                multi_select: None,
            }],
            at: 0,
            cursor: 0,
            chosen: Vec::new(),
            custom: String::new(),
            answers: Vec::new(),
            reply: Some(reply),
        }]);
        app.running = true;
        app.turn_started = Some(Instant::now());
        app.scroll = 3;
        app.mode = "workspace-write".into();
        app.queued = 1;
        app.context_window = Some(1000);
        app
    }

    pub(crate) fn open_help(app: &mut App) {
        app.overlay = Some(Overlay::Help(KEYS_HELP.into()));
    }
}
