//! Matchers shared by both dialects. An absent, empty or `*` pattern matches everything.
//! Claude Code reads a pattern made only of `[A-Za-z0-9_|]` as exact-match alternatives
//! and anything else as a regex; Codex reads every pattern as a regex. Regexes are
//! unanchored and use ECMAScript syntax (upstream compiles them with `new RegExp`).

use std::fmt;

/// How a dialect interprets a matcher pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatcherMode {
    /// Word-and-pipe patterns are literal alternatives; anything else is a regex.
    ClaudeCode,
    /// Every pattern is an unanchored regex.
    Codex,
}

impl MatcherMode {
    pub fn as_str(self) -> &'static str {
        match self {
            MatcherMode::ClaudeCode => "claude-code",
            MatcherMode::Codex => "codex",
        }
    }
}

/// A pattern was not a valid regex; the text is upstream's diagnostic
/// (`invalid claude-code regex matcher "["`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {} regex matcher {}", .mode.as_str(), serde_json::Value::from(.pattern.as_str()))]
pub struct InvalidMatcher {
    pub mode: MatcherMode,
    pub pattern: String,
}

/// A compiled matcher.
#[derive(Clone)]
pub enum Matcher {
    /// Absent, empty or `*`.
    All,
    /// Claude Code's exact-match alternatives.
    Literal(Vec<String>),
    /// An unanchored ECMAScript regex.
    Regex(regress::Regex),
}

impl fmt::Debug for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Matcher::All => f.write_str("All"),
            Matcher::Literal(alternatives) => f.debug_tuple("Literal").field(alternatives).finish(),
            Matcher::Regex(_) => f.write_str("Regex(..)"),
        }
    }
}

fn is_match_all(pattern: Option<&str>) -> bool {
    matches!(pattern, None | Some("") | Some("*"))
}

fn is_claude_literal(pattern: &str) -> bool {
    !pattern.is_empty()
        && pattern
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'|')
}

impl Matcher {
    /// Compiles `pattern` for `mode`; an invalid regex is an error (config parsers reject
    /// the whole file with it).
    pub fn compile(pattern: Option<&str>, mode: MatcherMode) -> Result<Self, InvalidMatcher> {
        let Some(pattern) = pattern.filter(|p| !is_match_all(Some(p))) else {
            return Ok(Matcher::All);
        };
        match mode {
            MatcherMode::ClaudeCode if is_claude_literal(pattern) => Ok(Matcher::Literal(
                pattern.split('|').map(str::to_owned).collect(),
            )),
            MatcherMode::ClaudeCode | MatcherMode::Codex => regress::Regex::new(pattern)
                .map(Matcher::Regex)
                .map_err(|_| InvalidMatcher {
                    mode,
                    pattern: pattern.to_owned(),
                }),
        }
    }

    /// Whether this matcher selects `query` (a tool name, a session source, …).
    pub fn matches(&self, query: &str) -> bool {
        match self {
            Matcher::All => true,
            Matcher::Literal(alternatives) => alternatives.iter().any(|a| a == query),
            Matcher::Regex(regex) => regex.find(query).is_some(),
        }
    }
}

/// Whether `pattern` selects `query` under `mode`; an invalid regex never matches.
pub fn matches_matcher(pattern: Option<&str>, query: &str, mode: MatcherMode) -> bool {
    Matcher::compile(pattern, mode).is_ok_and(|m| m.matches(query))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn claude_literals_are_exact_alternatives_and_the_rest_is_a_regex() {
        let m = MatcherMode::ClaudeCode;
        assert!(matches_matcher(None, "bash", m));
        assert!(matches_matcher(Some(""), "bash", m));
        assert!(matches_matcher(Some("*"), "bash", m));
        assert!(matches_matcher(Some("bash"), "bash", m));
        assert!(
            !matches_matcher(Some("bash"), "bash_output", m),
            "literal is exact, not a prefix"
        );
        assert!(matches_matcher(Some("Edit|Write"), "Write", m));
        assert!(!matches_matcher(Some("Edit|Write"), "Edit|Write", m));
        assert!(matches_matcher(Some("^mcp__.*"), "mcp__fs__read", m));
        assert!(
            matches_matcher(Some("ba.h"), "xbashx", m),
            "regexes are unanchored"
        );
        assert!(
            !matches_matcher(Some("["), "[", m),
            "an invalid regex never matches"
        );
    }

    #[test]
    fn codex_patterns_are_always_unanchored_regexes() {
        let m = MatcherMode::Codex;
        assert!(matches_matcher(Some("bash"), "bash_output", m));
        assert!(matches_matcher(Some("^bash$"), "bash", m));
        assert!(!matches_matcher(Some("^bash$"), "bash_output", m));
        assert!(
            matches_matcher(Some("(?=b)bash"), "bash", m),
            "ECMAScript lookahead is supported"
        );
    }

    #[test]
    fn invalid_regexes_carry_upstreams_diagnostic() {
        let err = Matcher::compile(Some("["), MatcherMode::ClaudeCode).err();
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some("invalid claude-code regex matcher \"[\"")
        );
        let err = Matcher::compile(Some("a("), MatcherMode::Codex).err();
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some("invalid codex regex matcher \"a(\"")
        );
        assert!(
            Matcher::compile(Some("*"), MatcherMode::Codex).is_ok(),
            "`*` is the match-all sentinel"
        );
    }
}
