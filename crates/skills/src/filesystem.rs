//! `skill-filesystem`: skills in folders on disk.
//!
//! Roots, best rank first: `<project>/.dsh/skills` (100), `<project>/.agents/skills` (200),
//! each `customSkillDirs` entry (300), `<dshHome>/skills` (400, its `.system` folder
//! skipped), `<agentsHome>/skills` (500), the bundled root (600). `<project>` is the
//! nearest ancestor of the session cwd holding `.git`, else the cwd. In a root, entries go
//! by name; a folder is a skill through its `SKILL.md` (relative resources resolve against
//! the folder), a flat `*.md` file is one itself (resources resolve against the root).
//! Symbolic links are followed; one level only. A bad file is skipped with a warning.

use std::path::{Path, PathBuf};

use crate::frontmatter::{ParsedSkill, parse_skill_file};
use crate::registry::{
    BUNDLED_SKILL_RANK, Lookup, ResourceBase, SkillCandidate, SkillDefinition, SkillError,
    SkillProvider, SkillSummary,
};

const PROJECT_DSH_RANK: i64 = 100;
const PROJECT_AGENTS_RANK: i64 = 200;
const CUSTOM_RANK: i64 = 300;
const USER_DSH_RANK: i64 = 400;
const USER_AGENTS_RANK: i64 = 500;
/// Entries read from one root at most; a larger root is cut (with a warning).
const MAX_ROOT_ENTRIES: usize = 4096;

/// Resolved settings of one filesystem provider.
#[derive(Clone, Debug, PartialEq)]
pub struct FileSystemProviderConfig {
    pub provider_name: String,
    /// Project and user roots around the custom ones.
    pub include_default_roots: bool,
    pub dsh_home: PathBuf,
    pub agents_home: PathBuf,
    pub custom_skill_dirs: Vec<PathBuf>,
    pub bundled_skill_dir: Option<PathBuf>,
}

struct Root {
    path: PathBuf,
    source: &'static str,
    rank: i64,
    skip_system: bool,
}

/// The provider.
pub struct FileSystemProvider {
    config: FileSystemProviderConfig,
}

impl FileSystemProvider {
    pub fn new(config: FileSystemProviderConfig) -> Self {
        Self { config }
    }

    fn roots(&self, cwd: Option<&Path>) -> Vec<Root> {
        let c = &self.config;
        let mut roots = Vec::new();
        if let (true, Some(cwd)) = (c.include_default_roots, cwd) {
            let project = find_project_root(cwd);
            roots.push(Root {
                path: project.join(".dsh/skills"),
                source: "project-dsh",
                rank: PROJECT_DSH_RANK,
                skip_system: false,
            });
            roots.push(Root {
                path: project.join(".agents/skills"),
                source: "project-agents",
                rank: PROJECT_AGENTS_RANK,
                skip_system: false,
            });
        }
        roots.extend(c.custom_skill_dirs.iter().map(|p| Root {
            path: p.clone(),
            source: "custom",
            rank: CUSTOM_RANK,
            skip_system: false,
        }));
        if c.include_default_roots {
            roots.push(Root {
                path: c.dsh_home.join("skills"),
                source: "user-dsh",
                rank: USER_DSH_RANK,
                skip_system: true,
            });
            roots.push(Root {
                path: c.agents_home.join("skills"),
                source: "user-agents",
                rank: USER_AGENTS_RANK,
                skip_system: false,
            });
        }
        if let Some(bundled) = &c.bundled_skill_dir {
            roots.push(Root {
                path: bundled.clone(),
                source: "bundled",
                rank: BUNDLED_SKILL_RANK,
                skip_system: false,
            });
        }
        roots
    }

    fn discover_root(&self, root: &Root) -> Result<Vec<SkillCandidate>, SkillError> {
        let read = match std::fs::read_dir(&root.path) {
            Ok(read) => read,
            Err(e) if is_absent(&e) => return Ok(Vec::new()),
            Err(e) => {
                return Err(SkillError::Io(format!(
                    "cannot read skill root {}: {e}",
                    root.path.display()
                )));
            }
        };
        let mut entries: Vec<(String, PathBuf)> = Vec::new();
        for entry in read.flatten() {
            if entries.len() == MAX_ROOT_ENTRIES {
                tracing::warn!(
                    "skill root {} has more than {MAX_ROOT_ENTRIES} entries; the rest are ignored",
                    root.path.display()
                );
                break;
            }
            entries.push((
                entry.file_name().to_string_lossy().into_owned(),
                entry.path(),
            ));
        }
        // Upstream sorts with localeCompare; case-insensitive first, then exact, is the
        // same order for the names skills use.
        entries.sort_by(|a, b| (a.0.to_lowercase(), &a.0).cmp(&(b.0.to_lowercase(), &b.0)));
        let mut out = Vec::new();
        for (name, path) in entries {
            if root.skip_system && name == ".system" {
                continue;
            }
            // `metadata` follows symbolic links.
            let kind = match std::fs::metadata(&path) {
                Ok(m) => m,
                Err(e) => {
                    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                        tracing::warn!(
                            "skill entry {} ignored: failed to follow symbolic link: {e}",
                            path.display()
                        );
                    }
                    continue;
                }
            };
            let (file, directory) = if kind.is_dir() {
                (path.join("SKILL.md"), path.clone())
            } else if kind.is_file() && name.ends_with(".md") {
                (path.clone(), root.path.clone())
            } else {
                continue;
            };
            let Some(parsed) = parse_logged(&file) else {
                continue;
            };
            out.push(SkillCandidate {
                summary: self.summary(&parsed, root.source, directory),
                rank: root.rank,
                locator: file.to_string_lossy().into_owned(),
                path: Some(file),
                metadata: parsed.metadata,
            });
        }
        Ok(out)
    }

    fn summary(&self, parsed: &ParsedSkill, source: &str, directory: PathBuf) -> SkillSummary {
        SkillSummary {
            name: parsed.name.clone(),
            description: parsed.description.clone(),
            when_to_use: parsed.when_to_use.clone(),
            invocation: parsed.invocation,
            source: source.into(),
            provider: self.config.provider_name.clone(),
            resource_base: Some(ResourceBase::Directory(directory)),
        }
    }
}

fn parse_logged(file: &Path) -> Option<ParsedSkill> {
    match parse_skill_file(file) {
        Ok(parsed) => parsed,
        Err(e) => {
            tracing::warn!("skill file {} ignored: {e}", file.display());
            None
        }
    }
}

fn is_absent(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// The nearest ancestor of `cwd` (itself included) that holds `.git`; `cwd` when none does.
pub fn find_project_root(cwd: &Path) -> PathBuf {
    cwd.ancestors()
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(cwd)
        .to_path_buf()
}

impl SkillProvider for FileSystemProvider {
    fn name(&self) -> &str {
        &self.config.provider_name
    }

    fn list(&self, lookup: &Lookup) -> Result<Vec<SkillCandidate>, SkillError> {
        let mut out = Vec::new();
        let mut failure = None;
        for root in self.roots(lookup.cwd.as_deref()) {
            match self.discover_root(&root) {
                Ok(found) => out.extend(found),
                // One unreadable root does not hide the others' skills.
                Err(e) => failure = Some(e),
            }
        }
        match (failure, out.is_empty()) {
            (Some(e), true) => Err(e),
            (Some(e), false) => {
                tracing::warn!("skill provider \"{}\": {e}", self.config.provider_name);
                Ok(out)
            }
            (None, _) => Ok(out),
        }
    }

    fn get(
        &self,
        candidate: &SkillCandidate,
        _lookup: &Lookup,
    ) -> Result<Option<SkillDefinition>, SkillError> {
        let path = PathBuf::from(&candidate.locator);
        let Some(parsed) = parse_logged(&path) else {
            return Ok(None);
        };
        let directory = match &candidate.summary.resource_base {
            Some(ResourceBase::Directory(d)) => d.clone(),
            Some(ResourceBase::Url(_) | ResourceBase::Opaque(_)) | None => {
                path.parent().map(Path::to_path_buf).unwrap_or_default()
            }
        };
        Ok(Some(SkillDefinition {
            summary: self.summary(&parsed, &candidate.summary.source, directory),
            content: parsed.content,
            metadata: parsed.metadata,
            path: Some(path),
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn skill(name: &str, description: &str) -> String {
        format!("---\nname: {name}\ndescription: {description}\n---\nBody of {name}.\n")
    }

    fn provider(home: &Path) -> FileSystemProvider {
        FileSystemProvider::new(FileSystemProviderConfig {
            provider_name: "filesystem".into(),
            include_default_roots: true,
            dsh_home: home.join(".dsh"),
            agents_home: home.join(".agents"),
            custom_skill_dirs: vec![home.join("custom")],
            bundled_skill_dir: None,
        })
    }

    #[test]
    fn discovery_walks_every_root_in_rank_order_and_skips_bad_entries() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        let project = h.join("repo");
        std::fs::create_dir_all(project.join(".git")).unwrap();
        let cwd = project.join("src/deep");
        std::fs::create_dir_all(&cwd).unwrap();
        write(
            &project.join(".dsh/skills/zeta/SKILL.md"),
            &skill("zeta", "project"),
        );
        write(
            &project.join(".dsh/skills/flat.md"),
            &skill("flat", "flat file"),
        );
        write(&project.join(".dsh/skills/notes.txt"), "not a skill");
        write(
            &project.join(".dsh/skills/empty-dir/README.md"),
            "no SKILL.md here",
        );
        write(
            &project.join(".dsh/skills/broken/SKILL.md"),
            "---\nname: broken\n",
        );
        write(
            &project.join(".agents/skills/alpha/SKILL.md"),
            &skill("alpha", "agents"),
        );
        write(&h.join("custom/gamma/SKILL.md"), &skill("gamma", "custom"));
        write(
            &h.join(".dsh/skills/zeta/SKILL.md"),
            &skill("zeta", "user copy"),
        );
        write(
            &h.join(".dsh/skills/.system/sys/SKILL.md"),
            &skill("sys", "system"),
        );
        write(
            &h.join(".agents/skills/omega/SKILL.md"),
            &skill("omega", "user agents"),
        );
        let found: Vec<(String, String, i64)> = provider(h)
            .list(&Lookup { cwd: Some(cwd) })
            .unwrap()
            .into_iter()
            .map(|c| (c.summary.name, c.summary.source, c.rank))
            .collect();
        let row = |n: &str, s: &str, r: i64| (n.to_string(), s.to_string(), r);
        assert_eq!(
            found,
            vec![
                row("flat", "project-dsh", 100),
                row("zeta", "project-dsh", 100),
                row("alpha", "project-agents", 200),
                row("gamma", "custom", 300),
                row("zeta", "user-dsh", 400),
                row("omega", "user-agents", 500),
            ]
        );
    }

    #[test]
    fn loading_returns_the_body_and_the_resource_base() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        write(
            &h.join("w/.dsh/skills/one/SKILL.md"),
            &skill("one", "first"),
        );
        write(&h.join("w/.dsh/skills/two.md"), &skill("two", "second"));
        let p = provider(h);
        let lookup = Lookup {
            cwd: Some(h.join("w")),
        };
        let listed = p.list(&lookup).unwrap();
        let loaded: Vec<(String, Option<ResourceBase>, String)> = listed
            .iter()
            .map(|c| {
                let d = p.get(c, &lookup).unwrap().unwrap();
                (d.summary.name, d.summary.resource_base, d.content)
            })
            .collect();
        assert_eq!(
            loaded,
            vec![
                (
                    "one".to_string(),
                    Some(ResourceBase::Directory(h.join("w/.dsh/skills/one"))),
                    "Body of one.".to_string()
                ),
                (
                    "two".to_string(),
                    Some(ResourceBase::Directory(h.join("w/.dsh/skills"))),
                    "Body of two.".to_string()
                ),
            ]
        );
        // A skill file deleted after listing loads as nothing, not an error.
        std::fs::remove_file(h.join("w/.dsh/skills/two.md")).unwrap();
        assert_eq!(p.get(&listed[1], &lookup).unwrap(), None);
    }

    #[cfg(unix)]
    #[test]
    fn symbolic_links_are_followed_and_dangling_ones_skipped() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        write(
            &h.join("elsewhere/linked/SKILL.md"),
            &skill("linked", "via link"),
        );
        std::fs::create_dir_all(h.join("w/.dsh/skills")).unwrap();
        std::os::unix::fs::symlink(h.join("elsewhere/linked"), h.join("w/.dsh/skills/linked"))
            .unwrap();
        std::os::unix::fs::symlink(h.join("nowhere"), h.join("w/.dsh/skills/dangling")).unwrap();
        let names: Vec<String> = provider(h)
            .list(&Lookup {
                cwd: Some(h.join("w")),
            })
            .unwrap()
            .into_iter()
            .map(|c| c.summary.name)
            .collect();
        assert_eq!(names, vec!["linked".to_string()]);
    }
}
