//! `dsh tui` driven through a real pseudo-terminal against the mock LLM: keys go in as a
//! terminal sends them, the screen comes back through a VT parser (`vt100`), and the
//! session log is read back afterwards. Screens of the main views are kept as text
//! snapshots in `tests/golden/tui/` (session ids masked); `DSH_BLESS=1` rewrites them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::png;

use std::time::Duration;

use dsh_test_support::mock_server::{MockServer, Reply};
use dsh_test_support::pty::{self, PtyApp};
use pretty_assertions::assert_eq;
use serde_json::json;

use common::{Run, call, loop_requests, tool_texts};

const ENTER: &str = "\r";
const ESC: &str = "\x1b";
const ALT_ENTER: &str = "\x1b\r";
const TAB: &str = "\t";
const CTRL_C: &str = "\x03";
const CTRL_U: &str = "\x15";

/// `dsh` in a pseudo-terminal, with this run's home and the mock LLM.
struct Tui(PtyApp);

impl std::ops::Deref for Tui {
    type Target = PtyApp;
    fn deref(&self) -> &PtyApp {
        &self.0
    }
}

impl std::ops::DerefMut for Tui {
    fn deref_mut(&mut self) -> &mut PtyApp {
        &mut self.0
    }
}

impl Tui {
    fn start(
        run: &Run,
        server: &MockServer,
        args: &[&str],
        size: (u16, u16),
        env: &[(&str, &str)],
    ) -> Tui {
        let mut cmd = pty::Command::new(env!("CARGO_BIN_EXE_dsh"));
        cmd.env_clear();
        cmd.env("PATH", std::env::var("PATH").unwrap_or_default());
        cmd.env("HOME", run.home.path());
        cmd.env("DSH_HOME", run.dsh_home());
        cmd.env("DEEPSEEK_API_KEY", "sk-test");
        cmd.env("DEEPSEEK_BASE_URL", server.url());
        cmd.env("TERM", "xterm-256color");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.args(args);
        cmd.cwd(run.work.path());
        Tui(PtyApp::spawn(cmd, size.0, size.1))
    }

    /// `dsh tui` at 80×24.
    fn open(run: &Run, server: &MockServer) -> Tui {
        Tui::start(run, server, &["tui"], (80, 24), &[])
    }

    /// Waits for the composer, types `text` and sends it.
    fn ask(&mut self, text: &str) {
        self.wait_text("Ask dsh");
        self.type_text(text);
        self.send(ENTER);
    }

    /// Esc, then a pause: a key right after it would read as Alt+key, as in any terminal.
    fn esc(&mut self) {
        self.send(ESC);
        std::thread::sleep(Duration::from_millis(150));
    }

    /// Sends `signal` to the dsh process.
    fn signal(&self, signal: rustix::process::Signal) {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.pid() as i32).unwrap(),
            signal,
        )
        .unwrap();
    }

    fn quit(&mut self) -> u32 {
        self.send(CTRL_C);
        std::thread::sleep(Duration::from_millis(50));
        self.send(CTRL_C);
        self.wait_exit()
    }
}

/// The screen with what changes between runs masked: session ids, the spinner, elapsed
/// times.
fn masked(screen: &str) -> String {
    let ids = regex_lite(screen);
    ids.lines()
        .map(|line| {
            line.trim_end()
                .split(' ')
                .map(|word| {
                    let w = word.trim_end_matches(['·', ',']);
                    let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
                    let unit = &w[digits.len()..];
                    let timed = !digits.is_empty()
                        && digits
                            .chars()
                            .all(|c| c.is_ascii_digit() || c == '.' || c == 'm')
                        && digits.starts_with(|c: char| c.is_ascii_digit())
                        && matches!(unit, "ms" | "s");
                    if timed {
                        "<t>".to_string()
                    } else if word.chars().count() == 1
                        && word.chars().all(|c| ('\u{2800}'..='\u{28ff}').contains(&c))
                    {
                        "<spin>".to_string()
                    } else {
                        word.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn regex_lite(s: &str) -> String {
    // `session-<uuid>` → `session-<id>`.
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("session-") {
        out.push_str(&rest[..at + "session-".len()]);
        rest = &rest[at + "session-".len()..];
        let n = rest
            .chars()
            .take_while(|c| c.is_ascii_hexdigit() || *c == '-')
            .count();
        if n >= 8 {
            out.push_str("<id>");
            rest = &rest[n..];
        }
    }
    out.push_str(rest);
    mask_uuids(&out)
}

/// Every `8-4-4-4-12` hex id → `<uuid>`.
fn mask_uuids(s: &str) -> String {
    let shape = |w: &[u8]| {
        w.len() == 36
            && w.iter().enumerate().all(|(i, b)| match i {
                8 | 13 | 18 | 23 => *b == b'-',
                _ => b.is_ascii_hexdigit(),
            })
    };
    let bytes = s.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        if i + 36 <= bytes.len() && shape(&bytes[i..i + 36]) {
            out.push_str("<uuid>");
            i += 36;
        } else {
            let c = s[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Compares `screen` with the snapshot `name` (DSH_BLESS=1 writes it).
fn snapshot(name: &str, screen: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/tui")
        .join(format!("{name}.txt"));
    let got = masked(screen) + "\n";
    if std::env::var_os("DSH_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "no snapshot {}; run the test with DSH_BLESS=1 to write it",
            path.display()
        )
    });
    assert_eq!(got, want, "screen {name} differs from its snapshot");
}

/// The screen once the header shows the session's title (it comes from a side request
/// that may finish after the step the test waits for).
fn titled(tui: &Tui, _seen: String) -> String {
    tui.wait("the title", |s| {
        s.lines()
            .next()
            .is_some_and(|l| l.contains("Greeting the workspace"))
    })
}

/// A model reply running `command` with the shell tool.
fn bash(id: &str, command: &str) -> Reply {
    call(
        id,
        "bash",
        json!({"command": command, "description": "run it"}),
    )
}

fn server() -> MockServer {
    MockServer::start().answer_untooled("Greeting the workspace")
}

/// A task with a shell call: the call's output and the answer stream onto the screen
/// (80×24), the log holds them, and a clean quit names the session to go on with.
#[test]
fn a_task_with_bash_shows_the_call_and_the_answer_at_80x24() {
    let run = Run::new();
    std::fs::write(run.work.path().join("README.md"), "# demo\n").unwrap();
    let server = server();
    server.push_all([
        call("c0", "todo_write", json!({"todos": [
            {"content": "Run the echo", "status": "in_progress"},
            {"content": "Report what it printed", "status": "pending"}
        ]})),
        bash("c1", "echo hello-from-bash && echo second-line"),
        Reply::reasoning_and_text("The user wants the echo.\nIt printed two lines.", "The command printed **two lines**:\n\n- `hello-from-bash`\n- `second-line`\n\n```sh\necho hello-from-bash\n```"),
    ]);
    let mut tui = Tui::open(&run, &server);
    tui.wait_text("Ask dsh to do something");
    snapshot("01-start", &tui.screen());
    tui.type_text("run the echo please");
    tui.send(ENTER);
    let screen = tui.wait("the answer", |s| {
        s.contains("two lines") && s.contains("ready")
    });
    assert!(
        screen.contains("✓ bash echo hello-from-bash && echo second-line"),
        "{screen}"
    );
    assert!(
        screen.contains("plan · 0/2 done"),
        "the plan shows: {screen}"
    );
    assert!(screen.contains("✓ todo_write 2 items, 0 done"), "{screen}");
    assert!(screen.contains("▶ Run the echo"), "{screen}");
    assert!(
        screen.contains("▸ thought for 2 lines"),
        "reasoning is collapsed: {screen}"
    );
    let screen = titled(&tui, screen);
    snapshot("02-bash-and-answer", &screen);
    // Ctrl-O shows the reasoning; PgUp scrolls back to the prompt, PgDn returns.
    tui.send("\x0f");
    tui.wait_text("It printed two lines.");
    tui.send("\x1b[5~");
    tui.wait_text("› run the echo please");
    tui.send("\x1b[6~");
    tui.wait("the bottom again", |s| {
        s.contains("echo hello-from-bash") && !s.contains("lines below")
    });
    assert_eq!(tui.quit(), 0);
    let events = run.session();
    assert!(
        tool_texts(&events)
            .iter()
            .any(|t| t.contains("hello-from-bash"))
    );
    assert_eq!(loop_requests(&server).len(), 3);
}

/// An edit shows its diff with line numbers, `-` and `+` lines.
#[test]
fn an_edit_shows_its_diff_with_line_numbers() {
    let run = Run::new();
    let lines: Vec<String> = (1..=12).map(|i| format!("line {i}")).collect();
    std::fs::write(run.work.path().join("f.txt"), lines.join("\n") + "\n").unwrap();
    let server = server();
    server.push_all([
        call("c1", "read", json!({"file_path": "f.txt"})),
        call(
            "c2",
            "edit",
            json!({"file_path": "f.txt", "old_string": "line 9", "new_string": "line nine"}),
        ),
        Reply::text("Renamed line 9."),
    ]);
    let mut tui = Tui::start(&run, &server, &["tui"], (80, 30), &[]);
    tui.ask("spell out line 9");
    let screen = tui.wait("the diff", |s| {
        s.contains("Renamed line 9") && s.contains("ready")
    });
    assert!(
        screen.contains("f.txt:6"),
        "the hunk starts at its line: {screen}"
    );
    assert!(screen.contains("    9 - line 9"), "{screen}");
    assert!(screen.contains("    9 + line nine"), "{screen}");
    let screen = titled(&tui, screen);
    snapshot("03-edit-diff", &screen);
    assert_eq!(tui.quit(), 0);
    assert!(
        std::fs::read_to_string(run.work.path().join("f.txt"))
            .unwrap()
            .contains("line nine")
    );
}

/// An approval asked inline: the focus starts on Reject, Enter there rejects; the next ask is
/// allowed with the arrow and Enter. The log records both decisions.
#[test]
fn approvals_are_answered_from_the_keyboard_with_reject_focused_first() {
    let run = Run::new();
    let server = server();
    let escalated = |id: &str, cmd: &str| {
        call(
            id,
            "bash",
            json!({"command": cmd, "description": "fetch", "sandbox_permissions": "danger-full-access", "justification": "needs the network"}),
        )
    };
    server.push_all([
        escalated("c1", "echo first-try"),
        escalated("c2", "echo second-try"),
        Reply::text("Both asked."),
    ]);
    let mut tui = Tui::open(&run, &server);
    tui.ask("fetch things");
    let screen = tui.wait_text("approval needed");
    assert!(
        screen.contains("echo first-try"),
        "the exact command: {screen}"
    );
    assert!(
        screen.contains("sandbox_permissions: danger-full-access"),
        "{screen}"
    );
    assert!(screen.contains("needs the network"), "{screen}");
    let screen = titled(&tui, screen);
    snapshot("04-approval", &screen);
    tui.send(ENTER);
    tui.wait("the second ask", |s| {
        s.contains("approval needed") && s.contains("echo second-try")
    });
    tui.send("\x1b[C");
    std::thread::sleep(Duration::from_millis(100));
    tui.send(ENTER);
    tui.wait("the answer", |s| {
        s.contains("Both asked") && s.contains("ready")
    });
    assert_eq!(tui.quit(), 0);
    let events = run.session();
    let decided: Vec<String> = events
        .iter()
        .filter(|e| e.is("approval/decided"))
        .map(|e| {
            e.data.as_value()["outcome"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(decided.len(), 2, "{decided:?}");
    assert!(decided[0].contains("reject"), "{decided:?}");
    assert!(decided[1].contains("allow"), "{decided:?}");
    let texts = tool_texts(&events);
    assert!(texts.iter().any(|t| t.contains("second-try")), "{texts:?}");
}

/// Esc cancels a running turn: the shell call stops, the turn ends cancelled, the UI is
/// ready for the next message.
#[test]
fn esc_cancels_the_running_turn() {
    let run = Run::new();
    let server = server();
    server.push_all([
        bash("c1", "echo started; sleep 30; echo never"),
        Reply::text("after the cancel"),
    ]);
    let mut tui = Tui::open(&run, &server);
    tui.ask("sleep a while");
    tui.wait("the live output", |s| {
        s.contains("started") && s.contains("working")
    });
    tui.esc();
    let screen = tui.wait("the cancel", |s| {
        s.contains("turn cancelled") && s.contains("ready")
    });
    assert!(!screen.contains("│ never"), "the rest never ran: {screen}");
    assert_eq!(tui.quit(), 0);
    let events = run.session();
    let end = events.iter().rev().find(|e| e.is("turn/end")).unwrap();
    assert_eq!(end.data.as_value()["reason"]["kind"], "aborted");
}

/// With `--steer`, a message typed during a turn reaches the model at the next step of
/// the same turn; without it, it waits for the next turn.
#[test]
fn typing_during_a_turn_steers_or_queues() {
    for steer in [true, false] {
        let run = Run::new();
        let server = server();
        server.push_all([
            bash("c1", "sleep 2; echo slept"),
            Reply::text("first answer"),
            Reply::text("second answer"),
        ]);
        let args: &[&str] = if steer { &["tui", "--steer"] } else { &["tui"] };
        let mut tui = Tui::start(&run, &server, args, (80, 24), &[]);
        tui.wait_text("Ask dsh");
        tui.type_text("take a nap");
        tui.send(ENTER);
        tui.wait_text("working");
        tui.type_text("also say hi");
        tui.send(ENTER);
        if !steer {
            tui.wait_text("queued");
        }
        let want = if steer {
            "first answer"
        } else {
            "second answer"
        };
        tui.wait("the answers", |s| s.contains(want) && s.contains("ready"));
        assert_eq!(tui.quit(), 0);
        let requests = loop_requests(&server);
        let has_hi = |i: usize| {
            requests[i]
                .messages()
                .iter()
                .any(|m| m.to_string().contains("also say hi"))
        };
        let events = run.session();
        let turns = events.iter().filter(|e| e.is("turn/start")).count();
        if steer {
            // The result of the nap and the steering message go out in the same request.
            assert!(has_hi(1), "steered into the second step");
            assert_eq!(turns, 1);
        } else {
            assert!(!has_hi(1), "queued, not steered");
            assert!(has_hi(2));
            assert_eq!(turns, 2);
        }
    }
}

/// A closed terminal (SIGHUP) mid-turn loses nothing recorded; `--continue` shows the whole
/// conversation again.
#[test]
fn sighup_keeps_the_session_and_continue_shows_it() {
    let run = Run::new();
    let server = server();
    server.push_all([
        Reply::text("the very first answer"),
        bash("c1", "echo before-hangup; sleep 30"),
        Reply::text("resumed answer"),
    ]);
    let mut tui = Tui::open(&run, &server);
    tui.ask("hello there");
    tui.wait("the first answer", |s| {
        s.contains("the very first answer") && s.contains("ready")
    });
    tui.type_text("now a long job");
    tui.send(ENTER);
    tui.wait_text("before-hangup");
    tui.signal(rustix::process::Signal::HUP);
    assert_eq!(tui.wait_exit(), 129);
    let id = run.only_session();
    let events = run.events(&id);
    assert!(
        events.iter().any(|e| e.is("turn/end")),
        "the cut turn is closed"
    );
    assert_eq!(
        events.iter().filter(|e| e.is("turn/start")).count(),
        events.iter().filter(|e| e.is("turn/end")).count()
    );
    let mut again = Tui::start(&run, &server, &["tui", "--continue"], (80, 24), &[]);
    let screen = again.wait("the old conversation", |s| {
        s.contains("the very first answer") && s.contains("now a long job")
    });
    assert!(
        screen.contains(&id),
        "the header names the session: {screen}"
    );
    again.type_text("go on");
    again.send(ENTER);
    again.wait_text("resumed answer");
    assert_eq!(again.quit(), 0);
    assert_eq!(run.only_session(), id);
}

/// The `/` menu lists the session's commands and completes with Tab; `@` completes
/// workspace files fuzzily; Alt-Enter adds a line.
#[test]
fn the_slash_and_at_menus_complete() {
    let run = Run::new();
    std::fs::create_dir_all(run.work.path().join("src")).unwrap();
    std::fs::write(run.work.path().join("src/parser.rs"), "").unwrap();
    std::fs::write(run.work.path().join("README.md"), "").unwrap();
    let skill = run.work.path().join(".dsh/skills/release-notes/SKILL.md");
    std::fs::create_dir_all(skill.parent().unwrap()).unwrap();
    std::fs::write(
        &skill,
        "---\nname: release-notes\ndescription: Write release notes from the changelog.\n---\nRead CHANGELOG.md.\n",
    )
    .unwrap();
    let server = server();
    server.push(Reply::text("seen"));
    let mut tui = Tui::open(&run, &server);
    tui.wait_text("Ask dsh");
    tui.type_text("/perm");
    let screen = tui.wait_text("/permission");
    snapshot("05-slash-menu", &screen);
    tui.send(TAB);
    tui.wait("the completed command", |s| {
        s.contains("│/permission ") || s.contains("│/permission")
    });
    tui.send(CTRL_U);
    tui.type_text("/");
    tui.wait_text("/memory");
    tui.type_text("se");
    tui.wait_text("/sessions");
    // The workspace's skills are in the menu too.
    tui.send(CTRL_U);
    tui.type_text("/rel");
    tui.wait_text("skill: Write release notes from the changelog.");
    tui.send(CTRL_U);
    tui.type_text("look at @srcpars");
    tui.wait_text("@src/parser.rs");
    tui.send(TAB);
    tui.send(ALT_ENTER);
    tui.type_text("and tell me");
    tui.send(ENTER);
    tui.wait("the answer", |s| s.contains("seen") && s.contains("ready"));
    assert_eq!(tui.quit(), 0);
    let requests = loop_requests(&server);
    let sent = requests[0]
        .messages()
        .iter()
        .map(|m| m.to_string())
        .collect::<Vec<_>>();
    assert!(
        sent.iter()
            .any(|m| m.contains("look at @src/parser.rs \\nand tell me")),
        "{sent:?}"
    );
}

/// The session picker lists stored sessions with subagent sessions under their parent,
/// opens one (a child too), archives one (shared with dsh web's archive) and shows the
/// archived ones on Tab.
#[test]
fn the_session_picker_opens_children_and_archives() {
    let run = Run::new();
    let server = server();
    server.push_all([
        Reply::tool_call(
            "c1",
            "subagent",
            r#"{"description":"Look around","prompt":"Say hi from the child.","run_in_background":false}"#,
        ),
        Reply::text("CHILD_SAYS_HI"),
        Reply::text("answer one"),
        Reply::text("answer two"),
    ]);
    let mut tui = Tui::open(&run, &server);
    tui.ask("first topic");
    tui.wait("the first answer", |s| {
        s.contains("answer one") && s.contains("ready")
    });
    // `/quit` leaves like Ctrl-C twice.
    tui.type_text("/quit");
    tui.send(ENTER);
    assert_eq!(tui.wait_exit(), 0);
    let mut tui = Tui::open(&run, &server);
    tui.wait_text("Ask dsh");
    tui.send("\x12");
    tui.wait("the picker", |s| s.contains("sessions") && s.contains("↳"));
    let screen = tui.wait("the stored title", |s| s.contains("Greeting the workspace"));
    snapshot("06-session-picker", &screen);
    // The child is the second row: open it.
    tui.send("\x1b[B");
    std::thread::sleep(Duration::from_millis(100));
    tui.send(ENTER);
    let screen = tui.wait_text("CHILD_SAYS_HI");
    assert!(screen.contains("Say hi from the child."), "{screen}");
    // Back to the parent by search, and on with it.
    tui.send("\x12");
    tui.wait_text("search:");
    tui.type_text("first topic");
    tui.send(ENTER);
    tui.wait_text("answer one");
    tui.type_text("more");
    tui.send(ENTER);
    tui.wait_text("answer two");
    let parent = tui.screen();
    // Archive the child: it leaves the list and shows under Tab.
    tui.send("\x12");
    tui.wait_text("↳");
    tui.send("\x1b[B");
    std::thread::sleep(Duration::from_millis(100));
    tui.send("\x01");
    tui.wait("the child archived", |s| {
        s.lines().last().is_some_and(|l| l.starts_with("archived ")) && !s.contains("↳")
    });
    tui.send(TAB);
    tui.wait("the archived list", |s| {
        s.contains("archived · search:") && s.contains("↳")
    });
    tui.esc();
    assert_eq!(tui.quit(), 0);
    let registry = std::fs::read_to_string(run.dsh_home().join("storages/workspace.json")).unwrap();
    let archived: serde_json::Value = serde_json::from_str(&registry).unwrap();
    assert_eq!(
        archived["global"]["archivedSessionIds"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert!(parent.contains("answer one"));
}

/// Without a terminal the task runs headless, with a line saying why; with no task the
/// error says what to do.
#[test]
fn without_a_terminal_the_task_runs_headless() {
    let run = Run::new();
    let server = server();
    server.push(Reply::text("headless answer"));
    let out = run.base(&server).args(["tui", "say it"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "headless answer\n");
    assert!(
        common::stderr(&out).contains("the terminal UI needs a terminal"),
        "{}",
        common::stderr(&out)
    );
    let out = run.base(&server).args(["tui"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        common::stderr(&out).contains("dsh headless"),
        "{}",
        common::stderr(&out)
    );
    // `dsh` alone without a terminal still prints the usage.
    let out = run.base(&server).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: dsh"));
}

/// `dsh` alone on a terminal opens the UI; with NO_COLOR no colour reaches the terminal.
#[test]
fn no_color_draws_without_colours() {
    let run = Run::new();
    let server = server();
    server.push(Reply::text("plain `code` here"));
    let mut tui = Tui::start(&run, &server, &[], (80, 24), &[("NO_COLOR", "1")]);
    tui.ask("hi");
    tui.wait("the answer", |s| {
        s.contains("plain code here") && s.contains("ready")
    });
    tui.with_screen(|screen| {
        for row in 0..24 {
            for col in 0..80 {
                if let Some(cell) = screen.cell(row, col) {
                    assert_eq!(
                        cell.fgcolor(),
                        vt100::Color::Default,
                        "colour at {row},{col}"
                    );
                    assert_eq!(
                        cell.bgcolor(),
                        vt100::Color::Default,
                        "colour at {row},{col}"
                    );
                }
            }
        }
    });
    assert_eq!(tui.quit(), 0);
}

/// A question the model asks is answered inline: ↓ moves to the second option, Enter
/// answers; the tool result carries the choice.
#[test]
fn a_question_is_answered_from_the_keyboard() {
    let run = Run::new();
    let server = server();
    server.push_all([
        call(
            "q1",
            "ask_user_question",
            json!({"questions": [{"id": "db", "header": "Storage",
            "question": "Which database should the cache use?",
            "options": [{"label": "SQLite", "description": "one file"}, {"label": "Postgres"}]}]}),
        ),
        Reply::text("Going with the choice."),
    ]);
    let mut tui = Tui::open(&run, &server);
    tui.ask("pick a database");
    let screen = tui.wait_text("( ) SQLite");
    assert!(
        screen.contains("Which database should the cache use?"),
        "{screen}"
    );
    let screen = titled(&tui, screen);
    snapshot("07-question", &screen);
    tui.send("\x1b[B");
    std::thread::sleep(Duration::from_millis(100));
    tui.send(ENTER);
    tui.wait("the answer", |s| {
        s.contains("Going with the choice") && s.contains("ready")
    });
    assert_eq!(tui.quit(), 0);
    let texts = tool_texts(&run.session());
    assert!(texts.iter().any(|t| t.contains("Postgres")), "{texts:?}");
}

/// TERM=dumb cannot draw: the task runs headless with a line saying why.
#[test]
fn a_dumb_terminal_runs_the_task_headless() {
    let run = Run::new();
    let server = server();
    server.push(Reply::text("plain answer"));
    let mut tui = Tui::start(
        &run,
        &server,
        &["tui", "say it plainly"],
        (80, 24),
        &[("TERM", "dumb")],
    );
    tui.wait("the message and the answer", |s| {
        s.contains("TERM=dumb") && s.contains("plain answer")
    });
    assert_eq!(tui.wait_exit(), 0);
}

/// A provider error shows in the conversation with the way to retry; /retry sends the
/// message again and the answer arrives.
#[test]
fn a_provider_error_shows_and_retry_sends_again() {
    let run = Run::new();
    let server = server();
    server.push_all([
        Reply::http_error(400, r#"{"error":{"message":"the model is not in your plan","type":"invalid_request_error"}}"#),
        Reply::text("second time lucky"),
    ]);
    let mut tui = Tui::open(&run, &server);
    tui.ask("do the thing");
    let screen = tui.wait("the error", |s| {
        s.contains("the turn failed") && s.contains("ready")
    });
    assert!(screen.contains("not in your plan"), "{screen}");
    assert!(screen.contains("/retry"), "{screen}");
    tui.type_text("/retry");
    tui.send(ENTER);
    tui.send(ENTER);
    tui.wait_text("second time lucky");
    assert_eq!(tui.quit(), 0);
    let requests = loop_requests(&server);
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1]
            .messages()
            .iter()
            .any(|m| m.to_string().contains("do the thing"))
    );
}

/// An `@image.png` mention sends the image with the message when the model takes images;
/// the conversation shows it attached.
#[test]
fn an_image_mention_is_sent_as_an_image() {
    let run = Run::new();
    std::fs::write(run.work.path().join("shot.png"), png::png(4, 3)).unwrap();
    let server = server();
    server.push(Reply::text("a tiny picture"));
    let mut tui = Tui::open(&run, &server);
    tui.wait_text("Ask dsh");
    tui.type_text("what is in @shot.png");
    tui.wait_text(" files ");
    // Esc closes the menu.
    tui.esc();
    tui.send(ENTER);
    let screen = tui.wait("the answer", |s| {
        s.contains("a tiny picture") && s.contains("ready")
    });
    assert!(
        screen.contains("› what is in @shot.png [1 image]"),
        "{screen}"
    );
    assert_eq!(tui.quit(), 0);
    let requests = loop_requests(&server);
    let sent = requests[0]
        .messages()
        .iter()
        .map(|m| m.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(sent.contains("data:image/png;base64,"), "{sent}");
}

/// A terminal multiplexer's client: runs its command line with `args` and returns the output;
/// the session it started is ended (`end`) when the test ends, however it ends.
struct Mux<'a> {
    run: &'a dyn Fn(&[&str]) -> std::process::Output,
    end: &'static [&'static str],
}

impl Drop for Mux<'_> {
    fn drop(&mut self) {
        (self.run)(self.end);
    }
}

/// The shell line that starts `dsh tui` for `run` with only the test's environment.
fn tui_shell_line(run: &Run, server: &MockServer, term: &str) -> String {
    format!(
        "cd {} && exec env -i PATH=\"$PATH\" HOME={} DSH_HOME={} DEEPSEEK_API_KEY=sk-test DEEPSEEK_BASE_URL={} TERM={term} {} tui",
        run.work.path().display(),
        run.home.path().display(),
        run.dsh_home().display(),
        server.url(),
        env!("CARGO_BIN_EXE_dsh"),
    )
}

/// Polls `capture` until its text satisfies `ok` (30 s at most); the text.
fn poll(what: &str, capture: &dyn Fn() -> String, ok: &dyn Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let s = capture();
        if ok(&s) {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (20 s at most) until `alive` says the multiplexer's session has ended.
fn until_gone(alive: &dyn Fn() -> bool, screen: &dyn Fn() -> String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while alive() {
        assert!(
            std::time::Instant::now() < deadline,
            "dsh tui did not leave: {}",
            screen()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Inside tmux (a private server): the UI draws in the pane, answers, and follows a
/// resize of the window.
#[test]
fn inside_tmux_it_draws_answers_and_follows_a_resize() {
    use dsh_test_support::prereq;
    if !prereq::runs("tmux", &["-V"]) {
        prereq::skip("tmux is not installed (Debian package tmux)");
        return;
    }
    let run = Run::new();
    let server = server();
    server.push(Reply::text("hello from inside tmux"));
    let socket = format!("dsh-tui-test-{}", std::process::id());
    let tmux = |args: &[&str]| {
        std::process::Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null"])
            .args(args)
            .env("TMUX", "")
            .output()
            .unwrap()
    };
    let _server = Mux {
        run: &tmux,
        end: &["kill-server"],
    };
    let line = tui_shell_line(&run, &server, "screen-256color");
    let started = tmux(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "80",
        "-y",
        "24",
        &line,
    ]);
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let pane =
        || String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", "t"]).stdout).to_string();
    poll("the first frame", &pane, &|s| s.contains("Ask dsh"));
    tmux(&["send-keys", "-t", "t", "-l", "hello tmux"]);
    tmux(&["send-keys", "-t", "t", "Enter"]);
    poll("the answer", &pane, &|s| {
        s.contains("hello from inside tmux") && s.contains("ready")
    });
    tmux(&["resize-window", "-t", "t", "-x", "60", "-y", "20"]);
    let screen = poll("the narrower frame", &pane, &|s| {
        s.lines()
            .any(|l| l.starts_with('└') && l.chars().count() == 60)
    });
    assert!(screen.contains("› hello tmux"), "{screen}");
    tmux(&["send-keys", "-t", "t", "C-c"]);
    tmux(&["send-keys", "-t", "t", "C-c"]);
    until_gone(
        &|| tmux(&["has-session", "-t", "t"]).status.success(),
        &pane,
    );
    run.only_session();
}

/// A crash (SIGKILL mid tool call) loses nothing recorded: the session opens again with
/// the whole conversation, the interrupted call closed, and goes on.
#[test]
fn a_killed_ui_loses_nothing_recorded() {
    let run = Run::new();
    let server = server();
    server.push_all([
        bash("c1", "echo before-the-crash; sleep 30"),
        Reply::text("after the crash"),
    ]);
    let mut tui = Tui::open(&run, &server);
    tui.ask("start a long job");
    tui.wait_text("before-the-crash");
    tui.signal(rustix::process::Signal::KILL);
    tui.wait_exit();
    let id = run.files().list().unwrap()[0].0.id.clone();
    let mut again = Tui::start(&run, &server, &["tui", "--session-id", &id], (80, 24), &[]);
    let screen = again.wait("the recorded conversation", |s| {
        s.contains("› start a long job") && s.contains("bash echo before-the-crash")
    });
    assert!(screen.contains(&id), "{screen}");
    again.type_text("go on");
    again.send(ENTER);
    again.wait_text("after the crash");
    assert_eq!(again.quit(), 0);
    let events = run.events(&id);
    assert_eq!(
        events.iter().filter(|e| e.is("turn/start")).count(),
        events.iter().filter(|e| e.is("turn/end")).count(),
        "every turn is closed"
    );
}

/// `/model` lists the configured models and switches the next requests to one (the header
/// follows); `/permission` switches the mode and the badge shows it.
#[test]
fn model_and_permission_switch_from_the_ui() {
    let run = Run::new();
    let server = server();
    server.push_all([Reply::text("first on flash"), Reply::text("then on pro")]);
    let mut tui = Tui::open(&run, &server);
    tui.ask("hello");
    tui.wait("the first answer", |s| {
        s.contains("first on flash") && s.contains("ready")
    });
    tui.type_text("/model");
    tui.esc();
    tui.send(ENTER);
    let screen = tui.wait_text("deepseek-official/deepseek-v4-pro");
    assert!(
        screen.contains("deepseek-official/deepseek-flash"),
        "{screen}"
    );
    tui.esc();
    tui.type_text("/model deepseek-v4-pro");
    tui.send(ENTER);
    tui.wait("the header", |s| {
        s.lines()
            .next()
            .is_some_and(|l| l.contains("deepseek-v4-pro"))
    });
    tui.type_text("/permission read-only");
    tui.send(ENTER);
    tui.wait("the badge", |s| {
        s.lines().next().is_some_and(|l| l.contains("[read-only]"))
    });
    tui.ask("again");
    tui.wait_text("then on pro");
    assert_eq!(tui.quit(), 0);
    let requests = loop_requests(&server);
    let model = |i: usize| {
        requests[i].json.as_ref().unwrap()["model"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(model(0), "deepseek-flash");
    assert_eq!(model(1), "deepseek-v4-pro");
    let events = run.session();
    assert!(
        events.iter().any(|e| e.is("permission/preset")),
        "the switch is logged"
    );
}

/// Inside GNU screen (its default 80×24 window, UTF-8 mode): the UI draws, takes typed keys
/// and answers, and Ctrl-C twice leaves with the session stored.
#[test]
fn inside_gnu_screen_it_draws_and_answers() {
    use dsh_test_support::prereq;
    if !prereq::runs("screen", &["-v"]) {
        prereq::skip("GNU screen is not installed (Debian package screen)");
        return;
    }
    let run = Run::new();
    let server = server();
    server.push(Reply::text("hello from inside screen"));
    let name = format!("dsh-tui-test-{}", std::process::id());
    let screen = |args: &[&str]| {
        std::process::Command::new("screen")
            .args(["-S", &name])
            .args(args)
            .env("STY", "")
            .output()
            .unwrap()
    };
    let _session = Mux {
        run: &screen,
        end: &["-X", "quit"],
    };
    // -U: the window speaks UTF-8 (the box drawing and the bullets).
    let line = tui_shell_line(&run, &server, "screen");
    let started = screen(&["-U", "-dm", "-c", "/dev/null", "sh", "-c", &line]);
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let copy = run.home.path().join("hardcopy.txt");
    let window = || {
        let _ = std::fs::remove_file(&copy);
        screen(&["-X", "hardcopy", &copy.display().to_string()]);
        // screen writes the copy asynchronously.
        for _ in 0..50 {
            if let Ok(t) = std::fs::read(&copy) {
                return String::from_utf8_lossy(&t).into_owned();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        String::new()
    };
    // (screen's hardcopy writes its own codes for line drawing: only the text is compared.)
    let first = poll("the first frame", &window, &|s| {
        s.contains("Ask dsh") && s.contains("ready")
    });
    assert!(first.contains("new session"), "{first}");
    screen(&["-X", "stuff", "hello screen"]);
    std::thread::sleep(Duration::from_millis(100));
    screen(&["-X", "stuff", "\r"]);
    let shown = poll("the answer", &window, &|s| {
        s.contains("hello from inside screen") && s.contains("ready")
    });
    assert!(shown.contains(" hello screen"), "{shown}");
    screen(&["-X", "stuff", "\x03"]);
    std::thread::sleep(Duration::from_millis(50));
    screen(&["-X", "stuff", "\x03"]);
    let alive = || {
        let list = std::process::Command::new("screen")
            .arg("-ls")
            .output()
            .unwrap();
        String::from_utf8_lossy(&list.stdout).contains(&name)
    };
    until_gone(&alive, &window);
    run.only_session();
}
