//! Secret hygiene for every process a tool starts and every path a tool opens: the child
//! environment scrub (credential-shaped names, every `DSH_*` name, and any value that holds
//! a known secret or a URL with a password), the credential files no confined process may
//! read, and the `/proc` files that expose another process's environment or memory.

use std::path::{Path, PathBuf};
use std::sync::{OnceLock, RwLock};

/// Secret values this process knows (provider keys it resolved), matched against child
/// environment values.
fn known_values() -> &'static RwLock<Vec<String>> {
    static KNOWN: OnceLock<RwLock<Vec<String>>> = OnceLock::new();
    KNOWN.get_or_init(|| RwLock::new(Vec::new()))
}

/// Shorter values are too likely to occur by chance to be matched.
const MIN_SECRET_LEN: usize = 8;

/// Remembers a secret value (an API key the harness resolved) so that no child environment
/// variable carrying it survives the scrub, whatever its name.
pub fn remember_secret(value: &str) {
    let value = value.trim();
    if value.len() < MIN_SECRET_LEN {
        return;
    }
    let mut known = known_values().write().unwrap_or_else(|p| p.into_inner());
    if !known.iter().any(|k| k == value) {
        known.push(value.to_string());
    }
}

/// Name fragments that mark a credential anywhere in a name (upstream's rule).
const SECRET_SUBSTRINGS: [&str; 4] = ["KEY", "PASSWORD", "SECRET", "TOKEN"];
/// `_`-separated words that mark a credential (`NPM_AUTH`, `GITHUB_PAT`).
const SECRET_WORDS: [&str; 6] = [
    "AUTH",
    "PAT",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "CREDENTIALS",
];
/// Names kept although they match: they locate an agent, they hold no secret.
const KEPT_NAMES: [&str; 1] = ["SSH_AUTH_SOCK"];

/// Whether an inherited variable name must not reach a child.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if KEPT_NAMES.contains(&upper.as_str()) {
        return false;
    }
    upper.starts_with("DSH_")
        || SECRET_SUBSTRINGS.iter().any(|s| upper.contains(s))
        || upper.split('_').any(|w| SECRET_WORDS.contains(&w))
}

/// Whether a value carries a URL with a password (`scheme://user:pass@host`).
pub(crate) fn has_url_password(value: &str) -> bool {
    value.match_indices("://").any(|(i, _)| {
        let rest = &value[i + 3..];
        let authority = rest.split(['/', '?', '#', ' ']).next().unwrap_or_default();
        authority.rsplit_once('@').is_some_and(|(userinfo, _)| {
            userinfo.split_once(':').is_some_and(|(_, p)| !p.is_empty())
        })
    })
}

/// The secret values this process knows (see [`remember_secret`]).
pub(crate) fn known_secret_values() -> Vec<String> {
    known_values()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// Whether a value must not reach a child: it holds a known secret or a URL password.
pub fn is_secret_value(value: &str) -> bool {
    if has_url_password(value) {
        return true;
    }
    let known = known_values().read().unwrap_or_else(|p| p.into_inner());
    known.iter().any(|k| value.contains(k.as_str()))
}

/// The environment a child inherits from `vars` (usually the process environment).
pub fn scrub_env(vars: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
    vars.into_iter()
        .filter(|(k, v)| !is_secret_name(k) && !is_secret_value(v))
        .collect()
}

/// The process environment, scrubbed. The scrub is done once and kept: dsh never changes
/// its own environment after [`crate::environ::capture_secrets_from_environment`] (first
/// thing in `main`, before any child starts), and a newly remembered secret value starts a
/// fresh scrub. (Every command the agent runs asks for this; scrubbing anew each time was a
/// noticeable part of a step.)
pub fn scrubbed_process_env() -> Vec<(String, String)> {
    /// The scrub and the number of known secrets it was done with.
    type Kept = Option<(usize, Vec<(String, String)>)>;
    static KEPT: std::sync::Mutex<Kept> = std::sync::Mutex::new(None);
    // `remember_secret` only ever adds values: their count names the set.
    let known = known_values()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .len();
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((count, env)) = kept.as_ref()
        && *count == known
    {
        return env.clone();
    }
    let env = scrub_env(
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
    );
    *kept = Some((known, env.clone()));
    env
}

/// The complete environment of a child process: the scrubbed process environment, the
/// terminal overrides (no colour, no pager), then `trusted` (the managed `DSH_*` facts);
/// later layers win.
pub fn child_env(trusted: &[(String, String)]) -> Vec<(String, String)> {
    let mut env = scrubbed_process_env();
    let overrides = [
        ("NO_COLOR", "1"),
        ("TERM", "dumb"),
        ("PAGER", "cat"),
        ("GIT_PAGER", "cat"),
    ];
    let layered = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain(trusted.iter().cloned());
    for (key, value) in layered {
        match env.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => env.push((key, value)),
        }
    }
    env
}

/// The Harness home: one definition for the whole build ([`crate::dsh_home`]).
pub use crate::config::dsh_home;

/// The credential files of an installation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecretPaths {
    files: Vec<PathBuf>,
}

impl SecretPaths {
    /// `.credentials.yaml` and `.env` of the Harness home `home`.
    pub fn for_home(home: &Path) -> Self {
        Self {
            files: vec![home.join(".credentials.yaml"), home.join(".env")],
        }
    }

    /// The files that exist now, by their canonical path.
    pub fn existing(&self) -> Vec<PathBuf> {
        // One `stat` tells a missing file (the usual case) without resolving every
        // component of its path.
        self.files
            .iter()
            .filter(|f| f.exists())
            .filter_map(|f| std::fs::canonicalize(f).ok())
            .filter(|f| f.is_file())
            .collect()
    }

    /// Whether `canonical` (an already canonicalised path) is one of the credential files
    /// or a `/proc` file exposing a process's environment or memory.
    pub fn is_secret(&self, canonical: &Path) -> bool {
        is_proc_secret(canonical) || self.existing().iter().any(|f| f == canonical)
    }
}

/// Whether a canonical path is a credential file of this installation (`$DSH_HOME`) or a
/// `/proc` secret.
pub fn is_secret_path(canonical: &Path) -> bool {
    if is_proc_secret(canonical) {
        return true;
    }
    static HOME: OnceLock<SecretPaths> = OnceLock::new();
    HOME.get_or_init(|| SecretPaths::for_home(&dsh_home()))
        .is_secret(canonical)
}

/// Whether an already opened file is a credential file of this installation or a `/proc`
/// secret. The verdict is about the file itself — its inode for the credential files (so a
/// hard link or a swapped path segment is recognized) and its `/proc` name for procfs files —
/// so a concurrent swap of a path segment between a path check and the open cannot slip a
/// secret through.
pub fn is_secret_file(file: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(meta) = file.metadata() else {
        return true;
    };
    if is_on_procfs(file) {
        // Name the procfs file by what the kernel says the descriptor is; unknown is secret.
        return match std::fs::read_link(opened_fd_path(file)) {
            Ok(path) => is_proc_secret(&path),
            Err(_) => true,
        };
    }
    static HOME: OnceLock<SecretPaths> = OnceLock::new();
    let home = HOME.get_or_init(|| SecretPaths::for_home(&dsh_home()));
    home.files
        .iter()
        .any(|f| std::fs::metadata(f).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino()))
}

/// `/proc/self/fd/<n>` of an open file.
fn opened_fd_path(file: &std::fs::File) -> PathBuf {
    use std::os::fd::AsRawFd as _;
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// Whether the file lives on a procfs mount.
fn is_on_procfs(file: &std::fs::File) -> bool {
    const PROC_SUPER_MAGIC: i64 = 0x9fa0;
    rustix::fs::fstatfs(file).is_ok_and(|s| s.f_type == PROC_SUPER_MAGIC)
}

/// Why [`open_for_read`] did not hand out a file.
#[derive(Debug)]
pub enum OpenForRead {
    /// The opened file is a credential file or a `/proc` secret.
    Secret,
    /// The open itself failed.
    Io(std::io::Error),
}

/// Opens `path` read-only the way any open does (symlinks followed), without blocking on a
/// FIFO and without taking a controlling terminal, then refuses the file if
/// [`is_secret_file`] says so. Tools read through this instead of checking a path first and
/// opening it afterwards.
pub fn open_for_read(path: &Path) -> Result<std::fs::File, OpenForRead> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY).bits() as i32)
        .open(path)
        .map_err(OpenForRead::Io)?;
    if is_secret_file(&file) {
        return Err(OpenForRead::Secret);
    }
    // Reads of regular files ignore O_NONBLOCK; clear it anyway so a device or FIFO a caller
    // chooses to read behaves as a normal blocking descriptor.
    let _ = rustix::fs::fcntl_setfl(&file, rustix::fs::OFlags::empty());
    Ok(file)
}

/// `/proc/<pid|self|thread-self>[/task/<tid>]/{environ,mem,auxv,pagemap}`.
pub fn is_proc_secret(path: &Path) -> bool {
    let parts: Vec<&str> = path
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    let is_pid =
        |s: &str| s == "self" || s == "thread-self" || s.bytes().all(|b| b.is_ascii_digit());
    let secret_leaf = |s: &str| matches!(s, "environ" | "mem" | "auxv" | "pagemap");
    match parts.as_slice() {
        ["proc", pid, leaf] => is_pid(pid) && secret_leaf(leaf),
        ["proc", pid, "task", tid, leaf] => is_pid(pid) && is_pid(tid) && secret_leaf(leaf),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    /// The kept scrub is the scrub of the moment, and a secret remembered later leaves it.
    #[test]
    fn the_kept_scrub_drops_a_secret_remembered_later() {
        // cargo runs tests with this variable set; its value is a path, long enough to count.
        let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
        let fresh = || {
            scrub_env(
                std::env::vars_os()
                    .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
            )
        };
        let first = scrubbed_process_env();
        assert_eq!(first, fresh());
        assert_eq!(first, scrubbed_process_env());
        assert!(first.iter().any(|(k, _)| k == "CARGO_MANIFEST_DIR"));
        remember_secret(&dir);
        let after = scrubbed_process_env();
        assert!(after.iter().all(|(_, v)| !v.contains(&dir)), "{after:?}");
        assert_eq!(after, fresh());
    }

    #[test]
    fn names_values_and_urls_are_scrubbed() {
        for name in [
            "DEEPSEEK_API_KEY",
            "GITHUB_TOKEN",
            "GITHUB_PAT",
            "NPM_AUTH",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
            "GPG_PASSPHRASE",
            "dsh_home",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "GIT_AUTHOR_NAME",
            "SSH_AUTH_SOCK",
            "PWD",
            "PATCH_LEVEL",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
        remember_secret("sk-known-secret-value");
        let env = scrub_env([
            ("PATH".to_string(), "/bin".to_string()),
            (
                "DATABASE_URL".to_string(),
                "postgres://u:pw@db/x".to_string(),
            ),
            (
                "PLAIN_URL".to_string(),
                "https://example.com/a@b".to_string(),
            ),
            (
                "RENAMED".to_string(),
                "prefix sk-known-secret-value".to_string(),
            ),
            ("SHORT".to_string(), "sk".to_string()),
        ]);
        assert_eq!(
            env,
            vec![
                ("PATH".to_string(), "/bin".to_string()),
                (
                    "PLAIN_URL".to_string(),
                    "https://example.com/a@b".to_string()
                ),
                ("SHORT".to_string(), "sk".to_string()),
            ]
        );
    }

    #[test]
    fn proc_environ_and_credentials_are_secret_paths() {
        for p in [
            "/proc/self/environ",
            "/proc/1/environ",
            "/proc/thread-self/mem",
            "/proc/42/task/43/environ",
        ] {
            assert!(is_proc_secret(Path::new(p)), "{p}");
        }
        for p in ["/proc/self/status", "/proc/cpuinfo", "/home/u/environ"] {
            assert!(!is_proc_secret(Path::new(p)), "{p}");
        }
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join(".credentials.yaml"), "k: v").unwrap();
        let secrets = SecretPaths::for_home(home.path());
        let creds = std::fs::canonicalize(home.path().join(".credentials.yaml")).unwrap();
        assert!(secrets.is_secret(&creds));
        assert_eq!(secrets.existing(), vec![creds]);
    }
}
