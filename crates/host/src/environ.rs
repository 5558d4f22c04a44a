//! Keeping secrets out of dsh's own environment. A process's initial environment block is
//! readable as `/proc/<pid>/environ` by anything that may ptrace it — in
//! `danger-full-access` mode, every command the agent runs. Removing a variable with the
//! C library only unlinks it; its bytes stay in that block. So at startup, before any other
//! thread exists, credential-shaped variables are copied into a private snapshot, their
//! bytes in the block are zeroed, and they are removed from the environment. Credential
//! lookups then read [`secret_var`].

// The only unsafe code of this crate: raw access to `environ`, confined to this module.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{CStr, c_char};
use std::sync::OnceLock;

use crate::secrets::{has_url_password, is_secret_name, remember_secret};

static SNAPSHOT: OnceLock<HashMap<String, String>> = OnceLock::new();

unsafe extern "C" {
    static mut environ: *mut *mut c_char;
}

/// Moves credential-shaped variables (see [`is_secret_name`], `DSH_*` excepted, and values
/// with a URL password) out of the
/// process environment into the private snapshot and zeroes their bytes.
///
/// Must be called at most once, first thing in `main`, while the process has one thread:
/// nothing else may read or write the environment concurrently.
pub fn capture_secrets_from_environment() {
    let mut snapshot = HashMap::new();
    for (name, value) in std::env::vars_os() {
        let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
            continue;
        };
        let secret = (is_secret_name(name) && !name.to_ascii_uppercase().starts_with("DSH_"))
            || has_url_password(value);
        if secret && !value.is_empty() {
            snapshot.insert(name.to_string(), value.to_string());
        }
    }
    for (name, value) in &snapshot {
        remember_secret(value);
        // SAFETY: single-threaded at this point (documented precondition); `environ` is the
        // C library's NUL-terminated array of NUL-terminated `NAME=value` strings, which we
        // only read and overwrite in place within each string's own length.
        unsafe {
            let mut entry = environ;
            while !entry.is_null() && !(*entry).is_null() {
                let text = CStr::from_ptr(*entry).to_bytes();
                if text.len() > name.len()
                    && text.starts_with(name.as_bytes())
                    && text[name.len()] == b'='
                {
                    let value_start = (*entry).add(name.len() + 1);
                    std::ptr::write_bytes(value_start, 0, text.len() - name.len() - 1);
                }
                entry = entry.add(1);
            }
            std::env::remove_var(name);
        }
    }
    let _ = SNAPSHOT.set(snapshot);
}

/// A variable of the launching environment: the private snapshot first (credentials moved
/// out of the environment), then the live environment.
pub fn secret_var(name: &str) -> Option<String> {
    if let Some(v) = SNAPSHOT.get().and_then(|s| s.get(name)) {
        return Some(v.clone());
    }
    std::env::var(name).ok()
}

/// The credential-shaped variables [`capture_secrets_from_environment`] moved out of the
/// environment, for a child `dsh` that must start from the same launching environment (a
/// team worker's turn); sorted by name.
pub fn captured_secrets() -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = SNAPSHOT
        .get()
        .map(|s| s.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    all.sort();
    all
}

/// Makes this process non-dumpable: its `/proc/<pid>/mem`, `environ` and file descriptors
/// and a ptrace attach are then open only to holders of `CAP_SYS_PTRACE`, so a command the
/// agent runs unconfined (`danger-full-access`) as the same user cannot read the API key out
/// of dsh's memory. (Commands started by dsh are dumpable again after their own exec; a
/// root user keeps the capability, so there it protects nothing: root can read any process.)
pub fn keep_memory_private() {
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        tracing::debug!("cannot make the process non-dumpable: {e}");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    #[test]
    fn the_process_becomes_non_dumpable() {
        super::keep_memory_private();
        assert_eq!(
            rustix::process::dumpable_behavior().unwrap(),
            rustix::process::DumpableBehavior::NotDumpable
        );
    }
}
