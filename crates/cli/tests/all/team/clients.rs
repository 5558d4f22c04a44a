//! Clients of a team gateway beyond plain HTTP: an editor's ACP server (`dsh acp` with
//! `DSH_GATEWAY` runs no agent; a team worker runs every turn, and the editor sees the stored
//! events as updates and answers the turn's permission requests), and images sent by the
//! API, an editor and the SDK runtime, kept for every later turn on any worker.

use dsh_test_support::mock_server::Completion;
use serde_json::json;

use super::*;
use crate::acp::Client;

/// `dsh acp` in front of `gateway`, signed in with `token`.
fn editor(run: &Run, server: &MockServer, gateway: &Gateway, token: &str) -> Client {
    let mut c = run.base(server);
    c.arg("acp")
        .env("DSH_GATEWAY", &gateway.url)
        .env("DSH_GATEWAY_TOKEN", token)
        .stderr(Stdio::inherit());
    let mut client = Client::spawn(c);
    let id = client.request("initialize", json!({"protocolVersion": 1}));
    let init = client.until_response(id, |_, f| panic!("before initialize's answer: {f}"));
    let caps = &init["result"]["agentCapabilities"];
    assert_eq!(caps["loadSession"], true, "{init}");
    assert_eq!(caps["promptCapabilities"]["image"], true, "{init}");
    client
}

/// Sends a prompt of `text`; returns its answer and the updates before it.
fn prompt(client: &mut Client, session: &str, text: &str) -> (Value, Vec<Value>) {
    let id = client.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
    );
    let mut updates = Vec::new();
    let answer = client.until_response(id, |_, f| updates.push(f));
    (answer, updates)
}

/// The text of the `agent_message_chunk`s among `updates`, chunk by chunk.
fn answer_text(updates: &[Value]) -> Vec<&str> {
    updates
        .iter()
        .map(|f| &f["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

/// The `sessionUpdate` kinds of `updates`, with the tool call status where one is given.
fn kinds(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .map(|f| {
            let u = &f["params"]["update"];
            match u["status"].as_str() {
                Some(s) => format!("{}:{s}", u["sessionUpdate"].as_str().unwrap_or("?")),
                None => u["sessionUpdate"].as_str().unwrap_or("?").to_string(),
            }
        })
        .collect()
}

#[test]
fn an_editor_drives_team_sessions_over_acp_through_a_gateway() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let marker = format!("acp-team-{}", uuid::Uuid::new_v4().simple());
    let server = MockServer::with_replies([
        crate::common::call(
            "call_acp_team",
            "bash",
            json!({"command": "echo ran-for-the-editor", "description": "echo"}),
        ),
        Reply::completion(Completion::text("first answer from the team").delta_chars(5)),
        crate::common::call(
            "call_acp_long",
            "bash",
            json!({"command": format!("touch acp-started; sleep 30; echo {marker}"), "description": "long"}),
        ),
        Reply::text("fourth answer from the team"),
    ])
    .answer_untooled("Team test");
    let gateway = run.gateway(&server, &team);
    let token = run.add_user(&server, &team, "editor-user");
    let mut worker = run.worker(&server, &team, "worker-acp", &[]);
    let mut client = editor(&run, &server, &gateway, &token);
    let id = client.request(
        "session/new",
        json!({"cwd": run.work.path(), "mcpServers": [{"name": "editor-only", "command": "/bin/true", "args": [], "env": []}]}),
    );
    let created = client.until_response(id, |_, f| panic!("before session/new's answer: {f}"));
    let session = created["result"]["sessionId"].as_str().unwrap().to_string();

    // A turn on the worker, seen as the rich projection shows it; the prompt is not echoed.
    let (answer, updates) = prompt(&mut client, &session, "first question");
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let kinds = kinds(&updates);
    let text = serde_json::to_string(&updates).unwrap();
    assert!(
        text.contains("editor-only") && text.contains("MCP servers"),
        "the editor is told its MCP servers stay behind: {text}"
    );
    let call = kinds.iter().position(|k| k == "tool_call:pending");
    let running = kinds
        .iter()
        .position(|k| k == "tool_call_update:in_progress");
    let done = kinds.iter().position(|k| k == "tool_call_update:completed");
    assert!(
        call.is_some() && call < running && running < done,
        "{kinds:?}"
    );
    assert!(text.contains("ran-for-the-editor"), "{text}");
    // The answer streams as the worker stores its chunks, and is not repeated whole.
    let answer_chunks: Vec<&str> = answer_text(&updates)
        .into_iter()
        .filter(|t| !t.contains("MCP servers"))
        .collect();
    assert!(answer_chunks.len() > 1, "{answer_chunks:?}");
    assert_eq!(answer_chunks.concat(), "first answer from the team");
    assert!(
        !kinds.iter().any(|k| k == "user_message_chunk"),
        "{kinds:?}"
    );
    assert!(
        updates
            .iter()
            .all(|f| f["params"]["sessionId"] == session.as_str()),
        "{text}"
    );

    // A cancel while the turn runs stops its tool and answers `cancelled`.
    let id = client.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "second question"}]}),
    );
    wait_file(&run.work.path().join("acp-started"));
    client.send(
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}),
    );
    let answer = client.until_response(id, |_, _| {});
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    assert!(
        poll(10, || processes_with(&marker).is_empty().then_some(())).is_some(),
        "the cancelled tool kept running"
    );
    turns_ended(&team, &session, 2);

    // With no worker, a cancel withdraws the queued prompt: no turn ever runs it.
    kill_group(&worker, "KILL");
    let _ = worker.wait();
    let api = api(&team, &gateway, &token);
    let id = client.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "third question"}]}),
    );
    let path = format!("/v1/sessions/{session}");
    poll(20, || {
        (api(reqwest::Method::GET, &path, None).1["pendingInput"] == 1).then_some(())
    })
    .expect("the third prompt is queued");
    client.send(
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}),
    );
    let answer = client.until_response(id, |_, _| {});
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    assert_eq!(api(reqwest::Method::GET, &path, None).1["pendingInput"], 0);

    // The next prompt runs once a worker is back.
    let mut worker = run.worker(&server, &team, "worker-acp-2", &[]);
    let (answer, updates) = prompt(&mut client, &session, "fourth question");
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(
        answer_text(&updates).concat(),
        "fourth answer from the team"
    );
    let asked = serde_json::to_string(
        &server
            .requests()
            .iter()
            .map(|r| r.chat_body())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    assert!(
        !asked.contains("third question"),
        "a withdrawn prompt reached the model"
    );
    drop(client);

    // Another editor loads the session: its history is replayed before the answer.
    let mut other = editor(&run, &server, &gateway, &token);
    let id = other.request(
        "session/load",
        json!({"sessionId": session, "cwd": run.work.path(), "mcpServers": []}),
    );
    let mut history = Vec::new();
    let loaded = other.until_response(id, |_, f| history.push(f));
    assert_eq!(loaded["result"], json!({}), "{loaded}");
    let text = serde_json::to_string(&history).unwrap();
    for expected in [
        "first question",
        "ran-for-the-editor",
        "first answer from the team",
        "second question",
        "fourth question",
        "fourth answer from the team",
    ] {
        assert!(text.contains(expected), "{expected} missing from {text}");
    }
    assert!(!text.contains("third question"), "{text}");
    // Another account's editor finds no such session.
    let stranger = run.add_user(&server, &team, "stranger");
    let mut foreign = editor(&run, &server, &gateway, &stranger);
    let id = foreign.request(
        "session/load",
        json!({"sessionId": session, "cwd": run.work.path(), "mcpServers": []}),
    );
    let refused = foreign.until_response(id, |_, f| panic!("a stranger saw {f}"));
    assert_eq!(refused["error"]["code"], -32002, "{refused}");

    kill_group(&worker, "KILL");
    let _ = worker.wait();
    check_log(&team.events(&session));
}

/// Runs the official ACP SDK's client (`tests/acp-client/drive.mjs`) against `dsh acp` in
/// front of `gateway`: every agent frame is validated against the SDK's schemas.
fn drive_sdk(run: &Run, gateway: &Gateway, token: &str, script: Value) -> Value {
    let file = run.home.path().join("acp-script.json");
    crate::acp_sdk::drive_script(&file, &script, |c| {
        c.env("HOME", run.home.path())
            .env("DSH_HOME", run.dsh_home())
            .env("DSH_GATEWAY", &gateway.url)
            .env("DSH_GATEWAY_TOKEN", token)
            .env("WORKDIR", run.work.path())
            .current_dir(run.work.path());
    })
}

#[test]
fn the_official_acp_client_runs_and_reloads_a_team_session() {
    if !crate::acp_sdk::sdk_ready() {
        return;
    }
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let server = MockServer::with_replies([
        // Outside the read-only sandbox: the editor is asked first.
        crate::common::call(
            "call_acp_sdk",
            "bash",
            json!({"command": "echo from-the-sdk-turn | tee sdk.txt", "description": "echo",
                   "sandbox_permissions": "danger-full-access", "justification": "a test"}),
        ),
        Reply::text("the team answered the SDK"),
    ])
    .answer_untooled("SDK team");
    let gateway = run.gateway(&server, &team);
    let token = run.add_user(&server, &team, "sdk-editor");
    let worker = run.worker_env(
        &server,
        &team,
        "worker-acp-sdk",
        &[],
        &[("DSH_PERMISSION_MODE", "read-only")],
    );
    let report = drive_sdk(
        &run,
        &gateway,
        &token,
        json!({"permissions": ["allow_once"], "steps": [
            {"do": "initialize"}, {"do": "new"}, {"do": "prompt", "text": "ask the team"},
            {"do": "load"}, {"do": "close"}
        ]}),
    );
    let asked: Vec<&str> = report["agentRequests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["method"].as_str().unwrap())
        .collect();
    assert_eq!(asked, ["session/request_permission"], "{report}");
    assert!(run.work.path().join("sdk.txt").exists());
    let results = report["results"].as_array().unwrap();
    assert_eq!(results[2]["ok"]["stopReason"], "end_turn", "{}", results[2]);
    assert_eq!(results[3]["ok"], json!({}), "{}", results[3]);
    assert_eq!(results[4]["ok"], json!({}), "{}", results[4]);
    let session = results[1]["sessionId"].as_str().unwrap().to_string();
    // The turn's updates come before the prompt's answer; the load replays the history
    // (the user's message this time) before its own.
    let at = |n: &Value| n.as_u64().unwrap();
    let before = |kind: &str, limit: u64| {
        report["updates"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|u| u["update"]["sessionUpdate"] == kind && at(&u["n"]) < limit)
            .count()
    };
    let (prompted, loaded) = (at(&results[2]["n"]), at(&results[3]["n"]));
    assert_eq!(before("user_message_chunk", prompted), 0);
    assert_eq!(before("user_message_chunk", loaded), 1);
    assert!(before("tool_call", prompted) == 1 && before("tool_call", loaded) == 2);
    let text = serde_json::to_string(&report["updates"]).unwrap();
    assert!(text.contains("from-the-sdk-turn"), "{text}");
    assert!(text.contains("the team answered the SDK"), "{text}");

    // A new connection resumes it by id without replaying anything.
    let report = drive_sdk(
        &run,
        &gateway,
        &token,
        json!({"sessionId": session, "steps": [{"do": "initialize"}, {"do": "resume"}]}),
    );
    assert_eq!(report["results"][1]["ok"], json!({}), "{report}");
    assert_eq!(report["updates"], json!([]), "{report}");
    drop(worker);
    check_log(&team.events(&session));
}

#[test]
fn an_editor_answers_the_permission_requests_of_a_team_turn() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    // A shell call that asks to leave the sandbox: a read-only worker asks for approval.
    let escalate = |id: &str, file: &str| {
        crate::common::call(
            id,
            "bash",
            json!({"command": format!("echo hi > {file}"), "description": "write a file",
                   "sandbox_permissions": "danger-full-access", "justification": "the user asked for it"}),
        )
    };
    let server = MockServer::with_replies([
        escalate("e1", "approved.txt"),
        Reply::text("first done"),
        escalate("e2", "rejected.txt"),
        Reply::text("second done"),
        escalate("e3", "unasked.txt"),
        Reply::text("third done"),
    ])
    .answer_untooled("Team test");
    let gateway = run.gateway(&server, &team);
    let token = run.add_user(&server, &team, "approver");
    let worker = run.worker_env(
        &server,
        &team,
        "worker-approvals",
        &[],
        &[("DSH_PERMISSION_MODE", "read-only")],
    );
    let mut client = editor(&run, &server, &gateway, &token);
    let id = client.request(
        "session/new",
        json!({"cwd": run.work.path(), "mcpServers": []}),
    );
    let session = client.until_response(id, |_, _| {})["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    for (answer, file, exists) in [
        ("allow-once", "approved.txt", true),
        ("reject-once", "rejected.txt", false),
    ] {
        let id = client.request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "write it"}]}),
        );
        let mut asked = None;
        let done = client.until_response(id, |c, f| {
            if f["method"] == "session/request_permission" {
                asked = Some(f["params"].clone());
                c.send(json!({"jsonrpc": "2.0", "id": f["id"], "result": {"outcome": {"outcome": "selected", "optionId": answer}}}));
            }
        });
        assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
        let asked = asked.expect("a permission request reached the editor");
        let call = &asked["toolCall"];
        assert_eq!(call["title"], format!("echo hi > {file}"), "{asked}");
        assert_eq!(call["rawInput"]["justification"], "the user asked for it");
        assert!(
            call["content"][0]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("danger-full-access")),
            "{asked}"
        );
        assert_eq!(run.work.path().join(file).exists(), exists, "{file}");
    }
    // The log records each decision as the editor made it; a late answer is refused.
    let events = check_log(&team.events(&session));
    let decided: Vec<String> = events
        .iter()
        .filter(|e| e.is("approval/decided"))
        .map(|e| e.data.as_value()["outcome"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(decided, ["allowed-once", "rejected"]);
    let first = events.iter().find(|e| e.is("approval/asked")).unwrap();
    let approval = first.data.as_value()["id"].as_str().unwrap().to_string();
    let api = api(&team, &gateway, &token);
    let answer = |id: &str, outcome: &str| {
        api(
            reqwest::Method::POST,
            &format!("/v1/sessions/{session}/approvals/{id}"),
            Some(json!({"outcome": outcome})),
        )
    };
    assert_eq!(answer(&approval, "rejected").0, 409);
    assert_eq!(answer("no-such-approval", "rejected").0, 404);
    assert_eq!(answer(&approval, "maybe").0, 400);
    drop(client);

    // Input from a client that answers no approvals (here `dsh team submit`) is not held up:
    // the call is refused at once, as `dsh headless` refuses it.
    run.submit(&server, &team, Some(&session), "write another");
    turns_ended(&team, &session, 3);
    assert!(!run.work.path().join("unasked.txt").exists());
    let events = check_log(&team.events(&session));
    let last = events
        .iter()
        .rev()
        .find(|e| e.is("approval/decided"))
        .unwrap();
    assert_eq!(last.data.as_value()["outcome"], "unavailable");
    drop(worker);
}

#[test]
fn images_sent_through_the_gateway_reach_the_model_on_every_later_turn_and_worker() {
    use base64::Engine;
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    // An image-capable default model on the chat-completions wire (images as data URLs).
    run.settings(&format!(
        "{}agent-default-model:\n  provider: deepseek-official\n  model: deepseek-flash\n",
        crate::images::CHAT_ROUTE
    ));
    let server = MockServer::with_replies([
        Reply::text("a small picture"),
        Reply::text("the same picture"),
        Reply::text("a second picture"),
        Reply::text("a third picture"),
    ])
    .answer_untooled("Picture");
    let gateway = run.gateway(&server, &team);
    let token = run.add_user(&server, &team, "viewer");
    let api = api(&team, &gateway, &token);
    let png = crate::images::rgb_png(3, 2, |x, y| [x as u8 * 80, y as u8 * 120, 7]);
    let data = base64::engine::general_purpose::STANDARD.encode(&png);
    let url = format!("data:image/png;base64,{data}");
    // Bad images are refused before anything is queued.
    for (image, why) in [
        (
            json!({"mediaType": "image/png", "data": "not base64!"}),
            "base64",
        ),
        (
            json!({"mediaType": "image/tiff", "data": data}),
            "image/png",
        ),
        (
            json!({"mediaType": "image/png", "data": base64::engine::general_purpose::STANDARD.encode(b"no png")}),
            "image 0",
        ),
    ] {
        let (status, body) = api(
            reqwest::Method::POST,
            "/v1/sessions",
            Some(json!({"text": "look", "images": [image]})),
        );
        assert_eq!(status, 400, "{body}");
        assert!(body["error"].as_str().unwrap().contains(why), "{body}");
    }
    let (status, created) = api(
        reqwest::Method::POST,
        "/v1/sessions",
        Some(
            json!({"text": "what is this?", "images": [{"mediaType": "image/png", "data": data, "name": "shot.png"}]}),
        ),
    );
    assert_eq!(status, 201, "{created}");
    let session = created["sessionId"].as_str().unwrap().to_string();
    let first = run.worker(&server, &team, "worker-images-1", &[]);
    turns_ended(&team, &session, 1);
    drop(first);
    // The next turn, on another worker, still shows the model the image.
    let _second = run.worker(&server, &team, "worker-images-2", &[]);
    let (status, _) = api(
        reqwest::Method::POST,
        &format!("/v1/sessions/{session}/messages"),
        Some(json!({"text": "and now?"})),
    );
    assert_eq!(status, 202);
    turns_ended(&team, &session, 2);
    // An editor over ACP sends one too.
    let mut client = editor(&run, &server, &gateway, &token);
    let id = client.request(
        "session/load",
        json!({"sessionId": session, "cwd": run.work.path(), "mcpServers": []}),
    );
    client.until_response(id, |_, _| {});
    let other = crate::images::rgb_png(2, 2, |_, _| [200, 10, 10]);
    let other_data = base64::engine::general_purpose::STANDARD.encode(&other);
    let id = client.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [
            {"type": "text", "text": "and this one?"},
            {"type": "image", "mimeType": "image/png", "data": other_data}
        ]}),
    );
    let done = client.until_response(id, |_, _| {});
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    drop(client);
    // And a program through the SDK runtime.
    let third = crate::images::rgb_png(1, 1, |_, _| [1, 2, 3]);
    let third_data = base64::engine::general_purpose::STANDARD.encode(&third);
    let mut sdk = run.sdk_runtime(&server, &gateway, &token);
    {
        use std::io::{BufRead, Write};
        let mut stdin = sdk.stdin.take().unwrap();
        let mut lines = std::io::BufReader::new(sdk.stdout.take().unwrap()).lines();
        for (id, method, params) in [
            (
                "i",
                "initialize",
                json!({"cwd": run.work.path(), "provider": "deepseek-official", "model": "deepseek-flash"}),
            ),
            (
                "p",
                "session/prompt",
                json!({"sessionId": session, "contentBlocks": [
                    {"type": "image", "mimeType": "image/png", "data": third_data},
                    {"type": "text", "text": "a last one"}
                ]}),
            ),
        ] {
            writeln!(
                stdin,
                "{}",
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
            )
            .unwrap();
            let answer = loop {
                let f: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
                if f["id"] == id {
                    break f;
                }
            };
            assert!(answer.get("result").is_some(), "{answer}");
        }
        turns_ended(&team, &session, 4);
        drop(stdin);
    }
    let _ = sdk.wait();
    let requests: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.chat_body())
        .filter(|b| b.get("tools").is_some())
        .map(|b| b.to_string())
        .collect();
    assert_eq!(requests.len(), 4);
    assert!(
        requests.iter().all(|r| r.contains(&url)),
        "every turn shows the model the first image"
    );
    assert!(requests[2].contains(&format!("data:image/png;base64,{other_data}")));
    assert!(requests[3].contains(&format!("data:image/png;base64,{third_data}")));
    // The log keeps references; the team store keeps the bytes once per session.
    let events = check_log(&team.events(&session));
    let refs: Vec<String> = events
        .iter()
        .filter(|e| e.is(types::USER_MESSAGE))
        .flat_map(|e| {
            e.data.as_value()["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|b| b["type"] == "image")
        .map(|b| {
            b["attachment"]["attachmentId"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(refs.len(), 3, "{refs:?}");
    let stored = team.rt.block_on(team.store().object_ids(&session)).unwrap();
    let mut expected: Vec<String> = refs
        .iter()
        .map(|r| r.trim_start_matches("sha256:").to_string())
        .collect();
    expected.sort();
    assert_eq!(stored, expected);
    assert!(
        !events
            .iter()
            .any(|e| e.data.as_value().to_string().contains(&data))
    );
    // A fork of the session takes its images along.
    let out = run
        .team(&server, &team, &["sessions", "fork", &session])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    let fork = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let forked = team.rt.block_on(team.store().object_ids(&fork)).unwrap();
    assert_eq!(forked, expected);
}
