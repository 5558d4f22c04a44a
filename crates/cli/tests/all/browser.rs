//! The web UI in a real headless Chromium (driven over WebDriver by chromedriver) against
//! the `dsh` binary and the mock LLM: sign-in, Settings → Models, workspaces, a task with
//! tool cards, a diff and a plan, approvals, a question and a plan review, steering,
//! cancelling, fork / archive / restore / delete, a reload mid-turn, bad input, and pasted /
//! dropped images. Each scenario saves screenshots under
//! `target/browser-shots/`. Without chromium and chromedriver the tests say so and pass
//! without running (install: `apt-get install chromium chromium-driver`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::Duration;

use dsh_test_support::mock_server::{Completion, Gate, MockServer, Reply};
use dsh_test_support::webdriver::{Browser, Driver, ENTER, ESCAPE, SHIFT, TAB, Tools};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

fn tools() -> Option<&'static (Tools, Mutex<Option<Driver>>)> {
    static TOOLS: OnceLock<Option<(Tools, Mutex<Option<Driver>>)>> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            let tools = Driver::find_tools()?;
            Some((tools, Mutex::new(None)))
        })
        .as_ref()
}

/// A browser session on the shared chromedriver, or `None` (with a message) when the
/// browser tools are not installed.
pub(crate) fn browser(test: &str) -> Option<Browser> {
    let Some((tools, driver)) = tools() else {
        dsh_test_support::prereq::skip(&format!(
            "{test}: browser tests need chromium and chromedriver on PATH (apt-get install chromium chromium-driver)"
        ));
        return None;
    };
    let mut guard = driver.lock().unwrap_or_else(|p| p.into_inner());
    if guard.is_none() {
        *guard = Some(Driver::start(tools).unwrap());
    }
    Some(guard.as_ref().unwrap().browser(tools).unwrap())
}

pub(crate) fn shots_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("browser-shots")
}

struct Web {
    child: Child,
    url: String,
    base: String,
    home: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Web {
    fn start(server_url: &str, env: &[(&str, &str)]) -> Web {
        let home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        Self::start_in(home, work, server_url, env)
    }

    fn start_in(
        home: tempfile::TempDir,
        work: tempfile::TempDir,
        server_url: &str,
        env: &[(&str, &str)],
    ) -> Web {
        Self::launch(home, work, server_url, env, &[])
    }

    /// `dsh web` with `args` after the usual flags (a `--patch` file, say).
    fn launch(
        home: tempfile::TempDir,
        work: tempfile::TempDir,
        server_url: &str,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Web {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("DSH_HOME", home.path().join(".dsh"))
            .env("DEEPSEEK_BASE_URL", server_url)
            .envs(env.iter().copied())
            .current_dir(work.path())
            .args(["web", "--no-open", "--port", "0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = rx.recv_timeout(WAIT).expect("the URL line");
        let url = line.strip_prefix("dsh web: ").unwrap().to_string();
        let base = url.split("/?token=").next().unwrap().to_string();
        Web {
            child,
            url,
            base,
            home,
            work,
        }
    }

    fn work_path(&self) -> String {
        std::fs::canonicalize(self.work.path())
            .unwrap()
            .display()
            .to_string()
    }
}

struct Page<'a> {
    b: &'a Browser,
    name: &'static str,
    shot: usize,
}

impl<'a> Page<'a> {
    fn new(b: &'a Browser, name: &'static str) -> Self {
        Self { b, name, shot: 0 }
    }

    fn wait(&self, predicate: &str) -> Value {
        match self.b.wait_for(predicate, WAIT) {
            Ok(v) => v,
            Err(e) => {
                let _ = self
                    .b
                    .screenshot(&shots_dir().join(format!("{}-FAILED.png", self.name)));
                panic!("[{}] {e}", self.name);
            }
        }
    }

    fn js(&self, script: &str) -> Value {
        self.b
            .eval(script, vec![])
            .unwrap_or_else(|e| panic!("[{}] {e}", self.name))
    }

    fn click(&self, css: &str) {
        self.wait(&format!(
            "document.querySelector({css:?}) && !document.querySelector({css:?}).disabled"
        ));
        // A list re-rendered between finding and clicking leaves a stale reference: find
        // the element again (a user's click would simply land on the new one).
        let mut attempt = 0;
        while let Err(e) = self.b.click(css) {
            attempt += 1;
            if !e.contains("stale element") || attempt > 5 {
                panic!("[{}] {e}", self.name);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn type_text(&self, css: &str, text: &str) {
        self.wait(&format!(
            "document.querySelector({css:?}) && !document.querySelector({css:?}).disabled"
        ));
        self.b
            .type_text(css, text)
            .unwrap_or_else(|e| panic!("[{}] {e}", self.name));
    }

    fn shot(&mut self, page: &str) {
        self.shot += 1;
        let path = shots_dir().join(format!("{}-{:02}-{page}.png", self.name, self.shot));
        self.b.screenshot(&path).unwrap();
    }

    /// No script error happened on the page.
    fn no_errors(&self) {
        let errors = self.js("return (window.__dshErrors || []).join('\\n')");
        assert_eq!(
            errors.as_str().unwrap_or_default(),
            "",
            "[{}] page errors",
            self.name
        );
    }

    fn sign_in(&self, web: &Web) {
        self.b.goto(&web.url).unwrap();
        self.wait("window.__dsh && window.__dsh.booted");
    }

    /// Registers the launch directory as the workspace through the dialog.
    fn choose_launch_workspace(&self) {
        self.click("[data-testid=add-workspace]");
        self.click("[data-testid=use-cwd]");
        self.wait("document.querySelector('[data-testid=workspace-select]').value !== ''");
    }

    fn start_task(&self, text: &str) {
        self.type_text("[data-testid=home-input]", text);
        self.type_text("[data-testid=home-input]", ENTER);
        self.wait("document.querySelector('[data-testid=conversation]')");
    }

    fn send(&self, text: &str) {
        self.type_text("[data-testid=composer-input]", text);
        self.type_text("[data-testid=composer-input]", ENTER);
    }

    fn turn_ended(&self, n: usize) {
        self.wait(&format!(
            "document.querySelectorAll('[data-testid=turn-end]').length >= {n}"
        ));
    }
}

fn text_reply(text: &str) -> Reply {
    Reply::completion(Completion::text(text).delta_chars(6))
}

// ---------------------------------------------------------------------------------------

#[test]
fn sign_in_save_a_key_choose_a_workspace_and_run_a_task() {
    let Some(b) = browser("sign_in_save_a_key_choose_a_workspace_and_run_a_task") else {
        return;
    };
    let mut p = Page::new(&b, "01-task");
    let server = MockServer::start().answer_untooled("Edit the greeting");
    let web = Web::start(&server.url(), &[]);
    std::fs::write(web.work.path().join("f.txt"), "hello old\n").unwrap();
    server.push_all([
        Reply::tool_call("call_1", "bash", &json!({"command": "echo hi", "description": "say hi"}).to_string()),
        Reply::tool_call("call_live", "bash", &json!({"command": "echo live-start; sleep 1.5; echo live-end", "description": "slow"}).to_string()),
        Reply::tool_call("call_2", "read", &json!({"file_path": "f.txt"}).to_string()),
        Reply::tool_call("call_3", "edit", &json!({"file_path": "f.txt", "old_string": "hello old", "new_string": "hello new"}).to_string()),
        Reply::tool_call("call_4", "todo_write", &json!({"todos": [{"content": "Say hi", "status": "completed"}, {"content": "Edit the file", "status": "in_progress"}]}).to_string()),
        Reply::completion(Completion::text("Changed **f.txt**:\n\n```rust\nfn main() { let x = 1; }\n```\n").delta_chars(5).reasoning("I will summarize.")),
    ]);

    // Without the token: the refusal text and nothing else.
    b.goto(&format!("{}/", web.base)).unwrap();
    p.wait("document.body.innerText.includes('authentication required')");
    p.shot("signed-out");
    p.sign_in(&web);
    assert_eq!(
        p.js("return document.cookie"),
        json!(""),
        "the auth cookie is HttpOnly"
    );
    assert_eq!(
        b.current_url().unwrap(),
        format!("{}/", web.base),
        "the token left the address bar"
    );

    // Settings → Models.
    p.click("[data-testid=nav-settings]");
    p.wait("document.querySelector('[data-testid=key-status]')?.dataset.configured === 'false'");
    p.type_text("[data-testid=deepseek-key]", "sk-browser-test-123");
    p.click("[data-testid=save-key]");
    p.wait("document.querySelector('[data-testid=key-status]')?.dataset.configured === 'true'");
    p.type_text("[data-testid=endpoint-id]", "local-llm");
    p.type_text(
        "[data-testid=endpoint-url]",
        &format!("{}/v1", server.url()),
    );
    p.type_text("[data-testid=endpoint-key]", "sk-endpoint-456");
    p.type_text("[data-testid=endpoint-model]", "local-model");
    p.click("[data-testid=save-endpoint]");
    p.wait("!!document.querySelector('[data-testid=provider-local-llm]')");
    assert!(
        p.js("return document.querySelector('[data-testid=default-model]').innerText")
            .as_str()
            .unwrap()
            .contains("local-model")
    );
    p.shot("settings-models");
    assert!(
        !p.js("return document.documentElement.outerHTML")
            .as_str()
            .unwrap()
            .contains("sk-browser-test-123")
    );
    assert!(
        !p.js("return document.documentElement.outerHTML")
            .as_str()
            .unwrap()
            .contains("sk-endpoint-456")
    );
    let creds_path = web.home.path().join(".dsh/.credentials.yaml");
    assert!(
        std::fs::read_to_string(&creds_path)
            .unwrap()
            .contains("sk-browser-test-123")
    );
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&creds_path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    // Workspaces: the composer waits for one; the launch directory is offered first.
    b.goto(&format!("{}/#/", web.base)).unwrap();
    p.wait("document.querySelector('[data-testid=home-input]')?.disabled === true");
    assert!(
        p.js("return document.querySelector('[data-testid=home-note]').innerText")
            .as_str()
            .unwrap()
            .contains("Choose a workspace")
    );
    p.click("[data-testid=add-workspace]");
    let offered = p.wait("document.querySelector('[data-testid=use-cwd]')?.innerText");
    assert!(
        offered.as_str().unwrap().contains(&web.work_path()),
        "{offered}"
    );
    p.shot("workspace-dialog");
    p.click("[data-testid=use-cwd]");
    p.wait("document.querySelector('[data-testid=home-input]')?.disabled === false");
    let registry =
        std::fs::read_to_string(web.home.path().join(".dsh/storages/workspace.json")).unwrap();
    assert!(registry.contains(&web.work_path()));
    p.shot("workspace-chosen");

    // The task.
    p.start_task("Say hi, then change old to new in f.txt");
    // Tool output shows while the command still runs.
    let live = p.wait("(() => { const c = document.querySelector('[data-testid=tool-card][data-call=call_live]'); return c && c.dataset.state !== 'done' && c.querySelector('[data-testid=tool-output]').innerText; })()");
    assert!(
        live.as_str().unwrap().contains("live-start")
            && !live.as_str().unwrap().contains("live-end"),
        "{live}"
    );
    p.shot("live-output");
    p.turn_ended(1);
    p.wait("[...document.querySelectorAll('[data-testid=assistant-text]')].some(e => e.innerText.includes('Changed f.txt'))");
    let bash =
        p.wait("document.querySelector('[data-testid=tool-card][data-tool=bash]')?.innerText");
    assert!(
        bash.as_str().unwrap().contains("echo hi") && bash.as_str().unwrap().contains("hi"),
        "{bash}"
    );
    let diff = p.wait("document.querySelector('[data-testid=diff]')?.innerText");
    assert!(
        diff.as_str().unwrap().contains("- hello old")
            && diff.as_str().unwrap().contains("+ hello new"),
        "{diff}"
    );
    let plan = p.wait("document.querySelector('[data-testid=plan]:not(.hidden)')?.innerText");
    assert!(plan.as_str().unwrap().contains("Edit the file"), "{plan}");
    assert_eq!(p.js("return document.querySelectorAll('[data-testid=plan-item][data-status=in_progress]').length"), 1);
    p.wait("document.querySelector('pre.code .tok-kw')?.innerText === 'fn'");
    p.wait("document.querySelector('[data-testid=reasoning]')");
    assert!(
        p.js("return document.querySelector('[data-testid=usage]').innerText")
            .as_str()
            .unwrap()
            .contains("/")
    );
    assert_eq!(
        std::fs::read_to_string(web.work.path().join("f.txt")).unwrap(),
        "hello new\n"
    );
    assert_eq!(server.requests()[0].api_key(), Some("sk-browser-test-123"));
    p.shot("conversation");
    let row = p.wait("document.querySelector('[data-testid=session-row]')?.innerText");
    assert!(!row.as_str().unwrap().is_empty());
    p.no_errors();
}

#[test]
fn approve_then_reject_an_escalation() {
    let Some(b) = browser("approve_then_reject_an_escalation") else {
        return;
    };
    let mut p = Page::new(&b, "02-approval");
    let server = MockServer::start().answer_untooled("Escalations");
    let escalate = |id: &str, cmd: &str| {
        Reply::tool_call(id, "bash", &json!({"command": cmd, "description": "network", "sandbox_permissions": "danger-full-access", "justification": "download the crate index"}).to_string())
    };
    server.push_all([
        escalate("call_a", "echo approved-run"),
        escalate("call_b", "echo rejected-run"),
        text_reply("Both handled."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("do the network things");
    let card = p.wait("document.querySelector('[data-testid=approval]')?.innerText");
    assert!(
        card.as_str().unwrap().contains("echo approved-run")
            && card.as_str().unwrap().contains("download the crate index"),
        "{card}"
    );
    p.wait("document.querySelector('[data-testid=session-row]')?.dataset.state === 'approval'");
    // A background tab shows the wait in its title; a screen reader hears it.
    p.wait("document.title === '(1) approval waiting · dsh'");
    p.wait("document.querySelector('[data-testid=live-region]').innerText.includes('approval waiting')");
    p.shot("asked");
    p.click("[data-testid=approve]");
    p.wait("document.querySelector('[data-testid=approval] [data-testid=approval-command]')?.innerText === 'echo rejected-run'");
    p.click("[data-testid=reject]");
    p.turn_ended(1);
    p.wait("!document.querySelector('[data-testid=approval]')");
    p.wait("document.title === 'dsh'");
    let cards = p.js("return [...document.querySelectorAll('[data-testid=tool-card][data-tool=bash]')].map(c => c.innerText)");
    let cards: Vec<String> = serde_json::from_value(cards).unwrap();
    assert!(cards[0].contains("approved-run"), "{cards:?}");
    assert!(cards[1].contains("rejected"), "{cards:?}");
    p.shot("answered");
    p.no_errors();
}

#[test]
fn steer_during_a_turn_then_cancel_the_next() {
    let Some(b) = browser("steer_during_a_turn_then_cancel_the_next") else {
        return;
    };
    let mut p = Page::new(&b, "03-steer-cancel");
    let server = MockServer::start().answer_untooled("Steering");
    let first = Gate::new();
    let never = Gate::new();
    server.push_all([
        Reply::tool_call(
            "call_1",
            "bash",
            &json!({"command": "echo working", "description": "work"}).to_string(),
        )
        .hold_after_event(1, &first),
        text_reply("Noted the extra request."),
        text_reply("This is cut short by cancel").hold_after_event(2, &never),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("first task");
    p.wait("document.querySelector('[data-testid=conversation]').classList.contains('is-running')");
    p.send("also do X");
    let queued = p.wait("document.querySelector('[data-testid=queued]')?.innerText");
    assert!(queued.as_str().unwrap().contains("also do X"), "{queued}");
    assert_eq!(
        p.js("return document.querySelector('[data-testid=queued]').dataset.placement"),
        "steering"
    );
    p.shot("steering-pending");
    first.open();
    p.turn_ended(1);
    p.wait("!document.querySelector('[data-testid=queued]')");
    let users = p.js(
        "return [...document.querySelectorAll('[data-testid=user-message] .bubble')].map(e => e.innerText)",
    );
    assert_eq!(users, json!(["first task", "also do X"]));
    let second = &server.requests()[1];
    assert!(
        second.body.contains("also do X"),
        "the steer reached the next request"
    );
    p.shot("steered");

    // Cancel a running turn.
    p.send("now a long answer");
    p.wait("[...document.querySelectorAll('[data-testid=assistant-text]')].some(e => e.innerText.startsWith('This i'))");
    p.click("[data-testid=stop]");
    p.turn_ended(2);
    assert_eq!(
        p.js(
            "return [...document.querySelectorAll('[data-testid=turn-end]')].pop().dataset.reason"
        ),
        "aborted"
    );
    p.wait(
        "!document.querySelector('[data-testid=conversation]').classList.contains('is-running')",
    );
    p.shot("cancelled");
    p.no_errors();
}

#[test]
fn fork_archive_restore_and_delete_sessions() {
    let Some(b) = browser("fork_archive_restore_and_delete_sessions") else {
        return;
    };
    let mut p = Page::new(&b, "04-manage");
    let server = MockServer::start().answer_untooled("Managed session");
    server.push_all([text_reply("First answer."), text_reply("Second answer.")]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("question one");
    p.turn_ended(1);
    p.send("question two");
    p.turn_ended(2);
    let parent =
        p.js("return document.querySelector('[data-testid=conversation]').dataset.session");

    // Fork from the first turn: the child shows that prefix only; the parent is unchanged.
    // The button is clicked as an element, not at its coordinates: an event arriving after
    // the turn (its title, say) keeps the conversation pinned to its end, and a pointer
    // click aimed at the first turn could land where the page has just scrolled away from.
    p.wait("document.querySelector('[data-testid=fork-turn]')");
    p.js("document.querySelector('[data-testid=fork-turn]').click(); return true");
    p.wait(&format!(
        "document.querySelector('[data-testid=conversation]')?.dataset.session !== {parent}"
    ));
    p.turn_ended(1);
    let child = p.js("return document.querySelector('[data-testid=conversation]').dataset.session");
    let child_text = p.js("return document.querySelector('[data-testid=conv-body]').innerText");
    assert!(child_text.as_str().unwrap().contains("First answer."));
    assert!(!child_text.as_str().unwrap().contains("Second answer."));
    p.wait(&format!("document.querySelectorAll('[data-testid=session-row]').length === 2 && !!document.querySelector('[data-testid=session-row][data-session={child}]')"));
    // The fork is nested under its parent, in the workspace's group.
    p.wait(&format!("document.querySelector('[data-testid=session-group] [data-testid=session-row][data-session={child}]')?.dataset.parent === {parent}"));
    assert_eq!(
        p.js("return [...document.querySelectorAll('[data-testid=session-group]')].map(g => g.querySelectorAll('[data-testid=session-row]').length)"),
        json!([2]),
        "one workspace group holds both"
    );
    p.shot("forked");

    // Rename the fork, then find the parent by the text of its second answer.
    p.click("[data-testid=rename]");
    p.wait("document.querySelector('[data-testid=rename-dialog] [data-testid=dialog-input]')");
    p.js("document.querySelector('[data-testid=rename-dialog] [data-testid=dialog-input]').value = ''; return true");
    p.type_text(
        "[data-testid=rename-dialog] [data-testid=dialog-input]",
        "Forked copy",
    );
    p.click("[data-testid=rename-dialog] [data-testid=dialog-confirm]");
    p.wait(&format!("document.querySelector('[data-testid=conv-title]').innerText === 'Forked copy' && document.querySelector('[data-testid=session-row][data-session={child}] .row-title')?.innerText === 'Forked copy'"));
    p.type_text("[data-testid=search]", "second answer");
    p.type_text("[data-testid=search]", ENTER);
    // An empty result list is not "done": wait until the search has answered with rows.
    let found = p.wait("(() => { const s = [...document.querySelectorAll('[data-testid=search-snippet]')].map(e => e.closest('[data-session]').dataset.session); return s.length ? s : null; })()");
    assert_eq!(
        found,
        json!([parent]),
        "full-text search finds only the parent"
    );
    p.shot("search");
    p.js("const s = document.querySelector('[data-testid=search]'); s.value = ''; s.dispatchEvent(new Event('input')); return true");

    // Archive: gone from the list, shown under Archived; restore brings it back.
    p.click("[data-testid=archive]");
    p.wait(&format!(
        "!document.querySelector('[data-testid=session-list] [data-session={child}]')"
    ));
    p.click("[data-testid=toggle-archived]");
    p.wait(&format!(
        "!!document.querySelector('[data-testid=archived-list] [data-session={child}]')"
    ));
    p.shot("archived");
    p.click("[data-testid=restore]");
    p.wait(&format!("!!document.querySelector('[data-testid=session-list] [data-session={child}]') && !document.querySelector('[data-testid=archived-list] [data-session={child}]')"));

    // Delete, with confirmation.
    let files = dsh_persistence::SessionFiles::new(
        web.home.path().join(".dsh/sessions"),
        dsh_persistence::Compression::Zstd,
        dsh_persistence::ChunkPacking::Packed,
    );
    let dir = files
        .find(child.as_str().unwrap())
        .unwrap()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    p.click("[data-testid=delete]");
    let question = p.wait("document.querySelector('[data-testid=delete-dialog]')?.innerText");
    assert!(
        question
            .as_str()
            .unwrap()
            .contains("deletes its log from disk")
    );
    p.shot("delete-confirm");
    p.click("[data-testid=dialog-confirm]");
    p.wait(&format!("!document.querySelector('[data-session={child}]') && !!document.querySelector('[data-testid=home]')"));
    assert!(!dir.exists());
    let registry =
        std::fs::read_to_string(web.home.path().join(".dsh/storages/workspace.json")).unwrap();
    assert!(!registry.contains(child.as_str().unwrap()));
    p.shot("deleted");
    // The parent is intact and opens.
    p.click(&format!("[data-testid=session-row][data-session={parent}]"));
    p.turn_ended(2);
    p.no_errors();
}

#[test]
fn a_reload_mid_turn_continues_without_gaps_or_duplicates() {
    let Some(b) = browser("a_reload_mid_turn_continues_without_gaps_or_duplicates") else {
        return;
    };
    let mut p = Page::new(&b, "05-reload");
    let server = MockServer::start().answer_untooled("Reload");
    let gate = Gate::new();
    let answer = "Alpha beta gamma delta epsilon zeta eta theta iota kappa.";
    server.push(
        Reply::completion(Completion::text(answer).delta_chars(4)).hold_after_event(6, &gate),
    );
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("stream slowly");
    p.wait("[...document.querySelectorAll('[data-testid=assistant-text]')].some(e => e.innerText.startsWith('Alpha'))");
    let before = p.js("return document.querySelector('[data-testid=assistant-text]').innerText");
    b.refresh().unwrap();
    p.wait("window.__dsh && window.__dsh.ready");
    let after = p.wait("document.querySelector('[data-testid=assistant-text]')?.innerText");
    assert_eq!(after, before, "the partial answer survives the reload");
    p.shot("reloaded-mid-turn");
    gate.open();
    p.turn_ended(1);
    let texts = p.js("return [...document.querySelectorAll('[data-testid=assistant-text]')].map(e => e.innerText.trim())");
    assert_eq!(texts, json!([answer]), "the answer appears exactly once");
    let seqs = p.js("return [...document.querySelectorAll('[data-seq]')].map(e => e.dataset.seq)");
    let seqs: Vec<String> = serde_json::from_value(seqs).unwrap();
    let mut unique = seqs.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        seqs.len(),
        "no event rendered twice: {seqs:?}"
    );
    p.shot("finished");
    p.no_errors();
}

#[test]
fn bad_input_shows_clear_messages_and_other_sessions_keep_working() {
    let Some(b) = browser("bad_input_shows_clear_messages_and_other_sessions_keep_working") else {
        return;
    };
    let mut p = Page::new(&b, "06-errors");
    // A model endpoint that refuses connections.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    // A session log that cannot be read sits beside the others.
    let broken = home.path().join(".dsh/sessions/--broken--/session-broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(
        broken.join("session.v4.jsonl.zstd"),
        b"this is not a session log",
    )
    .unwrap();
    let web = Web::start_in(home, work, &dead_url, &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.wait("!!document.querySelector('[data-testid=session-row][data-state=unreadable]')");
    p.choose_launch_workspace();
    p.start_task("hello?");
    // While the requests are retried, the page says so and why.
    let retry = p.wait("document.querySelector('[data-testid=retry]')?.innerText");
    assert!(
        retry.as_str().unwrap().contains("connection refused"),
        "{retry}"
    );
    p.turn_ended(1);
    let banner =
        p.wait("document.querySelector('[data-testid=agent-error]:not(.hidden)')?.innerText");
    assert!(
        banner.as_str().unwrap().contains("could not be reached"),
        "{banner}"
    );
    let end = p.js("return document.querySelector('[data-testid=turn-end]').innerText");
    assert!(
        end.as_str().unwrap().contains("could not be reached"),
        "{end}"
    );
    assert_eq!(
        p.js("return document.querySelector('[data-testid=turn-end]').dataset.reason"),
        "error"
    );
    p.shot("model-unreachable");
    // The unreadable session opens to a clear message; the failed one still opens.
    p.click("[data-testid=session-row][data-state=unreadable]");
    let msg = p.wait("document.querySelector('[data-testid=agent-error]:not(.hidden)')?.innerText");
    assert!(
        msg.as_str()
            .unwrap()
            .to_lowercase()
            .contains("cannot be opened")
            || msg.as_str().unwrap().contains("corrupt"),
        "{msg}"
    );
    p.shot("unreadable-session");
    p.click("[data-testid=session-row]:not([data-state=unreadable])");
    p.turn_ended(1);
    // A workspace whose directory vanished disables the composer with the reason.
    let gone = tempfile::tempdir().unwrap();
    let gone_path = std::fs::canonicalize(gone.path())
        .unwrap()
        .display()
        .to_string();
    b.goto(&format!("{}/#/", web.base)).unwrap();
    p.wait("window.__dsh && window.__dsh.booted");
    p.click("[data-testid=add-workspace]");
    p.wait("document.querySelector('[data-testid=workspace-path]')");
    p.js(&format!(
        "document.querySelector('[data-testid=workspace-path]').value = {gone_path:?}; document.querySelector('[data-testid=workspace-path]').dispatchEvent(new Event('input')); return true"
    ));
    p.click("[data-testid=workspace-add-confirm]");
    p.wait(&format!(
        "document.querySelector('[data-testid=workspace-note]')?.innerText === {gone_path:?}"
    ));
    drop(gone);
    b.refresh().unwrap();
    p.wait("window.__dsh && window.__dsh.booted");
    let note = p.wait("document.querySelector('[data-testid=home-input]')?.disabled && document.querySelector('[data-testid=home-note]').innerText");
    assert!(
        note.as_str().unwrap().contains("no longer exists"),
        "{note}"
    );
    p.shot("workspace-missing");
    // Removing the workspace unregisters it and leaves the files alone.
    p.click("[data-testid=remove-workspace]");
    p.click("[data-testid=remove-workspace-dialog] [data-testid=dialog-confirm]");
    p.wait("![...document.querySelectorAll('[data-testid=workspace-select] option')].some(o => o.innerText.includes('directory missing')) && document.querySelector('[data-testid=workspace-select]').value === ''");
    let registry =
        std::fs::read_to_string(web.home.path().join(".dsh/storages/workspace.json")).unwrap();
    assert!(!registry.contains(&gone_path), "{registry}");
    p.no_errors();
}

/// Makes a PNG (or another type) in the page with a canvas and hands it to the composer
/// the way a user's drop or paste would; returns the image's base64.
fn image_intake_script(
    event: &str,
    target: &str,
    color: &str,
    w: u32,
    h: u32,
    name: &str,
) -> String {
    format!(
        r#"const c = document.createElement('canvas'); c.width = {w}; c.height = {h};
const g = c.getContext('2d'); g.fillStyle = {color:?}; g.fillRect(0, 0, {w}, {h});
g.fillStyle = '#ffffff'; g.fillRect(4, 4, {w} / 3, {h} / 3);
const url = c.toDataURL('image/png'); const b64 = url.slice(url.indexOf(',') + 1);
const bin = atob(b64); const bytes = new Uint8Array(bin.length);
for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
const dt = new DataTransfer();
dt.items.add(new File([bytes], {name:?}, {{ type: 'image/png' }}));
if ({event:?} === 'drop') {{
  dt.items.add(new File(['plain words'], 'notes.txt', {{ type: 'text/plain' }}));
  const target = document.querySelector({target:?});
  target.dispatchEvent(new DragEvent('dragover', {{ dataTransfer: dt, bubbles: true, cancelable: true }}));
  target.dispatchEvent(new DragEvent('drop', {{ dataTransfer: dt, bubbles: true, cancelable: true }}));
}} else {{
  const input = document.querySelector({target:?});
  input.dispatchEvent(new ClipboardEvent('paste', {{ clipboardData: dt, bubbles: true, cancelable: true }}));
}}
return b64;"#
    )
}

#[test]
fn drop_and_paste_images_into_the_composer_send_them_and_see_them_in_the_conversation() {
    let Some(b) = browser(
        "drop_and_paste_images_into_the_composer_send_them_and_see_them_in_the_conversation",
    ) else {
        return;
    };
    let mut p = Page::new(&b, "07-images");
    let server = MockServer::start().answer_untooled("Pictures");
    server.push_all([
        text_reply("Ready for pictures."),
        text_reply("A red picture with a white corner."),
    ]);
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".dsh")).unwrap();
    std::fs::write(
        home.path().join(".dsh/settings.yaml"),
        "agent-default-model:\n  provider: deepseek-official\n  model: deepseek-flash\n",
    )
    .unwrap();
    let web = Web::start_in(home, work, &server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    // The first task can carry an image too (pasted into the home composer).
    let green = p.js(&image_intake_script(
        "paste",
        "[data-testid=home-input]",
        "#20a040",
        30,
        30,
        "green.png",
    ));
    p.wait("document.querySelectorAll('[data-testid=draft-thumb]').length === 1");
    p.start_task("I will show you pictures");
    p.turn_ended(1);
    p.wait("document.querySelector('[data-testid=user-message] [data-testid=message-image]')?.dataset.loaded === 'true'");
    let first = server
        .requests()
        .into_iter()
        .find(|r| r.body.contains("I will show you pictures"))
        .expect("the first task reached the model");
    assert!(
        first.body.contains(green.as_str().unwrap()),
        "the pasted PNG reached the model"
    );

    // A drop: the image joins the composer, the text file is refused with a message.
    let red = p.js(&image_intake_script(
        "drop",
        "[data-testid=composer]",
        "#d03030",
        90,
        60,
        "red.png",
    ));
    let red = red.as_str().unwrap().to_string();
    p.wait("document.querySelectorAll('[data-testid=draft-thumb]').length === 1");
    let refused = p.wait("[...document.querySelectorAll('[data-testid=toast]')].map(t => t.innerText).find(t => t.includes('notes.txt'))");
    assert!(
        refused
            .as_str()
            .unwrap()
            .contains("not a PNG, JPEG, WebP or GIF"),
        "{refused}"
    );
    // A paste adds a second one after it; removing it leaves the first.
    p.js(&image_intake_script(
        "paste",
        "[data-testid=composer-input]",
        "#3050d0",
        40,
        40,
        "blue.png",
    ));
    p.wait("document.querySelectorAll('[data-testid=draft-thumb]').length === 2");
    assert_eq!(
        p.js("return [...document.querySelectorAll('[data-testid=draft-thumb]')].map(i => i.alt)"),
        json!(["red.png", "blue.png"])
    );
    p.type_text("[data-testid=composer-input]", "what is in this picture?");
    p.shot("draft-thumbnails");
    p.click("[data-draft]:last-child [data-testid=draft-remove]");
    p.wait("document.querySelectorAll('[data-testid=draft-thumb]').length === 1");

    // A send that fails keeps the text and the image in the composer.
    p.js("const real = window.fetch; window.fetch = (url, init) => { window.fetch = real; return String(url).includes('session.prompt') ? Promise.reject(new TypeError('offline')) : real(url, init); }; return true");
    p.type_text("[data-testid=composer-input]", ENTER);
    p.wait("[...document.querySelectorAll('[data-testid=toast]')].some(t => t.innerText.includes('not reachable'))");
    p.wait("document.querySelector('[data-testid=composer-input]').value === 'what is in this picture?' && document.querySelectorAll('[data-testid=draft-thumb]').length === 1");

    // The real send: the image shows in the conversation, read back from the store.
    p.type_text("[data-testid=composer-input]", ENTER);
    p.turn_ended(2);
    p.wait("document.querySelectorAll('[data-testid=draft-thumb]').length === 0 && document.querySelector('[data-testid=composer-input]').value === ''");
    p.wait("[...document.querySelectorAll('[data-testid=user-message]')].pop().querySelector('[data-testid=message-image]')?.dataset.loaded === 'true'");
    let shown = p.js("const i = [...document.querySelectorAll('[data-testid=user-message]')].pop().querySelector('[data-testid=message-image] img'); const r = i.getBoundingClientRect(); return [i.naturalWidth, i.naturalHeight, Math.round(r.width), Math.round(r.height)]");
    assert_eq!(shown, json!([90, 60, 90, 60]), "natural size, not enlarged");
    let texts = p.js(
        "return [...document.querySelectorAll('[data-testid=user-message] .bubble')].map(e => e.innerText.trim())",
    );
    assert_eq!(
        texts,
        json!(["I will show you pictures", "what is in this picture?"])
    );
    p.shot("image-sent");

    // A click opens the original; Escape closes it.
    let sent = p.js("return [...document.querySelectorAll('[data-testid=user-message]')].pop().querySelector('[data-testid=message-image]').dataset.attachment");
    p.click(&format!(
        "[data-testid=message-image][data-attachment={:?}]",
        sent.as_str().unwrap()
    ));
    p.wait("document.querySelector('[data-testid=image-viewer]')?.open && document.querySelector('[data-testid=viewer-image]').complete");
    p.shot("image-viewer");
    p.type_text("[data-testid=viewer-close]", "\u{E00C}");
    p.wait("!document.querySelector('[data-testid=image-viewer]')");

    // The mock model received the image the user dropped, as a data URL.
    let request = server
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.body.contains("what is in this picture?"))
        .expect("the image prompt reached the model");
    assert!(
        request.body.contains(red.as_str()),
        "the dropped PNG reached the model"
    );
    assert!(
        !request.body.contains("blue"),
        "the removed image stayed out"
    );
    p.no_errors();
}

#[test]
fn answer_a_question_from_the_model_by_clicking_an_option() {
    let Some(b) = browser("answer_a_question_from_the_model_by_clicking_an_option") else {
        return;
    };
    let mut p = Page::new(&b, "09-question");
    let server = MockServer::start().answer_untooled("Questions");
    server.push_all([
        Reply::tool_call(
            "call_q",
            "ask_user_question",
            &json!({"questions": [{"id": "db", "header": "Storage", "question": "Which database should the cache use?",
                "options": [{"label": "SQLite", "description": "one file, no server"}, {"label": "Postgres"}]}]})
            .to_string(),
        ),
        text_reply("Going with SQLite."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("set up the cache");
    let card = p.wait("document.querySelector('[data-testid=question]')?.innerText");
    let card = card.as_str().unwrap();
    assert!(
        card.contains("Which database should the cache use?")
            && card.contains("one file, no server"),
        "{card}"
    );
    p.wait("document.querySelector('[data-testid=session-row]')?.dataset.state === 'question'");
    p.shot("asked");
    p.click("[data-testid=question-option][value=SQLite]");
    p.click("[data-testid=question-submit]");
    p.wait("[...document.querySelectorAll('[data-testid=assistant-text]')].some(e => e.innerText.includes('Going with SQLite.'))");
    p.wait("!document.querySelector('[data-testid=question]')");
    p.turn_ended(1);
    let answer = server.requests()[1].last_tool_output().unwrap_or_default();
    assert_eq!(answer, r#"{"answers":[{"id":"db","selected":["SQLite"]}]}"#);
    p.shot("answered");
    p.no_errors();
}

#[test]
fn approve_a_plan_from_its_review_card() {
    let Some(b) = browser("approve_a_plan_from_its_review_card") else {
        return;
    };
    let mut p = Page::new(&b, "10-plan-review");
    let server = MockServer::start().answer_untooled("Plans");
    server.push_all([
        Reply::tool_call(
            "call_p",
            "exit_plan_mode",
            &json!({"plan": "# Cache plan\n\n1. add a **map**\n2. evict the oldest"}).to_string(),
        ),
        text_reply("Carrying out the cache plan."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("/plan");
    p.send("design a cache");
    let plan = p.wait("document.querySelector('[data-testid=plan-review]')?.innerText");
    let plan = plan.as_str().unwrap();
    assert!(
        plan.contains("Cache plan") && plan.contains("evict the oldest"),
        "{plan}"
    );
    assert_eq!(
        p.js("return document.querySelector('[data-testid=plan-review] strong')?.innerText"),
        json!("map"),
        "the plan is rendered as markdown"
    );
    p.shot("review");
    p.click("[data-testid=plan-approve]");
    p.wait("[...document.querySelectorAll('[data-testid=assistant-text]')].some(e => e.innerText.includes('Carrying out the cache plan.'))");
    p.wait("!document.querySelector('[data-testid=question]')");
    let result = server.requests()[1].last_tool_output().unwrap_or_default();
    assert!(result.contains("Plan approved"), "{result}");
    p.shot("approved");
    p.no_errors();
}

/// The keyboard presses what has focus on approval and question cards: Enter on Reject
/// rejects (it used to approve, granting `danger-full-access`), Enter on Approve approves,
/// Escape rejects, and Enter on "Reply in chat instead" dismisses instead of sending the
/// option that happens to be selected.
#[test]
fn the_keyboard_on_approval_and_question_cards_presses_what_has_focus() {
    let Some(b) = browser("the_keyboard_on_approval_and_question_cards_presses_what_has_focus")
    else {
        return;
    };
    let mut p = Page::new(&b, "11-keyboard-cards");
    let server = MockServer::start().answer_untooled("Keyboard");
    let escalate = |id: &str, cmd: &str| {
        Reply::tool_call(id, "bash", &json!({"command": cmd, "description": "network", "sandbox_permissions": "danger-full-access", "justification": "needs the network"}).to_string())
    };
    server.push_all([
        escalate("call_tab", "echo tab-enter-run"),
        escalate("call_enter", "echo enter-run"),
        escalate("call_esc", "echo escape-run"),
        Reply::tool_call(
            "call_q",
            "ask_user_question",
            &json!({"questions": [{"id": "db", "question": "Which database?",
                "options": [{"label": "SQLite"}, {"label": "Postgres"}]}]})
            .to_string(),
        ),
        text_reply("All answered."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("run the network commands");
    let current = |cmd: &str| {
        format!(
            "document.querySelector('[data-testid=approval] [data-testid=approval-command]')?.innerText === {cmd:?}"
        )
    };

    // Focus on Approve, Tab to Reject, Enter: rejected.
    p.wait(&current("echo tab-enter-run"));
    p.js("document.querySelector('[data-testid=approval] [data-testid=approve]').focus(); return true");
    b.press(&[TAB]).unwrap();
    assert_eq!(
        p.js("return document.activeElement.dataset.testid"),
        json!("reject")
    );
    p.shot("reject-focused");
    b.press(&[ENTER]).unwrap();
    // Enter on Approve approves.
    p.wait(&current("echo enter-run"));
    p.js("document.querySelector('[data-testid=approval] [data-testid=approve]').focus(); return true");
    b.press(&[ENTER]).unwrap();
    // Escape on the card rejects.
    p.wait(&current("echo escape-run"));
    p.js("document.querySelector('[data-testid=approval]').focus(); return true");
    b.press(&[ESCAPE]).unwrap();

    // The question: an option is selected, then Enter on "Reply in chat instead".
    p.click("[data-testid=question-option][value=SQLite]");
    p.js("document.querySelector('[data-testid=question-dismiss]').focus(); return true");
    b.press(&[ENTER]).unwrap();
    p.turn_ended(1);
    let cards = p.js("return [...document.querySelectorAll('[data-testid=tool-card][data-tool=bash]')].map(c => c.innerText)");
    let cards: Vec<String> = serde_json::from_value(cards).unwrap();
    assert!(cards[0].contains("rejected"), "Enter on Reject: {cards:?}");
    assert!(
        cards[1].contains("enter-run") && !cards[1].contains("rejected"),
        "Enter on Approve: {cards:?}"
    );
    assert!(cards[2].contains("rejected"), "Escape: {cards:?}");
    let answer = server.requests()[4].last_tool_output().unwrap_or_default();
    assert!(
        !answer.contains("SQLite"),
        "Enter on the dismiss button must not send the selected option: {answer}"
    );
    p.shot("answered");
    p.no_errors();
}

/// Enter in the Rename and Add-workspace dialogs does what the dialog's button does, once:
/// the dialog closes and stays closed (the same Enter used to press the button that had
/// opened it, reopening the dialog).
#[test]
fn enter_in_a_dialog_confirms_it_once() {
    let Some(b) = browser("enter_in_a_dialog_confirms_it_once") else {
        return;
    };
    let mut p = Page::new(&b, "12-dialog-enter");
    let server = MockServer::start().answer_untooled("Dialogs");
    server.push(text_reply("Done."));
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    // Add a workspace by typing its path and pressing Enter, from the keyboard.
    let other = tempfile::tempdir().unwrap();
    let other_path = std::fs::canonicalize(other.path())
        .unwrap()
        .display()
        .to_string();
    p.js("document.querySelector('[data-testid=add-workspace]').focus(); return true");
    b.press(&[ENTER]).unwrap();
    // The dialog fills the field with the directory it lists first, unless the user typed
    // already; clearing it from script is no typing, so wait for that listing to land
    // (a slow one would otherwise be written under the typed path).
    p.wait("document.querySelector('[data-testid=workspace-path]')?.value");
    p.js("document.querySelector('[data-testid=workspace-path]').value = ''; return true");
    p.type_text("[data-testid=workspace-path]", &other_path);
    b.press(&[ENTER]).unwrap();
    p.wait(&format!(
        "document.querySelector('[data-testid=workspace-note]')?.innerText === {other_path:?}"
    ));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        p.js("return !!document.querySelector('[data-testid=workspace-dialog]')"),
        json!(false),
        "the workspace dialog reopened"
    );
    p.start_task("hello");
    p.turn_ended(1);
    // Rename by keyboard: focus Rename, Enter, type, Enter.
    p.js("document.querySelector('[data-testid=rename]').focus(); return true");
    b.press(&[ENTER]).unwrap();
    p.wait("document.activeElement?.dataset.testid === 'dialog-input'");
    p.js("document.querySelector('[data-testid=rename-dialog] [data-testid=dialog-input]').select(); return true");
    b.press(&["Renamed by keyboard", ENTER]).unwrap();
    p.wait(
        "document.querySelector('[data-testid=conv-title]').innerText === 'Renamed by keyboard'",
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        p.js("return !!document.querySelector('[data-testid=rename-dialog]')"),
        json!(false),
        "the rename dialog reopened"
    );
    p.wait("document.querySelector('[data-testid=session-row] .row-title')?.innerText === 'Renamed by keyboard'");
    p.shot("renamed");
    p.no_errors();
}

/// Answers render as CommonMark + GFM: intraword underscores and arithmetic stay as
/// written, nested lists nest, tables keep their header row, an unlabelled fence is plain
/// and a labelled one is highlighted; raw HTML and script links stay inert.
#[test]
fn markdown_renders_as_commonmark_and_gfm_and_stays_inert() {
    let Some(b) = browser("markdown_renders_as_commonmark_and_gfm_and_stays_inert") else {
        return;
    };
    let mut p = Page::new(&b, "13-markdown");
    let server = MockServer::start().answer_untooled("Markdown");
    let answer = "Set my_var_name first; 2*3*4 is 24 and **bold** stays bold.\n\n\
        - outer\n  - inner one\n  - inner two\n- [x] checked task\n\n\
        | Name | Size |\n|:-----|-----:|\n| alpha | 1 |\n| beta | 22 |\n\n\
        ```\nif this were C it would be coloured\n```\n\n\
        ```rust\nfn main() { let x = 1; }\n```\n\n\
        <img src=x onerror=\"window.__pwned=1\"> &amp; done\n\n\
        [click](javascript:window.__pwned=2) and [docs](https://example.com/docs)\n";
    server.push(text_reply(answer));
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("show markdown");
    p.turn_ended(1);
    let md = "document.querySelector('[data-testid=assistant-text] .md')";
    p.wait(md);
    let text = p.js(&format!("return {md}.innerText"));
    let text = text.as_str().unwrap();
    assert!(text.contains("my_var_name"), "{text}");
    assert!(text.contains("2*3*4 is 24"), "{text}");
    assert_eq!(
        p.js(&format!("return {md}.querySelector('strong')?.innerText")),
        json!("bold")
    );
    assert_eq!(
        p.js(&format!(
            "return [...{md}.querySelectorAll('ul ul > li')].map(e => e.innerText)"
        )),
        json!(["inner one", "inner two"]),
        "the nested list nests"
    );
    assert_eq!(
        p.js(&format!(
            "return {md}.querySelector('li.task input[type=checkbox]')?.checked"
        )),
        json!(true)
    );
    assert_eq!(
        p.js(&format!(
            "return [...{md}.querySelectorAll('table thead th')].map(e => e.innerText)"
        )),
        json!(["Name", "Size"]),
        "the table keeps its header row"
    );
    assert_eq!(
        p.js(&format!(
            "return {md}.querySelectorAll('table tbody tr').length"
        )),
        json!(2)
    );
    assert_eq!(
        p.js(&format!(
            "return {md}.querySelector('pre.code[data-lang=\"\"]')?.querySelectorAll('span').length"
        )),
        json!(0),
        "an unlabelled fence stays plain"
    );
    assert_eq!(
        p.js(&format!(
            "return {md}.querySelector('pre.code[data-lang=rust] .tok-kw')?.innerText"
        )),
        json!("fn")
    );
    // Raw HTML is text, a javascript: link is no link, an http(s) link is one.
    assert!(text.contains("<img src=x"), "{text}");
    assert!(text.contains("& done"), "{text}");
    assert_eq!(
        p.js(&format!("return {md}.querySelectorAll('img').length")),
        json!(0)
    );
    assert_eq!(
        p.js(&format!(
            "return [...{md}.querySelectorAll('a')].map(a => a.getAttribute('href'))"
        )),
        json!(["https://example.com/docs"])
    );
    assert_eq!(p.js("return window.__pwned === undefined"), json!(true));
    p.shot("rendered");
    p.no_errors();
}

fn at_end() -> &'static str {
    "(b => b.scrollHeight > b.clientHeight + 200 && b.scrollHeight - b.scrollTop - b.clientHeight < 8)(document.querySelector('[data-testid=conv-body]'))"
}

/// A long conversation opens and reloads at its end, follows new output while the reader
/// is at the end, leaves a reader who scrolled up where they are, and sending a message
/// brings the end back into view.
#[test]
fn the_conversation_opens_at_its_end_and_follows_new_output() {
    let Some(b) = browser("the_conversation_opens_at_its_end_and_follows_new_output") else {
        return;
    };
    let mut p = Page::new(&b, "14-scroll");
    let server = MockServer::start().answer_untooled("Scrolling");
    let mut replies: Vec<Reply> = (0..14)
        .map(|i| {
            Reply::tool_call(
                &format!("call_{i}"),
                "bash",
                &json!({"command": format!("seq 1 12; echo step-{i}"), "description": "count"})
                    .to_string(),
            )
        })
        .collect();
    replies.push(text_reply("Counted everything."));
    server.push_all(replies);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("count a lot");
    p.turn_ended(1);
    p.wait(at_end());
    let session =
        p.js("return document.querySelector('[data-testid=conversation]').dataset.session");
    // Reload: the end is in view.
    b.refresh().unwrap();
    p.wait("window.__dsh && window.__dsh.ready");
    p.wait(at_end());
    p.shot("reloaded-at-end");
    // Open it from the home page: the end again.
    b.goto(&format!("{}/#/", web.base)).unwrap();
    p.wait("window.__dsh && window.__dsh.booted");
    p.click(&format!(
        "[data-testid=session-row][data-session={session}]"
    ));
    p.turn_ended(1);
    p.wait(at_end());

    // A reader who scrolled up is not pulled down by new output.
    let gate = Gate::new();
    server.push_all([
        Reply::tool_call(
            "call_more",
            "bash",
            &json!({"command": "seq 1 30", "description": "more"}).to_string(),
        )
        .hold_after_event(1, &gate),
        text_reply("More counted."),
        text_reply("Third answer."),
    ]);
    p.js("document.querySelector('[data-testid=conv-body]').scrollTop = 0; return true");
    p.wait("document.querySelector('[data-testid=conv-body]').scrollTop === 0");
    // Sending brings the end into view and follows the turn.
    p.send("count more");
    p.wait("document.querySelector('[data-testid=conversation]').classList.contains('is-running')");
    p.wait(at_end());
    p.js("document.querySelector('[data-testid=conv-body]').scrollTop = 0; return true");
    std::thread::sleep(Duration::from_millis(200));
    gate.open();
    p.turn_ended(2);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        p.js("return document.querySelector('[data-testid=conv-body]').scrollTop"),
        json!(0),
        "the reader who scrolled up stays where they are"
    );
    // Back at the end by hand: following resumes.
    p.js("const b = document.querySelector('[data-testid=conv-body]'); b.scrollTop = b.scrollHeight; return true");
    p.send("once more");
    p.turn_ended(3);
    p.wait(at_end());
    p.shot("followed");
    p.no_errors();
}

/// A provider error shows where the user looks and goes away when fixed: a refused key
/// shows the banner; the next turn, which meets a server error and is retried, shows the
/// retry with its cause while it waits, and its success clears the banner.
#[test]
fn a_retry_shows_its_cause_and_a_later_success_clears_the_error() {
    let Some(b) = browser("a_retry_shows_its_cause_and_a_later_success_clears_the_error") else {
        return;
    };
    let mut p = Page::new(&b, "15-retry-banner");
    let server = MockServer::start().answer_untooled("Errors");
    server.push_all([
        Reply::error_json(
            401,
            "Authentication Fails, Your api key is invalid",
            "authentication_error",
            None,
        ),
        Reply::error_json(503, "the server is overloaded", "server_error", None),
        text_reply("Back in business."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("first try");
    p.turn_ended(1);
    let banner =
        p.wait("document.querySelector('[data-testid=agent-error]:not(.hidden)')?.innerText");
    assert!(banner.as_str().unwrap().contains("API key"), "{banner}");
    p.send("second try");
    let retry = p.wait("document.querySelector('[data-testid=retry]')?.innerText");
    assert!(
        retry.as_str().unwrap().contains("overloaded")
            && retry.as_str().unwrap().contains("Retry 1"),
        "{retry}"
    );
    p.shot("retrying");
    p.turn_ended(2);
    p.wait("[...document.querySelectorAll('[data-testid=assistant-text]')].some(e => e.innerText.includes('Back in business.'))");
    p.wait("document.querySelector('[data-testid=agent-error]').classList.contains('hidden')");
    // The retry row stays in the conversation after a reload.
    b.refresh().unwrap();
    p.wait("window.__dsh && window.__dsh.ready");
    p.wait("document.querySelector('[data-testid=retry]')");
    p.shot("recovered");
    p.no_errors();
}

fn inside_viewport(css: &str) -> String {
    format!(
        "(e => {{ if (!e) return false; const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= window.innerWidth + 0.5 && r.top >= 0 && r.bottom <= window.innerHeight + 0.5; }})(document.querySelector({css:?}))"
    )
}

/// At phone width (390×844) the sessions, settings and workspaces are a drawer behind the
/// menu button; the title, the actions and the dialogs fit the screen.
#[test]
fn a_phone_gets_a_drawer_and_everything_fits() {
    let Some(b) = browser("a_phone_gets_a_drawer_and_everything_fits") else {
        return;
    };
    let mut p = Page::new(&b, "16-phone");
    b.set_window_size(390, 844).unwrap();
    let server = MockServer::start().answer_untooled("Phone");
    server.push_all([
        text_reply("First on the phone."),
        text_reply("Second on the phone."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.wait("window.innerWidth <= 400");
    p.wait(&inside_viewport("[data-testid=menu]"));
    assert_eq!(
        p.js(&format!(
            "return {}",
            inside_viewport("[data-testid=add-workspace]")
        )),
        json!(false),
        "the drawer starts closed"
    );
    // Open the drawer and choose the workspace from it.
    p.click("[data-testid=menu]");
    p.wait(&inside_viewport("[data-testid=add-workspace]"));
    p.shot("drawer");
    p.click("[data-testid=add-workspace]");
    p.wait(&inside_viewport("[data-testid=workspace-dialog]"));
    p.shot("workspace-dialog");
    p.click("[data-testid=use-cwd]");
    p.wait("document.querySelector('[data-testid=workspace-select]').value !== ''");
    // A tap beside the drawer closes it.
    let width = p.js("return window.innerWidth").as_u64().unwrap() as u32;
    b.click_at(width - 10, 400).unwrap();
    p.wait(&format!(
        "!{}",
        inside_viewport("[data-testid=add-workspace]")
    ));
    p.start_task("hello from a phone");
    p.turn_ended(1);
    // The header is complete (its directory line shifts the buttons when it arrives).
    p.wait("document.querySelector('[data-testid=conv-cwd]')?.innerText");
    p.wait(&inside_viewport("[data-testid=conv-title]"));
    for control in ["rename", "fork", "archive", "delete", "send"] {
        p.wait(&inside_viewport(&format!("[data-testid={control}]")));
    }
    p.shot("conversation");
    // The rename dialog fits.
    p.click("[data-testid=rename]");
    p.wait(&inside_viewport("[data-testid=rename-dialog]"));
    p.click("[data-testid=rename-dialog] [data-testid=dialog-cancel]");
    // Back home through the drawer, then to the session again and to Settings.
    p.click("[data-testid=menu]");
    p.wait(&inside_viewport("[data-testid=new-session]"));
    p.click("[data-testid=new-session]");
    p.wait("!!document.querySelector('[data-testid=home]')");
    p.wait(&format!(
        "!{}",
        inside_viewport("[data-testid=new-session]")
    ));
    p.click("[data-testid=menu]");
    p.wait(&inside_viewport("[data-testid=session-row]"));
    p.click("[data-testid=session-row]");
    p.turn_ended(1);
    p.wait(&format!(
        "!{}",
        inside_viewport("[data-testid=session-row]")
    ));
    p.send("again");
    p.turn_ended(2);
    p.click("[data-testid=menu]");
    p.wait(&inside_viewport("[data-testid=nav-settings]"));
    p.click("[data-testid=nav-settings]");
    p.wait("!!document.querySelector('[data-testid=key-status]')");
    p.wait(&inside_viewport("[data-testid=key-status]"));
    p.shot("settings");
    assert_eq!(
        p.js("return document.documentElement.scrollWidth <= window.innerWidth"),
        json!(true),
        "nothing scrolls sideways"
    );
    p.no_errors();
}

/// Slash commands answer where they were typed, once: `/help` on the start page answers
/// there (no blank session is left behind), `/permission` in a conversation shows its reply
/// once, and the reply survives a reload when the command is recorded in the log.
#[test]
fn slash_commands_answer_where_they_were_typed_once() {
    let Some(b) = browser("slash_commands_answer_where_they_were_typed_once") else {
        return;
    };
    let mut p = Page::new(&b, "17-commands");
    let server = MockServer::start().answer_untooled("Commands");
    server.push(text_reply("Hello back."));
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.type_text("[data-testid=home-input]", "/help");
    p.type_text("[data-testid=home-input]", ENTER);
    let help = p.wait("document.querySelector('[data-testid=home] [data-testid=command-reply]:not([hidden])')?.innerText");
    assert!(help.as_str().unwrap().contains("/permission"), "{help}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        p.js("return !!document.querySelector('[data-testid=home]') && document.querySelectorAll('[data-testid=session-row]').length"),
        json!(0),
        "/help leaves no blank session behind"
    );
    p.shot("help-on-home");
    p.start_task("hello");
    p.turn_ended(1);
    p.send("/permission");
    p.wait("document.querySelectorAll('[data-testid=conv-body] [data-testid=command-reply]').length >= 1");
    std::thread::sleep(Duration::from_millis(500));
    let replies = p.js("return [...document.querySelectorAll('[data-testid=conv-body] [data-testid=command-reply]')].map(e => e.innerText)");
    assert_eq!(
        replies.as_array().unwrap().len(),
        1,
        "the reply shows once: {replies}"
    );
    b.refresh().unwrap();
    p.wait("window.__dsh && window.__dsh.ready");
    p.wait("document.querySelectorAll('[data-testid=conv-body] [data-testid=command-reply]').length === 1");
    p.shot("permission");
    p.no_errors();
}

/// The first task on a machine without an API key: the page says in plain words what to do
/// and where (a link to Settings → Models), once; saving the key there makes the next
/// message work and clears the advice.
#[test]
fn a_first_run_without_a_key_says_what_to_do() {
    let Some(b) = browser("a_first_run_without_a_key_says_what_to_do") else {
        return;
    };
    let mut p = Page::new(&b, "18-no-key");
    let server = MockServer::start().answer_untooled("No key");
    server.push(text_reply("Now I can answer."));
    let web = Web::start(&server.url(), &[]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("hello");
    p.turn_ended(1);
    let advice = p.wait("document.querySelector('[data-testid=error-advice]')?.innerText");
    let advice = advice.as_str().unwrap();
    assert!(
        advice.contains("API key")
            && advice.contains("Settings")
            && advice.contains("DEEPSEEK_API_KEY"),
        "{advice}"
    );
    let visible = p.js("return document.querySelector('[data-testid=conversation]').innerText");
    let visible = visible.as_str().unwrap();
    assert!(
        !visible.contains("provider route") && !visible.contains("llm-deepseek"),
        "internals stay behind Details: {visible}"
    );
    assert_eq!(
        visible.matches("dsh needs an API key").count(),
        1,
        "the advice shows once: {visible}"
    );
    p.shot("advice");
    let session =
        p.js("return document.querySelector('[data-testid=conversation]').dataset.session");
    p.click("[data-testid=error-settings]");
    p.wait("document.querySelector('[data-testid=key-status]')?.dataset.configured === 'false'");
    p.type_text("[data-testid=deepseek-key]", "sk-saved-later");
    p.click("[data-testid=save-key]");
    p.wait("document.querySelector('[data-testid=key-status]')?.dataset.configured === 'true'");
    p.click(&format!(
        "[data-testid=session-row][data-session={session}]"
    ));
    p.turn_ended(1);
    p.send("hello again");
    p.turn_ended(2);
    p.wait("[...document.querySelectorAll('[data-testid=assistant-text]')].some(e => e.innerText.includes('Now I can answer.'))");
    p.wait("document.querySelector('[data-testid=agent-error]').classList.contains('hidden')");
    assert_eq!(server.requests()[0].api_key(), Some("sk-saved-later"));
    p.shot("answered");
    p.no_errors();
}

fn choose(p: &Page, select: &str, value: &str) {
    p.wait(&format!("[...document.querySelectorAll('[data-testid={select}] option')].some(o => o.value === {value:?})"));
    p.js(&format!("const s = document.querySelector('[data-testid={select}]'); s.value = {value:?}; s.dispatchEvent(new Event('change')); return true"));
}

/// The model, its reasoning effort and the permission mode are chosen in the conversation's
/// header: the next request runs on them (the request header logs the route), the turn says
/// which model answered, and a reload shows the choices still in force.
#[test]
fn choose_the_model_effort_and_permission_mode_for_the_next_message() {
    let Some(b) = browser("choose_the_model_effort_and_permission_mode_for_the_next_message")
    else {
        return;
    };
    let mut p = Page::new(&b, "19-model-mode");
    let server = MockServer::start().answer_untooled("Choices");
    server.push_all([
        text_reply("Answered on the default."),
        text_reply("Answered on pro."),
        Reply::tool_call(
            "call_w",
            "write",
            &json!({"file_path": "blocked.txt", "content": "x"}).to_string(),
        ),
        text_reply("Could not write."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("first");
    p.turn_ended(1);
    let model = |i: usize| {
        let body: Value = serde_json::from_str(&server.requests()[i].body).unwrap();
        body["model"].as_str().unwrap_or_default().to_string()
    };
    let first = model(0);
    p.wait(&format!(
        "document.querySelector('[data-testid=answered-by]')?.innerText === {first:?}"
    ));
    p.wait(&format!("JSON.parse(document.querySelector('[data-testid=model-select]').value || '[]')[1] === {first:?}"));
    let other = if first == "deepseek-v4-pro" {
        "deepseek-flash"
    } else {
        "deepseek-v4-pro"
    };
    choose(
        &p,
        "model-select",
        &json!(["deepseek-official", other]).to_string(),
    );
    p.wait(&format!(
        "JSON.parse(document.querySelector('[data-testid=model-select]').value)[1] === {other:?}"
    ));
    // The effort offered for that model, when it reasons.
    let efforts = p.js("return [...document.querySelectorAll('[data-testid=effort-select] option')].map(o => o.value)");
    let efforts: Vec<String> = serde_json::from_value(efforts).unwrap();
    let effort = efforts.last().cloned();
    if let Some(effort) = &effort {
        choose(&p, "effort-select", effort);
        p.wait(&format!(
            "document.querySelector('[data-testid=effort-select]').value === {effort:?}"
        ));
    }
    p.shot("chosen");
    p.send("second");
    p.turn_ended(2);
    assert_eq!(model(1), other, "the next request runs on the chosen model");
    if let Some(effort) = &effort {
        assert!(
            server.requests()[1].body.contains(effort.as_str()),
            "the chosen effort reaches the request: {}",
            server.requests()[1].body
        );
    }
    p.wait(&format!(
        "[...document.querySelectorAll('[data-testid=answered-by]')].pop()?.innerText === {other:?}"
    ));

    // Read-only from the header: the next write is refused by the mode.
    choose(&p, "mode-select", "read-only");
    p.wait("document.querySelector('[data-testid=conversation]').dataset.mode === 'read-only'");
    p.send("write a file");
    p.turn_ended(3);
    assert!(!web.work.path().join("blocked.txt").exists());
    // A reload keeps every choice.
    b.refresh().unwrap();
    p.wait("window.__dsh && window.__dsh.ready");
    p.wait(&format!("JSON.parse(document.querySelector('[data-testid=model-select]').value || '[]')[1] === {other:?}"));
    p.wait("document.querySelector('[data-testid=mode-select]').value === 'read-only'");
    p.shot("reloaded");
    p.no_errors();
}

/// Composer surfaces: the `/` menu lists the session's commands and completes by keyboard;
/// while a turn runs, Queue keeps a message for a turn of its own (Send would steer).
#[test]
fn the_slash_menu_completes_and_queue_waits_for_its_own_turn() {
    let Some(b) = browser("the_slash_menu_completes_and_queue_waits_for_its_own_turn") else {
        return;
    };
    let mut p = Page::new(&b, "20-slash-queue");
    let server = MockServer::start().answer_untooled("Composer");
    let gate = Gate::new();
    server.push_all([
        text_reply("Ready."),
        Reply::tool_call(
            "call_1",
            "bash",
            &json!({"command": "echo busy", "description": "work"}).to_string(),
        )
        .hold_after_event(1, &gate),
        text_reply("First turn done."),
        text_reply("Queued turn done."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("hello");
    p.turn_ended(1);
    // `/pe` offers /permission; ↓/↑ and Tab complete it; Escape closes the menu.
    p.type_text("[data-testid=composer-input]", "/pe");
    let listed = p.wait("(a => a.length ? a : null)([...document.querySelectorAll('[data-testid=slash-item]')].map(e => e.dataset.name))");
    assert!(
        listed.as_array().unwrap().iter().any(|n| n == "permission"),
        "{listed}"
    );
    p.shot("slash-menu");
    b.press(&[TAB]).unwrap();
    p.wait("document.querySelector('[data-testid=composer-input]').value.startsWith('/pe') && document.querySelector('[data-testid=composer-input]').value.endsWith(' ')");
    p.wait("document.querySelector('[data-testid=slash-menu]').classList.contains('hidden')");
    p.js("const i = document.querySelector('[data-testid=composer-input]'); i.value = ''; return true");
    p.type_text("[data-testid=composer-input]", "/");
    p.wait("document.querySelectorAll('[data-testid=slash-item]').length > 1");
    b.press(&[ESCAPE]).unwrap();
    p.wait("document.querySelector('[data-testid=slash-menu]').classList.contains('hidden')");
    p.js("const i = document.querySelector('[data-testid=composer-input]'); i.value = ''; return true");

    // `@` mentions: files of the workspace (not ignored ones), completed into the text.
    std::fs::create_dir_all(web.work.path().join("src/net")).unwrap();
    std::fs::write(web.work.path().join("src/net/socket.rs"), "// socket\n").unwrap();
    std::fs::create_dir_all(web.work.path().join("target")).unwrap();
    std::fs::write(web.work.path().join("target/socket.d"), "x").unwrap();
    std::fs::write(web.work.path().join(".gitignore"), "target/\n").unwrap();
    p.type_text("[data-testid=composer-input]", "look at @sock");
    let files = p.wait("(a => a.length ? a : null)([...document.querySelectorAll('[data-testid=file-item]')].map(e => e.dataset.name))");
    assert_eq!(files, json!(["src/net/socket.rs"]), "{files}");
    p.shot("file-menu");
    b.press(&[ENTER]).unwrap();
    p.wait("document.querySelector('[data-testid=composer-input]').value === 'look at @src/net/socket.rs '");
    p.js("const i = document.querySelector('[data-testid=composer-input]'); i.value = ''; return true");

    // Queue during a running turn.
    p.send("do the work");
    p.wait("document.querySelector('[data-testid=conversation]').classList.contains('is-running')");
    p.type_text("[data-testid=composer-input]", "afterwards, summarize");
    p.click("[data-testid=queue-send]");
    let queued = p.wait("document.querySelector('[data-testid=queued]')?.dataset.placement");
    assert_ne!(queued, json!("steering"), "Queue does not steer");
    p.shot("queued");
    gate.open();
    p.turn_ended(3);
    let users = p.js(
        "return [...document.querySelectorAll('[data-testid=turn]')].map(t => [...t.querySelectorAll('[data-testid=user-message] .bubble')].map(e => e.innerText))",
    );
    assert_eq!(
        users,
        json!([["hello"], ["do the work"], ["afterwards, summarize"]]),
        "the queued message ran as a turn of its own"
    );
    p.no_errors();
}

/// A turn's record: which files it changed (with line counts), its steps with durations and
/// tokens, a Retry on a failed turn, the compaction row of `/compact`, and Edit on a
/// message, which opens a new session with the conversation before it and the text ready.
#[test]
fn a_turn_shows_changes_steps_retry_compaction_and_edit() {
    let Some(b) = browser("a_turn_shows_changes_steps_retry_compaction_and_edit") else {
        return;
    };
    let mut p = Page::new(&b, "21-turn-record");
    let server = MockServer::start()
        .answer_untooled("Record")
        .answer_compaction("Summary: a file was edited and a retry happened.");
    server.push_all([
        Reply::tool_call(
            "call_w",
            "write",
            &json!({"file_path": "notes.txt", "content": "one\ntwo\n"}).to_string(),
        ),
        text_reply("Wrote notes."),
        Reply::error_json(
            400,
            "the request was malformed",
            "invalid_request_error",
            None,
        ),
        text_reply("Second try worked."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("write notes");
    p.turn_ended(1);
    let changed = p.wait("(a => a.length ? a : null)([...document.querySelectorAll('[data-testid=changed-file]')].map(e => e.innerText))");
    assert_eq!(changed, json!(["notes.txt +2 −0"]), "{changed}");
    let steps = p.wait("document.querySelectorAll('[data-testid=trajectory-step]').length");
    assert_eq!(steps, json!(2));
    let summary =
        p.js("return document.querySelector('[data-testid=trajectory] summary').innerText");
    assert!(
        summary.as_str().unwrap().starts_with("2 steps"),
        "{summary}"
    );
    p.shot("changes-and-steps");

    // A failed turn offers Retry, which sends its message again.
    p.send("explain the notes");
    p.turn_ended(2);
    p.click("[data-testid=turn]:nth-of-type(2) [data-testid=retry-turn]");
    p.turn_ended(3);
    p.wait("[...document.querySelectorAll('[data-testid=assistant-text]')].some(e => e.innerText.includes('Second try worked.'))");
    assert!(server.requests()[3].body.contains("explain the notes"));
    // The outline lists the turns, the failed one marked; a click brings a turn into view.
    let outline = p.wait("(a => a.length >= 3 ? a : null)([...document.querySelectorAll('[data-testid=outline-item]')].map(e => [e.innerText, e.dataset.state]))");
    assert_eq!(
        outline,
        json!([
            ["write notes", "completed"],
            ["explain the notes", "error"],
            ["explain the notes", "completed"]
        ])
    );
    p.click("[data-testid=outline-item]");
    p.wait("(() => { const n = document.querySelector('[data-testid=outline-item]').dataset.turn; const t = document.querySelector(`[data-testid=turn][data-turn=\"${n}\"]`).getBoundingClientRect(); const b = document.querySelector('[data-testid=conv-body]').getBoundingClientRect(); return Math.abs(t.top - b.top) < 40; })()");

    // /compact: a row says what happened.
    p.send("/compact");
    let row = p.wait("(() => { const r = document.querySelector('[data-testid=compaction]'); return r && r.dataset.state && r.innerText; })()");
    assert!(row.as_str().unwrap().contains("summarized"), "{row}");
    p.shot("compaction");

    // Edit the second message: a new session with turn 1 only, the text in its composer.
    let parent =
        p.js("return document.querySelector('[data-testid=conversation]').dataset.session");
    p.click("[data-testid=turn]:nth-of-type(2) [data-testid=edit-message]");
    p.wait(&format!(
        "document.querySelector('[data-testid=conversation]')?.dataset.session !== {parent}"
    ));
    p.wait("document.querySelector('[data-testid=composer-input]').value === 'explain the notes'");
    p.turn_ended(1);
    assert_eq!(
        p.js("return document.querySelectorAll('[data-testid=turn-end]').length"),
        json!(1),
        "the new session holds the conversation before the edited message"
    );
    p.shot("edit");
    p.no_errors();
}

/// Every visible text's contrast ratio against its background, below 4.5:1 (WCAG AA);
/// disabled controls are exempt, as WCAG allows.
const LOW_CONTRAST: &str = r#"(() => {
  const parse = (c) => (c.match(/[\d.]+/g) || ['0', '0', '0']).map(Number);
  const lum = (c) => { const [r, g, b] = parse(c).slice(0, 3).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const alpha = (c) => { const m = parse(c); return m.length > 3 ? m[3] : 1; };
  const bgOf = (el) => { for (let e = el; e; e = e.parentElement) { const c = getComputedStyle(e).backgroundColor; if (alpha(c) > 0.5) return c; } return 'rgb(255, 255, 255)'; };
  const bad = [];
  const seen = new Set();
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const t = walker.currentNode;
    const el = t.parentElement;
    if (!t.data.trim() || !el || seen.has(el)) continue;
    seen.add(el);
    const r = el.getBoundingClientRect();
    const cs = getComputedStyle(el);
    if (!r.width || !r.height || cs.visibility === 'hidden' || el.closest('[disabled], .sr-only, .skip-link, option, select')) continue;
    const a = lum(cs.color); const b = lum(bgOf(el));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) bad.push(`${el.tagName.toLowerCase()}.${el.className}: ${ratio.toFixed(2)} "${t.data.trim().slice(0, 24)}" ${cs.color} on ${bgOf(el)}`);
  }
  return bad;
})()"#;

/// Keyboard and eyes: a skip link first in the tab order reaches the message box; focus is
/// visible; text (code tokens, notes, badges, diffs) keeps 4.5:1 contrast in the light and
/// the dark theme; every button has a name.
#[test]
fn text_contrast_focus_and_names_hold_in_both_themes() {
    let Some(b) = browser("text_contrast_focus_and_names_hold_in_both_themes") else {
        return;
    };
    let mut p = Page::new(&b, "22-a11y");
    let server = MockServer::start().answer_untooled("Contrast");
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    std::fs::write(web.work.path().join("f.txt"), "alpha\nbeta\n").unwrap();
    server.push_all([
        Reply::tool_call("call_e", "edit", &json!({"file_path": "f.txt", "old_string": "beta", "new_string": "gamma"}).to_string()),
        Reply::tool_call("call_t", "todo_write", &json!({"todos": [{"content": "Check contrast", "status": "in_progress"}]}).to_string()),
        text_reply("Done:\n\n```rust\n// a comment\nfn main() { let s = \"text\"; let n = 42; let ok = true; }\n```\n\n> quoted `code`\n"),
    ]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("check the colours");
    p.turn_ended(1);
    p.wait("document.querySelector('pre.code .tok-com')");
    for dark in [false, true] {
        b.emulate_dark(dark).unwrap();
        p.wait(&format!(
            "matchMedia('(prefers-color-scheme: dark)').matches === {dark}"
        ));
        let bad = p.js(&format!("return {LOW_CONTRAST}"));
        assert_eq!(bad, json!([]), "low contrast (dark: {dark})");
        p.shot(if dark { "dark" } else { "light" });
    }
    b.emulate_dark(false).unwrap();
    // Every button says what it does.
    let unnamed = p.js("return [...document.querySelectorAll('button')].filter(b => b.getClientRects().length && !(b.innerText.trim() || b.getAttribute('aria-label') || b.title)).map(b => b.outerHTML.slice(0, 80))");
    assert_eq!(unnamed, json!([]));
    // The skip link comes first and moves focus to the message box.
    b.refresh().unwrap();
    p.wait("window.__dsh && window.__dsh.ready");
    b.press(&[TAB]).unwrap();
    assert_eq!(
        p.js("return document.activeElement.dataset.testid"),
        json!("skip-link")
    );
    p.shot("skip-link");
    b.press(&[ENTER]).unwrap();
    p.wait("document.activeElement?.dataset.testid === 'composer-input'");
    // Focus is visible on a keyboard-focused button.
    b.press(&[SHIFT, TAB]).unwrap();
    let outline = p.js("return getComputedStyle(document.activeElement).outlineStyle");
    assert_ne!(outline, json!("none"), "focus is visible");
    // Settings in both themes too.
    p.click("[data-testid=nav-settings]");
    p.wait("document.querySelector('[data-testid=key-status]')");
    for dark in [false, true] {
        b.emulate_dark(dark).unwrap();
        p.wait(&format!(
            "matchMedia('(prefers-color-scheme: dark)').matches === {dark}"
        ));
        let bad = p.js(&format!("return {LOW_CONTRAST}"));
        assert_eq!(bad, json!([]), "low contrast on Settings (dark: {dark})");
    }
    p.no_errors();
}

/// Export: the transcript downloads as Markdown with the messages, the tool call and how
/// the turn ended; the event log downloads as JSONL, one event per line.
#[test]
fn a_session_exports_as_a_transcript_and_an_event_log() {
    let Some(b) = browser("a_session_exports_as_a_transcript_and_an_event_log") else {
        return;
    };
    let mut p = Page::new(&b, "23-export");
    let server = MockServer::start().answer_untooled("Export");
    server.push_all([
        Reply::tool_call(
            "call_x",
            "bash",
            &json!({"command": "echo exported-output", "description": "echo"}).to_string(),
        ),
        text_reply("All **done**."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    let downloads = tempfile::tempdir().unwrap();
    p.sign_in(&web);
    b.allow_downloads(downloads.path()).unwrap();
    p.choose_launch_workspace();
    p.start_task("export me");
    p.turn_ended(1);
    let wait_file = |ext: &str| -> String {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let found = std::fs::read_dir(downloads.path())
                .unwrap()
                .filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == ext));
            if let Some(path) = found
                && let Ok(text) = std::fs::read_to_string(&path)
                && !text.is_empty()
            {
                return text;
            }
            assert!(std::time::Instant::now() < deadline, "no .{ext} download");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    p.click("[data-testid=export]");
    p.shot("export-dialog");
    p.click("[data-testid=export-markdown]");
    let md = wait_file("md");
    for needle in [
        "## You",
        "export me",
        "**Tool call: bash**",
        "echo exported-output",
        "exported-output\n",
        "All **done**.",
        "*Turn completed.*",
    ] {
        assert!(md.contains(needle), "{needle:?} missing from:\n{md}");
    }
    p.click("[data-testid=export]");
    p.click("[data-testid=export-jsonl]");
    let jsonl = wait_file("jsonl");
    let lines: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.iter().any(|e| e["type"] == "turn/end"), "{jsonl}");
    assert!(
        lines
            .windows(2)
            .all(|w| w[0]["seq"].as_u64() < w[1]["seq"].as_u64())
    );
    p.no_errors();
}

/// `present`: the model hands a file over; the page shows a card whose Download gets the
/// file's bytes; a path the session did not present is not served; presenting a missing
/// file is an error the model sees.
#[test]
fn presented_files_become_deliverable_cards_the_user_downloads() {
    let Some(b) = browser("presented_files_become_deliverable_cards_the_user_downloads") else {
        return;
    };
    let mut p = Page::new(&b, "24-present");
    let server = MockServer::start().answer_untooled("Present");
    server.push_all([
        Reply::tool_call(
            "call_w",
            "write",
            &json!({"file_path": "report.csv", "content": "a,b\n1,2\n"}).to_string(),
        ),
        Reply::tool_call(
            "call_p",
            "present",
            &json!({"files": [{"path": "report.csv", "description": "The numbers"}]}).to_string(),
        ),
        Reply::tool_call(
            "call_m",
            "present",
            &json!({"files": [{"path": "missing.pdf"}]}).to_string(),
        ),
        text_reply("Here is the report."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    std::fs::write(web.work.path().join("secret.txt"), "not presented").unwrap();
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("make a report");
    p.turn_ended(1);
    let card = p.wait("document.querySelector('[data-testid=deliverable]')?.innerText");
    assert!(
        card.as_str().unwrap().contains("report.csv")
            && card.as_str().unwrap().contains("The numbers"),
        "{card}"
    );
    p.shot("deliverable");
    let got = p.wait("(() => { if (window.__got === undefined) { window.__got = null; fetch(document.querySelector('[data-testid=deliverable-download]').getAttribute('href')).then(async r => { window.__got = [r.status, r.headers.get('content-disposition'), await r.text()]; }); } return window.__got; })()");
    assert_eq!(got[0], json!(200));
    assert!(got[1].as_str().unwrap().starts_with("attachment"), "{got}");
    assert_eq!(got[2], json!("a,b\n1,2\n"));
    let session =
        p.js("return document.querySelector('[data-testid=conversation]').dataset.session");
    let secret = web.work_path() + "/secret.txt";
    let refused = p.wait(&format!("(() => {{ if (window.__no === undefined) {{ window.__no = null; fetch('api/deliverable?session=' + encodeURIComponent({session}) + '&path=' + encodeURIComponent({secret:?})).then(r => {{ window.__no = r.status; }}); }} return window.__no; }})()"));
    assert_eq!(
        refused,
        json!(404),
        "a file the session did not present is not served"
    );
    let missing = server.requests()[3].last_tool_output().unwrap_or_default();
    assert!(missing.contains("missing.pdf does not exist"), "{missing}");
    p.no_errors();
}

/// Reminders the model sets show in the session's rail (rule and next time), a click
/// deletes one, and the other comes due into the conversation as a reminder message that
/// runs a turn. The page sends the browser's time zone, and the model's clock reading is in
/// it.
#[test]
fn reminders_show_in_the_rail_come_due_in_the_conversation_and_can_be_deleted() {
    let Some(b) =
        browser("reminders_show_in_the_rail_come_due_in_the_conversation_and_can_be_deleted")
    else {
        return;
    };
    b.emulate_time_zone("Asia/Tokyo").unwrap();
    let mut p = Page::new(&b, "25-reminders");
    let server = MockServer::start().answer_untooled("Reminders");
    server.push_all([
        Reply::tool_call(
            "call_a",
            "schedule_create",
            &json!({"prompt": "check whether the nightly build passed", "title": "Check nightly build", "after_seconds": 4}).to_string(),
        ),
        Reply::tool_call(
            "call_b",
            "schedule_create",
            &json!({"prompt": "write the weekly report", "title": "Weekly report",
                    "weekly": {"time": "09:00:00", "time_zone": "Asia/Tokyo", "weekdays": [1, 5]}}).to_string(),
        ),
        text_reply("Two reminders are set."),
        text_reply("The nightly build passed."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("remind me of the build and the report");
    p.turn_ended(1);
    p.wait(
        "document.querySelectorAll('[data-testid=reminders] [data-testid=reminder]').length === 2",
    );
    let rail = p.js("return document.querySelector('[data-testid=reminders]').innerText");
    let rail = rail.as_str().unwrap();
    assert!(
        rail.contains("Check nightly build") && rail.contains("once"),
        "{rail}"
    );
    assert!(
        rail.contains("Weekly report") && rail.contains("Mon, Fri 09:00 Asia/Tokyo"),
        "{rail}"
    );
    let cards = p.js("return [...document.querySelectorAll('[data-testid=reminder-card]')].map(c => c.firstChild.textContent)");
    assert!(
        cards[0]
            .as_str()
            .unwrap()
            .starts_with("Reminder: Check nightly build · once · next"),
        "{cards}"
    );
    assert!(
        cards[1]
            .as_str()
            .unwrap()
            .starts_with("Reminder: Weekly report · Mon, Fri 09:00 Asia/Tokyo"),
        "{cards}"
    );
    p.shot("rail");
    let seen = server.requests().iter().any(|r| {
        Value::from(r.messages())
            .to_string()
            .contains("+09:00[Asia/Tokyo]")
    });
    assert!(
        seen,
        "no request carried a clock reading in the browser's zone"
    );
    // Delete the weekly one from the rail.
    p.js("[...document.querySelectorAll('[data-testid=reminder]')].find(li => li.innerText.includes('Weekly report')).querySelector('[data-testid=reminder-delete]').click()");
    p.wait("(() => { const l = [...document.querySelectorAll('[data-testid=reminder]')]; return l.length === 1 && l[0].innerText.includes('Check nightly build'); })()");
    // The one-shot comes due: a reminder message runs a turn; the rail empties.
    let text = p.wait("document.querySelector('[data-testid=reminder-message]')?.innerText");
    assert!(
        text.as_str()
            .unwrap()
            .contains("check whether the nightly build passed"),
        "{text}"
    );
    assert!(
        !text.as_str().unwrap().contains("[scheduled"),
        "the frame is not shown: {text}"
    );
    p.turn_ended(2);
    p.wait("document.querySelector('[data-testid=reminders]').classList.contains('hidden')");
    p.shot("delivered");
    let last = Value::from(server.requests().last().unwrap().messages()).to_string();
    assert!(
        last.contains("check whether the nightly build passed"),
        "{last}"
    );
    assert!(!last.contains("write the weekly report\\\"\\n"), "{last}");
    p.no_errors();
}

/// In a git workspace the turn's changed files come from snapshots, so a change made by a
/// shell command is listed too; a click shows the file's diff.
#[test]
fn changes_made_by_a_shell_command_are_listed_with_their_diff() {
    let Some(b) = browser("changes_made_by_a_shell_command_are_listed_with_their_diff") else {
        return;
    };
    let mut p = Page::new(&b, "26-workspace-changes");
    let server = MockServer::start().answer_untooled("Changes");
    server.push_all([
        Reply::tool_call(
            "call_b",
            "bash",
            &json!({"command": "sed -i 's/one/uno/' a.txt && echo fresh > b.txt", "description": "edit by shell"}).to_string(),
        ),
        text_reply("Edited by the shell."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    let work = web.work.path();
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .arg("-C")
            .arg(work)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    std::fs::write(work.join("a.txt"), "one\ntwo\n").unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "start"]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("edit with the shell");
    p.turn_ended(1);
    p.wait("document.querySelector('[data-testid=changed-files][data-source=workspace]')");
    let summary =
        p.js("return document.querySelector('[data-testid=changed-files] summary').textContent");
    assert_eq!(summary, json!("2 files changed · +2 −1"));
    let files = p.js("return [...document.querySelectorAll('[data-testid=changed-file]')].map(li => li.innerText.split('\\n')[0])");
    assert_eq!(files, json!(["a.txt +1 −1", "b.txt +1 −0"]));
    p.js("document.querySelector('[data-testid=changed-file-open]').click()");
    let diff = p.wait("document.querySelector('[data-testid=changed-diff]')?.innerText");
    let diff = diff.as_str().unwrap();
    assert!(
        diff.contains("-one") && diff.contains("+uno") && diff.contains(" two"),
        "{diff}"
    );
    p.shot("diff");
    p.no_errors();
}

/// A connected MCP server's resources are in the `@` menu; the chosen reference sends the
/// resource's text with the message, shown folded under it.
#[test]
fn an_mcp_resource_is_referenced_from_the_at_menu() {
    let Some(b) = browser("an_mcp_resource_is_referenced_from_the_at_menu") else {
        return;
    };
    let Some(script) = dsh_test_support::prereq::everything_server() else {
        return;
    };
    let mut p = Page::new(&b, "27-mcp-resource");
    let server = MockServer::start().answer_untooled("Resource");
    server.push_all([
        text_reply("Hello."),
        text_reply("It describes the architecture."),
    ]);
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("mcp.yml"),
        dsh_test_support::prereq::everything_patch(&script),
    )
    .unwrap();
    let web = Web::launch(
        home,
        work,
        &server.url(),
        &[("DEEPSEEK_API_KEY", "sk-x")],
        &["--patch", "mcp.yml"],
    );
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("hello");
    p.turn_ended(1);
    // The server may still be connecting: type until its resource is offered.
    let mut offered = Value::Null;
    for _ in 0..50 {
        p.js("const i = document.querySelector('[data-testid=composer-input]'); i.value = ''; return true");
        p.type_text("[data-testid=composer-input]", "what does @architect");
        offered = p.wait("(() => { const m = document.querySelector('[data-testid=file-menu]'); return m && !m.classList.contains('hidden') ? [...m.querySelectorAll('[data-testid=file-item]')].map(e => e.dataset.name) : (window.__menuWait = (window.__menuWait || 0) + 1) > 40 ? [] : null; })()");
        if offered.as_array().is_some_and(|a| !a.is_empty()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        p.js("window.__menuWait = 0; return true");
    }
    assert_eq!(
        offered[0],
        json!("everything:demo://resource/static/document/architecture.md"),
        "{offered}"
    );
    p.shot("at-menu");
    b.press(&[ENTER]).unwrap();
    p.wait("document.querySelector('[data-testid=composer-input]').value === 'what does @everything:demo://resource/static/document/architecture.md '");
    p.type_text("[data-testid=composer-input]", "say?");
    p.type_text("[data-testid=composer-input]", ENTER);
    p.turn_ended(2);
    let attached =
        p.wait("document.querySelector('[data-testid=attached-resource] summary')?.textContent");
    assert!(
        attached.as_str().unwrap().starts_with(
            "Resource demo://resource/static/document/architecture.md (text/markdown)"
        ),
        "{attached}"
    );
    let last = Value::from(server.requests().last().unwrap().messages()).to_string();
    assert!(last.contains("from MCP server everything"), "{last}");
    p.shot("attached");
    p.no_errors();
}

/// The agent preset is chosen on the home page for a new session (or in the header before
/// the first message) and shown fixed afterwards; a minimal session is offered only a
/// shell and image reading.
#[test]
fn an_agent_preset_is_chosen_before_the_first_message_and_then_fixed() {
    let Some(b) = browser("an_agent_preset_is_chosen_before_the_first_message_and_then_fixed")
    else {
        return;
    };
    let mut p = Page::new(&b, "28-agent-preset");
    let server = MockServer::start().answer_untooled("Preset");
    server.push_all([
        text_reply("Minimal at your service."),
        text_reply("Standard here."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    p.sign_in(&web);
    p.choose_launch_workspace();
    let options = p.wait("(a => a.length ? a : null)([...document.querySelectorAll('[data-testid=home-preset] option')].map(o => o.value))");
    assert_eq!(options, json!(["standard", "ptc", "minimal"]));
    assert_eq!(
        p.js("return document.querySelector('[data-testid=home-preset]').value"),
        json!("standard")
    );
    p.js("const s = document.querySelector('[data-testid=home-preset]'); s.value = 'minimal'; return true");
    p.shot("home-preset");
    p.start_task("hello");
    p.turn_ended(1);
    p.wait("document.querySelector('[data-testid=preset-select]').value === 'minimal' && document.querySelector('[data-testid=preset-select]').disabled");
    let tools = server
        .requests()
        .into_iter()
        .filter(|r| !r.tool_names().is_empty())
        .map(|r| r.tool_names())
        .next()
        .unwrap();
    assert_eq!(tools, ["bash", "read_image"]);
    p.shot("fixed");
    // Back home for the next session, the default is offered again.
    p.click("[data-testid=new-session]");
    p.wait("document.querySelector('[data-testid=home-preset]')?.value === 'standard'");
    p.no_errors();
}

/// Memory: the model's first write of a session asks (an approval card showing the fact)
/// and that yes covers the rest of the session; the Memory page shows both scopes with the
/// session that wrote each entry, accepts a proposal, edits, forgets and adds.
#[test]
fn memory_asks_once_and_its_page_edits_the_files() {
    let Some(b) = browser("memory_asks_once_and_its_page_edits_the_files") else {
        return;
    };
    let mut p = Page::new(&b, "29-memory");
    let server = MockServer::start().answer_untooled("Memory");
    server.push_all([
        Reply::tool_call(
            "m1",
            "remember",
            &json!({"text": "Run the linters with make lint", "tags": ["lint"]}).to_string(),
        ),
        Reply::tool_call(
            "m2",
            "remember",
            &json!({"text": "Prefers small commits", "scope": "user"}).to_string(),
        ),
        text_reply("Kept both."),
    ]);
    let web = Web::start(&server.url(), &[("DEEPSEEK_API_KEY", "sk-x")]);
    let ws_file = web.work.path().join(".dsh/memory.md");
    std::fs::create_dir_all(ws_file.parent().unwrap()).unwrap();
    std::fs::write(
        &ws_file,
        "# Memory\n\n- The docs build with make docs <!-- dsh-memory id=feedbeef by=harness status=proposed -->\n",
    )
    .unwrap();
    p.sign_in(&web);
    p.choose_launch_workspace();
    p.start_task("keep what matters");
    let card = p.wait("document.querySelector('[data-testid=approval]')?.innerText");
    assert!(
        card.as_str()
            .unwrap()
            .contains("Run the linters with make lint"),
        "{card}"
    );
    assert!(
        card.as_str().unwrap().contains("asked once per session"),
        "{card}"
    );
    p.shot("asked");
    p.click("[data-testid=approve]");
    p.turn_ended(1);
    assert_eq!(
        p.js("return document.querySelectorAll('[data-testid=approval]').length"),
        json!(0)
    );
    let file = std::fs::read_to_string(&ws_file).unwrap();
    assert!(
        file.contains("- Run the linters with make lint <!-- dsh-memory"),
        "{file}"
    );
    let user_file = web.home.path().join(".dsh/memory.md");
    assert!(
        std::fs::read_to_string(&user_file)
            .unwrap()
            .contains("Prefers small commits")
    );
    // One ask for two writes, both audited in the log.
    let files = dsh_persistence::SessionFiles::new(
        web.home.path().join(".dsh/sessions"),
        dsh_persistence::Compression::Zstd,
        dsh_persistence::ChunkPacking::Packed,
    );
    let listed = files.list().unwrap();
    let events = files.inspect(&listed[0].0.id).unwrap().events;
    assert_eq!(events.iter().filter(|e| e.is("approval/asked")).count(), 1);
    assert_eq!(events.iter().filter(|e| e.is("memory/change")).count(), 2);

    // The page.
    p.click("[data-testid=nav-memory]");
    p.wait("document.querySelectorAll('[data-testid=memory-workspace] [data-testid=memory-entry]').length === 2");
    p.wait("document.querySelectorAll('[data-testid=memory-user] [data-testid=memory-entry]').length === 1");
    let origin = p.js("return document.querySelector('[data-testid=memory-workspace] [data-proposed=false] [data-testid=memory-origin]')?.getAttribute('href')");
    assert_eq!(origin, json!(format!("#/s/{}", listed[0].0.id)));
    p.shot("page");
    p.click("[data-testid=memory-entry][data-id=feedbeef] [data-testid=memory-accept]");
    p.wait("document.querySelector('[data-testid=memory-entry][data-id=feedbeef]')?.dataset.proposed === 'false'");
    assert!(
        !std::fs::read_to_string(&ws_file)
            .unwrap()
            .contains("status=proposed")
    );
    // Edit the model's entry.
    p.click("[data-testid=memory-workspace] [data-testid=memory-entry]:not([data-id=feedbeef]) [data-testid=memory-edit]");
    p.js("const a = document.querySelector('[data-testid=memory-edit-input]'); a.value = 'Run the linters with make lint-all'; return true");
    p.click("[data-testid=memory-save]");
    p.wait("[...document.querySelectorAll('[data-testid=memory-text]')].some(t => t.innerText === 'Run the linters with make lint-all')");
    assert!(
        std::fs::read_to_string(&ws_file)
            .unwrap()
            .contains("- Run the linters with make lint-all <!--")
    );
    // Forget the user's entry; add another one there.
    p.click("[data-testid=memory-user] [data-testid=memory-forget]");
    p.wait("!document.querySelector('[data-testid=memory-user]')");
    p.type_text("[data-testid=memory-add-text]", "Answers in English");
    p.js("const s = document.querySelector('[data-testid=memory-add-scope]'); s.value = 'user'; return true");
    p.click("[data-testid=memory-add]");
    p.wait("document.querySelector('[data-testid=memory-user] [data-testid=memory-text]')?.innerText === 'Answers in English'");
    let user = std::fs::read_to_string(&user_file).unwrap();
    assert!(
        !user.contains("Prefers small commits")
            && user.contains("- Answers in English <!-- dsh-memory"),
        "{user}"
    );
    p.shot("edited");
    p.no_errors();
}
