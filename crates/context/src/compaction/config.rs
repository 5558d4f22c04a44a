//! The `compaction-basic` row: upstream's keys, defaults and load-time errors.

use serde_json::{Map, Value};

/// The compaction policy of one model.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub threshold_ratio: f64,
    pub retain: Retain,
    pub max_tokens: u64,
    pub compaction_retries: u32,
    pub max_overflow_retries: u32,
}

/// How much recent history a compaction keeps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Retain {
    Ratio(f64),
    Tokens(u64),
}

/// The `compaction-basic` row.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionConfig {
    pub policy: Policy,
    pub summarization: Option<(String, String)>,
    pub model_policies: Vec<(String, String, Policy)>,
    pub auto: bool,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            policy: Policy {
                threshold_ratio: 0.8,
                retain: Retain::Ratio(0.16),
                max_tokens: 8192,
                compaction_retries: 1,
                max_overflow_retries: 1,
            },
            summarization: None,
            model_policies: Vec::new(),
            auto: true,
        }
    }
}

fn ratio(key: &str, v: &Value) -> Result<f64, String> {
    v.as_f64()
        .filter(|r| *r > 0.0 && *r <= 1.0)
        .ok_or_else(|| format!("BasicCompactionConfig: {key} must be a number in (0, 1]"))
}

fn count(key: &str, v: &Value, min: u64) -> Result<u64, String> {
    v.as_u64()
        .filter(|n| *n >= min)
        .ok_or_else(|| format!("BasicCompactionConfig: {key} must be an integer >= {min}"))
}

/// Every key of the row config (`dsh --dump-config-schema`).
pub(crate) const KEYS: &[&str] = &[
    "thresholdRatio",
    "retainRatio",
    "retainTokens",
    "maxTokens",
    "compactionRetries",
    "maxOverflowRetries",
    "summarizationProvider",
    "summarizationModel",
    "modelPolicies",
    "auto",
];

fn apply_policy(
    policy: &mut Policy,
    map: &Map<String, Value>,
    allowed_extra: &[&str],
) -> Result<(), String> {
    let mut retain_set = false;
    for (k, v) in map {
        match k.as_str() {
            "thresholdRatio" => policy.threshold_ratio = ratio(k, v)?,
            "retainRatio" | "retainTokens" if retain_set => {
                return Err(
                    "BasicCompactionConfig: retainRatio and retainTokens are mutually exclusive"
                        .into(),
                );
            }
            "retainRatio" => {
                policy.retain = Retain::Ratio(ratio(k, v)?);
                retain_set = true;
            }
            "retainTokens" => {
                policy.retain = Retain::Tokens(count(k, v, 0)?);
                retain_set = true;
            }
            "maxTokens" => policy.max_tokens = count(k, v, 1)?,
            "compactionRetries" => policy.compaction_retries = count(k, v, 0)? as u32,
            "maxOverflowRetries" => policy.max_overflow_retries = count(k, v, 0)? as u32,
            other if allowed_extra.contains(&other) => {}
            other => return Err(format!("BasicCompactionConfig: unknown key \"{other}\"")),
        }
    }
    if let Retain::Ratio(r) = policy.retain
        && r >= policy.threshold_ratio
    {
        return Err(
            "BasicCompactionConfig: retainRatio must be smaller than thresholdRatio".into(),
        );
    }
    Ok(())
}

impl CompactionConfig {
    /// Parses and validates the row (upstream's keys and messages).
    pub fn parse(value: &Value) -> Result<Self, String> {
        let mut c = CompactionConfig::default();
        let empty = Map::new();
        let map = match value {
            Value::Null => &empty,
            Value::Object(m) => m,
            _ => return Err("BasicCompactionConfig: config must be an object".into()),
        };
        let extra = [
            "summarizationProvider",
            "summarizationModel",
            "modelPolicies",
            "auto",
        ];
        apply_policy(&mut c.policy, map, &extra)?;
        let text = |k: &str| map.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        match (text("summarizationProvider"), text("summarizationModel")) {
            (p, m) if p.is_empty() && m.is_empty() => {}
            (p, m) if !p.is_empty() && !m.is_empty() => c.summarization = Some((p, m)),
            _ => {
                return Err("BasicCompactionConfig: summarizationProvider and summarizationModel must be set together".into());
            }
        }
        if let Some(auto) = map.get("auto") {
            c.auto = auto
                .as_bool()
                .ok_or("BasicCompactionConfig: auto must be a boolean")?;
        }
        if let Some(list) = map.get("modelPolicies") {
            let list = list
                .as_array()
                .ok_or("BasicCompactionConfig: modelPolicies must be an array")?;
            for entry in list {
                let m = entry
                    .as_object()
                    .ok_or("BasicCompactionConfig: modelPolicies entries must be objects")?;
                let (Some(p), Some(model)) = (
                    m.get("provider").and_then(Value::as_str),
                    m.get("model").and_then(Value::as_str),
                ) else {
                    return Err(
                        "BasicCompactionConfig: modelPolicies entries need provider and model"
                            .into(),
                    );
                };
                if c.model_policies
                    .iter()
                    .any(|(a, b, _)| a == p && b == model)
                {
                    return Err(format!(
                        "BasicCompactionConfig: duplicate modelPolicies entry {p}/{model}"
                    ));
                }
                let mut policy = c.policy.clone();
                apply_policy(&mut policy, m, &["provider", "model"])?;
                c.model_policies.push((p.into(), model.into(), policy));
            }
        }
        Ok(c)
    }

    pub(crate) fn policy_for(&self, provider: &str, model: &str) -> &Policy {
        self.model_policies
            .iter()
            .find(|(p, m, _)| p == provider && m == model)
            .map_or(&self.policy, |(_, _, policy)| policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn rows_parse_with_upstream_defaults_and_errors() {
        let d = CompactionConfig::parse(&Value::Null).unwrap();
        assert_eq!(d, CompactionConfig::default());
        let acp = CompactionConfig::parse(&json!({"thresholdRatio": 0.8, "retainRatio": 0.08, "maxTokens": 8192, "compactionRetries": 1})).unwrap();
        assert_eq!(acp.policy.retain, Retain::Ratio(0.08));
        let per_model = CompactionConfig::parse(
            &json!({"modelPolicies": [{"provider": "p", "model": "m", "retainTokens": 100}]}),
        )
        .unwrap();
        assert_eq!(per_model.policy_for("p", "m").retain, Retain::Tokens(100));
        assert_eq!(
            per_model.policy_for("p", "other").retain,
            Retain::Ratio(0.16)
        );
        for (bad, msg) in [
            (
                json!({"nope": 1}),
                "BasicCompactionConfig: unknown key \"nope\"",
            ),
            (
                json!({"thresholdRatio": 0}),
                "thresholdRatio must be a number in (0, 1]",
            ),
            (
                json!({"retainRatio": 0.9}),
                "retainRatio must be smaller than thresholdRatio",
            ),
            (
                json!({"retainRatio": 0.1, "retainTokens": 5}),
                "mutually exclusive",
            ),
            (
                json!({"summarizationProvider": "p"}),
                "must be set together",
            ),
            (
                json!({"modelPolicies": [{"provider": "p", "model": "m"}, {"provider": "p", "model": "m"}]}),
                "duplicate modelPolicies entry p/m",
            ),
        ] {
            let e = CompactionConfig::parse(&bad).unwrap_err();
            assert!(e.contains(msg), "{e}");
        }
    }
}
