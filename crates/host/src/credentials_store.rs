//! Changing `$DSH_HOME/.credentials.yaml` at runtime: set and unset refs (a frontend's
//! "save key"), describe where a ref resolves from without revealing it, and keep
//! frontend-owned `records` (e.g. the browser-session signing secret).
//!
//! Every write re-reads the file, changes one entry and replaces the file atomically
//! (temp file in the same directory with mode 0600, fsync, rename, directory fsync), so
//! entries written by another process in between survive. The document is emitted as
//! block YAML whose scalars are JSON strings and whose `records` are a JSON flow mapping
//! (both valid YAML that upstream's reader accepts); comments are not preserved.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::config::{Credentials, read_yaml_file};

/// Where a credential ref currently resolves from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialSource {
    /// The launching environment (always wins; cannot be changed from dsh).
    Environment,
    /// `refs` in `$DSH_HOME/.credentials.yaml`.
    File,
    /// `<cwd>/.env`.
    ProjectDotenv,
    /// `$DSH_HOME/.env`.
    UserDotenv,
}

impl CredentialSource {
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialSource::Environment => "env",
            CredentialSource::File => "file",
            CredentialSource::ProjectDotenv => "project-dotenv",
            CredentialSource::UserDotenv => "user-dotenv",
        }
    }
}

/// What may be shown about a ref: never its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CredentialState {
    /// `None`: the ref resolves nowhere.
    pub source: Option<CredentialSource>,
    /// Whether saving the ref in the file would take effect (the environment shadows it).
    pub writable: bool,
}

/// Why a credential write was refused.
#[derive(Debug, thiserror::Error)]
pub enum CredentialWriteError {
    /// The ref name is not an identifier (`[A-Za-z_][A-Za-z0-9_]*`). Not retryable.
    #[error(
        "credential name \"{0}\" is not valid: use letters, digits and _, not starting with a digit"
    )]
    InvalidName(String),
    /// The value is empty or holds a line break. Not retryable.
    #[error("the value for {0} is empty or spans several lines")]
    InvalidValue(String),
    /// The launching environment sets the ref, so a stored value would never be used.
    /// Not retryable until dsh is started without it.
    #[error(
        "{0} is set in the environment dsh was started with, which takes precedence; unset it there to store a key here"
    )]
    ShadowedByEnvironment(String),
    /// The file exists but is not a credentials document this build can rewrite
    /// without losing data. Not retryable until the file is fixed.
    #[error("credentials-local: {0}")]
    Unreadable(String),
    /// Writing the file failed (disk full, permissions). Retryable.
    #[error("credentials-local: cannot write {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn env_value(name: &str) -> Option<String> {
    crate::environ::secret_var(name).filter(|v| !v.is_empty())
}

impl Credentials {
    /// Where `name` resolves from, without its value.
    pub fn describe(&self, name: &str) -> CredentialState {
        let from_env = env_value(name).is_some();
        let source = if from_env {
            Some(CredentialSource::Environment)
        } else if self
            .refs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .is_some_and(|v| !v.is_empty())
        {
            Some(CredentialSource::File)
        } else if self.project_env_has(name) {
            Some(CredentialSource::ProjectDotenv)
        } else if self.user_env_has(name) {
            Some(CredentialSource::UserDotenv)
        } else {
            None
        };
        CredentialState {
            source,
            writable: !from_env,
        }
    }

    /// Stores `value` under `refs.<name>`; the next `resolve(name)` returns it.
    pub fn set(&self, name: &str, value: &str) -> Result<(), CredentialWriteError> {
        if !valid_name(name) {
            return Err(CredentialWriteError::InvalidName(name.to_string()));
        }
        let value = value.trim();
        if value.is_empty() || value.contains(['\n', '\r']) {
            return Err(CredentialWriteError::InvalidValue(name.to_string()));
        }
        if env_value(name).is_some() {
            return Err(CredentialWriteError::ShadowedByEnvironment(
                name.to_string(),
            ));
        }
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut doc = self.read_document()?;
        doc.refs.insert(name.to_string(), value.to_string());
        self.write_document(&doc)?;
        crate::secrets::remember_secret(value);
        self.refs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), value.to_string());
        Ok(())
    }

    /// Removes `refs.<name>`; returns whether it was stored. Idempotent.
    pub fn unset(&self, name: &str) -> Result<bool, CredentialWriteError> {
        if !valid_name(name) {
            return Err(CredentialWriteError::InvalidName(name.to_string()));
        }
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut doc = self.read_document()?;
        let existed = doc.refs.remove(name).is_some();
        if existed {
            self.write_document(&doc)?;
        }
        self.refs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        Ok(existed)
    }

    /// The record stored under `records.<key>`, creating it with `make()` when absent.
    /// Frontends keep their own state here (upstream's browser-session grant).
    pub fn record_or_insert(
        &self,
        key: &str,
        make: impl FnOnce() -> Value,
    ) -> Result<Value, CredentialWriteError> {
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut doc = self.read_document()?;
        if let Some(existing) = doc.records.get(key) {
            return Ok(existing.clone());
        }
        let value = make();
        doc.records.insert(key.to_string(), value.clone());
        self.write_document(&doc)?;
        Ok(value)
    }

    fn project_env_has(&self, name: &str) -> bool {
        self.project_env.get(name).is_some_and(|v| !v.is_empty())
    }

    fn user_env_has(&self, name: &str) -> bool {
        self.user_env.get(name).is_some_and(|v| !v.is_empty())
    }

    fn read_document(&self) -> Result<Document, CredentialWriteError> {
        let unreadable = |msg: String| CredentialWriteError::Unreadable(msg);
        let doc = match read_yaml_file(&self.file).map_err(unreadable)? {
            None | Some(Value::Null) => return Ok(Document::default()),
            Some(Value::Object(doc)) => doc,
            Some(_) => {
                return Err(unreadable(format!(
                    "{} must be a mapping",
                    self.file.display()
                )));
            }
        };
        let checked = crate::credentials_doc::validate(doc, &self.file)
            .map_err(|e| unreadable(format!("{e}; fix the file before saving credentials")))?;
        Ok(Document {
            refs: checked.refs,
            records: checked.records,
        })
    }

    fn write_document(&self, doc: &Document) -> Result<(), CredentialWriteError> {
        let text = doc.render();
        crate::fs::write_private(&self.file, text.as_bytes()).map_err(|source| {
            CredentialWriteError::Io {
                path: self.file.display().to_string(),
                source,
            }
        })
    }
}

#[derive(Default)]
struct Document {
    refs: HashMap<String, String>,
    records: Map<String, Value>,
}

impl Document {
    fn render(&self) -> String {
        let mut out = String::from("version: 1\n");
        if !self.records.is_empty() {
            out.push_str("records: ");
            out.push_str(&Value::Object(self.records.clone()).to_string());
            out.push('\n');
        }
        if self.refs.is_empty() {
            out.push_str("refs: {}\n");
        } else {
            out.push_str("refs:\n");
            let mut names: Vec<&String> = self.refs.keys().collect();
            names.sort();
            for name in names {
                // Names are identifiers; values are JSON strings (valid YAML double-quoted).
                out.push_str(&format!(
                    "  {name}: {}\n",
                    Value::from(self.refs[name].as_str())
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn set_and_unset_rewrite_the_file_keeping_records_and_resolve_at_once() {
        let home = tempfile::tempdir().unwrap();
        let file = home.path().join(".credentials.yaml");
        std::fs::write(
            &file,
            "version: 1\nrecords:\n  client-connection/browser-session:\n    kind: grant\n    payload: {version: 1, secret: abc}\nrefs:\n  OTHER_KEY: keep-me\n",
        )
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let creds = Credentials::load(home.path(), home.path()).unwrap();
        let name = "DSH_TEST_CREDSTORE_KEY";
        assert_eq!(creds.resolve(name), None);
        assert_eq!(creds.describe(name).source, None);
        creds.set(name, "sk-live-123\n").unwrap();
        assert_eq!(creds.resolve(name).as_deref(), Some("sk-live-123"));
        assert_eq!(
            creds.describe(name),
            CredentialState {
                source: Some(CredentialSource::File),
                writable: true
            }
        );
        // A fresh load sees everything: the new ref, the old ref and the record.
        let again = Credentials::load(home.path(), home.path()).unwrap();
        assert_eq!(again.resolve(name).as_deref(), Some("sk-live-123"));
        assert_eq!(again.resolve("OTHER_KEY").as_deref(), Some("keep-me"));
        let record = again
            .record_or_insert("client-connection/browser-session", || Value::Null)
            .unwrap();
        assert_eq!(record["payload"]["secret"], "abc");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        assert!(creds.unset(name).unwrap());
        assert!(!creds.unset(name).unwrap(), "unset is idempotent");
        assert_eq!(creds.resolve(name), None);
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(!text.contains("sk-live-123"), "{text}");
        assert!(text.contains("keep-me") && text.contains("client-connection/browser-session"));
    }

    #[test]
    fn bad_names_values_and_files_are_refused_without_touching_the_file() {
        let home = tempfile::tempdir().unwrap();
        let creds = Credentials::load(home.path(), home.path()).unwrap();
        assert!(matches!(
            creds.set("1BAD", "x"),
            Err(CredentialWriteError::InvalidName(_))
        ));
        assert!(matches!(
            creds.set("GOOD", " "),
            Err(CredentialWriteError::InvalidValue(_))
        ));
        assert!(matches!(
            creds.set("PATH", "x"),
            Err(CredentialWriteError::ShadowedByEnvironment(_))
        ));
        assert!(!home.path().join(".credentials.yaml").exists());
        // A record is created once and then returned as stored.
        let first = creds
            .record_or_insert("r", || serde_json::json!({"n": 1}))
            .unwrap();
        let second = creds
            .record_or_insert("r", || serde_json::json!({"n": 2}))
            .unwrap();
        assert_eq!(
            (first, second),
            (serde_json::json!({"n": 1}), serde_json::json!({"n": 1}))
        );
        std::fs::write(home.path().join(".credentials.yaml"), "version: 2\n").unwrap();
        assert!(matches!(
            creds.set("GOOD", "x"),
            Err(CredentialWriteError::Unreadable(_))
        ));
        assert_eq!(
            std::fs::read_to_string(home.path().join(".credentials.yaml")).unwrap(),
            "version: 2\n"
        );
    }
}
