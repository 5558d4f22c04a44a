//! `dsh web` in front of a team gateway (`DSH_GATEWAY`): the browser page lists the
//! account's team sessions, starts one, follows its turns as a worker runs them, answers its
//! approvals, reloads it whole, and says what it cannot do for a team session; a page that
//! reconnects gets every event once, and images (with text or alone) reach the model.

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
    web_front_at(run, server, &gateway.url, token, &[])
}

/// [`web_front`] for a gateway at `url`, with `env` added.
fn web_front_at(
    run: &Run,
    server: &MockServer,
    url: &str,
    token: &str,
    env: &[(&str, &str)],
) -> WebFront {
    let mut c = run.base(server);
    c.args(["web", "--no-open", "--port", "0"])
        .env("DSH_GATEWAY", url)
        .env("DSH_GATEWAY_TOKEN", token)
        .envs(env.iter().copied())
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

/// Signs in to `web` as a page would (the one-time link sets the cookie); returns an HTTP
/// client for its API and the cookie to send.
fn sign_in(team: &Team, web: &WebFront) -> (reqwest::Client, String, String) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let base = web.url.split("/?token=").next().unwrap().to_string();
    let cookie = team.rt.block_on(async {
        let resp = client.get(&web.url).send().await.unwrap();
        assert_eq!(resp.status(), 303, "the sign-in link is taken");
        let set = resp.headers()[reqwest::header::SET_COOKIE]
            .to_str()
            .unwrap();
        set.split(';').next().unwrap().to_string()
    });
    (client, base, cookie)
}

/// Calls method `method` of the signed-in page's API; its `result` (`ok` with `value`, or
/// `error`).
fn rpc(
    team: &Team,
    (client, base, cookie): &(reqwest::Client, String, String),
    method: &str,
    payload: Value,
) -> Value {
    team.rt.block_on(async {
        let body =
            json!({"type": "client-request", "rpcId": "r", "method": method, "payload": payload});
        let resp = client
            .post(format!("{base}/api/{method}"))
            .header("cookie", cookie)
            .json(&body)
            .send()
            .await
            .unwrap();
        resp.json::<Value>().await.unwrap()["result"].clone()
    })
}

/// Queues `text` as session `id`'s next message from the page.
fn queue_text(team: &Team, page: &(reqwest::Client, String, String), id: &str, text: &str) {
    let r = rpc(
        team,
        page,
        "session.prompt",
        json!({"sessionId": id, "mode": "queue", "content": [{"type": "text", "text": text}]}),
    );
    assert_eq!(r["value"]["accepted"], true, "{r}");
}

/// The SSE frames of one `/api/events` connection: `(event, id, data)` until `done` says
/// enough has come (or 60 s passed).
fn frames(
    team: &Team,
    page: &(reqwest::Client, String, String),
    session: &str,
    last_event_id: Option<&str>,
    done: impl Fn(&[(String, Option<String>, Value)]) -> bool,
) -> Vec<(String, Option<String>, Value)> {
    frames_within(
        team,
        page,
        session,
        last_event_id,
        Duration::from_secs(60),
        done,
    )
}

/// [`frames`], failing when `done` is not reached `within`.
fn frames_within(
    team: &Team,
    (client, base, cookie): &(reqwest::Client, String, String),
    session: &str,
    last_event_id: Option<&str>,
    within: Duration,
    done: impl Fn(&[(String, Option<String>, Value)]) -> bool,
) -> Vec<(String, Option<String>, Value)> {
    team.rt.block_on(async {
        let mut req = client
            .get(format!("{base}/api/events?session={session}"))
            .header("cookie", cookie);
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let mut resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let mut out = Vec::new();
        let mut pending = String::new();
        let deadline = tokio::time::Instant::now() + within;
        while !done(&out) {
            let chunk = tokio::time::timeout_at(deadline, resp.chunk())
                .await
                .unwrap_or_else(|_| panic!("timed out; frames so far: {out:?}"))
                .unwrap()
                .expect("the stream stays open");
            pending.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = pending.find("\n\n") {
                let block: String = pending.drain(..end + 2).collect();
                let (mut event, mut id, mut data) = (None, None, None);
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        event = Some(v.to_string());
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        id = Some(v.to_string());
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data = Some(serde_json::from_str(v).unwrap());
                    }
                }
                if let (Some(event), Some(data)) = (event, data) {
                    out.push((event, id, data));
                }
            }
        }
        out
    })
}

/// The events the frames carried, in order (a snapshot's, then each `events` frame's).
fn carried(frames: &[(String, Option<String>, Value)]) -> Vec<Value> {
    frames
        .iter()
        .flat_map(|(event, _, data)| match event.as_str() {
            "snapshot" => data["events"].as_array().cloned().unwrap_or_default(),
            "events" => data.as_array().cloned().unwrap_or_default(),
            _ => Vec::new(),
        })
        .collect()
}

fn turn_ends(frames: &[(String, Option<String>, Value)]) -> usize {
    carried(frames)
        .iter()
        .filter(|e| e["type"] == "turn/end")
        .count()
}

#[test]
fn a_page_reconnecting_to_a_team_session_gets_every_event_once() {
    use base64::Engine;
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    // An image-capable default model on the chat-completions wire (images as data URLs).
    run.settings(&format!(
        "{}agent-default-model:\n  provider: deepseek-official\n  model: deepseek-flash\n",
        crate::images::CHAT_ROUTE
    ));
    let server = MockServer::with_replies([
        Reply::text("turn one"),
        Reply::text("turn two"),
        Reply::text("turn three"),
    ])
    .answer_untooled("Resumed session");
    let gateway = run.gateway(&server, &team);
    let token = run.add_user(&server, &team, "resumer");
    let _worker = run.worker(&server, &team, "resume-worker", &[]);
    let web = web_front(&run, &server, &gateway, &token);
    let page = sign_in(&team, &web);
    let call = |method: &str, payload: Value| rpc(&team, &page, method, payload);
    let created = call("session.create", json!({"workspaceId": "team"}));
    let id = created["value"]["sessionId"].as_str().unwrap().to_string();
    // Followed before its first message: the stream waits for the session to exist.
    let prompt = |text: &str| queue_text(&team, &page, &id, text);
    let first = std::thread::scope(|s| {
        let follow = s.spawn(|| frames(&team, &page, &id, None, |f| turn_ends(f) >= 1));
        std::thread::sleep(Duration::from_millis(300));
        prompt("the first message");
        follow.join().unwrap()
    });
    assert_eq!(first[0].0, "hello");
    assert_eq!(first[1].0, "snapshot", "{first:?}");
    assert_eq!(first[1].2["events"], json!([]), "nothing existed yet");
    let cursor = first
        .iter()
        .rev()
        .find_map(|(_, id, _)| id.clone())
        .expect("a cursor");
    let seen = carried(&first);
    let seqs: Vec<u64> = seen.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>(), "{seqs:?}");
    assert!(
        first
            .iter()
            .any(|(e, _, d)| e == "status" && d["running"] == true)
    );
    // The second message carries an image and the third is an image alone: both reach the
    // model. A bad image and an empty message are refused with the reason.
    let png = crate::images::rgb_png(2, 2, |x, y| [x as u8 * 90, y as u8 * 90, 40]);
    let data = base64::engine::general_purpose::STANDARD.encode(&png);
    let other = crate::images::rgb_png(1, 3, |_, y| [y as u8 * 70, 9, 200]);
    let other = base64::engine::general_purpose::STANDARD.encode(&other);
    let send = |content: Value| {
        call(
            "session.prompt",
            json!({"sessionId": id, "mode": "queue", "content": content}),
        )
    };
    let bad = send(json!([{"type": "text", "text": "look"},
                          {"type": "image", "mediaType": "image/png", "data": "not base64!"}]));
    assert_eq!(bad["error"]["code"], "bad-request", "{bad}");
    assert!(
        bad["error"]["message"].as_str().unwrap().contains("base64"),
        "{bad}"
    );
    let empty = send(json!([{"type": "text", "text": "  "}]));
    assert_eq!(empty["error"]["message"], "the message is empty", "{empty}");
    let sent = send(json!([{"type": "text", "text": "the second message"},
                           {"type": "image", "mediaType": "image/png", "data": data, "name": "dots.png"}]));
    assert_eq!(sent["value"]["accepted"], true, "{sent}");
    turns_ended(&team, &id, 2);
    let alone = send(json!([{"type": "image", "mediaType": "image/png", "data": other}]));
    assert_eq!(alone["value"]["accepted"], true, "{alone}");
    turns_ended(&team, &id, 3);
    let requests: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.chat_body())
        .filter(|b| b.get("tools").is_some())
        .map(|b| b.to_string())
        .collect();
    assert_eq!(requests.len(), 3);
    assert!(
        requests[1].contains(&format!("data:image/png;base64,{data}")),
        "the model is shown the image"
    );
    assert!(requests[2].contains(&format!("data:image/png;base64,{other}")));
    // The image-only message is recorded as the image alone.
    let events = check_log(&team.events(&id));
    let last_user = events.iter().rev().find(|e| e.is("user/message")).unwrap();
    let blocks = last_user.data.as_value()["content"].clone();
    let kinds: Vec<&str> = blocks
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(kinds, ["image"], "{blocks}");
    // Back with its cursor: exactly the events after it, as `events`, no snapshot.
    let again = frames(&team, &page, &id, Some(&cursor), |f| turn_ends(f) >= 2);
    assert!(again.iter().all(|(e, _, _)| e != "snapshot"), "{again:?}");
    let resumed: Vec<u64> = carried(&again)
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    let next = seqs.len() as u64;
    assert_eq!(
        resumed,
        (next..next + resumed.len() as u64).collect::<Vec<_>>(),
        "{resumed:?}"
    );
    let stored = check_log(&team.events(&id));
    assert_eq!(
        next + resumed.len() as u64,
        stored.len() as u64,
        "the page has the whole log"
    );
    assert!(
        carried(&again)
            .iter()
            .any(|e| e["type"] == "user/message" && e.to_string().contains("the second message"))
    );
    // A cursor of another launch gets the whole session again, marked as a reset.
    let other = frames(&team, &page, &id, Some("elsewhere:3"), |f| f.len() >= 2);
    assert_eq!(other[1].0, "snapshot");
    assert_eq!(other[1].2["reset"], true);
    // A session the account does not have is named as missing.
    let missing = frames(&team, &page, "session-nobody", None, |f| f.len() >= 2);
    assert_eq!(missing[1].0, "session-error", "{missing:?}");
    assert_eq!(missing[1].2["code"], "session-not-found");
}

#[test]
fn a_page_keeps_every_event_once_while_the_gateway_connection_is_cut_and_reset() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let gate = Gate::new();
    let server = MockServer::with_replies([
        Reply::text("an answer finished while the connection was cut").hold_after_event(2, &gate),
        Reply::text("an answer after the reset"),
    ])
    .answer_untooled("Cut session");
    let gateway = run.gateway(&server, &team);
    let token = run.add_user(&server, &team, "partitioned");
    let _worker = run.worker(&server, &team, "cut-worker", &[]);
    // dsh web reaches the gateway through a proxy the test can cut; a stream silent for
    // 1.5 s is taken for dead (the gateway's keep-alives come every 15 s, so a quiet stream
    // is simply reopened).
    let proxy = Proxy::start(gateway.url.trim_start_matches("http://").to_string());
    let via = format!("http://127.0.0.1:{}", proxy.port);
    let web = web_front_at(
        &run,
        &server,
        &via,
        &token,
        &[("DSH_GATEWAY_STREAM_IDLE_MS", "1500")],
    );
    let page = sign_in(&team, &web);
    let call = |method: &str, payload: Value| rpc(&team, &page, method, payload);
    let id = call("session.create", json!({}))["value"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let prompt = |text: &str| queue_text(&team, &page, &id, text);
    // The page follows the session while its gateway connection goes silent both ways in
    // the middle of an answer, and the turn finishes meanwhile: once the partition heals,
    // dsh web reconnects on its own and the page gets the rest.
    let first = std::thread::scope(|s| {
        // Healed after 3 s, noticed within the idle limit (1.5 s): 20 s is far more than
        // enough, and a reader left waiting on the dead connection would wait much longer.
        let follow = s.spawn(|| {
            frames_within(&team, &page, &id, None, Duration::from_secs(20), |f| {
                turn_ends(f) >= 1
                    && f.iter()
                        .any(|(e, _, d)| e == "status" && d["running"] == false)
            })
        });
        std::thread::sleep(Duration::from_millis(300));
        prompt("the first message");
        team.wait_for(&id, "the answer's first chunk", |e| {
            e.iter().any(|e| e.kind == "assistant/chunk")
        });
        proxy.blackhole(true);
        gate.open();
        turns_ended(&team, &id, 1);
        std::thread::sleep(Duration::from_secs(3));
        proxy.blackhole(false);
        follow.join().unwrap()
    });
    let cursor = first
        .iter()
        .rev()
        .find_map(|(_, id, _)| id.clone())
        .expect("a cursor");
    // Then every connection is reset, as a restarted gateway would do, while the page
    // (back with its cursor) follows the next turn.
    let second = std::thread::scope(|s| {
        let follow = s.spawn(|| frames(&team, &page, &id, Some(&cursor), |f| turn_ends(f) >= 1));
        std::thread::sleep(Duration::from_millis(300));
        proxy.reset();
        prompt("the second message");
        turns_ended(&team, &id, 2);
        follow.join().unwrap()
    });
    let mut events = carried(&first);
    events.extend(carried(&second));
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let stored = check_log(&team.events(&id));
    assert_eq!(
        seqs,
        (0..stored.len() as u64).collect::<Vec<_>>(),
        "every stored event once, in order"
    );
    let text = events.iter().map(|e| e.to_string()).collect::<String>();
    assert!(text.contains("an answer finished while the connection was cut"));
    assert!(text.contains("the second message"));
}
