//! Shared test helpers for the dsh workspace.

pub mod json_schema;
pub mod mock_server;
pub mod prereq;
pub mod pty;
pub mod rng;
pub mod scripted;
pub mod sse;
pub mod webdriver;
