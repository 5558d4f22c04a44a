//! Images end to end: the `dsh` binary (headless, the default composition with its
//! attachment store) on an image-capable DeepSeek route, driven by a scripted model on
//! loopback. The model reads a PNG with `read_image`; the store keeps the bytes, the log
//! keeps a reference, and the next request carries the image as a chat-completions data
//! URL. On a text-only route the same call is refused and no image enters the log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::png;

use std::process::{Command, Output};

use dsh_session::types;
use dsh_test_support::mock_server::{MockServer, Reply};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::{Run, stderr};
use png::{png, png_with_payload};

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    b << 16 | a
}

/// A decodable 8-bit RGB PNG of `w`×`h` whose pixels are `pixel(x, y)`, with its image
/// data in stored (uncompressed) deflate blocks.
pub(crate) fn rgb_png(w: u32, h: u32, pixel: impl Fn(u32, u32) -> [u8; 3]) -> Vec<u8> {
    let mut raw = Vec::with_capacity((w as usize * 3 + 1) * h as usize);
    for y in 0..h {
        raw.push(0);
        for x in 0..w {
            raw.extend(pixel(x, y));
        }
    }
    let mut zlib = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65_535).collect();
    for (i, block) in blocks.iter().enumerate() {
        zlib.push(u8::from(i + 1 == blocks.len()));
        let len = u16::try_from(block.len()).unwrap();
        zlib.extend(len.to_le_bytes());
        zlib.extend((!len).to_le_bytes());
        zlib.extend(*block);
    }
    zlib.extend(adler32(&raw).to_be_bytes());
    png_with_payload(w, h, &zlib)
}

/// The settings section that puts the DeepSeek route on chat completions.
pub(crate) const CHAT_ROUTE: &str = "llm-deepseek:\n  api: openai-completions\n";

/// What these tests add to [`Run`].
trait RunExt {
    fn with_model(model: &str) -> Self;
    fn headless(&self, server: &MockServer, task: &str) -> Output;
    fn tool_results(&self) -> Vec<Value>;
}

impl RunExt for Run {
    /// A run whose default model is `model` (of the DeepSeek route).
    ///
    /// These tests follow images through the chat-completions wire (`image_url` data URLs),
    /// so the DeepSeek route is put on chat completions; the default Messages route has its
    /// own test (`the_default_route_sends_a_read_image_inside_its_tool_result`).
    fn with_model(model: &str) -> Self {
        let run = Self::new();
        run.settings(&format!(
            "{CHAT_ROUTE}agent-default-model:\n  provider: deepseek-official\n  model: {model}\n"
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

/// A headless run in which the model reads `shot.png` (a 3×2 PNG, returned with the
/// server) with `read_image` as call `c1`, then answers "a tiny picture".
fn read_shot(run: &Run) -> (Vec<u8>, MockServer) {
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
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a tiny picture\n");
    (bytes, server)
}

#[test]
fn a_png_read_by_the_model_reaches_the_next_request_as_a_data_url() {
    let run = Run::with_model("deepseek-flash");
    let (bytes, server) = read_shot(&run);

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
    let run = Run::with_model("deepseek-flash");
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
    run.settings(&format!(
        "{CHAT_ROUTE}agent-default-model:\n  provider: deepseek-official\n  model: deepseek-v4-flash\n"
    ));
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
    let run = Run::with_model("deepseek-flash");
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
fn a_large_image_reaches_the_model_downscaled() {
    let run = Run::with_model("deepseek-flash");
    // About 7.8 MB: over the 4 MiB stored-image cap and the 2048 px long edge, under the
    // 20 MiB read cap.
    let big = rgb_png(2600, 1000, |x, y| [(x % 256) as u8, (y % 256) as u8, 128]);
    assert!(big.len() > 4 * 1024 * 1024);
    std::fs::write(run.work.path().join("big.png"), &big).unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::tool_call(
        "c1",
        "read_image",
        &json!({"file_path": "big.png"}).to_string(),
    ));
    server.push(Reply::text("a gradient"));
    let out = run.headless(&server, "look at big.png");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let results = run.tool_results();
    assert_eq!(results[0]["isError"], json!(false), "{}", results[0]);
    let attachment = &results[0]["content"][1]["attachment"];
    assert_eq!(attachment["mediaType"], json!("image/jpeg"));
    assert_eq!(
        (&attachment["width"], &attachment["height"]),
        (&json!(2048), &json!(788))
    );
    assert_eq!(
        attachment["originalDimensions"],
        json!({"width": 2600, "height": 1000})
    );
    let bytes = attachment["bytes"].as_u64().unwrap();
    assert!(bytes <= 4 * 1024 * 1024, "{bytes}");
    let text = results[0]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "image/jpeg image, 2048x788 px, {bytes} bytes (downscaled from 2600x1000 px"
        )),
        "{text}"
    );

    // The model receives the stored (downscaled) JPEG, not the submitted PNG.
    let requests = model_requests(&server);
    let messages = requests[1]["messages"].as_array().unwrap();
    let url = messages[messages.len() - 1]["content"][1]["image_url"]["url"]
        .as_str()
        .unwrap();
    let data = url.strip_prefix("data:image/jpeg;base64,").unwrap();
    let decoded = base64_len(data);
    assert_eq!(decoded, bytes);
    let id = attachment["attachmentId"].as_str().unwrap();
    let digest = id.strip_prefix("sha256:").unwrap();
    let stored = run
        .home
        .path()
        .join(".dsh/attachments/v1/objects")
        .join(&digest[..2])
        .join(digest);
    let stored = std::fs::read(stored).unwrap();
    assert_eq!(dsh_attachments::encode_base64(&stored), data);
    assert_eq!(
        dsh_attachments::probe(&stored).map(|d| (d.media_type, d.width, d.height)),
        Ok(("image/jpeg", 2048, 788))
    );
}

/// The decoded length of canonical base64 text.
fn base64_len(text: &str) -> u64 {
    let padding = text.bytes().rev().take_while(|&b| b == b'=').count();
    (text.len() / 4 * 3 - padding) as u64
}

#[test]
fn oversized_images_are_refused_without_reading_them_whole() {
    let run = Run::with_model("deepseek-flash");
    // Over the 20 MiB read cap: only the cap is read before the refusal.
    let huge = std::fs::File::create(run.work.path().join("huge.png")).unwrap();
    huge.set_len(64 * 1024 * 1024).unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::tool_call(
        "c1",
        "read_image",
        &json!({"file_path": "huge.png"}).to_string(),
    ));
    server.push(Reply::text("too big"));
    let out = run.headless(&server, "look at the huge image");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = run.tool_results();
    assert_eq!(results.len(), 1);
    let result = &results[0];
    assert_eq!(result["isError"], json!(true));
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("huge.png"), "{text}");
    assert!(
        text.ends_with("the file is larger than this setup stores for an image; make a smaller copy (fewer pixels or stronger compression) and read that instead"),
        "{text}"
    );
    assert!(!run.home.path().join(".dsh/attachments/v1/objects").exists());
}

/// A run on an `openai-compatible` route (configured by a patch of its row) serving `vision`,
/// which declares image input, and `plain`, which does not.
fn openai_compatible_run(server: &MockServer, model: &str) -> Run {
    let run = Run::new();
    run.settings(&format!(
        "agent-default-model:\n  provider: local-gateway\n  model: {model}\n"
    ));
    std::fs::write(
        run.work.path().join("gateway.yml"),
        format!(
            "- id: llm-openai-compatible\n  config:\n    providers:\n      local-gateway:\n        baseURL: {}/v1\n        models:\n          - id: vision\n            input: [text, image]\n          - id: plain\n",
            server.url()
        ),
    )
    .unwrap();
    run
}

/// A headless run on the `gateway.yml` route whose model reads `shot.png` (`bytes`) with
/// `read_image`, then answers `answer`.
fn read_shot_on_the_gateway(server: &MockServer, run: &Run, bytes: &[u8], answer: &str) -> Output {
    std::fs::write(run.work.path().join("shot.png"), bytes).unwrap();
    server.push(Reply::tool_call(
        "c1",
        "read_image",
        &json!({"file_path": "shot.png"}).to_string(),
    ));
    server.push(Reply::text(answer));
    run.base(server)
        .args([
            "--profile",
            "headless",
            "--patch",
            "gateway.yml",
            "look at shot.png",
        ])
        .output()
        .unwrap()
}

#[test]
fn an_openai_compatible_model_declaring_images_receives_them() {
    let server = MockServer::start().answer_untooled("Mock title");
    let run = openai_compatible_run(&server, "vision");
    let bytes = png(3, 2);
    let out = read_shot_on_the_gateway(&server, &run, &bytes, "a tiny picture");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .filter_map(|r| r.json)
        .filter(|j| j.get("tools").is_some())
        .collect();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert_eq!(requests[0]["model"], json!("vision"));
    let results = run.tool_results();
    assert_eq!(results[0]["isError"], json!(false), "{}", results[0]);
    let messages = requests[1]["messages"].as_array().unwrap();
    let url = format!(
        "data:image/png;base64,{}",
        dsh_attachments::encode_base64(&bytes)
    );
    assert_eq!(
        messages[messages.len() - 1],
        json!({"role": "user", "content": [
            {"type": "text", "text": "Attached image(s) from tool result:"},
            {"type": "image_url", "image_url": {"url": url}},
        ]})
    );
}

#[test]
fn an_openai_compatible_model_without_image_input_refuses_read_image() {
    let server = MockServer::start().answer_untooled("Mock title");
    let run = openai_compatible_run(&server, "plain");
    let out = read_shot_on_the_gateway(&server, &run, &png(1, 1), "UNAVAILABLE");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = run.tool_results();
    assert_eq!(results[0]["isError"], json!(true));
    let text = results[0]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("model \"plain\" does not declare image input"),
        "{text}"
    );
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
            // The repository's conformance compositions, which DSH_SNAPSHOT_CONFIG names.
            .arg("--compositions")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../conformance/compositions"
            ))
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

/// `dsh --profile sdk` on pipes, initialized on `model`; answers come back by id.
struct Sdk {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    frames: Vec<Value>,
}

impl Sdk {
    fn start(server: &MockServer, run: &Run, model: &str) -> Self {
        use std::io::BufRead;
        if !run.dsh_home().join("settings.yaml").exists() {
            run.settings(CHAT_ROUTE);
        }
        let mut child = run
            .base(server)
            .args(["--profile", "sdk"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut sdk = Self {
            child,
            stdin,
            lines,
            frames: Vec::new(),
        };
        let init = sdk.call(
            "initialize",
            json!({"cwd": run.work.path(), "provider": "deepseek-official", "model": model}),
        );
        assert!(init.get("result").is_some(), "{init}");
        sdk
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        use std::io::Write;
        let id = format!("{method}-{}", self.frames.len());
        writeln!(
            self.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        )
        .unwrap();
        self.stdin.flush().unwrap();
        loop {
            let f: Value = serde_json::from_str(&self.lines.next().unwrap().unwrap()).unwrap();
            if f["id"] == json!(id) {
                return f;
            }
            self.frames.push(f);
        }
    }

    /// Reads notifications until the session goes idle.
    /// Prompts "What is this? " with the image `data` and waits until the turn is over.
    fn prompt_image(&mut self, data: &str) {
        let ok = self.call(
            "session/prompt",
            json!({"sessionId": "s", "contentBlocks": [
                {"type": "text", "text": "What is this? "},
                {"type": "image", "mimeType": "image/png", "data": data},
            ]}),
        );
        assert!(ok["result"]["messageId"].is_string(), "{ok}");
        self.until_idle();
    }

    fn until_idle(&mut self) {
        loop {
            let f: Value = serde_json::from_str(&self.lines.next().unwrap().unwrap()).unwrap();
            let idle = f["method"] == "session.status" && f["params"]["status"] == "idle";
            self.frames.push(f);
            if idle {
                return;
            }
        }
    }

    fn user_messages(&self) -> Vec<Value> {
        self.frames
            .iter()
            .filter(|f| f["params"]["event"]["type"] == "user/message")
            .map(|f| f["params"]["event"]["data"].clone())
            .filter(|m| m["source"]["kind"] == "user")
            .collect()
    }
}

impl Drop for Sdk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_sdk_prompt_image_is_stored_and_sent_to_the_vision_model() {
    let run = Run::new();
    let server = MockServer::with_replies([Reply::text("DONE")]).answer_untooled("T");
    let mut sdk = Sdk::start(&server, &run, "deepseek-flash");
    let bytes = png(4, 4);
    let data = dsh_attachments::encode_base64(&bytes);

    // Bad images are refused before anything is queued.
    for (block, message) in [
        (
            json!({"type": "image", "mimeType": "image/png", "data": format!("{data}\n")}),
            "image data must be canonical base64",
        ),
        (
            json!({"type": "image", "mimeType": "image/bmp", "data": data}),
            "image mimeType is not supported; send image/png, image/jpeg, image/webp or image/gif",
        ),
        (
            json!({"type": "image", "mimeType": "image/png", "data": dsh_attachments::encode_base64(b"not a png")}),
            "Invalid image",
        ),
    ] {
        let bad = sdk.call(
            "session/prompt",
            json!({"sessionId": "s", "contentBlocks": [{"type": "text", "text": "look"}, block]}),
        );
        let got = bad["error"]["message"].as_str().unwrap_or_default();
        assert!(got.starts_with(message), "{bad}");
    }
    assert!(sdk.user_messages().is_empty(), "nothing was queued");

    sdk.prompt_image(&data);
    // The log keeps a reference to the stored copy, never the bytes.
    let messages = sdk.user_messages();
    assert_eq!(messages.len(), 1, "{messages:#?}");
    let image = &messages[0]["content"][1];
    assert_eq!(image["type"], "image", "{image}");
    assert!(
        image["attachment"]["attachmentId"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{image}"
    );
    assert!(!messages[0].to_string().contains(&data));
    let requests = model_requests(&server);
    assert_eq!(requests.len(), 1, "{requests:#?}");
    let user = requests[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user" && m["content"].is_array())
        .expect("a user message with parts")
        .clone();
    assert!(
        user["content"].as_array().unwrap().contains(
            &json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{data}")}})
        ),
        "{user}"
    );
}

#[test]
fn an_sdk_image_prompt_to_a_text_only_model_runs_with_a_placeholder() {
    // Upstream 0.2's SDK runtime stores the image whatever the route; a text-only model is
    // shown a placeholder naming the attachment, and the log keeps the image.
    let run = Run::new();
    let server = MockServer::with_replies([Reply::text("DONE")]).answer_untooled("T");
    let mut sdk = Sdk::start(&server, &run, "deepseek-v4-flash");
    let data = dsh_attachments::encode_base64(&png(4, 4));
    sdk.prompt_image(&data);
    let messages = sdk.user_messages();
    assert_eq!(messages.len(), 1, "{messages:#?}");
    let id = messages[0]["content"][1]["attachment"]["attachmentId"]
        .as_str()
        .expect("the log keeps the image")
        .to_string();
    let requests = model_requests(&server);
    assert_eq!(requests.len(), 1, "{requests:#?}");
    let body = requests[0].to_string();
    assert!(
        !body.contains("image_url") && !body.contains(&data),
        "{body}"
    );
    let digest = &id["sha256:".len().."sha256:".len() + 8];
    assert!(
        body.contains(&format!(
            "[image omitted because this model accepts text only; attachment sha256:{digest}]"
        )),
        "{body}"
    );
}

/// Out of the box (upstream 0.2's default: deepseek-flash on DeepSeek's Messages API, text
/// and images), `read_image` works: the next request carries the image inside the tool's
/// `tool_result`, as a base64 image block of the stored bytes.
#[test]
fn the_default_route_sends_a_read_image_inside_its_tool_result() {
    let run = Run::new();
    let (bytes, server) = read_shot(&run);

    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let body = requests[1].json.as_ref().unwrap();
    assert_eq!(requests[1].path, "/v1/messages");
    assert_eq!(body["model"], "deepseek-flash");
    let result = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == "c1")
        .unwrap_or_else(|| panic!("no tool_result for c1 in {body:#}"))
        .clone();
    let content = result["content"].as_array().unwrap();
    assert!(
        content.contains(&json!({"type": "image", "source": {
            "type": "base64", "media_type": "image/png",
            "data": dsh_attachments::encode_base64(&bytes)
        }})),
        "{result:#}"
    );
    assert!(
        content
            .iter()
            .any(|b| b["type"] == "text" && b["text"].as_str().unwrap_or("").contains("shot.png")),
        "{result:#}"
    );
}
