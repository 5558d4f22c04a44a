//! Live configuration: a settings section layered over the row config, re-resolved per
//! request.
//!
//! Layering is deliberately simple: objects merge key by key (recursively); arrays, scalars
//! and `null` replace the value below them (so `null` clears a key back to its default). A
//! settings source returning a non-object (usually `null`: no section) adds nothing.
//! Resolution is memoised on the merged value. A snapshot that fails validation keeps the
//! last good configuration and logs once per bad snapshot, as upstream does.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::deps::SettingsSource;

/// Merges `overlay` into `base`: objects deep-merge, everything else replaces.
pub fn layer_settings(base: &mut Value, overlay: Value) {
    match (base, overlay) {
        (Value::Object(base), Value::Object(overlay)) => {
            for (key, value) in overlay {
                match base.get_mut(&key) {
                    Some(slot) if slot.is_object() && value.is_object() => {
                        layer_settings(slot, value)
                    }
                    _ => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, overlay) => *base = overlay,
    }
}

type Resolver<T> = Box<dyn Fn(&Value) -> Result<T, String> + Send + Sync>;

struct Memo<T> {
    raw: Value,
    good: Arc<T>,
}

/// A resolved configuration kept current with its settings source.
pub(crate) struct LiveConfig<T> {
    base: Value,
    source: Option<SettingsSource>,
    resolve: Resolver<T>,
    /// The label of the keep-last-good log line (`llm-deepseek`).
    label: &'static str,
    memo: Mutex<Memo<T>>,
}

impl<T> LiveConfig<T> {
    /// Resolves the initial configuration (row config plus the current settings); fails
    /// loudly when that is invalid.
    /// `origin` names the settings section in errors it causes.
    pub(crate) fn new(
        base: Value,
        source: Option<SettingsSource>,
        origin: Option<&str>,
        label: &'static str,
        resolve: Resolver<T>,
    ) -> Result<Self, String> {
        let raw = merged(&base, source.as_ref());
        let good = match resolve(&raw) {
            Ok(good) => Arc::new(good),
            // The row alone is fine: the settings section is what broke it.
            Err(error) if raw != base && resolve(&base).is_ok() => {
                return Err(match origin {
                    Some(origin) => format!("{origin}: {error}"),
                    None => format!("{error} (from the live settings section)"),
                });
            }
            Err(error) => return Err(error),
        };
        Ok(Self {
            base,
            source,
            resolve,
            label,
            memo: Mutex::new(Memo { raw, good }),
        })
    }

    /// The configuration for one operation.
    pub(crate) fn current(&self) -> Arc<T> {
        if self.source.is_none() {
            return self
                .memo
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .good
                .clone();
        }
        let raw = merged(&self.base, self.source.as_ref());
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        if memo.raw == raw {
            return memo.good.clone();
        }
        match (self.resolve)(&raw) {
            Ok(next) => memo.good = Arc::new(next),
            Err(error) => {
                tracing::error!(
                    "{}: keeping the last good configuration after an invalid settings section",
                    self.label
                );
                tracing::error!("{error}");
            }
        }
        memo.raw = raw;
        memo.good.clone()
    }
}

fn merged(base: &Value, source: Option<&SettingsSource>) -> Value {
    let mut raw = base.clone();
    if let Some(source) = source {
        let overlay = source();
        if overlay.is_object() {
            layer_settings(&mut raw, overlay);
        }
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn objects_merge_arrays_and_nulls_replace() {
        let mut base = json!({"a": 1, "o": {"x": 1, "y": [1, 2]}, "list": [1, 2, 3], "keep": true});
        layer_settings(
            &mut base,
            json!({"a": 2, "o": {"y": [9], "z": 3}, "list": [4], "keep": null}),
        );
        assert_eq!(
            base,
            json!({"a": 2, "o": {"x": 1, "y": [9], "z": 3}, "list": [4], "keep": null})
        );
    }

    #[test]
    fn invalid_snapshots_keep_the_last_good_one() {
        let section = Arc::new(Mutex::new(json!(null)));
        let source = section.clone();
        let live = LiveConfig::new(
            json!({"n": 1}),
            Some(Arc::new(move || source.lock().expect("lock").clone())),
            None,
            "test",
            Box::new(|v: &Value| {
                v["n"]
                    .as_u64()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| "n must be positive".to_string())
            }),
        )
        .expect("valid");
        assert_eq!(*live.current(), 1);
        *section.lock().expect("lock") = json!({"n": 5});
        assert_eq!(*live.current(), 5);
        *section.lock().expect("lock") = json!({"n": 0});
        assert_eq!(*live.current(), 5);
        *section.lock().expect("lock") = json!(null);
        assert_eq!(*live.current(), 1);
    }
}
