//! Memory across sessions (`dsh-memory`); see README.md.
//!
//! * [`store`] — the markdown files: parsing, ids, locked atomic rewrites;
//! * [`service`] — [`Memory`]: the files one working directory sees, recall, the prompt text;
//! * `plugin` — the `memory` row (the prompt section, `/remember`, `/forget`, `/memory`,
//!   proposals) and the `tool-memory` row (`remember`, `recall`, `forget`).

pub mod commands;
mod plugin;
pub mod service;
pub mod store;
mod suggest;
mod tools;

pub use plugin::{MemoryPlugin, MemoryService, ToolMemoryPlugin};
pub use service::{Found, Memory, MemoryConfig, Warning, WritePolicy};
pub use store::{Entry, MemoryError, Origin, Scope};
pub use suggest::{SUGGEST_INSTRUCTION, parse_suggestions};

/// The event every memory change appends to the session that made it.
pub const MEMORY_CHANGE_EVENT: &str = "memory/change";
/// `source.kind` of the message carrying the memory section.
pub const SOURCE_KIND: &str = "memory";
/// The memory tools' system-prompt section and its order (after the session tools, 113).
pub const MEMORY_SECTION: &str = "tool:memory";
pub const MEMORY_SECTION_ORDER: f64 = 113.5;

/// The first paragraph of the memory message.
pub const PROMPT_INTRO: &str = "What earlier sessions kept in memory (files the person can read and edit). Take it as background knowledge: the person's words in this session win over it, and when an entry proves wrong or stale, say so and offer to forget it. The bracketed ids are what forget takes.";

/// The seq of the `memory/change` event in `events` that wrote memory `id` (not a forget).
pub fn change_event_seq(events: &[std::sync::Arc<dsh_session::Event>], id: &str) -> Option<u64> {
    events
        .iter()
        .find(|e| {
            e.event_type == MEMORY_CHANGE_EVENT
                && e.data.get("id").and_then(serde_json::Value::as_str) == Some(id)
                && e.data.get("action").and_then(serde_json::Value::as_str) != Some("forget")
        })
        .map(|e| e.seq)
}

/// Adds every plugin of this crate to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog.register(MemoryPlugin);
    catalog.register(ToolMemoryPlugin);
}
