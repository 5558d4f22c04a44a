//! Code Mode against native tool steps, whole process (`dsh --profile headless`) against
//! the mock LLM on loopback (run with `cargo bench -p dsh-cli --bench code_mode`). The same
//! 20 `read`s, once as 20 native tool steps and once from one `run_code` program: wall
//! time, model requests and request bytes. Prints a table; asserts only that both runs
//! read every file, never timings.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::process::Command;
use std::time::{Duration, Instant};

use dsh_test_support::mock_server::{MockServer, Reply};
use serde_json::json;

const FILES: usize = 20;
const ROUNDS: usize = 3;

struct Sample {
    wall: Duration,
    requests: usize,
    request_bytes: usize,
}

fn run(mode: &str) -> Sample {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    for i in 0..FILES {
        let body: String = (0..40).map(|l| format!("file {i} line {l}\n")).collect();
        std::fs::write(work.path().join(format!("f{i}.txt")), body).unwrap();
    }
    let server = MockServer::start().answer_untooled("Bench title");
    if mode == "code" {
        let code = format!(
            "const out = [];\nfor (let i = 0; i < {FILES}; i++) {{\n  const r = await tools.read({{file_path: `f${{i}}.txt`}});\n  out.push(r.lines[0].text);\n}}\nreturn out.length;"
        );
        let args = json!({"code": code, "description": "Read every file"});
        server.push(Reply::tool_call("c1", "run_code", &args.to_string()));
    } else {
        for i in 0..FILES {
            let args = json!({"file_path": format!("f{i}.txt")});
            server.push(Reply::tool_call(
                &format!("r{i}"),
                "read",
                &args.to_string(),
            ));
        }
    }
    server.push(Reply::text("done"));
    let t0 = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("DSH_HOME", home.path().join(".dsh"))
        .env("DEEPSEEK_API_KEY", "sk-bench")
        .env("DEEPSEEK_BASE_URL", server.url())
        .env("DSH_TOOLS_MODE", mode)
        .current_dir(work.path())
        .args(["--profile", "headless", "read every file"])
        .output()
        .unwrap();
    let wall = t0.elapsed();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .collect();
    let last = requests.last().unwrap();
    let tool_outputs = last
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .count();
    let expected = if mode == "code" { 1 } else { FILES };
    assert_eq!(tool_outputs, expected, "every read reached the model");
    Sample {
        wall,
        requests: requests.len(),
        request_bytes: requests.iter().map(|r| r.body.len()).sum(),
    }
}

fn main() {
    println!("{FILES} reads, best of {ROUNDS} whole-process runs");
    println!(
        "{:<8} {:>10} {:>10} {:>14}",
        "mode", "wall ms", "requests", "request bytes"
    );
    for mode in ["native", "code"] {
        let best = (0..ROUNDS)
            .map(|_| run(mode))
            .min_by_key(|s| s.wall)
            .unwrap();
        println!(
            "{:<8} {:>10.1} {:>10} {:>14}",
            mode,
            best.wall.as_secs_f64() * 1000.0,
            best.requests,
            best.request_bytes
        );
    }
}
