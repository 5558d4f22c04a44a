//! The tool list a provider receives, byte for byte: the `tools` of the first request of a
//! headless run in `native` and `both` mode (every native tool plus `run_code`), and in
//! `both` mode the system prompt's TypeScript declarations of each tool's arguments and
//! declared output, compared with `tests/golden/tool-schemas/`.
//! The typed tool layer must not change a byte of it; `DSH_BLESS=1` rewrites the files.
//! Descriptions are kept as their length and FNV-1a digest (the prose is in the sources;
//! a changed byte still shows, at the tool and property it belongs to).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use dsh_test_support::mock_server::{MockServer, Reply};

use common::Run;

/// The `tools` of the first request, and its system text.
fn first_request(mode: &str) -> (String, String) {
    let run = Run::new();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::text("done"));
    let out = run
        .base(&server)
        .env("DSH_TOOLS_MODE", mode)
        .args(["--profile", "headless", "list the tools"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let request = server
        .requests()
        .into_iter()
        .find(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .expect("a request with tools");
    let body = request.json.as_ref().unwrap();
    let mut tools = body["tools"].clone();
    digest_descriptions(&mut tools);
    let mut text = serde_json::to_string_pretty(&tools).unwrap();
    // The system text: a top-level `system` (string or text blocks), or system messages.
    let texts = |v: &serde_json::Value| -> String {
        match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(blocks) => {
                blocks.iter().filter_map(|b| b["text"].as_str()).collect()
            }
            _ => String::new(),
        }
    };
    let mut system = texts(&body["system"]);
    for m in body["messages"].as_array().into_iter().flatten() {
        if m["role"] == "system" {
            system.push_str(&texts(&m["content"]));
        }
    }
    for (dir, mask) in [(run.work.path(), "<work>"), (run.home.path(), "<home>")] {
        text = text.replace(&dir.display().to_string(), mask);
        system = system.replace(&dir.display().to_string(), mask);
    }
    (text + "\n", system)
}

/// `text` as its length and 64-bit FNV-1a digest.
fn digest(text: &str) -> String {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("<{} chars, fnv1a {hash:016x}>", text.chars().count())
}

/// Every `description` string in a schema tree, digested.
fn digest_descriptions(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match x {
                    serde_json::Value::String(s) if k == "description" => *s = digest(s),
                    _ => digest_descriptions(x),
                }
            }
        }
        serde_json::Value::Array(list) => list.iter_mut().for_each(digest_descriptions),
        _ => {}
    }
}

/// Every `/** … */` doc comment of the declarations, digested.
fn digest_doc_comments(ts: &str) -> String {
    let mut out = String::new();
    let mut rest = ts;
    while let Some(start) = rest.find("/**") {
        let Some(len) = rest[start..].find("*/") else {
            break;
        };
        out.push_str(&rest[..start + 3]);
        out.push(' ');
        out.push_str(&digest(rest[start + 3..start + len].trim()));
        out.push_str(" */");
        rest = &rest[start + len + 2..];
    }
    out + rest
}

/// Each tool's entry of the two interfaces as its name and the digest of its type (the
/// shapes are pinned by the output-schema unit tests; here a change shows per tool).
fn digest_entries(ts: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut entry: Option<(String, String)> = None;
    let flush = |entry: &mut Option<(String, String)>, out: &mut Vec<String>| {
        if let Some((name, body)) = entry.take() {
            out.push(format!("  {name}: {}", digest(&body)));
        }
    };
    for line in ts.lines() {
        let indent = line.len() - line.trim_start().len();
        let text = line.trim_start();
        // An entry's closing brace sits at its own indent (`} & Record<…>;`, `} | {`).
        let continues = indent > 2 || (indent == 2 && text.starts_with('}'));
        let starts_entry = indent == 2 && !text.starts_with("/**") && !continues;
        if starts_entry && let Some((name, body)) = text.split_once(": ") {
            flush(&mut entry, &mut out);
            entry = Some((name.to_string(), body.to_string()));
        } else if continues && let Some((_, body)) = entry.as_mut() {
            body.push('\n');
            body.push_str(line);
        } else {
            flush(&mut entry, &mut out);
            out.push(line.to_string());
        }
    }
    flush(&mut entry, &mut out);
    out.join("\n")
}

fn tools_sent(mode: &str) -> String {
    first_request(mode).0
}

fn snapshot(name: &str, got: &str) {
    let file = if name.ends_with("-sdk") {
        format!("{name}.ts")
    } else {
        format!("{name}.json")
    };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/tool-schemas")
        .join(file);
    if std::env::var_os("DSH_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "no snapshot {}; run the test with DSH_BLESS=1 to write it",
            path.display()
        )
    });
    // Not pretty_assertions: a mismatch names the first differing line, not a 3,000-line diff.
    if got != want {
        let line = got
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| got.lines().count().min(want.lines().count()));
        panic!(
            "tool schemas {name} differ from {} at line {}:\n got: {:?}\nwant: {:?}",
            path.display(),
            line + 1,
            got.lines().nth(line),
            want.lines().nth(line)
        );
    }
}

#[test]
fn native_tool_schemas_are_unchanged() {
    snapshot("headless-native", &tools_sent("native"));
}

#[test]
fn code_mode_tool_schemas_are_unchanged() {
    let (tools, system) = first_request("both");
    snapshot("headless-both", &tools);
    // The TypeScript declarations of every tool's arguments and declared output.
    let start = system
        .find("interface ToolArgsMap")
        .expect("the code-mode declarations in the system prompt");
    let outputs = start
        + system[start..]
            .find("interface ToolOutputMap")
            .expect("ToolOutputMap");
    let end = outputs + system[outputs..].find("\n}").expect("its end") + 2;
    let declarations = digest_entries(&digest_doc_comments(&system[start..end]));
    snapshot("headless-both-sdk", &format!("{declarations}\n"));
}
