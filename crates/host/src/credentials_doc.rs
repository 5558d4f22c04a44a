//! The shape of `$DSH_HOME/.credentials.yaml`, checked by type. The file holds nothing but
//! credentials, so a value of the wrong type is an error naming the file and the key
//! (never the value: it may be a secret), not an entry quietly left out.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

/// The document version this build reads and writes.
pub(crate) const VERSION: u64 = 1;

/// A validated credentials document.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct CredentialsDoc {
    /// `refs`: reference name → non-empty string.
    pub refs: HashMap<String, String>,
    /// `records`: kept as stored (frontends own their shapes).
    pub records: Map<String, Value>,
}

/// How a JSON value's type reads in an error.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Whether `name` can be a credential reference: an environment-variable style name.
fn is_reference_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Checks the parsed document `root` of `file` by type.
pub(crate) fn validate(root: Map<String, Value>, file: &Path) -> Result<CredentialsDoc, String> {
    let file = file.display();
    let mut doc = CredentialsDoc::default();
    for (key, value) in root {
        match key.as_str() {
            "version" => match &value {
                Value::Number(n) if n.as_u64() == Some(VERSION) => {}
                Value::Number(_) => {
                    return Err(format!(
                        "{file} has an unsupported version (expected {VERSION})"
                    ));
                }
                other => {
                    return Err(format!(
                        "{file}: `version` must be the number {VERSION}, not {}",
                        kind(other)
                    ));
                }
            },
            "refs" => match value {
                Value::Null => {}
                Value::Object(refs) => {
                    for (name, value) in refs {
                        if !is_reference_name(&name) {
                            return Err(format!(
                                "{file}: refs key \"{name}\" is not a reference name (letters, digits and `_`, not starting with a digit)"
                            ));
                        }
                        match value {
                            Value::String(s) if s.trim().is_empty() => {
                                return Err(format!(
                                    "{file}: refs.{name} is empty; remove the key instead"
                                ));
                            }
                            Value::String(s) => {
                                doc.refs.insert(name, s);
                            }
                            other => {
                                return Err(format!(
                                    "{file}: refs.{name} must be a string, not {}",
                                    kind(&other)
                                ));
                            }
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "{file}: `refs` must be a mapping of reference names to strings, not {}",
                        kind(&other)
                    ));
                }
            },
            "records" => match value {
                Value::Null => {}
                Value::Object(records) => doc.records = records,
                other => {
                    return Err(format!(
                        "{file}: `records` must be a mapping, not {}",
                        kind(&other)
                    ));
                }
            },
            _ => return Err(format!("{file}: unknown top-level key \"{key}\"")),
        }
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn check(doc: Value) -> Result<CredentialsDoc, String> {
        let Value::Object(map) = doc else { panic!() };
        validate(map, Path::new("/h/.credentials.yaml"))
    }

    #[test]
    fn every_wrong_type_is_named_by_file_and_key_without_the_value() {
        let cases = [
            (
                json!({"version": "1"}),
                "/h/.credentials.yaml: `version` must be the number 1, not a string",
            ),
            (
                json!({"version": 2}),
                "/h/.credentials.yaml has an unsupported version (expected 1)",
            ),
            (
                json!({"version": 1, "refs": ["sk-secret"]}),
                "/h/.credentials.yaml: `refs` must be a mapping of reference names to strings, not a list",
            ),
            (
                json!({"version": 1, "refs": "sk-secret"}),
                "/h/.credentials.yaml: `refs` must be a mapping of reference names to strings, not a string",
            ),
            (
                json!({"version": 1, "refs": {"KEY": 12345}}),
                "/h/.credentials.yaml: refs.KEY must be a string, not a number",
            ),
            (
                json!({"version": 1, "refs": {"KEY": {"nested": "sk-secret"}}}),
                "/h/.credentials.yaml: refs.KEY must be a string, not a mapping",
            ),
            (
                json!({"version": 1, "refs": {"KEY": " "}}),
                "/h/.credentials.yaml: refs.KEY is empty; remove the key instead",
            ),
            (
                json!({"version": 1, "refs": {"9KEY": "v"}}),
                "/h/.credentials.yaml: refs key \"9KEY\" is not a reference name (letters, digits and `_`, not starting with a digit)",
            ),
            (
                json!({"version": 1, "records": [1]}),
                "/h/.credentials.yaml: `records` must be a mapping, not a list",
            ),
            (
                json!({"version": 1, "extra": {}}),
                "/h/.credentials.yaml: unknown top-level key \"extra\"",
            ),
        ];
        for (doc, want) in cases {
            let err = check(doc.clone()).unwrap_err();
            assert_eq!(err, want, "{doc}");
            assert!(!err.contains("sk-secret"), "{err}");
        }
        let ok = check(json!({
            "version": 1,
            "refs": {"DEEPSEEK_API_KEY": "sk-1", "_X2": "v"},
            "records": {"web/session": null}
        }))
        .unwrap();
        assert_eq!(ok.refs.len(), 2);
        assert_eq!(ok.records.len(), 1);
        assert_eq!(
            check(json!({"refs": null, "records": null})).unwrap(),
            CredentialsDoc::default()
        );
    }
}
