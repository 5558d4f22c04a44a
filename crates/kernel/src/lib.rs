//! dsh kernel: the Cordis analogue every plugin is built on.
//!
//! * [`Context`] — typed services, typed events, effects, tasks, scopes.
//! * [`events`] — event traits; each event type fixes its payload, decision and mode.
//! * [`Fiber`] / [`EffectHandle`] — every registration is an effect; unloading unwinds it.
//! * [`Plugin`], [`Catalog`], [`load_tree`] — compiled-in plugins composed from config rows.
//! * [`config`] — YAML rows layered bundle → profile patch → home patch → `--patch`.
//! * [`json`] — `JSON.stringify`-compatible output.

pub mod config;
pub mod config_shape;
mod context;
mod effects;
mod error;
pub mod events;
pub mod json;
mod plugin;
mod scope;
pub mod time;

pub use context::Context;
pub use effects::{EffectHandle, Fiber};
pub use error::{BoxError, HarnessError, KernelError, error_chain};
pub use events::{
    EmitEvent, Event, ListenOptions, Next, ParallelEvent, SerialEvent, WaterfallEvent,
};
pub use futures::future::BoxFuture;
pub use plugin::{
    Catalog, ConfigFieldError, LoadError, LoadRow, LoadedTree, Plugin, PluginConfig, load_tree,
    short_plugin_name,
};
pub use scope::{Scope, ScopeId};
