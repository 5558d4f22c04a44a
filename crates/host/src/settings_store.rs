//! Changing `settings.yaml` at runtime (a frontend's Settings page): replace one namespace
//! section, seen at once by [`Settings::live_section`] readers (providers re-read their
//! section per request), announced as `settings/changed` by whoever replaced it.
//!
//! A write re-reads the file, replaces one section and writes the whole document back
//! atomically (temp file, fsync, rename). Sections are emitted as JSON flow mappings (valid
//! YAML); comments cannot be kept, so the first rewrite of a file that has any keeps the
//! original as `settings.yaml.bak`.

use serde_json::{Map, Value};

use crate::config::{Settings, read_yaml_file};

/// Payload of [`SettingsChanged`].
pub struct SettingsChange {
    pub namespace: String,
}

/// `settings/changed` (emit, contained): a settings section was replaced at runtime.
/// Listeners refresh what they derived from it (an adapter's route set); a failing listener
/// is contained.
pub struct SettingsChanged;
impl dsh_kernel::Event for SettingsChanged {
    const NAME: &'static str = "settings/changed";
    type Payload = SettingsChange;
}
impl dsh_kernel::EmitEvent for SettingsChanged {}

/// Why a settings write was refused.
#[derive(Debug, thiserror::Error)]
pub enum SettingsWriteError {
    /// The section is not an object (or null to remove it). Not retryable.
    #[error("settings section \"{0}\" must be an object")]
    NotAnObject(String),
    /// The file exists but cannot be parsed; nothing was written. Not retryable until fixed.
    #[error("settings-file: {0}")]
    Unreadable(String),
    /// Writing failed. Retryable.
    #[error("settings-file: cannot write {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl Settings {
    /// The current section `namespace`: replaced at runtime, else as loaded.
    pub fn live_section(&self, namespace: &str) -> Option<Value> {
        let replaced = self.replaced.read().unwrap_or_else(|p| p.into_inner());
        match replaced.get(namespace) {
            Some(v) => Some(v.clone()).filter(Value::is_object),
            None => self.section(namespace).cloned(),
        }
    }

    /// Replaces section `namespace` in memory and in the file (`Null` removes it).
    pub fn replace_section(&self, namespace: &str, value: Value) -> Result<(), SettingsWriteError> {
        if !value.is_object() && !value.is_null() {
            return Err(SettingsWriteError::NotAnObject(namespace.to_string()));
        }
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut doc = match read_yaml_file(&self.path).map_err(SettingsWriteError::Unreadable)? {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m,
            Some(_) => {
                return Err(SettingsWriteError::Unreadable(format!(
                    "{} must be a map of namespace sections",
                    self.path.display()
                )));
            }
        };
        match &value {
            Value::Null => {
                doc.remove(namespace);
            }
            v => {
                doc.insert(namespace.to_string(), v.clone());
            }
        }
        let io = |source| SettingsWriteError::Io {
            path: self.path.display().to_string(),
            source,
        };
        if let Ok(Some(old)) = dsh_kernel::config::read_config_file(&self.path)
            && old.contains('#')
        {
            let backup = self.path.with_extension("yaml.bak");
            if !backup.exists() {
                std::fs::write(&backup, old).map_err(io)?;
            }
        }
        let mut text = String::from("# Written by dsh (sections as JSON flow mappings).\n");
        for (ns, v) in &doc {
            text.push_str(&format!("{}: {v}\n", Value::from(ns.as_str())));
        }
        crate::fs::write_private(&self.path, text.as_bytes()).map_err(io)?;
        self.replaced
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(namespace.to_string(), value);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn a_replaced_section_is_live_and_survives_a_reload_with_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.yaml");
        std::fs::write(
            &path,
            "# mine\nllm-deepseek:\n  baseURL: http://x\nother:\n  keep: 1\n",
        )
        .unwrap();
        let settings = Settings::load(path.clone()).unwrap();
        assert_eq!(settings.live_section("openai-compatible"), None);
        let section = json!({"providers": {"my-llm": {"baseURL": "http://127.0.0.1:9/v1", "models": [{"id": "m"}]}}});
        settings
            .replace_section("openai-compatible", section.clone())
            .unwrap();
        assert_eq!(
            settings.live_section("openai-compatible"),
            Some(section.clone())
        );
        let again = Settings::load(path.clone()).unwrap();
        assert_eq!(again.section("openai-compatible"), Some(&section));
        assert_eq!(again.section("other"), Some(&json!({"keep": 1})));
        assert_eq!(
            again.section("llm-deepseek"),
            Some(&json!({"baseURL": "http://x"}))
        );
        assert!(
            std::fs::read_to_string(dir.path().join("settings.yaml.bak"))
                .unwrap()
                .starts_with("# mine")
        );
        settings.replace_section("other", Value::Null).unwrap();
        assert_eq!(settings.live_section("other"), None);
        assert!(matches!(
            settings.replace_section("x", json!(3)),
            Err(SettingsWriteError::NotAnObject(_))
        ));
    }
}
