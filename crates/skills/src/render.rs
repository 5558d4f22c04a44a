//! The model-facing text of a loaded skill and of catalog descriptions.

use crate::registry::{ResourceBase, SkillDefinition};

/// Escapes an attribute value: `&`, `"`, `<`.
pub fn escape_attr(value: &str) -> String {
    value
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
}

/// Escapes prose embedded in skill markup: `&`, `<`, `>`.
pub fn escape_text(value: &str) -> String {
    value
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The `<skill_content>` block shared by the `skill` tool result and the `/name` gesture.
/// The body is embedded verbatim: skills are trusted local content.
pub fn render_skill_content(skill: &SkillDefinition) -> String {
    let hint: [String; 2] = match &skill.summary.resource_base {
        None => [
            format!(
                "Resources for this skill are managed by provider \"{}\".",
                escape_text(&skill.summary.provider)
            ),
            "Load referenced resources only as needed.".into(),
        ],
        Some(ResourceBase::Directory(path)) => [
            format!(
                "Base directory for this skill: {}",
                escape_text(&path.to_string_lossy())
            ),
            "Resolve relative paths mentioned by this skill against the base directory before using them. Load referenced resources only as needed.".into(),
        ],
        Some(ResourceBase::Url(url)) => [
            format!("Base URL for this skill: {}", escape_text(url)),
            "Resolve relative URLs in this skill against that base URL first. Load referenced resources only as needed.".into(),
        ],
        Some(ResourceBase::Opaque(description)) => [
            format!("Resources for this skill: {}", escape_text(description)),
            "Load referenced resources only as needed.".into(),
        ],
    };
    [
        format!(
            "<skill_content name=\"{}\">",
            escape_attr(&skill.summary.name)
        ),
        "<skill_resources>".into(),
        hint[0].clone(),
        hint[1].clone(),
        "</skill_resources>".into(),
        String::new(),
        "<skill_instructions>".into(),
        skill.content.clone(),
        "</skill_instructions>".into(),
        "</skill_content>".into(),
    ]
    .join("\n")
}

/// A description as the catalog publishes it (unescaped): whitespace runs collapsed to one
/// space, trimmed, and cut to `max` UTF-16 units with `...` (JavaScript string lengths, as
/// upstream measures them; a cut never splits a character).
pub fn catalog_description(value: &str, max: usize) -> String {
    let normalized = value.split_whitespace().collect::<Vec<_>>().join(" ");
    let units: usize = normalized.chars().map(char::len_utf16).sum();
    if units <= max {
        return normalized;
    }
    let budget = max.saturating_sub(3);
    let mut used = 0;
    let mut out = String::new();
    for c in normalized.chars() {
        used += c.len_utf16();
        if used > budget {
            break;
        }
        out.push(c);
    }
    out.push_str("...");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{InvocationPolicy, SkillSummary};
    use pretty_assertions::assert_eq;

    #[test]
    fn the_block_names_the_base_directory_and_embeds_the_body() {
        let skill = SkillDefinition {
            summary: SkillSummary {
                name: "a-b".into(),
                description: "d".into(),
                when_to_use: None,
                invocation: InvocationPolicy::default(),
                source: "project-dsh".into(),
                provider: "filesystem".into(),
                resource_base: Some(ResourceBase::Directory("/w/<x>&".into())),
            },
            content: "Use <b>.".into(),
            path: None,
            metadata: None,
        };
        assert_eq!(
            render_skill_content(&skill),
            "<skill_content name=\"a-b\">\n<skill_resources>\nBase directory for this skill: /w/&lt;x&gt;&amp;\nResolve relative paths mentioned by this skill against the base directory before using them. Load referenced resources only as needed.\n</skill_resources>\n\n<skill_instructions>\nUse <b>.\n</skill_instructions>\n</skill_content>"
        );
    }

    #[test]
    fn catalog_descriptions_collapse_whitespace_and_cut_with_an_ellipsis() {
        assert_eq!(catalog_description("  a \n\t b  ", 500), "a b");
        assert_eq!(catalog_description("abcdefgh", 8), "abcdefgh");
        assert_eq!(catalog_description("abcdefghi", 8), "abcde...");
        // An astral character counts two units and is never split.
        assert_eq!(catalog_description("ab\u{1F600}cdefg", 6), "ab...");
        assert_eq!(catalog_description("a\u{1F600}cdefg", 6), "a\u{1F600}...");
    }
}
