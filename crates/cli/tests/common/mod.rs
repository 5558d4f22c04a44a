//! What the binary-level tests share: a run's private home and workspace, the `dsh` command
//! pointed at a mock LLM with a clean environment, and the stored sessions read back (a
//! complete log, no repair). Each test file adds its own shorthands in an `impl Run`.
#![allow(dead_code)]

pub mod confined;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

use dsh_persistence::{ChunkPacking, Compression, SessionFiles};
use dsh_session::{Event, types};
use dsh_test_support::mock_server::{MockServer, RecordedRequest, Reply};
use serde_json::Value;

pub struct Run {
    pub home: tempfile::TempDir,
    pub work: tempfile::TempDir,
}

impl Run {
    pub fn new() -> Self {
        Self {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
        }
    }

    /// `$DSH_HOME` of this run.
    pub fn dsh_home(&self) -> PathBuf {
        self.home.path().join(".dsh")
    }

    /// `dsh` with nothing of the caller's environment but `PATH`: this run's home, the mock
    /// LLM as the DeepSeek endpoint, the workspace as the working directory.
    pub fn base(&self, server: &MockServer) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dsh"));
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("DSH_HOME", self.dsh_home())
            .env("DEEPSEEK_API_KEY", "sk-test")
            .env("DEEPSEEK_BASE_URL", server.url())
            .current_dir(self.work.path());
        c
    }

    pub fn settings(&self, yaml: &str) {
        std::fs::create_dir_all(self.dsh_home()).unwrap();
        std::fs::write(self.dsh_home().join("settings.yaml"), yaml).unwrap();
    }

    pub fn files(&self) -> SessionFiles {
        SessionFiles::new(
            self.dsh_home().join("sessions"),
            Compression::Zstd,
            ChunkPacking::Packed,
        )
    }

    /// The events of stored session `id`, whose log must be complete.
    pub fn events(&self, id: &str) -> Vec<Arc<Event>> {
        let loaded = self.files().inspect(id).unwrap();
        assert!(
            loaded.repair.is_none(),
            "the stored log is complete: {:?}",
            loaded.repair
        );
        loaded.events
    }

    /// The id of the one session this run stored.
    pub fn only_session(&self) -> String {
        let list = self.files().list().unwrap();
        assert_eq!(list.len(), 1, "one session stored");
        list[0].0.id.clone()
    }

    /// The events of the one session this run stored.
    pub fn session(&self) -> Vec<Arc<Event>> {
        self.events(&self.only_session())
    }
}

/// A process's stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// The agent loop's requests: auxiliary calls (titles, memory proposals) carry no tools.
pub fn loop_requests(server: &MockServer) -> Vec<RecordedRequest> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .collect()
}

/// A model reply calling tool `name` with `args`.
pub fn call(id: &str, name: &str, args: Value) -> Reply {
    Reply::tool_call(id, name, &args.to_string())
}

/// The concatenated text blocks of a message (`{role, content: [blocks]}`).
pub fn message_text(message: &Value) -> String {
    message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect()
}

/// The text of every tool result in `events`, in order.
pub fn tool_texts(events: &[Arc<Event>]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.is(types::TOOL_RESULT))
        .map(|e| {
            e.data["message"]["content"][0]["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect()
        })
        .collect()
}

/// Pids of live processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        // Zombies have an empty command line and are not running anything.
        if String::from_utf8_lossy(&cmdline).contains(marker) && pid != std::process::id() {
            found.push(pid);
        }
    }
    found
}

pub use dsh_test_support::rng::{Rng, seed_from};
