//! Running dsh for a team, end to end from the binary: `dsh team submit` queues input in the
//! PostgreSQL store on loopback (`DSH_TEST_POSTGRES`, each test in a schema of its own),
//! `dsh worker` processes claim sessions and run their turns against the mock LLM, and the
//! faults of scale-out: a worker killed mid-tool, a worker frozen past its lease.
//!
//! After every test the stored log holds: seqs 1, 2, 3, … with no gap; epochs that never
//! decrease; each tool call closed exactly once; every queued input consumed once.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_session::{Event, decode_line, types};
use dsh_store_pg::{Store, StoredEvent};
use dsh_test_support::mock_server::{Gate, MockServer, Reply};
use serde_json::Value;

use crate::common::{Run, processes_with};

mod clients;
mod web;

const TTL_MS: u64 = 1500;

struct Team {
    url: String,
    schema: String,
    rt: tokio::runtime::Runtime,
}

impl Team {
    /// A fresh schema on the test server, or `None` (a skip; a failure in a strict run).
    fn new() -> Option<Self> {
        let base = std::env::var("DSH_TEST_POSTGRES")
            .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".into());
        Self::on(&base)
    }

    /// A fresh schema on the server at `base`.
    fn on(base: &str) -> Option<Self> {
        let base = base.to_string();
        let schema = format!("dsh_team_{}", uuid::Uuid::new_v4().simple());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let created = rt.block_on(async {
            let store = Store::connect(&base).await?;
            store
                .execute_batch(&format!("CREATE SCHEMA {schema}"))
                .await
        });
        if let Err(e) = created {
            dsh_test_support::prereq::skip(&format!(
                "PostgreSQL at {base} ({e}); the machine's server, or set DSH_TEST_POSTGRES"
            ));
            return None;
        }
        Some(Self {
            url: format!("{base} options=-csearch_path={schema}"),
            schema,
            rt,
        })
    }

    fn store(&self) -> Store {
        self.rt.block_on(Store::connect(&self.url)).unwrap()
    }

    fn events(&self, session: &str) -> Vec<StoredEvent> {
        let store = self.store();
        self.rt.block_on(store.read(session, 0, 100_000)).unwrap()
    }

    fn pending(&self, session: &str) -> usize {
        let store = self.store();
        self.rt.block_on(store.pending(session)).unwrap().len()
    }

    /// Waits until the stored log of `session` satisfies `done`.
    fn wait_for(&self, session: &str, what: &str, done: impl Fn(&[StoredEvent]) -> bool) {
        self.wait_for_or(session, what, done, String::new);
    }

    /// [`Team::wait_for`], adding `context()` (a worker's state and log) to a timeout.
    fn wait_for_or(
        &self,
        session: &str,
        what: &str,
        done: impl Fn(&[StoredEvent]) -> bool,
        mut context: impl FnMut() -> String,
    ) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let events = self.events(session);
            if done(&events) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; stored: {:?}\n{}",
                events.iter().map(|e| &e.kind).collect::<Vec<_>>(),
                context()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        let base = self
            .url
            .replace(&format!(" options=-csearch_path={}", self.schema), "");
        let schema = self.schema.clone();
        let _ = self.rt.block_on(async move {
            let store = Store::connect(&base).await?;
            store
                .execute_batch(&format!("DROP SCHEMA {schema} CASCADE"))
                .await
        });
    }
}

impl Run {
    fn team(&self, server: &MockServer, team: &Team, args: &[&str]) -> Command {
        let mut c = self.base(server);
        c.env("DSH_STORAGE", &team.url).args(args);
        // Diagnostics for a failing run: DSH_TEST_CHILD_LOG=<filter> reaches the processes.
        if let Ok(filter) = std::env::var("DSH_TEST_CHILD_LOG") {
            c.env("DSH_LOG", filter);
        }
        c
    }

    fn submit(
        &self,
        server: &MockServer,
        team: &Team,
        session: Option<&str>,
        text: &str,
    ) -> String {
        let mut args = vec!["team", "submit"];
        if let Some(s) = session {
            args.extend(["--session", s]);
        }
        args.push(text);
        let out = self.team(server, team, &args).output().unwrap();
        assert!(out.status.success(), "{}", crate::common::stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["sessionId"].as_str().unwrap().to_string()
    }

    /// A worker as a child process, in a process group of its own; its stderr goes to
    /// `<home>/<owner>.stderr`.
    fn worker(&self, server: &MockServer, team: &Team, owner: &str, extra: &[&str]) -> Worker {
        self.worker_env(server, team, owner, extra, &[])
    }

    /// [`Run::worker`] with `env` added to the worker's environment (its turns inherit it).
    fn worker_env(
        &self,
        server: &MockServer,
        team: &Team,
        owner: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Worker {
        let ttl = TTL_MS.to_string();
        let mut args = vec![
            "worker",
            "--owner",
            owner,
            "--lease-ttl-ms",
            &ttl,
            "--poll-ms",
            "50",
        ];
        args.extend_from_slice(extra);
        let mut c = self.team(server, team, &args);
        c.envs(env.iter().copied());
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        let log = std::fs::File::create(self.worker_log(owner)).unwrap();
        c.stdout(Stdio::null()).stderr(log);
        Worker(c.spawn().unwrap())
    }

    fn worker_log(&self, owner: &str) -> std::path::PathBuf {
        self.home.path().join(format!("{owner}.stderr"))
    }

    /// Runs a worker until no input is left in its pool; returns its stderr.
    fn worker_until_idle(&self, server: &MockServer, team: &Team, owner: &str) -> String {
        let status = self
            .worker(server, team, owner, &["--until-idle"])
            .wait()
            .unwrap();
        let log = std::fs::read_to_string(self.worker_log(owner)).unwrap();
        assert!(status.success(), "worker {owner}: {log}");
        log
    }
}

fn decoded(stored: &[StoredEvent]) -> Vec<Arc<Event>> {
    let mut events = Vec::new();
    for e in stored {
        match decode_line(&e.data, events.len() as u64).unwrap().0 {
            dsh_session::Record::Event(e) => events.push(e),
            dsh_session::Record::Row(row) => row.expand_into(&mut events),
        }
    }
    events
}

/// The invariants every stored log keeps; returns the decoded events.
fn check_log(stored: &[StoredEvent]) -> Vec<Arc<Event>> {
    for (i, e) in stored.iter().enumerate() {
        assert_eq!(e.seq, i as i64 + 1, "seqs are contiguous from 1");
    }
    for pair in stored.windows(2) {
        assert!(
            pair[0].epoch <= pair[1].epoch,
            "epochs never decrease: {pair:?}"
        );
    }
    let events = decoded(stored);
    assert_eq!(events.len(), stored.len(), "one stored row per event");
    for (e, s) in events.iter().zip(stored) {
        assert_eq!(e.seq as i64 + 1, s.seq, "stored seq = event seq + 1");
        assert_eq!(e.event_type.as_str(), s.kind);
    }
    let mut results: HashMap<String, usize> = HashMap::new();
    for e in &events {
        if e.is(types::TOOL_RESULT)
            && let Some(id) = e.data.as_value().pointer("/message/source/callId")
            && let Some(id) = id.as_str()
        {
            *results.entry(id.to_string()).or_default() += 1;
        }
    }
    for (id, n) in &results {
        assert_eq!(*n, 1, "tool call {id} is closed exactly once");
    }
    events
}

fn answers(events: &[Arc<Event>]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.is(types::ASSISTANT_MESSAGE))
        .map(|e| e.data.as_value().to_string())
        .collect()
}

/// A worker process and its group, killed when the test ends however it ends (a failed
/// assertion included), so no worker outlives its test.
struct Worker(Child);

impl std::ops::Deref for Worker {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Worker {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.0.id())])
                .status();
            let _ = self.0.wait();
        }
    }
}

fn kill_group(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(format!("-{}", child.id()))
        .status()
        .unwrap();
    assert!(status.success());
}

fn wait_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn workers_run_queued_turns_and_resume_the_session_across_workers() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let server = MockServer::with_replies([
        crate::common::call(
            "call_1",
            "bash",
            serde_json::json!({"command": "echo one > one.txt", "description": "write"}),
        ),
        Reply::text("first answer"),
        Reply::text("second answer"),
    ])
    .answer_untooled("Team test");
    let session = run.submit(&server, &team, None, "first task");
    // One worker runs the first turn and stops once nothing is left.
    run.worker_until_idle(&server, &team, "worker-a");
    assert_eq!(team.pending(&session), 0, "the input was consumed");
    // Another worker continues the same session: the model sees the first turn.
    run.submit(&server, &team, Some(&session), "second task");
    run.worker_until_idle(&server, &team, "worker-b");
    let stored = team.events(&session);
    let events = check_log(&stored);
    assert_eq!(
        events.iter().filter(|e| e.is(types::TURN_END)).count(),
        2,
        "two turns ran"
    );
    let said = answers(&events).join("\n");
    assert!(
        said.contains("first answer") && said.contains("second answer"),
        "{said}"
    );
    // Each turn's events carry the epoch of the lease it ran under, in order.
    let epochs: Vec<i64> = stored.iter().map(|e| e.epoch).collect();
    assert_eq!(epochs.first(), Some(&1));
    assert_eq!(epochs.last(), Some(&2));
    let requests = crate::common::loop_requests(&server);
    let last = requests.last().unwrap().messages();
    let text = serde_json::to_string(&last).unwrap();
    assert!(
        text.contains("first task")
            && text.contains("first answer")
            && text.contains("second task"),
        "the second turn's request carries the first turn: {text}"
    );
    assert_eq!(
        std::fs::read_to_string(run.work.path().join("one.txt"))
            .ok()
            .as_deref(),
        Some("one\n"),
        "the tool ran in the workspace: {:?}",
        crate::common::tool_texts(&events)
    );
    // `dsh team events` prints the stored records; `show` the session's state.
    let out = run
        .team(&server, &team, &["team", "events", &session])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        stored.len()
    );
    let out = run
        .team(&server, &team, &["team", "show", &session])
        .output()
        .unwrap();
    let show: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(show["headSeq"], stored.len());
    assert_eq!(show["turnsEnded"], 2);
    assert_eq!(
        show["leased"], false,
        "a finished turn gives its lease back"
    );
}

/// A model that asks for one command that hangs (`call_id`, printing `marker` if it ever
/// ended), then answers `after`.
fn hanging_call(call_id: &str, marker: &str, after: &str) -> MockServer {
    MockServer::with_replies([
        crate::common::call(
            call_id,
            "bash",
            serde_json::json!({"command": format!("touch started; sleep 30; echo {marker}"), "description": "hang"}),
        ),
        Reply::text(after),
    ])
    .answer_untooled("Team test")
}

/// Waits until no process carries `marker` (what a killed worker started has ended).
fn wait_gone(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_with(marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the killed worker's tool outlived it"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_worker_killed_mid_tool_is_replaced_and_its_open_call_closed_once() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let marker = format!("team-kill-{}", uuid::Uuid::new_v4().simple());
    let server = hanging_call("call_hang", &marker, "recovered");
    let session = run.submit(&server, &team, None, "start something long");
    let a = run.worker(&server, &team, "worker-a", &[]);
    wait_file(&run.work.path().join("started"));
    // The tool runs only once its call is stored.
    assert!(
        team.events(&session)
            .iter()
            .any(|e| e.data.contains("call_hang")),
        "the tool call is in the store before the tool runs"
    );
    // The shell, and for a moment the copy of it that is about to become `sleep`.
    assert!(!processes_with(&marker).is_empty(), "the tool runs");
    kill_group(&a, "KILL");
    let mut a = a;
    let _ = a.wait();
    run.submit(&server, &team, Some(&session), "carry on");
    run.worker_until_idle(&server, &team, "worker-b");
    let stored = team.events(&session);
    let events = check_log(&stored);
    let closers: Vec<&Arc<Event>> = events
        .iter()
        .filter(|e| {
            e.is(types::TOOL_RESULT)
                && e.data
                    .as_value()
                    .pointer("/message/source/callId")
                    .is_some_and(|id| id == "call_hang")
        })
        .collect();
    assert_eq!(closers.len(), 1, "the interrupted call is closed once");
    assert!(answers(&events).join("\n").contains("recovered"));
    assert_eq!(team.pending(&session), 0);
    // Nothing the killed worker started is still running.
    wait_gone(&marker);
}

#[test]
fn a_turn_a_killed_worker_left_open_is_closed_by_the_next_worker_with_nothing_queued() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let marker = format!("team-lost-{}", uuid::Uuid::new_v4().simple());
    let server = hanging_call("call_lost", &marker, "picked up after the loss");
    let session = run.submit(&server, &team, None, "start something long");
    let mut a = run.worker(&server, &team, "worker-a", &[]);
    wait_file(&run.work.path().join("started"));
    kill_group(&a, "KILL");
    let _ = a.wait();
    let show = |team: &Team| -> Value {
        let out = run
            .team(&server, team, &["team", "show", &session])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", crate::common::stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let before = show(&team);
    assert_eq!(
        (&before["turnOpen"], &before["pendingInput"]),
        (&Value::Bool(true), &Value::from(0)),
        "{before}"
    );
    // Nothing else is queued. The next worker waits out the dead one's lease, closes the
    // turn it left, and stops: the pool has no work left.
    let requests_before = server.requests().len();
    let log = run.worker_until_idle(&server, &team, "worker-b");
    assert!(log.contains("closed the turn"), "worker B: {log}");
    assert_eq!(
        server.requests().len(),
        requests_before,
        "closing the turn asks the model nothing"
    );
    let stored = team.events(&session);
    let events = check_log(&stored);
    let last = events.last().unwrap();
    assert!(last.is(types::TURN_END), "{:?}", last.event_type);
    assert_eq!(
        last.data.as_value().pointer("/reason/kind"),
        Some(&Value::from("interrupted"))
    );
    let closer = events
        .iter()
        .find(|e| {
            e.is(types::TOOL_RESULT)
                && e.data.as_value().pointer("/message/source/callId")
                    == Some(&Value::from("call_lost"))
        })
        .expect("the lost call is closed");
    assert_eq!(
        closer.data.as_value().pointer("/error/code"),
        Some(&Value::from("TOOL_OUTCOME_UNKNOWN")),
        "the call was recorded as started: its outcome is unknown"
    );
    assert!(
        stored.last().unwrap().epoch > stored[0].epoch,
        "the closers are written under the new lease"
    );
    let after = show(&team);
    assert_eq!(after["turnOpen"], Value::Bool(false), "{after}");
    // The session goes on from there, once: the model sees the unknown outcome.
    run.submit(&server, &team, Some(&session), "carry on");
    run.worker_until_idle(&server, &team, "worker-c");
    let events = check_log(&team.events(&session));
    assert!(
        answers(&events)
            .join("\n")
            .contains("picked up after the loss")
    );
    let asked = server.requests();
    let last_request = asked.last().unwrap();
    assert!(
        last_request
            .tool_outputs()
            .iter()
            .any(|o| o.contains(dsh_session::OUTCOME_UNKNOWN_TEXT)),
        "{:?}",
        last_request.tool_outputs()
    );
    let closers = events
        .iter()
        .filter(|e| {
            e.is(types::TURN_END)
                && e.data.as_value().pointer("/reason/kind") == Some(&Value::from("interrupted"))
        })
        .count();
    assert_eq!(closers, 1, "the lost turn is closed once");
    // Nothing the killed worker started is still running.
    wait_gone(&marker);
}

#[test]
fn a_frozen_worker_is_fenced_and_runs_no_tool_after_its_lease_is_taken() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let gate = Gate::new();
    let server = MockServer::with_replies([
        // The frozen worker's model answer, held until the worker is frozen and replaced.
        crate::common::call(
            "call_zombie",
            "bash",
            serde_json::json!({"command": "touch zombie-ran", "description": "zombie"}),
        )
        .hold_after_event(0, &gate),
        Reply::text("taken over"),
    ])
    .answer_untooled("Team test");
    let session = run.submit(&server, &team, None, "first");
    let mut a = run.worker(&server, &team, "worker-a", &[]);
    // Worker A recorded the input and waits for the model.
    team.wait_for(&session, "the first input recorded", |e| {
        e.iter().any(|e| e.kind == types::USER_MESSAGE)
    });
    server.wait_for_requests(1, Duration::from_secs(30));
    kill_group(&a, "STOP");
    run.submit(&server, &team, Some(&session), "second");
    run.worker_until_idle(&server, &team, "worker-b");
    // A wakes up and gets its model answer: it must not run the tool. Its turn ends fenced
    // and the worker says so (it keeps polling: no input is left for it).
    gate.open();
    kill_group(&a, "CONT");
    let deadline = Instant::now() + Duration::from_secs(30);
    let a_log = loop {
        let log = std::fs::read_to_string(run.worker_log("worker-a")).unwrap();
        if log.contains("was taken over") {
            break log;
        }
        assert!(Instant::now() < deadline, "worker A never noticed: {log}");
        std::thread::sleep(Duration::from_millis(50));
    };
    kill_group(&a, "KILL");
    let _ = a.wait();
    assert!(
        !run.work.path().join("zombie-ran").exists(),
        "the fenced worker ran a tool; its stderr: {a_log}"
    );
    let stored = team.events(&session);
    let events = check_log(&stored);
    assert!(answers(&events).join("\n").contains("taken over"));
    assert!(
        !stored.iter().any(|e| e.data.contains("call_zombie")),
        "nothing of the fenced turn reached the store"
    );
}

/// A running `dsh serve`; killed on drop.
struct Gateway {
    child: Child,
    url: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Run {
    fn gateway(&self, server: &MockServer, team: &Team) -> Gateway {
        let mut c = self.team(
            server,
            team,
            &["serve", "--listen", "127.0.0.1:0", "--poll-ms", "20"],
        );
        c.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = c.spawn().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("dsh serve said {line:?}"))
            .to_string();
        Gateway { child, url }
    }

    /// `dsh --profile sdk` in front of `gateway`, signed in with `token`, its stdin and
    /// stdout piped.
    fn sdk_runtime(&self, server: &MockServer, gateway: &Gateway, token: &str) -> Child {
        self.base(server)
            .args(["--profile", "sdk"])
            .env("DSH_GATEWAY", &gateway.url)
            .env("DSH_GATEWAY_TOKEN", token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn add_user(&self, server: &MockServer, team: &Team, name: &str) -> String {
        let out = self
            .team(server, team, &["team", "user", "add", name])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", crate::common::stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["token"].as_str().unwrap().to_string()
    }
}

#[test]
fn the_sdk_runtime_drives_team_sessions_through_a_gateway() {
    use std::io::{BufRead, BufReader, Write};
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let server = MockServer::with_replies([
        crate::common::call(
            "call_team_sdk",
            "bash",
            serde_json::json!({"command": "echo ran-on-a-worker", "description": "echo"}),
        ),
        Reply::text("first answer"),
        crate::common::call(
            "call_team_sdk_where",
            "bash",
            serde_json::json!({"command": format!("pwd > {}/sdk-where.txt", run.work.path().display()), "description": "where"}),
        ),
        Reply::text("second answer"),
        Reply::text("third answer"),
    ])
    .answer_untooled("Team test");
    local_route(&run, &server);
    std::fs::create_dir(run.work.path().join("sub")).unwrap();
    let gateway = run.gateway(&server, &team);
    let token = run.add_user(&server, &team, "sdk-user");
    let mut worker = run.worker(&server, &team, "worker-sdk", &[]);
    // The runtime knows no database: only the gateway and an account's token.
    let mut runtime = run.sdk_runtime(&server, &gateway, &token);
    let mut stdin = runtime.stdin.take().unwrap();
    let mut lines = BufReader::new(runtime.stdout.take().unwrap()).lines();
    let mut send = |v: Value| {
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    };
    let mut next =
        move || -> Value { serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap() };
    let rpc = |id: &str, method: &str, params: Value| serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    send(rpc(
        "a",
        "initialize",
        serde_json::json!({"cwd": run.work.path(), "provider": "local", "model": "team-model", "maxTokens": 321}),
    ));
    assert_eq!(
        next()["result"]["serverInfo"]["name"],
        "deepseek-harness-sdk-runtime"
    );
    send(rpc(
        "b",
        "session/prompt",
        serde_json::json!({"sessionId": "sdk-team", "contentBlocks": [{"type": "text", "text": "first question"}]}),
    ));
    // The answer, then the turn as the SDK sees it: the receipt carrying the message id,
    // `running`, the events, `idle`.
    let mut frames = Vec::new();
    let message_id = loop {
        let f = next();
        if f["id"] == "b" {
            break f["result"]["messageId"].as_str().unwrap().to_string();
        }
        frames.push(f);
    };
    loop {
        let f = next();
        let idle = f["method"] == "session.status" && f["params"]["status"] == "idle";
        frames.push(f);
        if idle {
            break;
        }
    }
    let kinds: Vec<String> = frames
        .iter()
        .map(|f| match f["method"].as_str().unwrap() {
            "session.status" => format!("status:{}", f["params"]["status"].as_str().unwrap()),
            _ => f["params"]["event"]["type"].as_str().unwrap().to_string(),
        })
        .collect();
    let receipt = frames
        .iter()
        .position(|f| {
            f["params"]["event"]["type"] == "agent/inbox/spliced"
                && f["params"]["event"]["data"]["inserted"][0]["id"] == message_id.as_str()
        })
        .unwrap_or_else(|| panic!("no receipt for {message_id}: {kinds:?}"));
    let running = kinds.iter().position(|k| k == "status:running").unwrap();
    let start = kinds.iter().position(|k| k == "turn/start").unwrap();
    assert!(receipt < running && running < start, "{kinds:?}");
    assert!(
        frames
            .iter()
            .all(|f| f["params"]["sessionId"] == "sdk-team")
    );
    let text = serde_json::to_string(&frames).unwrap();
    assert!(text.contains("ran-on-a-worker"), "{kinds:?}");
    // The worker ran the turn on the route `initialize` chose.
    let route = ("team-model".to_string(), Some(321));
    assert_eq!(turn_models(&server), [route.clone(), route]);
    assert!(text.contains("first answer"), "{kinds:?}");
    // Seqs as the session's own log numbers them (v4 rows, dense from 0).
    let seqs: Vec<u64> = frames
        .iter()
        .filter_map(|f| f["params"]["event"]["seq"].as_u64())
        .collect();
    assert_eq!(
        seqs,
        (0..seqs.len() as u64).collect::<Vec<_>>(),
        "{kinds:?}"
    );
    send(rpc(
        "c",
        "session/wait",
        serde_json::json!({"sessionId": "sdk-team"}),
    ));
    assert_eq!(next()["result"], serde_json::json!({}));
    send(rpc(
        "d",
        "session/prompt",
        serde_json::json!({"sessionId": "sdk-team", "contentBlocks": [{"type": "text", "text": "look"}, {"type": "image", "mimeType": "image/png", "data": "AAAA"}]}),
    ));
    // The gateway checks images before queueing anything: not a PNG.
    let refused = next();
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("400 Bad Request: image 0"),
        "{refused}"
    );
    // An id that is no plain path segment never reaches the gateway.
    send(rpc(
        "d2",
        "session/prompt",
        serde_json::json!({"sessionId": "sdk-team/events", "contentBlocks": [{"type": "text", "text": "x"}]}),
    ));
    let refused = next();
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("team session id"),
        "{refused}"
    );
    send(rpc("e", "shutdown", serde_json::json!({})));
    assert_eq!(next()["result"], serde_json::json!({}));
    assert!(runtime.wait().unwrap().success());
    // The session is the team's: stored whole, owned by the token's account.
    let stored = team.events("sdk-team");
    check_log(&stored);
    let store = team.store();
    let row = team.rt.block_on(store.session("sdk-team")).unwrap();
    assert_eq!(row.owner_user.as_deref(), Some("sdk-user"));
    // A chosen id is taken once, and only a plain one.
    let statuses: Vec<u16> = team.rt.block_on(async {
        let client = reqwest::Client::new();
        let mut out = Vec::new();
        for body in [
            serde_json::json!({"text": "again", "sessionId": "sdk-team"}),
            serde_json::json!({"text": "odd", "sessionId": "not/a plain id"}),
            serde_json::json!({"text": "odd", "messageId": 7}),
        ] {
            let resp = client
                .post(format!("{}/v1/sessions", gateway.url))
                .bearer_auth(&token)
                .json(&body)
                .send()
                .await
                .unwrap();
            out.push(resp.status().as_u16());
        }
        out
    });
    assert_eq!(statuses, [409, 400, 400]);
    // Upstream's Python SDK, unchanged, resumes it and starts another.
    if let Some(python) = crate::sdk::sdk_python() {
        let got = crate::sdk::run_with(
            &python,
            "team",
            run.home.path(),
            run.work.path(),
            &server,
            &[
                ("DSH_GATEWAY", gateway.url.as_str()),
                ("DSH_GATEWAY_TOKEN", token.as_str()),
            ],
        );
        assert_eq!(got["resumed"]["final_response"], "second answer", "{got}");
        assert_eq!(got["fresh"]["final_response"], "third answer", "{got}");
        assert_eq!(
            got["resumed"]["statuses"],
            serde_json::json!(["running", "idle"]),
            "{got}"
        );
        assert!(
            got["missing"].as_str().unwrap().contains("not found"),
            "{got}"
        );
        // The session's directory is the worker's workspace; moved, the turn ran in it.
        let work = std::fs::canonicalize(run.work.path()).unwrap();
        let sub = work.join("sub").display().to_string();
        assert_eq!(got["cwd"], work.display().to_string(), "{got}");
        assert_eq!(got["moved"], sub.as_str(), "{got}");
        assert_eq!(got["after"], sub.as_str(), "{got}");
        let ran_in = std::fs::read_to_string(run.work.path().join("sdk-where.txt")).unwrap();
        assert_eq!(ran_in.trim(), sub, "{got}");
        check_log(&team.events("sdk-team-fresh"));
        // Upstream's SDK initializes with its default route, and that travels too.
        let models: Vec<String> = turn_models(&server).into_iter().map(|m| m.0).collect();
        assert_eq!(models[2..], ["deepseek-v4-flash"; 3]);
    }
    kill_group(&worker, "KILL");
    let _ = worker.wait();
}

/// One server-sent event: its id and data.
type Sse = (i64, String);

/// Opens the event stream at `url` (resuming after `last_id` when given).
async fn open_events(url: &str, token: &str, last_id: Option<i64>) -> reqwest::Response {
    let client = reqwest::Client::new();
    let mut req = client.get(url).bearer_auth(token);
    if let Some(id) = last_id {
        req = req.header("Last-Event-ID", id.to_string());
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    resp
}

/// Reads server-sent events from `url` (resuming after `last_id` when given) until `done`.
async fn read_events(
    url: &str,
    token: &str,
    last_id: Option<i64>,
    done: impl Fn(&[Sse]) -> bool,
) -> Vec<Sse> {
    collect_events(open_events(url, token, last_id).await, done).await
}

/// Reads server-sent events from an open stream until `done`.
async fn collect_events(resp: reqwest::Response, done: impl Fn(&[Sse]) -> bool) -> Vec<Sse> {
    use futures::StreamExt as _;
    let mut stream = resp.bytes_stream();
    let mut buffer = String::new();
    let mut events: Vec<Sse> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done(&events) {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("stream timed out after {} events", events.len()))
            .expect("the stream ended")
            .unwrap();
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let mut id = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.parse::<i64>().unwrap());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = Some(v.to_string());
                }
            }
            if let (Some(id), Some(data)) = (id, data) {
                events.push((id, data));
            }
        }
    }
    events
}

#[test]
fn the_gateway_streams_sessions_resumes_by_last_event_id_and_keeps_accounts_apart() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let server = MockServer::with_replies([
        crate::common::call(
            "call_1",
            "bash",
            serde_json::json!({"command": "echo hi", "description": "greet"}),
        ),
        Reply::text("gateway answer"),
        Reply::text("live answer"),
    ])
    .answer_untooled("Team test");
    let ann = run.add_user(&server, &team, "ann");
    let bob = run.add_user(&server, &team, "bob");
    let one = run.gateway(&server, &team);
    let two = run.gateway(&server, &team);
    let client = reqwest::Client::new();
    let rt = &team.rt;
    let created: Value = rt.block_on(async {
        let resp = client
            .post(format!("{}/v1/sessions", one.url))
            .bearer_auth(&ann)
            .json(&serde_json::json!({"text": "hello gateway"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        resp.json().await.unwrap()
    });
    let id = created["sessionId"].as_str().unwrap().to_string();
    let session_url = format!("{}/v1/sessions/{id}", one.url);
    // Another account sees nothing of it; no token gets nothing at all.
    rt.block_on(async {
        for url in [session_url.clone(), format!("{session_url}/events")] {
            let resp = client.get(&url).bearer_auth(&bob).send().await.unwrap();
            assert_eq!(resp.status(), 404, "{url}");
            assert_eq!(client.get(&url).send().await.unwrap().status(), 401);
            let resp = client
                .get(&url)
                .bearer_auth("not-a-token")
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 401);
        }
        let resp = client
            .post(format!("{session_url}/messages"))
            .bearer_auth(&bob)
            .json(&serde_json::json!({"text": "intrude"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404);
        let listed: Value = client
            .get(format!("{}/v1/sessions", one.url))
            .bearer_auth(&bob)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(listed["sessions"], serde_json::json!([]));
    });
    run.worker_until_idle(&server, &team, "worker-a");
    let stored = team.events(&id);
    let head = stored.len() as i64;
    let expected: Vec<Sse> = stored.iter().map(|e| (e.seq, e.data.clone())).collect();
    // The whole log from the first gateway, byte for byte.
    let all = rt.block_on(read_events(
        &format!("{session_url}/events"),
        &ann,
        None,
        |e| e.len() as i64 >= head,
    ));
    assert_eq!(all, expected);
    // Resumed on the other gateway after a seq in the middle: the rest, once each.
    let mid = head / 2;
    let rest = rt.block_on(read_events(
        &format!("{}/v1/sessions/{id}/events", two.url),
        &ann,
        Some(mid),
        |e| e.last().is_some_and(|l| l.0 >= head),
    ));
    assert_eq!(rest, expected[mid as usize..].to_vec());
    // Live: a stream open at the head receives the next turn as it is recorded.
    let stream = rt.block_on(async {
        let stream = open_events(&format!("{session_url}/events"), &ann, Some(head)).await;
        let resp = client
            .post(format!("{session_url}/messages"))
            .bearer_auth(&ann)
            .json(&serde_json::json!({"text": "and now?"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 202);
        stream
    });
    run.worker_until_idle(&server, &team, "worker-b");
    let live = rt.block_on(collect_events(stream, |e| {
        e.iter().any(|(_, d)| d.contains("\"turn/end\""))
    }));
    let stored = team.events(&id);
    let ids: Vec<i64> = live.iter().map(|e| e.0).collect();
    assert_eq!(
        ids,
        ((head + 1)..=(head + live.len() as i64)).collect::<Vec<_>>()
    );
    assert_eq!(live.last().map(|e| e.0), stored.last().map(|e| e.seq));
    assert!(live.iter().any(|(_, d)| d.contains("live answer")));
    check_log(&stored);
}

/// A TCP proxy in front of PostgreSQL that a test can cut: `blackhole` drops every byte both
/// ways while keeping connections open (a partition), `reset` closes every connection (a
/// restart, as far as clients can tell).
struct Proxy {
    port: u16,
    state: Arc<ProxyState>,
}

#[derive(Default)]
struct ProxyState {
    blackhole: std::sync::atomic::AtomicBool,
    conns: std::sync::Mutex<Vec<std::net::TcpStream>>,
}

impl Proxy {
    fn start(upstream: String) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(ProxyState::default());
        let shared = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = std::net::TcpStream::connect(&upstream) else {
                    continue;
                };
                {
                    let mut conns = shared.conns.lock().unwrap();
                    conns.push(client.try_clone().unwrap());
                    conns.push(server.try_clone().unwrap());
                }
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let state = shared.clone();
                    std::thread::spawn(move || pump(from, to, &state));
                }
            }
        });
        Self { port, state }
    }

    fn blackhole(&self, on: bool) {
        self.state
            .blackhole
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }

    fn reset(&self) {
        for c in self.state.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

fn pump(mut from: std::net::TcpStream, mut to: std::net::TcpStream, state: &ProxyState) {
    use std::io::{Read as _, Write as _};
    let mut buf = [0u8; 16384];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if state.blackhole.load(std::sync::atomic::Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

impl Team {
    /// The store's connection string through `proxy` (a key-value string: `host=… port=…`).
    fn via(&self, proxy: &Proxy) -> String {
        let mut parts: Vec<String> = self
            .url
            .split_whitespace()
            .filter(|kv| !kv.starts_with("host=") && !kv.starts_with("port="))
            .map(str::to_string)
            .collect();
        assert!(
            parts.iter().all(|kv| kv.contains('=')),
            "the proxy tests need DSH_TEST_POSTGRES as key=value pairs, not a URL"
        );
        parts.push("host=127.0.0.1".into());
        parts.push(format!("port={}", proxy.port));
        parts.join(" ")
    }

    /// `host:port` of the server itself.
    fn upstream(&self) -> String {
        let get = |key: &str| {
            self.url
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(&format!("{key}=")).map(str::to_string))
        };
        format!(
            "{}:{}",
            get("host").unwrap_or_else(|| "127.0.0.1".into()),
            get("port").unwrap_or_else(|| "5432".into())
        )
    }
}

#[test]
fn a_worker_cut_from_the_store_stops_its_tools_and_another_takes_over() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let proxy = Proxy::start(team.upstream());
    let marker = format!("team-cut-{}", uuid::Uuid::new_v4().simple());
    let server = MockServer::with_replies([
        crate::common::call(
            "call_cut",
            "bash",
            serde_json::json!({"command": format!("touch started; sleep 30; echo {marker}"), "description": "long"}),
        ),
        Reply::text("after the cut"),
    ])
    .answer_untooled("Team test");
    let session = run.submit(&server, &team, None, "start");
    let mut a = {
        let mut c = run.team(
            &server,
            &team,
            &[
                "worker",
                "--owner",
                "worker-a",
                "--lease-ttl-ms",
                &TTL_MS.to_string(),
                "--poll-ms",
                "50",
            ],
        );
        c.env("DSH_STORAGE", team.via(&proxy));
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        c.stdout(Stdio::null())
            .stderr(std::fs::File::create(run.worker_log("worker-a")).unwrap());
        c.spawn().unwrap()
    };
    wait_file(&run.work.path().join("started"));
    // The shell, and for a moment the copy of it that is about to become `sleep`.
    assert!(!processes_with(&marker).is_empty(), "the tool runs");
    // Partition worker A from the database: it cannot renew, so within its TTL it must
    // stop its tool itself (nobody else can reach that process).
    proxy.blackhole(true);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !processes_with(&marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the partitioned worker kept its tool running"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(run.worker_log("worker-a")).unwrap();
    run.submit(&server, &team, Some(&session), "go on");
    run.worker_until_idle(&server, &team, "worker-b");
    kill_group(&a, "KILL");
    let _ = a.wait();
    let stored = team.events(&session);
    let events = check_log(&stored);
    assert!(
        answers(&events).join("\n").contains("after the cut"),
        "{log}"
    );
    assert!(stored.iter().all(|e| e.epoch <= 2));
    assert!(
        events.iter().any(|e| e.is(types::TOOL_RESULT)
            && e.data
                .as_value()
                .pointer("/message/source/callId")
                .is_some_and(|id| id == "call_cut")),
        "the cut call was closed"
    );
}

#[test]
fn store_connections_reset_mid_turn_lose_and_duplicate_nothing() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let proxy = Proxy::start(team.upstream());
    // The turn outlasts the lease TTL after the first reset: without reconnecting, the lease
    // keeper would fence it.
    let mut replies: Vec<Reply> = (0..5)
        .map(|i| {
            crate::common::call(
                &format!("call_{i}"),
                "bash",
                serde_json::json!({"command": format!("sleep 0.5; echo step-{i}"), "description": "step"}),
            )
        })
        .collect();
    replies.push(Reply::text("all steps done"));
    let server = MockServer::with_replies(replies).answer_untooled("Team test");
    let session = run.submit(&server, &team, None, "five steps");
    let mut a = {
        let mut c = run.team(
            &server,
            &team,
            &[
                "worker",
                "--owner",
                "worker-a",
                "--lease-ttl-ms",
                "1500",
                "--poll-ms",
                "50",
                "--until-idle",
            ],
        );
        c.env("DSH_STORAGE", team.via(&proxy));
        c.stdout(Stdio::null())
            .stderr(std::fs::File::create(run.worker_log("worker-a")).unwrap());
        c.spawn().unwrap()
    };
    // Every connection of the worker and its turn is cut twice while tools run.
    for n in 1..=2 {
        team.wait_for(&session, "a tool result", |e| {
            e.iter().filter(|e| e.kind == types::TOOL_RESULT).count() >= n
        });
        proxy.reset();
    }
    let status = a.wait().unwrap();
    let log = std::fs::read_to_string(run.worker_log("worker-a")).unwrap();
    assert!(status.success(), "{log}");
    let stored = team.events(&session);
    let events = check_log(&stored);
    assert!(
        stored.iter().all(|e| e.epoch == 1),
        "nobody else took the session: {log}"
    );
    let results = events.iter().filter(|e| e.is(types::TOOL_RESULT)).count();
    assert_eq!(results, 5, "every step recorded once: {log}");
    assert!(answers(&events).join("\n").contains("all steps done"));
    assert_eq!(events.iter().filter(|e| e.is(types::TURN_END)).count(), 1);
    assert_eq!(team.pending(&session), 0);
}

/// The NATS server of the machine (`DSH_TEST_NATS`, default `nats://127.0.0.1:4222`), or
/// `None` (a skip; a failure in a strict run).
fn nats() -> Option<String> {
    let url = std::env::var("DSH_TEST_NATS").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let addr = url.trim_start_matches("nats://").to_string();
    if std::net::TcpStream::connect(&addr).is_err() {
        dsh_test_support::prereq::skip(&format!(
            "NATS with JetStream at {url}; the machine's server, or set DSH_TEST_NATS"
        ));
        return None;
    }
    Some(url)
}

impl Run {
    fn gateway_with(&self, server: &MockServer, team: &Team, extra: &[&str]) -> Gateway {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut c = self.team(server, team, &args);
        c.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = c.spawn().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("dsh serve said {line:?}"))
            .to_string();
        Gateway { child, url }
    }

    /// Account `ann` (its token), a gateway and worker `worker-a` on the team's own pool that
    /// look in PostgreSQL only every ten minutes: whatever reaches them in a test came over
    /// NATS.
    fn over_nats(&self, server: &MockServer, team: &Team, nats: &str) -> (String, Gateway, Worker) {
        let ann = self.add_user(server, team, "ann");
        let slow = [
            "--transport",
            nats,
            "--pool",
            team.schema.as_str(),
            "--poll-ms",
            "600000",
        ];
        let gateway = self.gateway_with(server, team, &slow);
        let worker = self.worker(server, team, "worker-a", &slow);
        (ann, gateway, worker)
    }
}

async fn post_json(client: &reqwest::Client, url: &str, token: &str, text: &str) -> Value {
    let resp = client
        .post(url)
        .bearer_auth(token)
        .json(&serde_json::json!({"text": text}))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    resp.json().await.unwrap()
}

/// A model for two turns: each runs one bash command (`echo one`, then `second_command`)
/// and answers.
fn two_turns(second_command: &str, first: &str, second: &str) -> MockServer {
    MockServer::with_replies([
        crate::common::call(
            "call_1",
            "bash",
            serde_json::json!({"command": "echo one", "description": "one"}),
        ),
        Reply::text(first),
        crate::common::call(
            "call_2",
            "bash",
            serde_json::json!({"command": second_command, "description": "two"}),
        ),
        Reply::text(second),
    ])
    .answer_untooled("Team test")
}

/// The gateway and the worker look at PostgreSQL only every ten minutes here: a turn that
/// runs and streams at all was woken and carried by NATS.
#[test]
fn with_nats_idle_workers_wake_on_input_and_streams_are_live() {
    let Some(team) = Team::new() else { return };
    let Some(nats) = nats() else { return };
    let run = Run::new();
    let server = two_turns("echo two", "first over nats", "second over nats");
    let (ann, gateway, mut worker) = run.over_nats(&server, &team, &nats);
    let client = reqwest::Client::new();
    let rt = &team.rt;
    // The worker is idle (it looked once at start); a new session wakes it.
    std::thread::sleep(Duration::from_millis(300));
    let created = rt.block_on(post_json(
        &client,
        &format!("{}/v1/sessions", gateway.url),
        &ann,
        "first",
    ));
    let id = created["sessionId"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !team.events(&id).iter().any(|e| e.kind == types::TURN_END) {
        assert!(
            Instant::now() < deadline,
            "the woken worker never ran the turn: {}",
            std::fs::read_to_string(run.worker_log("worker-a")).unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let events_url = format!("{}/v1/sessions/{id}/events", gateway.url);
    let first = rt.block_on(read_events(&events_url, &ann, None, |e| {
        e.iter().any(|(_, d)| d.contains("\"turn/end\""))
    }));
    // A stream open at the head gets the next turn live.
    let head = first.last().unwrap().0;
    let stream = rt.block_on(async {
        let stream = open_events(&events_url, &ann, Some(head)).await;
        post_json(
            &client,
            &format!("{}/v1/sessions/{id}/messages", gateway.url),
            &ann,
            "second",
        )
        .await;
        stream
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while team
        .events(&id)
        .iter()
        .filter(|e| e.kind == types::TURN_END)
        .count()
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "the woken worker never ran the second turn: {}",
            std::fs::read_to_string(run.worker_log("worker-a")).unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = rt.block_on(collect_events(stream, |e| {
        e.iter().any(|(_, d)| d.contains("\"turn/end\""))
    }));
    kill_group(&worker, "KILL");
    let _ = worker.wait();
    let stored = team.events(&id);
    check_log(&stored);
    let mut all = first;
    all.extend(second);
    let expected: Vec<Sse> = stored.iter().map(|e| (e.seq, e.data.clone())).collect();
    assert_eq!(all, expected, "every event once, in order, byte for byte");
    assert!(
        answers(&check_log(&stored))
            .join("\n")
            .contains("second over nats")
    );
}

/// NATS unreachable (a port nobody listens on) or cut mid-stream: the team runs on
/// PostgreSQL alone and clients miss nothing.
#[test]
fn without_nats_the_team_falls_back_to_postgres() {
    let Some(team) = Team::new() else { return };
    let Some(nats) = nats() else { return };
    let run = Run::new();
    let pool = team.schema.clone();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("nats://{}", l.local_addr().unwrap())
    };
    let proxy = Proxy::start(nats.trim_start_matches("nats://").to_string());
    let via_proxy = format!("nats://127.0.0.1:{}", proxy.port);
    let server = two_turns(
        "sleep 0.3; echo two",
        "first without nats",
        "second with nats cut",
    );
    let ann = run.add_user(&server, &team, "ann");
    // Gateway one cannot reach NATS at all; gateway two loses it in the middle.
    let one = run.gateway_with(
        &server,
        &team,
        &["--transport", &dead, "--pool", &pool, "--poll-ms", "100"],
    );
    let two = run.gateway_with(
        &server,
        &team,
        &[
            "--transport",
            &via_proxy,
            "--pool",
            &pool,
            "--poll-ms",
            "100",
        ],
    );
    let client = reqwest::Client::new();
    let rt = &team.rt;
    let created = rt.block_on(post_json(
        &client,
        &format!("{}/v1/sessions", one.url),
        &ann,
        "first",
    ));
    let id = created["sessionId"].as_str().unwrap().to_string();
    let worker_args = [
        "--transport",
        dead.as_str(),
        "--pool",
        pool.as_str(),
        "--poll-ms",
        "50",
        "--until-idle",
    ];
    let status = run
        .worker(&server, &team, "worker-a", &worker_args)
        .wait()
        .unwrap();
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(run.worker_log("worker-a")).unwrap()
    );
    let first = rt.block_on(read_events(
        &format!("{}/v1/sessions/{id}/events", one.url),
        &ann,
        None,
        |e| e.iter().any(|(_, d)| d.contains("\"turn/end\"")),
    ));
    let head = first.last().unwrap().0;
    // A live stream on gateway two; its NATS goes dark, then the next turn runs (its worker
    // publishes to the real NATS, which gateway two no longer hears).
    let stream = rt.block_on(open_events(
        &format!("{}/v1/sessions/{id}/events", two.url),
        &ann,
        Some(head),
    ));
    proxy.blackhole(true);
    rt.block_on(post_json(
        &client,
        &format!("{}/v1/sessions/{id}/messages", two.url),
        &ann,
        "second",
    ));
    let nats_args = [
        "--transport",
        nats.as_str(),
        "--pool",
        pool.as_str(),
        "--poll-ms",
        "50",
        "--until-idle",
    ];
    let status = run
        .worker(&server, &team, "worker-b", &nats_args)
        .wait()
        .unwrap();
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(run.worker_log("worker-b")).unwrap()
    );
    let second = rt.block_on(collect_events(stream, |e| {
        e.iter().any(|(_, d)| d.contains("\"turn/end\""))
    }));
    let stored = team.events(&id);
    check_log(&stored);
    let mut all = first;
    all.extend(second);
    let expected: Vec<Sse> = stored.iter().map(|e| (e.seq, e.data.clone())).collect();
    assert_eq!(all, expected, "every event once, in order, byte for byte");
}

#[test]
fn the_team_store_can_be_named_in_settings() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let server = MockServer::start();
    run.settings(&format!(
        "team:\n  storage: '{}'\n  pool: from-settings\n",
        team.url
    ));
    let out = run
        .base(&server)
        .args(["team", "submit", "hello"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let store = team.store();
    assert_eq!(team.rt.block_on(store.backlog("from-settings")).unwrap(), 1);
    assert_eq!(team.pending(&id), 1);
    // A key the section does not take is refused, naming it.
    run.settings("team:\n  storgae: x\n");
    let out = run
        .base(&server)
        .args(["team", "show", &id])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        crate::common::stderr(&out).contains("storgae"),
        "{}",
        crate::common::stderr(&out)
    );
    // Without any, the error says where a store can be named.
    run.settings("");
    let out = run
        .base(&server)
        .args(["team", "show", &id])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(crate::common::stderr(&out).contains("team.storage"));
}

#[test]
fn a_running_turn_is_cancelled_through_the_gateway() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let marker = format!("team-cancel-{}", uuid::Uuid::new_v4().simple());
    let server = MockServer::with_replies([
        crate::common::call(
            "call_long",
            "bash",
            serde_json::json!({"command": format!("touch started; sleep 30; echo {marker}"), "description": "long"}),
        ),
        Reply::text("after the cancel"),
    ])
    .answer_untooled("Team test");
    let ann = run.add_user(&server, &team, "ann");
    let gateway = run.gateway_with(&server, &team, &["--poll-ms", "50"]);
    let client = reqwest::Client::new();
    let rt = &team.rt;
    let created = rt.block_on(post_json(
        &client,
        &format!("{}/v1/sessions", gateway.url),
        &ann,
        "long",
    ));
    let id = created["sessionId"].as_str().unwrap().to_string();
    let cancel_url = format!("{}/v1/sessions/{id}/cancel", gateway.url);
    let cancel = || {
        rt.block_on(async {
            client
                .post(&cancel_url)
                .bearer_auth(&ann)
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    assert_eq!(cancel(), 409, "no turn runs before a worker takes it");
    let mut worker = run.worker(&server, &team, "worker-a", &[]);
    wait_file(&run.work.path().join("started"));
    assert_eq!(cancel(), 202);
    team.wait_for(&id, "the cancelled turn's end", |e| {
        e.iter().any(|e| e.kind == types::TURN_END)
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_with(&marker).is_empty() {
        assert!(Instant::now() < deadline, "the cancelled tool kept running");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The worker goes on: the next input runs normally.
    rt.block_on(post_json(
        &client,
        &format!("{}/v1/sessions/{id}/messages", gateway.url),
        &ann,
        "again",
    ));
    team.wait_for(&id, "the next turn's end", |e| {
        e.iter().filter(|e| e.kind == types::TURN_END).count() == 2
    });
    kill_group(&worker, "KILL");
    let _ = worker.wait();
    let log = std::fs::read_to_string(run.worker_log("worker-a")).unwrap();
    assert!(log.contains("was cancelled"), "{log}");
    let stored = team.events(&id);
    let events = check_log(&stored);
    let first_end = events.iter().find(|e| e.is(types::TURN_END)).unwrap();
    assert_ne!(
        first_end.data.as_value().pointer("/reason/kind"),
        Some(&Value::from("completed")),
        "{:?}",
        first_end.data.as_value()
    );
    assert!(answers(&events).join("\n").contains("after the cancel"));
}

#[test]
fn dsh_sessions_lists_shows_exports_and_forks_a_team_store() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let server = MockServer::with_replies([
        Reply::text("first answer"),
        Reply::text("answer in the fork"),
    ])
    .answer_untooled("Stored title");
    let session = run.submit(&server, &team, None, "first task");
    run.worker_until_idle(&server, &team, "worker-a");
    // Input on another pool: no worker here takes it.
    let out = run
        .team(
            &server,
            &team,
            &["team", "submit", "--pool", "elsewhere", "not run yet"],
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    let queued = serde_json::from_slice::<Value>(&out.stdout).unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let sessions = |args: &[&str]| {
        let mut all = vec!["sessions"];
        all.extend_from_slice(args);
        let out = run.team(&server, &team, &all).output().unwrap();
        assert!(
            out.status.success(),
            "dsh {all:?}: {}",
            crate::common::stderr(&out)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    // `list` reads the store ($DSH_STORAGE): turns and title from the stored records.
    let list = sessions(&["list"]);
    let line = list.lines().find(|l| l.starts_with(&session)).unwrap();
    assert!(line.contains("  1 turns  Stored title"), "{list}");
    let line = list.lines().find(|l| l.starts_with(&queued)).unwrap();
    assert!(line.contains("  0 turns  (queued, no turn yet)"), "{list}");
    // `--storage local` looks at the local logs instead, where the team's are not.
    assert!(!sessions(&["--storage", "local", "list", "--all"]).contains(&session));
    // `show` prints the transcript as for a local log.
    let shown = sessions(&["show", &session]);
    assert!(
        shown.contains("first task") && shown.contains("first answer"),
        "{shown}"
    );
    // `export` is the stored log: the header, then each record byte for byte.
    let stored = team.events(&session);
    let exported = sessions(&["export", &session]);
    let lines: Vec<&str> = exported.lines().collect();
    assert_eq!(lines.len(), stored.len() + 1);
    assert!(lines[0].contains(&session), "{}", lines[0]);
    for (line, event) in lines[1..].iter().zip(&stored) {
        assert_eq!(*line, event.data);
    }
    // A session that never ran has nothing to show, and says why.
    let out = run
        .team(&server, &team, &["sessions", "show", &queued])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        crate::common::stderr(&out).contains("has not run a turn yet (1 input(s) queued)"),
        "{}",
        crate::common::stderr(&out)
    );
    // `fork` writes the new session to the store; a worker runs its next input with the
    // inherited history.
    let fork = sessions(&["fork", &session]).trim().to_string();
    assert!(fork.starts_with("session-") && fork != session, "{fork}");
    let store = team.store();
    let row = team.rt.block_on(store.session(&fork)).unwrap();
    let header: Value = serde_json::from_str(row.header.as_deref().unwrap()).unwrap();
    assert_eq!(header["parentSession"], session.as_str(), "{header}");
    run.submit(&server, &team, Some(&fork), "continue in the fork");
    run.worker_until_idle(&server, &team, "worker-b");
    let forked = team.events(&fork);
    let events = check_log(&forked);
    assert!(
        answers(&events).join("\n").contains("answer in the fork"),
        "{:?}",
        answers(&events)
    );
    let requests = crate::common::loop_requests(&server);
    let text = requests
        .iter()
        .map(|r| serde_json::to_string(&r.messages()).unwrap())
        .find(|t| t.contains("continue in the fork"))
        .unwrap();
    assert!(
        text.contains("first task") && text.contains("first answer"),
        "the fork's turn sees the inherited history: {text}"
    );
    // The parent is untouched.
    assert_eq!(team.events(&session).len(), stored.len());
}

#[test]
fn accounts_with_a_password_sign_in_for_a_token_that_signs_out() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let server = MockServer::start();
    let with_stdin = |args: &[&str], input: &str| {
        let mut c = run.team(&server, &team, args);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    // Too short a password is refused, and no account is made.
    let out = with_stdin(
        &["team", "user", "add", "cat", "--password-stdin"],
        "short\n",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(crate::common::stderr(&out).contains("at least 8 characters"));
    let out = with_stdin(
        &["team", "user", "add", "cat", "--password-stdin"],
        "tabby cat 123\n",
    );
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    let standing = serde_json::from_slice::<Value>(&out.stdout).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let gateway = run.gateway(&server, &team);
    let client = reqwest::Client::new();
    let login = |user: &str, password: &str| {
        team.rt.block_on(async {
            let resp = client
                .post(format!("{}/v1/login", gateway.url))
                .json(&serde_json::json!({"user": user, "password": password}))
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
        })
    };
    let status_with = |token: &str, method: reqwest::Method, path: &str| {
        team.rt.block_on(async {
            client
                .request(method, format!("{}{path}", gateway.url))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    // A wrong password and an unknown account answer alike.
    let (status, body) = login("cat", "tabby cat 124");
    assert_eq!(status, 401, "{body}");
    let (status, unknown) = login("nobody", "tabby cat 123");
    assert_eq!((status, &unknown), (401, &body));
    let (status, body) = login("cat", "tabby cat 123");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["user"], "cat");
    assert_eq!(body["expiresInSeconds"], 12 * 3600);
    let token = body["token"].as_str().unwrap().to_string();
    assert_ne!(token, standing);
    assert_eq!(
        status_with(&token, reqwest::Method::GET, "/v1/sessions"),
        200
    );
    // Signing out ends that token only; the standing token cannot be signed out.
    assert_eq!(
        status_with(&token, reqwest::Method::POST, "/v1/logout"),
        200
    );
    assert_eq!(
        status_with(&token, reqwest::Method::GET, "/v1/sessions"),
        401
    );
    assert_eq!(
        status_with(&standing, reqwest::Method::POST, "/v1/logout"),
        409
    );
    assert_eq!(
        status_with(&standing, reqwest::Method::GET, "/v1/sessions"),
        200
    );
    // A new password replaces the old one, and ends the sign-ins the old one bought.
    let (_, body) = login("cat", "tabby cat 123");
    let old_token = body["token"].as_str().unwrap().to_string();
    assert_eq!(
        status_with(&old_token, reqwest::Method::GET, "/v1/sessions"),
        200
    );
    let out = with_stdin(&["team", "user", "password", "cat"], "new password!\n");
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    assert_eq!(
        status_with(&old_token, reqwest::Method::GET, "/v1/sessions"),
        401
    );
    assert_eq!(login("cat", "tabby cat 123").0, 401);
    let (status, body) = login("cat", "new password!");
    assert_eq!(status, 200, "{body}");
    let signed_in = body["token"].as_str().unwrap().to_string();
    // Repeated failures lock the account out of password sign-in for a while.
    let mut statuses = Vec::new();
    for _ in 0..11 {
        statuses.push(login("cat", "guessing wrong").0);
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    assert_eq!(login("cat", "new password!").0, 429);

    // Account administration: list, a new standing token, removal.
    let team_json = |args: &[&str]| {
        let out = run.team(&server, &team, args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            crate::common::stderr(&out)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect::<Vec<_>>()
    };
    let (status, created) = team.rt.block_on(async {
        let resp = client
            .post(format!("{}/v1/sessions", gateway.url))
            .bearer_auth(&standing)
            .json(&serde_json::json!({"text": "kept after removal"}))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
    });
    assert_eq!(status, 201, "{created}");
    let session = created["sessionId"].as_str().unwrap().to_string();
    let accounts = team_json(&["team", "user", "list"]);
    let cat = accounts.iter().find(|a| a["user"] == "cat").unwrap();
    assert_eq!(cat["password"], true);
    assert_eq!(cat["admin"], false);
    assert_eq!(cat["signIns"], 1, "{cat}");
    assert_eq!(cat["sessions"], 1, "{cat}");
    let rotated = team_json(&["team", "user", "token", "cat"]);
    let fresh = rotated[0]["token"].as_str().unwrap().to_string();
    assert_ne!(fresh, standing);
    assert_eq!(
        status_with(&standing, reqwest::Method::GET, "/v1/sessions"),
        401,
        "the replaced token stops working"
    );
    assert_eq!(
        status_with(&fresh, reqwest::Method::GET, "/v1/sessions"),
        200
    );
    assert_eq!(
        status_with(&signed_in, reqwest::Method::GET, "/v1/sessions"),
        200,
        "a new standing token leaves password sign-ins alone"
    );
    let removed = team_json(&["team", "user", "remove", "cat"]);
    assert_eq!(removed[0]["sessionsKept"], 1, "{removed:?}");
    for token in [&fresh, &signed_in] {
        assert_eq!(
            status_with(token, reqwest::Method::GET, "/v1/sessions"),
            401
        );
    }
    assert!(
        !team_json(&["team", "user", "list"])
            .iter()
            .any(|a| a["user"] == "cat")
    );
    // The removed account's session and its input are still in the store, owned by nobody.
    let kept = team_json(&["team", "sessions"]);
    let row = kept.iter().find(|r| r["sessionId"] == session).unwrap();
    assert_eq!(row["owner"], Value::Null);
    assert_eq!(team_json(&["team", "show", &session])[0]["pendingInput"], 1);
    for args in [
        &["team", "user", "remove", "cat"][..],
        &["team", "user", "token", "cat"][..],
    ] {
        let out = run.team(&server, &team, args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(crate::common::stderr(&out).contains("no account \"cat\""));
    }
}

/// A PostgreSQL server of the test's own (initdb in a temporary directory, on a free
/// loopback port), so it can be restarted without touching the machine's. Its binaries come
/// from `DSH_TEST_PG_BIN`, else the newest `/usr/lib/postgresql/<version>/bin`; as root the
/// server runs as the `postgres` account (it refuses root).
struct PrivatePg {
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
    port: u16,
    as_postgres: bool,
}

impl PrivatePg {
    fn start() -> Option<Self> {
        let bin = std::env::var_os("DSH_TEST_PG_BIN")
            .map(std::path::PathBuf::from)
            .or_else(|| {
                let mut dirs: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
                    .ok()?
                    .flatten()
                    .map(|d| d.path().join("bin"))
                    .filter(|b| b.join("initdb").is_file())
                    .collect();
                dirs.sort_by_key(|d| {
                    d.parent()
                        .and_then(|v| v.file_name())
                        .and_then(|v| v.to_str())
                        .and_then(|v| v.parse::<u32>().ok())
                });
                dirs.pop()
            });
        let Some(bin) = bin.filter(|b| b.join("pg_ctl").is_file()) else {
            dsh_test_support::prereq::skip(
                "PostgreSQL's server binaries (initdb, pg_ctl): the machine's package, or set DSH_TEST_PG_BIN",
            );
            return None;
        };
        let as_postgres = rustix::process::geteuid().is_root();
        let dir = tempfile::tempdir().unwrap();
        if as_postgres {
            let status = Command::new("chown")
                .args(["postgres:", dir.path().to_str().unwrap()])
                .status()
                .unwrap();
            assert!(status.success(), "chown of the cluster directory");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = Self {
            dir,
            bin,
            port,
            as_postgres,
        };
        let data = pg.data();
        pg.run(
            "initdb",
            &[
                "-D",
                &data,
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        pg.ctl(&["start"]);
        Some(pg)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// `tool` of the server's binaries, as the account the server runs as.
    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        }
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let out = self.command(tool).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            crate::common::stderr(&out)
        );
    }

    /// `pg_ctl <action>` with this server's options, waiting until it is done.
    fn ctl(&self, action: &[&str]) {
        let dir = self.dir.path().display().to_string();
        let options = format!("-p {} -k {dir} -c listen_addresses=127.0.0.1", self.port);
        let log = format!("{dir}/server.log");
        let data = self.data();
        let mut args = vec!["-D", &data, "-w", "-l", &log, "-o", &options];
        args.extend_from_slice(action);
        self.run("pg_ctl", &args);
    }

    fn url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    /// Stops the server as a crash would (no checkpoint, every connection dropped) and
    /// starts it again; it replays its WAL before it accepts connections.
    fn crash_and_restart(&self) {
        self.ctl(&["-m", "immediate", "restart"]);
    }

    /// [`PrivatePg::crash_and_restart`], with the server away for `down` in between (a
    /// restart as slow as a loaded machine makes it).
    fn crash_and_restart_after(&self, down: Duration) {
        self.ctl(&["-m", "immediate", "stop"]);
        std::thread::sleep(down);
        self.ctl(&["start"]);
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let data = self.data();
        let mut c = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"));
            c
        } else {
            Command::new(self.bin.join("pg_ctl"))
        };
        let _ = c
            .args(["-D", &data, "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn postgres_crashing_and_restarting_mid_turn_loses_and_duplicates_nothing() {
    let Some(pg) = PrivatePg::start() else { return };
    let Some(team) = Team::on(&pg.url()) else {
        return;
    };
    let run = Run::new();
    let mut replies: Vec<Reply> = (0..5)
        .map(|i| {
            crate::common::call(
                &format!("call_{i}"),
                "bash",
                serde_json::json!({"command": format!("sleep 0.4; echo step-{i}"), "description": "step"}),
            )
        })
        .collect();
    replies.push(Reply::text("all steps done"));
    let server = MockServer::with_replies(replies).answer_untooled("Team test");
    let admin = {
        let out = run
            .team(&server, &team, &["team", "user", "add", "root", "--admin"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", crate::common::stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["token"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let session = run.submit(&server, &team, None, "five steps");
    let gateway = run.gateway(&server, &team);
    // A client follows the session through the gateway the whole time.
    let events_url = format!("{}/v1/sessions/{session}/events", gateway.url);
    let client = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(read_events(&events_url, &admin, None, |got| {
            got.iter().any(|(_, d)| d.contains("\"type\":\"turn/end\""))
        }))
    });
    // The lease outlasts a restart, even a slow one: the same worker goes on under the
    // same epoch.
    let mut worker = run.worker(
        &server,
        &team,
        "worker-a",
        &["--until-idle", "--lease-ttl-ms", "6000"],
    );
    for n in [1, 3] {
        team.wait_for_or(
            &session,
            "a tool result",
            |e| e.iter().filter(|e| e.kind == types::TOOL_RESULT).count() >= n,
            || {
                let log = std::fs::read_to_string(run.worker_log("worker-a")).unwrap_or_default();
                format!("worker: {:?}\n{log}", worker.try_wait())
            },
        );
        if n == 1 {
            pg.crash_and_restart();
        } else {
            // Away for a third of the lease and more: the worker waits for the store instead
            // of giving up, and its lease keeper renews as soon as the store is back.
            pg.crash_and_restart_after(Duration::from_secs(2));
        }
    }
    let status = worker.wait().unwrap();
    let log = std::fs::read_to_string(run.worker_log("worker-a")).unwrap();
    assert!(status.success(), "{log}");
    let stored = team.events(&session);
    let events = check_log(&stored);
    let results = events.iter().filter(|e| e.is(types::TOOL_RESULT)).count();
    assert_eq!(results, 5, "every step recorded once: {log}");
    assert!(answers(&events).join("\n").contains("all steps done"));
    assert_eq!(events.iter().filter(|e| e.is(types::TURN_END)).count(), 1);
    assert_eq!(team.pending(&session), 0);
    assert!(
        stored.iter().all(|e| e.epoch == 1),
        "the lease outlived both restarts: {log}"
    );
    // What the client received is the database: every event once, in order.
    let received = client.join().unwrap();
    let expected: Vec<Sse> = stored.iter().map(|e| (e.seq, e.data.clone())).collect();
    assert_eq!(received, expected);
}

/// An OpenID Connect provider on loopback: its discovery document and key set (one P-256
/// key), and tokens it signs.
struct Issuer {
    url: String,
    pkcs8: Vec<u8>,
}

impl Issuer {
    fn start() -> Self {
        use base64::Engine as _;
        use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .unwrap()
            .as_ref()
            .to_vec();
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8, &rng).unwrap();
        let point = pair.public_key().as_ref();
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let discovery = serde_json::json!({
            "issuer": url,
            "jwks_uri": format!("{url}/keys"),
        })
        .to_string();
        let keys = serde_json::json!({"keys": [{
            "kty": "EC", "crv": "P-256", "kid": "key-1", "use": "sig", "alg": "ES256",
            "x": b64(&point[1..33]), "y": b64(&point[33..65]),
        }]})
        .to_string();
        std::thread::spawn(move || {
            use std::io::{Read as _, Write as _};
            for mut conn in listener.incoming().flatten() {
                let mut buf = [0u8; 4096];
                let n = conn.read(&mut buf).unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]);
                let path = request.split_whitespace().nth(1).unwrap_or("");
                let (status, body) = match path {
                    "/.well-known/openid-configuration" => ("200 OK", discovery.as_str()),
                    "/keys" => ("200 OK", keys.as_str()),
                    _ => ("404 Not Found", "{}"),
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Self { url, pkcs8 }
    }

    /// A token signed with the issuer's key (or, with `forged`, with a key of nobody's).
    fn token(&self, claims: &Value, forged: bool) -> String {
        let pkcs8 = if forged {
            ring::signature::EcdsaKeyPair::generate_pkcs8(
                &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                &ring::rand::SystemRandom::new(),
            )
            .unwrap()
            .as_ref()
            .to_vec()
        } else {
            self.pkcs8.clone()
        };
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some("key-1".into());
        jsonwebtoken::encode(
            &header,
            claims,
            &jsonwebtoken::EncodingKey::from_ec_der(&pkcs8),
        )
        .unwrap()
    }
}

#[test]
fn the_gateway_accepts_an_oidc_providers_tokens_for_existing_accounts() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let server = MockServer::start();
    let issuer = Issuer::start();
    run.add_user(&server, &team, "dana");
    let gateway = run.gateway_with(
        &server,
        &team,
        &[
            "--oidc-issuer",
            &issuer.url,
            "--oidc-audience",
            "dsh-gateway",
            "--oidc-claim",
            "preferred_username",
        ],
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = |user: &str, aud: &str, iss: &str, exp: u64| {
        serde_json::json!({
            "iss": iss, "aud": aud, "exp": exp, "iat": now, "sub": "id-1234",
            "preferred_username": user,
        })
    };
    let client = reqwest::Client::new();
    let get = |token: &str| {
        team.rt.block_on(async {
            let resp = client
                .get(format!("{}/v1/sessions", gateway.url))
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.text().await.unwrap())
        })
    };
    let good = issuer.token(
        &claims("dana", "dsh-gateway", &issuer.url, now + 300),
        false,
    );
    let (status, body) = get(&good);
    assert_eq!(status, 200, "{body}");
    // Each of these is refused, with the reason in the answer.
    let cases = [
        (
            issuer.token(
                &claims("dana", "another-app", &issuer.url, now + 300),
                false,
            ),
            "InvalidAudience",
        ),
        (
            issuer.token(
                &claims("dana", "dsh-gateway", "http://evil.example", now + 300),
                false,
            ),
            "InvalidIssuer",
        ),
        (
            issuer.token(
                &claims("dana", "dsh-gateway", &issuer.url, now - 600),
                false,
            ),
            "ExpiredSignature",
        ),
        (
            issuer.token(&claims("dana", "dsh-gateway", &issuer.url, now + 300), true),
            "InvalidSignature",
        ),
        (
            issuer.token(
                &claims("erin", "dsh-gateway", &issuer.url, now + 300),
                false,
            ),
            "for this provider identity",
        ),
    ];
    for (token, why) in cases {
        let (status, body) = get(&token);
        assert_eq!(status, 401, "{why}: {body}");
        assert!(body.contains(why), "{why}: {body}");
    }
    // A token whose header claims HMAC, signed with the public key as the secret, is
    // refused: only the key's own kind of algorithm counts.
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some("key-1".into());
    let hmac = jsonwebtoken::encode(
        &header,
        &claims("dana", "dsh-gateway", &issuer.url, now + 300),
        &jsonwebtoken::EncodingKey::from_secret(b"anything"),
    )
    .unwrap();
    let (status, body) = get(&hmac);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("does not fit"), "{body}");
}

/// Whether a Docker daemon answers (else a skip; a failure in a strict run).
fn docker_daemon() -> bool {
    let ok = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        dsh_test_support::prereq::skip(
            "a running Docker daemon (docker.io's dockerd; .ci/run starts one)",
        );
    }
    ok
}

fn docker_out(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        crate::common::stderr(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_docker_worker_runs_each_sessions_commands_in_a_container_of_its_lease() {
    if !docker_daemon() {
        return;
    }
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let bash = |id: &str, command: &str, extra: Value| {
        let mut args = serde_json::json!({"command": command, "description": "probe"});
        if let (Some(a), Some(e)) = (args.as_object_mut(), extra.as_object()) {
            a.extend(e.clone());
        }
        crate::common::call(id, "bash", args)
    };
    let server = MockServer::with_replies([
        bash(
            "call_1",
            "hostname > where.txt; ls /sys/class/net > nets.txt; cat /proc/1/cmdline | tr '\\0' ' ' > init.txt; (touch .git/hooks/planted 2>/dev/null && echo wrote || echo refused) > hooks.txt; (cat /etc/shadow >/dev/null 2>&1 && test -s /etc/shadow && echo read || echo hidden) > shadow.txt; cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes > mem.txt 2>/dev/null; cat /sys/fs/cgroup/cpu.max /sys/fs/cgroup/cpu/cpu.cfs_quota_us > cpu.txt 2>/dev/null",
            serde_json::json!({}),
        ),
        Reply::text("probed"),
        bash("call_2", "sleep 30", serde_json::json!({"timeoutMs": 1000})),
        bash(
            "call_3",
            "ps -eo args | grep -c '^sleep 30' > sleeps.txt; hostname > where2.txt",
            serde_json::json!({}),
        ),
        Reply::text("timed out and checked"),
    ])
    .answer_untooled("Team test");
    let docker_worker = |owner: &str, extra: &[&str]| {
        let mut args = vec!["--until-idle", "--sandbox", "docker"];
        args.extend_from_slice(extra);
        let status = run.worker(&server, &team, owner, &args).wait().unwrap();
        let log = std::fs::read_to_string(run.worker_log(owner)).unwrap();
        assert!(status.success(), "worker {owner}: {log}");
        log
    };
    // A protected path of the sandbox (git hooks run later on the host) stays read-only.
    std::fs::create_dir_all(run.work.path().join(".git/hooks")).unwrap();
    let session = run.submit(&server, &team, None, "probe the sandbox");
    let log = docker_worker(
        "worker-a",
        &["--docker-memory", "64m", "--docker-cpus", "0.5"],
    );
    let read = |f: &str| {
        std::fs::read_to_string(run.work.path().join(f))
            .unwrap_or_else(|e| panic!("{f}: {e}; worker: {log}"))
            .trim()
            .to_string()
    };
    // The command ran in a container (its hostname is the container's id), wrote the
    // workspace, and had no network but loopback.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let first = read("where.txt");
    assert_ne!(first, host.trim());
    assert_eq!(read("nets.txt"), "lo");
    // The limits reached the container's cgroup (v2 or v1 spelling).
    assert_eq!(read("mem.txt"), (64u64 << 20).to_string());
    assert!(read("cpu.txt").starts_with("50000"), "{}", read("cpu.txt"));
    // Its first process (under docker's init) waits on the worker's lifeline.
    assert!(
        read("init.txt").contains("/run/dsh-lifeline/fifo"),
        "{}",
        read("init.txt")
    );
    let label = format!("label=dsh.session={session}");
    assert_eq!(
        docker_out(&["ps", "-aq", "--filter", &label]).trim(),
        "",
        "the container ended with the turn"
    );
    // A container a worker of this host left behind, with the labels the worker gives.
    let orphan = |labels: &[String]| {
        let name = format!("dsh-stale-{}", uuid::Uuid::new_v4().simple());
        let mut args = vec!["run", "-d", "--name", name.as_str()];
        for l in labels {
            args.extend(["--label", l.as_str()]);
        }
        args.extend([
            "-v",
            "/usr:/usr:ro",
            "-v",
            "/bin:/bin:ro",
            "-v",
            "/lib:/lib:ro",
            "-v",
            "/lib64:/lib64:ro",
            "dsh-host-root:1",
            "sleep",
            "infinity",
        ]);
        docker_out(&args);
        name
    };
    // A container an older lease left behind (a dead worker's) is removed at the next claim.
    let store_id = team.rt.block_on(team.store().store_id()).unwrap();
    let ours = format!("dsh.store={store_id}");
    let stale = orphan(&[
        format!("dsh.session={session}"),
        "dsh.epoch=0".to_string(),
        ours.clone(),
    ]);
    run.submit(&server, &team, Some(&session), "time a command out");
    docker_worker("worker-b", &[]);
    let all = docker_out(&["ps", "-a", "--format", "{{.Names}}"]);
    assert!(!all.lines().any(|n| n == stale), "{all}");
    // The timed-out command was stopped inside the container, which the next command shared.
    assert_eq!(read("sleeps.txt"), "0");
    let second = read("where2.txt");
    assert_ne!(second, first, "each lease has a container of its own");
    let stored = team.events(&session);
    let events = check_log(&stored);
    assert!(
        answers(&events)
            .join("\n")
            .contains("timed out and checked")
    );
    assert_eq!(docker_out(&["ps", "-aq", "--filter", &label]).trim(), "");
    // Containers whose lease is over (this session's turn ended; a session the store does not
    // know) are removed by any docker worker of the host when it starts, even one with nothing
    // to claim. A container without an epoch label is not one a worker made, and stays.
    let epoch = team
        .rt
        .block_on(team.store().session(&session))
        .unwrap()
        .lease_epoch;
    let ended = orphan(&[
        format!("dsh.session={session}"),
        format!("dsh.epoch={epoch}"),
        ours.clone(),
    ]);
    let unknown = orphan(&[
        "dsh.session=session-nobody-knows".to_string(),
        "dsh.epoch=1".to_string(),
        ours.clone(),
    ]);
    // Not ours to judge: no epoch, or another store's (whose workers share this host).
    let no_epoch = orphan(&[format!("dsh.session={session}"), ours.clone()]);
    let other_store = orphan(&[
        "dsh.session=session-nobody-knows".to_string(),
        "dsh.epoch=1".to_string(),
        "dsh.store=another-store".to_string(),
    ]);
    docker_worker("worker-c", &[]);
    let all = docker_out(&["ps", "-a", "--format", "{{.Names}}"]);
    docker_out(&["rm", "-f", &no_epoch, &other_store]);
    assert!(!all.lines().any(|n| n == ended || n == unknown), "{all}");
    assert!(all.lines().any(|n| n == no_epoch), "{all}");
    assert!(all.lines().any(|n| n == other_store), "{all}");
}

#[test]
fn a_killed_docker_workers_container_ends_with_it_when_no_worker_is_left() {
    if !docker_daemon() {
        return;
    }
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let server = MockServer::with_replies([crate::common::call(
        "call_long",
        "bash",
        serde_json::json!({"command": "echo up > started.txt; sleep 600", "description": "long", "timeoutMs": 600_000}),
    )])
    .answer_untooled("Team test");
    let session = run.submit(&server, &team, None, "run something long");
    let mut worker = run.worker(&server, &team, "worker-gone", &["--sandbox", "docker"]);
    wait_file(&run.work.path().join("started.txt"));
    let label = format!("label=dsh.session={session}");
    let running = docker_out(&["ps", "-q", "--filter", &label]);
    assert_eq!(running.lines().count(), 1, "the turn's container runs");
    // The worker and its turn die; no worker is left on this host to remove the container.
    kill_group(&worker, "KILL");
    let _ = worker.wait();
    let gone = poll(30, || {
        Some(()).filter(|()| {
            docker_out(&["ps", "-aq", "--filter", &label])
                .trim()
                .is_empty()
        })
    });
    if gone.is_none() {
        let left = docker_out(&["ps", "-aq", "--filter", &label]);
        let ids: Vec<&str> = left.split_whitespace().collect();
        let mut args = vec!["rm", "-f"];
        args.extend(ids);
        docker_out(&args);
        panic!("the container outlived its worker by 30 s");
    }
}

#[test]
fn a_client_moves_its_session_inside_the_workers_workspace_only() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let work = std::fs::canonicalize(run.work.path()).unwrap();
    let pwd = |id: &str, file: &str| {
        crate::common::call(
            id,
            "bash",
            serde_json::json!({"command": format!("pwd > {}/{file}", work.display()), "description": "where"}),
        )
    };
    let server = MockServer::with_replies([
        pwd("call_w1", "where1.txt"),
        Reply::text("moved"),
        pwd("call_w2", "where2.txt"),
        Reply::text("stayed"),
        pwd("call_w3", "where3.txt"),
        Reply::text("moved up"),
    ])
    .answer_untooled("Team test");
    std::fs::create_dir_all(work.join("sub/deeper")).unwrap();
    let gateway = run.gateway(&server, &team);
    let token = run.add_user(&server, &team, "ann");
    let mut worker = run.worker(&server, &team, "worker-cwd", &[]);
    let call = api(&team, &gateway, &token);
    let turns_ended = |id: &str, n: usize| turns_ended(&team, id, n);
    let read = |file: &str| {
        std::fs::read_to_string(work.join(file))
            .unwrap()
            .trim()
            .to_string()
    };
    let sub = work.join("sub").display().to_string();
    // Relative to the workspace for a new session.
    let (status, created) = call(
        reqwest::Method::POST,
        "/v1/sessions",
        Some(serde_json::json!({"text": "work in sub", "cwd": "sub"})),
    );
    assert_eq!(status, 201, "{created}");
    let id = created["sessionId"].as_str().unwrap().to_string();
    turns_ended(&id, 1);
    assert_eq!(read("where1.txt"), sub);
    let (_, shown) = call(reqwest::Method::GET, &format!("/v1/sessions/{id}"), None);
    assert_eq!(shown["cwd"], sub.as_str(), "{shown}");
    // Outside the workspace: the session stays, and the model is told.
    let messages = format!("/v1/sessions/{id}/messages");
    let outside = serde_json::json!({"text": "try /etc", "cwd": "/etc"});
    assert_eq!(call(reqwest::Method::POST, &messages, Some(outside)).0, 202);
    turns_ended(&id, 2);
    assert_eq!(read("where2.txt"), sub);
    let log: String = check_log(&team.events(&id))
        .iter()
        .map(|e| e.data.as_value().to_string())
        .collect();
    assert!(
        log.contains("not an existing directory inside the"),
        "{log}"
    );
    // Against the current directory, with `dsh team submit --cwd`.
    run.submit_with(&server, &team, &id, &["--cwd", "deeper"], "go deeper");
    turns_ended(&id, 3);
    assert_eq!(read("where3.txt"), format!("{sub}/deeper"));
    let (status, refused) = call(
        reqwest::Method::POST,
        &messages,
        Some(serde_json::json!({"text": "x", "cwd": ""})),
    );
    assert_eq!(status, 400, "{refused}");
    kill_group(&worker, "KILL");
    let _ = worker.wait();
}

#[test]
fn a_prompt_longer_than_an_argument_may_be_runs_once() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let server =
        MockServer::with_replies([Reply::text("read it all")]).answer_untooled("Team test");
    let gateway = run.gateway(&server, &team);
    let token = run.add_user(&server, &team, "ann");
    let mut worker = run.worker(&server, &team, "worker-long", &[]);
    // Over Linux's 128 KiB for one argument of a command.
    let text = format!("{} the end", "long line of a pasted log\n".repeat(12_000));
    assert!(text.len() > 300_000);
    let call = api(&team, &gateway, &token);
    let (status, created) = call(
        reqwest::Method::POST,
        "/v1/sessions",
        Some(serde_json::json!({ "text": text })),
    );
    assert_eq!(status, 201, "{created}");
    let id = created["sessionId"].as_str().unwrap();
    team.wait_for_or(
        id,
        "the long prompt's turn",
        |e| e.iter().any(|e| e.kind == "turn/end"),
        || std::fs::read_to_string(run.worker_log("worker-long")).unwrap_or_default(),
    );
    assert_eq!(team.pending(id), 0);
    let sent = serde_json::to_string(&turn_request(&server).messages()).unwrap();
    let escaped = serde_json::to_string(&text).unwrap();
    assert!(
        sent.contains(&escaped[1..escaped.len() - 1]),
        "the whole text"
    );
    kill_group(&worker, "KILL");
    let _ = worker.wait();
}

/// A new session whose input no worker can read (a route of the wrong shape, written past
/// the gateway's checks); its id.
fn stuck_input(run: &Run, server: &MockServer, team: &Team) -> String {
    let stuck = run.submit(server, team, None, "never runs");
    team.rt
        .block_on(team.store().execute_batch(&format!(
            "UPDATE dsh_inbox SET body = '{{\"text\": \"x\", \"route\": {{\"provider\": 5}}}}' WHERE session_id = '{stuck}'"
        )))
        .unwrap();
    stuck
}

#[test]
fn an_input_that_cannot_run_backs_off_and_holds_up_no_other_session() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let server =
        MockServer::with_replies([Reply::text("the other one ran")]).answer_untooled("Team test");
    // Queued first: input no worker can read.
    let stuck = stuck_input(&run, &server, &team);
    let other = run.submit(&server, &team, None, "run me");
    let mut worker = run.worker(&server, &team, "worker-stuck", &[]);
    let log = || std::fs::read_to_string(run.worker_log("worker-stuck")).unwrap_or_default();
    team.wait_for_or(
        &other,
        "the other session's turn",
        |e| e.iter().any(|e| e.kind == "turn/end"),
        log,
    );
    // The stuck input waits, longer after each failure, and is kept.
    let show = || -> Value {
        let out = run
            .team(&server, &team, &["team", "show", &stuck])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let shown = poll(30, || {
        Some(show()).filter(|s| s["failedTurns"].as_i64() >= Some(2))
    })
    .unwrap_or_else(|| panic!("no second failure: {}", show()));
    assert_eq!(shown["pendingInput"], 1, "{shown}");
    assert!(log().contains("invalid route"), "{}", log());
    kill_group(&worker, "KILL");
    let _ = worker.wait();
}

#[test]
fn until_idle_ends_naming_input_that_cannot_run_once_the_rest_has_run() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let server = MockServer::with_replies([Reply::text("the runnable one ran")])
        .answer_untooled("Team test");
    // Input no worker can read, queued before one that runs.
    let stuck = stuck_input(&run, &server, &team);
    let other = run.submit(&server, &team, None, "run me");
    let mut worker = run.worker(&server, &team, "worker-until-idle", &["--until-idle"]);
    let status = poll(60, || worker.try_wait().unwrap());
    let log = std::fs::read_to_string(run.worker_log("worker-until-idle")).unwrap();
    let status = status.unwrap_or_else(|| panic!("--until-idle never ended: {log}"));
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains(&format!("{stuck} (3 failed turns)")) && log.contains("still waiting"),
        "{log}"
    );
    turns_ended(&team, &other, 1);
    assert_eq!(team.pending(&stuck), 1, "the stuck input is kept");
}

#[test]
fn input_starting_with_a_slash_reaches_the_model_once_as_the_sdk_sends_it() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let server =
        MockServer::with_replies([Reply::text("read as a message")]).answer_untooled("Team test");
    let session = run.submit(&server, &team, None, "/no-such-command please");
    // Until idle: the input is consumed once, not run again and again.
    let mut worker = run.worker(&server, &team, "worker-slash", &["--until-idle"]);
    let Some(status) = poll(60, || worker.try_wait().unwrap()) else {
        kill_group(&worker, "KILL");
        let _ = worker.wait();
        panic!(
            "the worker never went idle: {}",
            std::fs::read_to_string(run.worker_log("worker-slash")).unwrap()
        );
    };
    assert!(status.success());
    assert_eq!(team.pending(&session), 0);
    let events = check_log(&team.events(&session));
    assert!(answers(&events).join("\n").contains("read as a message"));
    let asked = turn_models(&server);
    assert_eq!(asked.len(), 1);
    let sent = serde_json::to_string(&turn_request(&server).messages()).unwrap();
    assert!(sent.contains("/no-such-command please"), "{sent}");
}

#[test]
fn seeded_random_faults_keep_every_sessions_log_whole() {
    let Some(team) = Team::new() else { return };
    let seed = crate::common::seed_from("DSH_TEST_SEED");
    // Printed first, so a failing run can be replayed with DSH_TEST_SEED.
    eprintln!("seeded_random_faults: DSH_TEST_SEED={seed}");
    let mut rng = crate::common::Rng::new(seed);
    const STEPS: usize = 3;
    let run = Run::new();
    let proxy = Proxy::start(team.upstream());
    // Each conversation is answered from itself: STEPS bash calls per input, then a text.
    let server = MockServer::start()
        .answer_untooled("Team test")
        .respond_with(|r| {
            let messages = r.raw_messages();
            let blocks = |m: &Value, kind: &str| {
                m["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| b["type"] == kind)
                    .count()
            };
            let calls: usize = messages.iter().map(|m| blocks(m, "tool_use")).sum();
            let inputs = messages
                .iter()
                .filter(|m| m["role"] == "user" && blocks(m, "tool_result") == 0)
                .count();
            if calls < inputs * STEPS {
                crate::common::call(
                    &format!("call_{calls}"),
                    "bash",
                    serde_json::json!({"command": format!("sleep 0.2; echo step-{calls}"), "description": "step"}),
                )
            } else {
                Reply::text(format!("done with input {inputs}"))
            }
        });
    let via = team.via(&proxy);
    let spawn = |owner: &str, extra: &[&str]| {
        let mut args = vec![
            "worker",
            "--owner",
            owner,
            "--lease-ttl-ms",
            "1500",
            "--poll-ms",
            "50",
        ];
        args.extend_from_slice(extra);
        let mut c = run.team(&server, &team, &args);
        c.env("DSH_STORAGE", &via);
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        c.stdout(Stdio::null())
            .stderr(std::fs::File::create(run.worker_log(owner)).unwrap());
        Worker(c.spawn().unwrap())
    };
    let sessions: Vec<String> = (0..3)
        .map(|i| run.submit(&server, &team, None, &format!("task {i}")))
        .collect();
    let mut inputs: HashMap<String, usize> = sessions.iter().map(|s| (s.clone(), 1)).collect();
    let mut workers: Vec<Worker> = Vec::new();
    let mut spawned = 0;
    let mut next_worker = |workers: &mut Vec<Worker>| {
        spawned += 1;
        workers.push(spawn(&format!("worker-{spawned}"), &[]));
    };
    next_worker(&mut workers);
    next_worker(&mut workers);
    let mut faults = Vec::new();
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(300 + rng.below(500)));
        // New input now and then, so sessions keep running while faults land.
        if rng.below(3) == 0 {
            let s = &sessions[rng.below(sessions.len() as u64) as usize];
            run.submit(&server, &team, Some(s), "more");
            *inputs.get_mut(s).unwrap() += 1;
        }
        let victim = rng.below(workers.len() as u64) as usize;
        match rng.below(4) {
            0 => {
                faults.push("SIGKILL a worker and its turn");
                kill_group(&workers[victim], "KILL");
                let _ = workers.remove(victim).wait();
                next_worker(&mut workers);
            }
            1 => {
                faults.push("SIGSTOP a worker past its lease, then SIGCONT");
                kill_group(&workers[victim], "STOP");
                std::thread::sleep(Duration::from_millis(1500 + rng.below(1000)));
                kill_group(&workers[victim], "CONT");
            }
            2 => {
                faults.push("reset every store connection");
                proxy.reset();
            }
            _ => {
                faults.push("blackhole the store");
                proxy.blackhole(true);
                std::thread::sleep(Duration::from_millis(200 + rng.below(2000)));
                proxy.blackhole(false);
            }
        }
    }
    // Faults over: the workers go, then one last input each, which no killed worker can
    // have started; a drain runs them (closing first any turn a fault cut short).
    for w in &mut workers {
        kill_group(w, "KILL");
        let _ = w.wait();
    }
    for s in &sessions {
        run.submit(&server, &team, Some(s), "last");
        *inputs.get_mut(s).unwrap() += 1;
    }
    // A lease a killed worker held must expire before a drain can take its session.
    std::thread::sleep(Duration::from_millis(1600));
    let drain = spawn("drain", &["--until-idle"]).wait().unwrap();
    let log = std::fs::read_to_string(run.worker_log("drain")).unwrap();
    assert!(drain.success(), "seed {seed}, faults {faults:?}: {log}");
    for s in &sessions {
        let stored = team.events(s);
        let events = check_log(&stored);
        let context = format!("seed {seed}, session {s}, faults {faults:?}");
        assert_eq!(team.pending(s), 0, "{context}");
        // Every input recorded exactly once, and every call closed exactly once.
        let prompts = events
            .iter()
            .filter(|e| {
                e.is(types::USER_MESSAGE)
                    && e.data.as_value().pointer("/source/kind") == Some(&Value::from("user"))
            })
            .count();
        assert_eq!(prompts, inputs[s], "{context}");
        let calls: Vec<String> = events
            .iter()
            .filter(|e| e.is(types::TOOL_CALL))
            .filter_map(|e| {
                e.data
                    .as_value()
                    .pointer("/callId")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .collect();
        let closed: Vec<String> = events
            .iter()
            .filter(|e| e.is(types::TOOL_RESULT))
            .filter_map(|e| {
                e.data
                    .as_value()
                    .pointer("/message/source/callId")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .collect();
        for call in &calls {
            assert!(closed.contains(call), "call {call} never closed: {context}");
        }
        // The last turn, run with no fault, completed.
        let last_end = events
            .iter()
            .rev()
            .find(|e| e.is(types::TURN_END))
            .map(|e| e.data.as_value()["reason"]["kind"].clone());
        assert_eq!(last_end, Some(Value::from("completed")), "{context}");
    }
}

#[test]
fn the_team_page_signs_in_starts_a_session_and_follows_it_live() {
    let Some(team) = Team::new() else { return };
    let Some(b) = crate::browser::browser("the team page") else {
        return;
    };
    let run = Run::new();
    let server = MockServer::with_replies([
        crate::common::call(
            "call_1",
            "bash",
            serde_json::json!({"command": "echo from-the-page", "description": "greet"}),
        ),
        Reply::text("page answer <b>not bold</b>"),
        Reply::text("second page answer"),
        // Outside the read-only sandbox: the page is asked first.
        crate::common::call(
            "call_2",
            "bash",
            serde_json::json!({"command": "echo approved > approved.txt", "description": "write",
                               "sandbox_permissions": "danger-full-access", "justification": "the page test"}),
        ),
        Reply::text("third page answer"),
    ])
    .answer_untooled("Page session");
    let mut add = run.team(
        &server,
        &team,
        &["team", "user", "add", "pat", "--password-stdin"],
    );
    add.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = add.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"pat's password\n").unwrap();
    assert!(child.wait_with_output().unwrap().status.success());
    let gateway = run.gateway(&server, &team);
    let mut worker = run.worker_env(
        &server,
        &team,
        "page-worker",
        &[],
        &[("DSH_PERMISSION_MODE", "read-only")],
    );
    let wait = |predicate: &str| {
        b.wait_for(predicate, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{e}"))
    };
    b.goto(&format!("{}/", gateway.url)).unwrap();
    wait("!document.getElementById('signin').hidden");
    b.type_text("#user", "pat").unwrap();
    b.type_text("#password", "wrong password").unwrap();
    b.click("#password-form button").unwrap();
    wait(
        "document.getElementById('signin-error').textContent.includes('wrong account name or password')",
    );
    b.clear("#password").unwrap();
    b.type_text("#password", "pat's password").unwrap();
    b.click("#password-form button").unwrap();
    wait("!document.getElementById('app').hidden");
    b.type_text("#new-text", "a task from the page").unwrap();
    b.click("#new-form button").unwrap();
    // The worker runs it; the page follows the stored events live.
    let log =
        "Array.from(document.querySelectorAll('#log li')).map(l => l.textContent).join('\\n')";
    wait(&format!("({log}).includes('page answer')"));
    let text = b.eval(&format!("return {log};"), vec![]).unwrap();
    let text = text.as_str().unwrap();
    assert!(text.contains("a task from the page"), "{text}");
    assert!(text.contains("echo from-the-page"), "{text}");
    assert!(
        text.contains("from-the-page\n") || text.contains("from-the-page"),
        "{text}"
    );
    // Model text is shown as text, never as markup.
    assert!(text.contains("<b>not bold</b>"), "{text}");
    assert_eq!(
        b.eval("return document.querySelectorAll('#log b').length;", vec![])
            .unwrap(),
        0
    );
    wait("document.getElementById('session-title').textContent === 'Page session'");
    // The next message goes to the same session.
    b.type_text("#message-text", "and once more").unwrap();
    b.click("#message-form button[type=submit]").unwrap();
    wait(&format!("({log}).includes('second page answer')"));
    // A call that needs approval waits for the page's answer.
    b.type_text("#message-text", "write the file").unwrap();
    b.click("#message-form button[type=submit]").unwrap();
    wait("document.querySelector('#log li.approval button[data-outcome=allowed-once]') !== null");
    let asked = b
        .eval(
            "return document.querySelector('#log li.approval').textContent;",
            vec![],
        )
        .unwrap();
    assert!(
        asked.as_str().unwrap().contains("danger-full-access"),
        "{asked}"
    );
    let _ = b.screenshot(&crate::browser::shots_dir().join("team-page-approval.png"));
    b.click("#log li.approval button[data-outcome=allowed-once]")
        .unwrap();
    wait(&format!("({log}).includes('third page answer')"));
    wait("document.querySelector('#log li.approval').textContent.includes('(allowed-once)')");
    assert!(run.work.path().join("approved.txt").exists());
    let _ = b.screenshot(&crate::browser::shots_dir().join("team-page.png"));
    // The session list shows it with its title and turns.
    wait("document.getElementById('sessions').textContent.includes('Page session')");
    // Signing out ends the sign-in token.
    b.click("#signout").unwrap();
    wait("!document.getElementById('signin').hidden");
    kill_group(&worker, "KILL");
    let _ = worker.wait();
    let sessions = team.rt.block_on(team.store().sessions(None, 10)).unwrap();
    assert_eq!(sessions.len(), 1);
    check_log(&team.events(&sessions[0].id));
}

#[test]
fn model_text_reaches_a_gateway_client_while_the_model_is_still_answering() {
    let Some(team) = Team::new() else { return };
    let Some(nats) = nats() else { return };
    let run = Run::new();
    let gate = Gate::new();
    // The answer's first text deltas ("fir", "st ": the mock streams three characters at a
    // time) go out, then the stream holds until the gate opens.
    let server = MockServer::with_replies([
        Reply::text("first words of a held answer").hold_after_event(2, &gate)
    ])
    .answer_untooled("Team test");
    // PostgreSQL is looked at only every ten minutes: what arrives comes over NATS.
    let (ann, gateway, mut worker) = run.over_nats(&server, &team, &nats);
    let client = reqwest::Client::new();
    let created = team.rt.block_on(post_json(
        &client,
        &format!("{}/v1/sessions", gateway.url),
        &ann,
        "say something",
    ));
    let id = created["sessionId"].as_str().unwrap().to_string();
    let url = format!("{}/v1/sessions/{id}/events", gateway.url);
    let chunk_with_text = |got: &[Sse]| {
        got.iter()
            .any(|(_, d)| d.contains("\"type\":\"assistant/chunk\"") && d.contains("fir"))
    };
    let resp = team.rt.block_on(open_events(&url, &ann, None));
    let early = team.rt.block_on(collect_events(resp, chunk_with_text));
    assert!(
        !early
            .iter()
            .any(|(_, d)| d.contains("\"type\":\"assistant/message\"")),
        "the text came before the answer was complete: {early:?}"
    );
    assert!(!gate.is_open());
    gate.open();
    let last = early.last().unwrap().0;
    let rest = team.rt.block_on(read_events(&url, &ann, Some(last), |got| {
        got.iter().any(|(_, d)| d.contains("\"type\":\"turn/end\""))
    }));
    let all: Vec<Sse> = early.into_iter().chain(rest).collect();
    let stored: Vec<Sse> = team
        .events(&id)
        .into_iter()
        .map(|e| (e.seq, e.data))
        .collect();
    assert_eq!(all, stored[..all.len()].to_vec());
    kill_group(&worker, "KILL");
    let _ = worker.wait();
}

/// The model and output limit of each model request `server` got with tools (the turns'
/// own requests, not titles).
fn turn_models(server: &MockServer) -> Vec<(String, Option<u64>)> {
    server
        .requests()
        .iter()
        .map(|r| r.chat_body())
        .filter(|b| b.get("tools").is_some())
        .map(|b| {
            let limit = b
                .get("max_tokens")
                .or_else(|| b.get("max_completion_tokens"))
                .and_then(Value::as_u64);
            (b["model"].as_str().unwrap_or_default().to_string(), limit)
        })
        .collect()
}

/// Requests to a gateway as one account: each answers its status and JSON body (`Null` when
/// it has none).
fn api<'a>(
    team: &'a Team,
    gateway: &'a Gateway,
    token: &'a str,
) -> impl Fn(reqwest::Method, &str, Option<Value>) -> (u16, Value) + 'a {
    let client = reqwest::Client::new();
    move |method, path, body| {
        team.rt.block_on(async {
            let mut req = client
                .request(method, format!("{}{path}", gateway.url))
                .bearer_auth(token);
            if let Some(body) = body {
                req = req.json(&body);
            }
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json().await.unwrap_or(Value::Null))
        })
    }
}

/// Waits until `n` turns of session `id` ended.
fn turns_ended(team: &Team, id: &str, n: usize) {
    team.wait_for(id, &format!("{n} turns of {id}"), |e| {
        e.iter().filter(|e| e.kind == "turn/end").count() == n
    });
}

impl Run {
    /// `dsh team submit --session <session> <flags…> <text>`, which must succeed.
    fn submit_with(
        &self,
        server: &MockServer,
        team: &Team,
        session: &str,
        flags: &[&str],
        text: &str,
    ) {
        let mut args = vec!["team", "submit", "--session", session];
        args.extend_from_slice(flags);
        args.push(text);
        let out = self.team(server, team, &args).output().unwrap();
        assert!(out.status.success(), "{}", crate::common::stderr(&out));
    }
}

/// The first model request `server` got with tools (a turn's, not a title's).
fn turn_request(server: &MockServer) -> dsh_test_support::mock_server::RecordedRequest {
    server
        .requests()
        .into_iter()
        .find(|r| r.chat_body().get("tools").is_some())
        .expect("a turn asked the model")
}

/// `check()` every 50 ms until it gives a value or `secs` seconds passed (then `None`).
fn poll<T>(secs: u64, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Settings giving the worker an OpenAI-compatible route `local` (models `team-model` and
/// `other-model`) on the mock, beside the DeepSeek default.
fn local_route(run: &Run, server: &MockServer) {
    run.settings(&format!(
        "openai-compatible:\n  providers:\n    local:\n      baseURL: {}\n      models:\n        - id: team-model\n        - id: other-model\n",
        server.url()
    ));
}

#[test]
fn a_client_chooses_its_sessions_model_and_later_input_keeps_it() {
    let Some(team) = Team::new() else { return };
    let run = Run::new();
    let server = MockServer::with_replies([
        Reply::text("one"),
        Reply::text("two"),
        Reply::text("three"),
        Reply::text("four"),
        Reply::text("five"),
    ])
    .answer_untooled("Team test");
    local_route(&run, &server);
    let gateway = run.gateway(&server, &team);
    let token = run.add_user(&server, &team, "ann");
    let mut worker = run.worker(&server, &team, "worker-route", &[]);
    let call = api(&team, &gateway, &token);
    let post = |path: &str, body: Value| call(reqwest::Method::POST, path, Some(body));
    let turns_ended = |id: &str, n: usize| turns_ended(&team, id, n);
    // The first input names the model and a limit; the next names none and keeps them; the
    // third names another model.
    let (status, created) = post(
        "/v1/sessions",
        serde_json::json!({"text": "first", "provider": "local", "model": "team-model", "maxTokens": 77}),
    );
    assert_eq!(status, 201, "{created}");
    let id = created["sessionId"].as_str().unwrap().to_string();
    turns_ended(&id, 1);
    let path = format!("/v1/sessions/{id}/messages");
    assert_eq!(post(&path, serde_json::json!({"text": "second"})).0, 202);
    turns_ended(&id, 2);
    let third = serde_json::json!({"text": "third", "provider": "local", "model": "other-model"});
    assert_eq!(post(&path, third).0, 202);
    turns_ended(&id, 3);
    // A session that never named one runs on the worker's default; `dsh team submit` names
    // one the same way.
    let (_, plain) = post("/v1/sessions", serde_json::json!({"text": "fourth"}));
    let plain = plain["sessionId"].as_str().unwrap().to_string();
    turns_ended(&plain, 1);
    run.submit_with(
        &server,
        &team,
        &plain,
        &["--provider", "local", "--model", "team-model"],
        "fifth",
    );
    turns_ended(&plain, 2);
    let models = turn_models(&server);
    assert_eq!(models.len(), 5, "{models:?}");
    let names: Vec<&str> = models.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "team-model",
            "team-model",
            "other-model",
            "deepseek-flash",
            "team-model"
        ],
        "{models:?}"
    );
    // The limit goes with the route that named it; another route has the adapter's own.
    let limits: Vec<bool> = models.iter().map(|m| m.1 == Some(77)).collect();
    assert_eq!(limits, [true, true, false, false, false], "{models:?}");
    // The answers are the session's, recorded as on one machine.
    let said = answers(&check_log(&team.events(&id))).join("\n");
    let at = |word: &str| {
        said.find(word)
            .unwrap_or_else(|| panic!("no {word}: {said}"))
    };
    assert!(at("one") < at("two") && at("two") < at("three"), "{said}");
    check_log(&team.events(&plain));
    // A provider the workers do not configure fails its turn, recorded, and is not retried.
    let (_, unknown) = post(
        "/v1/sessions",
        serde_json::json!({"text": "sixth", "provider": "nowhere", "model": "m"}),
    );
    let unknown = unknown["sessionId"].as_str().unwrap().to_string();
    turns_ended(&unknown, 1);
    let failed = check_log(&team.events(&unknown));
    let text: String = failed
        .iter()
        .map(|e| e.data.as_value().to_string())
        .collect();
    assert!(text.contains("nowhere"), "{text}");
    assert_eq!(team.pending(&unknown), 0);
    assert_eq!(turn_models(&server).len(), 5);
    // A route is both names or none, and well formed.
    for (body, why) in [
        (serde_json::json!({"text": "x", "model": "m"}), "together"),
        (
            serde_json::json!({"text": "x", "provider": "local", "model": "m", "maxTokens": 0}),
            "maxTokens",
        ),
        (
            serde_json::json!({"text": "x", "provider": "", "model": "m"}),
            "provider",
        ),
    ] {
        let (status, refused) = post("/v1/sessions", body);
        assert_eq!(status, 400, "{refused}");
        assert!(
            refused["error"].as_str().unwrap().contains(why),
            "{refused}"
        );
    }
    let out = run
        .team(&server, &team, &["team", "submit", "--model", "m", "x"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        crate::common::stderr(&out).contains("together"),
        "{}",
        crate::common::stderr(&out)
    );
    kill_group(&worker, "KILL");
    let _ = worker.wait();
}
