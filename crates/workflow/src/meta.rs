//! The workflow's identity block (`meta`): plain JSON data, checked by name against the
//! contract and normalized (unknown keys and wrong types are all reported together).

use serde_json::{Map, Value};

/// One declared phase.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    pub title: String,
    pub detail: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
}

/// A validated `meta`.
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    pub name: String,
    pub description: String,
    pub when_to_use: Option<String>,
    pub phases: Option<Vec<Phase>>,
}

const META_KEYS: [&str; 4] = ["name", "description", "whenToUse", "phases"];
const PHASE_KEYS: [&str; 4] = ["title", "detail", "provider", "model"];

fn non_empty(map: &Map<String, Value>, key: &str) -> Option<String> {
    map.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// Optional string field: `Ok(None)` when absent, `Err` when present but not a string.
fn optional(map: &Map<String, Value>, key: &str) -> Result<Option<String>, ()> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(()),
    }
}

/// Validates `value`; the error lists every violation (`invalid meta: a; b`).
pub fn validate_meta(value: &Value) -> Result<Meta, String> {
    let fail = |v: Vec<String>| Err(format!("invalid meta: {}", v.join("; ")));
    let Some(map) = value.as_object() else {
        return fail(vec!["meta must be an object".into()]);
    };
    let mut violations = Vec::new();
    for key in map.keys() {
        if !META_KEYS.contains(&key.as_str()) {
            violations.push(format!(
                "meta.{key} is unknown (allowed: name, description, whenToUse, phases)"
            ));
        }
    }
    let name = non_empty(map, "name");
    if name.is_none() {
        violations.push("meta.name must be a non-empty string".into());
    }
    let description = non_empty(map, "description");
    if description.is_none() {
        violations.push("meta.description must be a non-empty string".into());
    }
    let when_to_use = optional(map, "whenToUse").unwrap_or_else(|()| {
        violations.push("meta.whenToUse must be a string".into());
        None
    });
    let mut phases = None;
    match map.get("phases") {
        None => {}
        Some(Value::Array(list)) => {
            let mut out = Vec::new();
            for (i, entry) in list.iter().enumerate() {
                let Some(p) = entry.as_object() else {
                    violations.push(format!("meta.phases[{i}] must be an object"));
                    continue;
                };
                for key in p.keys() {
                    if !PHASE_KEYS.contains(&key.as_str()) {
                        violations
                            .push(format!("meta.phases[{i}].{key} is unknown (allowed: title, detail, provider, model)"));
                    }
                }
                let title = non_empty(p, "title");
                if title.is_none() {
                    violations.push(format!("meta.phases[{i}].title must be a non-empty string"));
                }
                let mut field = |key: &str| {
                    optional(p, key).unwrap_or_else(|()| {
                        violations.push(format!("meta.phases[{i}].{key} must be a string"));
                        None
                    })
                };
                let (detail, provider, model) =
                    (field("detail"), field("provider"), field("model"));
                out.push(Phase {
                    title: title.unwrap_or_default(),
                    detail,
                    provider,
                    model,
                });
            }
            phases = Some(out);
        }
        Some(_) => violations.push("meta.phases must be an array".into()),
    }
    if !violations.is_empty() {
        return fail(violations);
    }
    Ok(Meta {
        name: name.unwrap_or_default(),
        description: description.unwrap_or_default(),
        when_to_use,
        phases,
    })
}

/// Whether the body declares its meta as code (`export const meta = …`), which the
/// contract puts in the `meta` parameter instead.
pub fn declares_meta_statement(body: &str) -> bool {
    body.lines().any(|line| {
        let mut words = line.split_whitespace();
        words.next() == Some("export")
            && words.next() == Some("const")
            && words
                .next()
                .is_some_and(|w| w == "meta" || w.starts_with("meta=") || w.starts_with("meta:"))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_violation_is_named() {
        assert_eq!(
            validate_meta(
                &json!({"name": "", "description": "d", "extra": 1, "phases": [{"title": 3, "x": 1}]})
            ),
            Err("invalid meta: meta.extra is unknown (allowed: name, description, whenToUse, phases); meta.name must be a non-empty string; meta.phases[0].x is unknown (allowed: title, detail, provider, model); meta.phases[0].title must be a non-empty string".into())
        );
        assert_eq!(
            validate_meta(&json!({"name": "n"})),
            Err("invalid meta: meta.description must be a non-empty string".into())
        );
        assert_eq!(
            validate_meta(&json!([])),
            Err("invalid meta: meta must be an object".into())
        );
        let ok = validate_meta(
            &json!({"name": "n", "description": "d", "phases": [{"title": "A", "model": "m"}]}),
        )
        .unwrap();
        assert_eq!(ok.name, "n");
        assert_eq!(ok.phases.unwrap()[0].model.as_deref(), Some("m"));
    }

    #[test]
    fn meta_statements_are_spotted() {
        assert!(declares_meta_statement("export const meta = {}\nreturn 1"));
        assert!(!declares_meta_statement("const meta = {}\nreturn meta"));
    }
}
