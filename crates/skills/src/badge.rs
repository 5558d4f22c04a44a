//! The bundled `dsh-badge` skill (row `skill-badge`, disabled in the base bundle as
//! upstream ships it): how to attribute work with the "powered by dsh" badge.

use crate::registry::{
    BUNDLED_SKILL_RANK, InvocationPolicy, Lookup, ResourceBase, SkillCandidate, SkillDefinition,
    SkillError, SkillProvider, SkillSummary,
};

const PROVIDER: &str = "dsh-badge";
const NAME: &str = "dsh-badge";
const DESCRIPTION: &str = "Attribute documents, pull requests, merge requests and other content made with DeepSeek Harness with the official \"powered by dsh\" badge. Use when opening a pull or merge request, or when the user asks for a dsh badge or powered-by-dsh attribution.";
const BADGE_IMAGE: &str = "https://img.shields.io/badge/powered_by-dsh-4D6BFE?style=flat-square&logo=deepseek&logoColor=white";
const PROJECT: &str = "https://github.com/deepseek-ai/deepseek-harness";

fn body() -> String {
    format!(
        "# The dsh badge\n\n\
         Use the official badge as it is; do not draw, recolour or resize another one.\n\n\
         - Image: `{BADGE_IMAGE}` (shown at 121×20).\n\
         - Link target: `{PROJECT}`.\n\n\
         In Markdown, link the image to the project unless the user wants it unlinked:\n\n\
         ```markdown\n[![]({BADGE_IMAGE})]({PROJECT})\n```\n\n\
         Without a link:\n\n\
         ```markdown\n![]({BADGE_IMAGE})\n```\n\n\
         Put it at the end of the document or section it attributes unless the user asks for another place, and keep its proportions."
    )
}

fn summary() -> SkillSummary {
    SkillSummary {
        name: NAME.into(),
        description: DESCRIPTION.into(),
        when_to_use: None,
        invocation: InvocationPolicy::default(),
        source: "bundled".into(),
        provider: PROVIDER.into(),
        resource_base: Some(ResourceBase::Opaque(
            "the badge image and project links named in these instructions".into(),
        )),
    }
}

pub(crate) struct BadgeProvider;

impl SkillProvider for BadgeProvider {
    fn name(&self) -> &str {
        PROVIDER
    }

    fn list(&self, _lookup: &Lookup) -> Result<Vec<SkillCandidate>, SkillError> {
        Ok(vec![SkillCandidate {
            summary: summary(),
            rank: BUNDLED_SKILL_RANK,
            locator: NAME.into(),
            path: None,
            metadata: None,
        }])
    }

    fn get(
        &self,
        _candidate: &SkillCandidate,
        _lookup: &Lookup,
    ) -> Result<Option<SkillDefinition>, SkillError> {
        Ok(Some(SkillDefinition {
            summary: summary(),
            content: body(),
            path: None,
            metadata: None,
        }))
    }
}
