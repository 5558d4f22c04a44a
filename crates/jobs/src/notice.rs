//! The model-visible texts about jobs: status lines (their format is upstream's; recorded
//! tool results contain them) and completion notices.

use dsh_llm::{ContentBlock, Message, MessageSource};
use serde_json::Value;

use crate::registry::JobSnapshot;
use crate::retain::{head_bytes, tail_bytes};

/// `[status: <status>]` or `[status: <status>, <detail>]`.
pub fn status_line(snapshot: &JobSnapshot) -> String {
    match &snapshot.detail {
        Some(detail) => format!("[status: {}, {detail}]", snapshot.status.as_str()),
        None => format!("[status: {}]", snapshot.status.as_str()),
    }
}

/// Longest summary a notice carries (UTF-16 units, as upstream counts).
const SUMMARY_MAX_UNITS: usize = 120;

/// A collapsed-row account, ellipsized past 120 UTF-16 units (119 kept + `…`).
pub fn bound_summary(summary: &str) -> String {
    if dsh_tools::text::utf16_len(summary) <= SUMMARY_MAX_UNITS {
        return summary.to_string();
    }
    format!(
        "{}…",
        dsh_tools::text::utf16_prefix(summary, SUMMARY_MAX_UNITS - 1)
    )
}

/// The notice text of a finished job; jobs with an output bound get a shorter form that
/// fits it.
pub fn completion_text(snapshot: &JobSnapshot) -> String {
    let prefix = format!("background job {}", snapshot.id);
    let detail = format!(
        " ({}: {}) finished {}",
        snapshot.kind,
        snapshot.label,
        status_line(snapshot)
    );
    let action = "\nDone; job_output.";
    let complete = format!("{prefix}{detail}. Use job_output to read what it produced.");
    let Some(max) = snapshot.output_limit_bytes else {
        return complete;
    };
    if complete.len() <= max {
        return complete;
    }
    let omitted = "\n[notice truncated]";
    let fixed_len = prefix.len() + omitted.len() + action.len();
    if fixed_len <= max {
        return format!(
            "{prefix}{}{omitted}{action}",
            head_bytes(&detail, max - fixed_len)
        );
    }
    let compact = format!("{prefix}{action}");
    if compact.len() <= max {
        return compact;
    }
    if action.len() >= max {
        return tail_bytes(action, max).to_string();
    }
    format!("{}{action}", head_bytes(&prefix, max - action.len()))
}

/// The user message that tells the owner a job finished.
pub fn completion_message(snapshot: &JobSnapshot) -> Message {
    let summary = bound_summary(&format!(
        "{} {} {}",
        snapshot.kind,
        snapshot.label,
        status_line(snapshot)
    ));
    let source = MessageSource::plugin(
        "tool-jobs",
        [
            ("form".to_string(), Value::from("notice")),
            ("summary".to_string(), Value::from(summary)),
        ],
    );
    Message::user(vec![ContentBlock::text(completion_text(snapshot))], source)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::JobStatus;
    use pretty_assertions::assert_eq;

    fn snap(label: &str, limit: Option<usize>) -> JobSnapshot {
        JobSnapshot {
            id: "bash-1".into(),
            kind: "bash".into(),
            label: label.into(),
            output_limit_bytes: limit,
            owner_session: Some("s".into()),
            status: JobStatus::Killed,
            detail: Some("killed before exit".into()),
            started_at: 1,
            finished_at: Some(2),
            reported: false,
        }
    }

    #[test]
    fn notice_message_shape() {
        let m = completion_message(&snap("true", None));
        assert_eq!(
            dsh_kernel::json::to_string(&m.to_value()).replace(&m.id, "ID"),
            r#"{"content":[{"type":"text","text":"background job bash-1 (bash: true) finished [status: killed, killed before exit]. Use job_output to read what it produced."}],"source":{"kind":"plugin","plugin":"tool-jobs","form":"notice","summary":"bash true [status: killed, killed before exit]"},"role":"user","id":"ID"}"#
        );
    }

    #[test]
    fn summaries_are_bounded_in_utf16_units() {
        let long = "é".repeat(200);
        let b = bound_summary(&long);
        assert_eq!(b.chars().count(), 120);
        assert!(b.ends_with('…'));
        assert_eq!(bound_summary("short"), "short");
        let emoji = "😀".repeat(70); // 140 units
        let b = bound_summary(&emoji);
        assert_eq!(b.encode_utf16().count(), 119, "59 emoji (118 units) + …");
    }

    #[test]
    fn bounded_notices_degrade_in_tiers() {
        let s = snap("printf hello", Some(64));
        let text = completion_text(&s);
        assert!(text.len() <= 64, "{text}");
        assert_eq!(
            text,
            "background job bash-1 (bash\n[notice truncated]\nDone; job_output."
        );
        assert_eq!(
            completion_text(&snap("x", Some(40))),
            "background job bash-1\nDone; job_output."
        );
        assert_eq!(
            completion_text(&snap("x", Some(20))),
            "ba\nDone; job_output."
        );
        assert_eq!(completion_text(&snap("x", Some(5))), "tput.");
        let fits = completion_text(&snap("x", Some(4096)));
        assert!(fits.ends_with("Use job_output to read what it produced."));
    }
}
