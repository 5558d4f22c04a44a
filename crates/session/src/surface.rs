//! The surface: the ordered list of model-visible event seqs, folded from surface events.

use std::collections::HashSet;

use serde_json::Value;

use crate::event::{Event, SurfaceOp, types};

/// A validated surface transition, computed before the event enters the log.
#[derive(Debug, Clone, PartialEq)]
pub enum SurfacePlan {
    None,
    Append,
    Replace { start_idx: usize, end_idx: usize },
}

/// Surface state: node seqs in model-visible order plus a generation bumped per replace.
#[derive(Debug, Clone, Default)]
pub struct Surface {
    nodes: Vec<u64>,
    replace_generation: u64,
}

impl Surface {
    pub fn nodes(&self) -> &[u64] {
        &self.nodes
    }

    pub fn replace_generation(&self) -> u64 {
        self.replace_generation
    }

    /// Validates `event` as the next transition. `log` is the log so far (to inspect
    /// shadowed tool results).
    pub fn plan(
        &self,
        event: &Event,
        log: &[std::sync::Arc<Event>],
    ) -> Result<SurfacePlan, String> {
        let t = event.event_type.as_str();
        if !types::is_surface(t) {
            if event.surface_op.is_some() {
                return Err(format!(
                    "session event \"{t}\" is not surface-eligible and cannot carry surfaceOp"
                ));
            }
            if event.source_event_seqs.is_some() {
                return Err(format!(
                    "session event \"{t}\" is not surface-eligible and cannot carry sourceEventSeqs"
                ));
            }
            return Ok(SurfacePlan::None);
        }
        let Some(op) = event.surface_op else {
            return Err(format!(
                "session event \"{t}\" is surface-eligible and requires a surfaceOp marker"
            ));
        };
        if let Some(sources) = &event.source_event_seqs {
            if sources.is_empty() && t != types::ASSISTANT_MESSAGE {
                return Err("sourceEventSeqs must not be empty except on assistant/message".into());
            }
            // Sources are usually ascending (the chunk seqs of one attempt): then they are
            // unique and no set is needed.
            let ascending = sources.windows(2).all(|w| w[0] < w[1]);
            let mut seen = HashSet::with_capacity(if ascending { 0 } else { sources.len() });
            for s in sources {
                if *s >= event.seq {
                    return Err(format!(
                        "sourceEventSeqs on event at seq {} must only cite earlier events",
                        event.seq
                    ));
                }
                if !ascending && !seen.insert(*s) {
                    return Err("sourceEventSeqs must not contain duplicates".into());
                }
            }
        }
        match op {
            SurfaceOp::Append => Ok(SurfacePlan::Append),
            SurfaceOp::Replace { start, end } => {
                let (Some(start_idx), Some(end_idx)) = (
                    self.nodes.iter().position(|n| *n == start),
                    self.nodes.iter().position(|n| *n == end),
                ) else {
                    return Err(format!(
                        "replace range {start}..{end} does not name live surface nodes"
                    ));
                };
                if start_idx > end_idx {
                    return Err(format!(
                        "replace range {start}..{end} is reversed on the surface"
                    ));
                }
                let shadowed = &self.nodes[start_idx..=end_idx];
                let sources = event.source_event_seqs.as_deref().unwrap_or(&[]);
                if let Some(missing) = shadowed.iter().find(|s| !sources.contains(s)) {
                    return Err(format!(
                        "replacement must cite shadowed surface node {missing} in sourceEventSeqs"
                    ));
                }
                if t == types::TOOL_RESULT {
                    validate_tool_result_replacement(event, shadowed, log)?;
                }
                Ok(SurfacePlan::Replace { start_idx, end_idx })
            }
        }
    }

    pub fn apply(&mut self, seq: u64, plan: &SurfacePlan) {
        match plan {
            SurfacePlan::None => {}
            SurfacePlan::Append => self.nodes.push(seq),
            SurfacePlan::Replace { start_idx, end_idx } => {
                self.nodes.splice(*start_idx..=*end_idx, [seq]);
                self.replace_generation += 1;
            }
        }
    }
}

/// A `tool/result` replacement may only rewrite the inner content of exactly one result.
fn validate_tool_result_replacement(
    event: &Event,
    shadowed: &[u64],
    log: &[std::sync::Arc<Event>],
) -> Result<(), String> {
    let [only] = shadowed else {
        return Err("a tool/result replacement must shadow exactly one node".into());
    };
    let original = log
        .get(*only as usize)
        .ok_or("shadowed node is not in the log")?;
    if !original.is(types::TOOL_RESULT) {
        return Err("a tool/result replacement must shadow a tool/result".into());
    }
    let strip = |data: &Value| -> Value {
        let mut d = data.clone();
        if let Some(Value::Array(content)) = d.pointer_mut("/message/content")
            && let Some(Value::Object(block)) = content.first_mut()
        {
            block.remove("content");
        }
        d
    };
    if strip(&original.data) != strip(&event.data) {
        return Err("a tool/result replacement may only change the result's inner content".into());
    }
    Ok(())
}
