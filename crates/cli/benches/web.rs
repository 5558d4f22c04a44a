//! `dsh web`, whole process, loopback, against the mock LLM (run with
//! `cargo bench -p dsh-cli --bench web`; release build). Prints a table; asserts only
//! correctness (zero lost or duplicated events), never timings.
//!
//! * start → listening: spawn until the URL line is read and `/?token=` answers 303;
//! * first page: bytes and time of the index plus every embedded asset (cookie set);
//! * rendering an open ~2,000-event session in headless Chromium (`window.__dsh.renderMs`:
//!   snapshot received → DOM built → next frame), when chromium is installed;
//! * RSS idle, and with 20 sessions open (each with one turn, 20 streams attached);
//! * 20 concurrent sessions each running a 20-step bash task with 20 SSE clients (two of
//!   them reconnecting at arbitrary points): wall time, events/s, lost/duplicated events.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::collections::VecDeque;
use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dsh_test_support::mock_server::{Completion, MockServer, Reply};
use dsh_test_support::sse::{SseEvent, SseParser};
use futures::StreamExt as _;
use serde_json::{Value, json};

struct Web {
    child: Child,
    base: String,
    token: String,
    cookie: String,
    _home: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(server: &MockServer) -> (Web, Duration) {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("DSH_HOME", home.path().join(".dsh"))
        .env("DEEPSEEK_BASE_URL", server.url())
        .env("DEEPSEEK_API_KEY", "sk-bench")
        .current_dir(work.path())
        .args(["web", "--no-open", "--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let url = line.strip_prefix("dsh web: ").unwrap().to_string();
    let (base, token) = url.split_once("/?token=").unwrap();
    // Listening means answering: the token exchange.
    let resp = ureq_get(&format!("{base}/?token={token}"));
    let listening = t0.elapsed();
    assert_eq!(resp.0, 303);
    let cookie = resp.1.split(';').next().unwrap().to_string();
    (
        Web {
            child,
            base: base.to_string(),
            token: token.to_string(),
            cookie,
            _home: home,
            work,
        },
        listening,
    )
}

/// A blocking GET over a fresh connection: (status, set-cookie).
fn ureq_get(url: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").unwrap();
    let (authority, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = std::net::TcpStream::connect(authority).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw.split_whitespace().nth(1).unwrap().parse().unwrap();
    let cookie = raw
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .unwrap_or_default()
        .to_string();
    (status, cookie)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

impl Web {
    fn client() -> reqwest::Client {
        reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
    }

    async fn rpc(&self, c: &reqwest::Client, method: &str, payload: Value) -> Value {
        let body: Value = c
            .post(format!("{}/api/{method}", self.base))
            .header("cookie", &self.cookie)
            .json(&json!({"type": "client-request", "rpcId": "b", "method": method, "payload": payload}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(body["result"]["ok"], true, "{method}: {body}");
        body["result"]["value"].clone()
    }

    async fn stream(&self, c: &reqwest::Client, session: &str, last: Option<&str>) -> Sse {
        let mut req = c
            .get(format!("{}/api/events?session={session}", self.base))
            .header("cookie", &self.cookie);
        if let Some(id) = last {
            req = req.header("last-event-id", id);
        }
        let resp = req.send().await.unwrap();
        Sse {
            body: Box::pin(resp.bytes_stream()),
            parser: SseParser::new(),
            queued: VecDeque::new(),
        }
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
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(e) = self.queued.pop_front() {
                return Some(e);
            }
            match tokio::time::timeout(Duration::from_secs(120), self.body.next()).await {
                Ok(Some(Ok(b))) => self.queued.extend(self.parser.push(&b)),
                _ => return None,
            }
        }
    }
}

/// A reply script step: bash until the request holds `steps` tool results, then a text.
fn looping(steps: usize) -> Reply {
    Reply::dynamic(move |req| {
        let done = req
            .messages()
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        if done < steps {
            Reply::tool_call(
                &format!("call_{done}"),
                "bash",
                &json!({"command": format!("echo step {done}"), "description": "step"}).to_string(),
            )
        } else {
            Reply::completion(
                Completion::text("All steps done; nothing else to do.").delta_chars(4),
            )
        }
    })
}

/// Follows one session's stream until `turns` turns ended; returns the seqs received
/// (snapshot + events) and whether every `events` frame continued the cursor exactly.
async fn follow(
    web: &Web,
    c: &reqwest::Client,
    id: &str,
    turns: usize,
    reconnect_every: Option<usize>,
) -> (Vec<u64>, bool) {
    let mut seqs: Vec<u64> = Vec::new();
    let mut ended = 0usize;
    let mut contiguous = true;
    let mut last: Option<String> = None;
    let mut frames = 0usize;
    loop {
        let mut sse = web.stream(c, id, last.as_deref()).await;
        let mut in_this = 0usize;
        while let Some(f) = sse.next().await {
            let data = f.json();
            let events = match f.event.as_str() {
                "snapshot" => {
                    seqs.clear();
                    ended = 0;
                    data["events"].as_array().cloned().unwrap_or_default()
                }
                "events" => {
                    let expected: u64 = last
                        .as_deref()
                        .unwrap()
                        .rsplit_once(':')
                        .unwrap()
                        .1
                        .parse()
                        .unwrap();
                    let batch = data.as_array().cloned().unwrap_or_default();
                    contiguous &= batch.first().and_then(|e| e["seq"].as_u64()) == Some(expected);
                    batch
                }
                _ => continue,
            };
            seqs.extend(events.iter().map(|e| e["seq"].as_u64().unwrap()));
            ended += events.iter().filter(|e| e["type"] == "turn/end").count();
            last = f.id.clone();
            if ended >= turns {
                return (seqs, contiguous);
            }
            frames += 1;
            in_this += 1;
            if let Some(n) = reconnect_every
                && in_this >= n + (frames % 3)
            {
                break; // drop the connection and resume from `last`
            }
        }
    }
}

async fn turn_ends(web: &Web, c: &reqwest::Client, id: &str) -> usize {
    let list = web.rpc(c, "session.list", json!({})).await;
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["sessionId"] == id)
        .map_or(0, |r| {
            usize::from(r["running"] == false) * r["turns"].as_u64().unwrap_or(0) as usize
        })
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!("dsh web benchmark ({profile} build, loopback, mock LLM)\n");

    // 1. start → listening
    let server = MockServer::start().answer_untooled("Bench");
    let mut starts = Vec::new();
    for _ in 0..20 {
        let (web, t) = spawn(&server);
        starts.push(t.as_secs_f64() * 1000.0);
        drop(web);
    }
    println!(
        "start → listening (URL printed and token exchange answered), 20 runs: median {:.1} ms, min {:.1} ms, max {:.1} ms",
        median(starts.clone()),
        starts.iter().cloned().fold(f64::MAX, f64::min),
        starts.iter().cloned().fold(0.0, f64::max)
    );

    let (web, _) = spawn(&server);
    let pid = web.child.id();
    std::thread::sleep(Duration::from_secs(1));
    let idle = rss_kib(pid);

    rt.block_on(async {
        let c = Web::client();
        // 2. first page
        let paths: Vec<&str> = dsh_web::ASSETS.iter().map(|a| a.path).filter(|p| *p != "/favicon.ico").collect();
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..20 {
            let t0 = Instant::now();
            bytes = 0;
            let fetches = paths.iter().map(|p| {
                let c = c.clone();
                let url = format!("{}{p}", web.base);
                let cookie = web.cookie.clone();
                async move { c.get(url).header("cookie", cookie).send().await.unwrap().bytes().await.unwrap().len() }
            });
            for n in futures::future::join_all(fetches).await {
                bytes += n;
            }
            times.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        println!(
            "first page: {} requests, {} bytes ({:.1} KiB) raw, fetched in median {:.2} ms (20 runs)",
            paths.len(),
            bytes,
            bytes as f64 / 1024.0,
            median(times)
        );
        println!("RSS idle (1 s after listening): {:.1} MiB", idle as f64 / 1024.0);

        // 4. 20 sessions open, one turn each, 20 streams attached.
        let cwd = web.work.path().display().to_string();
        for _ in 0..20 {
            server.push(Reply::text("A short answer for the RSS measurement."));
        }
        let mut ids = Vec::new();
        let mut streams = Vec::new();
        for _ in 0..20 {
            // A fresh session each time (the reuse rule only applies to unused ones).
            let id = web.rpc(&c, "session.create", json!({"cwd": cwd})).await["sessionId"].as_str().unwrap().to_string();
            web.rpc(&c, "session.prompt", json!({"sessionId": id, "content": [{"type": "text", "text": "hi"}]})).await;
            while turn_ends(&web, &c, &id).await < 1 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            streams.push(web.stream(&c, &id, None).await);
            ids.push(id);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let open = rss_kib(pid);
        println!(
            "RSS with 20 sessions open (one turn each, 20 streams attached): {:.1} MiB (+{:.2} MiB per session)",
            open as f64 / 1024.0,
            (open.saturating_sub(idle)) as f64 / 1024.0 / 20.0
        );
        drop(streams);

        // 5. 20 concurrent sessions × 20-step tasks.
        for _ in 0..20 * 21 {
            server.push(looping(20));
        }
        let mut fresh = Vec::new();
        for _ in 0..20 {
            fresh.push(web.rpc(&c, "session.create", json!({"cwd": cwd})).await["sessionId"].as_str().unwrap().to_string());
            // Each create must yield a new session: give the previous one its turn first.
            let last = fresh.last().unwrap().clone();
            web.rpc(&c, "session.prompt", json!({"sessionId": last, "content": [{"type": "text", "text": "run the 20 steps"}]})).await;
        }
        let t0 = Instant::now();
        let followers = fresh.iter().enumerate().map(|(i, id)| {
            let (web, c, id) = (&web, c.clone(), id.clone());
            async move { follow(web, &c, &id, 1, (i < 2).then_some(3)).await }
        });
        let results = futures::future::join_all(followers).await;
        let wall = t0.elapsed();
        let mut lost = 0usize;
        let mut dup = 0usize;
        let mut total = 0usize;
        let mut all_contiguous = true;
        for ((seqs, contiguous), id) in results.iter().zip(&fresh) {
            all_contiguous &= *contiguous;
            let mut sorted = seqs.clone();
            sorted.sort_unstable();
            sorted.dedup();
            dup += seqs.len() - sorted.len();
            // The final log (a fresh snapshot) must be contained in what the client saw.
            let mut s = web.stream(&c, id, None).await;
            let snap = loop {
                let f = s.next().await.unwrap();
                if f.event == "snapshot" {
                    break f.json();
                }
            };
            let want: Vec<u64> = snap["events"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
            lost += want.iter().filter(|w| sorted.binary_search(w).is_err()).count();
            total += seqs.len();
        }
        println!(
            "20 sessions × 20-step bash tasks, 20 SSE clients (2 reconnecting): wall {:.2} s, {} events delivered ({:.0} events/s), lost {lost}, duplicated {dup}, every batch continued its cursor: {all_contiguous}",
            wall.as_secs_f64(),
            total,
            total as f64 / wall.as_secs_f64()
        );
        assert_eq!((lost, dup, all_contiguous), (0, 0, true));

        // 3. rendering an open ~2,000-event session in Chromium.
        let big = fresh[0].clone();
        let mut turns = 1;
        let (mut count, mut shown) = (0, 0);
        while count < 2000 {
            for _ in 0..21 {
                server.push(looping(20));
            }
            web.rpc(&c, "session.prompt", json!({"sessionId": big, "content": [{"type": "text", "text": "again"}]})).await;
            turns += 1;
            while turn_ends(&web, &c, &big).await < turns {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let mut s = web.stream(&c, &big, None).await;
            (count, shown) = loop {
                let f = s.next().await.unwrap();
                if f.event == "snapshot" {
                    let v = f.json();
                    break (v["next"].as_u64().unwrap() as usize, v["events"].as_array().unwrap().len());
                }
            };
        }
        render(&web, &big, count, shown);
        let _ = &web.token;
    });
}

fn render(web: &Web, id: &str, events: usize, shown: usize) {
    let Some(tools) = dsh_test_support::webdriver::Driver::find_tools() else {
        println!(
            "render of a {events}-event session: skipped (chromium/chromedriver not installed)"
        );
        return;
    };
    let driver = dsh_test_support::webdriver::Driver::start(&tools).unwrap();
    let b = driver.browser(&tools).unwrap();
    // The launch token signs in once and `start` spent it: hand the browser the cookie.
    b.goto(&format!("{}/", web.base)).unwrap();
    let (name, value) = web.cookie.split_once('=').unwrap();
    b.add_cookie(name, value).unwrap();
    b.goto(&format!("{}/", web.base)).unwrap();
    b.wait_for(
        "window.__dsh && window.__dsh.booted",
        Duration::from_secs(30),
    )
    .unwrap();
    let mut samples = Vec::new();
    for _ in 0..5 {
        b.goto(&format!("{}/#/s/{id}", web.base)).unwrap();
        b.refresh().unwrap();
        let ms = b
            .wait_for(
                "window.__dsh && window.__dsh.ready && window.__dsh.renderMs",
                Duration::from_secs(60),
            )
            .unwrap();
        samples.push(ms.as_f64().unwrap());
    }
    let nodes = b
        .eval("return document.querySelectorAll('*').length", vec![])
        .unwrap();
    println!(
        "render of an open {events}-event session ({shown} events in the snapshot after eliding committed stream deltas; snapshot received → DOM built → next frame), 5 loads: median {:.0} ms, min {:.0} ms ({} DOM nodes)",
        median(samples.clone()),
        samples.iter().cloned().fold(f64::MAX, f64::min),
        nodes
    );
}
