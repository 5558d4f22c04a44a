//! Reading configuration files (settings, credentials, patch layers, manifests) and other
//! text a user hands the harness, never more than a set number of bytes: a config path
//! pointing at `/dev/zero` or a huge file is an error naming the file and the limit, not an
//! endless read.

use std::io::Read;
use std::path::Path;

/// The environment variable that sets the largest config file read.
pub const MAX_CONFIG_BYTES_ENV: &str = "DSH_MAX_CONFIG_BYTES";
/// The default largest config file (a settings document with 100k keys is under 3 MiB).
pub const DEFAULT_MAX_CONFIG_BYTES: u64 = 16 << 20;

/// A config file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigFileError {
    /// The file holds more than `limit` bytes (or never ends, like a device). Not
    /// retryable until the file shrinks or the limit is raised through `setting`.
    #[error(
        "{path} is larger than {limit} bytes, the limit for {what} (set {setting} to raise it)"
    )]
    TooLarge {
        path: String,
        limit: u64,
        what: &'static str,
        setting: &'static str,
    },
    /// Opening or reading failed (permissions, a directory, invalid UTF-8).
    #[error("cannot read {path}: {message}")]
    Io { path: String, message: String },
    /// The limit setting itself is not a positive byte count.
    #[error("{0}")]
    Setting(String),
}

/// A positive byte count from environment variable `name`, or `default` when it is unset
/// or blank. Anything else is an error naming the variable.
pub fn byte_limit_from_env(name: &str, default: u64) -> Result<u64, String> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(raw) if raw.trim().is_empty() => Ok(default),
        Ok(raw) => match raw.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!(
                "{name} must be a positive number of bytes (got \"{raw}\")"
            )),
        },
    }
}

/// The largest config file read (`DSH_MAX_CONFIG_BYTES`, default 16 MiB).
pub fn max_config_bytes() -> Result<u64, ConfigFileError> {
    byte_limit_from_env(MAX_CONFIG_BYTES_ENV, DEFAULT_MAX_CONFIG_BYTES)
        .map_err(ConfigFileError::Setting)
}

/// Reads at most `limit` bytes of UTF-8 text from `reader`: `Ok(Err(()))` when there is
/// more (only `limit + 1` bytes are ever read).
pub fn read_text_bounded(reader: impl Read, limit: u64) -> std::io::Result<Result<String, ()>> {
    let mut bytes = Vec::new();
    reader
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Ok(Err(()));
    }
    String::from_utf8(bytes)
        .map(Ok)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not UTF-8 text"))
}

/// Reads the config file at `path` within the `DSH_MAX_CONFIG_BYTES` limit; `Ok(None)`
/// when it does not exist.
pub fn read_config_file(path: &Path) -> Result<Option<String>, ConfigFileError> {
    let limit = max_config_bytes()?;
    read_config_file_within(path, limit)
}

/// [`read_config_file`] with an explicit limit.
pub fn read_config_file_within(path: &Path, limit: u64) -> Result<Option<String>, ConfigFileError> {
    let io = |e: std::io::Error| ConfigFileError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    match read_text_bounded(file, limit).map_err(io)? {
        Ok(text) => Ok(Some(text)),
        Err(()) => Err(ConfigFileError::TooLarge {
            path: path.display().to_string(),
            limit,
            what: "a config file",
            setting: MAX_CONFIG_BYTES_ENV,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn files_past_the_limit_are_refused_naming_file_limit_and_setting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.yaml");
        std::fs::write(&path, "a: 1\n").unwrap();
        assert_eq!(
            read_config_file_within(&path, 5).unwrap(),
            Some("a: 1\n".to_string())
        );
        let err = read_config_file_within(&path, 4).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{} is larger than 4 bytes, the limit for a config file (set DSH_MAX_CONFIG_BYTES to raise it)",
                path.display()
            )
        );
        // A device that never ends stops at the limit.
        let err = read_config_file_within(Path::new("/dev/zero"), 1024).unwrap_err();
        assert!(
            matches!(err, ConfigFileError::TooLarge { limit: 1024, .. }),
            "{err}"
        );
        assert_eq!(
            read_config_file_within(&dir.path().join("missing.yml"), 4).unwrap(),
            None
        );
        std::fs::write(&path, [0xFFu8, 0xFE]).unwrap();
        let err = read_config_file_within(&path, 16).unwrap_err().to_string();
        assert!(err.contains("not UTF-8"), "{err}");
    }
}
