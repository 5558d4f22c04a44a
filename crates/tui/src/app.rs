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

mod answerers;
mod keys;
mod sessions;
mod submit;
mod terminal;

use answerers::*;
use keys::*;
use sessions::*;
use submit::*;
use terminal::*;

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
    let choice = follow_model_choice(root, &feed);
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
    leave(root, agent, app, terminal, stats, code).await
}

/// The model chosen in this UI (provider, model), applied to every request of the session
/// on screen.
fn follow_model_choice(root: &Context, feed: &Feed) -> Arc<Mutex<Option<(String, String)>>> {
    let choice: Arc<Mutex<Option<(String, String)>>> = Arc::default();
    let chosen_here = choice.clone();
    let feed = feed.clone();
    let hooked = root.on_waterfall::<dsh_agent::Request>(ListenOptions::GLOBAL, move |p, next| {
        let chosen = if feed.is_current(&p.agent.session().id()) {
            chosen_here
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
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
    choice
}

/// Stops the turn, answers what is still waiting for the person, saves the session and
/// leaves the terminal; the exit code says whether everything was saved.
async fn leave(
    root: &Context,
    agent: AgentRef,
    mut app: App,
    terminal: TerminalGuard,
    mut stats: FrameStats,
    code: u8,
) -> ExitCode {
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

/// Most bytes read from one mentioned image.
const MAX_IMAGE_FILE: u64 = 32 << 20;

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
