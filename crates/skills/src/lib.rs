//! Skills: reusable task instructions kept as `SKILL.md` folders, listed to the model in a
//! session catalog and loaded on demand.
//!
//! * [`SkillRegistry`] (`@deepseek-ai/dsh-skill`) — merges what providers contribute: a
//!   lower rank wins a duplicate name, then provider registration order, then the
//!   provider's own order; scoped registrations overlay the global layer for one agent.
//! * [`FileSystemProvider`] (`@deepseek-ai/dsh-skill-filesystem`) — project, custom, user
//!   and bundled roots on disk, one level deep, with YAML frontmatter ([`parse_skill_file`]).
//! * `@deepseek-ai/dsh-tool-skill` — the `skill` loader tool, the durable
//!   `skill-catalog` message before a step, and the `/name` gesture in user input.
//! * `@deepseek-ai/dsh-skill-badge` — a bundled provider for one built-in skill.

mod badge;
mod filesystem;
mod frontmatter;
mod plugins;
mod registry;
mod render;
mod tool;

pub use filesystem::{FileSystemProvider, FileSystemProviderConfig, find_project_root};
pub use frontmatter::{
    MAX_SKILL_FILE_BYTES, ParsedSkill, SkillFileError, parse_skill_file, parse_skill_text,
};
pub use plugins::{
    SkillBadgePlugin, SkillFileSystemPlugin, SkillRegistryPlugin, ToolSkillPlugin, register_catalog,
};
pub use registry::{
    BUNDLED_SKILL_RANK, InvocationPolicy, Lookup, ResourceBase, SkillCandidate, SkillDefinition,
    SkillError, SkillProvider, SkillRegistry, SkillSnapshot, SkillSummary, is_skill_name,
};
pub use render::{catalog_description, escape_attr, escape_text, render_skill_content};
pub use tool::{SKILL_TOOL_DESCRIPTION, invoked_skill_names};
