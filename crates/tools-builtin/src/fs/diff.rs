//! Applied-change hunks for `write`/`edit` presentation metadata: one entry per hunk with
//! three lines of context, `oldText: null` for a pure insertion.

use serde_json::{Map, Value, json};
use similar::{Algorithm, ChangeTag, TextDiff};

const CONTEXT_LINES: usize = 3;

/// One `{path, oldText, newText}` per hunk between two LF-normalized texts.
pub(crate) fn hunk_diffs(path: &str, before: &str, after: &str) -> Vec<Value> {
    let diff = TextDiff::configure()
        .algorithm(Algorithm::Myers)
        .diff_lines(before, after);
    let mut out = Vec::new();
    for group in diff.grouped_ops(CONTEXT_LINES) {
        let mut old_lines: Vec<&str> = Vec::new();
        let mut new_lines: Vec<&str> = Vec::new();
        for op in &group {
            for change in diff.iter_changes(op) {
                let text = change.value();
                let text = text.strip_suffix('\n').unwrap_or(text);
                match change.tag() {
                    ChangeTag::Delete => old_lines.push(text),
                    ChangeTag::Insert => new_lines.push(text),
                    ChangeTag::Equal => {
                        old_lines.push(text);
                        new_lines.push(text);
                    }
                }
            }
        }
        let mut entry = Map::new();
        entry.insert("path".into(), json!(path));
        entry.insert(
            "oldText".into(),
            if old_lines.is_empty() {
                Value::Null
            } else {
                json!(old_lines.join("\n"))
            },
        );
        entry.insert("newText".into(), json!(new_lines.join("\n")));
        out.push(Value::Object(entry));
    }
    out
}

/// `{diffs: [...]}`.
pub(crate) fn diffs_meta(diffs: Vec<Value>) -> Value {
    let mut m = Map::new();
    m.insert("diffs".into(), Value::Array(diffs));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn hunks_match_the_recorded_fixtures() {
        assert_eq!(
            hunk_diffs("data.txt", "original contents", "replaced"),
            vec![
                json!({"path": "data.txt", "oldText": "original contents", "newText": "replaced"})
            ]
        );
        assert_eq!(
            hunk_diffs(
                "config.txt",
                "mode=DEBUG\nlevel=info\n",
                "mode=RELEASE\nlevel=info\n"
            ),
            vec![
                json!({"path": "config.txt", "oldText": "mode=DEBUG\nlevel=info", "newText": "mode=RELEASE\nlevel=info"})
            ]
        );
        assert_eq!(hunk_diffs("a", "same\n", "same\n"), Vec::<Value>::new());
        assert_eq!(
            hunk_diffs("a", "", "x\n"),
            vec![json!({"path": "a", "oldText": null, "newText": "x"})]
        );
    }

    #[test]
    fn distant_changes_are_separate_hunks_with_three_lines_of_context() {
        let before: String = (1..=20).map(|i| format!("l{i}\n")).collect();
        let after = before.replace("l2\n", "L2\n").replace("l18\n", "L18\n");
        assert_eq!(
            hunk_diffs("f", &before, &after),
            vec![
                json!({"path": "f", "oldText": "l1\nl2\nl3\nl4\nl5", "newText": "l1\nL2\nl3\nl4\nl5"}),
                json!({"path": "f", "oldText": "l15\nl16\nl17\nl18\nl19\nl20", "newText": "l15\nl16\nl17\nL18\nl19\nl20"}),
            ]
        );
    }
}
