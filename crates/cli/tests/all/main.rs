//! The integration tests of this crate, linked as one binary: each module was a test
//! file of its own (`cargo test -p <crate> --test all <module>::` runs one).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/png.rs"]
mod png;

mod acp;
mod acp_args;
mod acp_sdk;
mod anthropic;
mod architecture;
mod bounds;
mod browser;
mod code_mode;
mod config;
mod cordis;
mod crash;
mod durability;
mod escape;
mod goal;
mod headless;
mod hostile_inputs;
mod images;
mod local_model;
mod long_session;
mod lsp;
mod mcp;
mod memory;
mod models;
mod no_fixtures;
mod output;
mod plugins;
mod product_subagents;
mod responses;
mod sandbox;
mod sdk;
mod sdk_snapshots;
mod sessions;
mod skills;
mod subagent_cwd;
mod team;
mod terminal;
mod tool_schemas;
mod tools;
mod tui;
mod upstream;
mod web;
mod workflow;
