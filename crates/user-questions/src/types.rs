//! Questions and answers as the service and its providers exchange them.

use serde::{Deserialize, Serialize};

/// One choice offered to the user.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuestionOption {
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// One question.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Question {
    /// Caller-chosen id, echoed in the answer.
    pub id: String,
    pub question: String,
    /// Supporting detail shown with the question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// A short heading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<QuestionOption>>,
    /// More than one option may be chosen (single choice when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multi_select: Option<bool>,
}

/// The answer to one question.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnswerItem {
    pub id: String,
    /// Chosen option labels.
    pub selected: Vec<String>,
    /// Free text typed instead of (or besides) a choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom: Option<String>,
}

/// The human's answer.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Answer {
    pub answers: Vec<AnswerItem>,
}
