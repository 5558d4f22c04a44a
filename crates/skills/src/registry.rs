//! The skill registry (`ctx.skills` upstream): providers contribute candidates with a rank,
//! the registry picks one winner per name and loads its body on demand.
//!
//! Invariants: a listing never holds two skills of one name; the winner of a name is the
//! lowest rank, then the earliest registered provider, then the provider's own order; a
//! registration made through a scoped context is seen only from that scope (and shadows a
//! global winner of the same name there); every registration is an effect of the context
//! that made it. Discovery is not cached: each listing reads the providers afresh, so a
//! skill added or edited on disk is seen at the next step.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dsh_kernel::{BoxError, Context, EffectHandle, ScopeId};
use serde_json::Value;

/// Rank of packaged skills and the bundled root.
pub const BUNDLED_SKILL_RANK: i64 = 600;
/// Rank of skills registered at run time through [`SkillRegistry::register`].
const RUNTIME_RANK: i64 = 250;
/// Provider name reserved for run-time registrations.
const RUNTIME_PROVIDER: &str = "runtime";

/// Whether `name` is a kebab-case skill name (`^[a-z0-9]+(?:-[a-z0-9]+)*$`).
pub fn is_skill_name(name: &str) -> bool {
    !name.is_empty()
        && name.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

/// Who may invoke a skill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvocationPolicy {
    /// Listed in the model's catalog and loadable by the `skill` tool.
    pub model_invocable: bool,
    /// Invocable by the user as `/name`.
    pub user_invocable: bool,
}

impl Default for InvocationPolicy {
    fn default() -> Self {
        Self {
            model_invocable: true,
            user_invocable: true,
        }
    }
}

/// Where the relative resources a skill mentions resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResourceBase {
    Directory(PathBuf),
    Url(String),
    Opaque(String),
}

/// What a listing shows of one skill.
#[derive(Clone, Debug, PartialEq)]
pub struct SkillSummary {
    pub name: String,
    pub description: String,
    pub when_to_use: Option<String>,
    pub invocation: InvocationPolicy,
    /// Origin bucket (`project-dsh`, `user-agents`, `bundled`, …): metadata, not precedence.
    pub source: String,
    pub provider: String,
    pub resource_base: Option<ResourceBase>,
}

/// One provider contribution.
#[derive(Clone, Debug, PartialEq)]
pub struct SkillCandidate {
    pub summary: SkillSummary,
    /// Lower wins a duplicate name.
    pub rank: i64,
    /// Provider-owned handle passed back to [`SkillProvider::get`].
    pub locator: String,
    pub path: Option<PathBuf>,
    pub metadata: Option<Value>,
}

/// A loaded skill: its summary and its instruction body.
#[derive(Clone, Debug, PartialEq)]
pub struct SkillDefinition {
    pub summary: SkillSummary,
    pub content: String,
    pub path: Option<PathBuf>,
    pub metadata: Option<Value>,
}

/// What a lookup is about: the caller's working directory selects project roots.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lookup {
    pub cwd: Option<PathBuf>,
}

/// A provider failed to list or load; the registry logs it and goes on without it.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    /// Reading a root or a skill file failed for a reason other than absence.
    #[error("{0}")]
    Io(String),
}

/// One source of skills. Implementations must be cheap to call repeatedly (the registry
/// lists before every step), must not panic on bad files (skip them with a logged
/// warning), and must return candidates whose `summary.provider` is their own name.
pub trait SkillProvider: Send + Sync {
    fn name(&self) -> &str;
    /// Candidates for `lookup`, in the provider's own order.
    fn list(&self, lookup: &Lookup) -> Result<Vec<SkillCandidate>, SkillError>;
    /// The full skill for a candidate this provider returned; `None` when it disappeared.
    fn get(
        &self,
        candidate: &SkillCandidate,
        lookup: &Lookup,
    ) -> Result<Option<SkillDefinition>, SkillError>;
}

/// Summaries sorted by name plus whether every provider answered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SkillSnapshot {
    pub skills: Vec<SkillSummary>,
    pub complete: bool,
}

struct ProviderEntry {
    id: u64,
    order: u64,
    scope: Option<ScopeId>,
    provider: Arc<dyn SkillProvider>,
}

struct RuntimeEntry {
    id: u64,
    scope: Option<ScopeId>,
    skill: SkillDefinition,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    providers: Vec<ProviderEntry>,
    runtime: Vec<RuntimeEntry>,
}

/// Where a winning candidate came from, to load it.
#[derive(Clone)]
enum Origin {
    Provider(Arc<dyn SkillProvider>),
    Runtime(Box<SkillDefinition>),
}

#[derive(Clone)]
struct Indexed {
    candidate: SkillCandidate,
    provider_order: i128,
    local_order: usize,
    origin: Origin,
}

/// The `@deepseek-ai/dsh-skill` service.
#[derive(Default)]
pub struct SkillRegistry {
    inner: Mutex<Inner>,
    /// Shadowed duplicates already reported, so a listing before every step warns once.
    warned: Mutex<HashSet<String>>,
}

impl SkillRegistry {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `provider` in the layer of `ctx`'s scope, as an effect of `ctx`. A name
    /// already registered in that layer, or the reserved `runtime`, is an error.
    pub fn register_provider(
        self: &Arc<Self>,
        ctx: &Context,
        provider: Arc<dyn SkillProvider>,
    ) -> Result<EffectHandle, BoxError> {
        let scope = ctx.scope().map(|s| s.id());
        let name = provider.name().to_string();
        if name == RUNTIME_PROVIDER {
            return Err(format!(
                "\"{RUNTIME_PROVIDER}\" is reserved for runtime skill registrations"
            )
            .into());
        }
        let id = {
            let mut inner = self.lock();
            if inner
                .providers
                .iter()
                .any(|p| p.scope == scope && p.provider.name() == name)
            {
                return Err(match scope {
                    None => format!("another skill provider is already registered as \"{name}\"; give this one a different name"),
                    Some(_) => format!(
                        "another skill provider in this scope is already registered as \"{name}\"; give this one a different name"
                    ),
                }
                .into());
            }
            let id = inner.next_id;
            inner.next_id += 1;
            inner.providers.push(ProviderEntry {
                id,
                order: id,
                scope,
                provider,
            });
            id
        };
        let this = Arc::downgrade(self);
        Ok(ctx.effect("skill provider", move || {
            if let Some(this) = this.upgrade() {
                this.lock().providers.retain(|p| p.id != id);
            }
        })?)
    }

    /// Registers one skill held in memory (rank 250, provider `runtime` unless the
    /// definition names another), in the layer of `ctx`'s scope. A second registration
    /// of one name in a layer is ignored with a warning, as upstream does.
    pub fn register(
        self: &Arc<Self>,
        ctx: &Context,
        mut skill: SkillDefinition,
    ) -> Result<Option<EffectHandle>, BoxError> {
        if !is_skill_name(&skill.summary.name) {
            return Err(format!("invalid skill name \"{}\"", skill.summary.name).into());
        }
        if skill.summary.description.is_empty() {
            return Err(format!("skill \"{}\" requires a description", skill.summary.name).into());
        }
        if skill.summary.provider.is_empty() {
            skill.summary.provider = RUNTIME_PROVIDER.into();
        }
        let scope = ctx.scope().map(|s| s.id());
        let id = {
            let mut inner = self.lock();
            if inner
                .runtime
                .iter()
                .any(|r| r.scope == scope && r.skill.summary.name == skill.summary.name)
            {
                tracing::warn!(
                    "runtime skill \"{}\" ignored because it is already registered",
                    skill.summary.name
                );
                return Ok(None);
            }
            let id = inner.next_id;
            inner.next_id += 1;
            inner.runtime.push(RuntimeEntry { id, scope, skill });
            id
        };
        let this = Arc::downgrade(self);
        Ok(Some(ctx.effect("runtime skill", move || {
            if let Some(this) = this.upgrade() {
                this.lock().runtime.retain(|r| r.id != id);
            }
        })?))
    }

    /// The winning skills visible from `view`'s scope, sorted by name.
    pub fn snapshot(&self, view: &Context, lookup: &Lookup) -> SkillSnapshot {
        let (merged, complete) = self.collect(view, lookup);
        let mut skills: Vec<SkillSummary> =
            merged.into_values().map(|e| e.candidate.summary).collect();
        skills.sort_by(|a, b| a.name.cmp(&b.name));
        SkillSnapshot { skills, complete }
    }

    /// [`Self::snapshot`]'s skills.
    pub fn list(&self, view: &Context, lookup: &Lookup) -> Vec<SkillSummary> {
        self.snapshot(view, lookup).skills
    }

    /// Loads the winner of `name` as seen from `view`; `None` when there is none (or the
    /// provider no longer has it). A provider failure is an error naming the provider.
    pub fn get(
        &self,
        view: &Context,
        name: &str,
        lookup: &Lookup,
    ) -> Result<Option<SkillDefinition>, SkillError> {
        if !is_skill_name(name) {
            return Ok(None);
        }
        let (mut merged, _) = self.collect(view, lookup);
        let Some(entry) = merged.remove(name) else {
            return Ok(None);
        };
        let loaded = match entry.origin {
            Origin::Runtime(skill) => Some(*skill),
            Origin::Provider(provider) => provider.get(&entry.candidate, lookup).map_err(|e| {
                SkillError::Io(format!("skill provider \"{}\": {e}", provider.name()))
            })?,
        };
        // A body whose name changed since listing is not the skill that was asked for.
        Ok(loaded.filter(|d| d.summary.name == name))
    }

    /// Layers from the global one to the nearest scope; each layer's winners override the
    /// farther layers' by name.
    fn collect(&self, view: &Context, lookup: &Lookup) -> (BTreeMap<String, Indexed>, bool) {
        let mut layers: Vec<Option<ScopeId>> = vec![None];
        if let Some(scope) = view.scope() {
            layers.extend(scope.chain().iter().rev().map(|id| Some(*id)));
        }
        let (providers, runtime) = {
            let inner = self.lock();
            let providers: Vec<(Option<ScopeId>, u64, Arc<dyn SkillProvider>)> = inner
                .providers
                .iter()
                .map(|p| (p.scope, p.order, p.provider.clone()))
                .collect();
            let runtime: Vec<(Option<ScopeId>, SkillDefinition)> = inner
                .runtime
                .iter()
                .map(|r| (r.scope, r.skill.clone()))
                .collect();
            (providers, runtime)
        };
        let mut merged: BTreeMap<String, Indexed> = BTreeMap::new();
        let mut complete = true;
        for layer in layers {
            let mut entries: Vec<Indexed> = Vec::new();
            let mut own: Vec<&SkillDefinition> = runtime
                .iter()
                .filter(|(s, _)| *s == layer)
                .map(|(_, d)| d)
                .collect();
            own.sort_by(|a, b| a.summary.name.cmp(&b.summary.name));
            for (i, skill) in own.into_iter().enumerate() {
                entries.push(Indexed {
                    candidate: SkillCandidate {
                        summary: skill.summary.clone(),
                        rank: RUNTIME_RANK,
                        locator: skill.summary.name.clone(),
                        path: skill.path.clone(),
                        metadata: skill.metadata.clone(),
                    },
                    provider_order: -1,
                    local_order: i,
                    origin: Origin::Runtime(Box::new(skill.clone())),
                });
            }
            for (_, order, provider) in providers.iter().filter(|(s, _, _)| *s == layer) {
                let listed = match provider.list(lookup) {
                    Ok(listed) => listed,
                    Err(e) => {
                        complete = false;
                        tracing::warn!("skill provider \"{}\" skipped: {e}", provider.name());
                        continue;
                    }
                };
                for (i, candidate) in listed.into_iter().enumerate() {
                    if let Err(problem) = validate_candidate(&candidate, provider.name()) {
                        tracing::warn!("{problem}");
                        continue;
                    }
                    entries.push(Indexed {
                        candidate,
                        provider_order: i128::from(*order),
                        local_order: i,
                        origin: Origin::Provider(provider.clone()),
                    });
                }
            }
            entries.sort_by(|a, b| {
                (a.candidate.rank, a.provider_order, a.local_order).cmp(&(
                    b.candidate.rank,
                    b.provider_order,
                    b.local_order,
                ))
            });
            let mut seen: HashSet<String> = HashSet::new();
            for entry in entries {
                let name = entry.candidate.summary.name.clone();
                if !seen.insert(name.clone()) {
                    self.warn_shadowed(&entry.candidate);
                    continue;
                }
                merged.insert(name, entry);
            }
        }
        (merged, complete)
    }

    fn warn_shadowed(&self, candidate: &SkillCandidate) {
        let key = format!(
            "{}\u{0}{}\u{0}{}",
            candidate.summary.name, candidate.summary.source, candidate.locator
        );
        if self
            .warned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key)
        {
            tracing::warn!(
                "skill \"{}\" from {} ignored because a higher-priority skill already exists",
                candidate.summary.name,
                candidate.summary.source
            );
        }
    }
}

fn validate_candidate(candidate: &SkillCandidate, provider: &str) -> Result<(), String> {
    let s = &candidate.summary;
    if !is_skill_name(&s.name) {
        return Err(format!(
            "skill provider \"{provider}\" returned invalid skill name \"{}\"",
            s.name
        ));
    }
    if s.description.is_empty() {
        return Err(format!(
            "skill provider \"{provider}\" returned skill \"{}\" without a description",
            s.name
        ));
    }
    if s.provider != provider {
        return Err(format!(
            "skill provider \"{provider}\" returned skill \"{}\" for provider \"{}\"",
            s.name, s.provider
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn skill_names_are_kebab_case() {
        for ok in ["a", "snapshot-skill", "a1-b2", "x-y-z"] {
            assert!(is_skill_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a--b", "A", "a_b", "a b", "ä"] {
            assert!(!is_skill_name(bad), "{bad}");
        }
    }

    struct Fixed(&'static str, Vec<(&'static str, i64)>);

    impl SkillProvider for Fixed {
        fn name(&self) -> &str {
            self.0
        }
        fn list(&self, _: &Lookup) -> Result<Vec<SkillCandidate>, SkillError> {
            Ok(self
                .1
                .iter()
                .map(|(name, rank)| SkillCandidate {
                    summary: SkillSummary {
                        name: (*name).into(),
                        description: format!("{} from {}", name, self.0),
                        when_to_use: None,
                        invocation: InvocationPolicy::default(),
                        source: self.0.into(),
                        provider: self.0.into(),
                        resource_base: None,
                    },
                    rank: *rank,
                    locator: (*name).into(),
                    path: None,
                    metadata: None,
                })
                .collect())
        }
        fn get(
            &self,
            c: &SkillCandidate,
            _: &Lookup,
        ) -> Result<Option<SkillDefinition>, SkillError> {
            Ok(Some(SkillDefinition {
                summary: c.summary.clone(),
                content: format!("body of {}", c.summary.description),
                path: None,
                metadata: None,
            }))
        }
    }

    #[test]
    fn the_lowest_rank_wins_then_the_first_provider_and_listings_sort_by_name() {
        let ctx = Context::new_root();
        let reg = SkillRegistry::new();
        reg.register_provider(
            &ctx,
            Arc::new(Fixed("a", vec![("zeta", 400), ("dup", 400)])),
        )
        .unwrap();
        reg.register_provider(
            &ctx,
            Arc::new(Fixed("b", vec![("dup", 100), ("alpha", 400)])),
        )
        .unwrap();
        reg.register_provider(&ctx, Arc::new(Fixed("c", vec![("alpha", 400)])))
            .unwrap();
        let listed: Vec<(String, String)> = reg
            .list(&ctx, &Lookup::default())
            .into_iter()
            .map(|s| (s.name, s.provider))
            .collect();
        assert_eq!(
            listed,
            vec![
                ("alpha".to_string(), "b".to_string()),
                ("dup".to_string(), "b".to_string()),
                ("zeta".to_string(), "a".to_string()),
            ]
        );
        let dup = reg.get(&ctx, "dup", &Lookup::default()).unwrap().unwrap();
        assert_eq!(dup.content, "body of dup from b");
        assert_eq!(reg.get(&ctx, "Bad Name", &Lookup::default()).unwrap(), None);
        assert_eq!(reg.get(&ctx, "missing", &Lookup::default()).unwrap(), None);
    }

    #[test]
    fn a_duplicate_provider_name_is_refused_and_unloading_unwinds() {
        let ctx = Context::new_root();
        let reg = SkillRegistry::new();
        let handle = reg
            .register_provider(&ctx, Arc::new(Fixed("a", vec![("one", 1)])))
            .unwrap();
        let again = reg.register_provider(&ctx, Arc::new(Fixed("a", vec![])));
        assert_eq!(
            again.unwrap_err().to_string(),
            "another skill provider is already registered as \"a\"; give this one a different name"
        );
        assert!(
            reg.register_provider(&ctx, Arc::new(Fixed("runtime", vec![])))
                .is_err()
        );
        assert_eq!(reg.list(&ctx, &Lookup::default()).len(), 1);
        handle.dispose();
        assert_eq!(reg.list(&ctx, &Lookup::default()), vec![]);
    }
}
