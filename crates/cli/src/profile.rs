//! Profiles and bundles: which patch layers make up a profile's tree.
//!
//! A profile is `$DSH_HOME/profiles/<name>/` with a `package.json` listing its bundles
//! (`dsh.profile.bundles`) and a user patch layer `cordis.patch.yml`. The `headless` and
//! `web` profiles are created from templates on first use. Layers apply in order: each
//! bundle, the profile patch, the home patch `$DSH_HOME/cordis.patch.yml`, then `--patch`
//! files.

use std::path::{Path, PathBuf};

use dsh_kernel::config::{Composition, Layer, compose};
use serde_json::{Value, json};

/// A bundle compiled into this binary.
pub struct Bundle {
    pub package: &'static str,
    pub patch: &'static str,
}

pub const BASE: Bundle = Bundle {
    package: "@deepseek-ai/dsh-base",
    patch: include_str!("../bundles/base.cordis.patch.yml"),
};
pub const HEADLESS: Bundle = Bundle {
    package: "@deepseek-ai/dsh-headless",
    patch: include_str!("../bundles/headless.cordis.patch.yml"),
};
pub const WEB: Bundle = Bundle {
    package: "@deepseek-ai/dsh-web-app",
    patch: include_str!("../bundles/web.cordis.patch.yml"),
};
pub const SDK: Bundle = Bundle {
    package: "@deepseek-ai/dsh-sdk-app",
    patch: include_str!("../bundles/sdk-app.cordis.patch.yml"),
};
pub const SDK_MINIMAL: Bundle = Bundle {
    package: "@deepseek-ai/dsh-sdk-minimal",
    patch: include_str!("../bundles/sdk-minimal.cordis.patch.yml"),
};
pub const TUI: Bundle = Bundle {
    package: "@deepseek-ai/dsh-tui-app",
    patch: include_str!("../bundles/tui-app.cordis.patch.yml"),
};
pub const ACP: Bundle = Bundle {
    package: "@deepseek-ai/dsh-acp-app",
    patch: include_str!("../bundles/acp-app.cordis.patch.yml"),
};

fn bundle(package: &str) -> Option<&'static Bundle> {
    [&BASE, &HEADLESS, &WEB, &SDK, &SDK_MINIMAL, &ACP, &TUI]
        .into_iter()
        .find(|b| b.package == package)
}

const USER_PATCH_TEMPLATE: &str = "\
# Your patch layer for this profile, applied after its bundles (and before
# $DSH_HOME/cordis.patch.yml and any --patch files). Target a row by id to replace its
# whole config, or add rows with `- insert: [...]`. An empty list leaves the tree as is.
[]
";

/// A profile-level failure (exit code 2).
#[derive(Debug)]
pub struct ProfileError(pub String);

impl std::fmt::Display for ProfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn err(msg: impl Into<String>) -> ProfileError {
    ProfileError(msg.into())
}

fn template_bundles(name: &str) -> Option<Vec<&'static str>> {
    match name {
        "headless" => Some(vec!["@deepseek-ai/dsh-base", "@deepseek-ai/dsh-headless"]),
        "web" => Some(vec!["@deepseek-ai/dsh-base", "@deepseek-ai/dsh-web-app"]),
        "sdk" => Some(vec!["@deepseek-ai/dsh-base", "@deepseek-ai/dsh-sdk-app"]),
        // As 0.2.1 writes it; the base and the SDK app are implied (`standalone_bundles`).
        "sdk-minimal" => Some(vec!["@deepseek-ai/dsh-sdk-minimal"]),
        "acp" => Some(vec!["@deepseek-ai/dsh-base", "@deepseek-ai/dsh-acp-app"]),
        "tui" => Some(vec!["@deepseek-ai/dsh-base", "@deepseek-ai/dsh-tui-app"]),
        _ => None,
    }
}

/// Whether this build ships a template for the profile `name`.
pub fn is_template(name: &str) -> bool {
    template_bundles(name).is_some()
}

/// Whether `name` can be booted as a profile: a shipped template or a folder under
/// `$DSH_HOME/profiles` with a manifest.
pub fn exists(home: &Path, name: &str) -> bool {
    is_template(name)
        || (!name.is_empty()
            && !name.contains(['/', '\\'])
            && !name.starts_with('.')
            && home
                .join("profiles")
                .join(name)
                .join("package.json")
                .is_file())
}

/// Creates `profiles/<name>` from its template when it has no manifest yet.
pub fn prepare_profile(home: &Path, name: &str) -> Result<PathBuf, ProfileError> {
    if name.is_empty()
        || name.contains('/')
        || name.contains('\\')
        || name == "."
        || name == ".."
        || name == "node_modules"
    {
        return Err(err(format!("dsh: invalid profile name \"{name}\"")));
    }
    let dir = home.join("profiles").join(name);
    let manifest = dir.join("package.json");
    if !manifest.exists() {
        let Some(bundles) = template_bundles(name) else {
            return Err(err(format!(
                "dsh: profile \"{name}\" does not exist; this build ships the \"headless\", \"web\", \"tui\", \"sdk\", \"sdk-minimal\" and \"acp\" profiles (create {} to define another, or copy a shipped one: dsh {name} --from-default-profile headless)",
                manifest.display()
            )));
        };
        init_profile(&dir, name, &bundles)?;
    }
    Ok(dir)
}

/// Writes a profile folder `dir` named `name` over `bundles`: the manifest and, when there
/// is none, the commented user patch.
fn init_profile(dir: &Path, name: &str, bundles: &[&str]) -> Result<(), ProfileError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| err(format!("dsh: cannot create profile {}: {e}", dir.display())))?;
    let doc = json!({
        "name": format!("dsh-profile-{name}"),
        "private": true,
        "dependencies": {},
        "dsh": {"profile": {"bundles": bundles}}
    });
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n";
    write_new(&dir.join("package.json"), &text)?;
    let patch = dir.join("cordis.patch.yml");
    if !patch.exists() {
        write_new(&patch, USER_PATCH_TEMPLATE)?;
    }
    Ok(())
}

/// `--from-default-profile`: replaces the custom profile `name` with a fresh copy of the
/// shipped template `template`. The fresh copy is built beside it and swapped in by rename;
/// the previous folder is kept in that staging folder, whose path is returned. A shipped
/// name cannot be the target (it is always its template).
pub fn recreate_from_template(
    home: &Path,
    name: &str,
    template: &str,
) -> Result<Option<PathBuf>, ProfileError> {
    let Some(bundles) = template_bundles(template) else {
        return Err(err(format!(
            "dsh: --from-default-profile: no shipped profile is called \"{template}\"; use one of \"acp\", \"headless\", \"sdk\", \"sdk-minimal\", \"tui\", \"web\""
        )));
    };
    if ["headless", "web", "tui", "sdk", "sdk-minimal", "acp"]
        .iter()
        .any(|s| s.eq_ignore_ascii_case(name))
    {
        return Err(err(format!(
            "dsh: \"{name}\" is a shipped profile and always follows its template; give --from-default-profile a custom profile name (dsh rescue --from-default-profile {template})"
        )));
    }
    if name.is_empty()
        || name.contains(['/', '\\'])
        || name.starts_with('.')
        || name == "node_modules"
    {
        return Err(err(format!("dsh: invalid profile name \"{name}\"")));
    }
    let profiles = home.join("profiles");
    std::fs::create_dir_all(&profiles)
        .map_err(|e| err(format!("dsh: cannot create {}: {e}", profiles.display())))?;
    let staging = profiles.join(format!(".{name}.staging-{}", uuid::Uuid::new_v4().simple()));
    let fresh = staging.join("new").join(name);
    init_profile(&fresh, name, &bundles)?;
    let dir = profiles.join(name);
    let previous = staging.join("previous");
    let moved = match std::fs::rename(&dir, &previous) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(err(format!(
                "dsh: cannot move {} aside: {e}",
                dir.display()
            )));
        }
    };
    if let Err(e) = std::fs::rename(&fresh, &dir) {
        if moved && !dir.exists() {
            let _ = std::fs::rename(&previous, &dir);
        }
        return Err(err(format!(
            "dsh: cannot put the fresh profile in place at {}: {e}",
            dir.display()
        )));
    }
    let _ = std::fs::remove_dir(staging.join("new"));
    if moved {
        Ok(Some(previous))
    } else {
        let _ = std::fs::remove_dir_all(&staging);
        Ok(None)
    }
}

/// Creates `path` with `text`, whole or not at all: the text goes to a temp file that is
/// linked into place, so a run killed while creating a profile never leaves a half-written
/// manifest or patch that every later run would refuse. An existing `path` (another run
/// created it first) is kept.
fn write_new(path: &Path, text: &str) -> Result<(), ProfileError> {
    use std::io::Write as _;
    let fail = |e: std::io::Error| err(format!("dsh: cannot write {}: {e}", path.display()));
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    remove_dead_temp_files(dir, &name);
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(text.as_bytes())?;
        f.sync_all()
    });
    let linked = written.and_then(|()| match std::fs::hard_link(&tmp, path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    });
    let _ = std::fs::remove_file(&tmp);
    linked.map_err(fail)
}

/// Removes `.<name>.<pid>.tmp` files of `dir` whose process is gone (killed while
/// [`write_new`] ran).
fn remove_dead_temp_files(dir: &Path, name: &str) {
    let prefix = format!(".{name}.");
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = file
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".tmp"))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The bundle packages a profile stacks.
pub fn profile_bundles(dir: &Path) -> Result<Vec<String>, ProfileError> {
    let manifest = dir.join("package.json");
    let text = match dsh_kernel::config::read_config_file(&manifest) {
        Ok(Some(text)) => text,
        Ok(None) => {
            return Err(err(format!(
                "dsh: failed to read profile manifest {}: it does not exist",
                manifest.display()
            )));
        }
        Err(e) => return Err(err(format!("dsh: failed to read profile manifest: {e}"))),
    };
    let doc: Value = serde_json::from_str(&text).map_err(|e| {
        err(format!(
            "dsh: failed to read profile manifest {}: {e}",
            manifest.display()
        ))
    })?;
    if !doc.is_object() {
        return Err(err(format!(
            "dsh: profile manifest {} must hold a JSON object",
            manifest.display()
        )));
    }
    let bundles: Vec<String> = doc
        .pointer("/dsh/profile/bundles")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok(standalone_bundles(bundles))
}

/// Upstream 0.2's `@deepseek-ai/dsh-sdk-minimal` is a whole tree of its own (a profile
/// made by 0.2.1 lists it alone); ours is the SDK app with most of the base switched off,
/// so the base and the SDK app go in front of it when the list lacks them.
fn standalone_bundles(mut bundles: Vec<String>) -> Vec<String> {
    if let Some(at) = bundles.iter().position(|b| b == SDK_MINIMAL.package) {
        for needed in [SDK.package, BASE.package] {
            if !bundles.iter().any(|b| b == needed) {
                bundles.insert(at, needed.to_string());
            }
        }
    }
    bundles
}

fn read_layer(label: &str, path: &Path, required: bool) -> Result<Option<Layer>, ProfileError> {
    let text = match dsh_kernel::config::read_config_file(path) {
        Ok(Some(t)) => t,
        Ok(None) if !required => return Ok(None),
        Ok(None) => {
            return Err(err(format!(
                "dsh: failed to read patch layer {}: it does not exist",
                path.display()
            )));
        }
        Err(e) => return Err(err(format!("dsh: failed to read patch layer: {e}"))),
    };
    let shown = path.display().to_string();
    Layer::parse(label, shown, &text)
        .map(Some)
        .map_err(|e| err(format!("dsh: {e}")))
}

/// Every layer of a profile, in application order.
pub fn layers(
    home: &Path,
    profile: &str,
    patches: &[String],
    default_only: bool,
) -> Result<Vec<Layer>, ProfileError> {
    let dir = prepare_profile(home, profile)?;
    let mut out = Vec::new();
    for package in profile_bundles(&dir)? {
        let Some(b) = bundle(&package) else {
            return Err(err(format!(
                "dsh: cannot resolve profile bundle \"{package}\": it is not part of this build"
            )));
        };
        out.push(
            Layer::parse(b.package, b.package, b.patch).map_err(|e| err(format!("dsh: {e}")))?,
        );
    }
    if default_only {
        return Ok(out);
    }
    let profile_patch = dir.join("cordis.patch.yml");
    out.extend(read_layer(
        &profile_patch.display().to_string(),
        &profile_patch,
        false,
    )?);
    let home_patch = home.join("cordis.patch.yml");
    out.extend(read_layer(
        &home_patch.display().to_string(),
        &home_patch,
        false,
    )?);
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    for p in patches {
        let abs = cwd.join(p);
        out.extend(read_layer(&abs.display().to_string(), &abs, true)?);
    }
    Ok(out)
}

/// Composes a profile.
pub fn compose_profile(
    home: &Path,
    profile: &str,
    patches: &[String],
    default_only: bool,
) -> Result<Composition, ProfileError> {
    let layers = layers(home, profile, patches, default_only)?;
    compose(&layers).map_err(|e| err(format!("dsh: {e}")))
}
