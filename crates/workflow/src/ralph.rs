//! `@deepseek-ai/dsh-tool-ralph`: the `ralph` tool. A fresh child per round works toward
//! one fixed objective and ends its round through `structured_output` with a report
//! (`continue`, `complete` or `blocked`); only that bounded report crosses rounds. The
//! loop is written here in Rust over the same child path as the engine (a one-shot child
//! per round on a fresh provider, cancelled with the call); it records no
//! `tool-workflow/*` events.

use std::sync::Arc;

use dsh_agent::{AgentRef, Agents};
use dsh_kernel::{BoxError, Context};
use dsh_llm::ContentBlock;
use dsh_subagent::{StartRequest, StopReason, Subagents};
use dsh_tools::{Reply, ToolRunContext, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::tool::{pretty, utf16_len, utf16_prefix};

const DESCRIPTION: &str = "Run a Ralph loop in the foreground: fresh agents work toward one \
fixed objective, one round at a time. Use it only when the user explicitly asks for Ralph or \
for fresh-agent iteration. Every round starts a new child that sees neither this \
conversation nor earlier rounds' sessions; the shared workspace is what persists, and only a \
short structured report is handed from one round to the next. The call returns when a worker \
reports the objective complete, reports a concrete blocker, or the round limit is reached. \
Ordinary long work within this session belongs to the goal tools instead.";

/// The tool's settings.
#[derive(Clone, Debug)]
pub struct RalphConfig {
    pub subagent_provider: String,
    pub max_rounds: u64,
    pub max_handoff_chars: usize,
    pub max_result_chars: usize,
}

impl Default for RalphConfig {
    fn default() -> Self {
        Self {
            subagent_provider: "spawn".into(),
            max_rounds: 256,
            max_handoff_chars: 16_384,
            max_result_chars: 16_384,
        }
    }
}

/// The schema every round's report must match.
pub fn report_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["continue", "complete", "blocked"]},
            "summary": {"type": "string"},
            "evidence": {"type": "array", "items": {"type": "string"}},
            "nextSteps": {"type": "array", "items": {"type": "string"}},
            "blocker": {"type": "string"}
        },
        "required": ["status", "summary", "evidence", "nextSteps", "blocker"],
        "additionalProperties": false
    })
}

const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
const TRUNCATED: &str = "\n\u{2026} [truncated]";

fn bound(text: String, max: usize) -> String {
    if utf16_len(&text) <= max {
        return text;
    }
    let notice = utf16_len(TRUNCATED);
    if max <= notice {
        return utf16_prefix(TRUNCATED, max).to_string();
    }
    format!("{}{TRUNCATED}", utf16_prefix(&text, max - notice))
}

fn normalized(v: &Value) -> bool {
    v.as_str().is_some_and(|s| !s.is_empty() && s == s.trim())
}

fn normalized_list(v: &Value) -> bool {
    v.as_array().is_some_and(|l| l.iter().all(normalized))
}

/// Checks one round's report; the message says what is wrong with it.
pub fn check_report(report: &Value, max_handoff: usize) -> Result<&'static str, String> {
    if !report.is_object() {
        return Err("the Ralph child returned no structured round report".into());
    }
    if !normalized(&report["summary"]) {
        return Err("the Ralph round report's summary must be a non-empty trimmed string".into());
    }
    if !normalized_list(&report["evidence"]) || !normalized_list(&report["nextSteps"]) {
        return Err("the Ralph round report's evidence and nextSteps may hold only non-empty trimmed strings".into());
    }
    let blocker = report["blocker"].as_str();
    if blocker.is_none_or(|b| b != b.trim()) {
        return Err("the Ralph round report's blocker must be a trimmed string".into());
    }
    let blocker = blocker.unwrap_or_default();
    let count = |k: &str| report[k].as_array().map_or(0, Vec::len);
    let status = match report["status"].as_str() {
        Some("continue") => {
            if count("nextSteps") == 0 || !blocker.is_empty() {
                return Err(
                    "a Ralph report that continues needs nextSteps and an empty blocker".into(),
                );
            }
            "continue"
        }
        Some("complete") => {
            if count("evidence") == 0 || count("nextSteps") != 0 || !blocker.is_empty() {
                return Err("a Ralph report that completes needs evidence, no nextSteps and an empty blocker".into());
            }
            "complete"
        }
        Some("blocked") => {
            if blocker.is_empty() {
                return Err("a blocked Ralph report needs a concrete blocker".into());
            }
            "blocked"
        }
        _ => {
            return Err(
                "the Ralph round report's status is not continue, complete or blocked".into(),
            );
        }
    };
    let chars = utf16_len(&dsh_kernel::json::to_string(report));
    if chars > max_handoff {
        return Err(format!(
            "the Ralph round report exceeds maxHandoffChars ({chars} > {max_handoff})"
        ));
    }
    Ok(status)
}

fn round_prompt(objective: &str, round: u64, max: u64, previous: Option<&Value>) -> String {
    let prior = match previous {
        None => "(none: this is the first round)".to_string(),
        Some(v) => dsh_kernel::json::to_string(v),
    };
    [
        "You are a fresh worker in a Ralph loop. You have no parent conversation and no earlier session of your own. Do not start another Ralph loop: you are this round's worker.".to_string(),
        format!("Objective (it does not change between rounds):\n{objective}"),
        format!("Ralph round: {round} of {max}."),
        "The shared workspace and its working tree hold everything that persists between rounds and are the source of truth. Look at them before you act, keep the work that is already there, do concrete work within the objective and check what you change. Treat the previous report as a short handoff and verify it against the workspace.".to_string(),
        format!("Previous round's report:\n{prior}"),
        "End the round with a single report. Its strings must not be empty or carry leading or trailing whitespace; the one exception is blocker, which stays empty unless the status is blocked. Choose the status this way: continue while useful work is left, with at least one entry in nextSteps; complete only when your evidence shows the objective is met, with nextSteps empty; blocked only when nothing more can be done without a person or a change outside the workspace, with the blocker named.".to_string(),
    ]
    .join("\n\n")
}

/// How the loop ended.
enum Terminal {
    Complete(u64, Value),
    Blocked(u64, Value),
    BudgetLimited(u64, Value),
    RoundFailed(u64, Option<Value>),
}

/// The `ralph` tool.
pub struct RalphTool {
    config: RalphConfig,
    subagents: Arc<Subagents>,
    ctx: Context,
}

// The arguments (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
pub struct RalphArgs {
    /// The objective every fresh round works toward; it never changes.
    objective: String,
    /// Optional round limit: a positive whole number no larger than the deployment's ceiling.
    #[serde(rename = "maxRounds")]
    max_rounds: Option<f64>,
}

impl RalphTool {
    pub fn new(config: RalphConfig, subagents: Arc<Subagents>, ctx: Context) -> Self {
        Self {
            config,
            subagents,
            ctx,
        }
    }
}

/// One round: a fresh child asked for a report. `None` when it produced none.
async fn round(
    subagents: &Subagents,
    provider: &str,
    parent: &AgentRef,
    prompt: String,
    cancel: &CancellationToken,
) -> Result<Option<Value>, String> {
    let mut request = StartRequest::new(
        parent.clone(),
        vec![ContentBlock::text(prompt)],
        cancel.child_token(),
    );
    request.output_schema = Some(report_schema());
    let run = subagents
        .start(provider, request)
        .await
        .map_err(|e| format!("agent() could not start a child: {e}"))?;
    let settled = run.result.clone().await;
    if let Err(e) = run.dispose().await {
        tracing::warn!("ralph: disposing child {} failed: {e}", run.id);
    }
    match settled {
        Err(fault) => Err(format!("child agent run failed: {}", fault.js())),
        Ok(r) if r.stop_reason == StopReason::Completed => Ok(r.structured),
        Ok(_) => Ok(None),
    }
}

impl RalphTool {
    async fn call(&self, args: RalphArgs, run: ToolRunContext) -> Result<Reply<Value>, BoxError> {
        let parent = run
            .session
            .as_ref()
            .and_then(|s| self.ctx.get::<Agents>()?.get(&s.id()))
            .ok_or("Ralph tool requires a calling agent (exec.agent was undefined)")?;
        let objective = args.objective.trim().to_string();
        if objective.is_empty() {
            return Err("Ralph objective must be a non-empty string".into());
        }
        let ceiling = self.config.max_rounds;
        let max_rounds = match args.max_rounds {
            None => ceiling,
            Some(n) if n >= 1.0 && n.fract() == 0.0 && n <= MAX_SAFE => {
                if n as u64 > ceiling {
                    return Err(format!(
                        "Ralph maxRounds {n} exceeds the deployment ceiling {ceiling}"
                    )
                    .into());
                }
                n as u64
            }
            Some(_) => return Err("Ralph maxRounds must be a positive safe integer".into()),
        };
        let name = &self.config.subagent_provider;
        let provider = self
            .subagents
            .provider(name)
            .ok_or_else(|| format!("Ralph subagent provider \"{name}\" is not registered"))?;
        if !provider.capabilities().output_schema {
            return Err(format!(
                "Ralph subagent provider \"{name}\" does not support structured output"
            )
            .into());
        }
        if provider.inherits_parent_context() {
            return Err(format!(
                "Ralph subagent provider \"{name}\" inherits parent context; Ralph requires a fresh provider"
            )
            .into());
        }
        let cancel = run.cancel.child_token();
        let cancelled = || {
            "Ralph workflow was cancelled (workflow run cancelled: parent step aborted)".to_string()
        };
        let mut previous: Option<Value> = None;
        let mut terminal = None;
        for r in 1..=max_rounds {
            if cancel.is_cancelled() {
                return Err(cancelled().into());
            }
            let prompt = round_prompt(&objective, r, max_rounds, previous.as_ref());
            let report = match round(&self.subagents, name, &parent, prompt, &cancel).await {
                Ok(v) => v,
                Err(_) if cancel.is_cancelled() => return Err(cancelled().into()),
                Err(e) => return Err(format!("Ralph workflow failed: {e}").into()),
            };
            if cancel.is_cancelled() {
                return Err(cancelled().into());
            }
            let Some(report) = report else {
                terminal = Some(Terminal::RoundFailed(r, previous.take()));
                break;
            };
            let status = check_report(&report, self.config.max_handoff_chars)
                .map_err(|e| format!("Ralph workflow failed: {e}"))?;
            match status {
                "complete" => {
                    terminal = Some(Terminal::Complete(r, report));
                    break;
                }
                "blocked" => {
                    terminal = Some(Terminal::Blocked(r, report));
                    break;
                }
                _ => previous = Some(report),
            }
        }
        let terminal = terminal.unwrap_or_else(|| {
            Terminal::BudgetLimited(max_rounds, previous.unwrap_or(Value::Null))
        });
        let max = self.config.max_result_chars;
        let rounds = |n: u64| format!("{n} round{}", if n == 1 { "" } else { "s" });
        let (status, started, report, text) = match terminal {
            Terminal::RoundFailed(n, last) => {
                let head =
                    format!("Ralph round {n} child failed before producing a structured report.");
                let text = match last {
                    None => format!("{head}\nNo previous handoff was available."),
                    Some(v) => format!("{head}\nLast successful handoff:\n{}", pretty(&v)),
                };
                return Err(bound(text, max).into());
            }
            Terminal::Complete(n, v) => {
                let t = format!(
                    "Ralph worker reported completion after {}.\nFinal report:\n{}",
                    rounds(n),
                    pretty(&v)
                );
                ("complete", n, v, t)
            }
            Terminal::Blocked(n, v) => {
                let t = format!(
                    "Ralph worker reported a blocker after {}.\nFinal report:\n{}",
                    rounds(n),
                    pretty(&v)
                );
                ("blocked", n, v, t)
            }
            Terminal::BudgetLimited(n, v) => {
                let t = format!(
                    "Ralph reached its {} limit; the worker reported work remaining.\nFinal report:\n{}",
                    rounds(n),
                    pretty(&v)
                );
                ("budget-limited", n, v, t)
            }
        };
        let value = json!({
            "agentsStarted": started,
            "result": {"status": status, "roundsStarted": started, "report": report},
        });
        Ok(Reply::text(bound(text, max)).with_value(value))
    }
}

/// `{agentsStarted, result: {status, roundsStarted, report}}`. Upstream also reports a
/// `runId` (its Ralph runs on the workflow engine; this one drives rounds directly), so it is
/// declared optional and never set.
fn output_value_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["agentsStarted", "result"],
        "properties": {
            "runId": {"type": "string"},
            "agentsStarted": {"type": "integer"},
            "result": {},
        },
    })
}

impl TypedTool for RalphTool {
    type Args = RalphArgs;
    type Value = Value;

    fn name(&self) -> String {
        "ralph".into()
    }

    fn description(&self) -> String {
        DESCRIPTION.into()
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(output_value_schema()))
    }

    async fn run(
        self: Arc<Self>,
        args: RalphArgs,
        run: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        self.call(args, run).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parameter_schema_is_the_declared_one() {
        use dsh_tools::{ObjectSchema, Prop};
        let declared = ObjectSchema::new()
            .required(
                "objective",
                Prop::string("The objective every fresh round works toward; it never changes."),
            )
            .optional(
                "maxRounds",
                Prop::number("Optional round limit: a positive whole number no larger than the deployment's ceiling."),
            );
        assert_eq!(
            dsh_kernel::json::to_string(
                &dsh_tools::params_schema::<RalphArgs>().unwrap().to_value()
            ),
            dsh_kernel::json::to_string(&declared.to_value())
        );
    }

    #[test]
    fn reports_are_checked() {
        let ok = json!({"status": "continue", "summary": "s", "evidence": [], "nextSteps": ["n"], "blocker": ""});
        assert_eq!(check_report(&ok, 1000), Ok("continue"));
        let bad = json!({"status": "complete", "summary": "s", "evidence": [], "nextSteps": [], "blocker": ""});
        assert!(check_report(&bad, 1000).is_err());
        assert!(
            check_report(&ok, 10)
                .unwrap_err()
                .contains("maxHandoffChars")
        );
    }

    #[test]
    fn results_are_bounded() {
        assert_eq!(bound("abc".into(), 10), "abc");
        assert_eq!(
            bound("x".repeat(40), 20),
            format!("{}{TRUNCATED}", "x".repeat(6))
        );
    }
}
