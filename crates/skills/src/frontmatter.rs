//! `SKILL.md`: a first line exactly `---`, YAML up to the next line `---`, then the body.
//!
//! Required: non-empty string `name` (kebab case) and `description`. Optional:
//! `whenToUse` (string), `metadata` (mapping), `disable-model-invocation` and
//! `user-invocable` (booleans, also `1`/`0`/`yes`/`no`/`on`/`off`/`true`/`false` in any
//! case). The camelCase invocation keys of older drafts reject the skill. Every problem is
//! a [`SkillFileError`] whose text says why the file is ignored; nothing here panics.

use std::io::Read as _;
use std::path::Path;

use dsh_kernel::config::{Node, parse};
use serde_json::{Map, Value};

use crate::registry::{InvocationPolicy, is_skill_name};

/// Largest `SKILL.md` read (1 MiB). Larger files are ignored with a diagnostic rather than
/// read into memory and pushed into a model request.
pub const MAX_SKILL_FILE_BYTES: u64 = 1024 * 1024;

/// A valid skill file.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedSkill {
    pub name: String,
    pub description: String,
    pub when_to_use: Option<String>,
    pub invocation: InvocationPolicy,
    pub metadata: Option<Value>,
    /// The text after the closing fence, trimmed.
    pub content: String,
}

/// Why a skill file is ignored. Each text completes "skill file <path> ignored: …".
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SkillFileError {
    /// The file is larger than [`MAX_SKILL_FILE_BYTES`].
    #[error("file is larger than {max} bytes")]
    TooLarge { max: u64 },
    /// The bytes are not UTF-8 text.
    #[error("file is not UTF-8 text")]
    NotText,
    /// Reading failed (permissions, I/O).
    #[error("failed to read: {0}")]
    Read(String),
    /// No `---` first line, no closing `---`, or frontmatter that is not a mapping.
    #[error("missing YAML frontmatter")]
    MissingFrontmatter,
    /// The frontmatter is not valid YAML.
    #[error("invalid YAML frontmatter: {0}")]
    InvalidYaml(String),
    /// `name` or `description` missing, empty or not a string.
    #[error("frontmatter requires name and description")]
    MissingFields,
    /// `name` is not kebab case.
    #[error("invalid skill name \"{0}\"")]
    InvalidName(String),
    /// A bad or legacy invocation field.
    #[error("invalid invocation frontmatter: {0}")]
    InvalidInvocation(String),
}

/// Reads and parses one skill file. `Ok(None)` when the file does not exist (a folder
/// without `SKILL.md` is not a skill, and says nothing).
pub fn parse_skill_file(path: &Path) -> Result<Option<ParsedSkill>, SkillFileError> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if is_absent(&e) => return Ok(None),
        Err(e) => return Err(SkillFileError::Read(e.to_string())),
    };
    let meta = file
        .metadata()
        .map_err(|e| SkillFileError::Read(e.to_string()))?;
    if !meta.is_file() {
        return Ok(None);
    }
    if meta.len() > MAX_SKILL_FILE_BYTES {
        return Err(SkillFileError::TooLarge {
            max: MAX_SKILL_FILE_BYTES,
        });
    }
    // Read with the bound, so a file that grows meanwhile cannot make this larger.
    let mut bytes = Vec::new();
    file.take(MAX_SKILL_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| SkillFileError::Read(e.to_string()))?;
    if bytes.len() as u64 > MAX_SKILL_FILE_BYTES {
        return Err(SkillFileError::TooLarge {
            max: MAX_SKILL_FILE_BYTES,
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| SkillFileError::NotText)?;
    parse_skill_text(&text).map(Some)
}

fn is_absent(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// Parses the text of a skill file.
pub fn parse_skill_text(raw: &str) -> Result<ParsedSkill, SkillFileError> {
    let (yaml, body) = split_frontmatter(raw).ok_or(SkillFileError::MissingFrontmatter)?;
    let node = parse(yaml)
        .map_err(|e| SkillFileError::InvalidYaml(e.to_string()))?
        .ok_or(SkillFileError::MissingFrontmatter)?;
    let Node::Map(entries) = &node else {
        return Err(SkillFileError::MissingFrontmatter);
    };
    let field = |key: &str| entries.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    let string = |key: &str| match field(key) {
        Some(Node::Str(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    };
    let (Some(name), Some(description)) = (string("name"), string("description")) else {
        return Err(SkillFileError::MissingFields);
    };
    if !is_skill_name(&name) {
        return Err(SkillFileError::InvalidName(name));
    }
    let invocation = invocation_policy(&field).map_err(SkillFileError::InvalidInvocation)?;
    let metadata = match field("metadata") {
        Some(m @ Node::Map(_)) => Some(to_json(m)),
        _ => None,
    };
    Ok(ParsedSkill {
        name,
        description,
        when_to_use: string("whenToUse"),
        invocation,
        metadata,
        content: body.trim().to_string(),
    })
}

/// The YAML between the fences and the body after the closing one; `None` without both
/// fences. Lines may end in `\r\n`.
fn split_frontmatter(raw: &str) -> Option<(&str, &str)> {
    let first_end = raw.find('\n')?;
    if raw[..first_end].trim_end_matches('\r') != "---" {
        return None;
    }
    let start = first_end + 1;
    let mut line_start = start;
    loop {
        let next = raw[line_start..].find('\n').map(|i| line_start + i);
        let line_end = next.unwrap_or(raw.len());
        if raw[line_start..line_end].trim_end_matches('\r') == "---" {
            let body_start = next.map_or(raw.len(), |n| n + 1);
            return Some((&raw[start..line_start], &raw[body_start..]));
        }
        line_start = next? + 1;
    }
}

fn invocation_policy<'a>(
    field: &impl Fn(&str) -> Option<&'a Node>,
) -> Result<InvocationPolicy, String> {
    for (legacy, canonical) in [
        ("disableModelInvocation", "disable-model-invocation"),
        ("modelInvocable", "disable-model-invocation"),
        ("userInvocable", "user-invocable"),
    ] {
        if field(legacy).is_some() {
            return Err(format!(
                "frontmatter field \"{legacy}\" is unsupported; use \"{canonical}\""
            ));
        }
    }
    let flag = |key: &str| -> Result<Option<bool>, String> {
        let Some(value) = field(key) else {
            return Ok(None);
        };
        let parsed = match value {
            Node::Bool(b) => Some(*b),
            Node::Int(1) => Some(true),
            Node::Int(0) => Some(false),
            Node::Float(f) if *f == 1.0 => Some(true),
            Node::Float(f) if *f == 0.0 => Some(false),
            Node::Str(s) => match s.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Some(true),
                "0" | "false" | "no" | "off" => Some(false),
                _ => None,
            },
            Node::Null
            | Node::Int(_)
            | Node::Float(_)
            | Node::Seq(_)
            | Node::Map(_)
            | Node::Js(_) => None,
        };
        parsed
            .map(Some)
            .ok_or_else(|| format!("frontmatter field \"{key}\" must be a boolean"))
    };
    let disable_model = flag("disable-model-invocation")?;
    let user = flag("user-invocable")?;
    Ok(InvocationPolicy {
        model_invocable: disable_model != Some(true),
        user_invocable: user != Some(false),
    })
}

fn to_json(node: &Node) -> Value {
    match node {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(*b),
        Node::Int(i) => Value::from(*i),
        Node::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Node::Str(s) | Node::Js(s) => Value::String(s.clone()),
        Node::Seq(items) => Value::Array(items.iter().map(to_json).collect()),
        Node::Map(entries) => Value::Object(
            entries
                .iter()
                .map(|(k, v)| (k.clone(), to_json(v)))
                .collect::<Map<String, Value>>(),
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn parsed(text: &str) -> ParsedSkill {
        parse_skill_text(text).unwrap()
    }

    fn error(text: &str) -> String {
        parse_skill_text(text).unwrap_err().to_string()
    }

    #[test]
    fn a_valid_skill_parses_with_its_trimmed_body_and_defaults() {
        let skill = parsed(
            "---\nname: snapshot-skill\ndescription: Exercise discovery.\n---\n\nDo this.\nThen that.\n\n",
        );
        assert_eq!(
            skill,
            ParsedSkill {
                name: "snapshot-skill".into(),
                description: "Exercise discovery.".into(),
                when_to_use: None,
                invocation: InvocationPolicy {
                    model_invocable: true,
                    user_invocable: true
                },
                metadata: None,
                content: "Do this.\nThen that.".into(),
            }
        );
    }

    #[test]
    fn crlf_fences_optional_fields_and_boolean_spellings_are_accepted() {
        let skill = parsed(
            "---\r\nname: a\r\ndescription: d\r\nwhenToUse: later\r\nmetadata:\r\n  k: [1, two]\r\ndisable-model-invocation: yes\r\nuser-invocable: 0\r\n---\r\nbody",
        );
        assert_eq!(skill.when_to_use.as_deref(), Some("later"));
        assert_eq!(skill.metadata, Some(json!({"k": [1, "two"]})));
        assert_eq!(
            skill.invocation,
            InvocationPolicy {
                model_invocable: false,
                user_invocable: false
            }
        );
        assert_eq!(skill.content, "body");
        for (spelling, model) in [
            ("true", false),
            ("On", false),
            ("false", true),
            ("NO", true),
            ("1", false),
        ] {
            let s = parsed(&format!(
                "---\nname: a\ndescription: d\ndisable-model-invocation: {spelling}\n---\n"
            ));
            assert_eq!(s.invocation.model_invocable, model, "{spelling}");
        }
    }

    #[test]
    fn malformed_files_give_a_diagnostic_never_a_panic() {
        let cases = [
            ("", "missing YAML frontmatter"),
            ("no fence\n", "missing YAML frontmatter"),
            ("---\nname: a\ndescription: d\n", "missing YAML frontmatter"),
            ("---", "missing YAML frontmatter"),
            ("---\n- a\n- b\n---\n", "missing YAML frontmatter"),
            ("---\n---\nbody", "missing YAML frontmatter"),
            (
                "---\nname: a\n---\n",
                "frontmatter requires name and description",
            ),
            (
                "---\nname: a\ndescription: ''\n---\n",
                "frontmatter requires name and description",
            ),
            (
                "---\nname: 12\ndescription: d\n---\n",
                "frontmatter requires name and description",
            ),
            (
                "---\nname: Bad_Name\ndescription: d\n---\n",
                "invalid skill name \"Bad_Name\"",
            ),
            (
                "---\nname: a\ndescription: d\nuser-invocable: maybe\n---\n",
                "invalid invocation frontmatter: frontmatter field \"user-invocable\" must be a boolean",
            ),
            (
                "---\nname: a\ndescription: d\nuserInvocable: true\n---\n",
                "invalid invocation frontmatter: frontmatter field \"userInvocable\" is unsupported; use \"user-invocable\"",
            ),
            (
                "---\nname: a\ndescription: d\nmodelInvocable: true\n---\n",
                "invalid invocation frontmatter: frontmatter field \"modelInvocable\" is unsupported; use \"disable-model-invocation\"",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(error(text), want, "{text:?}");
        }
        let bad_yaml = error("---\nname: [unclosed\ndescription: d\n---\n");
        assert!(
            bad_yaml.starts_with("invalid YAML frontmatter: "),
            "{bad_yaml}"
        );
    }

    #[test]
    fn files_are_bounded_and_must_be_text() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.md");
        let mut text = String::from("---\nname: big\ndescription: d\n---\n");
        text.push_str(&"x".repeat(MAX_SKILL_FILE_BYTES as usize));
        std::fs::write(&big, text).unwrap();
        assert_eq!(
            parse_skill_file(&big).unwrap_err().to_string(),
            format!("file is larger than {MAX_SKILL_FILE_BYTES} bytes")
        );
        let binary = dir.path().join("bin.md");
        std::fs::write(&binary, [b'-', b'-', b'-', b'\n', 0xff, 0xfe]).unwrap();
        assert_eq!(
            parse_skill_file(&binary).unwrap_err(),
            SkillFileError::NotText
        );
        assert_eq!(
            parse_skill_file(&dir.path().join("absent.md")).unwrap(),
            None
        );
        assert_eq!(parse_skill_file(dir.path()).unwrap(), None);
    }
}
