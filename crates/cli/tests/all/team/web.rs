//! `dsh web` in front of a team gateway (`DSH_GATEWAY`): the browser page lists the
//! account's team sessions, starts one, follows its turns as a worker runs them, answers its
//! approvals, reloads it whole, and says what it cannot do for a team session.

use std::io::BufRead as _;

use dsh_test_support::webdriver::ENTER;
use serde_json::json;

use super::*;

/// `dsh web` signed in to `gateway` as the account of `token`; killed on drop.
struct WebFront {
    child: Child,
    url: String,
}

impl Drop for WebFront {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn web_front(run: &Run, server: &MockServer, gateway: &Gateway, token: &str) -> WebFront {
    let mut c = run.base(server);
    c.args(["web", "--no-open", "--port", "0"])
        .env("DSH_GATEWAY", &gateway.url)
        .env("DSH_GATEWAY_TOKEN", token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = c.spawn().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("dsh web: ")
        .unwrap_or_else(|| panic!("dsh web said {line:?}"))
        .to_string();
    WebFront { child, url }
}

#[test]
fn dsh_web_shows_and_drives_the_sessions_of_a_team_gateway() {
    let Some(team) = Team::new() else { return };
    let Some(b) = crate::browser::browser("dsh web over a team gateway") else {
        return;
    };
    let run = Run::new();
    let server = MockServer::with_replies([
        Reply::text("first answer from the team"),
        // Outside the read-only sandbox: the page is asked.
        crate::common::call(
            "w1",
            "bash",
            json!({"command": "echo hi > approved.txt", "description": "write a file",
                   "sandbox_permissions": "danger-full-access", "justification": "the page asked for it"}),
        ),
        Reply::text("the file is written"),
        Reply::text("an answer for another client"),
    ])
    .answer_untooled("Web team session");
    let gateway = run.gateway(&server, &team);
    let token = run.add_user(&server, &team, "webber");
    let _worker = run.worker_env(
        &server,
        &team,
        "web-worker",
        &[],
        &[("DSH_PERMISSION_MODE", "read-only")],
    );
    let web = web_front(&run, &server, &gateway, &token);
    let wait = |predicate: &str| {
        b.wait_for(predicate, Duration::from_secs(60))
            .unwrap_or_else(|e| {
                let _ = b.screenshot(&crate::browser::shots_dir().join("team-web-FAILED.png"));
                panic!("{e}")
            })
    };
    b.goto(&web.url).unwrap();
    wait("window.__dsh && window.__dsh.booted");
    // The team's one workspace is chosen: a task can be typed at once.
    wait("document.querySelector('[data-testid=workspace-select]').value === 'team'");
    b.type_text("[data-testid=home-input]", "a task from dsh web")
        .unwrap();
    b.type_text("[data-testid=home-input]", ENTER).unwrap();
    wait("document.querySelector('[data-testid=conversation]')");
    let conversation = "document.querySelector('[data-testid=conversation]').innerText";
    wait(&format!(
        "{conversation}.includes('first answer from the team')"
    ));
    wait("document.querySelectorAll('[data-testid=turn-end]').length >= 1");
    let url = b.current_url().unwrap();
    let id = url
        .rsplit_once("#/s/")
        .map(|(_, id)| id.to_string())
        .unwrap_or_else(|| panic!("no session in {url}"));
    // The session is the account's on the gateway, with the title the worker gave it.
    wait(&format!(
        "[...document.querySelectorAll('[data-testid=session-row]')].some(r => r.innerText.includes('Web team session'))"
    ));
    // A call the read-only worker may not make is asked about on the page.
    b.type_text("[data-testid=composer-input]", "write the file")
        .unwrap();
    b.type_text("[data-testid=composer-input]", ENTER).unwrap();
    let card = wait("document.querySelector('[data-testid=approval]')?.innerText");
    let card = card.as_str().unwrap_or_default();
    assert!(
        card.contains("echo hi > approved.txt") && card.contains("the page asked for it"),
        "{card}"
    );
    wait("document.title === '(1) approval waiting · dsh'");
    let shots = crate::browser::shots_dir();
    std::fs::create_dir_all(&shots).unwrap();
    b.screenshot(&shots.join("team-web-01-approval.png"))
        .unwrap();
    b.click("[data-testid=approve]").unwrap();
    wait("document.querySelectorAll('[data-testid=turn-end]').length >= 2");
    wait(&format!("{conversation}.includes('the file is written')"));
    wait("!document.querySelector('[data-testid=approval]')");
    assert!(run.work.path().join("approved.txt").exists());
    let events = check_log(&team.events(&id));
    let decided: Vec<String> = events
        .iter()
        .filter(|e| e.is("approval/decided"))
        .map(|e| e.data.as_value()["outcome"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(decided, ["allowed-once"]);
    // A reload shows the whole conversation again, each answer once.
    b.refresh().unwrap();
    wait("window.__dsh && window.__dsh.booted");
    wait(&format!("{conversation}.includes('the file is written')"));
    let shown = b.eval(&format!("return {conversation};"), vec![]).unwrap();
    let shown = shown.as_str().unwrap();
    assert_eq!(
        shown.matches("first answer from the team").count(),
        1,
        "{shown}"
    );
    assert!(shown.contains("a task from dsh web"), "{shown}");
    // A session another client starts shows up in the list without a reload.
    let api = api(&team, &gateway, &token);
    let (status, _) = api(
        reqwest::Method::POST,
        "/v1/sessions",
        Some(json!({"text": "from another client"})),
    );
    assert_eq!(status, 201);
    wait("document.querySelectorAll('[data-testid=session-row]').length === 2");
    b.screenshot(&shots.join("team-web-02-reloaded.png"))
        .unwrap();
    // What belongs to a machine, not to the team, is not offered, and says so if asked.
    let offered = b
        .eval(
            "return ['rename', 'fork', 'delete', 'nav-settings', 'add-workspace'].filter((t) => \
             getComputedStyle(document.querySelector(`[data-testid=${t}]`)).display !== 'none');",
            vec![],
        )
        .unwrap();
    assert_eq!(offered, json!([]));
    let refused = b
        .eval(
            "return fetch('api/session.rename', {method: 'POST', headers: {'content-type': 'application/json'}, \
             body: JSON.stringify({type: 'client-request', rpcId: 'r1', method: 'session.rename', \
             payload: {sessionId: arguments[0], title: 'x'}})}).then((r) => r.json());",
            vec![json!(id)],
        )
        .unwrap();
    let message = refused["result"]["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("session.rename is not available here") && message.contains(&gateway.url),
        "{refused}"
    );
    let errors = b
        .eval("return (window.__dshErrors || []).join('\\n');", vec![])
        .unwrap();
    assert_eq!(errors.as_str().unwrap_or_default(), "", "page errors");
}
