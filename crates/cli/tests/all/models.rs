//! `dsh models`: the routes and models a settings-only configuration gives every profile,
//! and `--probe` asking an OpenAI-compatible endpoint for its model list.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;

use common::{Run, stderr};
use dsh_test_support::mock_server::MockServer;
use serde_json::Value;

/// A loopback endpoint answering every request with `body` (JSON); returns its base URL and
/// the request lines it saw.
fn models_endpoint(body: &'static str) -> (String, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut buf = [0u8; 4096];
            let n = stream.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).into_owned();
            let _ = tx.send(head);
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    (url, rx)
}

#[test]
fn models_lists_settings_routes_and_probes_the_endpoint() {
    let server = MockServer::start();
    let (url, requests) =
        models_endpoint(r#"{"object":"list","data":[{"id":"smollm2"},{"id":"other"}]}"#);
    let run = Run::new();
    run.settings(&format!(
        "openai-compatible:\n  providers:\n    local:\n      baseURL: {url}\n      apiKeyEnv: LOCAL_KEY\n      models:\n        - id: smollm2\n          contextWindow: 8192\n\
         agent-default-model:\n  provider: local\n  model: smollm2\n"
    ));
    let out = run
        .base(&server)
        .env("LOCAL_KEY", "sk-local")
        .args(["models", "--probe"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let local = text
        .lines()
        .find(|l| l.starts_with("local "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        local.contains("smollm2 *") && local.contains("8192"),
        "{text}"
    );
    assert!(
        text.contains("deepseek-official"),
        "DeepSeek stays listed: {text}"
    );
    assert!(
        text.contains("local: the endpoint serves smollm2, other"),
        "{text}"
    );
    let seen = requests.recv().unwrap();
    assert!(seen.starts_with("GET /v1/models "), "{seen}");
    assert!(
        seen.to_ascii_lowercase()
            .contains("authorization: bearer sk-local"),
        "{seen}"
    );

    let json = run
        .base(&server)
        .env("LOCAL_KEY", "sk-local")
        .args(["models", "--json"])
        .output()
        .unwrap();
    assert_eq!(json.status.code(), Some(0), "{}", stderr(&json));
    let routes: Vec<Value> = String::from_utf8_lossy(&json.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let local = routes.iter().find(|r| r["route"] == "local").unwrap();
    assert_eq!(local["models"][0]["id"], "smollm2");
    assert_eq!(local["models"][0]["default"], true);
    assert!(local.get("served").is_none(), "no probe without --probe");
}

#[test]
fn a_probe_that_fails_says_why() {
    let server = MockServer::start();
    let run = Run::new();
    run.settings(
        "openai-compatible:\n  providers:\n    down:\n      baseURL: http://127.0.0.1:9/v1\n      models:\n        - id: m\n",
    );
    let out = run
        .base(&server)
        .args(["models", "--probe"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("down: asking the endpoint failed: GET http://127.0.0.1:9/v1/models"),
        "{text}"
    );
}

/// An endpoint that rejects a parameter or the model: the error says which setting to
/// change (#29 item 4).
#[test]
fn a_rejected_request_says_what_to_change_in_the_settings() {
    let cases = [
        (
            dsh_test_support::mock_server::Reply::error_json(
                400,
                "Unrecognized request argument supplied: stream_options",
                "invalid_request_error",
                None,
            ),
            "set compat: {supportsUsageInStreaming: false} on provider \"local\"",
        ),
        (
            dsh_test_support::mock_server::Reply::error_json(
                404,
                "The model `smollm3` does not exist",
                "invalid_request_error",
                Some("model_not_found"),
            ),
            "`dsh models --probe` lists what it serves",
        ),
    ];
    for (reply, wanted) in cases {
        let server = MockServer::start().answer_untooled("T");
        server.push(reply);
        let run = Run::new();
        run.settings(&format!(
            "openai-compatible:\n  providers:\n    local:\n      baseURL: {}\n      models:\n        - id: smollm3\n\
             agent-default-model:\n  provider: local\n  model: smollm3\n",
            server.url()
        ));
        let out = run.base(&server).args(["headless", "hi"]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains(wanted), "{}", stderr(&out));
    }
}
