//! The model-facing name of an MCP tool: a pure function of `(serverName, rawName)`.
//!
//! `mcp__<serverName>__<rawName>` when that already fits the DeepSeek function-name contract
//! (at most 64 characters of `[A-Za-z0-9_-]`). Otherwise every other character becomes `_`
//! (per UTF-16 code unit, as upstream's regex replaces them, so a character outside the BMP
//! becomes `__`), the result is cut to 51 characters and `_` plus the first 12 hex digits of
//! SHA-256(`serverName` NUL `rawName`) are appended, so two tools never share a name.

use sha2::{Digest, Sha256};

/// The DeepSeek function-name length limit.
pub const MAX_PUBLIC_NAME_LENGTH: usize = 64;
/// Hex digits of the identity hash appended when the name had to change.
const HASH_LENGTH: usize = 12;

/// The public name of raw tool `raw` of server `server`.
pub fn public_tool_name(server: &str, raw: &str) -> String {
    let joined = format!("mcp__{server}__{raw}");
    let mut normalized = String::with_capacity(joined.len());
    for c in joined.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            normalized.push(c);
        } else {
            for _ in 0..c.len_utf16() {
                normalized.push('_');
            }
        }
    }
    if normalized == joined && normalized.len() <= MAX_PUBLIC_NAME_LENGTH {
        return normalized;
    }
    let mut hasher = Sha256::new();
    hasher.update(server.as_bytes());
    hasher.update([0u8]);
    hasher.update(raw.as_bytes());
    let digest = hasher.finalize();
    let hex: String = digest
        .iter()
        .flat_map(|b| [b >> 4, b & 0xf])
        .take(HASH_LENGTH)
        .map(|n| char::from_digit(u32::from(n), 16).unwrap_or('0'))
        .collect();
    // Every character is ASCII now, so a byte cut is a character cut.
    normalized.truncate(MAX_PUBLIC_NAME_LENGTH - HASH_LENGTH - 1);
    format!("{normalized}_{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn clean_names_pass_through() {
        assert_eq!(
            public_tool_name("github", "create_issue"),
            "mcp__github__create_issue"
        );
        assert_eq!(public_tool_name("a-b", "x-y_z9"), "mcp__a-b__x-y_z9");
    }

    #[test]
    fn changed_names_carry_the_identity_hash() {
        // sha256("srv\0get.thing") starts with these 12 hex digits (computed independently
        // with coreutils: printf 'srv\0get.thing' | sha256sum).
        let name = public_tool_name("srv", "get.thing");
        assert_eq!(
            name,
            format!("mcp__srv__get_thing_{}", &sha_hex("srv\0get.thing")[..12])
        );
        // Two raw names that normalize alike stay distinct.
        assert_ne!(
            public_tool_name("srv", "a.b"),
            public_tool_name("srv", "a/b")
        );
        // Too long: cut to 51 characters, then the hash.
        let long = "x".repeat(80);
        let name = public_tool_name("srv", &long);
        assert_eq!(name.len(), 64);
        assert_eq!(&name[..51], &format!("mcp__srv__{long}")[..51]);
        assert_eq!(&name[51..52], "_");
        // A character outside the BMP is two UTF-16 units, so two underscores.
        assert!(public_tool_name("s", "a😀b").starts_with("mcp__s__a__b_"));
        // Exactly 64 clean characters is not changed.
        let exact = "y".repeat(64 - "mcp__s__".len());
        assert_eq!(public_tool_name("s", &exact), format!("mcp__s__{exact}"));
    }

    fn sha_hex(s: &str) -> String {
        let out = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(s.as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        String::from_utf8(out.stdout).unwrap()[..64].to_string()
    }
}
