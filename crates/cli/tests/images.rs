//! Images end to end: the `dsh` binary (headless, the default composition with its
//! attachment store) on an image-capable DeepSeek route, driven by a scripted model on
//! loopback. The model reads a PNG with `read_image`; the store keeps the bytes, the log
//! keeps a reference, and the next request carries the image as a chat-completions data
//! URL. On a text-only route the same call is refused and no image enters the log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Output};

use dsh_session::types;
use dsh_test_support::mock_server::{MockServer, Reply};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::{Run, stderr};

fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A small PNG of `w`×`h` (header and chunk CRCs valid; pixel data not decoded).
fn png(w: u32, h: u32) -> Vec<u8> {
    png_with_payload(w, h, &[0x78, 0x9C, 0x63, 0, 0, 0, 1, 0, 1])
}

fn png_with_payload(w: u32, h: u32, idat: &[u8]) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut chunk = |kind: &[u8], body: &[u8]| {
        out.extend(u32::try_from(body.len()).unwrap().to_be_bytes());
        let mut crc_input = kind.to_vec();
        crc_input.extend(body);
        out.extend(&crc_input);
        out.extend(crc32(&crc_input).to_be_bytes());
    };
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend(h.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    chunk(b"IHDR", &ihdr);
    chunk(b"IDAT", idat);
    chunk(b"IEND", &[]);
    out
}

impl Run {
    /// A run whose default model is `model` (of the DeepSeek route).
    fn with_model(model: &str) -> Self {
        let run = Self::new();
        run.settings(&format!(
            "agent-default-model:\n  provider: deepseek-official\n  model: {model}\n"
        ));
        run
    }

    fn headless(&self, server: &MockServer, task: &str) -> Output {
        self.base(server)
            .args(["--profile", "headless", task])
            .output()
            .unwrap()
    }

    fn tool_results(&self) -> Vec<Value> {
        self.session()
            .iter()
            .filter(|e| e.is(types::TOOL_RESULT))
            .map(|e| e.data["message"]["content"][0].clone())
            .collect()
    }
}

/// The main-loop requests (title requests carry no tools).
fn model_requests(server: &MockServer) -> Vec<Value> {
    server
        .requests()
        .into_iter()
        .filter_map(|r| r.json)
        .filter(|j| j.get("tools").is_some())
        .collect()
}

#[test]
fn a_png_read_by_the_model_reaches_the_next_request_as_a_data_url() {
    let run = Run::with_model("deepseek-v4-flash-vision-exp");
    let bytes = png(3, 2);
    std::fs::write(run.work.path().join("shot.png"), &bytes).unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::tool_call(
        "c1",
        "read_image",
        &json!({"file_path": "shot.png"}).to_string(),
    ));
    server.push(Reply::text("a tiny picture"));
    let out = run.headless(&server, "look at shot.png");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let requests = model_requests(&server);
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let tools: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(tools.contains(&"read_image"), "{tools:?}");

    // The durable log holds a reference, never the bytes.
    let results = run.tool_results();
    let id = results[0]["content"][1]["attachment"]["attachmentId"]
        .as_str()
        .unwrap()
        .to_string();
    let digest = id.strip_prefix("sha256:").unwrap().to_string();
    assert_eq!(digest.len(), 64, "{id}");
    let content = results[0]["content"].as_array().unwrap();
    assert_eq!(
        content[0]["text"],
        json!(format!(
            "<path>{}/shot.png</path>\n<type>image</type>\n<content>\nimage/png image, 3x2 px, {} bytes\n</content>",
            run.work.path().canonicalize().unwrap().display(),
            bytes.len()
        ))
    );
    assert_eq!(
        content[1],
        json!({"type": "image", "attachment": {
            "attachmentId": id, "mediaType": "image/png", "bytes": bytes.len(),
            "width": 3, "height": 2, "name": "shot.png"
        }})
    );
    let stored = run
        .home
        .path()
        .join(".dsh/attachments/v1/objects")
        .join(&digest[..2])
        .join(&digest);
    assert_eq!(std::fs::read(stored).unwrap(), bytes);

    // The next request: the tool message keeps the text, the image follows as a data URL.
    let messages = requests[1]["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 2]["role"], "tool");
    assert!(
        messages[n - 2]["content"]
            .as_str()
            .unwrap()
            .ends_with(&format!("\nImage {id}; request image 3x2px.")),
        "{}",
        messages[n - 2]
    );
    let url = format!(
        "data:image/png;base64,{}",
        dsh_attachments::encode_base64(&bytes)
    );
    assert_eq!(
        messages[n - 1],
        json!({"role": "user", "content": [
            {"type": "text", "text": "Attached image(s) from tool result:"},
            {"type": "image_url", "image_url": {"url": url}},
        ]})
    );
}

#[test]
fn a_resumed_session_on_a_text_only_model_sees_its_images_as_text() {
    let run = Run::with_model("deepseek-v4-flash-vision-exp");
    std::fs::write(run.work.path().join("shot.png"), png(2, 2)).unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::tool_call(
        "c1",
        "read_image",
        &json!({"file_path": "shot.png"}).to_string(),
    ));
    server.push(Reply::text("seen"));
    let out = run.headless(&server, "look at shot.png");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = run.tool_results()[0]["content"][1]["attachment"]["attachmentId"]
        .as_str()
        .unwrap()
        .to_string();
    let session = run.only_session();

    // The same session continues on the text-only model.
    run.settings(
        "agent-default-model:\n  provider: deepseek-official\n  model: deepseek-v4-flash\n",
    );
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::text("still fine"));
    let out = run
        .base(&server)
        .args(["--profile", "headless", "--resume", &session, "and now?"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = model_requests(&server);
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert_eq!(requests[0]["model"], json!("deepseek-v4-flash"));
    let body = requests[0].to_string();
    assert!(!body.contains("image_url"), "{body}");
    let tool = requests[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    let digest = &id["sha256:".len().."sha256:".len() + 8];
    assert!(
        tool["content"].as_str().unwrap().ends_with(&format!(
            "[image omitted because this model accepts text only; attachment sha256:{digest}]"
        )),
        "{tool}"
    );
}

#[test]
fn a_text_only_route_refuses_read_image_and_keeps_the_log_text_clean() {
    let run = Run::with_model("deepseek-v4-flash");
    std::fs::write(run.work.path().join("shot.png"), png(1, 1)).unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::tool_call(
        "c1",
        "read_image",
        &json!({"file_path": "shot.png"}).to_string(),
    ));
    server.push(Reply::text("UNAVAILABLE"));
    let out = run.headless(&server, "look at shot.png");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = run.tool_results();
    assert_eq!(results[0]["isError"], json!(true));
    assert_eq!(
        results[0]["content"][0]["text"],
        json!(
            "Error: cannot read \"shot.png\" as an image: model \"deepseek-v4-flash\" does not declare image input; switch to an image-capable model to read images"
        )
    );
    assert!(!run.home.path().join(".dsh/attachments/v1/objects").exists());
}

#[test]
fn a_corrupt_png_is_refused_with_a_clear_error() {
    let run = Run::with_model("deepseek-v4-flash-vision-exp");
    let mut bytes = png(2, 2);
    bytes[20] ^= 1; // breaks the IHDR checksum
    std::fs::write(run.work.path().join("bad.png"), &bytes).unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::tool_call(
        "c1",
        "read_image",
        &json!({"file_path": "bad.png"}).to_string(),
    ));
    server.push(Reply::text("ok"));
    let out = run.headless(&server, "look at bad.png");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = run.tool_results();
    assert_eq!(results[0]["isError"], json!(true));
    let text = results[0]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("cannot read"), "{text}");
    assert!(text.contains("bad.png"), "{text}");
    let requests = model_requests(&server);
    assert!(
        !requests[1].to_string().contains("image_url"),
        "no image reaches the model"
    );
}

#[test]
fn oversized_images_are_refused_without_reading_them_whole() {
    let run = Run::with_model("deepseek-v4-flash-vision-exp");
    // Over the 4 MiB stored-image cap, under the 20 MiB read cap.
    let big = png_with_payload(64, 64, &vec![0u8; 5 * 1024 * 1024]);
    std::fs::write(run.work.path().join("big.png"), &big).unwrap();
    // Over the 20 MiB read cap: only the cap is read before the refusal.
    let huge = std::fs::File::create(run.work.path().join("huge.png")).unwrap();
    huge.set_len(64 * 1024 * 1024).unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::tool_call(
        "c1",
        "read_image",
        &json!({"file_path": "big.png"}).to_string(),
    ));
    server.push(Reply::tool_call(
        "c2",
        "read_image",
        &json!({"file_path": "huge.png"}).to_string(),
    ));
    server.push(Reply::text("too big"));
    let out = run.headless(&server, "look at the big images");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = run.tool_results();
    for (result, name) in results.iter().zip(["big.png", "huge.png"]) {
        assert_eq!(result["isError"], json!(true));
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(name), "{text}");
        assert!(
            text.ends_with("the image cannot be stored within the deployment's byte limits; downscale the image and read the smaller copy"),
            "{text}"
        );
    }
    assert!(!run.home.path().join(".dsh/attachments/v1/objects").exists());
}

#[test]
fn a_text_only_acp_route_neither_advertises_nor_accepts_prompt_images() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::with_replies([]).answer_untooled("T");
    let mut acp = Acp::start_with(
        &server,
        home.path(),
        work.path(),
        "image-text-route.cordis.yml",
    );
    let init = acp.call("initialize", json!({"protocolVersion": 1}));
    assert_eq!(
        init["result"]["agentCapabilities"]["promptCapabilities"]["image"],
        json!(false),
        "{init}"
    );
    let session = acp.call("session/new", json!({"cwd": work.path(), "mcpServers": []}));
    let sid = session["result"]["sessionId"].as_str().unwrap().to_string();
    let refused = acp.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [
            {"type": "text", "text": "see"},
            {"type": "image", "mimeType": "image/png", "data": dsh_attachments::encode_base64(&png(1, 1))},
        ]}),
    );
    assert_eq!(
        refused["error"],
        json!({"code": -32602, "message": "Invalid params: inline image prompts were not advertised by this connection"}),
        "{refused}"
    );
    assert!(model_requests(&server).is_empty());
}

/// `dsh acp` with upstream's image composition, against the mock DeepSeek endpoint.
struct Acp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    frames: std::sync::mpsc::Receiver<Value>,
    next_id: u64,
}

impl Acp {
    fn start(server: &MockServer, home: &std::path::Path, work: &std::path::Path) -> Self {
        Self::start_with(server, home, work, "image.cordis.yml")
    }

    fn start_with(
        server: &MockServer,
        home: &std::path::Path,
        work: &std::path::Path,
        composition: &str,
    ) -> Self {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .arg("acp")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("DSH_HOME", home.join(".dsh"))
            .env("DEEPSEEK_API_KEY", "sk-test")
            .env("DEEPSEEK_BASE_URL", server.url())
            .env("DSH_SNAPSHOT_CONFIG", composition)
            .current_dir(work)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, frames) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            frames,
            next_id: 0,
        }
    }

    /// Sends a request and returns its response (other frames are dropped).
    fn call(&mut self, method: &str, params: Value) -> Value {
        use std::io::Write;
        let id = self.next_id;
        self.next_id += 1;
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{frame}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let f = self
                .frames
                .recv_timeout(std::time::Duration::from_secs(20))
                .expect("a frame from dsh acp");
            if f.get("id") == Some(&json!(id)) && f.get("method").is_none() {
                return f;
            }
        }
    }
}

impl Drop for Acp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_acp_prompt_image_is_stored_and_sent_to_the_vision_model() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = MockServer::with_replies([Reply::text("DONE")]).answer_untooled("T");
    let mut acp = Acp::start(&server, home.path(), work.path());
    let init = acp.call("initialize", json!({"protocolVersion": 1}));
    assert_eq!(
        init["result"]["agentCapabilities"]["promptCapabilities"]["image"],
        json!(true),
        "{init}"
    );
    let session = acp.call("session/new", json!({"cwd": work.path(), "mcpServers": []}));
    let sid = session["result"]["sessionId"].as_str().unwrap().to_string();
    let bytes = png(4, 4);
    let data = dsh_attachments::encode_base64(&bytes);

    // A non-canonical payload is refused before anything is queued.
    let bad = acp.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [
            {"type": "image", "mimeType": "image/png", "data": format!("{data}\n")}
        ]}),
    );
    assert_eq!(
        bad["error"],
        json!({"code": -32602, "message": "Invalid params: image data must be canonical base64"}),
        "{bad}"
    );

    let done = acp.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [
            {"type": "text", "text": "What is this? "},
            {"type": "image", "mimeType": "image/png", "data": data},
        ]}),
    );
    assert_eq!(done["result"]["stopReason"], json!("end_turn"), "{done}");
    let requests = model_requests(&server);
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert_eq!(requests[0]["model"], json!("deepseek-v4-flash-vision-exp"));
    let user = requests[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user" && m["content"].is_array())
        .expect("a user message with parts")
        .clone();
    let parts = user["content"].as_array().unwrap();
    assert_eq!(parts[0], json!({"type": "text", "text": "What is this? "}));
    assert!(
        parts[1]["text"]
            .as_str()
            .unwrap()
            .ends_with("; request image 4x4px."),
        "{}",
        parts[1]
    );
    assert_eq!(
        parts[2],
        json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{data}")}})
    );
}
