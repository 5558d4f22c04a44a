//! The integration tests of this crate, linked as one binary: each module was a test
//! file of its own (`cargo test -p <crate> --test all <module>::` runs one).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

#[path = "../support/mod.rs"]
mod support;

mod agent_loop;
mod driver_plugin;
mod lineage;
mod resume;
