//! What the binary-level tests share: a run's private home and workspace, the `dsh` command
//! pointed at a mock LLM with a clean environment, and the stored sessions read back (a
//! complete log, no repair). Each test file adds its own shorthands in an `impl Run`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use dsh_persistence::{ChunkPacking, Compression, SessionFiles};
use dsh_session::Event;
use dsh_test_support::mock_server::MockServer;

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
