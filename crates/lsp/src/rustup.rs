//! Whether a rustup proxy on PATH (`rust-analyzer` is one on most Rust machines) would run a
//! real program. Asking `rustup which` costs a process start (a few milliseconds, and some
//! 60 ms when no toolchain is configured), paid by every `dsh` start that discovers
//! language servers. Most machines can be answered from rustup's own files instead: the
//! settings file's default toolchain and the toolchain directories. Anything this reading
//! cannot settle for sure (an override, a toolchain file, `RUSTUP_TOOLCHAIN`, a short
//! toolchain name) is left to rustup itself.

use std::path::{Path, PathBuf};

/// What rustup's files say about the active toolchain.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Toolchain {
    /// No toolchain is active: rustup would refuse to run any proxy.
    None,
    /// The active toolchain's directory.
    Dir(PathBuf),
    /// The files do not settle it; ask rustup.
    Ask,
}

/// Reads the active toolchain for a process started in `cwd`, with `var` giving the
/// environment rustup would see.
pub(crate) fn active_toolchain(cwd: &Path, var: &dyn Fn(&str) -> Option<String>) -> Toolchain {
    if var("RUSTUP_TOOLCHAIN").is_some_and(|v| !v.is_empty()) {
        return Toolchain::Ask;
    }
    // A toolchain file in the directory or any parent picks the toolchain per project.
    if cwd
        .ancestors()
        .any(|d| d.join("rust-toolchain").exists() || d.join("rust-toolchain.toml").exists())
    {
        return Toolchain::Ask;
    }
    let home = match var("RUSTUP_HOME").filter(|v| !v.is_empty()) {
        Some(h) => PathBuf::from(h),
        None => match var("HOME").filter(|v| !v.is_empty()) {
            Some(h) => Path::new(&h).join(".rustup"),
            None => return Toolchain::Ask,
        },
    };
    let settings = match std::fs::read_to_string(home.join("settings.toml")) {
        Ok(s) => s,
        // rustup writes the file the first time it runs; without it nothing is installed
        // through this home unless the directory holds toolchains (then ask).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return if home.join("toolchains").exists() {
                Toolchain::Ask
            } else {
                Toolchain::None
            };
        }
        Err(_) => return Toolchain::Ask,
    };
    let mut section = String::new();
    let mut default = None;
    for line in settings.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('[') {
            section = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Toolchain::Ask;
        };
        match (section.as_str(), key.trim()) {
            // A directory override may name another toolchain for this directory.
            ("overrides", _) => return Toolchain::Ask,
            ("", "default_toolchain") => {
                let v = value.trim();
                let Some(name) = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
                    return Toolchain::Ask;
                };
                default = Some(name.to_string());
            }
            _ => {}
        }
    }
    let Some(name) = default else {
        return Toolchain::None;
    };
    if name.is_empty() || name.contains('/') || name.contains("..") {
        return Toolchain::Ask;
    }
    // rustup records the full name (`stable-x86_64-unknown-linux-gnu`); a short one maps to
    // the host's triple, which only rustup knows for sure.
    let dir = home.join("toolchains").join(&name);
    if dir.is_dir() {
        Toolchain::Dir(dir)
    } else {
        Toolchain::Ask
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::collections::HashMap;

    fn read(cwd: &Path, env: &[(&str, &Path)]) -> Toolchain {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.display().to_string()))
            .collect();
        active_toolchain(cwd, &|k| env.get(k).cloned())
    }

    #[test]
    fn reads_the_default_toolchain_or_leaves_it_to_rustup() {
        let t = tempfile::tempdir().unwrap();
        let (home, work) = (t.path().join("home"), t.path().join("work"));
        std::fs::create_dir_all(&work).unwrap();
        let rustup = home.join(".rustup");
        let env = [("HOME", home.as_path())];

        // A home rustup never ran in: nothing is active.
        assert_eq!(read(&work, &env), Toolchain::None);

        // Settings without a default: rustup refuses.
        std::fs::create_dir_all(&rustup).unwrap();
        std::fs::write(
            rustup.join("settings.toml"),
            "version = \"12\"\nprofile = \"minimal\"\n",
        )
        .unwrap();
        assert_eq!(read(&work, &env), Toolchain::None);

        // A full default name with its directory.
        let dir = rustup.join("toolchains/stable-x86_64-unknown-linux-gnu");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            rustup.join("settings.toml"),
            "default_toolchain = \"stable-x86_64-unknown-linux-gnu\"\nversion = \"12\"\n",
        )
        .unwrap();
        assert_eq!(read(&work, &env), Toolchain::Dir(dir.clone()));
        // RUSTUP_HOME wins over HOME.
        let other = t.path().join("elsewhere");
        assert_eq!(
            read(
                &work,
                &[("HOME", home.as_path()), ("RUSTUP_HOME", other.as_path())]
            ),
            Toolchain::None
        );

        // What only rustup can settle.
        std::fs::write(
            rustup.join("settings.toml"),
            "default_toolchain = \"stable\"\n",
        )
        .unwrap();
        assert_eq!(read(&work, &env), Toolchain::Ask);
        std::fs::write(
            rustup.join("settings.toml"),
            "default_toolchain = \"stable-x86_64-unknown-linux-gnu\"\n\n[overrides]\n\"/x\" = \"nightly\"\n",
        )
        .unwrap();
        assert_eq!(read(&work, &env), Toolchain::Ask);
        std::fs::write(
            rustup.join("settings.toml"),
            "default_toolchain = \"stable-x86_64-unknown-linux-gnu\"\n",
        )
        .unwrap();
        assert_eq!(
            read(
                &work,
                &[
                    ("HOME", home.as_path()),
                    ("RUSTUP_TOOLCHAIN", Path::new("beta"))
                ]
            ),
            Toolchain::Ask
        );
        std::fs::write(
            t.path().join("rust-toolchain.toml"),
            "[toolchain]\nchannel = \"1.80\"\n",
        )
        .unwrap();
        assert_eq!(read(&work, &env), Toolchain::Ask);
    }
}
