//! `dsh web` end to end without a browser: the launcher, the token/cookie exchange and the
//! trust fence, the JSON API against the mock LLM, the event stream's resume contract
//! (no gap, no duplicate across reconnects), approvals, user questions and plan reviews,
//! and a clean Ctrl-C.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dsh_test_support::mock_server::{Completion, Gate, MockServer, Reply, ToolCall};
use dsh_test_support::sse::{SseEvent, SseParser};
use futures::StreamExt as _;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::png;
use png::png;

const WAIT: Duration = Duration::from_secs(30);

struct Web {
    child: Child,
    port: u16,
    token: String,
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    cookie: Option<String>,
    stderr: mpsc::Receiver<String>,
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dsh(home: &std::path::Path, work: &std::path::Path, server: Option<&MockServer>) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dsh"));
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("DSH_HOME", home.join(".dsh"))
        .current_dir(work);
    if let Some(s) = server {
        c.env("DEEPSEEK_BASE_URL", s.url());
    }
    c
}

impl Web {
    fn start(server: &MockServer, env: &[(&str, &str)], args: &[&str]) -> Web {
        let home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        Self::start_in(home, work, server, env, args)
    }

    fn start_in(
        home: tempfile::TempDir,
        work: tempfile::TempDir,
        server: &MockServer,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Web {
        let mut cmd = dsh(home.path(), work.path(), Some(server));
        cmd.args(["web", "--no-open", "--port", "0"])
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let (etx, erx) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                let _ = etx.send(line);
            }
        });
        let line = rx.recv_timeout(WAIT).unwrap_or_else(|_| {
            panic!(
                "dsh web printed no URL line; stderr: {:?}",
                erx.try_iter().collect::<Vec<_>>()
            )
        });
        let url = line
            .strip_prefix("dsh web: ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        let rest = url.strip_prefix("http://127.0.0.1:").unwrap();
        let (port, token) = rest.split_once("/?token=").unwrap();
        assert_eq!(token.len(), 43, "a 32-byte base64url token");
        Web {
            child,
            port: port.parse().unwrap(),
            token: token.to_string(),
            home,
            work,
            cookie: None,
            stderr: erx,
        }
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn authority(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn client() -> reqwest::Client {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .unwrap()
    }

    async fn login(&mut self) -> String {
        let resp = Self::client()
            .get(format!("{}/?token={}", self.base(), self.token))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 303);
        let set = resp.headers()["set-cookie"].to_str().unwrap().to_string();
        let pair = set.split(';').next().unwrap().to_string();
        self.cookie = Some(pair.clone());
        pair
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        let mut r = Self::client().post(format!("{}{path}", self.base()));
        if let Some(c) = &self.cookie {
            r = r.header("cookie", c);
        }
        r
    }

    async fn rpc(&self, method: &str, payload: Value) -> Value {
        let resp = self
            .post(&format!("/api/{method}"))
            .json(&json!({"type": "client-request", "rpcId": "t1", "method": method, "payload": payload}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{method}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["rpcId"], "t1");
        body["result"].clone()
    }

    async fn ok(&self, method: &str, payload: Value) -> Value {
        let r = self.rpc(method, payload.clone()).await;
        assert_eq!(r["ok"], true, "{method} {payload} failed: {r}");
        r["value"].clone()
    }

    async fn stream(&self, session: Option<&str>, last_event_id: Option<&str>) -> Sse {
        let mut url = format!("{}/api/events", self.base());
        if let Some(s) = session {
            url.push_str(&format!("?session={s}"));
        }
        let mut req = Self::client().get(url);
        if let Some(c) = &self.cookie {
            req = req.header("cookie", c);
        }
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        Sse {
            body: Box::pin(resp.bytes_stream()),
            parser: SseParser::new(),
            queued: VecDeque::new(),
        }
    }

    fn stderr_text(&self) -> String {
        self.stderr.try_iter().collect::<Vec<_>>().join("\n")
    }
}

type ByteStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

struct Sse {
    body: ByteStream,
    parser: SseParser,
    queued: VecDeque<SseEvent>,
}

impl Sse {
    /// The next event, or `None` when none arrives within `wait`.
    async fn next_within(&mut self, wait: Duration) -> Option<SseEvent> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(e) = self.queued.pop_front() {
                return Some(e);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.body.next()).await {
                Ok(Some(Ok(bytes))) => self.queued.extend(self.parser.push(&bytes)),
                Ok(other) => panic!("the event stream ended: {other:?}"),
                Err(_) => return None,
            }
        }
    }

    /// Reads until an event named `name` satisfying `pred` arrives; returns everything read.
    async fn until(&mut self, name: &str, pred: impl Fn(&Value) -> bool) -> Vec<SseEvent> {
        let mut seen: Vec<SseEvent> = Vec::new();
        loop {
            let Some(e) = self.next_within(WAIT).await else {
                let got: Vec<String> = seen
                    .iter()
                    .map(|e| format!("{}: {}", e.event, e.json()))
                    .collect();
                panic!("no `{name}` event as awaited within {WAIT:?}; got {got:#?}");
            };
            let done = e.event == name && pred(&e.json());
            seen.push(e);
            if done {
                return seen;
            }
        }
    }
}

/// Committed events carried by snapshot/events frames, in order.
fn events_of(frames: &[SseEvent]) -> Vec<Value> {
    let mut out = Vec::new();
    for f in frames {
        match f.event.as_str() {
            "snapshot" => {
                out.clear();
                out.extend(f.json()["events"].as_array().cloned().unwrap_or_default());
            }
            "events" => out.extend(f.json().as_array().cloned().unwrap_or_default()),
            _ => {}
        }
    }
    out
}

fn has_turn_end(v: &Value) -> bool {
    let list = match v.get("events") {
        Some(e) => e.as_array().cloned().unwrap_or_default(),
        None => v.as_array().cloned().unwrap_or_default(),
    };
    list.iter().any(|e| e["type"] == "turn/end")
}

// ---------------------------------------------------------------------------------------

#[test]
fn help_usage_errors_and_the_web_profile_dump() {
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        dsh(home.path(), home.path(), None)
            .args(args)
            .output()
            .unwrap()
    };
    let help = run(&["web", "-h"]);
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.starts_with("Usage: dsh web [options]"), "{text}");
    for flag in ["--host", "--port", "--no-open", "--trusted-host"] {
        assert!(text.contains(flag), "{flag} in help");
    }
    let cases: [(&[&str], &str); 4] = [
        (&["web", "--host", "0.0.0.0"], "wildcard address"),
        (
            &["web", "--port", "abc"],
            "error: --port must be a number, got \"abc\"",
        ),
        (&["web", "--bogus"], "error: unknown option '--bogus'"),
        (
            &["--profile", "web", "--trusted-host", "http://x/"],
            "not a bare host[:port] authority",
        ),
    ];
    for (args, message) in cases {
        let out = run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed no URL");
    }
    // The profile template and its dump: base rows, then the web rows.
    let dump = run(&["--dump-config", "--profile", "web"]);
    assert_eq!(
        dump.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let text = String::from_utf8_lossy(&dump.stdout).to_string();
    let order: Vec<usize> = [
        "id: settings",
        "id: tool-bash",
        "id: storage-json",
        "id: workspace",
        "id: webserver",
        "id: connection",
        "id: web-runtime",
    ]
    .iter()
    .map(|row| {
        text.find(row)
            .unwrap_or_else(|| panic!("{row} missing from\n{text}"))
    })
    .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "rows out of order: {order:?}"
    );
    assert!(
        text.contains("'@deepseek-ai/dsh-web-app'") || text.contains("@deepseek-ai/dsh-web-app")
    );
    let manifest =
        std::fs::read_to_string(home.path().join(".dsh/profiles/web/package.json")).unwrap();
    let manifest: Value = serde_json::from_str(&manifest).unwrap();
    assert_eq!(
        manifest["dsh"]["profile"]["bundles"],
        json!(["@deepseek-ai/dsh-base", "@deepseek-ai/dsh-web-app"])
    );
}

#[test]
fn a_taken_port_fails_with_a_clear_message() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let home = tempfile::tempdir().unwrap();
    let out = dsh(home.path(), home.path(), None)
        .args(["web", "--no-open", "--port", &port])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port}")) && err.contains("--port 0"),
        "{err}"
    );
}

#[tokio::test]
async fn every_request_needs_the_token_cookie_and_the_fence_refuses_foreign_hosts() {
    let server = MockServer::start();
    let mut web = Web::start(&server, &[], &[]);
    let c = Web::client();
    let base = web.base();
    // No cookie: 401 everywhere, assets included; nothing else in the body.
    for path in ["/", "/app.css", "/js/app.js", "/favicon.ico", "/api/events"] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        let text = r.text().await.unwrap();
        assert!(
            text == dsh_web::AUTH_REQUIRED || text == "unauthorized",
            "{path}: {text}"
        );
    }
    let r = c
        .post(format!("{base}/api/session.list"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap()),
        (401, "unauthorized".into())
    );
    let head = c.head(format!("{base}/")).send().await.unwrap();
    assert_eq!(head.status(), 401);
    assert_eq!(head.text().await.unwrap(), "");
    // Wrong, repeated, or misplaced tokens.
    for q in [
        "/?token=wrong".to_string(),
        format!("/?token={0}&token={0}", web.token),
        format!("/x?token={}", web.token),
    ] {
        let r = c.get(format!("{base}{q}")).send().await.unwrap();
        assert_eq!(r.status(), 401, "{q}");
    }
    // A HEAD (a link preview) answers without spending the token.
    let r = c
        .head(format!("{base}/?token={}", web.token))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert!(r.headers().get("set-cookie").is_none());
    // The exchange.
    let r = c
        .get(format!("{base}/?token={}", web.token))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "./");
    assert_eq!(r.headers()["cache-control"], "no-store");
    assert_eq!(r.headers()["referrer-policy"], "no-referrer");
    let set = r.headers()["set-cookie"].to_str().unwrap().to_string();
    let name = dsh_web::Auth::cookie_name(&web.authority());
    assert!(set.starts_with(&format!("{name}=v1.")), "{set}");
    for attr in [
        "; Max-Age=2592000",
        "; Path=/",
        "; HttpOnly",
        "; SameSite=Strict",
        "; Expires=",
    ] {
        assert!(set.contains(attr), "{attr} in {set}");
    }
    let cookie = set.split(';').next().unwrap().to_string();
    web.cookie = Some(cookie.clone());
    // The token is spent: another browser (no cookie) gets a page saying what to do, by GET
    // and by HEAD; the signed-in browser reopening the link is sent on without a new cookie.
    let r = c
        .get(format!("{base}/?token={}", web.token))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("set-cookie").is_none());
    assert_eq!(r.text().await.unwrap(), dsh_web::TOKEN_SPENT);
    let r = c
        .head(format!("{base}/?token={}", web.token))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .get(format!("{base}/?token={}", web.token))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert!(r.headers().get("set-cookie").is_none());
    let r = c
        .get(format!("{base}/"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the first browser stays signed in");
    // The cookie verifies with the secret stored in .credentials.yaml (mode 0600).
    let creds_path = web.home.path().join(".dsh/.credentials.yaml");
    let creds = std::fs::read_to_string(&creds_path).unwrap();
    assert!(
        creds.contains("client-connection/browser-session"),
        "{creds}"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&creds_path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let doc: Value = serde_json::from_str(
        creds
            .lines()
            .find(|l| l.starts_with("records: "))
            .unwrap()
            .trim_start_matches("records: "),
    )
    .unwrap();
    let secret_b64 = doc["client-connection/browser-session"]["payload"]["secret"]
        .as_str()
        .unwrap();
    let secret = {
        // base64url without padding → bytes (tiny decoder to avoid a test dependency).
        let val = |c: u8| match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            _ => 63,
        } as u32;
        let (mut acc, mut bits, mut out) = (0u32, 0, Vec::new());
        for b in secret_b64.bytes() {
            acc = (acc << 6) | val(b);
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
                acc &= (1 << bits) - 1;
            }
        }
        out
    };
    let signer = dsh_web::Auth::new("x".into(), &secret, 30).unwrap();
    let value = cookie.split_once('=').unwrap().1;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(signer.verify(value, &web.authority(), now));

    // With the cookie: the page, its CSP, the assets.
    let get = |path: &str, extra: &[(&str, &str)]| {
        let mut r = c
            .get(format!("{base}{path}"))
            .header("cookie", cookie.clone());
        for (k, v) in extra {
            r = r.header(*k, *v);
        }
        r.send()
    };
    let page = get("/", &[]).await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("script-src 'self'")
    );
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    assert!(page.text().await.unwrap().contains("\"js/app.js\""));
    let asset = get("/js/app.js", &[]).await.unwrap();
    assert_eq!(asset.status(), 200);
    let etag = asset.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(
        get("/js/app.js", &[("if-none-match", &etag)])
            .await
            .unwrap()
            .status(),
        304
    );
    assert_eq!(get("/nope", &[]).await.unwrap().status(), 404);

    // Another browser's cookies never pass: tampered, expired, another authority.
    let minted_elsewhere = signer.mint(&format!("localhost:{}", web.port), now);
    let expired = signer.mint(&web.authority(), now - 31 * 86_400_000);
    let mut tampered = value.to_string();
    let flip = tampered.len() - 3;
    let ch = if &tampered[flip..flip + 1] == "A" {
        "B"
    } else {
        "A"
    };
    tampered.replace_range(flip..flip + 1, ch);
    for bad in [minted_elsewhere, expired, tampered] {
        let r = c
            .get(format!("{base}/"))
            .header("cookie", format!("{name}={bad}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    }

    // The fence: foreign Host, foreign or null Origin, cross-site fetches.
    let api = |extra: Vec<(&'static str, String)>| {
        let mut r = c
            .post(format!("{base}/api/session.list"))
            .header("cookie", cookie.clone())
            .json(&json!({"type": "client-request", "rpcId": "f", "method": "session.list", "payload": {}}));
        for (k, v) in extra {
            r = r.header(k, v);
        }
        r.send()
    };
    assert_eq!(api(vec![]).await.unwrap().status(), 200);
    let evil_host = api(vec![("host", format!("evil.example:{}", web.port))])
        .await
        .unwrap();
    assert_eq!(
        (evil_host.status().as_u16(), evil_host.text().await.unwrap()),
        (403, "forbidden".into())
    );
    for (k, v) in [
        ("origin", "http://evil.example".to_string()),
        ("origin", "null".to_string()),
        ("sec-fetch-site", "cross-site".to_string()),
    ] {
        assert_eq!(
            api(vec![(k, v.clone())]).await.unwrap().status(),
            403,
            "{k}: {v}"
        );
    }
    assert_eq!(
        api(vec![("origin", base.clone())]).await.unwrap().status(),
        200
    );
    let foreign_stream = c
        .get(format!("{base}/api/events"))
        .header("cookie", cookie.clone())
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(foreign_stream.status(), 403);
    // A foreign Host is refused before authentication (no cookie needed to learn nothing).
    let r = c
        .get(format!("{base}/"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    // Malformed requests: clear answers, and the server keeps serving.
    let raw = |ct: &'static str, body: &'static str| {
        c.post(format!("{base}/api/session.list"))
            .header("cookie", cookie.clone())
            .header("content-type", ct)
            .body(body)
            .send()
    };
    let r = raw("text/plain", "{}").await.unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap()),
        (415, "content type must be application/json".into())
    );
    let r = raw("application/json", "{").await.unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap()),
        (400, "body is not JSON".into())
    );
    let r: Value = raw(
        "application/json",
        "{\"type\":\"client-request\",\"method\":\"session.list\"}",
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(r["rpcId"], "invalid-request");
    assert_eq!(r["result"]["error"]["code"], "bad-request");
    let r: Value = raw(
        "application/json",
        "{\"type\":\"client-request\",\"rpcId\":\"m\",\"method\":\"host.describe\"}",
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(
        r["result"]["error"]["message"],
        "method \"host.describe\" does not match path \"session.list\""
    );
    let r = c
        .post(format!("{base}/api/no.such"))
        .header("cookie", cookie.clone())
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = c
        .get(format!("{base}/api/session.list"))
        .header("cookie", cookie.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        web.ok("host.describe", json!({})).await["version"],
        env!("CARGO_PKG_VERSION")
    );
}

#[tokio::test]
async fn a_saved_key_is_used_at_once_and_sessions_can_be_listed_searched_renamed_forked_archived_and_deleted()
 {
    let server = MockServer::start().answer_untooled("Greeting the user");
    server.push(Reply::text("Hello from the mock, friend."));
    server.push(Reply::text("Second answer."));
    let mut web = Web::start(&server, &[], &[]);
    web.login().await;

    // Settings → Models: write-only key, 0600, used by the next request without restart.
    let before = web
        .ok(
            "credentials.describe",
            json!({"refs": ["DEEPSEEK_API_KEY"]}),
        )
        .await;
    assert_eq!(
        before["credentials"]["DEEPSEEK_API_KEY"]["configured"],
        false
    );
    let saved = web
        .ok(
            "credentials.set",
            json!({"ref": "DEEPSEEK_API_KEY", "value": "sk-web-secret-123"}),
        )
        .await;
    assert_eq!(
        saved["credential"],
        json!({"configured": true, "source": "file", "writable": true})
    );
    let described = web
        .rpc(
            "credentials.describe",
            json!({"refs": ["DEEPSEEK_API_KEY"]}),
        )
        .await;
    assert!(!described.to_string().contains("sk-web-secret-123"));
    let providers = web.ok("llm.providers", json!({})).await;
    assert!(!providers.to_string().contains("sk-web-secret-123"));

    // Workspace: the launch directory, registered.
    let cwd = std::fs::canonicalize(web.work.path())
        .unwrap()
        .display()
        .to_string();
    assert_eq!(web.ok("host.describe", json!({})).await["cwd"], cwd);
    let ws = web.ok("workspace.create", json!({"path": cwd})).await;
    assert_eq!(ws["created"], true);
    let ws_id = ws["workspace"]["workspaceId"].as_str().unwrap().to_string();
    let missing = web
        .rpc("workspace.create", json!({"path": "/definitely/not/here"}))
        .await;
    assert_eq!(missing["error"]["code"], "workspace-invalid-path");

    // A task.
    let created = web
        .ok("session.create", json!({"workspaceId": ws_id}))
        .await;
    let id = created["sessionId"].as_str().unwrap().to_string();
    let again = web
        .ok("session.create", json!({"workspaceId": ws_id}))
        .await;
    assert_eq!(
        again["sessionId"],
        id.as_str(),
        "an unused session is reused"
    );
    let mut sse = web.stream(Some(&id), None).await;
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "mode": "queue", "content": [{"type": "text", "text": "please greet me"}]}),
    )
    .await;
    let frames = sse.until("events", has_turn_end).await;
    let events = events_of(&frames);
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "assistant/message")
        .flat_map(|e| {
            e["data"]["message"]["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|b| b["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, "Hello from the mock, friend.");
    let requests = server.requests();
    assert_eq!(requests[0].api_key(), Some("sk-web-secret-123"));
    assert!(
        frames
            .iter()
            .any(|f| f.event == "status" && f.json()["running"] == true)
    );
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (0..seqs.len() as u64).collect::<Vec<_>>(),
        "contiguous from 0"
    );
    drop(sse);

    // Listing and search.
    let list = web.ok("session.list", json!({})).await;
    let row = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["sessionId"] == id.as_str())
        .cloned()
        .unwrap();
    assert_eq!(row["workspaceId"], ws_id.as_str());
    assert_eq!(row["turns"], 1);
    assert_eq!(row["state"], "idle");
    assert!(!row["title"].as_str().unwrap().is_empty());
    let hits = web
        .ok("session.search", json!({"query": "MOCK, FRIEND"}))
        .await;
    assert_eq!(hits["items"][0]["sessionId"], id.as_str());
    assert!(
        hits["items"][0]["snippet"]
            .as_str()
            .unwrap()
            .contains("mock, friend")
    );
    assert_eq!(
        web.ok("session.search", json!({"query": "absent words"}))
            .await["items"],
        json!([])
    );
    assert_eq!(
        web.rpc("session.search", json!({"query": " "})).await["error"]["code"],
        "bad-request"
    );

    // Rename (logged with a user source), fork at the turn, archive and restore.
    let renamed = web
        .ok(
            "session.rename",
            json!({"sessionId": id, "title": "  My   greeting  "}),
        )
        .await;
    assert_eq!(renamed["title"], "My greeting");
    assert_eq!(
        web.rpc("session.rename", json!({"sessionId": id, "title": "  "}))
            .await["error"]["code"],
        "title-invalid"
    );
    let turn_end = events.iter().find(|e| e["type"] == "turn/end").unwrap()["seq"].clone();
    let fork = web
        .ok("session.fork", json!({"sessionId": id, "atSeq": turn_end}))
        .await;
    let child = fork["sessionId"].as_str().unwrap().to_string();
    let child_frames = web
        .stream(Some(&child), None)
        .await
        .until("snapshot", |_| true)
        .await;
    let snapshot = child_frames.last().unwrap().json();
    assert_eq!(snapshot["readOnly"], true);
    assert_eq!(snapshot["header"]["parentSession"], id.as_str());
    let child_text: String = snapshot["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "assistant/message")
        .filter_map(|e| {
            e["data"]["message"]["content"][0]["text"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(child_text, "Hello from the mock, friend.");
    let archived = web
        .ok("workspace.archiveSession", json!({"sessionId": child}))
        .await;
    assert_eq!(archived["archivedSessionIds"], json!([child]));
    let ids = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["sessionId"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(!ids(&web.ok("session.list", json!({})).await).contains(&child));
    assert_eq!(
        ids(&web.ok("session.list", json!({"archived": true})).await),
        vec![child.clone()]
    );
    web.ok("workspace.unarchiveSession", json!({"sessionId": child}))
        .await;
    assert!(ids(&web.ok("session.list", json!({})).await).contains(&child));

    // Continuing a cold session resumes it; deleting removes its directory and registry entries.
    let mut child_sse = web.stream(Some(&child), None).await;
    child_sse.until("snapshot", |_| true).await;
    web.ok(
        "session.prompt",
        json!({"sessionId": child, "content": [{"type": "text", "text": "more"}]}),
    )
    .await;
    let resumed = child_sse
        .until("snapshot", |s| s["readOnly"] == false)
        .await;
    assert_eq!(resumed.last().unwrap().json()["reset"], true);
    child_sse.until("events", has_turn_end).await;
    drop(child_sse);
    // The agent goes idle just after its turn/end is recorded (its idle status frame may
    // come before or after that event's frame); a running session refuses deletion, so wait
    // until the listing says idle, as a user's page does before offering Delete.
    let deadline = Instant::now() + WAIT;
    loop {
        let list = web.ok("session.list", json!({})).await;
        let idle = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["sessionId"] == child.as_str() && r["state"] == "idle");
        if idle {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the continued session never went idle: {list}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let files = dsh_persistence::SessionFiles::new(
        web.home.path().join(".dsh/sessions"),
        dsh_persistence::Compression::Zstd,
        dsh_persistence::ChunkPacking::Packed,
    );
    let dir = files
        .find(&child)
        .unwrap()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    web.ok("session.delete", json!({"sessionId": child})).await;
    assert!(!dir.exists(), "the session directory is gone");
    assert!(!ids(&web.ok("session.list", json!({})).await).contains(&child));
    let registry =
        std::fs::read_to_string(web.home.path().join(".dsh/storages/workspace.json")).unwrap();
    assert!(!registry.contains(&child), "{registry}");
    assert!(registry.contains(&id));
    assert_eq!(
        web.rpc("session.delete", json!({"sessionId": child})).await["error"]["code"],
        "session-not-found"
    );
    let text = web.stderr_text();
    assert!(!text.contains("panicked"), "{text}");
}

#[tokio::test]
async fn reconnecting_streams_resume_without_gaps_or_duplicates() {
    // A 12-step tool loop whose replies are held until the test lets them go.
    let server = MockServer::start().answer_untooled("Loop");
    let mut gates = Vec::new();
    for i in 0..12 {
        let gate = Gate::new();
        let reply = Reply::completion(Completion::default().tool_call(ToolCall::new(
            &format!("call_{i}"),
            "bash",
            &format!("{{\"command\":\"echo step {i}\",\"description\":\"step {i}\"}}"),
        )))
        .hold_after_event(1, &gate);
        server.push(reply);
        gates.push(gate);
    }
    let last = Gate::new();
    server.push(
        Reply::completion(Completion::text("All twelve steps done.").delta_chars(3))
            .hold_after_event(2, &last),
    );
    let mut web = Web::start(&server, &[("DEEPSEEK_API_KEY", "sk-x")], &[]);
    web.login().await;
    let cwd = web.work.path().display().to_string();
    let id = web.ok("session.create", json!({"cwd": cwd})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": "loop"}]}),
    )
    .await;

    // Reconnect after a varying number of frames, each time with the last id seen; every
    // `events` frame must start exactly at the cursor the previous frame established.
    let next_of = |id: &Option<String>| -> u64 {
        id.as_deref()
            .unwrap()
            .rsplit_once(':')
            .unwrap()
            .1
            .parse()
            .unwrap()
    };
    let mut collected: Vec<Value> = Vec::new();
    let mut last_id: Option<String> = None;
    let mut released = 0;
    let mut rounds = 0;
    let mut snapshots = 0;
    'outer: loop {
        rounds += 1;
        assert!(rounds < 300, "the loop did not finish");
        let mut sse = web.stream(Some(&id), last_id.as_deref()).await;
        let take = 1 + rounds % 4;
        let mut data_frames = 0;
        while data_frames < take {
            // Nothing new for a while: let the next held model reply go.
            let Some(f) = sse.next_within(Duration::from_millis(300)).await else {
                if released < gates.len() {
                    gates[released].open();
                    released += 1;
                } else {
                    last.open();
                }
                continue;
            };
            match f.event.as_str() {
                "snapshot" => {
                    assert!(
                        last_id.is_none(),
                        "a resumable cursor never gets a snapshot"
                    );
                    snapshots += 1;
                    collected = f.json()["events"].as_array().cloned().unwrap();
                    last_id = f.id.clone();
                    assert_eq!(
                        next_of(&last_id),
                        collected.last().unwrap()["seq"].as_u64().unwrap() + 1
                    );
                    data_frames += 1;
                }
                "events" => {
                    let batch = f.json().as_array().cloned().unwrap();
                    assert_eq!(
                        batch[0]["seq"].as_u64(),
                        Some(next_of(&last_id)),
                        "no gap, no duplicate"
                    );
                    for pair in batch.windows(2) {
                        assert_eq!(
                            pair[1]["seq"].as_u64().unwrap(),
                            pair[0]["seq"].as_u64().unwrap() + 1
                        );
                    }
                    collected.extend(batch);
                    last_id = f.id.clone();
                    assert_eq!(
                        next_of(&last_id),
                        collected.last().unwrap()["seq"].as_u64().unwrap() + 1
                    );
                    data_frames += 1;
                }
                _ => {}
            }
            if collected.iter().any(|e| e["type"] == "turn/end") {
                break 'outer;
            }
        }
    }
    assert_eq!(snapshots, 1);
    assert!(rounds > 5, "the test really reconnected ({rounds} rounds)");
    // What arrived is the log: every event a fresh snapshot shows, identical, once.
    let fresh = web
        .stream(Some(&id), None)
        .await
        .until("snapshot", |_| true)
        .await;
    let snapshot = fresh.last().unwrap().json();
    for want in snapshot["events"].as_array().unwrap() {
        let got: Vec<&Value> = collected
            .iter()
            .filter(|e| e["seq"] == want["seq"])
            .collect();
        assert_eq!(got, vec![want], "seq {}", want["seq"]);
    }
    let tool_results = collected
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .count();
    assert_eq!(tool_results, 12);
    let text: String = collected
        .iter()
        .filter(|e| e["type"] == "assistant/chunk" && e["data"]["chunk"]["type"] == "text-delta")
        .filter_map(|e| e["data"]["chunk"]["text"].as_str())
        .collect();
    assert_eq!(
        text, "All twelve steps done.",
        "every streamed delta arrived once"
    );
}

#[tokio::test]
async fn approvals_reach_the_tool_and_a_second_answer_is_not_pending() {
    let server = MockServer::start().answer_untooled("Escalate");
    let escalate = |id: &str, cmd: &str| {
        Reply::tool_call(
            id,
            "bash",
            &json!({"command": cmd, "description": "needs the network", "sandbox_permissions": "danger-full-access", "justification": "fetch the dependencies"}).to_string(),
        )
    };
    server.push(escalate("call_a", "echo approved-run"));
    server.push(escalate("call_b", "echo rejected-run"));
    server.push(Reply::text("Finished."));
    let mut web = Web::start(&server, &[("DEEPSEEK_API_KEY", "sk-x")], &[]);
    web.login().await;
    let id = web
        .ok(
            "session.create",
            json!({"cwd": web.work.path().display().to_string()}),
        )
        .await["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut sse = web.stream(Some(&id), None).await;
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": "go"}]}),
    )
    .await;
    let mut answered = Vec::new();
    for outcome in ["allowed-once", "rejected"] {
        let frames = sse
            .until("approvals", |a| {
                a["items"].as_array().is_some_and(|i| !i.is_empty())
            })
            .await;
        let item = frames.last().unwrap().json()["items"][0].clone();
        assert_eq!(item["toolName"], "bash");
        assert_eq!(item["arguments"]["justification"], "fetch the dependencies");
        let approval = item["approvalId"].as_str().unwrap().to_string();
        let body = json!({"type": "client-response", "rpcId": approval, "result": {"ok": true, "value": {"sessionId": id, "approvalId": approval, "outcome": outcome}}});
        let r: Value = web
            .post("/api/respond")
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r, json!({"accepted": true}));
        let again: Value = web
            .post("/api/respond")
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(again, json!({"accepted": false, "reason": "not-pending"}));
        answered.push(approval);
    }
    let frames = sse.until("events", has_turn_end).await;
    let _ = frames;
    let bad: Value = web
        .post("/api/respond")
        .json(&json!({"type": "client-response"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(bad, json!({"accepted": false, "reason": "bad-response"}));
    // The log has the decisions and the tool saw them.
    let all = events_of(
        &web.stream(Some(&id), None)
            .await
            .until("snapshot", |_| true)
            .await,
    );
    let decided: Vec<(String, String)> = all
        .iter()
        .filter(|e| e["type"] == "approval/decided")
        .map(|e| {
            (
                e["data"]["id"].as_str().unwrap().to_string(),
                e["data"]["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        decided,
        vec![
            (answered[0].clone(), "allowed-once".into()),
            (answered[1].clone(), "rejected".into())
        ]
    );
    let results: Vec<String> = all
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .map(|e| {
            e["data"]["message"]["content"][0]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert!(results[0].contains("approved-run"), "{results:?}");
    assert!(results[1].contains("rejected"), "{results:?}");
}

#[tokio::test]
async fn ctrl_c_cancels_the_running_turn_flushes_and_exits_130() {
    let server = MockServer::start().answer_untooled("Waiting");
    let gate = Gate::new();
    server.push(Reply::text("this answer never completes").hold_after_event(2, &gate));
    let mut web = Web::start(&server, &[("DEEPSEEK_API_KEY", "sk-x")], &[]);
    web.login().await;
    let id = web
        .ok(
            "session.create",
            json!({"cwd": web.work.path().display().to_string()}),
        )
        .await["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut sse = web.stream(Some(&id), None).await;
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": "wait"}]}),
    )
    .await;
    sse.until("events", |v| {
        v.as_array()
            .is_some_and(|l| l.iter().any(|e| e["type"] == "assistant/chunk"))
    })
    .await;
    let pid = web.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let frames = sse.until("shutdown", |_| true).await;
    assert!(frames.iter().any(|f| f.event == "shutdown"));
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = web.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "dsh web did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    let files = dsh_persistence::SessionFiles::new(
        web.home.path().join(".dsh/sessions"),
        dsh_persistence::Compression::Zstd,
        dsh_persistence::ChunkPacking::Packed,
    );
    let loaded = files.inspect(&id).unwrap();
    assert!(
        loaded.repair.is_none(),
        "the log is complete: {:?}",
        loaded.repair
    );
    let end = loaded
        .events
        .iter()
        .rev()
        .find(|e| e.is("turn/end"))
        .unwrap();
    assert_eq!(end.data["reason"]["kind"], "aborted");
}

#[tokio::test]
async fn an_openai_compatible_endpoint_added_in_settings_serves_new_sessions_without_restart() {
    let server = MockServer::start().answer_untooled("Unused");
    let alt = MockServer::start().answer_untooled("Endpoint title");
    alt.push(Reply::text("Answer from the added endpoint."));
    let mut web = Web::start(&server, &[("DEEPSEEK_API_KEY", "sk-x")], &[]);
    web.login().await;
    let bad = web
        .rpc(
            "llm.saveProvider",
            json!({"id": "bad id!", "baseURL": alt.url(), "model": "m"}),
        )
        .await;
    assert_eq!(bad["error"]["code"], "bad-request");
    let bad = web
        .rpc(
            "llm.saveProvider",
            json!({"id": "x", "baseURL": "ftp://nowhere", "model": "m"}),
        )
        .await;
    assert_eq!(bad["error"]["code"], "bad-request");
    let listed = web
        .ok(
            "llm.saveProvider",
            json!({"id": "my-llm", "name": "My LLM", "baseURL": format!("{}/", alt.url()), "apiKey": "sk-alt-999", "model": "alt-model"}),
        )
        .await;
    assert!(!listed.to_string().contains("sk-alt-999"), "{listed}");
    let mine = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "my-llm")
        .cloned()
        .unwrap();
    assert_eq!(mine["credential"]["configured"], true);
    assert_eq!(mine["models"], json!(["alt-model"]));
    let unknown = web
        .rpc(
            "llm.setDefault",
            json!({"provider": "my-llm", "model": "other"}),
        )
        .await;
    assert_eq!(unknown["error"]["code"], "bad-request");
    let chosen = web
        .ok(
            "llm.setDefault",
            json!({"provider": "my-llm", "model": "alt-model"}),
        )
        .await;
    assert_eq!(
        chosen["default"],
        json!({"provider": "my-llm", "model": "alt-model"})
    );

    let id = web
        .ok(
            "session.create",
            json!({"cwd": web.work.path().display().to_string()}),
        )
        .await["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut sse = web.stream(Some(&id), None).await;
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": "hello endpoint"}]}),
    )
    .await;
    let events = events_of(&sse.until("events", has_turn_end).await);
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "assistant/message")
        .filter_map(|e| {
            e["data"]["message"]["content"][0]["text"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(text, "Answer from the added endpoint.");
    let request = &alt.requests()[0];
    assert_eq!(request.header("authorization"), Some("Bearer sk-alt-999"));
    assert_eq!(request.json.as_ref().unwrap()["model"], "alt-model");
    assert!(
        server.requests().is_empty(),
        "the DeepSeek route was not used"
    );
    let settings = std::fs::read_to_string(web.home.path().join(".dsh/settings.yaml")).unwrap();
    assert!(
        settings.contains("my-llm") && settings.contains("DSH_MY_LLM_API_KEY"),
        "{settings}"
    );
    assert!(!settings.contains("sk-alt-999"));

    let after = web.ok("llm.removeProvider", json!({"id": "my-llm"})).await;
    assert_eq!(
        after["default"]["provider"], "deepseek-official",
        "the default falls back"
    );
    assert!(
        after["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["id"] != "my-llm")
    );
}

/// A non-loopback address of this machine (the one routing to a documentation address),
/// if any.
fn local_ip() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[tokio::test]
async fn a_non_loopback_bind_warns_and_keeps_configuration_on_loopback() {
    let Some(ip) = local_ip() else {
        dsh_test_support::prereq::skip("this machine has no non-loopback IPv4 address to bind");
        return;
    };
    let server = MockServer::start();
    let home = tempfile::tempdir().unwrap();
    let mut child = dsh(home.path(), home.path(), Some(&server))
        .args(["web", "--no-open", "--port", "0", "--host", &ip.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut warning = String::new();
    err.read_line(&mut warning).unwrap();
    assert!(
        warning.starts_with(&format!(
            "dsh web: warning: listening on {ip} over plain HTTP"
        )),
        "{warning}"
    );
    let url = line.trim().strip_prefix("dsh web: ").unwrap().to_string();
    assert!(url.starts_with(&format!("http://{ip}:")), "{url}");
    let base = url.split("/?token=").next().unwrap().to_string();
    let c = Web::client();
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let call = |method: &'static str, payload: Value| {
        c.post(format!("{base}/api/{method}"))
            .header("cookie", cookie.clone())
            .json(&json!({"type": "client-request", "rpcId": "n", "method": method, "payload": payload}))
            .send()
    };
    let listed: Value = call("session.list", json!({}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["result"]["ok"], true);
    let refused: Value = call(
        "credentials.set",
        json!({"ref": "DEEPSEEK_API_KEY", "value": "sk-remote"}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(refused["result"]["error"]["code"], "forbidden");
    assert!(
        !home.path().join(".dsh/.credentials.yaml").exists()
            || !std::fs::read_to_string(home.path().join(".dsh/.credentials.yaml"))
                .unwrap()
                .contains("sk-remote")
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn a_sign_in_survives_a_restart_on_the_same_port() {
    let server = MockServer::start();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let start = |home: &std::path::Path, work: &std::path::Path| {
        let mut child = dsh(home, work, Some(&server))
            .args(["web", "--no-open", "--port", &port])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (
            child,
            line.trim().strip_prefix("dsh web: ").unwrap().to_string(),
        )
    };
    let (mut first, url) = start(home.path(), work.path());
    let c = Web::client();
    let r = c.get(&url).send().await.unwrap();
    let cookie = r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let _ = first.kill();
    let _ = first.wait();
    // The restarted server reads the stored secret (and its credentials file) back.
    let (mut second, url2) = start(home.path(), work.path());
    assert_ne!(url, url2, "a new launch token");
    let base = url2.split("/?token=").next().unwrap().to_string();
    // A fresh client: the pooled connection died with the first server.
    let page = Web::client()
        .get(format!("{base}/"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let _ = second.kill();
    let _ = second.wait();
}

// ---------------------------------------------------------------------------------------
// Image prompts.

/// A web server whose default model is DeepSeek's image-capable one.
fn vision_web(server: &MockServer) -> Web {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".dsh")).unwrap();
    std::fs::write(
        home.path().join(".dsh/settings.yaml"),
        "agent-default-model:\n  provider: deepseek-official\n  model: deepseek-flash\n",
    )
    .unwrap();
    Web::start_in(home, work, server, &[("DEEPSEEK_API_KEY", "sk-x")], &[])
}

/// The main-loop requests (title requests carry no tools).
/// The bodies of the model requests (with tools), their conversation in chat shape.
fn model_requests(server: &MockServer) -> Vec<Value> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .map(|r| r.chat_body())
        .collect()
}

impl Web {
    async fn new_session(&self) -> String {
        self.ok(
            "session.create",
            json!({"cwd": self.work.path().display().to_string()}),
        )
        .await["sessionId"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Stops this `dsh web`, waits `downtime`, and starts another on the same home and
    /// workspace, signed in.
    async fn restart(
        mut self,
        server: &MockServer,
        env: &[(&str, &str)],
        downtime: Duration,
    ) -> Web {
        let home = std::mem::replace(&mut self.home, tempfile::tempdir().unwrap());
        let work = std::mem::replace(&mut self.work, tempfile::tempdir().unwrap());
        drop(self);
        tokio::time::sleep(downtime).await;
        let mut web = Web::start_in(home, work, server, env, &[]);
        web.login().await;
        web
    }

    /// The committed events of `id`, from a fresh stream's snapshot.
    async fn events(&self, id: &str) -> Vec<Value> {
        let mut sse = self.stream(Some(id), None).await;
        events_of(&sse.until("snapshot", |_| true).await)
    }

    fn stored_objects(&self) -> usize {
        let root = self.home.path().join(".dsh/attachments/v1/objects");
        std::fs::read_dir(root).map_or(0, |dirs| {
            dirs.filter_map(Result::ok)
                .filter_map(|d| std::fs::read_dir(d.path()).ok())
                .map(Iterator::count)
                .sum()
        })
    }
}

fn user_messages(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] == "user/message" && e["data"]["source"]["kind"] == "user")
        .cloned()
        .collect()
}

/// The last message of a request that carries an image.
fn last_image_message(request: &Value) -> Value {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m.to_string().contains("image_url"))
        .cloned()
        .unwrap_or_else(|| panic!("no image in {request:#}"))
}

fn image_part(bytes: &[u8], name: Option<&str>) -> Value {
    let mut part = json!({"type": "image", "mediaType": "image/png", "data": dsh_attachments::encode_base64(bytes)});
    if let Some(n) = name {
        part["name"] = json!(n);
    }
    part
}

#[tokio::test]
async fn image_prompts_reach_the_model_from_the_store_and_are_served_only_to_their_session() {
    let server = MockServer::start().answer_untooled("Picture title");
    server.push(Reply::text("A tiny picture."));
    server.push(Reply::text("Another one."));
    let mut web = vision_web(&server);
    web.login().await;
    let first = png(3, 2);
    let second = png(2, 5);
    let id = web.new_session().await;

    // Text and an image, in wire order: stored, then queued, then sent as a data URL.
    let mut sse = web.stream(Some(&id), None).await;
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": "what is this?"}, image_part(&first, Some("red.png"))]}),
    )
    .await;
    sse.until("events", has_turn_end).await;
    let requests = model_requests(&server);
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert_eq!(requests[0]["model"], "deepseek-flash");
    // The user's text first, then the image as a data URL of the stored bytes.
    let message = last_image_message(&requests[0]);
    assert_eq!(message["role"], "user");
    let parts = message["content"].as_array().unwrap();
    assert_eq!(parts[0], json!({"type": "text", "text": "what is this?"}));
    let url = format!(
        "data:image/png;base64,{}",
        dsh_attachments::encode_base64(&first)
    );
    assert!(
        parts.contains(&json!({"type": "image_url", "image_url": {"url": url}})),
        "{message:#}"
    );
    let events = web.events(&id).await;
    let users = user_messages(&events);
    assert_eq!(users.len(), 1, "{users:#?}");
    let content = &users[0]["data"]["content"];
    assert_eq!(content[0], json!({"type": "text", "text": "what is this?"}));
    let attachment = content[1]["attachment"].clone();
    let first_id = attachment["attachmentId"].as_str().unwrap().to_string();
    assert!(first_id.starts_with("sha256:"), "{attachment}");
    assert_eq!(
        (
            attachment["width"].clone(),
            attachment["height"].clone(),
            attachment["name"].clone()
        ),
        (json!(3), json!(2), json!("red.png"))
    );
    assert!(
        !Value::Array(events.clone())
            .to_string()
            .contains(&dsh_attachments::encode_base64(&first)),
        "the log keeps a reference, never the bytes"
    );

    // An image-only prompt.
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [image_part(&second, None)]}),
    )
    .await;
    sse.until("events", has_turn_end).await;
    let requests = model_requests(&server);
    assert_eq!(requests.len(), 2);
    let last = last_image_message(&requests[1]);
    assert_eq!(last["role"], "user");
    let url = format!(
        "data:image/png;base64,{}",
        dsh_attachments::encode_base64(&second)
    );
    assert!(last.to_string().contains(&url), "{last:#}");
    let users = user_messages(&web.events(&id).await);
    let content = users[1]["data"]["content"].as_array().unwrap().clone();
    assert_eq!(content.len(), 1, "{content:#?}");
    assert_eq!(content[0]["type"], "image");
    assert_eq!(content[0]["attachment"]["height"], 5);
    let objects = web.stored_objects();
    assert_eq!(objects, 2);

    // Corrupt or malformed images are refused and nothing is queued or stored.
    for (part, reason) in [
        (
            json!({"type": "image", "mediaType": "image/png", "data": dsh_attachments::encode_base64(b"not a png at all")}),
            "INVALID_IMAGE",
        ),
        (
            json!({"type": "image", "mediaType": "image/png", "data": "aGk"}),
            "INVALID_IMAGE_BASE64",
        ),
        (
            json!({"type": "image", "mediaType": "image/tiff", "data": "aGk="}),
            "UNSUPPORTED_IMAGE_TYPE",
        ),
    ] {
        let r = web
            .rpc(
                "session.prompt",
                json!({"sessionId": id, "content": [{"type": "text", "text": "and this?"}, image_part(&first, None), part]}),
            )
            .await;
        assert_eq!(r["ok"], false, "{r}");
        assert_eq!(r["error"]["code"], "attachment-error", "{r}");
        assert_eq!(r["error"]["details"]["reason"], reason, "{r}");
    }
    let missing = web
        .rpc(
            "session.prompt",
            json!({"sessionId": id, "content": [{"type": "image", "mediaType": "image/png"}]}),
        )
        .await;
    assert_eq!(missing["error"]["code"], "bad-request", "{missing}");
    let command = web
        .rpc(
            "session.prompt",
            json!({"sessionId": id, "content": [{"type": "text", "text": "/compact"}, image_part(&first, None)]}),
        )
        .await;
    assert_eq!(command["error"]["code"], "bad-request", "{command}");
    assert!(
        command["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/compact is a command"),
        "{command}"
    );
    assert_eq!(user_messages(&web.events(&id).await).len(), 2);
    assert_eq!(model_requests(&server).len(), 2);
    assert_eq!(web.stored_objects(), objects);

    // session.attachment serves referenced images only.
    let served = web
        .ok(
            "session.attachment",
            json!({"sessionId": id, "attachmentId": first_id}),
        )
        .await;
    assert_eq!(
        served["data"],
        json!(dsh_attachments::encode_base64(&first))
    );
    assert_eq!(served["attachment"]["attachmentId"], json!(first_id));
    assert_eq!(served["attachment"]["mediaType"], "image/png");
    let unknown = web
        .rpc(
            "session.attachment",
            json!({"sessionId": id, "attachmentId": format!("sha256:{}", "0".repeat(64))}),
        )
        .await;
    assert_eq!(unknown["error"]["code"], "attachment-error", "{unknown}");
    assert_eq!(
        unknown["error"]["details"]["reason"],
        "ATTACHMENT_NOT_REFERENCED"
    );
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not found"),
        "{unknown}"
    );

    // A session on a model without image input refuses images, naming the model; another
    // session cannot read the first one's image.
    web.ok(
        "llm.setDefault",
        json!({"provider": "deepseek-official", "model": "deepseek-v4-pro"}),
    )
    .await;
    let other = web.new_session().await;
    assert_ne!(other, id);
    let refused = web
        .rpc(
            "session.prompt",
            json!({"sessionId": other, "content": [{"type": "text", "text": "see?"}, image_part(&png(4, 4), None)]}),
        )
        .await;
    assert_eq!(refused["error"]["code"], "attachment-error", "{refused}");
    assert_eq!(
        refused["error"]["details"]["reason"],
        "MODEL_DOES_NOT_SUPPORT_IMAGES"
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"deepseek-v4-pro\""),
        "{refused}"
    );
    assert!(user_messages(&web.events(&other).await).is_empty());
    assert_eq!(web.stored_objects(), objects);
    let foreign = web
        .rpc(
            "session.attachment",
            json!({"sessionId": other, "attachmentId": first_id}),
        )
        .await;
    assert_eq!(
        foreign["error"]["details"]["reason"], "ATTACHMENT_NOT_REFERENCED",
        "{foreign}"
    );
    assert_eq!(model_requests(&server).len(), 2);
}

/// `/plan` typed into the web prompt: the command answers in the prompt's response, commits
/// `plan/mode`, and the next turn's request carries the plan section.
#[tokio::test]
async fn plan_mode_is_switched_from_a_web_text_prompt() {
    let server = MockServer::start().answer_untooled("Planning");
    server.push(Reply::text("a plan"));
    let mut web = Web::start(&server, &[("DEEPSEEK_API_KEY", "sk-x")], &[]);
    web.login().await;
    let id = web.new_session().await;
    let on = web
        .ok(
            "session.prompt",
            json!({"sessionId": id, "content": [{"type": "text", "text": "/plan"}]}),
        )
        .await;
    assert_eq!(
        on["command"],
        json!({"text": "Plan mode on. Leave it with /plan off.", "isError": false, "recorded": true}),
        "{on}"
    );
    let mut sse = web.stream(Some(&id), None).await;
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": "design a cache"}]}),
    )
    .await;
    sse.until("events", has_turn_end).await;
    let requests = model_requests(&server);
    assert_eq!(requests.len(), 1);
    let system = requests[0]["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("Plan mode is on."), "{system}");
    let modes: Vec<Value> = web
        .events(&id)
        .await
        .into_iter()
        .filter(|e| e["type"] == "plan/mode")
        .map(|e| e["data"]["active"].clone())
        .collect();
    assert_eq!(modes, [json!(true)]);
}

/// `/goal <objective>` typed into the web prompt: the command answers in the prompt's
/// response and the goal's first round starts on its own; in it the model completes the
/// goal, and the log holds the goal's changes and the round prompt.
#[tokio::test]
async fn a_goal_set_from_a_web_prompt_runs_its_first_round() {
    let server = MockServer::start().answer_untooled("Goals");
    server.push(Reply::tool_call("g1", "get_goal", "{}"));
    server.push(Reply::dynamic(|r| {
        let got: Value = serde_json::from_str(&r.last_tool_output().unwrap_or_default()).unwrap();
        let args = json!({"goal_id": got["goal"]["id"], "revision": got["goal"]["revision"],
            "action": "complete"});
        Reply::tool_call("g2", "update_goal", &args.to_string())
    }));
    server.push(Reply::text("Docs updated."));
    let mut web = Web::start(&server, &[("DEEPSEEK_API_KEY", "sk-x")], &[]);
    web.login().await;
    let id = web.new_session().await;
    let mut sse = web.stream(Some(&id), None).await;
    let set = web
        .ok(
            "session.prompt",
            json!({"sessionId": id, "content": [{"type": "text", "text": "/goal Update the docs"}]}),
        )
        .await;
    assert_eq!(set["command"]["isError"], json!(false), "{set}");
    let text = set["command"]["text"].as_str().unwrap_or("");
    assert!(text.starts_with("Goal set\nStatus: active\n"), "{text}");
    sse.until("events", has_turn_end).await;
    let requests = model_requests(&server);
    assert_eq!(requests.len(), 3);
    assert!(requests[0].to_string().contains("<goal_round>"));
    let events = web.events(&id).await;
    let operations: Vec<Value> = events
        .iter()
        .filter(|e| e["type"] == "goal/change")
        .map(|e| e["data"]["operation"].clone())
        .collect();
    assert_eq!(operations, [json!("create"), json!("complete")]);
    let rounds = events
        .iter()
        .filter(|e| e["type"] == "user/message" && e["data"]["source"]["kind"] == "goal")
        .count();
    assert_eq!(rounds, 1);
}

// ---------------------------------------------------------------------------------------
// User questions answered from the page.

async fn respond_json(web: &Web, body: &Value) -> Value {
    web.post("/api/respond")
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn question_reply(session: &str, question: &str, value: Value) -> Value {
    let mut value = value;
    value["sessionId"] = json!(session);
    value["questionId"] = json!(question);
    json!({"type": "client-response", "rpcId": question, "result": {"ok": true, "value": value}})
}

#[tokio::test]
async fn user_questions_are_answered_once_from_the_page_and_a_cancelled_turn_clears_them() {
    let server = MockServer::start().answer_untooled("Nothing more.");
    let ask = |id: &str| {
        Reply::tool_call(
            id,
            "ask_user_question",
            &json!({"questions": [
                {"id": "color", "header": "Colour", "question": "Which colour?",
                 "options": [{"label": "Red"}, {"label": "Blue", "description": "calmer"}]},
                {"id": "name", "question": "What is the dog called?"}
            ]})
            .to_string(),
        )
    };
    server.push(ask("call_q1"));
    server.push(Reply::text("Blue it is, Rex."));
    server.push(ask("call_q2"));
    let mut web = Web::start(&server, &[("DEEPSEEK_API_KEY", "sk-x")], &[]);
    web.login().await;
    let id = web
        .ok(
            "session.create",
            json!({"cwd": web.work.path().display().to_string()}),
        )
        .await["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut sse = web.stream(Some(&id), None).await;
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": "ask me"}]}),
    )
    .await;
    let frames = sse
        .until("questions", |q| {
            q["items"].as_array().is_some_and(|i| !i.is_empty())
        })
        .await;
    let item = frames.last().unwrap().json()["items"][0].clone();
    assert_eq!(item["sessionId"], json!(id));
    assert_eq!(item["questions"][0]["header"], "Colour");
    assert_eq!(item["questions"][0]["options"][1]["label"], "Blue");
    assert_eq!(item["questions"][1]["question"], "What is the dog called?");
    assert!(item["planReview"].is_null());
    let question = item["questionId"].as_str().unwrap().to_string();
    // A page opened now (a reload) has it in its baseline; the session list says so.
    let live = web
        .stream(Some(&id), None)
        .await
        .until("live", |_| true)
        .await
        .last()
        .unwrap()
        .json();
    assert_eq!(live["questions"][0]["questionId"], json!(question));
    let listed = web.ok("session.list", json!({})).await;
    let row = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["sessionId"] == json!(id))
        .cloned()
        .unwrap();
    assert_eq!(row["state"], "question", "{row}");
    // Answers that do not fit are refused with the reason, and the question stays.
    let wrong = respond_json(
        &web,
        &question_reply(
            &id,
            &question,
            json!({"answers": [{"id": "color", "selected": ["Green"]}, {"id": "name", "custom": "Rex"}]}),
        ),
    )
    .await;
    assert_eq!(
        wrong,
        json!({"accepted": false, "reason": "invalid-answer", "message": "\"Green\" is not an option of question \"color\""})
    );
    let two = respond_json(
        &web,
        &question_reply(
            &id,
            &question,
            json!({"answers": [{"id": "color", "selected": ["Red", "Blue"]}, {"id": "name", "custom": "Rex"}]}),
        ),
    )
    .await;
    assert_eq!(two["message"], "question \"color\" takes one option");
    let good = question_reply(
        &id,
        &question,
        json!({"answers": [{"id": "name", "custom": " Rex "}, {"id": "color", "selected": ["Blue"]}]}),
    );
    assert_eq!(respond_json(&web, &good).await, json!({"accepted": true}));
    assert_eq!(
        respond_json(&web, &good).await,
        json!({"accepted": false, "reason": "not-pending"})
    );
    sse.until("questions", |q| q["items"] == json!([])).await;
    sse.until("events", has_turn_end).await;
    let requests = server.requests();
    assert_eq!(
        requests[1].last_tool_output().as_deref(),
        Some(
            r#"{"answers":[{"id":"color","selected":["Blue"]},{"id":"name","selected":[],"custom":"Rex"}]}"#
        ),
        "the model's next request carries the answer"
    );
    // A turn cancelled while the question waits clears it; a late answer is not taken.
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": "ask again"}]}),
    )
    .await;
    let frames = sse
        .until("questions", |q| {
            q["items"].as_array().is_some_and(|i| !i.is_empty())
        })
        .await;
    let second = frames.last().unwrap().json()["items"][0]["questionId"]
        .as_str()
        .unwrap()
        .to_string();
    web.ok("session.cancel", json!({"sessionId": id})).await;
    sse.until("questions", |q| q["items"] == json!([])).await;
    assert_eq!(
        respond_json(
            &web,
            &question_reply(
                &id,
                &second,
                json!({"answers": [{"id": "color", "selected": ["Red"]}, {"id": "name", "custom": "Max"}]}),
            ),
        )
        .await,
        json!({"accepted": false, "reason": "not-pending"})
    );
    sse.until("status", |s| s["running"] == false).await;
    assert_eq!(server.requests().len(), 3, "no model call after the cancel");
}

/// `/plan`, then `exit_plan_mode`: the page sees the plan review, "keep planning" sends
/// its feedback to the model, approving the revised plan leaves plan mode (`plan/mode`
/// flips) and the model's next request carries the approval.
#[tokio::test]
async fn a_plan_review_is_sent_back_then_approved_from_the_page() {
    let server = MockServer::start().answer_untooled("Planning");
    let submit = |id: &str, plan: &str| {
        Reply::tool_call(id, "exit_plan_mode", &json!({"plan": plan}).to_string())
    };
    server.push(submit("call_p1", "# Cache plan\n\n- add a map"));
    server.push(submit(
        "call_p2",
        "# Cache plan\n\n- add a map\n- evict the oldest",
    ));
    server.push(Reply::text("Carrying it out."));
    let mut web = Web::start(&server, &[("DEEPSEEK_API_KEY", "sk-x")], &[]);
    web.login().await;
    let id = web.new_session().await;
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": "/plan"}]}),
    )
    .await;
    let mut sse = web.stream(Some(&id), None).await;
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": "design a cache"}]}),
    )
    .await;
    let mut reviews = Vec::new();
    for round in 0..2 {
        let frames = sse
            .until("questions", |q| {
                q["items"].as_array().is_some_and(|i| !i.is_empty())
            })
            .await;
        let item = frames.last().unwrap().json()["items"][0].clone();
        let review = &item["planReview"];
        assert_eq!(review["approve"], "Approve", "{item}");
        let question = item["questionId"].as_str().unwrap().to_string();
        let qid = item["questions"][0]["id"].as_str().unwrap().to_string();
        reviews.push(review["plan"].as_str().unwrap().to_string());
        let reply = if round == 0 {
            json!({"answers": [{"id": qid, "selected": ["Keep planning"], "custom": "add eviction"}]})
        } else {
            let mixed = respond_json(
                &web,
                &question_reply(
                    &id,
                    &question,
                    json!({"answers": [{"id": qid, "selected": ["Approve"], "custom": "but hurry"}]}),
                ),
            )
            .await;
            assert_eq!(mixed["reason"], "invalid-answer", "{mixed}");
            json!({"answers": [{"id": qid, "selected": ["Approve"]}]})
        };
        assert_eq!(
            respond_json(&web, &question_reply(&id, &question, reply)).await,
            json!({"accepted": true})
        );
    }
    sse.until("events", has_turn_end).await;
    assert_eq!(
        reviews,
        [
            "# Cache plan\n\n- add a map",
            "# Cache plan\n\n- add a map\n- evict the oldest"
        ]
    );
    let requests = server.requests();
    let feedback = requests[1].last_tool_output().unwrap_or_default();
    assert!(
        feedback.contains("Their feedback: add eviction"),
        "{feedback}"
    );
    let approved = requests[2].last_tool_output().unwrap_or_default();
    assert!(approved.contains("Plan approved"), "{approved}");
    let modes: Vec<Value> = web
        .events(&id)
        .await
        .into_iter()
        .filter(|e| e["type"] == "plan/mode")
        .map(|e| e["data"]["active"].clone())
        .collect();
    assert_eq!(modes, [json!(true), json!(false)]);
}

/// `session.options` / `setModel` / `setEffort` / `setMode`: what is offered, and a clear
/// refusal (nothing changed) for a model, effort or mode that is not offered.
#[tokio::test]
async fn session_choices_are_offered_and_bad_ones_refused() {
    let server = MockServer::start().answer_untooled("Choices");
    server.push(Reply::text("ok"));
    let mut web = Web::start(&server, &[("DEEPSEEK_API_KEY", "sk-x")], &[]);
    web.login().await;
    let id = web.new_session().await;
    let offered = web.ok("session.options", json!({"sessionId": id})).await;
    let models: Vec<&str> = offered["models"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["model"].as_str())
        .collect();
    assert!(
        models.contains(&"deepseek-flash") && models.contains(&"deepseek-v4-pro"),
        "{offered}"
    );
    assert!(
        offered["mode"]["options"].as_array().unwrap().len() >= 2,
        "{offered}"
    );
    let before = offered["model"].clone();
    for (method, payload, needle) in [
        (
            "session.setModel",
            json!({"sessionId": id, "provider": "deepseek-official", "model": "gpt-9"}),
            "not a configured model",
        ),
        (
            "session.setModel",
            json!({"sessionId": id, "provider": "nowhere", "model": "deepseek-flash"}),
            "not a configured model",
        ),
        (
            "session.setEffort",
            json!({"sessionId": id, "effort": "extreme"}),
            "extreme",
        ),
        (
            "session.setMode",
            json!({"sessionId": id, "mode": "root"}),
            "unknown permission mode root",
        ),
        (
            "session.setModel",
            json!({"sessionId": "no-such-session", "provider": "deepseek-official", "model": "deepseek-flash"}),
            "No session",
        ),
    ] {
        let r = web.rpc(method, payload.clone()).await;
        assert_eq!(r["ok"], false, "{method} {payload}: {r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains(needle),
            "{method}: {r}"
        );
    }
    let after = web.ok("session.options", json!({"sessionId": id})).await;
    assert_eq!(after["model"], before, "a refused choice changes nothing");
    let set = web
        .ok(
            "session.setMode",
            json!({"sessionId": id, "mode": "read-only"}),
        )
        .await;
    assert_eq!(set["mode"]["current"], "read-only", "{set}");
}

/// Starts `dsh web` with `args`; returns the child and its first stdout line's URL (or,
/// when it exits first, its stderr).
fn spawn_web(
    home: &std::path::Path,
    work: &std::path::Path,
    server: &MockServer,
    args: &[&str],
) -> (Child, Result<String, String>) {
    let mut child = dsh(home, work, Some(server))
        .args(["web", "--no-open", "--port", "0"])
        .args(args)
        .env("DEEPSEEK_API_KEY", "sk-x")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    match rx.recv_timeout(WAIT) {
        Ok(line) => (child, Ok(line.trim_start_matches("dsh web: ").to_string())),
        Err(_) => {
            let _ = child.wait();
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            (child, Err(err))
        }
    }
}

/// A self-signed certificate for 127.0.0.1 and localhost, made by `openssl`; `None` (a
/// skip, or a failure in strict runs) without it.
fn self_signed(dir: &std::path::Path) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    if !dsh_test_support::prereq::runs("openssl", &["version"]) {
        dsh_test_support::prereq::skip(
            "TLS tests need the openssl command (apt-get install openssl)",
        );
        return None;
    }
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let ok = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=dsh-test",
        ])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        // A server certificate, not a CA (webpki refuses a CA as the end entity).
        .args([
            "-addext",
            "basicConstraints=critical,CA:FALSE",
            "-addext",
            "keyUsage=digitalSignature",
        ])
        .args(["-addext", "extendedKeyUsage=serverAuth"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "openssl could not make a test certificate");
    Some((cert, key))
}

/// `--tls-cert/--tls-key`: the printed URL is https, the page and the API answer over TLS
/// with a `Secure` sign-in cookie, plain HTTP to the port gets no page; an unpaired flag or
/// a file that is not a certificate is a startup error naming it.
#[tokio::test]
async fn https_with_a_certificate_and_key() {
    let server = MockServer::start().answer_untooled("TLS");
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let Some((cert, key)) = self_signed(work.path()) else {
        return;
    };
    let (cert_s, key_s) = (cert.display().to_string(), key.display().to_string());
    let (mut child, url) = spawn_web(
        home.path(),
        work.path(),
        &server,
        &["--tls-cert", &cert_s, "--tls-key", &key_s],
    );
    let url = url.unwrap();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(&cert).unwrap()).unwrap(),
        )
        .no_proxy()
        .build()
        .unwrap();
    let r = client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.contains("; Secure") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    let base = url.split("/?token=").next().unwrap().to_string();
    let page = client
        .get(format!("{base}/"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("js/app.js"));
    let rpc: Value = client
        .post(format!("{base}/api/session.list"))
        .header("cookie", &pair)
        .json(&json!({"type": "client-request", "rpcId": "r", "method": "session.list", "payload": {}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rpc["result"]["ok"], true, "{rpc}");
    let plain = Web::client()
        .get(base.replace("https://", "http://") + "/")
        .send()
        .await;
    assert!(
        plain.map_or(true, |r| r.status() != 200),
        "plain HTTP to the TLS port serves no page"
    );
    let _ = child.kill();
    let _ = child.wait();

    // Bad input: an unpaired flag, a certificate file that holds none.
    let out = dsh(home.path(), work.path(), Some(&server))
        .args(["web", "--no-open", "--port", "0", "--tls-cert", &cert_s])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-cert needs --tls-key"));
    let (_child, failed) = spawn_web(
        home.path(),
        work.path(),
        &server,
        &["--tls-cert", &key_s, "--tls-key", &key_s],
    );
    let err = failed.unwrap_err();
    assert!(err.contains("--tls-cert") && err.contains(&key_s), "{err}");
}

/// `--public-url`: the printed sign-in URL is the advertised root, the fence admits the
/// proxy's Host and Origin (whatever Host the proxy forwards) and nothing else, and the
/// cookie is `Secure` for an https root.
#[tokio::test]
async fn a_public_url_is_printed_and_admitted_by_the_fence() {
    let server = MockServer::start().answer_untooled("Proxy");
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    // The port is chosen here: the printed URL names the proxy, not the backend.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let port_s = port.to_string();
    let (mut child, url) = spawn_web(
        home.path(),
        work.path(),
        &server,
        &["--port", &port_s, "--public-url", "https://App.Example/ui"],
    );
    let url = url.unwrap();
    let token = url
        .strip_prefix("https://app.example/ui/?token=")
        .unwrap_or_else(|| panic!("{url}"))
        .to_string();
    let backend = format!("http://127.0.0.1:{port}");
    let client = Web::client();
    // The proxy keeps Host: the token exchange works and the cookie is Secure.
    let r = client
        .get(format!("{backend}/?token={token}"))
        .header("host", "app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.contains("; Secure"), "{cookie}");
    let pair = cookie.split(';').next().unwrap().to_string();
    let list = |host: &'static str, origin: &'static str| {
        client
            .post(format!("{backend}/api/session.list"))
            .header("host", host)
            .header("origin", origin)
            .header("cookie", pair.clone())
            .json(&json!({"type": "client-request", "rpcId": "r", "method": "session.list", "payload": {}}))
            .send()
    };
    assert_eq!(
        list("app.example", "https://app.example")
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        list("app.example", "https://evil.example")
            .await
            .unwrap()
            .status(),
        403,
        "another origin is refused"
    );
    assert_eq!(
        list("elsewhere.example", "https://app.example")
            .await
            .unwrap()
            .status(),
        403,
        "another Host is refused"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// `surfaceContext` (on by default): the model's shell calls see `DSH_WEB_URL`, the root
/// this page is reached at.
#[tokio::test]
async fn shell_calls_see_the_web_url() {
    let server = MockServer::start().answer_untooled("Env");
    server.push_all([
        Reply::tool_call(
            "call_env",
            "bash",
            &json!({"command": "echo \"url=$DSH_WEB_URL\"", "description": "env"}).to_string(),
        ),
        Reply::text("seen"),
    ]);
    let mut web = Web::start(&server, &[("DEEPSEEK_API_KEY", "sk-x")], &[]);
    web.login().await;
    let id = web.new_session().await;
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": "print the url"}]}),
    )
    .await;
    let requests = server.wait_for_requests(2, WAIT);
    let output = requests[1].last_tool_output().unwrap_or_default();
    assert!(output.contains(&format!("url={}/", web.base())), "{output}");
}

/// A session with `deliverables/presented` reads back after a restart (the log holds the
/// event; a reader that did not know it would refuse the whole session), and the export and
/// the download still find the file.
#[tokio::test]
async fn presented_files_survive_a_restart() {
    let server = MockServer::start().answer_untooled("Present");
    server.push_all([
        Reply::tool_call(
            "call_p",
            "present",
            &json!({"files": [{"path": "out.txt", "description": "result"}]}).to_string(),
        ),
        Reply::text("handed over"),
    ]);
    let env = [("DEEPSEEK_API_KEY", "sk-x")];
    let mut web = Web::start(&server, &env, &[]);
    std::fs::write(web.work.path().join("out.txt"), "the result\n").unwrap();
    web.login().await;
    let id = web.new_session().await;
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": "hand it over"}]}),
    )
    .await;
    let deadline = Instant::now() + WAIT;
    while !web
        .events(&id)
        .await
        .iter()
        .any(|e| e["type"] == "turn/end")
    {
        assert!(Instant::now() < deadline, "the turn did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let web = web.restart(&server, &env, Duration::ZERO).await;
    let events = web.events(&id).await;
    let presented = events
        .iter()
        .find(|e| e["type"] == "deliverables/presented")
        .unwrap_or_else(|| panic!("no deliverables/presented after the restart: {events:?}"));
    let path = presented["data"]["files"][0]["path"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(path.ends_with("/out.txt"), "{presented}");
    let export = web
        .ok(
            "session.export",
            json!({"sessionId": id, "format": "markdown"}),
        )
        .await;
    assert!(
        export["text"].as_str().unwrap().contains("Presented"),
        "{export}"
    );
    let got = Web::client()
        .get(format!("{}/api/deliverable", web.base()))
        .query(&[("session", id.as_str()), ("path", path.as_str())])
        .header("cookie", web.cookie.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.text().await.unwrap(), "the result\n");
}

/// Sends `text` to session `id` and waits until `ended` turns have ended; the events then.
async fn turn(web: &Web, id: &str, text: &str, ended: usize) -> Vec<Value> {
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": text}]}),
    )
    .await;
    events_until(web, id, &format!("turn {ended} did not end"), |e| {
        turn_ends(e) >= ended
    })
    .await
}

/// Waits until the session's log satisfies `done`, then returns its events.
async fn events_until(
    web: &Web,
    id: &str,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let events = web.events(id).await;
        if done(&events) {
            return events;
        }
        assert!(Instant::now() < deadline, "{what}: {events:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn turn_ends(events: &[Value]) -> usize {
    events.iter().filter(|e| e["type"] == "turn/end").count()
}

/// A reminder the model sets with `schedule_create` comes due while the session is idle:
/// dsh web delivers it into the session as a `schedule` message, which runs a turn; the
/// task ends with its delivery recorded in `<storages>/schedule.json`. Every request
/// carries a clock reading in the zone the browser sent (`clientTimeZone`).
#[tokio::test]
async fn a_reminder_the_model_sets_is_delivered_into_its_session() {
    let server = MockServer::start().answer_untooled("Remind");
    server.push_all([
        Reply::tool_call(
            "call_s",
            "schedule_create",
            &json!({"prompt": "check the nightly build", "title": "Check nightly build", "after_seconds": 2}).to_string(),
        ),
        Reply::text("I will remind you."),
        Reply::text("The nightly build is green."),
    ]);
    let mut web = Web::start(&server, &[("DEEPSEEK_API_KEY", "sk-x")], &[]);
    web.login().await;
    let id = web.new_session().await;
    let bad = web
        .rpc(
            "session.prompt",
            json!({"sessionId": id, "clientTimeZone": "Mars/Olympus", "content": [{"type": "text", "text": "x"}]}),
        )
        .await;
    assert_eq!(bad["ok"], false, "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Mars/Olympus"),
        "{bad}"
    );
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "clientTimeZone": "Asia/Tokyo",
               "content": [{"type": "text", "text": "remind me to check the build"}]}),
    )
    .await;
    // The model saw a clock reading in the browser's zone.
    let first = server.wait_for_requests(1, WAIT);
    let sent = Value::from(first[0].messages()).to_string();
    assert!(sent.contains("+09:00[Asia/Tokyo]"), "{sent}");
    assert!(
        sent.contains("The user's browser is set to Asia/Tokyo"),
        "{sent}"
    );
    events_until(&web, &id, "the first turn did not end", |e| {
        turn_ends(e) >= 1
    })
    .await;
    let listed = web.ok("schedule.list", json!({"sessionId": id})).await;
    let tasks = listed["tasks"].as_array().unwrap().clone();
    assert_eq!(tasks.len(), 1, "{listed}");
    assert_eq!(tasks[0]["title"], "Check nightly build");
    assert_eq!(tasks[0]["kind"], "after");
    assert_eq!(tasks[0]["deliveryMode"], "host");

    // Two seconds later the reminder runs a turn of its own.
    let events = events_until(&web, &id, "the reminder's turn did not end", |e| {
        turn_ends(e) >= 2
    })
    .await;
    let reminder = events
        .iter()
        .find(|e| e["type"] == "user/message" && e["data"]["source"]["kind"] == "schedule")
        .unwrap_or_else(|| panic!("no schedule message: {events:#?}"));
    let text = reminder["data"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("reminder: \"check the nightly build\""),
        "{text}"
    );
    let requests = server.requests();
    let last = Value::from(requests.last().unwrap().messages()).to_string();
    assert!(last.contains("check the nightly build"), "{last}");

    // The one-shot task ended, its delivery recorded with the message's id.
    let listed = web.ok("schedule.list", json!({"sessionId": id})).await;
    assert_eq!(listed["tasks"], json!([]), "{listed}");
    let store: Value = serde_json::from_str(
        &std::fs::read_to_string(web.home.path().join(".dsh/storages/schedule.json")).unwrap(),
    )
    .unwrap();
    let task = store["tables"]["tasks"][tasks[0]["id"].as_str().unwrap()].clone();
    assert_eq!(task["status"], "inactive", "{store}");
    assert_eq!(
        task["lastDelivery"]["messageId"], reminder["data"]["id"],
        "{store}"
    );
    assert_eq!(task["sessionId"], json!(id));
}

/// Reminders survive a restart: a task due while dsh web was down is delivered once it is
/// back; deleting the session deletes its reminders.
#[tokio::test]
async fn a_reminder_due_during_downtime_is_delivered_after_a_restart() {
    let server = MockServer::start().answer_untooled("Later");
    server.push_all([
        Reply::tool_call(
            "call_s",
            "schedule_create",
            &json!({"prompt": "rerun the flaky test", "title": "Rerun flaky test", "after_seconds": 3}).to_string(),
        ),
        Reply::text("Set."),
        Reply::tool_call(
            "call_t",
            "schedule_create",
            &json!({"prompt": "weekly report", "title": "Weekly report",
                    "weekly": {"time": "09:00:00", "time_zone": "Europe/Paris", "weekdays": [1]}}).to_string(),
        ),
        Reply::text("Reran it."),
    ]);
    let env = [("DEEPSEEK_API_KEY", "sk-x")];
    let mut web = Web::start(&server, &env, &[]);
    web.login().await;
    let id = web.new_session().await;
    turn(&web, &id, "remind me", 1).await;
    let web = web.restart(&server, &env, Duration::from_secs(4)).await;
    let events = events_until(&web, &id, "the missed reminder was not delivered", |e| {
        turn_ends(e) >= 2
    })
    .await;
    assert_eq!(
        events
            .iter()
            .filter(|e| e["data"]["source"]["kind"] == "schedule")
            .count(),
        1
    );
    // The reminder's turn set a weekly one; deleting the session deletes it.
    let listed = web.ok("schedule.list", json!({"sessionId": id})).await;
    assert_eq!(listed["tasks"][0]["kind"], "weekly", "{listed}");
    assert_eq!(listed["tasks"][0]["weekdays"], json!([1]));
    web.ok("session.delete", json!({"sessionId": id})).await;
    let all = web.ok("schedule.catalog", json!({})).await;
    assert_eq!(all["tasks"], json!([]), "{all}");
}

fn git_in(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn loose_objects(git_dir: &std::path::Path) -> usize {
    walk(&git_dir.join("objects"))
}

fn walk(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    if e.path().is_dir() {
                        walk(&e.path())
                    } else {
                        1
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

/// A turn in a git workspace records `workspace/changes`: every file the turn changed,
/// bash included, with line counts (ignored files left out), and the page can fetch a
/// file's diff. The user's index, refs and object store stay as they were.
#[tokio::test]
async fn a_turn_records_what_it_changed_in_a_git_workspace() {
    let server = MockServer::start().answer_untooled("Changes");
    server.push_all([
        Reply::tool_call(
            "call_b",
            "bash",
            &json!({"command": "printf 'two\\n' >> a.txt && echo new > b.txt && echo x > ignored.txt", "description": "edit files"}).to_string(),
        ),
        Reply::text("Edited."),
        Reply::text("Nothing to do."),
    ]);
    let mut web = Web::start(&server, &[("DEEPSEEK_API_KEY", "sk-x")], &[]);
    let work = web.work.path().to_path_buf();
    git_in(&work, &["init", "-q"]);
    std::fs::write(work.join("a.txt"), "one\n").unwrap();
    std::fs::write(work.join(".gitignore"), "ignored.txt\n").unwrap();
    git_in(&work, &["add", "-A"]);
    git_in(&work, &["commit", "-qm", "start"]);
    let objects_before = loose_objects(&work.join(".git"));
    let index_before = std::fs::read(work.join(".git/index")).unwrap();
    web.login().await;
    let id = web.new_session().await;
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": "edit the files"}]}),
    )
    .await;
    let events = events_until(&web, &id, "no workspace/changes", |e| {
        e.iter().any(|e| e["type"] == "workspace/changes")
    })
    .await;
    let changes = events
        .iter()
        .find(|e| e["type"] == "workspace/changes")
        .unwrap();
    let d = &changes["data"];
    assert_eq!(d["turn"], 1, "{d}");
    assert_eq!(d["total"], 2, "{d}");
    assert_eq!(
        (d["added"].clone(), d["deleted"].clone()),
        (json!(2), json!(0)),
        "{d}"
    );
    let shown: Vec<(String, u64, u64)> = d["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["display"].as_str().unwrap().to_string(),
                f["added"].as_u64().unwrap(),
                f["deleted"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![("a.txt".to_string(), 1, 0), ("b.txt".to_string(), 1, 0)]
    );
    assert!(d["snapshot"]["before"].as_str().unwrap().len() >= 40, "{d}");
    let path = d["files"][0]["path"].as_str().unwrap();
    let diff = web
        .ok(
            "session.workspaceDiff",
            json!({"sessionId": id, "seq": changes["seq"], "path": path}),
        )
        .await;
    let text = diff["diff"].as_str().unwrap();
    assert!(text.contains("+two") && text.contains(" one"), "{text}");
    // The repository itself is untouched.
    assert_eq!(loose_objects(&work.join(".git")), objects_before);
    assert_eq!(
        std::fs::read(work.join(".git/index")).unwrap(),
        index_before
    );
    assert!(git_in(&work, &["status", "--porcelain"]).contains("?? b.txt"));

    // A turn that changes nothing records nothing.
    let events = turn(&web, &id, "anything else?", 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let events = if events
        .iter()
        .filter(|e| e["type"] == "workspace/changes")
        .count()
        == 1
    {
        web.events(&id).await
    } else {
        events
    };
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "workspace/changes")
            .count(),
        1
    );
}

/// A connected MCP server's resources are offered in the `@` menu, and a message that
/// references one (`@server:uri`) carries the resource's text to the model; a reference
/// that cannot be read refuses the message with the reason.
#[tokio::test]
async fn mcp_resources_are_offered_and_attached_as_references() {
    let Some(script) = dsh_test_support::prereq::everything_server() else {
        return;
    };
    let server = MockServer::start().answer_untooled("Resources");
    server.push_all([Reply::text("Read it.")]);
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("mcp.yml"),
        dsh_test_support::prereq::everything_patch(&script),
    )
    .unwrap();
    let mut web = Web::start_in(
        home,
        work,
        &server,
        &[("DEEPSEEK_API_KEY", "sk-x")],
        &["--patch", "mcp.yml"],
    );
    web.login().await;
    let id = web.new_session().await;
    // The server connects in the background: ask until its resources are listed.
    let deadline = Instant::now() + WAIT;
    let offered = loop {
        let r = web
            .ok(
                "session.files",
                json!({"sessionId": id, "query": "architecture"}),
            )
            .await;
        if r["resources"].as_array().is_some_and(|a| !a.is_empty()) {
            break r;
        }
        assert!(Instant::now() < deadline, "no resources offered: {r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let reference = offered["resources"][0]["ref"].as_str().unwrap().to_string();
    assert_eq!(
        reference, "everything:demo://resource/static/document/architecture.md",
        "{offered}"
    );
    let bad = web
        .rpc(
            "session.prompt",
            json!({"sessionId": id, "content": [{"type": "text", "text": "read @everything:demo://nope/x"}]}),
        )
        .await;
    assert_eq!(bad["ok"], false, "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("@everything:demo://nope/x cannot be attached"),
        "{bad}"
    );
    web.ok(
        "session.prompt",
        json!({"sessionId": id, "content": [{"type": "text", "text": format!("summarize @{reference}.")}]}),
    )
    .await;
    let requests = server.wait_for_requests(1, WAIT);
    let sent = Value::from(requests[0].messages()).to_string();
    assert!(
        sent.contains("Resource demo://resource/static/document/architecture.md (text/markdown) from MCP server everything:"),
        "{sent}"
    );
    let events = events_until(&web, &id, "the turn did not end", |e| turn_ends(e) >= 1).await;
    let user = events
        .iter()
        .find(|e| e["type"] == "user/message" && e["data"]["source"]["kind"] == "user")
        .unwrap();
    let blocks = user["data"]["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 2, "{user}");
    assert_eq!(blocks[0]["text"], json!(format!("summarize @{reference}.")));
}

/// Agent presets decide what a session's model is offered: `standard` every tool,
/// `ptc` only `run_code`, `minimal` a shell and image reading (a call to a hidden tool is
/// refused). A preset is chosen before the first turn and fixed after it; it survives a
/// restart (the log records it).
#[tokio::test]
async fn agent_presets_decide_the_tools_a_session_sees() {
    let server = MockServer::start().answer_untooled("Presets");
    server.push_all([
        Reply::text("standard here"),
        Reply::tool_call(
            "call_w",
            "write",
            &json!({"file_path": "hidden.txt", "content": "x"}).to_string(),
        ),
        Reply::text("minimal here"),
        Reply::text("code here"),
    ]);
    let env = [("DEEPSEEK_API_KEY", "sk-x")];
    let mut web = Web::start(&server, &env, &[]);
    web.login().await;
    let roster = web.ok("agentPresets.list", json!({})).await;
    let ids: Vec<&str> = roster["presets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["standard", "ptc", "minimal"], "{roster}");
    assert_eq!(roster["presets"][0]["isDefault"], true);
    let cwd = web.work.path().display().to_string();
    let create = |preset: Option<&str>| {
        let mut body = json!({"cwd": cwd});
        if let Some(p) = preset {
            body["agentPreset"] = json!(p);
        }
        body
    };
    let run = |id: String| {
        let web = &web;
        async move {
            let before = turn_ends(&web.events(&id).await);
            web.ok(
                "session.prompt",
                json!({"sessionId": id, "content": [{"type": "text", "text": "hi"}]}),
            )
            .await;
            events_until(web, &id, "the turn did not end", |e| turn_ends(e) > before).await
        }
    };
    let standard = web.ok("session.create", create(None)).await;
    assert_eq!(standard["agentPreset"], "standard");
    let a = standard["sessionId"].as_str().unwrap().to_string();
    run(a.clone()).await;
    let minimal = web.ok("session.create", create(Some("minimal"))).await;
    assert_eq!(minimal["agentPreset"], "minimal");
    let b = minimal["sessionId"].as_str().unwrap().to_string();
    assert_ne!(a, b);
    let events = run(b.clone()).await;
    let code = web.ok("session.create", create(Some("ptc"))).await;
    let c = code["sessionId"].as_str().unwrap().to_string();
    run(c.clone()).await;

    let requests: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| !r.tool_names().is_empty())
        .collect();
    let names = |i: usize| requests[i].tool_names();
    for t in [
        "bash",
        "read",
        "write",
        "edit",
        "schedule_create",
        "present",
        "todo_write",
    ] {
        assert!(
            names(0).iter().any(|n| n == t),
            "standard lacks {t}: {:?}",
            names(0)
        );
    }
    assert_eq!(names(1), ["bash", "read_image"], "minimal");
    assert_eq!(names(2), ["bash", "read_image"], "minimal, second step");
    assert_eq!(names(3), ["run_code"], "ptc");
    // The hidden tool was refused, nothing written.
    let refused = requests[2].last_tool_output().unwrap_or_default();
    assert!(refused.to_lowercase().contains("write"), "{refused}");
    assert!(!web.work.path().join("hidden.txt").exists());
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "agent-preset/selected" && e["data"]["agentPreset"] == "minimal")
    );

    // Fixed once started; unknown ids refused.
    let locked = web
        .rpc(
            "agentPresets.select",
            json!({"sessionId": a, "agentPreset": "minimal"}),
        )
        .await;
    assert_eq!(locked["error"]["code"], "agent-preset-locked", "{locked}");
    let unknown = web
        .rpc(
            "agentPresets.select",
            json!({"sessionId": a, "agentPreset": "nope"}),
        )
        .await;
    assert_eq!(
        unknown["error"]["code"], "agent-preset-not-found",
        "{unknown}"
    );
    let options = web.ok("session.options", json!({"sessionId": b})).await;
    assert_eq!(options["agentPreset"]["current"], "minimal", "{options}");
    assert_eq!(options["agentPreset"]["locked"], true, "{options}");

    // After a restart the minimal session still runs minimal.
    server.push_all([Reply::text("still minimal")]);
    let web = web.restart(&server, &env, Duration::ZERO).await;
    turn(&web, &b, "again", 2).await;
    let last = server
        .requests()
        .into_iter()
        .rev()
        .find(|r| !r.tool_names().is_empty())
        .unwrap();
    assert_eq!(last.tool_names(), ["bash", "read_image"]);
}
